"""int8 inference: per-row activation quantization (simulmt.model.int8)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from simulmt.eval.runner import RunConfig, simulate
from torch import nn

from simulmt.engine import Engine, for_inference
from simulmt.model.int8 import (
    FbgemmInt8Linear,
    Int8Kernel,
    Int8Linear,
    StaticInt8Linear,
    default_kernel,
    quantize_linears,
)
from simulmt.model.layers import stack_kv
from tests._model_helpers import seeded_linear

# every int8 layer, by its kernel and input scaling (a calibrated range as in int8_ranges.json)
LAYERS: dict[str, Callable[[nn.Linear], nn.Module]] = {
    "int_mm, per row": Int8Linear.from_float,
    "fbgemm, per row": FbgemmInt8Linear,
    "fbgemm, calibrated range": lambda linear: StaticInt8Linear(linear, 10.0),
}


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    d_in=st.integers(1, 48),
    d_out=st.integers(1, 48),
    rows=st.integers(1, 12),
    row=st.data(),
    bias=st.booleans(),
    kind=st.sampled_from(list(LAYERS)),
)
def test_a_row_gives_the_same_output_alone_and_in_any_batch(
    seed: int, d_in: int, d_out: int, rows: int, row: st.DataObject, bias: bool, kind: str
) -> None:
    """The property torch.ao's dynamic quantization lacks: its one activation scale per tensor
    made a row's output depend on the other rows (other streams in a batched step). fbgemm's
    kernel quantizes per tensor too; FbgemmInt8Linear normalizes each row first, and a
    calibrated range is one fixed grid for every row."""
    layer = LAYERS[kind](seeded_linear(seed, d_in, d_out, bias=bias))
    g = torch.Generator().manual_seed(seed)
    # rows of very different magnitudes, as streams at different points of their sentences
    batch = torch.randn(rows, d_in, generator=g) * torch.logspace(-2, 2, rows).unsqueeze(1)
    i = row.draw(st.integers(0, rows - 1))
    assert torch.equal(layer(batch)[i], layer(batch[i : i + 1])[0])


def test_int8_linear_is_close_to_float() -> None:
    """Per-row activation and per-channel weight scales: the error stays within the rounding
    of both (half a step each), far below the outputs' own size."""
    lin = seeded_linear(0, 64, 32)
    layer = Int8Linear.from_float(lin)
    x = torch.randn(5, 3, 64)  # (B, T, in): any leading shape
    with torch.no_grad():
        want = lin(x)
    got = layer(x)
    assert got.shape == want.shape == (5, 3, 32)
    # |error| <= sum_k |x_k w_k| * (1/254 + 1/254) + second-order terms
    bound = (x.abs() @ lin.weight.detach().abs().t()) * (2 / 254) * 1.01 + 1e-6
    assert bool(((got - want).abs() <= bound).all())
    assert torch.equal(layer(torch.zeros(2, 64))[0], lin.bias.detach())  # zero rows: bias only
    assert layer(torch.zeros(0, 64)).shape == (0, 32)  # an empty batch


@pytest.mark.parametrize("kernel", list(Int8Kernel))
def test_quantize_linears_replaces_every_linear_and_leaves_the_original(
    kernel: Int8Kernel,
) -> None:
    model = nn.Sequential(
        seeded_linear(1, 8, 16), nn.ReLU(), nn.Sequential(seeded_linear(2, 16, 4))
    )
    kind = Int8Linear if kernel is Int8Kernel.INT_MM else FbgemmInt8Linear
    quantized = quantize_linears(model, kernel)
    assert not any(isinstance(m, nn.Linear) for m in quantized.modules())
    assert sum(isinstance(m, kind) for m in quantized.modules()) == 2
    assert sum(isinstance(m, nn.Linear) for m in model.modules()) == 2  # untouched
    assert all(m.weight.dtype is torch.int8 for m in quantized.modules()
               if isinstance(m, Int8Linear))


def test_fbgemm_int8_linear_is_close_to_float_and_exact_in_int32() -> None:
    """7-bit rows (a step of absmax/63) and 8-bit weights: the error stays within half a step
    of each. With full 8-bit rows AVX2's int16 pair sums would saturate and miss this bound by
    far (bench/int8_kernels.py); so would torch.ao's per-tensor scale for the small rows."""
    lin = seeded_linear(0, 64, 32)
    layer = FbgemmInt8Linear(lin)
    # rows of very different sizes, and all-positive ones (the saturating case on AVX2)
    x = torch.randn(4, 3, 64) * torch.logspace(-3, 3, 4).view(4, 1, 1)  # (B, T, in)
    x[0] = x[0].abs()
    with torch.no_grad():
        want = lin(x)
    got = layer(x)
    assert got.shape == want.shape == (4, 3, 32)
    w = lin.weight.detach().abs()  # (out, in)
    x_step = x.abs().amax(-1, keepdim=True) / 126  # (B, T, 1): half a row step
    w_step = w.amax(1) / 254  # (out,): half a channel step
    bound = (x_step * w.sum(1) + x.abs().sum(-1, keepdim=True) * w_step
             + x_step * w_step * 64) * 1.01 + 1e-5  # (B, T, out)
    assert bool(((got - want).abs() <= bound).all())
    assert torch.equal(layer(torch.zeros(2, 64))[0], lin.bias.detach())  # zero rows: bias only


def test_default_kernel_is_fbgemm_where_torch_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """fbgemm on every CPU (it was faster than torch._int_mm even with VNNI and AMX, and
    _int_mm saturates under ATen's AVX2 kernels); _int_mm only in a build without fbgemm."""
    monkeypatch.setattr(torch.backends, "quantized",
                        SimpleNamespace(supported_engines=["qnnpack", "fbgemm"]))
    assert default_kernel() is Int8Kernel.FBGEMM
    monkeypatch.setattr(torch.backends, "quantized", SimpleNamespace(supported_engines=["qnnpack"]))
    assert default_kernel() is Int8Kernel.INT_MM  # no fbgemm in this build: the only kernel


def test_int8_weight_must_be_int8() -> None:
    with pytest.raises(ValueError, match="weight must be a 2-D int8 tensor, got torch.float32"):
        Int8Linear(torch.zeros(2, 3), torch.ones(2), None)


def test_int8_engine_translates_a_sentence_alike_alone_and_batched() -> None:
    """End to end: an evaluation of sentences of different lengths, one at a time and all in
    one batch, gives the same outputs with int8 weights (with torch.ao's dynamic quantization
    they differed, as a stream served alone differed from one served beside others)."""
    tiny = Engine.tiny(seed=0)
    int8 = Engine(for_inference(tiny.model, "int8"), tiny.tokenizer, tiny.info)
    lines = [
        "Ich habe heute ein Buch gelesen .",
        "Der Hund läuft schnell über die Straße .",
        "Wir müssen morgen früh nach Berlin fahren .",
        "Das Wetter ist heute sehr schön .",
        "Kannst du mir bitte das Wasser geben ?",
    ]
    refs = ["x"] * len(lines)
    for policy in ("wait-k:k=1", "full"):
        alone = simulate(int8, policy, lines, refs, config=RunConfig(batch_size=1))
        together = simulate(int8, policy, lines, refs, config=RunConfig(batch_size=5))
        assert [s.prediction for s in alone.stats] == [s.prediction for s in together.stats]


@pytest.mark.parametrize("kernel", list(Int8Kernel))
def test_fused_projections_give_the_int8_outputs_of_the_separate_ones(
    kernel: Int8Kernel,
) -> None:
    """An int8 copy with each self-attention's q and k/v projections fused into one layer, and
    the decoder layers' cross-attention K/V projections into one (what `for_inference(...,
    "int8")` builds), encodes and decodes bit for bit as the copy with them apart: per-channel
    weights and per-row activations see the same numbers."""
    from simulmt.model.transformer import SimulTransformer

    model = Engine.tiny(seed=3).model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    apart = quantize_linears(model, kernel)
    fused = quantize_linears(model, kernel, prepare=SimulTransformer.fuse_projections)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # untouched
    attns = (fused.encoder[0].attn, fused.decoder[0].self_attn)
    assert not any(hasattr(m, "q_proj") for m in attns)
    assert fused.cross_kv_proj is not None
    assert not any(hasattr(layer.cross_attn, "kv_proj") for layer in fused.decoder)
    src = torch.randint(4, model.cfg.vocab_size, (3, 7), generator=torch.Generator().manual_seed(0))
    tgt = torch.randint(4, model.cfg.vocab_size, (3, 5), generator=torch.Generator().manual_seed(1))
    vis = torch.tensor([[3, 4, 5, 7, 7]] * 3)
    with torch.no_grad():
        assert torch.equal(apart(src, tgt, vis), fused(src, tgt, vis))  # (B, T, V) logits
        memory, _ = model.encode(src)
        block = fused.cross_kv_block(memory)  # (2L_dec, B, H, S, dh), one product
        assert torch.equal(block, stack_kv(apart.cross_kv(memory)))
    with pytest.raises(TypeError, match="before quantizing"):
        apart.encoder[0].attn.fuse_qkv()  # int8 layers cannot be fused
    with pytest.raises(TypeError, match="before quantizing"):
        apart.fuse_cross_kv()
