"""Padding cost of subword regularization: where the sampled splits are drawn decides it.

    python bench/subword_padding.py --corpus cache/corpus-lex --alpha 0.3

Batches are bucketed by length (`bucket_batches`). Drawing each batch's splits *after*
bucketing (per step) lets a batch's longest draw set its width; drawing the whole epoch *before*
bucketing (what the trainer does) keeps batches tight. Prints padded and real tokens (source +
target, wait-3 collation) for the deterministic split and both ways of drawing, over random
batches of a random sample of the corpus; no model is run.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from simulmt.data.tokenizer import Tokenizer
from simulmt.train.batches import Example, bucket_batches, collate, make_examples, resegmented


def tokens(examples: list[Example]) -> tuple[int, int]:
    batch = collate(examples, 3, target_words=True)
    real = int((batch.src > 0).sum() + (batch.tgt_out > 0).sum())
    return batch.src.numel() + batch.tgt_in.numel(), real


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=Path("cache/corpus-lex"))
    parser.add_argument("--alpha", type=float, default=0.3)
    parser.add_argument("--pairs", type=int, default=60_000)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--max-tokens", type=int, default=6000)
    args = parser.parse_args()
    from machine import describe  # bench/machine.py: where this ran

    print(describe(), flush=True)
    tok = Tokenizer.load(args.corpus / "spm.model")
    de = (args.corpus / "train.de").read_text(encoding="utf-8").splitlines()
    en = (args.corpus / "train.en").read_text(encoding="utf-8").splitlines()
    pick = random.Random(0).sample(range(len(de)), min(args.pairs, len(de)))
    pairs = [(de[i], en[i]) for i in pick]
    fixed = make_examples([(tok.encode(s), tok.encode(t)) for s, t in pairs], tok.is_word_start,
                          max_len=100)
    rng = random.Random(1)

    def draw(e: Example) -> Example:
        s, t = pairs[e.line]
        return resegmented(e, src=tok.sample(s, alpha=args.alpha, rng=rng),
                           tgt=tok.sample(t, alpha=args.alpha, rng=rng), asr=[],
                           is_word_start=tok.is_word_start, max_len=100)

    chosen = random.Random(2).sample(bucket_batches(fixed, max_tokens=args.max_tokens),
                                     args.batches)
    drawn = [draw(e) for e in fixed]  # the epoch's draw, then bucketed afresh
    epoch = random.Random(2).sample(bucket_batches(drawn, max_tokens=args.max_tokens),
                                    args.batches)
    rows = {
        "deterministic split": [tokens([fixed[i] for i in b]) for b in chosen],
        "drawn per batch, after bucketing": [tokens([draw(fixed[i]) for i in b])
                                             for b in chosen],
        "drawn per epoch, before bucketing": [tokens([drawn[i] for i in b]) for b in epoch],
    }
    print(f"{args.batches} batches of <= {args.max_tokens} padded tokens, alpha {args.alpha}")
    print("| split | padded | real | padded / real |\n|---|---:|---:|---:|")
    for name, counts in rows.items():
        padded, real = sum(p for p, _ in counts), sum(r for _, r in counts)
        print(f"| {name} | {padded:,} | {real:,} | {padded / real:.2f} |")


if __name__ == "__main__":
    main()
