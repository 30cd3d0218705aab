"""Files of an evaluation run, in SimulEval's layout so its tools and scripts read them.

One directory per policy:
- ``instances.log``: one JSON line per sentence with SimulEval's keys (index, prediction,
  delays, elapsed, prediction_length, reference, source, source_length) plus ours
  (compute_ms, source_duration_ms, displays when recorded). ``elapsed`` holds the
  computation-aware emission times in the unit of ``delays`` and ``source_length`` (source
  words), as SimulEval builds them for speech in ms: ``elapsed_t = d_t + c_t / ms_per_word``,
  the delay plus the model time spent on the sentence so far, converted into source words at
  the simulated speaking rate (``--rate``, 2.5 words/s: one word = 400 ms). So OmniSTEval's
  CA scores of this file are ours in source words (ours ÷ ms_per_word; ours are in ms). Zeros
  when no compute time was measured — SimulEval writes zeros for text input.
- ``scores.tsv``: one header line and one row of corpus scores (SimulEval's file name).
- ``metrics.tsv``: one row of metrics per sentence (SimulEval's file name).
- ``scores.json``: the full result record, read back by ``simulmt plot``.
- ``config.yaml``: ``source_type``/``target_type``, so ``simuleval --score-only`` accepts the dir.
- ``run.json`` (written beside them by ``simulmt.eval.run_record``): the model, precision,
  options, software and machine that produced the run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

from simulmt.eval.corpus import LatencyConfig, SentenceLatency, SentenceStats
from simulmt.eval.report import PolicyResult

__all__ = [
    "instance_record",
    "read_instances",
    "read_scores",
    "write_instances",
    "write_run",
]

INSTANCES = "instances.log"
SCORES_TSV = "scores.tsv"
METRICS_TSV = "metrics.tsv"
SCORES_JSON = "scores.json"
CONFIG_YAML = "config.yaml"


def instance_record(stats: SentenceStats, config: LatencyConfig) -> dict[str, object]:
    """The instances.log record of one sentence."""
    ms = config.ms_per_word
    if stats.compute_ms is not None:
        elapsed = [d + c / ms for d, c in zip(stats.delays, stats.compute_ms, strict=True)]
    else:
        elapsed = [0.0] * len(stats.delays)
    record: dict[str, object] = {
        "index": stats.index,
        "prediction": stats.prediction,
        "delays": list(stats.delays),
        "elapsed": elapsed,
        "prediction_length": len(stats.delays),
        "reference": stats.reference,
        "source": stats.source,
        "source_length": stats.source_length,
        "source_duration_ms": stats.source_length * ms,
    }
    if stats.compute_ms is not None:
        record["compute_ms"] = list(stats.compute_ms)
    if stats.sentence_compute_ms is not None:
        record["sentence_compute_ms"] = stats.sentence_compute_ms
    if stats.displays is not None:
        record["displays"] = list(stats.displays)
    return record


def write_instances(path: Path, stats: Iterable[SentenceStats], config: LatencyConfig) -> None:
    with path.open("w", encoding="utf-8") as f:
        for s in stats:
            f.write(json.dumps(instance_record(s, config), ensure_ascii=False) + "\n")


def _stats_from_record(line_no: int, rec: dict[str, object]) -> SentenceStats:
    try:
        delays = tuple(int(d) for d in rec["delays"])  # type: ignore[attr-defined]
        compute = rec.get("compute_ms")
        displays = rec.get("displays")
        total = rec.get("sentence_compute_ms")
        return SentenceStats(
            index=int(rec["index"]),  # type: ignore[call-overload]
            source_length=int(rec["source_length"]),  # type: ignore[call-overload]
            reference=str(rec.get("reference") or ""),
            prediction=str(rec["prediction"]),
            delays=delays,
            compute_ms=None if compute is None else tuple(float(c) for c in compute),  # type: ignore[attr-defined]
            sentence_compute_ms=None if total is None else float(total),  # type: ignore[arg-type]
            displays=None if displays is None else tuple(str(d) for d in displays),  # type: ignore[attr-defined]
            source=str(rec.get("source") or ""),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(
            f"instances.log line {line_no}: {e!s}; expected a JSON object with index, "
            "prediction, delays and source_length (SimulEval's instances.log format)"
        ) from e


def read_instances(path: Path) -> list[SentenceStats]:
    """Read an instances.log written by `simulmt eval` or by SimulEval."""
    out = []
    with path.open(encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{line_no}: not JSON ({e.msg})") from e
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{line_no}: expected a JSON object per line")
            out.append(_stats_from_record(line_no, rec))
    return out


def read_predictions(path: Path) -> list[str]:
    """The translations in `path`: a file of them, one a line, or the predictions of an
    `instances.log` (named so; in line order), so that scripts score either alike."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.name != "instances.log":
        return lines
    records = [json.loads(line) for line in lines if line.strip()]
    records.sort(key=lambda rec: int(rec.get("index", 0)))
    return [str(rec["prediction"]) for rec in records]


def _tsv_cell(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value).replace("\t", " ")


def _write_tsv(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    lines = ["\t".join(header)] + ["\t".join(_tsv_cell(v) for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


_SCORE_COLUMNS = [  # scores.tsv header (SimulEval's metric names) -> result key
    ("BLEU", "bleu"), ("chrF", "chrf"), ("LAAL", "laal"), ("AL", "al"), ("AP", "ap"),
    ("DAL", "dal"), ("ATD", "atd"), ("AL_CA", "ca_al"), ("LAAL_CA", "ca_laal"),
    ("YAAL", "yaal"), ("YAAL_CA", "ca_yaal"), ("SWF", "swf"), ("EFSW", "efsw"),
    ("DSPTV", "dsptv"), ("degenerate", "degenerate"),
    ("NE", "normalized_erasure"), ("RPW", "revisions_per_word"), ("loops", "loops"),
    ("splits", "splits"), ("numbers", "numbers"),
    ("sentences", "sentences"), ("empty", "empty"),
]  # fmt: skip


def write_run(
    directory: Path,
    result: PolicyResult,
    stats: Sequence[SentenceStats],
    sentences: Sequence[SentenceLatency],
) -> None:
    """Write every file of one policy's run into ``directory`` (created if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    write_instances(directory / INSTANCES, stats, result.config)
    flat = result.as_dict()
    _write_tsv(
        directory / SCORES_TSV,
        [h for h, _ in _SCORE_COLUMNS],
        [[flat[k] for _, k in _SCORE_COLUMNS]],
    )
    per_sentence = [s.as_dict() for s in sentences]
    header = list(per_sentence[0]) if per_sentence else ["index"]
    _write_tsv(directory / METRICS_TSV, header, [[d[h] for h in header] for d in per_sentence])
    (directory / SCORES_JSON).write_text(json.dumps(flat, indent=2) + "\n", encoding="utf-8")
    (directory / CONFIG_YAML).write_text("source_type: text\ntarget_type: text\n", encoding="utf-8")


def read_scores(directory: Path) -> dict[str, object]:
    """The scores.json record of one run directory."""
    path = directory / SCORES_JSON
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: expected a directory written by `simulmt eval --output`"
        )
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "bleu" not in data or "al" not in data:
        raise ValueError(f"{path}: not a scores record (needs at least 'bleu' and 'al')")
    return data
