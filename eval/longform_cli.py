"""`simulmt eval --long-form`: the CLI side of long-form evaluation (files, table, logs)."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from simulmt.eval.corpus import LatencyConfig
from simulmt.eval.documents import read_documents
from simulmt.eval.longform import DocumentResult, LongFormResult, evaluate_long_form
from simulmt.eval.omnisteval_files import write_omnisteval_longform

from simulmt.segment.views import SourceStyle

__all__ = ["run_long_form", "write_long_form"]

log = logging.getLogger(__name__)


def write_long_form(directory: Path, result: LongFormResult, docs: list[DocumentResult]) -> None:
    """instances.log (one JSON line per document), scores.json/.tsv, config.yaml, OmniSTEval's
    input files under omnisteval/ (`simulmt.eval.omnisteval_files`)."""
    directory.mkdir(parents=True, exist_ok=True)
    ms = result.config.ms_per_word
    with (directory / "instances.log").open("w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d.record(ms_per_word=ms), ensure_ascii=False) + "\n")
    flat = result.as_dict()
    (directory / "scores.json").write_text(json.dumps(flat, indent=2) + "\n")
    values = ["" if flat[k] is None else f"{flat[k]:.3f}" if isinstance(flat[k], float)
              else str(flat[k]) for _, k in _SCORE_COLUMNS]  # fmt: skip
    (directory / "scores.tsv").write_text(
        "\t".join(h for h, _ in _SCORE_COLUMNS) + "\n" + "\t".join(values) + "\n"
    )
    (directory / "config.yaml").write_text("source_type: text\ntarget_type: text\n")
    write_omnisteval_longform(directory / "omnisteval", docs, ms_per_word=ms)


_SCORE_COLUMNS = [  # scores.tsv header -> result key
    ("BLEU", "bleu"), ("chrF", "chrf"), ("StreamLAAL", "stream_laal"),
    ("StreamLAAL_median", "stream_laal_median"), ("StreamLAAL_CA", "ca_stream_laal"),
    ("LongYAAL", "long_yaal"), ("LongYAAL_CA", "ca_long_yaal"), ("numbers", "numbers"),
    ("documents", "documents"),
    ("sentences", "sentences"), ("empty", "empty"),
]  # fmt: skip


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def format_long_form(results: list[LongFormResult]) -> str:
    head = (
        "| policy | BLEU | chrF | StreamLAAL | median | CA-StreamLAAL (ms) | LongYAAL "
        "| CA-LongYAAL (ms) | loops % | splits % | num % | documents | sentences | empty |"
    )
    lines = [head, "|---|" + "---:|" * 13]
    for r in results:
        lines.append(
            f"| `{r.policy}` | {r.quality.bleu:.2f} | {r.quality.chrf:.2f} | "
            f"{_fmt(r.stream_laal)} | {_fmt(r.stream_laal_median)} | {_fmt(r.ca_stream_laal)} | "
            f"{_fmt(r.long_yaal)} | {_fmt(r.ca_long_yaal)} | {_fmt(r.loops)} | {_fmt(r.splits)} | "
            f"{_fmt(r.numbers)} | {r.documents} | {r.sentences} | {r.empty} |"
        )
    if results:
        lines.append(f"BLEU: {results[0].quality.bleu_signature}")
        lines.append(f"chrF: {results[0].quality.chrf_signature}")
    return "\n".join(lines)


def run_long_form(
    args: argparse.Namespace, specs: list[str], latency_config: LatencyConfig, dir_name: object
) -> list[LongFormResult]:
    """Evaluate every spec on the documents of --source/--reference; writes --output."""
    from simulmt.eval.cli import load_for_run
    from simulmt.eval.run_record import run_context, write_run_record
    from tqdm import tqdm

    style = SourceStyle.ASR if args.source_view == "recognizer" else SourceStyle.TEXT
    documents = read_documents(args.source, args.reference, style=style, limit=args.limit)
    engine, run_config = load_for_run(args, specs)
    context = run_context(args, engine, run_config, items=len(documents))
    results = []
    for spec in specs:
        with tqdm(total=len(documents), desc=spec, unit="doc", disable=args.no_progress) as bar:
            result, docs = evaluate_long_form(
                engine,
                spec,
                documents,
                run_config=run_config,
                latency_config=latency_config,
                progress=bar.update,
            )
        results.append(result)
        if args.output is not None:
            folder = args.output / dir_name(spec)  # type: ignore[operator]
            write_long_form(folder, result, docs)
            write_run_record(folder, context, policy=spec)
        if result.empty:
            log.warning("%s: %d reference sentences got no hypothesis words", spec, result.empty)
    return results
