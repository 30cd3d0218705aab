"""A corpus plus extra training pairs: a copy of a built corpus with one training-only source
appended (the augmentations and dictionaries of fine-tune experiments, scripts/*.py).

The copy's manifest lists the new source with its package and licence and the training files'
new checksums, so the model card states the data of a model trained on it."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from simulmt.data.build import write_atomic


def extend_corpus(
    corpus: Path,
    out: Path,
    pairs: Sequence[tuple[str, str]],
    *,
    source: str,
    package: str,
    licence: str,
    note: str,
) -> None:
    """Copy `corpus` to `out` and append `pairs` to its training split as source `source`
    (no dev or test lines: held-out splits stay those of the corpus)."""
    manifest = json.loads((corpus / "manifest.json").read_text(encoding="utf-8"))
    if source in manifest["sources"]:
        raise ValueError(f"{corpus} already has a source {source!r}: extend the original corpus")
    out.mkdir(parents=True, exist_ok=True)
    for f in corpus.iterdir():
        if f.is_file():
            shutil.copy(f, out / f.name)
    for lang, side in (("de", 0), ("en", 1)):
        with (out / f"train.{lang}").open("a", encoding="utf-8") as fh:
            fh.writelines(p[side] + "\n" for p in pairs)
    with (out / "train.source").open("a", encoding="utf-8") as fh:
        fh.writelines(f"{source}\n" for _ in pairs)
    manifest["sources"][source] = {
        "train": len(pairs), "dev": 0, "test": 0, "package": package, "licence": licence,
        "note": note,
    }
    manifest["splits"]["train"] += len(pairs)
    for name in ("train.de", "train.en", "train.source"):
        manifest["sha256"][name] = hashlib.sha256((out / name).read_bytes()).hexdigest()
    write_atomic(out / "manifest.json", json.dumps(manifest, indent=2) + "\n")
