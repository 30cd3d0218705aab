"""Markdown tables for README/model card from `simulmt eval --json` output files.

python scripts/results_table.py docs/results-*.jsonl
"""

from __future__ import annotations

import json
import sys


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


if __name__ == "__main__":
    main(sys.argv[1:])
