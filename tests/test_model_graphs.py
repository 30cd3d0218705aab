"""Traced inference graphs (simulmt.model.graphs): the same bits as eager mode, used where
they apply, and eager mode whenever a graph cannot be trusted."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from simulmt.eval.runner import RunConfig, simulate

from simulmt.engine import Engine, for_inference
from simulmt.model import graphs
from simulmt.model.transformer import SimulTransformer
from tests._model_helpers import save_tiny_folder

PRECISIONS = ("float32", "int8")
_MODELS: dict[str, tuple[SimulTransformer, graphs.Graphs]] = {}


def traced(precision: str) -> tuple[SimulTransformer, graphs.Graphs]:
    """The tiny model's inference copy in `precision` and its graphs (traced once)."""
    if precision not in _MODELS:
        model = for_inference(Engine.tiny(seed=1).model, precision).eval()
        built = graphs.trace(model)
        assert built is not None
        graphs.attach(model, built)
        _MODELS[precision] = (model, built)
    return _MODELS[precision]


@settings(max_examples=25, deadline=None)
@given(
    precision=st.sampled_from(PRECISIONS),
    rows=st.integers(1, 9),
    width=st.integers(1, 12),
    source=st.integers(1, 12),
    seed=st.integers(0, 2**16),
)
def test_the_step_graph_gives_eager_bits_at_any_shape(
    precision: str, rows: int, width: int, source: int, seed: int
) -> None:
    """Outputs and the K/V written into the cache in place, at shapes unlike the tracing one
    (a size baked into the graph would show here)."""
    model, built = traced(precision)
    probe = graphs._step_inputs(model, (rows, width, source), seed=seed)
    mine, theirs = [tuple(t.clone() for t in probe) for _ in range(2)]
    with torch.no_grad():
        out = built.step(*mine)
        ref = graphs._Step(model)(*theirs)
    assert all(torch.equal(a, b) for a, b in zip(out, ref, strict=True))
    assert torch.equal(mine[2], theirs[2])  # the cache, new positions written
    assert not torch.equal(mine[2], probe[2])  # (and something was written)


@settings(max_examples=15, deadline=None)
@given(
    precision=st.sampled_from(PRECISIONS),
    streams=st.integers(1, 6),
    past=st.integers(0, 10),
    tokens=st.integers(1, 5),
    seed=st.integers(0, 2**16),
)
def test_the_encoder_graph_gives_eager_bits_at_any_shape(
    precision: str, streams: int, past: int, tokens: int, seed: int
) -> None:
    """Cross-attention K/V out, encoder K/V written into the padded caches in place."""
    model, built = traced(precision)
    probe = graphs._encode_inputs(model, (streams, past, tokens), seed=seed)
    mine, theirs = [tuple(t.clone() for t in probe) for _ in range(2)]
    with torch.no_grad():
        assert torch.equal(built.encode(*mine), graphs._Encode(model)(*theirs))
    assert torch.equal(mine[1], theirs[1])
    assert not torch.equal(mine[1], probe[1])


class _Counted:
    """A graph that counts its calls (to show the graphs are what runs)."""

    def __init__(self, inner: torch.jit.ScriptModule) -> None:
        self.inner, self.calls = inner, 0

    def __call__(self, *args: torch.Tensor) -> object:
        self.calls += 1
        return self.inner(*args)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_traced_engine_translates_as_an_eager_one(precision: str) -> None:
    """End to end, many streams batched and one alone: the same words at the same delays,
    and the decoder steps went through the graph."""
    tiny = Engine.tiny(seed=1)
    eager = Engine(for_inference(tiny.model, precision), tiny.tokenizer, tiny.info)
    fast = Engine(for_inference(tiny.model, precision), tiny.tokenizer, tiny.info)
    assert fast.trace()
    built = graphs.graphs_of(fast.model)
    assert built is not None
    counted = _Counted(built.step)
    graphs.attach(fast.model, graphs.Graphs(step=counted, encode=built.encode))
    lines = [
        "Ich habe heute ein Buch gelesen .",
        "Der Hund läuft schnell über die Straße .",
        "Wir müssen morgen früh nach Berlin fahren .",
        "Kannst du mir bitte das Wasser geben ?",
    ]
    refs = ["x"] * len(lines)
    for policy in ("wait-k:k=1", "wait-k:k=3"):
        for batch in (1, 4):
            config = RunConfig(batch_size=batch)
            a = simulate(eager, policy, lines, refs, config=config).stats
            b = simulate(fast, policy, lines, refs, config=config).stats
            assert [(s.prediction, s.delays) for s in a] == [(s.prediction, s.delays) for s in b]
    assert counted.calls > 0


def test_a_graph_with_a_baked_in_size_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    """A model whose Python reads a size (here: the batch's rows) traces into a graph that
    is only right at the tracing shape; the check at build time catches it."""

    class RowsBaked(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, h: torch.Tensor) -> torch.Tensor:
            return self.inner(h) * (2.0 if h.shape[0] == graphs.TRACE_SHAPE[0] else 1.0)

    model = for_inference(Engine.tiny(seed=1).model, "float32").eval()
    model.out_proj = RowsBaked(model.out_proj)
    with caplog.at_level(logging.WARNING, logger="simulmt.model.graphs"):
        assert graphs.trace(model) is None
    assert "differs from eager mode" in caplog.text


def test_an_engine_whose_graphs_fail_runs_eager(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object) -> object:
        raise RuntimeError("no tracer here")

    monkeypatch.setattr(graphs, "_freeze", broken)
    engine = Engine.tiny(seed=1)
    with caplog.at_level(logging.WARNING, logger="simulmt.model.graphs"):
        assert not engine.trace()
    assert "could not trace the model's graphs (RuntimeError: no tracer here)" in caplog.text
    assert graphs.graphs_of(engine.model) is None
    out = simulate(engine, "wait-k:k=2", ["Das ist gut ."], ["x"], config=RunConfig())
    assert out.stats[0].prediction


def test_load_traces_unless_told_not_to_and_copies_have_no_graphs(tmp_path: Path) -> None:
    folder = save_tiny_folder(tmp_path / "tiny")
    assert graphs.graphs_of(Engine.load(folder).model) is not None
    assert graphs.graphs_of(Engine.load(folder, trace=False).model) is None
    model, _ = traced("float32")
    assert graphs.graphs_of(copy.deepcopy(model)) is None  # its own weights: trace it anew


def test_eval_runs_eager_and_a_server_or_translation_traces(tmp_path: Path) -> None:
    """An evaluation's wide, shape-changing batches ran slower as graphs (bench/RESULTS.md),
    so `simulmt eval` loads without them; the default load (serve, translate) traces."""
    import argparse

    from simulmt.eval import cli as eval_cli

    folder = save_tiny_folder(tmp_path / "tiny")
    parser = argparse.ArgumentParser()
    eval_cli.add_arguments(parser)
    args = parser.parse_args(
        ["--source", "x.de", "--reference", "x.en", "--model", str(folder), "--dtype", "float32"]
    )
    engine, _ = eval_cli.load_for_run(args, ["wait-k:k=2"])
    assert graphs.graphs_of(engine.model) is None
    assert graphs.graphs_of(Engine.load(folder, dtype="float32").model) is not None


def test_the_graph_path_still_checks_the_models_length() -> None:
    model, _ = traced("float32")
    probe = graphs._step_inputs(model, (2, 4, 3), seed=0)
    last, positions, past, past_valid, cross, cross_valid, write_at = probe
    with pytest.raises(ValueError, match="longer than the model's max_len"):
        graphs.decode_step(
            model, last, positions, past, past_valid, cross, cross_valid,
            top=model.cfg.max_len, write_at=write_at,
        )  # fmt: skip
