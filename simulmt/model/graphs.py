"""Traced inference graphs: the hot model calls without Python between their tensor ops.

At a server's batch sizes a model call costs mostly per-op overhead, not arithmetic: a 1-row
int8 decoder step of the bundled model is ~90 tensor ops, and in eager mode each pays for
Python, argument parsing and `nn.Module` calls (8.9 ms a step on the 2-core Xeon of
bench/RESULTS.md against 4.2 ms as a traced graph). So an inference copy on the CPU gets
TorchScript graphs (`torch.jit.trace` + `torch.jit.freeze`) of

- the decoder step over cache blocks, with the new K/V written in place (`step`), and
- the packed encoder pass, from new tokens to their cross-attention K/V (`encode`).

Both read every size from their input tensors (`Packing` is all tensors for this), so one
graph serves every batch.

A graph runs the same kernels on the same shapes as eager mode, so its outputs are the
same bits. That is checked when the graphs are built, on probe inputs of two shapes unlike
the tracing ones; a graph that differs, or that fails to trace, is not used and eager mode
stays (a warning says why). TorchScript is deprecated in favour of `torch.compile`, which
needs a C++ compiler on the user's machine and was no faster here (notes, session 43): the
graphs are an accelerator with an eager fallback, never a requirement.

Graphs belong to one model object and are held beside it (`attach`, `graphs_of`), not inside
it: inside, `nn.Module` would register them as submodules (state dicts, `.to()`, deep copies
would see them). A copy of a model has none until it is traced itself.
"""

from __future__ import annotations

import logging
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from simulmt.model.layers import Packing, unstack_kv
from simulmt.model.transformer import SimulTransformer, StepOutput

log = logging.getLogger(__name__)

# the probe shapes: tracing and checking use sizes unlike each other and unlike 1, so that a
# size baked into a graph shows as a mismatch instead of passing by chance. A step's are
# (rows, self-attention width, source width), an encoder pass's (streams, longest cache,
# most new tokens of a stream)
TRACE_SHAPE = (3, 5, 7)
CHECK_SHAPES = ((2, 9, 4), (5, 3, 11))


@dataclass(frozen=True)
class Graphs:
    """The traced calls of one inference model. `step`: (last (N,), positions (N,), past
    (2L, N, H, W, dh), past_valid (N, W), cross (2L, N, H, S, dh), cross_valid (N, S),
    write_at (N,)) -> (log_probs (N, V), self_kv (2L, N, H, 1, dh), state (N, D)), row n's
    new K/V written into past at write_at[n]. `encode`: (ids (M,), past (2L_enc, B, H, W,
    dh), and `Packing.tensors()`) -> the new tokens' cross-attention K/V (2L_dec, 1, H, M, dh),
    their encoder K/V written into past."""

    step: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    encode: Callable[..., torch.Tensor]


_GRAPHS: weakref.WeakKeyDictionary[nn.Module, Graphs] = weakref.WeakKeyDictionary()


def attach(model: SimulTransformer, graphs: Graphs | None) -> None:
    """Hold `graphs` beside `model` (None: drop them, back to eager mode)."""
    if graphs is None:
        _GRAPHS.pop(model, None)
    else:
        _GRAPHS[model] = graphs


def graphs_of(model: SimulTransformer) -> Graphs | None:
    return _GRAPHS.get(model)


def decode_step(
    model: SimulTransformer,
    last: torch.Tensor,
    positions: torch.Tensor,
    past: torch.Tensor | None,
    past_valid: torch.Tensor | None,
    cross: torch.Tensor,
    cross_valid: torch.Tensor,
    *,
    top: int,
    return_attention: bool = False,
    write_at: torch.Tensor | None = None,
) -> StepOutput:
    """`model.decode_step` with the caches as blocks (2L, N, H, W, dh) (`stack_kv`), through
    the model's step graph where it has one and the call is the graph's case (a cache to write
    into, no attention weights asked for); `top`: the largest of `positions`, which the caller
    knows (the graph does not check it against the model's length, so this does)."""
    graphs = _GRAPHS.get(model)
    if graphs is None or past is None or write_at is None or return_attention:
        return model.decode_step(
            last,
            positions,
            None if past is None else unstack_kv(past),
            past_valid,
            unstack_kv(cross),
            cross_valid,
            return_attention=return_attention,
            write_at=write_at,
        )
    if top >= model.cfg.max_len:
        raise ValueError(f"sequence longer than the model's max_len={model.cfg.max_len} tokens")
    log_probs, self_kv, state = graphs.step(
        last, positions, past, past_valid, cross, cross_valid, write_at
    )
    return StepOutput(log_probs=log_probs, self_kv=self_kv, state=state, attention=None)


def encode(
    model: SimulTransformer, ids: torch.Tensor, past: torch.Tensor, packing: Packing
) -> torch.Tensor:
    """`model.encode_packed` with the caches as one block (2L_enc, B, H, W, dh), followed by
    `cross_kv_block`: the new tokens' cross-attention K/V (2L_dec, 1, H, M, dh). Through the
    model's graph where it has one."""
    graphs = _GRAPHS.get(model)
    if graphs is None or packing.groups:  # the graph runs one group (`Packing.groups`)
        return _encode(model, ids, past, packing)
    return graphs.encode(ids, past, *packing.tensors())


def _encode(
    model: SimulTransformer, ids: torch.Tensor, past: torch.Tensor, packing: Packing
) -> torch.Tensor:
    memory = model.encode_packed(ids, unstack_kv(past), packing)  # (M, D)
    return model.cross_kv_block(memory.unsqueeze(0))  # (2L_dec, 1, H, M, dh)


# ---- building ------------------------------------------------------------------------
class _Traceable(nn.Module):
    """A model call with tensors in and tensors out, which is what tracing takes."""

    def __init__(self, model: SimulTransformer) -> None:
        super().__init__()
        self.model = model


class _Step(_Traceable):
    """`SimulTransformer.decode_step` over cache blocks."""

    def forward(
        self,
        last: torch.Tensor,
        positions: torch.Tensor,
        past: torch.Tensor,
        past_valid: torch.Tensor,
        cross: torch.Tensor,
        cross_valid: torch.Tensor,
        write_at: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out = self.model.decode_step(
            last, positions, unstack_kv(past), past_valid, unstack_kv(cross), cross_valid,
            write_at=write_at,
        )  # fmt: skip
        return out.log_probs, out.self_kv, out.state


class _Encode(_Traceable):
    """`encode`, with `Packing` as its tensors."""

    def forward(
        self, ids: torch.Tensor, past: torch.Tensor, *packing: torch.Tensor
    ) -> torch.Tensor:
        rows, slots, mask, positions = packing
        return _encode(self.model, ids, past, Packing(rows, slots, mask, positions))


def _freeze(module: nn.Module, example: tuple[torch.Tensor, ...]) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        # TracerWarning: the max_len check's int() (the caller checks instead); deprecation
        # notices of torch.jit (module docstring)
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(module.eval(), example, check_trace=False)
        return torch.jit.freeze(traced)


def _step_inputs(
    model: SimulTransformer, shape: tuple[int, int, int], seed: int
) -> tuple[torch.Tensor, ...]:
    """Probe inputs of a step graph: `shape` = (rows, width, source width); rows of different
    lengths (some positions invalid), each writing at its own position."""
    n, w, s = shape
    cfg, g = model.cfg, torch.Generator().manual_seed(seed)
    dtype = model.dtype
    lengths = torch.arange(n) % w  # (N,) each row's cached positions, its write position
    past = torch.randn(2 * cfg.dec_layers, n, cfg.n_heads, w, cfg.head_dim, generator=g)
    cross = torch.randn(2 * cfg.dec_layers, n, cfg.n_heads, s, cfg.head_dim, generator=g)
    return (
        torch.randint(4, cfg.vocab_size, (n,), generator=g),  # last
        lengths,  # positions
        past.to(dtype),
        torch.arange(w).unsqueeze(0) <= lengths.unsqueeze(1),  # past_valid (N, W)
        cross.to(dtype),
        torch.arange(s).unsqueeze(0) <= (torch.arange(n) % s).unsqueeze(1),  # cross_valid
        lengths.clone(),  # write_at
    )


def _encode_inputs(
    model: SimulTransformer, shape: tuple[int, int, int], seed: int
) -> tuple[torch.Tensor, ...]:
    """Probe inputs of an encode graph: `shape` = (streams, longest cache, most new tokens);
    streams of different cache lengths bringing different numbers of tokens."""
    b, p, t = shape
    cfg, g = model.cfg, torch.Generator().manual_seed(seed)
    counts = [1 + i % t for i in range(b)]
    past_lengths = [p - i % (p + 1) for i in range(b)]
    packing = Packing.of(counts, past_lengths, dtype=model.dtype)
    width = packing.keys
    past = torch.randn(2 * cfg.enc_layers, b, cfg.n_heads, width, cfg.head_dim, generator=g)
    for r, n in enumerate(past_lengths):
        past[:, r, :, n:] = 0  # as `pack_kv` pads
    ids = torch.randint(4, cfg.vocab_size, (sum(counts),), generator=g)  # (M,)
    return (ids, past.to(model.dtype), *packing.tensors())


def _same(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return False


def _agrees(
    graph: Callable[..., object], eager: Callable[..., object],
    inputs: Sequence[tuple[torch.Tensor, ...]],
) -> bool:  # fmt: skip
    """Graph and eager mode give the same bits on every probe, in-place writes included
    (each side gets its own copy of the inputs)."""
    for probe in inputs:
        mine = tuple(t.clone() for t in probe)
        theirs = tuple(t.clone() for t in probe)
        if not _same(graph(*mine), eager(*theirs)) or not _same(mine, theirs):
            return False
    return True


@torch.no_grad()
def trace(model: SimulTransformer) -> Graphs | None:
    """The graphs of an inference model (`for_inference`'s copy, eval mode, on the CPU), each
    checked against eager mode; None, with a warning, if any cannot be built or differs."""
    if model.training:
        raise ValueError("graphs are for inference: call model.eval() first")
    built = {}
    try:
        for name, module, inputs in (
            ("decoder step", _Step(model), _step_inputs),
            ("encoder pass", _Encode(model), _encode_inputs),
        ):
            graph = _freeze(module, inputs(model, TRACE_SHAPE, seed=0))
            probes = [inputs(model, shape, seed=i + 1) for i, shape in enumerate(CHECK_SHAPES)]
            if not _agrees(graph, module, probes):
                log.warning("the traced %s differs from eager mode: running eager", name)
                return None
            built[name] = graph
    except Exception as e:  # noqa: BLE001  (an accelerator: any failure means eager mode)
        log.warning("could not trace the model's graphs (%s: %s): running eager",
                    type(e).__name__, e)  # fmt: skip
        return None
    return Graphs(step=built["decoder step"], encode=built["encoder pass"])
