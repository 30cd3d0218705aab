"""Training and scoring of the restorer (pure functions over labelled sentences, no I/O).

An example is a run of 1..`max_run` consecutive sentences of a document, joined into one
recognizer-word stream, so the network learns sentence starts inside a stream as well as at
its start. Batches hold examples of similar length (little padding). Each lookahead's head is
trained on the labels of the word it decides; the loss sums case and punctuation over heads.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from simulmt.restore.labels import Case, Labelled, Punct, label_words
from simulmt.restore.model import RestorerNet
from simulmt.smallnet.features import words_features
from simulmt.smallnet.fitting import fit_steps

__all__ = ["FitConfig", "Restoration", "Sentences", "fit", "score"]

log = logging.getLogger(__name__)
IGNORE = -100  # label of padding


@dataclass(frozen=True)
class FitConfig:
    steps: int = 8000  # about 12 minutes on two CPU threads
    batch: int = 128  # examples per step
    max_run: int = 3  # sentences joined into one example, at most
    max_words: int = 80  # longer examples are left out
    lr: float = 2e-3  # Adam; decays linearly to 0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "batch", "max_run", "max_words"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class Sentences:
    """Labelled sentences, featurised once, grouped into documents (lists of indices)."""

    items: list[Labelled]
    ids: list[torch.Tensor]  # per sentence (T_i, N_IDS) long
    flags: list[torch.Tensor]  # per sentence (T_i, N_FLAGS) float
    documents: list[list[int]]

    @classmethod
    def from_documents(cls, documents: Sequence[Sequence[str]], buckets: int) -> Sentences:
        items: list[Labelled] = []
        ids: list[torch.Tensor] = []
        flags: list[torch.Tensor] = []
        docs: list[list[int]] = []
        for doc in documents:
            docs.append([])
            for sentence in doc:
                lab = label_words(sentence.split())
                if not lab.words:
                    continue
                i, f = words_features(lab.words, buckets)  # (T, N_IDS), (T, N_FLAGS)
                docs[-1].append(len(items))
                items.append(lab)
                ids.append(i)
                flags.append(f)
        return cls(items, ids, flags, [d for d in docs if d])

    def __len__(self) -> int:
        return len(self.items)


def _examples(data: Sentences, cfg: FitConfig, rng: random.Random) -> list[list[int]]:
    """One epoch: every sentence starts a run of 1..max_run sentences of its document."""
    out = []
    for doc in data.documents:
        for k in range(len(doc)):
            run = doc[k : k + rng.randint(1, cfg.max_run)]
            while len(run) > 1 and sum(len(data.items[i].words) for i in run) > cfg.max_words:
                run = run[:-1]
            if len(data.items[run[0]].words) <= cfg.max_words:
                out.append(run)
    return out


def _batch(data: Sentences, runs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, ...]:
    """ids (B, T, N_IDS), flags (B, T, N_FLAGS), cases (B, T), puncts (B, T); padded."""
    lengths = [sum(len(data.items[i].words) for i in run) for run in runs]
    b, t = len(runs), max(lengths)
    ids = torch.zeros(b, t, data.ids[0].shape[1], dtype=torch.long)
    flags = torch.zeros(b, t, data.flags[0].shape[1])
    cases = torch.full((b, t), IGNORE)
    puncts = torch.full((b, t), IGNORE)
    for row, run in enumerate(runs):
        ids[row, : lengths[row]] = torch.cat([data.ids[i] for i in run])
        flags[row, : lengths[row]] = torch.cat([data.flags[i] for i in run])
        cases[row, : lengths[row]] = torch.tensor([c for i in run for c in data.items[i].cases])
        puncts[row, : lengths[row]] = torch.tensor([p for i in run for p in data.items[i].puncts])
    return ids, flags, cases, puncts


def _loss(
    logits: Sequence[torch.Tensor], cases: torch.Tensor, puncts: torch.Tensor
) -> torch.Tensor:
    """logits[l] (B, T-l, N_CLASSES) decide words 0..T-l-1."""
    nc, total = len(Case), []
    for out in logits:
        n = out.shape[1]
        if n == 0:
            continue
        total.append(
            F.cross_entropy(
                out[..., :nc].reshape(-1, nc), cases[:, :n].reshape(-1), ignore_index=IGNORE
            )
        )
        total.append(
            F.cross_entropy(
                out[..., nc:].reshape(-1, len(Punct)),
                puncts[:, :n].reshape(-1),
                ignore_index=IGNORE,
            )
        )
    return torch.stack(total).sum()


def fit(
    net: RestorerNet,
    data: Sentences,
    cfg: FitConfig,
    *,
    progress: Callable[[int, float], None] | None = None,
) -> float:
    """Train `net` in place; returns the mean loss of the last 100 steps."""
    if not len(data):
        raise ValueError("no training words: give text with at least one word")
    rng = random.Random(cfg.seed)
    torch.manual_seed(cfg.seed)
    batches: list[list[list[int]]] = []

    def loss_at(step: int) -> torch.Tensor:
        if not batches:  # a new epoch: runs of similar length share a batch
            runs = _examples(data, cfg, rng)
            runs.sort(key=lambda r: sum(len(data.items[i].words) for i in r))
            batches.extend(runs[i : i + cfg.batch] for i in range(0, len(runs), cfg.batch))
            rng.shuffle(batches)
        ids, flags, cases, puncts = _batch(data, batches.pop())
        return _loss(net(ids, flags), cases, puncts)

    return fit_steps(net, steps=cfg.steps, lr=cfg.lr, loss_at=loss_at, progress=progress)


@dataclass(frozen=True)
class Restoration:
    """Accuracy of one lookahead's head on labelled text."""

    lookahead: int
    case_accuracy: float
    comma_precision: float
    comma_recall: float
    words: int

    def as_dict(self) -> dict[str, float | int]:
        return {
            "lookahead": self.lookahead,
            "case_accuracy": self.case_accuracy,
            "comma_precision": self.comma_precision,
            "comma_recall": self.comma_recall,
            "words": self.words,
        }


@torch.no_grad()
def score(net: RestorerNet, data: Sentences, lookaheads: Sequence[int]) -> list[Restoration]:
    """Case accuracy and comma precision/recall per lookahead, each sentence restored on its
    own (as one line of `simulmt eval --source-style asr`); a sentence's last words are
    decided with the lookahead they have, as `Restorer.finish` does."""
    for lk in lookaheads:
        if not 0 <= lk <= net.cfg.max_lookahead:
            raise ValueError(f"lookahead {lk} not in 0..{net.cfg.max_lookahead}")
    nc = len(Case)
    counts = {lk: [0, 0, 0, 0, 0] for lk in lookaheads}  # right, total, tp, fp, fn
    for item, ids, flags in zip(data.items, data.ids, data.flags, strict=True):
        heads = net(ids[None], flags[None])  # per lookahead l: (1, T-l, N_CLASSES)
        t = ids.shape[0]
        for lk in lookaheads:
            # word j is decided by head min(lk, T-1-j): the last words have less to read
            rows = [heads[min(lk, t - 1 - j)][0, j] for j in range(t)]
            o = torch.stack(rows)  # (T, N_CLASSES)
            cases, puncts = o[:, :nc].argmax(1).tolist(), o[:, nc:].argmax(1).tolist()
            c = counts[lk]
            for j in range(t):
                comma, gold = puncts[j] == Punct.COMMA, item.puncts[j] == Punct.COMMA
                c[0] += cases[j] == item.cases[j]
                c[2] += comma and gold
                c[3] += comma and not gold
                c[4] += gold and not comma
            c[1] += t
    out = []
    for lk in lookaheads:
        right, total, tp, fp, fn = counts[lk]
        out.append(
            Restoration(
                lk, right / max(1, total), tp / max(1, tp + fp), tp / max(1, tp + fn), total
            )
        )
    return out
