"""Long-form outputs in the files OmniSTEval's `longform` mode reads (the IWSLT 2026 scorer).

OmniSTEval resegments a stream's output itself (its own alignment, not mweralign) and scores
BLEU, chrF and LongYAAL. It thinks in time, as for speech: a segmentation file gives each
reference sentence's recording, offset and duration in seconds, and the hypothesis log gives
each output word's emission time in ms. Text has no time of its own, so source word ``j`` of a
document is spoken from ``(j−1)·w`` to ``j·w`` with ``w = ms_per_word`` (the simulated speaking
rate, ``--rate``): a word written after ``d`` source words is emitted at ``d·w`` ms
(computation-unaware, ``delays``), or at our CA emission time (``elapsed``). OmniSTEval's
LongYAAL is then ours in ms: ours in source words times ``w`` when it aligns as we do.

Files, one set per policy directory (``omnisteval/``):
- ``hypotheses.jsonl``: one line per document: source (its name), prediction, delays and
  elapsed (ms), source_length (the document's duration, ms);
- ``segmentation.json``: one entry per reference sentence, in document order: wav (the
  document's name), offset and duration (s);
- ``references.txt``: the reference sentences, one a line, in the same order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from simulmt.eval.longform import DocumentResult

__all__ = ["HYPOTHESES", "REFERENCES", "SEGMENTATION", "write_omnisteval_longform"]

HYPOTHESES = "hypotheses.jsonl"
SEGMENTATION = "segmentation.json"
REFERENCES = "references.txt"


def hypothesis_record(doc: DocumentResult, *, ms_per_word: float) -> dict[str, object]:
    """One document's line of the hypothesis log, times in ms."""
    s = doc.stats
    record: dict[str, object] = {
        "source": doc.document.name,
        "prediction": s.prediction,
        "delays": [d * ms_per_word for d in s.delays],
        "source_length": s.source_length * ms_per_word,
    }
    if doc.elapsed_ms is not None:
        record["elapsed"] = list(doc.elapsed_ms)
    return record


def segmentation(docs: Sequence[DocumentResult], *, ms_per_word: float) -> list[dict[str, object]]:
    """Each reference sentence's place in its document's simulated recording, in seconds."""

    def seconds(n_words: int) -> float:  # rounded: OmniSTEval compares times at the ms
        return round(n_words * ms_per_word / 1000.0, 9)

    return [
        {"wav": d.document.name, "offset": seconds(offset), "duration": seconds(len(words))}
        for d in docs
        for offset, words in zip(d.document.offsets, d.document.sources, strict=True)
    ]


def write_omnisteval_longform(
    directory: Path, docs: Sequence[DocumentResult], *, ms_per_word: float
) -> None:
    """Write the three files into `directory` (created if missing)."""
    names = [d.document.name for d in docs]
    if len(set(names)) != len(names):
        raise ValueError("OmniSTEval matches documents by name: the names must be unique")
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / HYPOTHESES).open("w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(hypothesis_record(d, ms_per_word=ms_per_word), ensure_ascii=False))
            f.write("\n")
    (directory / SEGMENTATION).write_text(
        json.dumps(segmentation(docs, ms_per_word=ms_per_word), indent=1) + "\n", encoding="utf-8"
    )
    refs = [r for d in docs for r in d.document.references]
    (directory / REFERENCES).write_text("".join(r + "\n" for r in refs), encoding="utf-8")
