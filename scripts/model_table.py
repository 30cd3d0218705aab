"""Issue #15's model table: models side by side per test set, input view and policy.

    python scripts/model_table.py cache/benchmarks/de-en.jsonl cache/benchmarks/NEW.jsonl
    python scripts/model_table.py --groups own A.jsonl B.jsonl   # per source of one test set

Reads the JSON lines `scripts/benchmark-model.sh` writes (one file per model). Each cell gives
BLEU, AL (source words) and the % of outputs that loop. Lines written before `simulmt eval`
reported `loops` take it from the run's instances.log, where benchmark-model.sh put it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.cli import policy_dir_name  # noqa: E402
from eval.instances import read_instances  # noqa: E402
from eval.loops import loop_rate  # noqa: E402

Row = dict[str, object]


def label(row: Row) -> str:
    beam = int(row["beam"])  # type: ignore[call-overload]
    return f"`{row['policy']}`" + (f" beam {beam}" if beam > 1 else "")


def loops(row: Row, jsonl: Path) -> float | None:
    """The row's loop rate; from its instances.log if the line predates the `loops` key."""
    if row.get("loops") is not None:
        return float(row["loops"])  # type: ignore[arg-type]
    tag = "beam5" if int(row["beam"]) == 5 else "greedy"  # type: ignore[call-overload]
    log = (jsonl.parent / str(row["model"]) / f"{row['set']}-{row['view']}-{tag}"
           / policy_dir_name(str(row["policy"])) / "instances.log")
    if not log.is_file():
        return None
    return loop_rate([s.prediction for s in read_instances(log)])


def read(path: Path) -> dict[tuple[str, str, str], Row]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return {(str(r["set"]), str(r["view"]), label(r)): {**r, "loops": loops(r, path)}
            for r in rows}


def cell(row: Row | None) -> str:
    if row is None:
        return "– | – | –"
    lp = row.get("loops")
    return (f"{float(row['bleu']):.2f} | {float(row['al']):.2f} | "  # type: ignore[arg-type]
            + ("–" if lp is None else f"{float(lp):.1f}"))  # type: ignore[arg-type]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", type=Path, nargs="+", help="benchmark-model.sh output, a model each")
    p.add_argument("--groups", metavar="SET", help="per-source BLEU of this test set instead")
    args = p.parse_args()
    models = [(f.stem, read(f)) for f in args.files]
    keys = list(dict.fromkeys(k for _, rows in models for k in rows))
    if args.groups:
        groups = sorted({g for _, rows in models for (s, _, _), r in rows.items()
                         if s == args.groups for g in r.get("groups", {})})  # type: ignore[attr-defined]
        print("| view | policy | model | " + " | ".join(groups) + " |")
        print("|---|---|---|" + "---:|" * len(groups))
        for key in (k for k in keys if k[0] == args.groups):
            for name, rows in models:
                r = rows.get(key)
                scores = r.get("groups", {}) if r else {}  # type: ignore[union-attr]
                cells = [f"{scores[g]['bleu']:.2f}" if g in scores else "–" for g in groups]
                print(f"| {key[1]} | {key[2]} | {name} | " + " | ".join(cells) + " |")
        return
    print("| test set | view | policy | " + " | ".join(
        f"{name} BLEU | AL | loops %" for name, _ in models) + " |")
    print("|---|---|---|" + "---:|---:|---:|" * len(models))
    for key in keys:
        print(f"| {key[0]} | {key[1]} | {key[2]} | "
              + " | ".join(cell(rows.get(key)) for _, rows in models) + " |")
    sig = next((r["bleu_signature"] for _, rows in models for r in rows.values()), None)
    print(f"\nBLEU signature: `{sig}`")


if __name__ == "__main__":
    main()
