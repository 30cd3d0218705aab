"""Where training runs: the device, the process group of a multi-GPU (`torchrun`) run, the
optimizer that suits the device, and batches moved there without waiting for them."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NoReturn

import torch
import torch.distributed as dist

from simulmt.model.devices import DeviceError, resolve_device
from simulmt.model.precision import native_precisions
from simulmt.train.batches import Batch

log = logging.getLogger(__name__)

__all__ = ["DeviceError", "World", "agree", "end_rank", "leave_world", "make_optimizer",
           "pick_device", "setup_world", "to_device", "tune_for", "use_bf16"]


@dataclass(frozen=True)
class World:
    """This process's place in a `torchrun` launch (rank 0 of 1 when run alone)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0  # which GPU of this host the process drives


def pick_device(name: str, *, local_rank: int = 0) -> torch.device:
    """The training device (`simulmt.model.devices.resolve_device`), made this process's current GPU
    when it is one. DeviceError if cuda is asked for and absent."""
    device = resolve_device(name, local_rank=local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def setup_world(device_name: str) -> World:
    """Join the process group of a `torchrun` launch (NCCL on GPUs, gloo on CPUs); alone, nothing
    to join. Each rank trains on its own share of every step's batches."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if size <= 1:
        return World()
    if not dist.is_initialized():
        gpu = device_name != "cpu" and torch.cuda.is_available()
        dist.init_process_group("nccl" if gpu else "gloo")
    return World(rank=dist.get_rank(), size=size, local_rank=local)


def leave_world(world: World) -> None:
    """Leave the process group `setup_world` joined (torch asks every rank to, so that none
    blocks the others' teardown). It does not end gloo's threads after DDP: see `end_rank`."""
    if world.size > 1 and dist.is_initialized():
        dist.destroy_process_group()


def end_rank(code: int) -> NoReturn:
    """End a rank of a `torchrun` launch without the interpreter's teardown. In torch 2.13 a
    DistributedDataParallel, even deleted, keeps its process group alive in C++, so gloo's
    threads outlive `destroy_process_group`; a rank that then tears the interpreter down
    aborts now and then ("terminate called without an active exception", SIGABRT), failing a
    run that finished and saved. Everything is flushed first: nothing written is lost."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def agree(flag: bool, *, world: World, device: torch.device) -> bool:
    """True on every rank if it is true on any (one all-reduce; alone, the flag itself): ranks
    must stop at the same step, or the others wait forever for the one that left."""
    if world.size <= 1:
        return flag
    t = torch.tensor([int(flag)], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def make_optimizer(params: Iterable[torch.nn.Parameter], *, device: torch.device, lr: float,
                   betas: tuple[float, float], weight_decay: float) -> torch.optim.AdamW:
    """AdamW; on a GPU the fused kernel (one launch for all parameters instead of several per
    tensor). Its state dict is the same either way, so checkpoints move between devices."""
    fused = device.type == "cuda"
    return torch.optim.AdamW(params, lr=lr, betas=betas, weight_decay=weight_decay,
                             fused=fused or None)


def to_device(batch: Batch, device: torch.device) -> Batch:
    """The batch on `device`. To a GPU the copy goes through pinned memory without blocking, so
    the host can prepare the next batch while the GPU trains on this one."""
    if device.type == "cpu":
        return batch
    def move(t: torch.Tensor) -> torch.Tensor:
        return t.pin_memory().to(device, non_blocking=True)
    return Batch(src=move(batch.src), tgt_in=move(batch.tgt_in), tgt_out=move(batch.tgt_out),
                 vis=move(batch.vis), n_tokens=batch.n_tokens)


def use_bf16(asked: bool, device: torch.device) -> bool:
    """Whether to train under bfloat16 autocast: where the config asks (`bf16`) and the device
    computes in bfloat16 natively (a GPU that has it; a CPU with AVX512-BF16 or AMX). A CPU
    without those emulates it: de-en-base on an AVX2 EPYC trained 38 tokens/s in bf16 against
    665 in float32 (bench/train_throughput.py), so such a CPU trains in float32, and says so."""
    if not asked:
        return False
    gpu = device.type == "cuda"
    native = torch.cuda.is_bf16_supported() if gpu else "bfloat16" in native_precisions()
    if not native:
        log.warning("bf16 = true, but this %s has no bfloat16 arithmetic (emulated, many times "
                    "slower): training in float32", "GPU" if gpu else "CPU")
    return native


def tune_for(device: torch.device) -> None:
    """Settings that pay on the device: TF32 matmuls for what runs in float32 on a GPU."""
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.benchmark = False  # shapes change every batch
