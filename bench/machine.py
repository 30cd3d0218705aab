"""Where a benchmark ran: CPU model, torch's CPU capability, torch version, cores, load.

Speed figures hold for one kind of CPU only: int8 was 2x faster than float32 on a CPU with
AVX512-VNNI and 15-26x slower on one with AVX2 only (issue #55). Every script in bench/
prints `describe()` first, so every result says where it was measured.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux; the platform's guess elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def facts() -> dict[str, object]:
    import torch

    return {
        "cpu": cpu_model(),
        "capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "cores": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def describe() -> str:
    """One line: `machine: AMD EPYC | capability AVX2 | torch 2.13.0+cpu | 2 cores | load 0.4`."""
    f = facts()
    return (
        f"machine: {f['cpu']} | capability {f['capability']} | torch {f['torch']} | "
        f"{f['cores']} cores | load {f['load_avg_1m']}"
    )


if __name__ == "__main__":
    print(json.dumps(facts()))
