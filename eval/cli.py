"""Evaluate policies on a test set: BLEU, chrF and latency (AL, LAAL, DAL, AP, CA-AL, flicker)."""

from __future__ import annotations

import argparse
import json
import logging
import re
from pathlib import Path

from simulmt.eval.corpus import (
    EmptyHypothesis,
    LatencyConfig,
    TargetLength,
    corpus_latency,
    sentence_latency,
)
from simulmt.eval.quality import corpus_quality
from simulmt.eval.report import PolicyResult, format_table
from simulmt.eval.sweep import expand_sweep

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a(
        "--policy",
        action="append",
        default=[],
        metavar="SPEC",
        help="policy spec, e.g. wait-k:k=3 (repeatable)",
    )
    a(
        "--sweep",
        action="append",
        default=[],
        metavar="SWEEP",
        help="several specs at once, e.g. 'wait-k:k=1,3,5,7,9' (repeatable)",
    )
    a("--source", type=Path, required=True, help="source sentences, one per line")
    a("--reference", type=Path, required=True, help="reference translations, one per line")
    a("--beam", type=int, default=1, help="beam size (default 1: greedy)")
    a("--model", type=Path, default=None, help="model folder (default: the bundled model)")
    a(
        "--output",
        type=Path,
        default=None,
        help="write instances.log, scores.tsv, metrics.tsv per policy into DIR/<policy>/",
    )
    a("--json", action="store_true", help="print one JSON object per policy instead of a table")
    a(
        "--rate",
        type=float,
        default=LatencyConfig.rate,
        help="simulated speaking rate in source words/s for CA-AL (default 2.5)",
    )
    a(
        "--hyp-len",
        action="store_true",
        help="AL and AP divide by the hypothesis length instead of the reference length",
    )
    a(
        "--empty",
        choices=[e.value for e in EmptyHypothesis],
        default=EmptyHypothesis.FULL_LATENCY.value,
        help="latency of empty hypotheses: full-latency (default: |X|) or skip (SimulEval)",
    )
    a("--batch-size", type=int, default=32, help="sentences simulated together (default 32)")
    a("--limit", type=int, default=None, help="only the first N sentences")
    a(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's choice; 1 avoids contention on a busy machine)",
    )
    a("--no-progress", action="store_true", help="no progress bar")


def read_lines(path: Path, what: str, limit: int | None) -> list[str]:
    if not path.is_file():
        raise FileNotFoundError(f"{what} file {path} not found")
    lines = path.read_text(encoding="utf-8").splitlines()
    return lines[:limit] if limit is not None else lines


def policy_dir_name(spec: str) -> str:
    """A folder name for a spec: wait-k:k=3 -> wait-k_k=3 (only [A-Za-z0-9._=-] kept)."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", spec.replace(":", "_")).strip("_")


def _check_counts(args: argparse.Namespace) -> None:
    for name in ("beam", "batch_size", "limit", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")


def _specs(args: argparse.Namespace) -> list[str]:
    specs = list(args.policy)
    for sweep in args.sweep:
        specs += expand_sweep(sweep)
    if not specs:
        raise ValueError("give at least one --policy SPEC or --sweep SWEEP")
    return specs


def run(args: argparse.Namespace) -> int:
    try:
        _check_counts(args)
        specs = _specs(args)
        latency_config = LatencyConfig(
            target_length=TargetLength.HYPOTHESIS if args.hyp_len else TargetLength.REFERENCE,
            empty=EmptyHypothesis(args.empty),
            rate=args.rate,
        )
        sources = read_lines(args.source, "source", args.limit)
        references = read_lines(args.reference, "reference", args.limit)
        results = _evaluate_all(args, specs, sources, references, latency_config)
    except (FileNotFoundError, ValueError) as e:
        log.error("%s", e)
        return 2
    if args.json:
        for r in results:
            print(json.dumps(r.as_dict()))
    else:
        print(format_table(results))
    return 0


def _evaluate_all(
    args: argparse.Namespace,
    specs: list[str],
    sources: list[str],
    references: list[str],
    latency_config: LatencyConfig,
) -> list[PolicyResult]:
    from simulmt.eval.instances import write_run
    from simulmt.eval.runner import RunConfig, simulate
    from simulmt.policies.registry import load_policy
    from tqdm import tqdm

    from simulmt.engine import Engine

    for spec in specs:
        load_policy(spec)  # fail on a bad spec before loading the model
    run_config = RunConfig(beam=args.beam, batch_size=args.batch_size)
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    engine = Engine.load(args.model)
    results = []
    for spec in specs:
        with tqdm(total=len(sources), desc=spec, unit="sent", disable=args.no_progress) as bar:
            sim = simulate(
                engine, spec, sources, references, config=run_config, progress=bar.update
            )
        sentences = [sentence_latency(s, latency_config) for s in sim.stats]
        quality = corpus_quality([s.prediction for s in sim.stats], references)
        result = PolicyResult(
            policy=spec,
            quality=quality,
            latency=corpus_latency(sentences, latency_config),
            config=latency_config,
            beam=args.beam,
            wall_s=sim.wall_s,
        )
        results.append(result)
        if args.output is not None:
            write_run(args.output / policy_dir_name(spec), result, sim.stats, sentences)
        if result.latency.empty:
            log.warning(
                "%s: %d empty hypotheses (scored as %s)",
                spec,
                result.latency.empty,
                latency_config.empty.value,
            )
    return results
