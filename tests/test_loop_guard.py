"""The loop guard: no output repeats a short token cycle three times in a row once it is on."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from simulmt.eval.loops import loops

from simulmt.engine import Engine
from simulmt.search.loops import beam_bans, cycle_bans, next_banned
from simulmt.search.online import stop_pieces
from simulmt.search.options import SearchOptions
from simulmt.session import Session
from tests._model_helpers import Favour


def third_copy(tokens: list[int], max_cycle: int) -> bool:
    """Some cycle of 1..max_cycle tokens occurs three times in a row somewhere in `tokens`."""
    for n in range(1, max_cycle + 1):
        for s in range(len(tokens) - 3 * n + 1):
            unit = tokens[s : s + n]
            if tokens[s + n : s + 2 * n] == unit and tokens[s + 2 * n : s + 3 * n] == unit:
                return True
    return False


def test_bans_the_token_that_opens_a_third_copy() -> None:
    assert cycle_bans([5, 7, 7], max_cycle=3) == {7}  # "the the" → not "the" again
    assert cycle_bans([1, 2, 3, 1, 2, 3], max_cycle=3) == {1}
    assert cycle_bans([9, 2, 3, 2, 3, 2], max_cycle=3) == {3}  # any phase of the cycle
    assert cycle_bans([1, 2, 3, 1, 2, 3], max_cycle=2) == set()  # cycle longer than the guard
    assert cycle_bans([1, 2, 1, 3], max_cycle=4) == set()  # twice is allowed, not a loop yet
    assert cycle_bans([], max_cycle=4) == set()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=40), st.integers(1, 5))
def test_writing_only_unbanned_tokens_never_makes_a_third_copy(start: list[int], n: int) -> None:
    # grow a sequence that starts loop-free, always taking the first token the guard allows:
    # it never contains a cycle of <= n tokens three times in a row
    tokens: list[int] = []
    for tok in start:
        if tok in cycle_bans(tokens, max_cycle=n):
            tok = min(set(range(8)) - cycle_bans(tokens, max_cycle=n))
        tokens.append(tok)
    assert not third_copy(tokens, n)


def test_beam_bans_skip_bos_and_look_per_row() -> None:
    tokens = torch.tensor([[1, 4, 4], [1, 4, 5]])  # BOS=1, then the written tokens
    assert beam_bans(tokens, max_cycle=2) == [(0, 4)]
    assert beam_bans(torch.tensor([[4, 4]]), max_cycle=2) == []  # BOS never counts


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 5), max_size=12),
    st.lists(st.integers(0, 5), min_size=1, max_size=8),
    st.integers(1, 3),
    st.integers(1, 8),
)
def test_next_banned_answers_as_beam_bans(
    prefix: list[int], unit: list[int], copies: int, n: int
) -> None:
    # the greedy search's one-token question has the answer of the whole list, for every
    # token (4 and 5 stand for stop pieces); the written tokens end in copies of a cycle
    tokens = torch.tensor([[1, *prefix, *unit * copies]])  # BOS=1, then the written tokens
    stops = frozenset({4, 5})
    whole = beam_bans(tokens, max_cycle=n, stops=stops)
    for token in range(7):
        assert next_banned(tokens, token, max_cycle=n, stops=stops) == ((0, token) in whole)


def test_after_a_stop_every_stop_is_banned() -> None:
    stops = frozenset({7, 8})  # ".", "?" say
    tokens = torch.tensor([[1, 4, 7], [1, 7, 4], [1, 4, 4]])  # BOS=1, then the written tokens
    assert beam_bans(tokens, max_cycle=2, stops=stops) == [(0, 7), (0, 8), (2, 4)]
    assert beam_bans(tokens, max_cycle=2) == [(2, 4)]  # no stops given: the cycle rule only


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=40), st.integers(1, 5))
def test_writing_only_unbanned_tokens_never_puts_two_stops_together(start: list[int],
                                                                     n: int) -> None:
    stops = frozenset({0, 1})
    tokens: list[int] = []
    for tok in start:
        banned = {b for _, b in beam_bans(torch.tensor([[9, *tokens]]), max_cycle=n, stops=stops)}
        if tok in banned:
            tok = min(set(range(8)) - banned)
        tokens.append(tok)
    assert not any(a in stops and b in stops for a, b in zip(tokens, tokens[1:], strict=False))
    assert not third_copy(tokens, n)


@pytest.mark.parametrize("beam", [1, 3])
def test_a_model_that_wants_to_stop_early_writes_no_double_stop_with_the_guard(beam: int) -> None:
    """When its sentence is complete but the source goes on, a model may not write EOS and
    writes "Tokyo.." instead; the guard leaves one stop and makes it go on with words."""
    engine = Engine.tiny(seed=0)
    dot = next(i for i in stop_pieces(engine.tokenizer) if engine.tokenizer.piece(i) == ".")
    engine.model.out_proj = Favour(engine.model.out_proj, dot, 8.0)  # type: ignore[assignment]
    text = "der Hund sieht die Katze und die Katze sieht den Hund am Morgen ."
    outputs = {}
    for guard in (0, 8):
        s = Session(engine, policy="wait-k:k=2", options=SearchOptions(beam=beam, loop_guard=guard))
        outputs[guard] = [u for u in s.push(text) + s.flush() if u.final][0].text
    assert ".." in outputs[0]  # else this test would show nothing
    assert outputs[8] and ".." not in outputs[8] and "." in outputs[8]


def test_option_is_validated() -> None:
    with pytest.raises(ValueError, match="loop_guard"):
        SearchOptions(loop_guard=-1)


@pytest.mark.parametrize("beam", [1, 3])
def test_an_untrained_model_loops_without_the_guard_and_not_with_it(beam: int) -> None:
    engine = Engine.tiny(seed=0, train_steps=0)  # random weights: "alalalal…" without a guard
    text = "der Hund sieht die Katze und die Katze sieht den Hund am Morgen ."
    outputs = {}
    for guard in (0, 8):
        s = Session(engine, policy="wait-k:k=2", options=SearchOptions(beam=beam, loop_guard=guard))
        finals = [u for u in s.push(text) + s.flush() if u.final]
        outputs[guard] = finals[0].text
    assert loops(outputs[0])  # else this test would show nothing
    assert outputs[8] and not loops(outputs[8])


async def test_the_server_guards_every_session_when_asked() -> None:
    from simulmt.server.config import Limits, ServerConfig

    from simulmt.client.stream import StartOptions, paced, run_stream
    from tests.test_server import running, ws_url

    def untrained() -> Engine:
        return Engine.tiny(seed=0, train_steps=0)

    text = "der Hund sieht die Katze und die Katze sieht den Hund am Morgen ."
    finals = {}
    for guard in (0, 8):
        config = ServerConfig(port=0, limits=Limits(idle_timeout_s=20), loop_guard=guard)
        async with running(config, load=untrained) as server:
            log = await run_stream(
                ws_url(server), paced([text], 0), start=StartOptions(policy="wait-k:k=2")
            )
        finals[guard] = [str(m["text"]) for m in log.messages if m["type"] == "final"]
    assert loops(finals[0][0])
    assert finals[8][0] and not loops(finals[8][0])


def test_serve_takes_the_option() -> None:
    import argparse

    from simulmt.server import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    assert cli.config_from_args(parser.parse_args(["--loop-guard", "4"])).loop_guard == 4
    # `simulmt serve` guards by default (live captions) and picks its precision by timing
    # (`--dtype auto`, simulmt.model.precision); the library does neither
    defaults = parser.parse_args([])
    assert cli.config_from_args(defaults).loop_guard == 8 and defaults.dtype == "auto"
    assert cli.config_from_args(parser.parse_args(["--loop-guard", "0"])).loop_guard == 0
    with pytest.raises(ValueError, match="loop_guard"):
        cli.config_from_args(parser.parse_args(["--loop-guard", "-1"]))


def test_every_command_and_the_library_guard_by_default() -> None:
    """Word-level wait-k loops in 5-12% of newstest2015 outputs unguarded: every command line
    and the library guard unless told `--loop-guard 0` / `loop_guard=0` (one default)."""
    import argparse

    from simulmt.eval import cli as eval_cli
    from simulmt.eval.options import RunConfig

    from simulmt.cli import translate

    files = ["--source", "x.de", "--reference", "x.en"]
    for module, required in ((eval_cli, files), (translate, ["--policy", "wait-k:k=3"])):
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        assert parser.parse_args(required).loop_guard == 8, module.__name__
        assert parser.parse_args([*required, "--loop-guard", "0"]).loop_guard == 0
    parser = argparse.ArgumentParser()
    eval_cli.add_arguments(parser)
    assert eval_cli.run_config_from_args(parser.parse_args(files)).loop_guard == 8
    assert RunConfig().loop_guard == SearchOptions().loop_guard == 8
    assert RunConfig(loop_guard=0).search_options().loop_guard == 0
