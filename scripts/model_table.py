"""Issue #15's model table: models side by side per test set, input view and policy.

    python scripts/model_table.py cache/benchmarks/de-en.jsonl cache/benchmarks/NEW.jsonl
    python scripts/model_table.py --groups own A.jsonl B.jsonl   # per source of one test set

Reads the JSON lines `scripts/benchmark-model.sh` writes (one file per model). Each cell gives
BLEU, AL (source words), the % of outputs that loop and the % of numbers right (`eval`'s
num %; – in files written before it existed).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

Row = dict[str, Any]  # one JSON line of `simulmt eval --json`


def label(row: Row) -> str:
    beam = int(row["beam"])
    return f"`{row['policy']}`" + (f" beam {beam}" if beam > 1 else "")


def read(path: Path) -> dict[tuple[str, str, str], Row]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return {(str(r["set"]), str(r["view"]), label(r)): r for r in rows}


def _share(row: Row, key: str) -> str:
    value = row.get(key)
    return "–" if value is None else f"{float(value):.1f}"


def cell(row: Row | None) -> str:
    if row is None:
        return "– | – | – | –"
    return (f"{float(row['bleu']):.2f} | {float(row['al']):.2f} | {_share(row, 'loops')} | "
            f"{_share(row, 'numbers')}")


def model_table(models: list[tuple[str, dict[tuple[str, str, str], Row]]]) -> str:
    """Markdown: one row per (test set, view, policy), BLEU / AL / loops % / num % per
    model."""
    keys = list(dict.fromkeys(k for _, rows in models for k in rows))
    lines = ["| test set | view | policy | " + " | ".join(
        f"{name} BLEU | AL | loops % | num %" for name, _ in models) + " |",
        "|---|---|---|" + "---:|---:|---:|---:|" * len(models)]
    lines += [f"| {key[0]} | {key[1]} | {key[2]} | "
              + " | ".join(cell(rows.get(key)) for _, rows in models) + " |" for key in keys]
    sig = next((r["bleu_signature"] for _, rows in models for r in rows.values()), None)
    return "\n".join(lines) + f"\n\nBLEU signature: `{sig}`"


def groups_table(models: list[tuple[str, dict[tuple[str, str, str], Row]]], test_set: str) -> str:
    """Markdown: per-source BLEU of one test set, a row per (view, policy, model)."""
    keys = list(dict.fromkeys(k for _, rows in models for k in rows if k[0] == test_set))
    groups = sorted({g for _, rows in models for (s, _, _), r in rows.items()
                     if s == test_set for g in r.get("groups", {})})
    lines = ["| view | policy | model | " + " | ".join(groups) + " |",
             "|---|---|---|" + "---:|" * len(groups)]
    for key in keys:
        for name, rows in models:
            r = rows.get(key)
            scores = r.get("groups", {}) if r else {}
            cells = [f"{scores[g]['bleu']:.2f}" if g in scores else "–" for g in groups]
            lines.append(f"| {key[1]} | {key[2]} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", type=Path, nargs="+", help="benchmark-model.sh output, a model each")
    p.add_argument("--groups", metavar="SET", help="per-source BLEU of this test set instead")
    args = p.parse_args()
    models = [(f.stem, read(f)) for f in args.files]
    print(groups_table(models, args.groups) if args.groups else model_table(models))


if __name__ == "__main__":
    main()
