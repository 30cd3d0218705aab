"""Our weight files on disk: written atomically, read back with weights_only=True and checked.

Models, sentence-boundary detectors and learned policies each have a format tag and an error
type of their own, but fail in the same ways (missing, truncated, someone else's file, an entry
missing), so one reader says what went wrong for all three, in the same words.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

__all__ = ["load_checked", "save_atomic"]

# what torch.load raises on a truncated or foreign file
_READ_ERRORS = (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, OSError)


def save_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write via a temp file and a rename, so a crash never leaves a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_checked(
    path: Path,
    *,
    fmt: str,
    keys: Iterable[str],
    error: type[Exception],
    what: str,
    kind: str,
    hint: str = "",
) -> dict[str, Any]:
    """The file's dict, once it exists, loads, carries format `fmt` and every key in `keys`.

    Raises `error` naming the file: "{what} PATH does not exist", "... is corrupt or truncated",
    "PATH is not a {kind} (expected ...)", "... has no 'KEY' entry", each followed by `hint`
    (e.g. how to make a good one) when given.
    """
    tail = f"; {hint}" if hint else ""
    if not path.is_file():
        raise error(f"{what} {path} does not exist{tail}")
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except _READ_ERRORS as e:
        raise error(f"{what} {path} is corrupt or truncated ({_reason(e)}){tail}") from e
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise error(f"{path} is not a {kind} (expected a dict with format={fmt!r}){tail}")
    for key in keys:
        if key not in data:
            raise error(f"{what} {path} has no {key!r} entry{tail}")
    return data


def _reason(e: BaseException) -> str:
    """torch.load's complaint in one line. For a file its safe loader refuses, torch explains
    `weights_only` over several lines and suggests loading it unsafely; our files never need
    that (they hold tensors and primitives only), so only the refusal's first sentence is kept,
    e.g. "Unsupported operand 12" for random bytes."""
    text = str(e)
    marker = "WeightsUnpickler error:"
    if marker in text:
        text = text.split(marker, 1)[1]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(e).__name__
    return f"{type(e).__name__}: {lines[0].split('. ', 1)[0]}"  # its first sentence
