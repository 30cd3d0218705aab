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
"""

from __future__ import annotations

import copy
from typing import TypeVar

import torch
from torch import nn

__all__ = ["Int8Linear", "quantize_linears"]

ModuleT = TypeVar("ModuleT", bound=nn.Module)

QMAX = 127  # symmetric int8: -127..127 (-128 unused, so negation cannot overflow)
EPS = 1e-12  # an all-zero row keeps a positive scale


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


def quantize_linears(model: ModuleT) -> ModuleT:
    """A copy of `model` with every `nn.Linear` replaced by an `Int8Linear` (the original is
    left as it is; tied weights are quantized once per layer that uses them)."""
    model = copy.deepcopy(model)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, Int8Linear.from_float(child))
    return model
