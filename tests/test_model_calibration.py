"""Calibrated int8 input ranges: simulmt.model.calibration, StaticInt8Linear, `calibrate`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from simulmt.eval.runner import RunConfig, simulate
from torch import nn

from simulmt.cli.commands import main
from simulmt.engine import Engine, for_inference
from simulmt.model.calibration import (
    RANGES_FILE,
    collect_ranges,
    inference_copy,
    load_ranges,
    save_ranges,
)
from simulmt.model.checkpoint import CheckpointError
from simulmt.model.int8 import FbgemmInt8Linear, Int8Kernel, StaticInt8Linear, quantize_linears
from simulmt.model.transformer import SimulTransformer
from tests._model_helpers import save_tiny_folder, seeded_linear

LINES = [
    "Ich habe heute ein Buch gelesen .",
    "Der Hund läuft schnell über die Straße .",
    "Wir müssen morgen früh nach Berlin fahren .",
    "Das Wetter ist heute sehr schön .",
    "Kannst du mir bitte das Wasser geben ?",
]


def test_static_int8_linear_is_close_to_float_within_its_range_and_clips_beyond() -> None:
    """Inside [-absmax, absmax] the error stays within half a step of the input grid
    (absmax/63) and of each weight channel; an input beyond the range counts as the range's
    end (clipped, never wrapped around), and the bias is added inside the kernel."""
    lin = seeded_linear(0, 64, 32)
    absmax = 3.0
    layer = StaticInt8Linear(lin, absmax)
    x = (torch.rand(4, 3, 64) * 2 - 1) * absmax  # (B, T, in), inside the range
    with torch.no_grad():
        want = lin(x)
    got = layer(x)
    assert got.shape == want.shape == (4, 3, 32)
    w = lin.weight.detach().abs()  # (out, in)
    x_step = absmax / 126  # half a step of the input grid
    w_step = w.amax(1) / 254  # (out,): half a channel step
    bound = (x_step * w.sum(1) + x.abs().sum(-1, keepdim=True) * w_step
             + x_step * w_step * 64) * 1.01 + 1e-5  # (B, T, out)
    assert bool(((got - want).abs() <= bound).all())
    big = x * 100  # far outside the range, both signs
    assert torch.equal(layer(big), layer(big.clamp(-64 / 63 * absmax, absmax)))
    zero = layer(torch.zeros(2, 64))[0]
    assert torch.allclose(zero, lin.bias.detach(), atol=w.sum(1).max().item() * x_step * 1.01)
    with pytest.raises(ValueError, match="finite number > 0"):
        StaticInt8Linear(lin, 0.0)
    with pytest.raises(ValueError, match="finite number > 0"):
        StaticInt8Linear(lin, float("nan"))


def test_quantize_linears_uses_a_range_where_it_has_one_and_refuses_unknown_names() -> None:
    model = nn.Sequential(
        seeded_linear(1, 8, 16), nn.ReLU(), nn.Sequential(seeded_linear(2, 16, 4))
    )
    quantized = quantize_linears(model, Int8Kernel.FBGEMM, ranges={"2.0": 5.0})
    assert isinstance(quantized[0], FbgemmInt8Linear)  # no range: per-row scales
    assert isinstance(quantized[2][0], StaticInt8Linear) and quantized[2][0].absmax == 5.0
    with pytest.raises(CheckpointError, match=r"layers this model does not have \(2\.1\)"):
        quantize_linears(model, Int8Kernel.FBGEMM, ranges={"2.1": 5.0})
    # torch._int_mm's kernel scales each row whatever the file says
    int_mm = quantize_linears(model, Int8Kernel.INT_MM, ranges={"2.0": 5.0})
    assert not any(isinstance(m, StaticInt8Linear) for m in int_mm.modules())


def _calibrate(engine: Engine, quantile: float) -> dict[str, float]:
    def run(model: SimulTransformer) -> None:
        twin = Engine(model, engine.tokenizer, engine.info)
        simulate(twin, "wait-k:k=2", LINES, LINES, config=RunConfig(batch_size=2))

    return collect_ranges(engine.model, run, quantile=quantile)


def test_collect_ranges_measures_every_linear_of_the_inference_copy(tmp_path: Path) -> None:
    """One range per linear layer as int8 inference lays them out (fused projections), each
    the largest per-token input maximum seen (quantile 1) or a lower quantile of them; the
    file round-trips, and an int8 copy built from it has only fixed-scale layers."""
    engine = Engine.tiny(seed=0)
    full = _calibrate(engine, 1.0)
    twin = inference_copy(engine.model)
    names = {n for n, m in twin.named_modules() if isinstance(m, nn.Linear)}
    assert set(full) == names and "cross_kv_proj" in full and "out_proj" in full
    assert all(v > 0 for v in full.values())
    lower = _calibrate(engine, 0.5)
    assert all(lower[n] <= full[n] for n in full) and any(lower[n] < full[n] for n in full)
    path = tmp_path / RANGES_FILE
    save_ranges(path, full, about={"lines": len(LINES)})
    assert load_ranges(path) == pytest.approx(full)
    model = for_inference(engine.model, "int8", ranges=load_ranges(path))
    assert not any(isinstance(m, FbgemmInt8Linear) for m in model.modules())
    assert sum(isinstance(m, StaticInt8Linear) for m in model.modules()) == len(full)
    with pytest.raises(ValueError, match="quantile"):
        _calibrate(engine, 0.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not an int8 range file"),
        ('{"format": 2, "ranges": {"a": 1}}', '"format": 1'),
        ('{"format": 1, "ranges": {}}', "layer name: number > 0"),
        ('{"format": 1, "ranges": {"a": -1}}', "range of 'a' must be a number > 0"),
        ('{"format": 1, "ranges": {"a": "big"}}', "range of 'a' must be a number > 0"),
        ('{"format": 1, "ranges": {"a": true}}', "range of 'a' must be a number > 0"),
    ],
)
def test_a_broken_range_file_is_refused_with_what_is_wrong(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / RANGES_FILE
    path.write_text(text)
    with pytest.raises(CheckpointError, match=message):
        load_ranges(path)


def test_the_calibrate_command_writes_ranges_that_the_engine_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """End to end: `simulmt calibrate` writes int8_ranges.json beside model.pt; an int8 load of
    that folder builds fixed-scale layers and translates alike alone and batched; a file made
    for another model is refused at load, naming what to do."""
    folder = save_tiny_folder(tmp_path / "model")
    source = tmp_path / "dev.de"
    source.write_text("\n".join(LINES) + "\n\n")
    assert main(["calibrate", "--model", str(folder), "--source", str(source),
                 "--lines", "4", "--policy", "wait-k:k=2"]) == 0  # fmt: skip
    assert "wrote the input ranges of" in capsys.readouterr().out
    body = json.loads((folder / RANGES_FILE).read_text())
    assert body["lines"] == 4 and body["policy"] == "wait-k:k=2" and body["ranges"]
    engine = Engine.load(folder, dtype="int8")
    assert engine.precision == "int8"
    assert any(isinstance(m, StaticInt8Linear) for m in engine.model.modules())
    refs = ["x"] * len(LINES)
    alone = simulate(engine, "wait-k:k=1", LINES, refs, config=RunConfig(batch_size=1))
    together = simulate(engine, "wait-k:k=1", LINES, refs, config=RunConfig(batch_size=5))
    assert [s.prediction for s in alone.stats] == [s.prediction for s in together.stats]
    assert all(s.prediction for s in alone.stats)
    assert not any(isinstance(m, StaticInt8Linear)
                   for m in Engine.load(folder, dtype="float32").model.modules())
    other = save_tiny_folder(tmp_path / "other")
    body["ranges"]["encoder.9.ff.net.0"] = 1.0
    (other / RANGES_FILE).write_text(json.dumps(body))
    with pytest.raises(CheckpointError, match="simulmt calibrate"):
        Engine.load(other, dtype="int8")


def test_the_calibrate_command_refuses_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = save_tiny_folder(tmp_path / "model")
    empty = tmp_path / "empty.de"
    empty.write_text("\n \n")
    assert main(["calibrate", "--model", str(folder), "--source", str(empty)]) == 2
    assert "has no non-empty line" in capsys.readouterr().err
    assert main(["calibrate", "--model", str(folder), "--source", str(tmp_path / "none.de")]) == 2
    assert f"--source {tmp_path / 'none.de'} is not a file" in capsys.readouterr().err
    latin1 = tmp_path / "latin1.de"
    latin1.write_bytes("Grüße\n".encode("latin-1"))
    assert main(["calibrate", "--model", str(folder), "--source", str(latin1)]) == 2
    assert "line 1 is not UTF-8 text" in capsys.readouterr().err
    assert main(["calibrate", "--model", str(folder), "--source", str(empty),
                 "--policy", "nope"]) == 2  # fmt: skip
    assert "nope" in capsys.readouterr().err
    assert not (folder / RANGES_FILE).exists()
