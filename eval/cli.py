"""Evaluate policies on a test set: BLEU, chrF, latency (AL, LAAL, YAAL, DAL, AP) and flicker."""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from simulmt.eval.corpus import (
    EmptyHypothesis,
    LatencyConfig,
    TargetLength,
)
from simulmt.eval.options import RunConfig
from simulmt.eval.report import PolicyResult, degeneracy_warning, format_table
from simulmt.eval.sweep import expand_sweep
from simulmt.policies.files import load_policy_files

from simulmt.cli.options import (
    add_deprecated,
    add_device_argument,
    add_policy_file_argument,
    add_search_arguments,
    add_session_arguments,
    search_settings,
    session_settings,
)
from simulmt.input.kinds import InputKind
from simulmt.input.textcheck import read_utf8
from simulmt.model.devices import use_device
from simulmt.segment.views import recognizer_view

if TYPE_CHECKING:
    from simulmt.engine import Engine

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
    add_policy_file_argument(parser)
    a("--source", type=Path, required=True, help="source sentences, one per line")
    a("--reference", type=Path, required=True, help="reference translations, one per line")
    add_search_arguments(parser)  # beam, scoring, speculation, guards, dtype
    add_device_argument(parser)  # cpu or cuda
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
    a(
        "--batch-size",
        type=int,
        default=RunConfig.batch_size,
        help=f"sentences in flight together, per job (default {RunConfig.batch_size})",
    )
    a(
        "--jobs",
        type=int,
        default=1,
        help="worker processes, each simulating every N-th line on one torch thread (Linux; "
        "default 1); one job per CPU core is fastest",
    )
    a("--limit", type=int, default=None, help="only the first N sentences")
    a(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads of --jobs 1 (default: torch's choice; 1 avoids contention on a "
        "busy machine); each of --jobs N runs one",
    )
    a("--no-progress", action="store_true", help="no progress bar")
    a(
        "--long-form",
        action="store_true",
        help="--source/--reference are documents (files in two folders, or blank-line blocks), "
        "one sentence a line; each document streams as one word sequence, the output is "
        "resegmented onto the reference sentences (mweralign) and scored with StreamLAAL",
    )
    add_session_arguments(parser, input_auto=True)  # segmentation, input kind, fillers, ...
    a(
        "--source-view",
        choices=[v.value for v in InputKind],
        default=InputKind.TEXT.value,
        help="how the source lines are shown to the engine: text (as written; default) or "
        "recognizer (lowercased, punctuation stripped: a speech recognizer's view of them)",
    )
    add_deprecated(parser, "--source-style", dest="source_view", new="--source-view",
                   values={"text": "text", "asr": "recognizer"})  # fmt: skip
    a(
        "--groups",
        type=Path,
        default=None,
        help="a label per source line (e.g. test.source from `simulmt data build`): "
        "also score each label's lines on their own",
    )


def read_lines(path: Path, what: str, limit: int | None) -> list[str]:
    if not path.is_file():
        raise FileNotFoundError(f"{what} file {path} not found")
    lines = read_utf8(path, what).splitlines()
    return lines[:limit] if limit is not None else lines


def check_output_dir(path: Path) -> None:
    """Create `path` and check that files can be written in it, or ValueError saying why."""
    if path.exists() and not path.is_dir():
        raise ValueError(f"--output {path} is a file: give a folder (made if missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".simulmt-write-check"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ValueError(f"--output {path}: cannot write there ({e.strerror or e})") from None


def policy_dir_name(spec: str) -> str:
    """A folder name for a spec: wait-k:k=3 -> wait-k_k=3 (only [A-Za-z0-9._=-] kept)."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", spec.replace(":", "_")).strip("_")


def _check_counts(args: argparse.Namespace) -> None:
    for name in ("beam", "batch_size", "jobs", "limit", "threads"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.jobs > 1 and args.threads is not None and args.threads > 1:
        raise ValueError(
            f"--threads {args.threads} with --jobs {args.jobs}: each job runs one torch thread "
            "(processes forked after the model load cannot start thread pools of their own); "
            "use --jobs N (one per core is fastest) or --jobs 1 --threads N"
        )


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
        load_policy_files(args.policy_file)
        specs = _specs(args)
        latency_config = LatencyConfig(
            target_length=TargetLength.HYPOTHESIS if args.hyp_len else TargetLength.REFERENCE,
            empty=EmptyHypothesis(args.empty),
            rate=args.rate,
        )
        if args.output is not None:  # before any model work: a typo must not cost the run
            check_output_dir(args.output)
        if args.long_form:
            return _run_long_form(args, specs, latency_config)
        sources = read_lines(args.source, "source", args.limit)
        if args.source_view == InputKind.RECOGNIZER.value:
            sources = [recognizer_view(s) for s in sources]
        references = read_lines(args.reference, "reference", args.limit)
        if len(references) != len(sources):  # before the model loads
            raise ValueError(
                f"--source {args.source} has {len(sources)} lines but --reference "
                f"{args.reference} has {len(references)}: give one reference line per source line"
            )
        labels = read_lines(args.groups, "groups", args.limit) if args.groups else None
        if labels is not None and len(labels) != len(sources):
            raise ValueError(f"--groups has {len(labels)} lines, the source {len(sources)}")
        results = _evaluate_all(args, specs, sources, references, latency_config, labels)
    except (FileNotFoundError, ValueError) as e:
        print(f"simulmt eval: {e}", file=sys.stderr)
        return 2
    if args.json:
        for r in results:
            print(json.dumps(r.as_dict()))
    else:
        print(format_table(results))
        for r in results:
            for label, g in (r.groups or {}).items():
                print(
                    f"  {r.policy} [{label}] BLEU {g['bleu']:.2f} chrF {g['chrf']:.2f} "
                    f"AL {_fmt(g['al'])} ({g['sentences']} sentences)"
                )
    return 0


def run_config_from_args(args: argparse.Namespace) -> RunConfig:
    """The simulation options of the command line (sentence-level and long-form runs)."""
    # `--input-kind auto` reads text until `load_for_run`, which knows whether the model has
    # a restorer, decides
    return RunConfig(
        **search_settings(args), **session_settings(args), batch_size=args.batch_size,
        jobs=args.jobs,
    )  # fmt: skip


def load_for_run(args: argparse.Namespace, specs: list[str]) -> tuple[Engine, RunConfig]:
    """The model and run options of an evaluation; bad specs and options fail before the
    (slow) model load."""
    from simulmt.policies.registry import load_policy

    from simulmt.engine import Engine

    for spec in specs:
        load_policy(spec)
    run_config = run_config_from_args(args)
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    # eager, not traced graphs (`simulmt.model.graphs`): an evaluation's batches are wide
    # and change shape at every step, where the graphs gain nothing per call and their
    # executor re-specializes; measured 2-8 s slower on 948 lines (bench/RESULTS.md, session 44)
    # `--dtype auto` times a turn as wide as this run's batches: there the fastest precision
    # can differ from a server's (bfloat16 against int8 on a Xeon with AMX)
    engine = Engine.load(args.model, dtype=args.dtype, turn_streams=args.batch_size,
                         device=args.device, trace=False)  # fmt: skip
    if engine.device.type == "cuda" and getattr(args, "jobs", 1) > 1:
        raise ValueError("--jobs forks processes, which cannot share a CUDA context: use "
                         "--jobs 1 with --device cuda (batching happens inside the one process)")
    use_device(engine.device)  # this thread runs the model work
    if args.input_kind == "auto" and args.source_view == InputKind.RECOGNIZER.value:
        if engine.restorer is not None:
            run_config = replace(run_config, input_kind=InputKind.RECOGNIZER)
        else:
            log.info("the model has no restorer.pt: recognizer lines are read as they are")
    return engine, run_config


def _run_long_form(
    args: argparse.Namespace, specs: list[str], latency_config: LatencyConfig
) -> int:
    from simulmt.eval.longform_cli import format_long_form, run_long_form

    if args.groups is not None:
        raise ValueError("--groups does not apply to --long-form")
    results = run_long_form(args, specs, latency_config, policy_dir_name)
    if args.json:
        for r in results:
            print(json.dumps(r.as_dict()))
    else:
        print(format_long_form(results))
    return 0


def _fmt(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, float) else "-"


def _evaluate_all(
    args: argparse.Namespace,
    specs: list[str],
    sources: list[str],
    references: list[str],
    latency_config: LatencyConfig,
    labels: list[str] | None = None,
) -> list[PolicyResult]:
    from simulmt.eval.evaluate import evaluate
    from simulmt.eval.instances import write_run
    from simulmt.eval.run_record import run_context, write_run_record
    from tqdm import tqdm

    engine, run_config = load_for_run(args, specs)
    context = run_context(args, engine, run_config, items=len(sources))
    results = []
    for spec in specs:
        with tqdm(total=len(sources), desc=spec, unit="sent", disable=args.no_progress) as bar:
            run = evaluate(engine, spec, sources, references, config=run_config,
                           latency=latency_config, labels=labels, progress=bar.update)
        result, stats, sentences = run.result, run.stats, run.sentences
        results.append(result)
        if args.output is not None:
            folder = args.output / policy_dir_name(spec)
            write_run(folder, result, stats, sentences)
            write_run_record(folder, context, policy=spec)
        if (warning := degeneracy_warning(result)) is not None:
            log.warning("%s", warning)
        if result.latency.empty:
            log.warning("%s: %d empty hypotheses (scored as %s)",
                        spec, result.latency.empty, latency_config.empty.value)
    return results
