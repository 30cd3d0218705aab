"""Train the case and comma restorer (`simulmt train-restorer`).

    simulmt train-restorer --data cache/corpus --test-text newstest2013.de \
        --out simulmt/models/de-en/restorer.pt

Training text is German as written, one sentence a line, from a corpus folder (`--data`, the
train split, lines grouped by their .source label) and/or `--text` files (blank lines end
documents). Labels come from the text itself: each word's case and the punctuation after it.
Then case accuracy and comma precision/recall on `--test-text` are printed per lookahead.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from simulmt.restore.model import (
    RestorerConfig,
    RestorerError,
    RestorerNet,
    load_restorer,
    save_restorer,
)
from simulmt.restore.stream import Restorer
from simulmt.restore.train import FitConfig, Sentences, fit, score
from simulmt.segment.data import corpus_documents, read_documents

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--out", type=Path, required=True, help="restorer file to write (or score, --score-only)")
    a("--data", type=Path, default=None, help="corpus folder of `simulmt data build` (train split)")
    a("--lang", default="de", help="language of the corpus files (default de)")
    a("--text", type=Path, action="append", default=[], help="training text file (repeatable)")
    a(
        "--test-text",
        type=Path,
        action="append",
        default=[],
        help="held-out written text to report accuracy on (repeatable)",
    )
    a("--buckets", type=int, default=RestorerConfig.buckets)
    a("--dim", type=int, default=RestorerConfig.dim)
    a("--hidden", type=int, default=RestorerConfig.hidden)
    a("--max-lookahead", type=int, default=RestorerConfig.max_lookahead)
    a("--steps", type=int, default=FitConfig.steps)
    a("--batch", type=int, default=FitConfig.batch)
    a("--max-run", type=int, default=FitConfig.max_run,
      help=f"sentences joined into one example, at most (default {FitConfig.max_run})")
    a("--max-words", type=int, default=FitConfig.max_words,
      help=f"words of one example, at most (default {FitConfig.max_words})")
    a("--lr", type=float, default=FitConfig.lr)
    a("--seed", type=int, default=FitConfig.seed)
    a("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    a("--score-only", action="store_true", help="score the existing --out file, no training")
    a("--json", action="store_true", help="print the report as one JSON object")
    a("--no-progress", action="store_true")


def cost_per_word_us(restorer: Restorer, words: list[str]) -> float:
    """Mean wall time of `Restorer.push` per word, in microseconds (what a session pays)."""
    restorer.reset()
    t = time.perf_counter()
    for w in words:
        restorer.push(w)
    restorer.finish()
    return (time.perf_counter() - t) / max(1, len(words)) * 1e6


def _train(args: argparse.Namespace) -> RestorerNet:
    docs = [d for p in args.text for d in read_documents(p)]
    if args.data is not None:
        docs += corpus_documents(args.data, "train", args.lang)
    if not docs:
        raise ValueError("no training text: give --text FILE and/or --data CORPUS_DIR")
    cfg = RestorerConfig(
        buckets=args.buckets, dim=args.dim, hidden=args.hidden, max_lookahead=args.max_lookahead
    )
    fit_cfg = FitConfig(steps=args.steps, batch=args.batch, max_run=args.max_run,
                        max_words=args.max_words, lr=args.lr, seed=args.seed)
    data = Sentences.from_documents(docs, cfg.buckets)
    log.info("training on %d sentences in %d documents", len(data), len(data.documents))
    torch.manual_seed(args.seed)
    net = RestorerNet(cfg)
    with tqdm(total=fit_cfg.steps, desc="restorer", disable=args.no_progress) as bar:

        def progress(step: int, loss: float) -> None:
            bar.update(1)
            if step % 50 == 0:
                bar.set_postfix(loss=f"{loss:.3f}")

        fit(net, data, fit_cfg, progress=progress)
    return net


def run(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    try:
        if args.score_only:
            net, meta = load_restorer(args.out)
        else:
            net = _train(args)
            meta = {
                "train": [str(p) for p in args.text] + ([str(args.data)] if args.data else []),
                "steps": args.steps,
            }
            save_restorer(args.out, net, meta=meta)
            net, meta = load_restorer(args.out)  # score what was saved (int8 and fp16 weights)
        report: dict[str, object] = {"config": net.cfg.to_dict(), "meta": meta}
        test_docs = [d for p in args.test_text for d in read_documents(p)]
        if test_docs:
            data = Sentences.from_documents(test_docs, net.cfg.buckets)
            lookaheads = range(net.cfg.max_lookahead + 1)
            report["scores"] = [s.as_dict() for s in score(net, data, lookaheads)]
            words = [w for item in data.items for w in item.words][:5000]
            report["us_per_word"] = cost_per_word_us(Restorer(net, lookahead=0), words)
    except (FileNotFoundError, ValueError, RestorerError) as e:
        print(f"simulmt train-restorer: {e}", file=sys.stderr)
        return 2
    report["file"] = str(args.out)
    report["bytes"] = args.out.stat().st_size
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"restorer {args.out} ({int(args.out.stat().st_size) // 1024} KiB), config {net.cfg}")
    for s in report.get("scores", []):  # type: ignore[attr-defined]
        print(
            f"  lookahead {s['lookahead']}: case {s['case_accuracy']:.3f}, comma P "
            f"{s['comma_precision']:.2f} R {s['comma_recall']:.2f} ({s['words']} words)"
        )
    if "us_per_word" in report:
        print(f"  cost: {report['us_per_word']:.0f} us per word (streaming push, 1 thread)")
    return 0
