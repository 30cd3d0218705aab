"""The training loop: prefix-to-prefix (multi-path wait-k) training with exact resume, the same
code on a CPU, a GPU and several GPUs under `torchrun` (DDP)."""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from simulmt.data.corpus import read_parallel
from simulmt.data.tokenizer import Tokenizer
from simulmt.data.vocab import PAD_ID
from simulmt.input.words import FULL
from simulmt.model.checkpoint import (
    CheckpointError,
    load_checkpoint,
    model_from_checkpoint,
    save_checkpoint,
)
from simulmt.model.runtime import limit_onednn_primitive_cache
from simulmt.model.transformer import SimulTransformer
from simulmt.train import dev
from simulmt.train.batches import Batch, Example, collate
from simulmt.train.config import TrainConfig
from simulmt.train.device import (
    agree,
    leave_world,
    make_optimizer,
    pick_device,
    setup_world,
    to_device,
    tune_for,
    use_bf16,
)
from simulmt.train.examples import epoch_data, tokenized, training_pairs, with_teacher_targets
from simulmt.train.loss import smoothed_cross_entropy
from simulmt.train.progress import Progress, StopFlag, Window, memory_note
from simulmt.train.schedule import epoch_order, lr_factor, sample_k

log = logging.getLogger(__name__)

# names other modules (and older scripts) import from here
__all__ = ["Progress", "Trainer", "epoch_order", "loss_fn", "lr_factor", "memory_note",
           "pick_device", "sample_k", "with_teacher_targets"]


def loss_fn(
    model: torch.nn.Module, batch: Batch, smoothing: float, device: torch.device
) -> torch.Tensor:
    """Mean label-smoothed cross-entropy per real target token of a batch."""
    batch = to_device(batch, device)
    logits = model(batch.src, batch.tgt_in, batch.vis)  # (B, T, V)
    return (
        smoothed_cross_entropy(
            logits.flatten(0, 1),  # (B*T, V)
            batch.tgt_out.flatten(),  # (B*T,)
            smoothing=smoothing,
            ignore_index=PAD_ID,
        )
        / batch.n_tokens
    )


class Trainer:
    def __init__(self, cfg: TrainConfig, *, resume: bool = False) -> None:
        self.cfg = cfg
        limit_onednn_primitive_cache()  # before any matmul (runtime.py)
        self.world = setup_world(cfg.device)
        self.rank = self.world.rank
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = pick_device(cfg.device, local_rank=self.world.local_rank)
        tune_for(self.device)
        self.bf16 = use_bf16(cfg.bf16, self.device)  # autocast where the device has bf16
        torch.manual_seed(cfg.seed)
        self.tok = Tokenizer.load(cfg.data / "spm.model")
        if self.tok.vocab_size != cfg.model.vocab_size:
            raise ValueError(
                f"tokenizer has {self.tok.vocab_size} pieces but model.vocab_size="
                f"{cfg.model.vocab_size}; set model.vocab_size={self.tok.vocab_size}"
            )
        if cfg.max_len + 2 > cfg.model.max_len:
            raise ValueError(f"max_len={cfg.max_len} training tokens (+ BOS/EOS) exceed the "
                             f"model's max_len={cfg.model.max_len} positions")
        pairs = training_pairs(cfg)
        self.pairs = pairs if cfg.subword_alpha else []  # the text, for re-segmenting
        self.segmented = tokenized(cfg, self.tok, pairs)  # the deterministic segmentation
        del pairs
        # this epoch's examples and batches: the deterministic ones, or with subword
        # regularization a new draw each epoch
        self.train: list[Example] = []
        self.batches: list[list[int]] = []
        dev_pairs = read_parallel(cfg.data, "dev", cfg.src, cfg.tgt)  # ordered by source
        step = max(1, len(dev_pairs) // max(cfg.dev_sentences, 1))  # spread out
        self.dev = dev_pairs[::step][: cfg.dev_sentences]
        self.model = SimulTransformer(cfg.model).to(self.device)
        self.ddp: torch.nn.Module = self.model
        if self.world.size > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.ddp = DistributedDataParallel(self.model, device_ids=ids)
        if cfg.compile:
            self.ddp = torch.compile(self.ddp, dynamic=True)  # type: ignore[assignment]
        self.opt = make_optimizer(self.model.parameters(), device=self.device, lr=cfg.lr,
                                  betas=cfg.betas, weight_decay=cfg.weight_decay)
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
            "model %.1fM parameters, %d training pairs in %d batches, device %s (%s), world %d",
            self.model.num_parameters() / 1e6,
            len(self.train),
            len(self.batches),
            self.device,
            "bf16 autocast" if self.bf16 else "float32",
            self.world.size,
        )

    def _epoch_data(self, epoch: int) -> tuple[list[Example], list[list[int]]]:
        return epoch_data(self.cfg, self.tok, self.segmented, self.pairs, epoch)

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
        return {
            "model_config": self.cfg.model.to_dict(),
            "model": self.model.state_dict(),
            "train_config": self.cfg.to_dict(),
            "optimizer": self.opt.state_dict(),
            "scheduler": self.sched.state_dict(),
            "rng": torch.get_rng_state(),
            "progress": asdict(self.progress),
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
        weights = model_from_checkpoint(path, data).state_dict()
        self.model.load_state_dict({k: v.to(self.device) for k, v in weights.items()})
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
    def dev_bleu(self, k: int) -> float:
        return dev.bleu(self.model, self.tok, self.dev, k=k)

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

    # ---- the loop ------------------------------------------------------------------
    def run(self) -> Progress:
        """Train until max_steps, the time budget, or SIGTERM/SIGINT (which save first)."""
        stop = StopFlag()
        try:
            with stop.installed():
                return self._run(stop)
        finally:
            leave_world(self.world)

    def _run(self, stop: StopFlag) -> Progress:
        cfg, p, world = self.cfg, self.progress, self.world
        self.model.train()
        start = last = time.time()
        bar = _progress_bar(cfg.max_steps, p.step, enabled=self.rank == 0)
        window = Window(p.step)
        while p.step < cfg.max_steps:
            order = epoch_order(len(self.batches), cfg.seed, p.epoch)
            while p.batch_pos + world.size <= len(order) and p.step < cfg.max_steps:
                idx = order[p.batch_pos + world.rank]  # each rank its own batch of the step
                p.batch_pos += world.size
                batch = self._batch(self.batches[idx], p.step)
                loss = self._update(batch)  # queued on the device: no waiting for it here
                p.step += 1
                now = time.time()
                p.seconds, last = p.seconds + now - last, now
                window.add(loss, batch.n_tokens)
                logged = p.step % cfg.log_every == 0
                if logged:
                    window = self._log(window, bar)
                if bar is not None:
                    bar.update(1)
                if p.step % cfg.eval_every == 0:
                    self._evaluate()
                elif p.step % cfg.save_every == 0:
                    self.save()
                over = bool(cfg.max_minutes) and now - start > cfg.max_minutes * 60
                # alone, every step may stop; several ranks agree at log lines (one all-reduce)
                if (world.size == 1 or logged) and agree(over or stop.requested, world=world,
                                                         device=self.device):
                    log.info("stopping at step %d (time budget or signal); saving", p.step)
                    break
            else:
                if p.batch_pos + world.size > len(order):
                    p.epoch, p.batch_pos = p.epoch + 1, 0
                    self._use_epoch(p.epoch)
                continue
            break
        self.save()
        if bar is not None:
            bar.close()
        return p

    def _log(self, window: Window, bar: Any) -> Window:
        """Write a progress line (a terminal's bar, or a log line when stderr is no terminal)
        and start the next window. Reading the window's loss is the loop's one device sync."""
        if self.rank == 0:
            lr = self.sched.get_last_lr()[0]
            if bar is not None:
                bar.set_postfix(loss=f"{window.mean_loss():.3f}", lr=f"{lr:.2e}")
            else:
                log.info("%s, lr %.2e", window.line(self.progress.step), lr)
        return Window(self.progress.step)

    def _update(self, batch: Batch) -> torch.Tensor:
        """One optimizer step; returns the batch's loss (detached, on the device)."""
        self.opt.zero_grad(set_to_none=True)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            loss = loss_fn(self.ddp, batch, self.cfg.label_smoothing, self.device)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip)
        self.opt.step()
        self.sched.step()
        return loss.detach()


def _progress_bar(total: int, initial: int, *, enabled: bool) -> Any:
    """A tqdm bar on a terminal; None for a log file (a background run), or where tqdm is not
    installed (training needs only torch, sentencepiece, sacrebleu and numpy)."""
    if not enabled or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, initial=initial, unit="step")
