"""`simulmt data build`: fetch, extract, clean, split and write a parallel corpus + manifest."""

from __future__ import annotations

import enum
import hashlib
import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from simulmt.data.clean import CleanConfig, clean_pairs
from simulmt.data.document import Document
from simulmt.data.packages import FetchError, extract, fetch, package_version
from simulmt.data.sources import Source
from simulmt.data.split import Split, SplitConfig, Tagged, assign_documents, split_pairs

logger = logging.getLogger(__name__)


class Lang(enum.Enum):
    """Languages the sources provide."""

    DE = "de"
    EN = "en"


class BuildError(RuntimeError):
    """The corpus cannot be built as asked; the message says why and what still works."""


@dataclass(frozen=True)
class BuildConfig:
    """Everything `build_corpus` needs."""

    out: Path
    cache: Path
    sources: tuple[Source, ...]
    src: Lang = Lang.DE  # German → English: the verb-final source of the simultaneous setting
    tgt: Lang = Lang.EN
    clean: CleanConfig = field(default_factory=CleanConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    progress: bool = True  # tqdm bars on stderr


def _bar(items: Sequence[Any], desc: str, unit: str, enabled: bool) -> Any:
    """A progress bar on stderr for one build stage."""
    return tqdm(items, desc=desc, unit=unit, disable=not enabled, leave=False)


def fetch_all(sources: Sequence[Source], cache: Path, *, progress: bool,
              fetcher: Callable[..., Path] = fetch) -> dict[str, list[Path]]:
    """Source name → its package archives; BuildError names failures and the sources that work."""
    archives: dict[str, list[Path]]
    failures: dict[str, str] = {}
    pairs = [(s, p) for s in sources for p in s.packages]
    archives = {s.name: [] for s in sources if not s.packages}  # local files: nothing to fetch
    for source, package in _bar(pairs, "download", "pkg", progress):
        if source.name in failures:
            continue
        try:
            archives.setdefault(source.name, []).append(fetcher(package, cache))
        except FetchError as err:
            failures[source.name] = str(err)
    if failures:
        working = [s.name for s in sources if s.name not in failures]
        lines = [f"  {name}: {why}" for name, why in failures.items()]
        hint = (f"--sources {','.join(working)} still works" if working
                else "no requested source can be fetched")
        raise BuildError("cannot fetch packages:\n" + "\n".join(lines) + f"\n{hint}")
    return archives


def extract_all(sources: Sequence[Source], archives: dict[str, list[Path]], cache: Path, *,
                progress: bool) -> dict[str, list[Path]]:
    """Source name → extraction roots (one per package, in the source's package order)."""
    roots: dict[str, list[Path]] = {s.name: [] for s in sources}
    jobs = [(s, a) for s in sources for a in archives[s.name]]
    for source, archive in _bar(jobs, "extract", "pkg", progress):
        dest = cache / "extracted" / archive.name.replace("%3a", "_")
        roots.setdefault(source.name, []).append(extract(archive, dest, source.patterns))
    return roots


def read_source(source: Source, roots: list[Path], config: BuildConfig) -> list[Document]:
    """Cleaned documents of a source; BuildError if it yields no pair at all."""
    docs = [Document(d.source, d.name, tuple(clean_pairs(d.pairs, config.clean)))
            for d in source.read(roots)]
    if not any(d.pairs for d in docs):
        raise BuildError(f"source {source.name!r} yielded no sentence pairs from "
                         f"{', '.join(str(r) for r in roots)}; drop it with --sources")
    logger.info("%s: %d documents, %d pairs", source.name, len(docs),
                sum(len(d.pairs) for d in docs))
    return docs


def write_atomic(path: Path, text: str) -> None:
    """Write `text` so that readers never see a half-written file (temporary file + rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_splits(out: Path, splits: dict[Split, list[Tagged]],
                 config: BuildConfig) -> dict[str, str]:
    """Write `{split}.{lang}` files; returns file name → sha256."""
    out.mkdir(parents=True, exist_ok=True)
    hashes: dict[str, str] = {}
    src_i, tgt_i = (0, 1) if config.src is Lang.DE else (1, 0)
    for split, tagged in splits.items():
        for lang, index in ((config.src, src_i), (config.tgt, tgt_i)):
            text = "".join(p[index] + "\n" for _, p in tagged)
            write_atomic(out / f"{split.value}.{lang.value}", text)
            hashes[f"{split.value}.{lang.value}"] = hashlib.sha256(text.encode()).hexdigest()
        labels = "".join(name + "\n" for name, _ in tagged)  # which source each line came from
        write_atomic(out / f"{split.value}.source", labels)
        hashes[f"{split.value}.source"] = hashlib.sha256(labels.encode()).hexdigest()
    return hashes


def make_manifest(config: BuildConfig, splits: dict[Split, list[Tagged]],
                  versions: dict[str, list[str]], hashes: dict[str, str],
                  heldout: dict[str, list[str]]) -> dict[str, Any]:
    """The manifest: direction, split sizes, per-source sizes and packages, held-out documents,
    file hashes."""
    per_source: dict[str, dict[str, Any]] = {}
    for source in config.sources:
        counts = {s.value: Counter(name for name, _ in splits[s])[source.name] for s in Split}
        per_source[source.name] = {**counts, "package": ", ".join(versions[source.name]),
                                   "licence": source.licence}
        if source.local is not None:
            per_source[source.name]["package"] = "local files"
            per_source[source.name]["files"] = source.local.describe()
    return {
        "src": config.src.value,
        "tgt": config.tgt.value,
        "splits": {s.value: len(splits[s]) for s in Split},
        "sources": per_source,
        "heldout_documents": heldout,
        "sha256": dict(sorted(hashes.items())),
    }


def build_corpus(config: BuildConfig) -> dict[str, Any]:
    """Build the corpus into `config.out`; returns the manifest (also written as manifest.json)."""
    if config.src is config.tgt:
        raise BuildError(f"--src and --tgt are both {config.src.value!r}; pick two of "
                         f"{', '.join(lang.value for lang in Lang)}")
    archives = fetch_all(config.sources, config.cache, progress=config.progress)
    roots = extract_all(config.sources, archives, config.cache, progress=config.progress)
    tagged: list[tuple[Split, str, Any]] = []
    heldout: dict[str, list[str]] = {Split.DEV.value: [], Split.TEST.value: []}
    for source in _bar(config.sources, "read+clean", "source", config.progress):
        docs = read_source(source, roots[source.name], config)
        assignment = assign_documents(docs, config.split)
        tagged.extend((assignment[d.name], d.source, pair) for d in docs for pair in d.pairs)
        for name, split in sorted(assignment.items()):
            if split is not Split.TRAIN:
                heldout[split.value].append(name)
    splits = split_pairs(tagged)
    for split in (Split.DEV, Split.TEST):
        if len(splits[split]) < config.split.min_heldout_pairs:
            raise BuildError(f"{split.value} split has {len(splits[split])} pairs, fewer than the "
                             f"required {config.split.min_heldout_pairs}; add sources")
    if not splits[Split.TRAIN]:
        raise BuildError("train split is empty; add sources")
    hashes = write_splits(config.out, splits, config)
    versions = {name: [package_version(a) for a in paths] for name, paths in archives.items()}
    manifest = make_manifest(config, splits, versions, hashes, heldout)
    write_atomic(config.out / "manifest.json", json.dumps(manifest, indent=2) + "\n")
    return manifest
