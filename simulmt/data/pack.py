"""A corpus that travels (`simulmt data pack` / `unpack`): compressed token ids and the tokenizer.

A corpus folder's text files (`{split}.{lang}`, the per-line `{split}.source` names, its
manifest) become one folder of xz streams and a `pack.json`. Text is stored as the project
tokenizer's ids (16-bit, lzma): ids are what training reads, and the pack carries the tokenizer
that turns them back into the exact text. A line the tokenizer cannot reproduce (odd spacing,
characters without a piece) is kept verbatim beside the ids, so unpacking gives back every file
byte for byte; the sha256 of each file, taken before packing, is checked on the way back.
"""

from __future__ import annotations

import hashlib
import json
import logging
import lzma
import os
import sys
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulmt.data.tokenizer import MODEL_FILE, SETTINGS_FILE, Tokenizer

log = logging.getLogger(__name__)

PACK_FORMAT = "simulmt-corpus-pack"
PACK_VERSION = 1  # raise when the layout changes; unpack refuses versions it does not know
PACK_FILE = "pack.json"
# the strongest xz preset: packing runs once, and every byte counts where the pack travels
XZ_PRESET = 9 | lzma.PRESET_EXTREME
MAX_ID = 0xFFFF  # ids are stored in 16 bits
LABELS = "source"  # `{split}.source`: which source each line of the split came from
VERBATIM = ("manifest.json", MODEL_FILE, SETTINGS_FILE)  # stored as they are (compressed)


class PackError(RuntimeError):
    """A pack cannot be written or read back; the message says which file and why."""


@dataclass(frozen=True)
class PackConfig:
    """What `pack_corpus` packs: a corpus folder and extra text sets beside it."""

    corpus: Path  # from `simulmt data build`, with spm.model (or `tokenizer`)
    out: Path  # the pack folder
    tokenizer: Path | None = None  # default: corpus/spm.model
    # extra parallel sets by name: prefix -> prefix.{src,tgt} (e.g. a news dev set that
    # lives outside the corpus), packed as name.{src,tgt}
    extra: tuple[tuple[str, Path], ...] = ()
    langs: tuple[str, ...] = ("de", "en")  # file suffixes packed as token ids
    # corpus files left out (e.g. the test split, or references a run replaces with a teacher's
    # translations): what travels is counted in bytes
    skip: tuple[str, ...] = ()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _u16(values: list[int]) -> bytes:
    arr = array("H", values)
    if sys.byteorder == "big":
        arr.byteswap()  # stored little-endian
    return arr.tobytes()


def _from_u16(data: bytes) -> list[int]:
    arr = array("H")
    arr.frombytes(data)
    if sys.byteorder == "big":
        arr.byteswap()
    return arr.tolist()


def encode_text(text: str, tok: Tokenizer) -> tuple[bytes, dict[str, str]]:
    """Text -> (xz of line lengths then ids, both uint16; lines kept verbatim by line number).
    Lines are split at "\\n" only, so the last (empty after a final newline) counts too."""
    lines = text.split("\n")
    lengths: list[int] = []
    ids: list[int] = []
    verbatim: dict[str, str] = {}
    for n, line in enumerate(lines):
        pieces = tok.encode(line) if line else []
        if tok.decode(pieces) != line or len(pieces) > MAX_ID:
            verbatim[str(n)] = line
            pieces = []
        lengths.append(len(pieces))
        ids.extend(pieces)
    count = [len(lines) & MAX_ID, len(lines) >> 16]  # the line count in 32 bits
    blob = _u16(count) + _u16(lengths) + _u16(ids)
    return lzma.compress(blob, preset=XZ_PRESET), verbatim


def decode_text(data: bytes, tok: Tokenizer, verbatim: dict[str, str]) -> str:
    """The inverse of `encode_text`."""
    values = _from_u16(lzma.decompress(data))
    n = values[0] | values[1] << 16
    lengths, ids = values[2 : 2 + n], values[2 + n :]
    lines, pos = [], 0
    for i, length in enumerate(lengths):
        text = verbatim.get(str(i))
        lines.append(text if text is not None else tok.decode(ids[pos : pos + length]))
        pos += length
    return "\n".join(lines)


def encode_labels(text: str) -> tuple[bytes, list[str]]:
    """Per-line names -> (xz of uint16 indices into the name table, the table)."""
    lines = text.split("\n")
    names = sorted(set(lines))
    index = {name: i for i, name in enumerate(names)}
    return lzma.compress(_u16([index[x] for x in lines]), preset=XZ_PRESET), names


def decode_labels(data: bytes, names: list[str]) -> str:
    return "\n".join(names[i] for i in _from_u16(lzma.decompress(data)))


def _sources(config: PackConfig) -> dict[str, Path]:
    """File name in the pack -> the file it is read from."""
    found: dict[str, Path] = {}
    suffixes = {*config.langs, LABELS}
    if not config.corpus.is_dir():
        raise PackError(f"no corpus folder {config.corpus}: give --data the folder `simulmt data "
                        "build` wrote")
    for path in sorted(config.corpus.iterdir()):
        if path.name in config.skip:
            continue
        if path.is_file() and (path.name in VERBATIM or path.suffix.lstrip(".") in suffixes):
            found[path.name] = path
    unknown = set(config.skip) - {p.name for p in config.corpus.iterdir()}
    if unknown:
        raise PackError(f"--skip names files not in {config.corpus}: {sorted(unknown)}")
    if config.tokenizer is not None:
        found[MODEL_FILE] = config.tokenizer
    if MODEL_FILE not in found:
        raise PackError(f"no {MODEL_FILE} in {config.corpus}: the pack needs the tokenizer "
                        "(copy the model's spm.model there, or give --tokenizer)")
    for name, prefix in config.extra:
        for lang in config.langs:
            path = Path(f"{prefix}.{lang}")
            if not path.is_file():
                raise PackError(f"extra set {name!r}: {path} does not exist")
            found[f"{name}.{lang}"] = path
    return found


def pack_corpus(config: PackConfig) -> dict[str, Any]:
    """Write the pack folder; returns its manifest (also written as pack.json)."""
    files = _sources(config)
    tok = Tokenizer.load(files[MODEL_FILE])
    if tok.vocab_size > MAX_ID + 1:
        raise PackError(f"the tokenizer has {tok.vocab_size} pieces; ids must fit 16 bits")
    config.out.mkdir(parents=True, exist_ok=True)
    entries: dict[str, dict[str, Any]] = {}
    for name, path in files.items():
        raw = path.read_bytes()
        entry: dict[str, Any] = {"sha256": _sha(raw), "bytes": len(raw)}
        suffix = Path(name).suffix.lstrip(".")
        if name in VERBATIM:
            blob, entry["kind"] = lzma.compress(raw, preset=XZ_PRESET), "bytes"
        elif suffix == LABELS:
            blob, entry["names"] = encode_labels(raw.decode("utf-8"))
            entry["kind"] = "labels"
        else:
            blob, entry["verbatim"] = encode_text(raw.decode("utf-8"), tok)
            entry["kind"] = "tokens"
        entry["blob"] = f"{name}.xz"
        _write(config.out / entry["blob"], blob)
        entry["packed_bytes"] = len(blob)
        entries[name] = entry
        log.info("packed %s: %d -> %d bytes", name, len(raw), len(blob))
    manifest = {"format": PACK_FORMAT, "version": PACK_VERSION, "langs": list(config.langs),
                "tokenizer": MODEL_FILE, "files": entries}
    _write(config.out / PACK_FILE, (json.dumps(manifest, indent=1) + "\n").encode())
    return manifest


def read_manifest(pack: Path) -> dict[str, Any]:
    """pack.json, checked to be a pack of a version this code reads."""
    path = pack / PACK_FILE
    if not path.is_file():
        raise PackError(f"{path} does not exist: {pack} is not a corpus pack")
    manifest: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if manifest.get("format") != PACK_FORMAT:
        raise PackError(f"{path} is not a {PACK_FORMAT} (format {manifest.get('format')!r})")
    if manifest.get("version") != PACK_VERSION:
        raise PackError(f"{path} is version {manifest.get('version')}; this simulmt reads "
                        f"version {PACK_VERSION}")
    return manifest


def unpack_corpus(pack: Path, out: Path) -> list[Path]:
    """Rebuild every packed file into `out`, each checked against its sha256; returns them."""
    manifest = read_manifest(pack)
    files: dict[str, dict[str, Any]] = manifest["files"]
    model = lzma.decompress((pack / files[MODEL_FILE]["blob"]).read_bytes())
    tok = Tokenizer.from_bytes(model)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, entry in files.items():
        blob = (pack / entry["blob"]).read_bytes()
        if entry["kind"] == "bytes":
            raw = lzma.decompress(blob)
        elif entry["kind"] == "labels":
            raw = decode_labels(blob, entry["names"]).encode("utf-8")
        elif entry["kind"] == "tokens":
            raw = decode_text(blob, tok, entry["verbatim"]).encode("utf-8")
        else:
            raise PackError(f"{name}: unknown kind {entry['kind']!r} in {pack / PACK_FILE}")
        if _sha(raw) != entry["sha256"]:
            raise PackError(f"{name} unpacked from {pack} differs from the packed file "
                            "(sha256 mismatch): the pack is damaged")
        _write(out / name, raw)
        written.append(out / name)
    return written


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
