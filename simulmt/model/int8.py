"""Int8 linear layers whose output for one row depends on that row alone.

PyTorch's dynamic quantization (`torch.ao.quantization.quantize_dynamic`) rounds each input
*tensor* onto one int8 grid, scaled by the largest activation in it. In a batched step that
tensor holds every stream in flight, so a caption changed with whoever else the server was
translating for: 24 of 40 newstest2015 sentences came out differently alone than in a batch
(float32: 0 of 40). Here each row (one token of one stream) is quantized with its own absmax
scale and the weights with one scale per output channel (W8A8 per token, as LLM.int8 and
SmoothQuant do); the int8 product accumulates exactly in int32 (`torch._int_mm`) and the rest is
elementwise, so a row's output is the same alone or in any batch, and its rounding is finer
than one scale per tensor.

`torch._int_mm` is fast only where the CPU has int8 dot-product instructions (AVX512-VNNI, AMX);
on an AVX2-only CPU it was 15-26x slower than float32, on an AVX512 CPU without VNNI 10-50x, and
even with VNNI and AMX fbgemm was faster (bench/RESULTS.md). So `FbgemmInt8Linear`, the default
wherever torch has fbgemm, keeps the same per-row contract on fbgemm's kernel: each row is
divided by its own absmax, then quantized with one *fixed* scale, so fbgemm's per-tensor
parameters no longer depend on the batch. AVX2's int8 multiply-add (vpmaddubsw) saturates at
int16 when two products of full 8-bit operands add up, so the activations use 7 bits (-63..63
around zero point 64, what `reduce_range` does for the same reason): every int32 sum is then
exact.

Where the model folder has calibrated activation ranges (`simulmt calibrate`,
`simulmt.model.calibration`), fbgemm's layers use them instead (`StaticInt8Linear`): one fixed
scale per layer, clipped to the calibrated range, so the row scaling around the kernel (five
small tensor ops a call, half of a small call's time) goes away and the bias is added inside
it. A fixed scale depends on no row at all, so the per-row contract holds as well.
"""

from __future__ import annotations

import contextlib
import copy
import enum
import math
import warnings
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TypeVar

import torch
from torch import nn

from simulmt.model.checkpoint import CheckpointError

__all__ = [
    "FbgemmInt8Linear", "Int8Kernel", "Int8Linear", "StaticInt8Linear", "default_kernel",
    "quantize_linears",
]

ModuleT = TypeVar("ModuleT", bound=nn.Module)

QMAX = 127  # symmetric int8: -127..127 (-128 unused, so negation cannot overflow)
EPS = 1e-12  # an all-zero row keeps a positive scale
ROW_LEVELS = 63  # fbgemm path: a row's absmax maps to 63 steps; 7 bits, exact on AVX2 (above)
ROW_ZERO_POINT = 64  # so the uint8 codes are 1..127: two products sum to <= 2*127*127 < 2**15


class Int8Kernel(enum.Enum):
    """Which int8 matrix product `--dtype int8` runs; the same per-row contract either way."""

    INT_MM = "int_mm"  # torch._int_mm, 8-bit activations: for torch builds without fbgemm
    FBGEMM = "fbgemm"  # fbgemm, 7-bit activations: the faster one on every x86 CPU measured


def default_kernel() -> Int8Kernel:
    """fbgemm wherever this torch build has it, `torch._int_mm` only where it does not.

    fbgemm was the faster kernel on every CPU measured: on an AVX2-only EPYC and an AVX512 Xeon
    without VNNI `_int_mm` was 10-50x slower than float32, and on a Xeon with AVX512-VNNI and
    AMX a whole batched turn took 7.3 ms on fbgemm (calibrated ranges) against 9.9 ms on
    `_int_mm` (bench/RESULTS.md, session 45). `_int_mm` also follows ATen's capability: under
    `ATEN_CPU_CAPABILITY=avx2` its products saturated (error 0.2 of the largest output,
    bench/int8_kernels.py), so the CPU's flags alone could not say it was safe."""
    if "fbgemm" in torch.backends.quantized.supported_engines:
        return Int8Kernel.FBGEMM
    return Int8Kernel.INT_MM


class Int8Linear(nn.Module):
    """`nn.Linear` with int8 weights (per output channel) and per-row int8 activations.

    Holds no Parameters: it is for inference only."""

    weight: torch.Tensor  # (out, in) int8
    weight_scale: torch.Tensor  # (out,) float32
    bias: torch.Tensor | None  # (out,) float32

    def __init__(self, weight: torch.Tensor, weight_scale: torch.Tensor,
                 bias: torch.Tensor | None) -> None:
        super().__init__()
        if weight.dtype is not torch.int8 or weight.dim() != 2:
            raise ValueError(f"weight must be a 2-D int8 tensor, got {weight.dtype} "
                             f"{tuple(weight.shape)}")
        self.out_features, self.in_features = weight.shape
        self.register_buffer("weight", weight.contiguous())
        self.register_buffer("weight_scale", weight_scale.float().contiguous())
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())

    @classmethod
    def from_float(cls, linear: nn.Linear) -> Int8Linear:
        w = linear.weight.detach().float()  # (out, in)
        scale = w.abs().amax(dim=1).clamp_min(EPS) / QMAX  # (out,)
        q = torch.round(w / scale.unsqueeze(1)).clamp_(-QMAX, QMAX).to(torch.int8)  # (out, in)
        return cls(q, scale, linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., in) float32 → (..., out) float32."""
        flat = x.reshape(-1, self.in_features).float()  # (M, in)
        scale = flat.abs().amax(dim=1, keepdim=True).clamp_min(EPS) / QMAX  # (M, 1)
        q = (flat / scale).round_().to(torch.int8)  # (M, in), |values| <= 127 by construction
        # (in, out) as a column-major view: the layout torch._int_mm is fastest with on CPU;
        # with in == 1 that view's strides are (1, 1), which _int_mm misreads (torch 2.13)
        w_t = self.weight.t() if self.in_features > 1 else self.weight.view(1, -1)
        acc = torch._int_mm(q, w_t)  # (M, out) int32, exact
        out = acc.float().mul_(scale).mul_(self.weight_scale)  # (M, out)
        if self.bias is not None:
            out.add_(self.bias)
        return out.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


# the operator's C++ entry itself: its Python overload checks every call's arguments for fake
# script objects first (~10 us of ~100 a call at a server's batch sizes)
_FBGEMM_LINEAR = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32.default._op
# Calling it from Python still asks each argument for `__torch_function__`; on the packed
# weights (a ScriptObject) the failed lookup took 18 us of the 44 a 1-row call cost. No tensor
# here is a subclass, so the lookup is switched off around the call (0.4 us to enter). A torch
# without this (private) switch just pays the lookup.
_NO_TORCH_FUNCTION: Callable[[], AbstractContextManager[object]] = getattr(
    torch._C, "DisableTorchFunction", contextlib.nullcontext
)


class FbgemmInt8Linear(nn.Module):
    """`nn.Linear` on fbgemm's int8 kernel: weights per output channel, activations per row
    on 7 bits (module docstring). Holds no Parameters: it is for inference only."""

    bias: torch.Tensor | None  # (out,) float32

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.out_features, self.in_features = linear.weight.shape
        self._packed = _prepack(linear, with_bias=False)
        bias = linear.bias
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., in) float32 → (..., out) float32. Five tensor ops in all: at a server's few
        rows each op's fixed cost outweighs its arithmetic (fbgemm takes any leading shape)."""
        scale = x.abs().amax(dim=-1, keepdim=True).clamp_min(EPS)  # (..., 1)
        with _NO_TORCH_FUNCTION():
            out = _FBGEMM_LINEAR(
                x / scale, 1.0 / ROW_LEVELS, ROW_ZERO_POINT, self._packed
            )  # (..., out): each row in [-1, 1] on one fixed grid, so the same alone or batched
        if self.bias is not None:
            return torch.addcmul(self.bias, out, scale)  # bias + out * scale, one pass
        return out.mul_(scale)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class StaticInt8Linear(nn.Module):
    """`nn.Linear` on fbgemm's int8 kernel with a calibrated input range: weights per output
    channel, activations on 7 bits of one fixed grid from -64/63 absmax to absmax (inputs
    beyond it are clipped). Two tensor ops a call where `FbgemmInt8Linear` needs six, the bias added
    inside the kernel. Holds no Parameters: it is for inference only."""

    def __init__(self, linear: nn.Linear, absmax: float) -> None:
        super().__init__()
        if not (math.isfinite(absmax) and absmax > 0):
            raise ValueError(f"an activation range must be a finite number > 0, got {absmax!r}")
        self.out_features, self.in_features = linear.weight.shape
        self.absmax = float(absmax)
        self._scale = self.absmax / ROW_LEVELS  # one code step of the input grid
        # codes 0..127 around ROW_ZERO_POINT: exact int32 sums on AVX2 (module docstring)
        self._lo = -ROW_ZERO_POINT * self._scale
        self._hi = (QMAX - ROW_ZERO_POINT) * self._scale
        self._packed = _prepack(linear, with_bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., in) float32 → (..., out) float32."""
        with _NO_TORCH_FUNCTION():
            return _FBGEMM_LINEAR(
                x.clamp(self._lo, self._hi), self._scale, ROW_ZERO_POINT, self._packed
            )

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"absmax={self.absmax:.4g}")


def _prepack(linear: nn.Linear, *, with_bias: bool) -> object:
    """`linear`'s weights quantized per output channel to int8 and packed for fbgemm (with
    its bias, if asked)."""
    w = linear.weight.detach().float()  # (out, in)
    scale = (w.abs().amax(dim=1).clamp_min(EPS) / QMAX).double()  # (out,)
    with warnings.catch_warnings():  # quantized tensors are deprecated, fbgemm's API is not
        warnings.simplefilter("ignore", UserWarning)
        qw = torch.quantize_per_channel(
            w, scale, torch.zeros_like(scale, dtype=torch.long), 0, torch.qint8
        )  # (out, in)
    bias = linear.bias.detach().float() if with_bias and linear.bias is not None else None
    return torch.ops.quantized.linear_prepack(qw, bias)


def quantize_linears(
    model: ModuleT,
    kernel: Int8Kernel | None = None,
    *,
    prepare: Callable[[ModuleT], None] | None = None,
    ranges: Mapping[str, float] | None = None,
) -> ModuleT:
    """A copy of `model` with every `nn.Linear` replaced by an int8 one on `kernel` (default:
    `default_kernel()`; the original is left as it is; tied weights are quantized once per layer
    that uses them). `prepare` changes the float copy first (e.g. fuses layers). `ranges`:
    calibrated input ranges by module name (after `prepare`); on fbgemm a layer with one is
    a `StaticInt8Linear`, the others scale each row (`simulmt.model.calibration`)."""
    kernel = default_kernel() if kernel is None else kernel
    ranges = ranges if kernel is Int8Kernel.FBGEMM and ranges is not None else {}
    # a new module tree that shares the original's tensors (inference reads them, never
    # writes; the linears' weights are replaced anyway): copying 22M weights took ~0.5 s
    shared = {id(t): t for t in (*model.parameters(), *model.buffers())}
    model = copy.deepcopy(model, memo=shared)
    if prepare is not None:
        prepare(model)
    linears = {n for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    unknown = sorted(set(ranges) - linears)
    if unknown:
        raise CheckpointError(
            f"the int8 ranges name layers this model does not have ({', '.join(unknown[:3])}"
            f"{', ...' if len(unknown) > 3 else ''}): they were made for another model; run "
            "`simulmt calibrate` for this one"
        )
    for prefix, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, nn.Linear):
                continue
            full = f"{prefix}.{name}" if prefix else name
            layer: nn.Module
            if full in ranges:
                layer = StaticInt8Linear(child, ranges[full])
            elif kernel is Int8Kernel.FBGEMM:
                layer = FbgemmInt8Linear(child)
            else:
                layer = Int8Linear.from_float(child)
            setattr(parent, name, layer)
    return model
