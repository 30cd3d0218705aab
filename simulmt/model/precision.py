"""Which inference precision to run on this CPU (`--dtype auto`): measured, not assumed.

The fastest precision depends on the CPU's instructions, not on the model: with AVX512-VNNI or
AMX, int8 and bfloat16 matrix products are several times faster than float32; on a CPU with AVX2
only, bfloat16 is emulated (slower than float32) and only fbgemm's int8 kernel is fast
(`simulmt.model.int8` uses it wherever torch has it). A fixed default was a trap on one or the
other: `serve`'s int8 default made an AVX2 server 5x slower than float32 (issue #55). So at load
each precision this CPU runs natively is timed on one representative batched turn (an encoder
pass over two new words and one decoder step), best of `REPEATS` interleaved runs in CPU time,
and the fastest wins; one that is not clearly faster than float32 (`MIN_GAIN`) never does.

The turn has as many streams as the caller's work has at once, because the winner depends on
it: on a Xeon with AMX int8 wins a server's turn of 8 streams (7.8 ms against bfloat16's 12.9)
and bfloat16 an evaluation's batch of 128 (40.8 against 46.1 ms). A server times
`TURN_STREAMS`, one session 1, `simulmt eval` its batch size, capped at `MAX_TIMED_STREAMS`
(past the cross-over, and timing grows with the streams). Choosing costs up to about a second of
CPU and is logged with the times.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from simulmt.model.config import ModelConfig
from simulmt.model.devices import cpu_flags
from simulmt.model.runtime import AUTO_DTYPE, DTYPE_NAMES
from simulmt.model.transformer import SimulTransformer

log = logging.getLogger(__name__)

__all__ = ["PrecisionChoice", "choose_precision", "native_precisions", "pick_fastest"]

FLOAT32 = "float32"
MIN_GAIN = 0.10  # another precision must beat float32 by 10%: timing noise never picks a slower
REPEATS = 3  # timed runs per precision (interleaved, best kept: robust to a busy neighbour)
TURN_STREAMS = 8  # streams in the timed turn by default: a loaded server's batch
MAX_TIMED_STREAMS = 128  # a wider turn decides as 128 does and costs more to time
TURN_SOURCE = 16  # source tokens each timed stream has read
TURN_TARGET = 8  # target tokens each timed stream has written

Convert = Callable[[SimulTransformer, str], SimulTransformer]
Timer = Callable[[Mapping[str, SimulTransformer]], dict[str, float]]


@dataclass(frozen=True)
class PrecisionChoice:
    """What was asked, what runs, and the measured time of one turn of `streams` streams per
    precision (ms)."""

    requested: str
    name: str
    times_ms: Mapping[str, float]
    streams: int = TURN_STREAMS

    def describe(self) -> str:
        times = ", ".join(f"{k} {v:.1f} ms" for k, v in sorted(self.times_ms.items()))
        turn = f"one turn of {self.streams} stream{'s' if self.streams != 1 else ''}"
        return f"precision {self.name} (asked: {self.requested}; {turn}: {times})"


def native_precisions() -> tuple[str, ...]:
    """The precisions this CPU runs without emulation: float32 and int8 everywhere (an int8
    kernel exists for every x86 CPU), bfloat16 only with bf16 instructions (AVX512-BF16, AMX):
    without them oneDNN emulates it, several times slower than float32. oneDNN's own check
    says yes to any AVX-512 CPU (it can emulate), so the CPU's flags decide where torch has
    them."""
    try:
        bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a build without oneDNN: no bf16 kernels either
        bf16 = False
    flags = cpu_flags()
    if bf16 and flags is not None:
        bf16 = bool(flags.get("avx512_bf16") or flags.get("amx_bf16"))
    return tuple(n for n in DTYPE_NAMES if n != "bfloat16" or bf16)


def pick_fastest(times_ms: Mapping[str, float], *, min_gain: float = MIN_GAIN) -> str:
    """The fastest precision of `times_ms` (which must hold float32), or float32 unless the
    fastest beats it by at least `min_gain` (a share of float32's time)."""
    if FLOAT32 not in times_ms:
        raise ValueError("the timings must include float32, the reference")
    best = min(times_ms, key=lambda name: times_ms[name])
    if times_ms[best] <= (1 - min_gain) * times_ms[FLOAT32]:
        return best
    return FLOAT32


def slower_than_float32(
    times_ms: Mapping[str, float], name: str, *, min_gain: float = MIN_GAIN
) -> bool:
    """Whether `name` is measurably slower than float32 here (by more than `min_gain`)."""
    return times_ms[name] > (1 + min_gain) * times_ms[FLOAT32]


def choose_precision(
    model: SimulTransformer,
    requested: str,
    *,
    convert: Convert,
    turn_streams: int = TURN_STREAMS,
    timer: Timer | None = None,
    candidates: tuple[str, ...] | None = None,
) -> tuple[SimulTransformer, PrecisionChoice]:
    """`model` (float32) in the precision `requested` ("auto" or a name), and the choice.

    auto: every native precision is built with `convert`, timed with `timer` (default
    `time_turns` on a turn of `turn_streams` streams, at most `MAX_TIMED_STREAMS`) and the fastest
    kept (`pick_fastest`). An explicit name is obeyed; unless it is float32 it is timed against
    float32 too, and a warning says so when it is slower."""
    if requested != AUTO_DTYPE and requested not in DTYPE_NAMES:
        raise ValueError(
            f"unknown dtype {requested!r}: accepted are {AUTO_DTYPE}, {', '.join(DTYPE_NAMES)}"
        )
    if turn_streams < 1:
        raise ValueError(f"turn_streams must be at least 1, not {turn_streams}")
    streams = min(turn_streams, MAX_TIMED_STREAMS)
    timer = functools.partial(time_turns, streams=streams) if timer is None else timer
    if requested == FLOAT32:
        return convert(model, FLOAT32), PrecisionChoice(requested, FLOAT32, {}, streams)
    names = (candidates or native_precisions()) if requested == AUTO_DTYPE else (requested,)
    built = {name: convert(model, name) for name in dict.fromkeys((FLOAT32, *names))}
    times = timer(built)
    name = pick_fastest(times) if requested == AUTO_DTYPE else requested
    choice = PrecisionChoice(requested, name, times, streams)
    if requested != AUTO_DTYPE and slower_than_float32(times, requested):
        log.warning(
            "--dtype %s is slower than float32 on this CPU (%s); --dtype auto picks the fastest",
            requested,
            choice.describe(),
        )
    else:
        log.info("%s", choice.describe())
    return built[name], choice


def time_turns(
    models: Mapping[str, SimulTransformer], *, streams: int = TURN_STREAMS
) -> dict[str, float]:
    """Best-of-`REPEATS` CPU ms of one representative batched turn of `streams` streams per
    model, interleaved so that a burst of load from elsewhere hits every precision alike.

    On one torch thread and in this thread's CPU time, not wall time: on a busy machine wall
    time measures the scheduler (with 2 threads at load 24, both precisions took 2.9 s a turn
    and the faster one lost its lead in the noise); CPU time measures the kernels."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        inputs = _inputs(next(iter(models.values())).cfg, streams)  # the same for every model
        turns = {name: _turn(model, inputs) for name, model in models.items()}
        for run in turns.values():  # warm-up: first calls allocate and pick kernels
            run()
        best = dict.fromkeys(turns, float("inf"))
        for _ in range(REPEATS):
            for name, run in turns.items():
                start = time.thread_time()
                run()
                best[name] = min(best[name], (time.thread_time() - start) * 1000)
    finally:
        torch.set_num_threads(threads)
    return best


@dataclass(frozen=True)
class _TurnInputs:
    """One timed turn's inputs in float32, made once for every precision: random tokens and
    random K/V caches (only their shapes matter to the time; an encoder pass to make real
    ones cost more than the timed turns, 0.3 s at 64 streams)."""

    ids: torch.Tensor  # (B, S) source tokens
    last: torch.Tensor  # (B,) the last target token
    enc_past: torch.Tensor  # (L_enc, 2, B, H, S - 2, dh) the encoder's cache before the 2 new
    cross: torch.Tensor  # (L_dec, 2, B, H, S, dh) cross-attention K/V
    past: torch.Tensor  # (L_dec, 2, B, H, T, dh) the decoder's self-attention cache


def _inputs(cfg: ModelConfig, streams: int) -> _TurnInputs:
    b, s, t = streams, TURN_SOURCE, TURN_TARGET
    g = torch.Generator().manual_seed(0)

    def kv(layers: int, length: int) -> torch.Tensor:
        return torch.randn(layers, 2, b, cfg.n_heads, length, cfg.head_dim, generator=g)

    return _TurnInputs(
        ids=torch.randint(4, cfg.vocab_size, (b, s), generator=g),
        last=torch.randint(4, cfg.vocab_size, (b,), generator=g),
        enc_past=kv(cfg.enc_layers, s - 2),
        cross=kv(cfg.dec_layers, s),
        past=kv(cfg.dec_layers, t),
    )


def _turn(model: SimulTransformer, inputs: _TurnInputs) -> Callable[[], None]:
    """One turn on `inputs`' streams: two new source tokens through the encoder (cache of
    TURN_SOURCE - 2) and one decoder step (cache of TURN_TARGET)."""
    b, s = inputs.ids.shape
    t = inputs.past.shape[-2]
    ids, last = inputs.ids, inputs.last

    def layers(kv: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        kv = kv.to(model.dtype)  # the model's cache precision (float32 for int8)
        return [(layer[0], layer[1]) for layer in kv]  # per layer (B, H, length, dh)

    enc_past, cross, past = layers(inputs.enc_past), layers(inputs.cross), layers(inputs.past)
    positions = torch.full((b,), t)  # (B,)
    past_valid = torch.ones(b, t, dtype=torch.bool)  # (B, T)
    cross_valid = torch.ones(b, s, dtype=torch.bool)  # (B, S)

    @torch.no_grad()
    def run() -> None:
        model.encode(ids[:, s - 2 :], past=enc_past, start=s - 2)
        model.decode_step(last, positions, past, past_valid, cross, cross_valid)

    return run
