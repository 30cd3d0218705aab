"""Weight variants: a low-rank delta beside a model, loaded for the sessions that ask for it."""

from __future__ import annotations

import argparse
import asyncio
import functools
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from simulmt.eval.cli import _variant
from simulmt.server.app import CaptionServer
from simulmt.server.config import Limits, ServerConfig
from simulmt.server.engines import Engines
from simulmt.server.stream import StartOptions, paced, run_stream

from simulmt.engine import Engine
from simulmt.export import write_model_folder
from simulmt.model.checkpoint import CheckpointError, load_checkpoint
from simulmt.model.delta import (
    DeltaError,
    apply_delta,
    check_variant_name,
    load_delta,
    make_delta,
    save_delta,
    variant_names,
)
from simulmt.session import Session
from simulmt.variant import write_variant

TEXT = "ich habe heute einen Brief geschrieben . das Wetter ist schön ."


def _folder(engine: Engine, out: Path) -> Path:
    """`engine`'s weights as a model folder (float16, as exports are)."""
    state = {k: v.detach().half() for k, v in engine.model.state_dict().items()}
    payload = {
        "model_config": engine.model.cfg.to_dict(),
        "model": state,
        "tokenizer": engine.tokenizer.to_bytes(),
        "meta": {"name": out.name, "src": "de", "tgt": "en"},
    }
    write_model_folder(out, payload)
    return out


@functools.cache
def _tiny(seed: int) -> Engine:
    return Engine.tiny(seed)


def _finals(engine: Engine, text: str = TEXT) -> list[str]:
    session = Session(engine, policy="wait-k:k=2")
    updates = [u for w in text.split() for u in session.push(w)] + session.finish()
    return [u.text for u in updates if u.final]


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    """A base model folder and a target of the same architecture and tokenizer."""
    return _folder(_tiny(0), tmp_path / "base"), _folder(_tiny(1), tmp_path / "target")


def test_a_full_rank_variant_is_the_target_model(folders: tuple[Path, Path]) -> None:
    base, target = folders
    path = write_variant(base, target, name="recognizer", rank=1024, out=None)
    assert path == base / "recognizer.pt" and variant_names(base) == ["recognizer"]
    varied = Engine.load(base, variant="recognizer")
    want = Engine.load(target)
    own = Engine.load(base)
    wanted, started = want.model.state_dict(), own.model.state_dict()
    for key, got in varied.model.state_dict().items():
        ref, start = wanted[key], started[key]
        assert torch.allclose(got, ref, atol=2e-2), key  # float16 factors, float16 weights
        if not torch.equal(ref, start):
            assert not torch.allclose(got, start, atol=2e-2), key
    assert varied.info.name == "base+recognizer" and own.info.name == "base"


@settings(max_examples=25, deadline=None)
@given(
    rows=st.integers(2, 12),
    cols=st.integers(2, 12),
    true_rank=st.integers(1, 4),
    rank=st.integers(1, 6),
    seed=st.integers(0, 10_000),
)
def test_a_delta_keeps_the_best_rank_r_move(
    rows: int, cols: int, true_rank: int, rank: int, seed: int
) -> None:
    """Eckart-Young: what the rank-r factors leave out is the move's tail singular values, so a
    move of rank <= r comes back whole and 1-D weights always do."""
    g = torch.Generator().manual_seed(seed)
    base = {"w": torch.randn(rows, cols, generator=g), "b": torch.randn(cols, generator=g)}
    move = torch.randn(rows, true_rank, generator=g) @ torch.randn(true_rank, cols, generator=g)
    target = {"w": base["w"] + move, "b": base["b"] + 0.5}
    out = apply_delta(base, make_delta(base, target, rank=rank, name="x"))
    singular = torch.linalg.svdvals(move.double())
    tail = float(singular[rank:].pow(2).sum().sqrt())
    left = float((out["w"].double() - target["w"].double()).norm())
    scale = float(move.double().norm()) + 1.0
    assert abs(left - tail) <= 2e-3 * scale  # float16 factors
    assert torch.allclose(out["b"], target["b"], atol=1e-3)


def test_a_delta_is_refused_by_other_weights(folders: tuple[Path, Path], tmp_path: Path) -> None:
    base, target = folders
    path = write_variant(base, target, name="recognizer", rank=4, out=None)
    other = load_checkpoint(target / "model.pt")["model"]
    with pytest.raises(DeltaError, match="made for other weights"):
        apply_delta(other, load_delta(path))
    # the same delta copied beside another model is refused at load, not silently applied
    (target / "recognizer.pt").write_bytes(path.read_bytes())
    with pytest.raises(DeltaError, match="made for other weights"):
        Engine.load(target, variant="recognizer")


def test_missing_corrupt_and_misnamed_variants_say_what_is_wrong(
    folders: tuple[Path, Path],
) -> None:
    base, target = folders
    with pytest.raises(CheckpointError, match="no 'recognizer' variant.*has none"):
        Engine.load(base, variant="recognizer")
    write_variant(base, target, name="recognizer", rank=4, out=None)
    with pytest.raises(CheckpointError, match="no 'spoken' variant.*'recognizer'"):
        Engine.load(base, variant="spoken")
    data = (base / "recognizer.pt").read_bytes()
    (base / "recognizer.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(DeltaError, match="corrupt or truncated"):
        Engine.load(base, variant="recognizer")
    for bad in ("model", "Recognizer", "a b", "", "x" * 40):
        with pytest.raises(ValueError, match="variant name"):
            check_variant_name(bad)
    other = {"w": torch.zeros(3, 3)}
    with pytest.raises(DeltaError, match="differ in their entries"):
        make_delta(other, {"v": torch.zeros(3, 3)}, rank=2, name="x")
    with pytest.raises(DeltaError, match=r"base is \(3, 3\), target \(3, 2\)"):
        make_delta(other, {"w": torch.zeros(3, 2)}, rank=2, name="x")


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    base = {"w": torch.zeros(4, 3), "n": torch.ones(3), "step": torch.tensor(7)}
    target = {"w": torch.ones(4, 3), "n": torch.ones(3) * 2, "step": torch.tensor(7)}
    delta = make_delta(base, target, rank=2, name="recognizer")
    save_delta(tmp_path / "d.pt", delta)
    back = load_delta(tmp_path / "d.pt")
    assert back.name == "recognizer" and back.base_digest == delta.base_digest
    assert back.keys() == {"w", "n"}  # an integer entry has no delta
    out = apply_delta(base, back)
    assert torch.allclose(out["w"], target["w"], atol=1e-3)
    assert torch.equal(out["step"], base["step"])


def test_eval_picks_the_recognizer_weights_for_the_recognizer_view(
    folders: tuple[Path, Path],
) -> None:
    base, target = folders

    def variant(style: str, weights: str = "auto") -> str | None:
        return _variant(argparse.Namespace(model=base, source_style=style, weights=weights))

    assert variant("asr") is None  # no variant beside the model: its own weights
    write_variant(base, target, name="recognizer", rank=4, out=None)
    assert variant("asr") == "recognizer"
    assert variant("text") is None
    assert variant("asr", "base") is None
    assert variant("text", "recognizer") == "recognizer"
    with pytest.raises(ValueError, match="variant name"):
        variant("text", "Bad Name")


async def test_a_recognizer_session_runs_on_the_variant_beside_text_sessions() -> None:
    """One worker, two Engines: each session gets the weights its `input` asks for, and the
    two kinds batched together caption as each would alone."""
    engines = Engines(_tiny(0), {"recognizer": _tiny(1)})
    assert engines.for_input("recognizer") is _tiny(1) and engines.for_input("text") is _tiny(0)
    assert Engines(_tiny(0)).for_input("recognizer") is _tiny(0)  # no variant: the model's own
    with pytest.raises(ValueError, match="'text' or 'recognizer'"):
        engines.for_input("speech")
    want = {"text": _finals(_tiny(0)), "recognizer": _finals(_tiny(1))}
    assert want["text"] != want["recognizer"]  # else the test could not tell them apart
    server = CaptionServer(
        ServerConfig(port=0, limits=Limits(idle_timeout_s=20)),
        load=lambda: engines,
        model_name="tiny",
    )
    await server.start()
    try:
        await server.wait_ready()
        kinds = ["text", "recognizer", "text", "recognizer"]
        logs = await asyncio.gather(
            *(
                run_stream(
                    f"ws://127.0.0.1:{server.port}/ws",
                    paced(TEXT.split(), 25),
                    start=StartOptions(policy="wait-k:k=2", input=kind),
                )
                for kind in kinds
            )
        )
        stats = server.worker.stats
    finally:
        await server.stop()
    for kind, log in zip(kinds, logs, strict=True):
        assert log.finals() == want[kind], kind
        assert log.messages[0].get("variant") == ("recognizer" if kind == "recognizer" else None)
    assert stats.max_batch > 1
