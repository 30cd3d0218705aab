"""Which device a command runs its model on (`--device` of train, eval and serve): one resolver
and one error for all of them. Inference-side: training imports it, never the other way."""

from __future__ import annotations

import torch

DEVICES = "auto, cpu, cuda, cuda:N"


class DeviceError(ValueError):
    """The device asked for is not there or not known; the message says what is."""


def resolve_device(name: str, *, local_rank: int = 0) -> torch.device:
    """auto: cuda if torch sees a GPU, else cpu; cuda: GPU `local_rank` (each torchrun process
    its own). DeviceError if cuda is asked for and absent, or the name is no device."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DeviceError(f"device {name!r} is not supported; accepted: {DEVICES}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"device {name!r} asked for, but this torch ({torch.__version__}) "
                              "sees no CUDA GPU; use --device cpu (or auto)")
        if device.index is None:
            device = torch.device("cuda", local_rank % torch.cuda.device_count())
    elif device.type != "cpu":
        raise DeviceError(f"device {name!r} is not supported; accepted: {DEVICES}")
    return device


def use_device(device: torch.device) -> None:
    """Make `device` the default of new tensors in the calling thread, the one that runs the
    model work (search and cache code build their index tensors without naming a device)."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.set_default_device(device)


def cpu_flags() -> dict[str, object] | None:
    """The CPU's instruction-set flags as torch reads them ("avx512_vnni", "amx_int8",
    "avx512_bf16", …), or None on a torch without `torch.cpu.get_capabilities`. torch's one-word
    capability ("AVX512") does not say whether the int8/bf16 instructions are there."""
    get = getattr(torch.cpu, "get_capabilities", None)
    return dict(get()) if callable(get) else None
