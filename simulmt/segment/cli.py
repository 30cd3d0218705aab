"""Train the sentence-boundary detector (`simulmt train-segmenter`).

    simulmt train-segmenter --text europarl.de --dev-text newstest2013.de \
        --test-text heldout.de --out cache/segmenter/segmenter.pt

Training text is German in document order, one sentence a line (blank lines end documents),
from `--text` files and/or a corpus folder (`--data`, lines grouped by their .source label).
Consecutive sentences are joined into streams, shown as typed text and as recognizer output.
Each lookahead head's threshold is tuned on the dev text; then boundary F1 on the test text
(recognizer and text views) and the cost per word of the streaming segmenter are printed.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from simulmt.segment.data import Stream, corpus_documents, make_stream, read_documents
from simulmt.segment.model import (
    Encoder,
    SegmenterConfig,
    SegmenterError,
    SegmenterNet,
    load_segmenter,
    save_segmenter,
)
from simulmt.segment.stream import Segmenter
from simulmt.segment.train import FitConfig, fit, score, tune_thresholds
from simulmt.segment.views import SourceStyle

log = logging.getLogger(__name__)
REPORT_LOOKAHEADS = (0, 2, 4)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--out", type=Path, required=True, help="segmenter file to write (or score, --score-only)")
    a("--data", type=Path, default=None, help="corpus folder of `simulmt data build` (train split)")
    a("--lang", default="de", help="language of the corpus files (default de)")
    a("--text", type=Path, action="append", default=[], help="training text file (repeatable)")
    a(
        "--dev-text",
        type=Path,
        action="append",
        default=[],
        help="dev text for thresholds (repeatable; default: the corpus dev split)",
    )
    a(
        "--test-text",
        type=Path,
        action="append",
        default=[],
        help="held-out text to report boundary F1 on (repeatable)",
    )
    a("--encoder", choices=[e.value for e in Encoder], default=SegmenterConfig.encoder.value)
    a("--hidden", type=int, default=SegmenterConfig.hidden)
    a("--dim", type=int, default=SegmenterConfig.dim)
    a("--buckets", type=int, default=SegmenterConfig.buckets)
    a("--window", type=int, default=SegmenterConfig.window, help="words a window encoder sees")
    a("--max-lookahead", type=int, default=SegmenterConfig.max_lookahead)
    a("--steps", type=int, default=FitConfig.steps)
    a("--batch", type=int, default=FitConfig.batch)
    a("--length", type=int, default=FitConfig.length, help="words per training window")
    a("--lr", type=float, default=FitConfig.lr)
    a("--seed", type=int, default=FitConfig.seed)
    a("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    a("--score-only", action="store_true", help="score the existing --out file, no training")
    a(
        "--set-threshold",
        action="append",
        default=[],
        metavar="LOOKAHEAD=P",
        help="decision threshold of one lookahead head, instead of the dev-tuned F1 optimum "
        "(repeatable; with --score-only the --out file is rewritten with it)",
    )
    a("--json", action="store_true", help="print the report as one JSON object")
    a("--no-progress", action="store_true")


def _documents(args: argparse.Namespace, paths: list[Path], split: str) -> list[list[str]]:
    docs = [d for p in paths for d in read_documents(p)]
    if not paths and args.data is not None:
        docs = corpus_documents(args.data, split, args.lang)
    return docs


def _streams(docs: list[list[str]], buckets: int) -> dict[SourceStyle, Stream]:
    return {style: make_stream(docs, style, buckets) for style in SourceStyle}


def cost_per_word_us(seg: Segmenter, words: list[str]) -> float:
    """Mean wall time of `Segmenter.push` per word, in microseconds."""
    seg.reset()
    t = time.perf_counter()
    seg.push_many(words)
    seg.reset()
    return (time.perf_counter() - t) / max(1, len(words)) * 1e6


def _train(args: argparse.Namespace, buckets: int) -> SegmenterNet:
    train_docs = _documents(args, args.text, "train") if args.text else []
    if args.data is not None:
        train_docs += corpus_documents(args.data, "train", args.lang)
    if not train_docs:
        raise ValueError("no training text: give --text FILE and/or --data CORPUS_DIR")
    cfg = SegmenterConfig(
        encoder=Encoder(args.encoder),
        buckets=buckets,
        dim=args.dim,
        hidden=args.hidden,
        window=args.window,
        max_lookahead=args.max_lookahead,
    )
    fit_cfg = FitConfig(
        steps=args.steps, batch=args.batch, length=args.length, lr=args.lr, seed=args.seed
    )
    torch.manual_seed(args.seed)
    net = SegmenterNet(cfg)
    streams = _streams(train_docs, buckets)
    log.info("training on %d documents, %d words", len(train_docs), len(streams[SourceStyle.TEXT]))
    with tqdm(total=fit_cfg.steps, desc="segmenter", disable=args.no_progress) as bar:

        def progress(step: int, loss: float) -> None:
            bar.update(1)
            if step % 50 == 0:
                bar.set_postfix(loss=f"{loss:.3f}")

        fit(net, streams, fit_cfg, progress=progress)
    return net


def parse_thresholds(items: list[str], max_lookahead: int) -> dict[int, float]:
    """`--set-threshold` values ("2=0.25") as {lookahead: threshold}, or ValueError."""
    out: dict[int, float] = {}
    for item in items:
        head, sep, value = item.partition("=")
        try:
            lk, p = int(head), float(value)
        except ValueError:
            lk, p = -1, -1.0
        if not sep or not 0 <= lk <= max_lookahead or not 0.0 < p < 1.0:
            raise ValueError(
                f"--set-threshold {item!r}: expected LOOKAHEAD=P with LOOKAHEAD in "
                f"0..{max_lookahead} and P in (0, 1), e.g. 2=0.25"
            )
        out[lk] = p
    return out


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    try:
        if args.score_only:
            net, meta = load_segmenter(args.out)
            chosen = parse_thresholds(args.set_threshold, net.cfg.max_lookahead)
            if chosen:
                _set_thresholds(net, chosen, meta)
                save_segmenter(args.out, net, meta=meta)
        else:
            net, meta = _train(args, args.buckets), {}
        dev_docs = _documents(args, args.dev_text, "dev")
        if not args.score_only:
            if dev_docs:
                dev = _streams(dev_docs, net.cfg.buckets)
                th = tune_thresholds(net, [dev[SourceStyle.TEXT], dev[SourceStyle.ASR]])
                log.info("dev-tuned thresholds per lookahead: %s", th)
            meta = {
                "train": [str(p) for p in args.text] + ([str(args.data)] if args.data else []),
                "dev": [str(p) for p in args.dev_text],
                "steps": args.steps,
            }
            _set_thresholds(net, parse_thresholds(args.set_threshold, net.cfg.max_lookahead),
                            meta)
            save_segmenter(args.out, net, meta=meta)
        report = _report(args, net)
    except (FileNotFoundError, ValueError, SegmenterError) as e:
        print(f"simulmt train-segmenter: {e}", file=sys.stderr)
        return 2
    report["file"] = str(args.out)
    report["bytes"] = args.out.stat().st_size
    if args.json:
        print(json.dumps(report))
    else:
        _print_report(report)
    return 0


def _set_thresholds(net: SegmenterNet, chosen: dict[int, float], meta: dict[str, Any]) -> None:
    """Set heads' thresholds by hand; the file's metadata records which were set."""
    for lk, p in chosen.items():
        net.thresholds[lk] = p
        log.info("lookahead %d: threshold set to %.2f", lk, p)
    if chosen:
        manual = dict(meta.get("thresholds_set", {}))
        manual.update({str(lk): p for lk, p in chosen.items()})
        meta["thresholds_set"] = manual


def _report(args: argparse.Namespace, net: SegmenterNet) -> dict[str, object]:
    report: dict[str, object] = {
        "config": net.cfg.to_dict(),
        "thresholds": [round(float(t), 2) for t in net.thresholds],
    }
    test_docs = [d for p in args.test_text for d in read_documents(p)]
    if not test_docs:
        return report
    lookaheads = [lk for lk in REPORT_LOOKAHEADS if lk <= net.cfg.max_lookahead]
    for style in (SourceStyle.ASR, SourceStyle.TEXT):
        stream = make_stream(test_docs, style, net.cfg.buckets)
        report[f"f1_{style.value}"] = [s.as_dict() for s in score(net, stream, lookaheads)]
        if style is SourceStyle.ASR:
            words = stream.words[:5000]
            report["us_per_word"] = cost_per_word_us(Segmenter(net, lookahead=0), words)
            report["test_words"] = len(stream)
    return report


def _print_report(report: dict[str, object]) -> None:
    print(
        f"segmenter {report['file']} ({int(report['bytes']) // 1024} KiB)",  # type: ignore[call-overload]
        f"config {report['config']} thresholds {report['thresholds']}",
    )
    for style in ("asr", "text"):
        rows = report.get(f"f1_{style}")
        if isinstance(rows, list):
            for r in rows:
                print(
                    f"  {style:4s} lookahead {r['lookahead']}: P {r['precision']:.3f} "
                    f"R {r['recall']:.3f} F1 {r['f1']:.3f} ({r['boundaries']} boundaries)"
                )
    if "us_per_word" in report:
        print(f"  cost: {report['us_per_word']:.0f} us per word (streaming push, 1 thread)")
