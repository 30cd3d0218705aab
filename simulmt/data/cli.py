"""Build the German–English corpus (`data build`) and its sentencepiece model (`data tokenizer`)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from simulmt.data.asr import recognizer_view
from simulmt.data.build import BuildConfig, BuildError, Lang, build_corpus
from simulmt.data.corpus import iter_split_side
from simulmt.data.sources import SOURCES, parse_sources
from simulmt.data.split import SplitConfig
from simulmt.data.src_local import LocalFiles, LocalSourceError, local_files, shared_sources
from simulmt.data.tokenizer import ModelType, TokenizerError, round_trip_count, train_tokenizer

logger = logging.getLogger(__name__)
DEFAULT_CACHE = Path("cache/raw")
DEFAULT_CORPORA = Path("../shared/corpora")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="data_command", required=True)
    build = sub.add_parser("build", help="download packages and build train/dev/test files")
    build.add_argument("--src", default="de", help="source language: de or en (default de)")
    build.add_argument("--tgt", default="en", help="target language: en or de (default en)")
    build.add_argument("--out", type=Path, required=True, help="output folder")
    build.add_argument("--sources", default=None,
                       help=f"comma-separated subset of: {', '.join(SOURCES)}, the shared "
                            "corpora found and the --local names (default all)")
    build.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA,
                       help="folder of the shared corpora (tatoeba/, europarl-wmt-test/; news "
                            f"test sets there are never used for training; default "
                            f"{DEFAULT_CORPORA} when it exists; 'none' to leave them out)")
    build.add_argument("--local", action="append", default=[], metavar="NAME=PATH",
                       help="your own parallel text as a source: PATH is X.tsv (German TAB "
                            "English) or X.de with X.en beside it; repeatable")
    build.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                       help=f"download/extraction cache (default {DEFAULT_CACHE})")
    build.add_argument("--min-heldout", type=int, default=SplitConfig.min_heldout_pairs,
                       help="fewest pairs dev and test must each have (default 1000)")
    build.add_argument("--heldout-fraction", type=float, default=SplitConfig.heldout_fraction,
                       help="share of each source held out for dev and for test (default 0.03)")
    build.add_argument("--no-progress", action="store_true", help="no progress bars")
    tok = sub.add_parser("tokenizer", help="train a joint sentencepiece model on the train split")
    tok.add_argument("--data", type=Path, required=True, help="corpus folder from `data build`")
    tok.add_argument("--out", type=Path, default=None, help="model folder (default: --data)")
    tok.add_argument("--vocab-size", type=int, default=8000, help="joint vocabulary (default 8000)")
    tok.add_argument("--model-type", default="unigram",
                     help=f"one of {', '.join(m.value for m in ModelType)} (default unigram)")
    tok.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    tok.add_argument("--recognizer-view", action="store_true",
                     help="also train on the recognizer view (lowercase, no punctuation) of the "
                          "source side, for models trained with asr_rate > 0")
    tok.add_argument("--separate", action="store_true",
                     help="one model per language in OUT/spm-LANG/ instead of one joint model")
    pack = sub.add_parser("pack", help="pack a corpus as compressed token ids with its tokenizer")
    pack.add_argument("--data", type=Path, required=True,
                      help="corpus folder (from `data build`, with spm.model)")
    pack.add_argument("--out", type=Path, required=True, help="pack folder to write")
    pack.add_argument("--tokenizer", type=Path, default=None,
                      help="sentencepiece model to pack with (default: DATA/spm.model)")
    pack.add_argument("--extra", action="append", default=[], metavar="NAME=PREFIX",
                      help="also pack PREFIX.de and PREFIX.en as NAME.de, NAME.en (e.g. a news "
                           "dev set); repeatable")
    pack.add_argument("--skip", action="append", default=[], metavar="FILE",
                      help="leave a corpus file out (e.g. test.de); repeatable")
    unpack = sub.add_parser("unpack", help="rebuild a packed corpus folder, byte for byte")
    unpack.add_argument("pack", type=Path, help="pack folder (with pack.json)")
    unpack.add_argument("--out", type=Path, required=True, help="corpus folder to write")


def _lang(value: str, flag: str) -> Lang:
    try:
        return Lang(value)
    except ValueError:
        raise BuildError(f"{flag} {value!r} is not supported; accepted: "
                         f"{', '.join(lang.value for lang in Lang)}") from None


def _table(manifest: dict[str, Any]) -> str:
    header = f"{'source':<12} {'train':>8} {'dev':>7} {'test':>7}  package"
    rows = [header, "-" * len(header)]
    for name, info in manifest["sources"].items():
        package = info["package"] if len(info["package"]) < 60 else info["package"][:57] + "..."
        rows.append(f"{name:<12} {info['train']:>8} {info['dev']:>7} {info['test']:>7}  {package}")
    s = manifest["splits"]
    rows.append(f"{'total':<12} {s['train']:>8} {s['dev']:>7} {s['test']:>7}")
    return "\n".join(rows)


def _local_files(args: argparse.Namespace) -> list[LocalFiles]:
    """The shared corpora (when their folder exists) and every --local NAME=PATH."""
    found = []
    if str(args.corpora) != "none" and args.corpora.is_dir():
        found = shared_sources(args.corpora)
    elif str(args.corpora) != "none" and args.corpora != DEFAULT_CORPORA:
        raise BuildError(f"--corpora {args.corpora} is not a folder; give the shared corpora "
                         "folder or 'none'")
    for item in args.local:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise BuildError(f"--local {item!r} must look like NAME=PATH (PATH: X.tsv or X.de "
                             "with X.en beside it)")
        found.append(local_files(name, Path(path)))
    names = [f.name for f in found]
    if len(set(names)) != len(names) or set(names) & set(SOURCES):
        raise BuildError(f"local source names must be unique and differ from {', '.join(SOURCES)};"
                         f" got {', '.join(names)}")
    return found


def _run_build(args: argparse.Namespace) -> int:
    start = time.monotonic()
    config = BuildConfig(out=args.out, cache=args.cache,
                         sources=tuple(parse_sources(args.sources, _local_files(args))),
                         src=_lang(args.src, "--src"), tgt=_lang(args.tgt, "--tgt"),
                         split=SplitConfig(heldout_fraction=args.heldout_fraction,
                                           min_heldout_pairs=args.min_heldout),
                         progress=not args.no_progress)
    manifest = build_corpus(config)
    print(_table(manifest))
    print(f"wrote {args.out} in {time.monotonic() - start:.0f} s")
    return 0


def _train_one(args: argparse.Namespace, langs: list[str], out: Path, *,
               recognizer: str | None = None) -> str:
    texts = [line for lang in langs for line in iter_split_side(args.data, "train", lang)]
    if recognizer in langs:
        texts += [recognizer_view(line) for line in iter_split_side(args.data, "train", recognizer)]
    path = train_tokenizer(texts, out, vocab_size=args.vocab_size, model_type=args.model_type,
                           seed=args.seed)
    dev = [line for lang in langs for line in iter_split_side(args.data, "dev", lang)]
    exact = round_trip_count(path, dev)
    return f"wrote {path}; dev round trip decode(encode(s)) == s: {exact}/{len(dev)}"


def _run_tokenizer(args: argparse.Namespace) -> int:
    if args.model_type not in {m.value for m in ModelType}:
        raise TokenizerError(f"--model-type {args.model_type!r} is not supported; accepted: "
                             f"{', '.join(m.value for m in ModelType)}")
    manifest_path = args.data / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{manifest_path} does not exist; build the corpus first with "
                                "`simulmt data build --out DIR`")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    langs = [manifest["src"], manifest["tgt"]]
    out = args.out or args.data
    recognizer = manifest["src"] if args.recognizer_view else None
    if args.separate:
        for lang in langs:
            print(_train_one(args, [lang], out / f"spm-{lang}", recognizer=recognizer))
    else:
        print(_train_one(args, langs, out, recognizer=recognizer))
    return 0


def _run_pack(args: argparse.Namespace) -> int:
    from simulmt.data.pack import PackConfig, pack_corpus

    extra = []
    for item in args.extra:
        name, sep, prefix = item.partition("=")
        if not sep or not name or not prefix:
            raise ValueError(f"--extra {item!r} must look like NAME=PREFIX")
        extra.append((name, Path(prefix)))
    manifest = pack_corpus(PackConfig(corpus=args.data, out=args.out, tokenizer=args.tokenizer,
                                      extra=tuple(extra), skip=tuple(args.skip)))
    files = manifest["files"].values()
    raw, packed = sum(f["bytes"] for f in files), sum(f["packed_bytes"] for f in files)
    kept = sum(len(f.get("verbatim", {})) for f in files)
    print(f"packed {len(manifest['files'])} files, {raw / 2**20:.1f} MiB -> {packed / 2**20:.2f} "
          f"MiB in {args.out} ({kept} lines kept verbatim)")
    return 0


def _run_unpack(args: argparse.Namespace) -> int:
    from simulmt.data.pack import unpack_corpus

    written = unpack_corpus(args.pack, args.out)
    print(f"unpacked {len(written)} files into {args.out}, each matching its sha256")
    return 0


def run(args: argparse.Namespace) -> int:
    from simulmt.data.pack import PackError

    commands = {"build": _run_build, "tokenizer": _run_tokenizer, "pack": _run_pack,
                "unpack": _run_unpack}
    try:
        return commands[args.data_command](args)
    except (BuildError, TokenizerError, LocalSourceError, PackError, ValueError,
            FileNotFoundError) as err:
        print(f"simulmt data {args.data_command}: {err}", file=sys.stderr)
        return 2
