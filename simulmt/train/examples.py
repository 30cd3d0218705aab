"""The training examples of a run: the corpus split tokenized (with teacher targets, upsampling
and the recognizer view where configured) and, per epoch, its subword draws and batches."""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path

from simulmt.data.asr import recognizer_view
from simulmt.data.corpus import iter_split_side, read_parallel
from simulmt.data.tokenizer import Tokenizer
from simulmt.train.batches import Example, bucket_batches, make_examples, resegmented, upsample
from simulmt.train.config import TrainConfig

log = logging.getLogger(__name__)


def with_teacher_targets(pairs: list[tuple[str, str]], path: Path) -> list[tuple[str, str]]:
    """The pairs with each target replaced by the teacher's translation on the same line of
    `path` (an empty teacher line keeps the reference); ValueError if the line counts differ."""
    teacher = path.read_text(encoding="utf-8").splitlines()
    if len(teacher) != len(pairs):
        raise ValueError(f"distill file {path} has {len(teacher)} lines but the training split "
                         f"has {len(pairs)}: it must translate train.src line by line")
    return [(s, t.strip() or ref) for (s, ref), t in zip(pairs, teacher, strict=True)]


def training_pairs(cfg: TrainConfig) -> list[tuple[str, str]]:
    """The text pairs of the training split as the run trains on them."""
    pairs = read_parallel(cfg.data, "train", cfg.src, cfg.tgt)
    if cfg.distill is not None:
        pairs = with_teacher_targets(pairs, cfg.distill)
    if cfg.upsample:
        sources = list(iter_split_side(cfg.data, "train", "source"))
        pairs = upsample(pairs, sources, cfg.upsample)
    return pairs


def tokenized(cfg: TrainConfig, tok: Tokenizer, pairs: list[tuple[str, str]]) -> list[Example]:
    """The deterministic segmentation of `pairs` (and of their recognizer view, if used)."""
    ids = [(tok.encode(s), tok.encode(t)) for s, t in pairs]
    asr = [tok.encode(recognizer_view(s)) for s, _ in pairs] if cfg.asr_rate else None
    return make_examples(ids, tok.is_word_start, max_len=cfg.max_len, asr=asr)


def epoch_data(cfg: TrainConfig, tok: Tokenizer, segmented: list[Example],
               pairs: list[tuple[str, str]], epoch: int) -> tuple[list[Example], list[list[int]]]:
    """The examples and length-bucketed batches of `epoch` (a pure function of the config and
    the epoch, so a resumed run rebuilds them exactly). With subword regularization each epoch
    draws new segmentations, batched after the draw so padding stays small."""
    examples = segmented
    alpha = cfg.subword_alpha
    if alpha:
        started = time.time()
        rng = random.Random(cfg.seed * 104_729 + epoch)
        sample = tok.sample
        examples = []
        for e in segmented:
            src, tgt = pairs[e.line]
            asr = sample(recognizer_view(src), alpha=alpha, rng=rng) if e.asr else []
            examples.append(resegmented(
                e, src=sample(src, alpha=alpha, rng=rng),
                tgt=sample(tgt, alpha=alpha, rng=rng), asr=asr,
                is_word_start=tok.is_word_start, max_len=cfg.max_len))
        log.info("epoch %d: subword draws for %d pairs in %.0f s", epoch, len(examples),
                 time.time() - started)
    return examples, bucket_batches(examples, max_tokens=cfg.max_tokens)
