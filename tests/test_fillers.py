"""Hesitation fillers: which words count, and that sessions and evaluation leave them out."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulmt.engine import Engine
from simulmt.input.fillers import filler_ends_sentence, is_filler
from simulmt.output.updates import Update
from simulmt.session import Session

ENGINE = Engine.tiny(0)


@pytest.mark.parametrize(
    "word",
    ["äh", "Äh", "ähm", "Ähm,", "äähm", "ähh", "öh", "öhm", "ehm", "hm", "Hmm", "hmmm...",
     "mhm", "(hm)", "„äh“", "–ähm"],
)
def test_fillers(word: str) -> None:
    assert is_filler(word)


@pytest.mark.parametrize(
    "word",
    # German words that look close: "eh" (anyway), "um" (around), "na", "ja", "also", "mehr"
    ["eh", "um", "na", "ja", "also", "mehr", "ähnlich", "Hemd", "hmm-Laut", "ehemals", "h", "m",
     "...", "ähm2", "öhmig", "Mhmm-mhm"],
)
def test_words_that_are_not_fillers(word: str) -> None:
    assert not is_filler(word)


_FILLERS = st.sampled_from(["äh", "ähm", "äähm", "öh", "öhm", "ehm", "hm", "hmm", "mhm", "Ähm"])
_OTHER = st.characters(categories=["L", "N"]).filter(lambda c: c.lower() not in "äöehm")


@given(_FILLERS, _OTHER, st.integers(min_value=0, max_value=4))
def test_any_other_letter_or_digit_makes_a_filler_a_word(filler: str, extra: str,
                                                        at: int) -> None:
    """Any letter outside ä ö e h m (either case) or any digit makes a word a word."""
    assert is_filler(filler)
    at = min(at, len(filler))
    assert not is_filler(filler[:at] + extra + filler[at:])


@given(st.text(alphabet="äöehmÄÖEHM", min_size=1, max_size=8))
def test_filler_letters_alone_decide_by_the_sound_pattern(word: str) -> None:
    """Words of filler letters only: a filler exactly when its lowercase form is a
    hesitation sound (ä/ö then h then m's, e h m, h m, m h m)."""
    import re

    sound = re.fullmatch(r"ä+h+m*|ö+h+m*|e+h+m+|h+m+|m+h+m+", word.lower())
    assert is_filler(word) == (sound is not None)


def test_a_filler_may_carry_the_sentence_end() -> None:
    assert filler_ends_sentence("äh.") and filler_ends_sentence("Hm?")
    assert not filler_ends_sentence("äh,") and not filler_ends_sentence("Haus.")


def finals(updates: list[Update]) -> list[tuple[str, str]]:
    return [(u.source, u.text) for u in updates if u.final]


def run(text: str, **kwargs: object) -> tuple[Session, list[tuple[str, str]]]:
    session = Session(ENGINE, policy="wait-k:k=2", **kwargs)  # type: ignore[arg-type]
    out = session.push(text)
    out += session.finish()
    return session, finals(out)


def test_a_session_drops_fillers_by_default() -> None:
    session, with_fillers = run("Ich habe äh heute ähm, ein Buch gelesen .")
    _, clean = run("Ich habe heute ein Buch gelesen .")
    assert with_fillers == clean  # same source text, same translation
    assert with_fillers[0][0] == "Ich habe heute ein Buch gelesen ."
    assert session.fillers_dropped == 2


def test_a_session_keeps_fillers_when_asked() -> None:
    session, kept = run("Ich habe äh heute ein Buch gelesen .", drop_fillers=False)
    assert kept[0][0] == "Ich habe äh heute ein Buch gelesen ."
    assert session.fillers_dropped == 0


def test_a_filler_ending_a_sentence_still_ends_it() -> None:
    _, out = run("Ich habe heute äh. Wo ist der Bahnhof ?")
    assert [source for source, _ in out] == ["Ich habe heute", "Wo ist der Bahnhof ?"]
    _, client = run("Ich habe heute äh. Wo ist der Bahnhof ?", segmentation="client")
    assert [source for source, _ in client] == ["Ich habe heute Wo ist der Bahnhof ?"]


def test_evaluation_counts_fillers_as_input_words(tmp_path: Path) -> None:
    """The evaluator drops fillers like `serve` (same prediction as without them), but its
    delays and source length count them: the speaker took time to say them."""
    from simulmt.eval.options import RunConfig
    from simulmt.eval.runner import simulate

    lines = ["Ich habe heute ein Buch gelesen .", "Ich habe äh heute ähm ein Buch gelesen ."]
    refs = ["I read a book today ."] * 2
    clean, filled = simulate(ENGINE, "wait-k:k=2", lines, refs).stats
    assert clean.prediction == filled.prediction
    assert (clean.source_length, filled.source_length) == (7, 9)
    position = {1: 1, 2: 2, 3: 4, 4: 6, 5: 7, 6: 8, 7: 9}  # kept word -> input word
    assert filled.delays == tuple(position[d] for d in clean.delays)
    (kept,) = simulate(
        ENGINE, "wait-k:k=2", lines[1:], refs[1:], config=RunConfig(drop_fillers=False)
    ).stats
    assert kept.source_length == 9


async def test_the_server_drops_fillers_unless_the_client_keeps_them() -> None:
    from simulmt.client.stream import StartOptions, paced, run_stream
    from tests.test_server import engine, running, ws_url

    words = "Ich habe äh heute ein Buch gelesen . Hm , wo ist der Bahnhof ?".split()
    async with running(load=engine) as server:
        start = StartOptions(policy="wait-k:k=2")
        dropped = await run_stream(ws_url(server), paced(words, 0), start=start)
        kept = await run_stream(
            ws_url(server), paced(words, 0), start=replace(start, fillers="keep")
        )
    sources = [[m["source"] for m in lg.messages if m["type"] == "final"] for lg in (dropped, kept)]
    assert sources[0] == ["Ich habe heute ein Buch gelesen .", ", wo ist der Bahnhof ?"]
    assert sources[1] == ["Ich habe äh heute ein Buch gelesen .", "Hm , wo ist der Bahnhof ?"]


def test_the_benchmark_script_inserts_only_fillers_reproducibly() -> None:
    """scripts/add_fillers.py (README's filler table): the original words in order, plus words
    `is_filler` recognizes; the same seed gives the same file."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "scripts" / "add_fillers.py"
    lines = "Ich habe heute ein Buch gelesen .\nWo ist der Bahnhof ?\n" * 50

    def run(*args: str) -> list[str]:
        done = subprocess.run([sys.executable, str(script), *args], input=lines,
                              capture_output=True, text=True, check=True, timeout=60)
        return done.stdout.splitlines()

    out = run("--rate", "0.3", "--seed", "1")
    assert out == run("--rate", "0.3", "--seed", "1") != run("--rate", "0.3", "--seed", "2")
    added = 0
    for original, noisy in zip(lines.splitlines(), out, strict=True):
        kept = [w for w in noisy.split() if not is_filler(w)]
        assert kept == original.split()
        added += len(noisy.split()) - len(kept)
    words = len(lines.split())
    assert 0.2 * words < added < 0.4 * words
    assert run("--rate", "0") == lines.splitlines()
    bad = subprocess.run([sys.executable, str(script), "--rate", "1.5"], input="",
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--rate must be in [0, 1)" in bad.stderr
