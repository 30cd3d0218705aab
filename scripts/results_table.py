"""Markdown tables for README/model card from `simulmt eval --json` output files.

python scripts/results_table.py docs/results-*.jsonl
python scripts/results_table.py --runs results [results-beam5 …]  # matched-AL table, p-values

`--runs DIR…` reads the run folders of `simulmt eval --output DIR` (one per policy; one DIR per
beam size, since a folder is named after its policy), takes the greedy wait-k runs as the
baseline curve, and compares every other run, of any beam size, with wait-k interpolated at its
AL (simulmt.eval.matched: paired bootstrap, 1000 resamples). A run with beam B > 1 is named
`policy beam B`; wait-k runs with a beam are compared too, which shows whether the beam alone
would lift the baseline.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def fmt(v: object, nd: int = 2) -> str:
    return f"{v:.{nd}f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else "–"


def main(paths: list[str]) -> None:
    rows = [json.loads(line) for p in paths for line in open(p, encoding="utf-8") if line.strip()]
    print("| policy | beam | BLEU | chrF | AL | LAAL | DAL | AP | CA-AL (ms) | empty |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| `{r['policy']}` | {r['beam']} | {fmt(r['bleu'])} | {fmt(r['chrf'])} | "
            f"{fmt(r['al'])} | {fmt(r['laal'])} | {fmt(r['dal'])} | {fmt(r['ap'], 3)} | "
            f"{fmt(r['ca_al'], 0)} | {r['empty']} |"
        )
    groups = sorted({g for r in rows for g in r.get("groups", {})})
    if groups:
        print()
        print("| policy | beam | " + " | ".join(groups) + " |")
        print("|---|---:|" + "---:|" * len(groups))
        for r in rows:
            cells = [
                fmt(r["groups"][g]["bleu"]) if g in r.get("groups", {}) else "–" for g in groups
            ]
            print(f"| `{r['policy']}` | {r['beam']} | " + " | ".join(cells) + " |")
    print()
    print(f"BLEU signature: `{rows[0]['bleu_signature']}`" if rows else "no results")
    matched_al(rows)


def matched_al(rows: list[dict], window: float = 0.3) -> None:  # type: ignore[type-arg]
    """Adaptive policies against wait-k at matched latency: for each greedy adaptive result,
    the wait-k BLEU linearly interpolated at its AL (between the measured k), and the nearest
    measured wait-k point if one lies within +-window words of AL."""
    waitk = sorted(
        (r["al"], r["bleu"], r["policy"])
        for r in rows
        if r["policy"].startswith("wait-k:") and r["beam"] == 1
    )
    adaptive = [
        r for r in rows
        if r["beam"] == 1 and r["policy"].split(":")[0] in ("learned", "confidence",
                                                              "wait-if-worse", "wait-if-diff",
                                                              "alignatt")
    ]
    if len(waitk) < 2 or not adaptive:
        return
    print()
    print(f"| policy | AL | BLEU | wait-k BLEU at this AL (interpolated) | Δ | "
          f"nearest wait-k within ±{window} AL | Δ |")
    print("|---|---:|---:|---:|---:|---|---:|")
    for r in adaptive:
        al, bleu = r["al"], r["bleu"]
        interp = "–"
        delta = "–"
        for (a0, b0, _), (a1, b1, _) in zip(waitk, waitk[1:], strict=False):
            if a0 <= al <= a1:
                ref = b0 + (b1 - b0) * (al - a0) / (a1 - a0)
                interp, delta = f"{ref:.2f}", f"{bleu - ref:+.2f}"
        near = [(abs(a - al), a, b, p) for a, b, p in waitk if abs(a - al) <= window]
        if near:
            _, a, b, p = min(near)
            near_cell, near_delta = f"`{p}` ({b:.2f} @ {a:.2f})", f"{bleu - b:+.2f}"
        else:
            near_cell, near_delta = "–", "–"
        print(f"| `{r['policy']}` | {al:.2f} | {bleu:.2f} | {interp} | {delta} | {near_cell} "
              f"| {near_delta} |")


def significance(roots: list[Path], samples: int = 1000) -> None:
    """Matched-AL comparison of every run in `roots` (adaptive policies at any beam size, and
    wait-k with a beam) against greedy wait-k."""
    from simulmt.eval.instances import read_instances, read_scores
    from simulmt.eval.matched import Curve, compare_at_matched_al
    from simulmt.eval.quality import segment_statistics

    runs, laal, bleu, beams, signatures, units = [], {}, {}, {}, set(), set()
    folders = sorted(p for root in roots for p in root.iterdir() if (p / "scores.json").is_file())
    for d in folders:
        scores = read_scores(d)
        beam = int(scores.get("beam", 1))
        sents = sorted(read_instances(d / "instances.log"), key=lambda s: s.index)
        stats = segment_statistics([s.prediction for s in sents], [s.reference for s in sents])
        name = str(scores.get("policy", d.name)) + (f" beam {beam}" if beam > 1 else "")
        if name in laal:
            raise SystemExit(f"{d}: a second run of `{name}` (one folder per beam size)")
        runs.append(Curve(name, float(scores["al"]), stats))
        beams[name] = beam
        laal[name], bleu[name] = fmt(scores.get("laal")), fmt(scores.get("bleu"))
        signatures.add(scores.get("bleu_signature", "?"))
        units.add(scores.get("unit", "token"))  # runs before word writes were token-level
    if len(units) > 1:  # AL in words and in tokens are not comparable
        where = ", ".join(str(r) for r in roots)
        raise SystemExit(f"{where}: runs of different write units {sorted(units)}")
    waitk = sorted((c for c in runs if c.name.startswith("wait-k:") and beams[c.name] == 1),
                   key=lambda c: c.al)
    baseline = {c.name for c in waitk}
    others = [c for c in runs if c.name not in baseline and not c.name.startswith("full")]
    print("| wait-k | AL | LAAL | BLEU |")
    print("|---|---:|---:|---:|")
    for c in waitk:
        print(f"| `{c.name}` | {c.al:.2f} | {laal[c.name]} | {bleu[c.name]} |")
    print()
    print("| policy | AL | LAAL | BLEU | wait-k at this AL (interpolated) | Δ | "
          "p (paired bootstrap) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for curve in others:
        cmp = compare_at_matched_al(curve, waitk, samples=samples)
        if cmp is None:
            print(f"| `{curve.name}` | {curve.al:.2f} | {laal[curve.name]} | "
                  f"{bleu[curve.name]} | outside wait-k's AL range | – | – |")
            continue
        print(f"| `{cmp.policy}` | {cmp.al:.2f} | {laal[cmp.policy]} | {cmp.bleu:.2f} | "
              f"{cmp.baseline_bleu:.2f} "
              f"(`{cmp.lower}`–`{cmp.upper}`) | {cmp.delta:+.2f} | {cmp.p_value:.3f} |")
    print()
    print(f"BLEU signature: `{' / '.join(sorted(signatures))}`; AL and LAAL in source words "
          f"({' / '.join(sorted(units))}-level writes); greedy unless a beam is named (wait-k "
          f"always greedy); p one-sided, {samples} resamples")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--runs"] and len(sys.argv) >= 3:
        significance([Path(a) for a in sys.argv[2:]])
    else:
        main(sys.argv[1:])
