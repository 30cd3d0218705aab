"""A model file in pieces small enough to come back from a machine that returns files of at most
16 MiB, and joined again, checked against the whole file's sha256."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

# 16 MiB is the limit per file that comes back; a little under it leaves room for nothing else
PIECE_BYTES = 16 * 2**20 - 4096
INDEX_SUFFIX = ".pieces.json"


class PiecesError(RuntimeError):
    """Pieces are missing, damaged or not of one file."""


def split_file(path: Path, out: Path, *, piece_bytes: int = PIECE_BYTES) -> list[Path]:
    """Write `path` as out/NAME.000, NAME.001, ... and out/NAME.pieces.json (sizes, sha256);
    returns every file written, the index last."""
    data = path.read_bytes()
    out.mkdir(parents=True, exist_ok=True)
    names, written = [], []
    for n, start in enumerate(range(0, max(len(data), 1), piece_bytes)):
        piece = out / f"{path.name}.{n:03d}"
        _write(piece, data[start : start + piece_bytes])
        names.append(piece.name)
        written.append(piece)
    index: dict[str, Any] = {"file": path.name, "bytes": len(data),
                             "sha256": hashlib.sha256(data).hexdigest(), "pieces": names}
    index_path = out / f"{path.name}{INDEX_SUFFIX}"
    _write(index_path, (json.dumps(index, indent=1) + "\n").encode())
    return [*written, index_path]


def find_index(folder: Path) -> Path:
    """The one pieces index in `folder`; PiecesError if there is none or several."""
    found = sorted(folder.glob(f"*{INDEX_SUFFIX}"))
    if len(found) != 1:
        raise PiecesError(f"{folder} holds {len(found)} piece indexes (*{INDEX_SUFFIX}); "
                          "expected one")
    return found[0]


def join_pieces(index_path: Path, out: Path) -> Path:
    """Join the pieces an index names (they lie beside it) into out/FILE; returns that path."""
    index = json.loads(index_path.read_text(encoding="utf-8"))
    parts = []
    for name in index["pieces"]:
        piece = index_path.parent / name
        if not piece.is_file():
            raise PiecesError(f"piece {piece} is missing ({len(index['pieces'])} expected)")
        parts.append(piece.read_bytes())
    data = b"".join(parts)
    if len(data) != index["bytes"] or hashlib.sha256(data).hexdigest() != index["sha256"]:
        raise PiecesError(f"the pieces of {index['file']} in {index_path.parent} do not join "
                          "into the file they were cut from (size or sha256 differ)")
    out.mkdir(parents=True, exist_ok=True)
    _write(out / index["file"], data)
    return out / index["file"]


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
