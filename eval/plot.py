"""Quality–latency curves: x = AL (source words), y = BLEU, one line per policy family."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from simulmt.eval.report import policy_family

__all__ = ["CurvePoint", "PlotConfig", "FULL_SENTENCE", "points_from_scores", "plot_curves"]

FULL_SENTENCE = "full"  # policy name of the offline (full-sentence) baseline: a dashed line


@dataclass(frozen=True)
class CurvePoint:
    family: str  # policy name, e.g. "wait-k": one line per family
    setting: str  # e.g. "k=3": the marker's annotation
    al: float
    bleu: float


@dataclass(frozen=True)
class PlotConfig:
    title: str = "Quality–latency"  # figure title
    width_in: float = 7.0  # figure size in inches (7×5 at 150 dpi ≈ a paper column zoomed)
    height_in: float = 5.0
    dpi: int = 150
    xlim: tuple[float, float] | None = None  # AL range to show (a zoom); None: all points
    ylim: tuple[float, float] | None = None  # BLEU range to show

    def __post_init__(self) -> None:
        for name, lim in (("xlim", self.xlim), ("ylim", self.ylim)):
            if lim is not None and not lim[0] < lim[1]:
                raise ValueError(f"{name} must be (low, high) with low < high, got {lim}")


def points_from_scores(records: Sequence[Mapping[str, object]]) -> list[CurvePoint]:
    """Curve points from scores.json records (needs 'policy', 'al', 'bleu' in each): one
    curve per policy name and fixed settings, one marker per value of the first setting."""
    points = []
    for r in records:
        try:
            name, settings = policy_family(str(r["policy"]))
            al, bleu = r["al"], r["bleu"]
        except KeyError as e:
            raise ValueError(f"scores record lacks {e}; needs policy, al and bleu") from e
        if not isinstance(al, int | float) or not isinstance(bleu, int | float):
            raise ValueError(f"{r['policy']}: al and bleu must be numbers, got {al!r}, {bleu!r}")
        # the first setting is the swept one (a marker); the others name the curve, so e.g.
        # learned:threshold=…,k_max=2 is its own line beside learned:threshold=…
        setting, *fixed = settings.split(",") if settings else [""]
        family = f"{name} {','.join(fixed)}" if fixed else name
        if r.get("unit") == "token":  # token-level writes (the first releases): a curve of its own
            family += " (token-level)"
        points.append(CurvePoint(family, setting, float(al), float(bleu)))
    return points


def _short_labels(points: Sequence[CurvePoint]) -> tuple[str, list[str]]:
    """Marker labels: just the values when every setting of a family has the same one key."""
    pairs = [p.setting.split("=", 1) for p in points]
    keys = {kv[0] for kv in pairs}
    if len(keys) == 1 and all(len(kv) == 2 for kv in pairs):
        return keys.pop(), [kv[1] for kv in pairs]
    return "", [p.setting for p in points]


def plot_curves(
    points: Sequence[CurvePoint], output: Path, *, config: PlotConfig | None = None
) -> None:
    """Draw the curves and save them to ``output`` (format from its suffix, e.g. .png/.pdf)."""
    if not points:
        raise ValueError("nothing to plot: no results")
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    config = config or PlotConfig()
    families: dict[str, list[CurvePoint]] = defaultdict(list)
    for p in points:
        families[p.family].append(p)
    fig, ax = plt.subplots(figsize=(config.width_in, config.height_in))
    markers = "osD^vP*X<>"
    curves = [f for f in families if f != FULL_SENTENCE]
    for i, family in enumerate(sorted(curves)):
        pts = sorted(families[family], key=lambda p: p.al)
        keys, labels = _short_labels(pts)
        ax.plot([p.al for p in pts], [p.bleu for p in pts], marker=markers[i % len(markers)],
                label=f"{family} ({keys})" if keys else family)  # fmt: skip
        offset = (5, 6) if i % 2 == 0 else (5, -13)  # alternate sides so labels collide less
        for p, text in zip(pts, labels, strict=True):
            ax.annotate(text, (p.al, p.bleu), textcoords="offset points", xytext=offset,
                        fontsize=8)  # fmt: skip
    for p in families.get(FULL_SENTENCE, []):
        label = "full sentence" + (f" ({p.setting})" if p.setting else "")
        ax.axhline(p.bleu, linestyle="--", color="gray",
                   label=f"{label}: BLEU {p.bleu:.1f}, AL {p.al:.1f}")  # fmt: skip
    ax.margins(x=0.1, y=0.08)
    if config.xlim is not None:
        ax.set_xlim(*config.xlim)
    if config.ylim is not None:
        ax.set_ylim(*config.ylim)
    ax.set_xlabel("AL (source words)")
    ax.set_ylabel("BLEU")
    ax.set_title(config.title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=config.dpi)
    plt.close(fig)
