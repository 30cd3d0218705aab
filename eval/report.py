"""One policy's evaluation result, and how it is shown: a flat dict (JSON) or a table row."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from simulmt.eval.corpus import CorpusLatency, LatencyConfig
from simulmt.eval.degeneracy import DEGENERACY_THRESHOLD
from simulmt.eval.quality import QualityScores

from simulmt.search.options import SearchOptions

__all__ = ["PolicyResult", "degeneracy_warning", "format_table", "policy_family"]


def policy_family(spec: str) -> tuple[str, str]:
    """Split a policy spec ``name:key=value,…`` into (name, settings) for labels and legends."""
    name, _, settings = spec.strip().partition(":")
    if not name:
        raise ValueError(f"policy spec {spec!r} has no name; expected e.g. 'wait-k:k=3'")
    return name, settings


@dataclass(frozen=True)
class PolicyResult:
    policy: str  # the spec string it was run with, e.g. "wait-k:k=3"
    quality: QualityScores
    latency: CorpusLatency
    config: LatencyConfig
    beam: int = 1
    scoring: str = "gnmt"  # the beam's length scoring (SearchOptions.scoring)
    alpha: float = SearchOptions.alpha  # its GNMT exponent
    beta: float = SearchOptions.beta  # its GNMT coverage penalty weight (0: off)
    speculate: int = SearchOptions.speculate  # its speculative commit depth
    unit: str = "word"  # what one WRITE wrote (SearchOptions.unit)
    wall_s: float | None = None  # wall-clock time of the simulation
    groups: dict[str, dict[str, object]] | None = None  # per-label scores (--groups)
    loops: float | None = None  # % of outputs that loop (simulmt.eval.loops), None: not counted
    # % of single-sentence lines whose output has a sentence end inside (simulmt.eval.splits)
    splits: float | None = None
    # % of the numbers the references repeat that the outputs write as they do
    # (simulmt.eval.numbers); None: none to count
    numbers: float | None = None

    def as_dict(self) -> dict[str, object]:
        """Flat JSON-able record: the keys of `simulmt eval --json` and scores.json."""
        lat = asdict(self.latency)
        return {
            "policy": self.policy,
            "bleu": self.quality.bleu,
            "chrf": self.quality.chrf,
            **{k: v for k, v in lat.items() if k not in ("sentences", "empty", "scored")},
            "sentences": self.latency.sentences,
            "empty": self.latency.empty,
            "scored": self.latency.scored,
            "bleu_signature": self.quality.bleu_signature,
            "chrf_signature": self.quality.chrf_signature,
            "beam": self.beam,
            "scoring": self.scoring,
            "alpha": self.alpha,
            "beta": self.beta,
            "speculate": self.speculate,
            "unit": self.unit,
            "target_length": self.config.target_length.value,
            "empty_scoring": self.config.empty.value,
            "rate": self.config.rate,
            "wall_s": self.wall_s,
            "loops": self.loops,
            "splits": self.splits,
            "numbers": self.numbers,
            **({"groups": self.groups} if self.groups is not None else {}),
        }


_COLUMNS = [  # (header, key, format)
    ("policy", "policy", "{}"),
    ("BLEU", "bleu", "{:.2f}"),
    ("chrF", "chrf", "{:.2f}"),
    ("AL", "al", "{:.2f}"),
    ("LAAL", "laal", "{:.2f}"),
    ("YAAL", "yaal", "{:.2f}"),
    ("DAL", "dal", "{:.2f}"),
    ("AP", "ap", "{:.3f}"),
    ("CA-AL ms", "ca_al", "{:.0f}"),
    ("CA-YAAL ms", "ca_yaal", "{:.0f}"),
    ("SWF %", "swf", "{:.1f}"),
    ("EFSW %", "efsw", "{:.1f}"),
    ("DSPTV", "dsptv", "{:+.1f}"),
    ("NE", "normalized_erasure", "{:.3f}"),
    ("loops %", "loops", "{:.1f}"),
    ("splits %", "splits", "{:.1f}"),
    ("num %", "numbers", "{:.1f}"),
    ("sent", "sentences", "{}"),
    ("empty", "empty", "{}"),
]


def degeneracy_warning(result: PolicyResult) -> str | None:
    """The warning line for a policy that OmniSTEval's test flags as degenerate, else None."""
    lat = result.latency
    if not lat.degenerate or lat.dsptv is None or lat.efsw is None or lat.swf is None:
        return None
    return (
        f"WARNING: {result.policy} looks like a degenerate simultaneous policy (|DSPTV| "
        f"{abs(lat.dsptv):.1f} > {DEGENERACY_THRESHOLD:g}): {lat.swf:.1f}% of its words were "
        f"written before the source ended, {lat.efsw:.1f}% expected from its YAAL; its YAAL "
        "counts only the early words"
    )


def format_table(results: Sequence[PolicyResult]) -> str:
    """A plain-text table, one row per policy, then the metric signatures."""
    rows = [[h for h, _, _ in _COLUMNS]]
    for r in results:
        d = r.as_dict()
        rows.append(["-" if d[k] is None else f.format(d[k]) for _, k, f in _COLUMNS])
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if results:
        q, c = results[0].quality, results[0].config
        lines.append(f"BLEU: {q.bleu_signature}")
        lines.append(f"chrF: {q.chrf_signature}")
        lines.append(
            f"latency in source words (CA-AL in ms at {c.rate:g} words/s); AL/AP use the "
            f"{c.target_length.value} length; empty hypotheses: {c.empty.value}; YAAL and "
            "SWF/EFSW/DSPTV as OmniSTEval (IWSLT 2026) computes them"
        )
    lines += [w for w in map(degeneracy_warning, results) if w is not None]
    return "\n".join(lines)
