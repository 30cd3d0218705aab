"""`run.json`: what produced an evaluation folder, so that its scores can be reproduced.

scores.json says what a run measured; `run.json` says with what: the model, the precision that
actually ran (`--dtype auto` picks one by timing, so the same command can run int8 on one CPU
and float32 on another), every option as parsed and as resolved, the test set, the software
and the machine. `config.yaml` cannot carry this: SimulEval's `--score-only` rewrites it with
its two keys.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import hashlib
import json
import os
import platform
from datetime import UTC, datetime
from pathlib import Path

import sacrebleu
import torch
from simulmt.eval.options import RunConfig

import simulmt
from simulmt.engine import Engine, default_model_dir

__all__ = ["RUN_JSON", "run_context", "write_run_record"]

RUN_JSON = "run.json"


def run_context(
    args: argparse.Namespace, engine: Engine, config: RunConfig, *, items: int
) -> dict[str, object]:
    """What every policy of one evaluation shares (worked out once: the test set is hashed
    once, not per policy of a sweep): `args` as the command line parsed them, `config` as the
    run resolved them (`--input-kind auto` decided), `items` lines or documents."""
    return {
        "model": {
            "name": engine.info.name,
            "folder": str(Path(args.model).resolve() if args.model else default_model_dir()),
            "parameters": engine.info.parameters,
        },
        "precision": {"asked": args.dtype, "ran": engine.precision},
        "device": engine.device.type,
        "test_set": {
            "source": str(Path(args.source).resolve()),
            "source_sha256": _sha256(Path(args.source)),
            "reference": str(Path(args.reference).resolve()),
            "reference_sha256": _sha256(Path(args.reference)),
            "items": items,
        },
        "run_config": _plain(dataclasses.asdict(config)),
        "arguments": _plain({k: v for k, v in vars(args).items() if not k.startswith("_")}),
        "software": {
            "simulmt": simulmt.__version__,
            "torch": torch.__version__,
            "sacrebleu": sacrebleu.__version__,
            "python": platform.python_version(),
        },
        "machine": {
            "cpu": _cpu_name(),
            "capability": torch.backends.cpu.get_cpu_capability(),
            "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
        },
    }


def write_run_record(directory: Path, context: dict[str, object], *, policy: str) -> None:
    """`run.json` of one policy's folder: `context` (`run_context`) with the policy and when
    its run finished."""
    directory.mkdir(parents=True, exist_ok=True)
    record = {
        "policy": policy,
        **context,
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    text = json.dumps(record, indent=2, ensure_ascii=False) + "\n"
    (directory / RUN_JSON).write_text(text, encoding="utf-8")


def _plain(value: object) -> object:
    """`value` with enums as their values and paths as strings (JSON's types only)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _sha256(path: Path) -> str | None:
    """The file's SHA-256 (which test set exactly); None for a folder of documents."""
    if not path.is_file():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cpu_name() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo; elsewhere what `platform` knows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
