"""Where a benchmark ran: CPU model, torch's CPU capability, torch version, cores, load.

Speed figures hold for one kind of CPU only: int8 was 2x faster than float32 on a CPU with
AVX512-VNNI and 15-26x slower on one with AVX2 only (issue #55). Every script in bench/
prints `describe()` first, so every result says where it was measured. An AVX512 machine can
stand in for an AVX2-only one when each library under torch is held to AVX2 (`AVX2_ONLY`); the
line then names the variables that were set, since the CPU model alone no longer says it.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

# What holds each library under torch to AVX2 on a newer CPU: ATen's own kernels, oneDNN
# (bfloat16), fbgemm (int8) and MKL (float32 GEMM). ATen's alone leaves the others on AVX512:
# fbgemm's int8 then ran up to 2x faster than under its own AVX2 limit (session 45).
AVX2_ONLY = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}
# The instructions that decide which precision is fast (the capability name does not say).
PRECISION_FLAGS = ("avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16")


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux; the platform's guess elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def isa_limits() -> dict[str, str]:
    """The instruction-set limits set in this environment (the names in `AVX2_ONLY`)."""
    return {k: os.environ[k] for k in AVX2_ONLY if os.environ.get(k)}


def precision_flags() -> list[str]:
    """Which of `PRECISION_FLAGS` this CPU has, as torch reads them."""
    import torch

    get = getattr(torch.cpu, "get_capabilities", None)
    flags = dict(get()) if callable(get) else {}
    return [f for f in PRECISION_FLAGS if flags.get(f)]


def facts() -> dict[str, object]:
    import torch

    return {
        "cpu": cpu_model(),
        "capability": torch.backends.cpu.get_cpu_capability(),
        "int8_bf16_instructions": precision_flags(),
        "isa_limits": isa_limits(),
        "torch": torch.__version__,
        "cores": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def describe() -> str:
    """One line: `machine: AMD EPYC | capability AVX2 | int8/bf16: none | torch 2.13.0+cpu |
    2 cores | load 0.4`, and `| limited: ATEN_CPU_CAPABILITY=avx2 ...` where limits are set."""
    f = facts()
    line = (
        f"machine: {f['cpu']} | capability {f['capability']} | "
        f"int8/bf16: {' '.join(precision_flags()) or 'none'} | "
        f"torch {f['torch']} | {f['cores']} cores | load {f['load_avg_1m']}"
    )
    limits = isa_limits()
    if limits:
        line += " | limited: " + " ".join(f"{k}={v}" for k, v in limits.items())
    return line


if __name__ == "__main__":
    print(json.dumps(facts()))
