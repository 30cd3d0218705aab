"""Does a sentence's translation depend on what it is batched with? (int8 quantization)

Greedy full-sentence decoding of newstest2015 lines, each alone and all in one batch, with the
bundled model in float32, in simulmt's int8 (per-row activation scales, simulmt.model.int8) and
in PyTorch's dynamic int8 (one activation scale per batch tensor, what `--dtype int8` used
before). Prints how many outputs differ between alone and batched, the largest logit
difference of a teacher-forced pass, and each mode's BLEU (batched).

    .venv/bin/python bench/int8_batch.py [--lines 200]
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path
from typing import cast

import sacrebleu
import torch
from torch import nn

from simulmt.data.vocab import BOS_ID
from simulmt.engine import Engine
from simulmt.input.words import word_ends
from simulmt.model.transformer import SimulTransformer
from simulmt.search.offline import greedy_decode, pad_batch

NEWS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpora" / "newstest"


def torch_dynamic(model: SimulTransformer) -> SimulTransformer:
    """A copy of `model` with PyTorch's dynamic int8 linears (the same class, its
    `nn.Linear`s swapped)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    return cast(SimulTransformer, quantized)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=200, help="every 5th line, up to N")
    parser.add_argument("--batch", type=int, default=50, help="sentences per batch")
    args = parser.parse_args()
    from machine import describe  # bench/machine.py: where this ran

    print(describe(), flush=True)
    torch.set_num_threads(1)
    src_lines = (NEWS / "newstest2015-ende.de").read_text(encoding="utf-8").splitlines()[::5]
    ref_lines = (NEWS / "newstest2015-ende.en").read_text(encoding="utf-8").splitlines()[::5]
    src_lines, ref_lines = src_lines[: args.lines], ref_lines[: args.lines]
    base = Engine.load()
    tok = base.tokenizer
    srcs = [tok.encode(line) for line in src_lines]
    ends = [word_ends(s, tok.is_word_start) for s in srcs]
    modes: dict[str, SimulTransformer] = {
        "float32": base.model,
        "int8 per row (simulmt)": Engine.load(dtype="int8").model,
        "int8 per tensor (torch.ao dynamic)": torch_dynamic(base.model),
    }
    print(f"{len(srcs)} lines of newstest2015 (every 5th), greedy, full sentence, 1 thread")
    print("| mode | outputs differing alone vs batched | max logit diff | BLEU (batched) | s |")
    print("|---|---:|---:|---:|---:|")
    for name, model in modes.items():
        start = time.perf_counter()
        with torch.no_grad():
            alone = [greedy_decode(model, [s], [e])[0] for s, e in zip(srcs, ends, strict=True)]
            batched = []
            for i in range(0, len(srcs), args.batch):
                batched += greedy_decode(model, srcs[i:i + args.batch], ends[i:i + args.batch])
            diff = sum(a != b for a, b in zip(alone, batched, strict=True))
            worst = max_logit_diff(model, srcs[: args.batch])
        hyps = [tok.decode(h) for h in batched]
        bleu = sacrebleu.corpus_bleu(hyps, [ref_lines]).score
        print(f"| {name} | {diff} of {len(srcs)} | {worst:.2g} | {bleu:.2f} | "
              f"{time.perf_counter() - start:.0f} |")


def max_logit_diff(model: SimulTransformer, srcs: list[list[int]]) -> float:
    """Teacher-forced logits of each sentence alone vs in one batch (a fixed 4-token prefix)."""
    prefix = (BOS_ID, 5, 6, 7)

    def logits(group: list[list[int]]) -> torch.Tensor:
        memory, _ = model.encode(pad_batch(group))  # (B, S, D)
        cross = model.cross_kv(memory)
        tgt = pad_batch([prefix] * len(group))  # (B, 4)
        vis = torch.tensor([len(s) for s in group]).unsqueeze(1).expand(-1, tgt.shape[1])
        return model.decode(tgt, cross, vis)  # (B, 4, V)

    together = logits(srcs)
    return max(float((logits([s])[0] - together[i]).abs().max()) for i, s in enumerate(srcs))


if __name__ == "__main__":
    main()
