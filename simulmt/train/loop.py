"""The training loop: prefix-to-prefix (multi-path wait-k) training with exact resume."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import sacrebleu
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from simulmt.data.asr import recognizer_view
from simulmt.data.corpus import iter_split_side, read_parallel
from simulmt.data.tokenizer import Tokenizer
from simulmt.model.checkpoint import (
    CheckpointError,
    load_checkpoint,
    model_from_checkpoint,
    save_checkpoint,
)
from simulmt.model.transformer import SimulTransformer
from simulmt.runtime import limit_onednn_primitive_cache
from simulmt.search.offline import greedy_decode
from simulmt.train.batches import (
    Batch,
    Example,
    bucket_batches,
    collate,
    make_examples,
    resegmented,
    upsample,
)
from simulmt.train.config import TrainConfig
from simulmt.train.loss import smoothed_cross_entropy
from simulmt.vocab import PAD_ID
from simulmt.words import FULL

log = logging.getLogger(__name__)


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint so resume continues exactly."""

    step: int = 0
    epoch: int = 0
    batch_pos: int = 0  # index into this epoch's shuffled batch order
    best_bleu: float = -1.0
    n_batches: int = 0  # batches an epoch had (0: unknown, from an older checkpoint)
    # wall seconds spent in the training loop over all sittings (dev evaluations and saves
    # included; 0 before checkpoints kept it): the compute a model card reports
    seconds: float = 0.0


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def lr_factor(step: int, warmup: int, *, cooldown: int = 0, max_steps: int = 0) -> float:
    """Linear warm-up to 1, then inverse square root decay (Vaswani et al. 2017); with a
    cooldown, the last `cooldown` steps before `max_steps` also fall linearly to 0 (the decay
    phase of a warmup-stable-decay schedule: a run's end gets the low learning rate that
    checkpoint averaging otherwise approximates)."""
    step = max(step, 1)
    factor = min(step / max(warmup, 1), math.sqrt(max(warmup, 1) / step))
    if cooldown > 0:
        factor *= min(1.0, max(0.0, (max_steps - step) / cooldown))
    return factor


def epoch_order(n_batches: int, seed: int, epoch: int) -> list[int]:
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return torch.randperm(n_batches, generator=g).tolist()


def sample_k(cfg: TrainConfig, step: int) -> int:
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    return cfg.wait_k[int(torch.randint(len(cfg.wait_k), (1,), generator=g))]


def loss_fn(
    model: torch.nn.Module, batch: Batch, smoothing: float, device: torch.device
) -> torch.Tensor:
    logits = model(batch.src.to(device), batch.tgt_in.to(device), batch.vis.to(device))  # (B, T, V)
    return (
        smoothed_cross_entropy(
            logits.flatten(0, 1),  # (B*T, V)
            batch.tgt_out.to(device).flatten(),  # (B*T,)
            smoothing=smoothing,
            ignore_index=PAD_ID,
        )
        / batch.n_tokens
    )


def with_teacher_targets(pairs: list[tuple[str, str]], path: Path) -> list[tuple[str, str]]:
    """The pairs with each target replaced by the teacher's translation on the same line of
    `path` (an empty teacher line keeps the reference); ValueError if the line counts differ."""
    teacher = path.read_text(encoding="utf-8").splitlines()
    if len(teacher) != len(pairs):
        raise ValueError(f"distill file {path} has {len(teacher)} lines but the training split "
                         f"has {len(pairs)}: it must translate train.src line by line")
    return [(s, t.strip() or ref) for (s, ref), t in zip(pairs, teacher, strict=True)]


class Trainer:
    def __init__(self, cfg: TrainConfig, *, resume: bool = False) -> None:
        self.cfg = cfg
        limit_onednn_primitive_cache()  # before any matmul (runtime.py)
        self.rank, self.world = _dist_setup()
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = pick_device(cfg.device)
        torch.manual_seed(cfg.seed)
        self.tok = Tokenizer.load(cfg.data / "spm.model")
        if self.tok.vocab_size != cfg.model.vocab_size:
            raise ValueError(
                f"tokenizer has {self.tok.vocab_size} pieces but model.vocab_size="
                f"{cfg.model.vocab_size}; set model.vocab_size={self.tok.vocab_size}"
            )
        self.pairs: list[tuple[str, str]] = []  # the training pairs' text (re-segmenting)
        self.segmented = self._load_split("train")  # the deterministic segmentation
        # this epoch's examples and batches: the deterministic ones, or with subword
        # regularization a new draw each epoch, batched after the draw so padding stays small
        # (drawing per batch padded 1.6x the real tokens at alpha 0.3)
        self.train: list[Example] = []
        self.batches: list[list[int]] = []
        dev = read_parallel(cfg.data, "dev", cfg.src, cfg.tgt)  # ordered by source: spread out
        self.dev = dev[:: max(1, len(dev) // max(cfg.dev_sentences, 1))][: cfg.dev_sentences]
        self.model = SimulTransformer(cfg.model).to(self.device)
        self.ddp: torch.nn.Module = self.model
        if self.world > 1:
            self.ddp = DistributedDataParallel(self.model)
        self.opt = torch.optim.AdamW(
            self.model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
        )
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt,
            lambda s: lr_factor(s, cfg.warmup, cooldown=cfg.cooldown, max_steps=cfg.max_steps),
        )
        self.progress = Progress()
        self.warm_start: dict[str, Any] = {}  # the model this run began from (init_from)
        if resume and (cfg.out / "last.pt").exists():
            self._restore(cfg.out / "last.pt")
        else:
            self._use_epoch(0)
            if cfg.init_from is not None:
                self._warm_start(cfg.init_from)
        log.info(
            "model %.1fM parameters, %d training pairs in %d batches, device %s, world %d",
            self.model.num_parameters() / 1e6,
            len(self.train),
            len(self.batches),
            self.device,
            self.world,
        )

    def _load_split(self, split: str) -> list[Example]:
        pairs = read_parallel(self.cfg.data, split, self.cfg.src, self.cfg.tgt)
        if split == "train" and self.cfg.distill is not None:
            pairs = with_teacher_targets(pairs, self.cfg.distill)
        if split == "train" and self.cfg.upsample:
            sources = list(iter_split_side(self.cfg.data, split, "source"))
            pairs = upsample(pairs, sources, self.cfg.upsample)
        if split == "train" and self.cfg.subword_alpha:
            self.pairs = pairs
        ids = [(self.tok.encode(s), self.tok.encode(t)) for s, t in pairs]
        asr = [self.tok.encode(recognizer_view(s)) for s, _ in pairs] if self.cfg.asr_rate else None
        return make_examples(ids, self.tok.is_word_start, max_len=self.cfg.max_len, asr=asr)

    def _epoch_data(self, epoch: int) -> tuple[list[Example], list[list[int]]]:
        """The examples and length-bucketed batches of `epoch` (a pure function of the config
        and the epoch, so a resumed run rebuilds them exactly)."""
        examples = self.segmented
        alpha = self.cfg.subword_alpha
        if alpha:
            started = time.time()
            rng = random.Random(self.cfg.seed * 104_729 + epoch)
            sample, tok = self.tok.sample, self.tok
            examples = []
            for e in self.segmented:
                src, tgt = self.pairs[e.line]
                asr = sample(recognizer_view(src), alpha=alpha, rng=rng) if e.asr else []
                examples.append(resegmented(
                    e, src=sample(src, alpha=alpha, rng=rng),
                    tgt=sample(tgt, alpha=alpha, rng=rng), asr=asr,
                    is_word_start=tok.is_word_start, max_len=self.cfg.max_len))
            log.info("epoch %d: subword draws for %d pairs in %.0f s", epoch, len(examples),
                     time.time() - started)
        return examples, bucket_batches(examples, max_tokens=self.cfg.max_tokens)

    def _use_epoch(self, epoch: int) -> None:
        if self.cfg.subword_alpha or not self.batches:  # else every epoch's data is the same
            self.train, self.batches = [], []  # free the last draw before the next
            self.train, self.batches = self._epoch_data(epoch)
        self.progress.n_batches = len(self.batches)

    def _batch(self, indices: list[int], step: int) -> Batch:
        """The examples of one step, with this step's k and recognizer-view draws."""
        g = torch.Generator().manual_seed(self.cfg.seed * 7_919 + step)
        asr = (torch.rand(len(indices), generator=g) < self.cfg.asr_rate).tolist()
        return collate([self.train[i] for i in indices], sample_k(self.cfg, step),
                       target_words=self.cfg.target_words, asr=asr)

    # ---- checkpoints ----------------------------------------------------------------
    def payload(self) -> dict[str, Any]:
        p = self.progress
        return {
            "model_config": self.cfg.model.to_dict(),
            "model": self.model.state_dict(),
            "train_config": self.cfg.to_dict(),
            "optimizer": self.opt.state_dict(),
            "scheduler": self.sched.state_dict(),
            "rng": torch.get_rng_state(),
            "progress": asdict(p),
            "tokenizer": self.tok.to_bytes(),
            "warm_start": self.warm_start,
        }

    def _restore(self, path: Path) -> None:
        data = load_checkpoint(path)
        self.model.load_state_dict(data["model"])
        self.opt.load_state_dict(data["optimizer"])
        self.sched.load_state_dict(data["scheduler"])
        torch.set_rng_state(data["rng"])
        self.progress = p = Progress(**data["progress"])
        self.warm_start = dict(data.get("warm_start", {}))
        log.info("resumed from %s at step %d", path, p.step)
        saved = dict(data.get("train_config", {}))
        before = (dict(saved.get("upsample") or {}), float(saved.get("subword_alpha", 0.0)))
        saved_batches = p.n_batches
        self._use_epoch(p.epoch)
        now = (self.cfg.upsample, self.cfg.subword_alpha)
        if before != now or saved_batches not in (0, len(self.batches)):
            # the saved place in the epoch indexes batches that no longer exist
            log.info("the training mix changed (upsample, subword_alpha %s -> %s, %d -> %d "
                     "batches): starting epoch %d afresh", before, now, saved_batches,
                     len(self.batches), p.epoch + 1)
            p.epoch, p.batch_pos = p.epoch + 1, 0
            self._use_epoch(p.epoch)

    def _warm_start(self, source: Path) -> None:
        """Begin from the weights of a model folder or checkpoint; optimizer and schedule fresh."""
        path = source / "model.pt" if source.is_dir() else source
        data = load_checkpoint(path)
        if dict(data["model_config"]) != self.cfg.model.to_dict():
            raise CheckpointError(
                f"init_from {path}: its model config {data['model_config']} differs from the "
                f"training config's model {self.cfg.model.to_dict()}; set [model] to match"
            )
        if data.get("tokenizer") not in (None, self.tok.to_bytes()):
            raise CheckpointError(
                f"init_from {path}: its tokenizer differs from {self.cfg.data / 'spm.model'}; "
                "copy the model's spm.model into the corpus folder (ids would not match)"
            )
        self.model.load_state_dict(model_from_checkpoint(path, data).state_dict())
        self.model.train()
        meta = dict(data.get("meta", {}))
        progress = dict(data.get("progress", {}))
        earlier = int(meta.get("steps", progress.get("step", 0)) or 0)
        self.warm_start = {"from": str(meta.get("name", path)), "steps": earlier}
        log.info("warm start from %s (%s)", path, data.get("meta", {}).get("name", "checkpoint"))

    def save(self, *, best: bool = False) -> None:
        if self.rank != 0:
            return
        out = self.cfg.out
        payload = self.payload()
        save_checkpoint(out / "last.pt", payload)
        save_checkpoint(out / f"step-{self.progress.step}.pt", payload)
        if best:
            save_checkpoint(out / "best.pt", payload)
        steps = sorted(out.glob("step-*.pt"), key=lambda p: int(p.stem.split("-")[1]))
        for old in steps[: -self.cfg.keep_last]:
            old.unlink()
        (out / "config.json").write_text(json.dumps(self.cfg.to_dict(), indent=2) + "\n")

    # ---- evaluation ----------------------------------------------------------------
    @torch.no_grad()
    def dev_bleu(self, k: int) -> float:
        self.model.eval()
        hyps: list[str] = []
        refs = [t for _, t in self.dev]
        for i in range(0, len(self.dev), 64):
            chunk = self.dev[i : i + 64]
            srcs = [self.tok.encode(s)[: self.cfg.model.max_len // 2] or [1] for s, _ in chunk]
            ends = [self._ends(s) for s in srcs]
            out = greedy_decode(self.model, srcs, ends, k=k)
            hyps += [self.tok.decode(o) for o in out]
        self.model.train()
        return float(sacrebleu.corpus_bleu(hyps, [refs]).score)

    def _ends(self, src: list[int]) -> list[int]:
        from simulmt.words import word_ends

        return word_ends(src, self.tok.is_word_start)

    # ---- the loop ------------------------------------------------------------------
    def run(self) -> Progress:
        """Train until max_steps, the time budget, or SIGTERM/SIGINT (which save first)."""
        stop = _StopFlag()
        with stop.installed():
            return self._run(stop)

    def _run(self, stop: _StopFlag) -> Progress:
        cfg, p = self.cfg, self.progress
        self.model.train()
        start = time.time()
        # a terminal gets a progress bar; a log file (a background run) a line per
        # `log_every` steps with the mean loss since the last line (one batch's loss is noisy)
        tty = sys.stderr.isatty()
        bar = tqdm(total=cfg.max_steps, initial=p.step, disable=self.rank != 0 or not tty,
                   unit="step")
        tokens_seen, t0 = 0, time.time()
        last = t0
        window = _Window(p.step)
        while p.step < cfg.max_steps:
            order = epoch_order(len(self.batches), cfg.seed, p.epoch)
            while p.batch_pos + self.world <= len(order) and p.step < cfg.max_steps:
                idx = order[p.batch_pos + self.rank]  # each rank its own batch of the step
                p.batch_pos += self.world
                batch = self._batch(self.batches[idx], p.step)
                loss = self._update(batch)
                p.step += 1
                now = time.time()
                p.seconds, last = p.seconds + now - last, now
                tokens_seen += batch.n_tokens
                rate = tokens_seen / max(time.time() - t0, 1e-6)
                bar.set_postfix(
                    loss=f"{loss:.3f}", tok_s=f"{rate:.0f}", lr=f"{self.sched.get_last_lr()[0]:.2e}"
                )
                bar.update(1)
                window.add(loss, batch.n_tokens)
                if not tty and self.rank == 0 and p.step % cfg.log_every == 0:
                    log.info("%s, lr %.2e", window.line(p.step), self.sched.get_last_lr()[0])
                    window = _Window(p.step)
                if p.step % cfg.eval_every == 0:
                    self._evaluate()
                elif p.step % cfg.save_every == 0:
                    self.save()
                over = cfg.max_minutes and time.time() - start > cfg.max_minutes * 60
                if over or stop.requested:
                    log.info("stopping at step %d (time budget or signal); saving", p.step)
                    self.save()
                    bar.close()
                    return p
            if p.batch_pos + self.world > len(order):
                p.epoch, p.batch_pos = p.epoch + 1, 0
                self._use_epoch(p.epoch)
        self.save()
        bar.close()
        return p

    def _update(self, batch: Batch) -> float:
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cfg.bf16):
            loss = loss_fn(self.ddp, batch, self.cfg.label_smoothing, self.device)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip)
        self.opt.step()
        self.sched.step()
        return float(loss.detach())

    def _evaluate(self) -> None:
        if self.rank != 0 or not self.dev:
            self.save()
            return
        full, wait3 = self.dev_bleu(FULL), self.dev_bleu(3)
        best = full > self.progress.best_bleu
        self.progress.best_bleu = max(full, self.progress.best_bleu)
        log.info("step %d dev BLEU full=%.2f wait-3=%.2f", self.progress.step, full, wait3)
        with open(self.cfg.out / "dev.log", "a") as f:
            f.write(
                json.dumps({"step": self.progress.step, "bleu_full": full, "bleu_wait3": wait3})
                + "\n"
            )
        self.save(best=best)


class _StopFlag:
    """Set by SIGTERM/SIGINT so the loop can save a checkpoint before it exits."""

    def __init__(self) -> None:
        self.requested = False

    def _handler(self, signum: int, frame: object) -> None:
        log.warning("signal %d: saving a checkpoint after this step", signum)
        self.requested = True

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        old = {sig: signal.signal(sig, self._handler) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)


def _dist_setup() -> tuple[int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return (dist.get_rank(), world) if world > 1 else (0, 1)


class _Window:
    """Training progress since a step: mean loss, tokens/s and seconds per step."""

    def __init__(self, step: int) -> None:
        self.step, self.start = step, time.time()
        self.losses: list[float] = []
        self.tokens = 0

    def add(self, loss: float, tokens: int) -> None:
        self.losses.append(loss)
        self.tokens += tokens

    def line(self, step: int) -> str:
        seconds = max(time.time() - self.start, 1e-6)
        mean = sum(self.losses) / max(len(self.losses), 1)
        return (
            f"step {step}: loss {mean:.3f} (mean of {len(self.losses)}), "
            f"{self.tokens / seconds:.0f} tokens/s, {seconds / max(step - self.step, 1):.2f} s/step"
            f"{memory_note()}"
        )


def memory_note() -> str:
    """", RSS now/peak" of this process in GB, for the log line: a long run's memory is the
    first thing to watch on a shared machine (two runs side by side were OOM-killed)."""
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # KiB on Linux
        with open("/proc/self/statm") as f:
            now = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e9
    except (ImportError, OSError, ValueError):  # not Linux: no figure rather than a wrong one
        return ""
    return f", RSS {now:.1f} GB (peak {peak:.1f} GB)"
