"""The model card (docs/MODEL.md) of a released model, written from what the release recorded.

    python scripts/model_card.py --model simulmt/models/de-en --corpus cache/corpus \\
        --results cache/benchmarks/de-en.jsonl --previous cache/benchmarks/de-en-small.jsonl \\
        --notes notes/model-notes.md > docs/MODEL.md

Every fact comes from where it was recorded, so the card cannot drift from the model:
architecture, training settings, updates, averaged checkpoints and training hours from
`model.pt` (`simulmt export`); the data, each source's licence, attribution, package versions
and file checksums from the corpus's `manifest.json` (`simulmt data build`); the results from
`scripts/benchmark-model.sh`'s JSON lines (the tables of `scripts/model_table.py`, the previous
release beside). `--notes` adds hand-written sections (the limits, remarks) verbatim.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from typing import Any

import torch

_spec = importlib.util.spec_from_file_location("model_table", Path(__file__).with_name(
    "model_table.py"))
assert _spec is not None and _spec.loader is not None
model_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(model_table)


def mb(path: Path) -> str:
    return f"{path.stat().st_size / 1e6:.1f} MB"


def model_rows(folder: Path) -> tuple[str, list[tuple[str, str]]]:
    """The model's name and its (field, value) rows: architecture, size, training."""
    data: dict[str, Any] = torch.load(folder / "model.pt", map_location="cpu",
                                      weights_only=True)
    meta, mc, tc = data["meta"], data["model_config"], data.get("train_config", {})
    # tied embeddings are saved twice (embed.weight and out_proj.weight): count them once
    tied = {"out_proj.weight"} if mc.get("tie_embeddings") else set()
    params = sum(v.numel() for k, v in data["model"].items() if k not in tied)
    dtype = next(iter(data["model"].values())).dtype
    files = [f"{mb(folder / 'model.pt')} `model.pt` ({str(dtype).removeprefix('torch.')})"]
    extras = ("spm.model", "policy.pt", "segmenter.pt", "restorer.pt")
    files += [f"{mb(folder / f)} `{f}`" for f in extras if (folder / f).exists()]
    ks = ", ".join("full" if k == 0 else str(k) for k in tc.get("wait_k", []))
    upsample = tc.get("upsample") or {}
    rows = [
        ("task", f"{meta['src']} → {meta['tgt']} simultaneous translation (prefix-to-prefix)"),
        ("architecture", f"Transformer, causal encoder {mc['enc_layers']} layers, decoder "
                         f"{mc['dec_layers']} layers, d_model {mc['d_model']}, {mc['n_heads']} "
                         f"heads, FFN {mc['d_ff']}, pre-LayerNorm, tied joint embeddings"),
        ("parameters", f"{params / 1e6:.1f} M"),
        ("files", " · ".join(files)),
        ("vocabulary", f"joint sentencepiece, {mc['vocab_size']:,} pieces"),
        ("objective", f"label-smoothed ({tc.get('label_smoothing', '?')}) cross-entropy, "
                      f"multi-path wait-k with k per batch from {{{ks}}}"
                      + (" counted in target words" if tc.get("target_words") else "")
                      + (f"; {tc['asr_rate']:.0%} of the sources in their recognizer view "
                         "(lowercase, no punctuation)" if tc.get("asr_rate") else "")
                      + (f"; subword regularization (every pair's segmentation sampled anew "
                         f"each epoch, α {tc['subword_alpha']})" if tc.get("subword_alpha")
                         else "")),
        ("optimisation", f"AdamW, peak lr {tc.get('lr')}, {tc.get('warmup')} warm-up steps, "
                         f"≈{tc.get('max_tokens')} tokens per batch"
                         + (", bf16 autocast" if tc.get("bf16") else "")
                         + (", upsampled: " + ", ".join(f"{k} ×{v}" for k, v in upsample.items())
                            if upsample else "")),
        ("training", training_row(meta, tc)),
    ]
    return str(meta["name"]), rows


def training_row(meta: dict[str, Any], tc: dict[str, Any]) -> str:
    """Updates, hours and what was shipped: a checkpoint average, or a soup of fine-tunes."""
    hours = meta.get("train_hours") or 0
    if soup := meta.get("soup"):
        # a fine-tune's step count goes on from its starting model's, its hours are its own
        parts = [f"`{x['model']}` ({x['weight']:.2f}; {int(x.get('steps', 0)):,} updates counted "
                 f"from scratch, {float(x.get('train_hours', 0)):.1f} h of its own)" for x in soup]
        return ("shipped: the weighted mean of the weights (a model soup, `simulmt soup`) of "
                + ", ".join(parts) + f"; {hours:.1f} h wall in all on {tc.get('threads')} CPU "
                "threads (the settings above are the first ingredient's; the fine-tunes' are in "
                "the notes below)")
    return (f"{meta['steps']:,} updates"
            + (f", {hours:.1f} h wall on {tc.get('threads')} CPU threads" if hours else "")
            + "; shipped: the average of " + ", ".join(meta.get("averaged", [])))


def data_rows(corpora: list[Path]) -> tuple[str, list[str]]:
    """The data summary line and a table row per source (pairs, licence, origin). The first
    corpus is the main one; a later one (a fine-tune's) adds the sources the first lacks."""
    manifests = [json.loads((c / "manifest.json").read_text(encoding="utf-8")) for c in corpora]
    splits = manifests[0]["splits"]
    summary = (f"{splits['train']:,} training pairs, dev {splits['dev']:,}, test "
               f"{splits['test']:,}; dev and test held out by document")
    sources: dict[str, tuple[dict[str, Any], str]] = {}
    for corpus, manifest in zip(corpora, manifests, strict=True):
        for name, src in manifest["sources"].items():
            sources.setdefault(name, (src, "" if corpus == corpora[0] else corpus.name))
    if len(corpora) > 1:
        summary += ("; sources marked with a corpus name were only in that fine-tune's corpus "
                    "(no dev or test of their own)")
    rows = []
    for name, (src, extra) in sources.items():
        origin = src.get("package", "")
        if files := src.get("files"):
            origin = "; ".join(f"`{Path(f['file']).name}` ({f['lines']:,} lines, sha256 "
                               f"{f['sha256'][:12]}…)" for f in files)
        label = f"{name} ({extra})" if extra else name
        rows.append(f"| {label} | {src['train']:,} | {src['dev']:,} | {src['test']:,} | "
                    f"{src.get('licence', '?')} | {origin} |")
    return summary, rows


def card(*, model: Path, corpus: list[Path], results: Path, previous: Path | None,
         notes: Path | None) -> str:
    name, rows = model_rows(model)
    summary, sources = data_rows(corpus)
    out = [f"# Model card: `{name}`", "", "| | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in rows]
    out += ["", "## Data", "", summary + ".", "",
            "| source | train | dev | test | licence (and attribution) | origin |",
            "|---|---:|---:|---:|---|---|", *sources]
    models = [(results.stem, model_table.read(results))]
    if previous is not None:
        models.append((previous.stem, model_table.read(previous)))
    out += ["", "## Results", "",
            "Greedy unless beam 5; AL in source words (word-level writes); loops: % of outputs "
            "with a word trigram or a 2–5 character unit three times in a row"
            + ("; the previous release beside it" if previous else "") + ".", "",
            model_table.model_table(models)]
    if any(r.get("groups") for _, rows_ in models for r in rows_.values()):
        test_set = next(k[0] for _, rows_ in models for k, r in rows_.items() if r.get("groups"))
        out += ["", f"Per source ({test_set}):", "",
                model_table.groups_table(models, test_set)]
    if notes is not None:
        out += ["", notes.read_text(encoding="utf-8").strip()]
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, required=True, help="the released model folder")
    p.add_argument("--corpus", type=Path, required=True, action="append",
                   help="the corpus it was trained on (repeat: a fine-tune's corpus adds the "
                        "sources the first lacks)")
    p.add_argument("--results", type=Path, required=True,
                   help="its scripts/benchmark-model.sh JSON lines")
    p.add_argument("--previous", type=Path, help="the previous release's, to show beside")
    p.add_argument("--notes", type=Path, help="markdown to append (limits, remarks)")
    args = p.parse_args()
    print(card(model=args.model, corpus=args.corpus, results=args.results,
               previous=args.previous, notes=args.notes), end="")


if __name__ == "__main__":
    main()
