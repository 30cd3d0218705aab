"""Attention-based policies: they read the model's cross-attention, so they need no training.

AlignAtt (Papi, Turchi & Negri, "AlignAtt: Using Attention-based Audio-Translation Alignments
as a Guide for Simultaneous Speech Translation", Interspeech 2023; its predecessor EDAtt,
"Attention as a Guide for Simultaneous Speech Translation", ACL 2023): the cross-attention of
the next target token is read as an alignment. If it points at one of the last `f` source
words, the model is translating what it has only just heard and may still be missing what
follows: READ. Otherwise the next word is supported by source already read: WRITE.

With word writes the search decides once per target word, on the attention of the word's
first token; `obs.signals.attention` holds it summed per source word read (Signal.ATTENTION).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch
from simulmt.policies.base import Action, Observation, PolicyError, Signal, lag_bounds
from simulmt.policies.spec import BasePolicy


def _word_attention(obs: Observation, policy: str) -> torch.Tensor:
    if obs.signals is None or obs.signals.attention is None:
        raise PolicyError(f"policy {policy!r} needs Signal.ATTENTION, but the observation "
                          "has no signals.attention; the search must compute policy.needs")
    attn = obs.signals.attention
    if attn.dim() != 1 or int(attn.shape[0]) != obs.src_read:
        raise PolicyError(f"policy {policy!r}: attention must have shape (src_read,) = "
                          f"({obs.src_read},), got {tuple(attn.shape)}")
    return attn


@dataclass(frozen=True)
class AlignAtt(BasePolicy):
    """WRITE unless the next word attends most to the last f source words (AlignAtt, Papi 2023).

    Papi, Turchi & Negri, Interspeech 2023 (arXiv:2305.11408); EDAtt, ACL 2023. No training:
    the head-averaged last-layer cross-attention of the next target token, summed per source
    word, is an alignment; if its argmax is one of the last `f` words read, READ, else WRITE.
    Always WRITE once the source is finished. Larger f waits longer.

    `lag_min` (ours, not the paper's) keeps it from running ahead of wait-lag_min: on an
    unfinished source the model can go on writing (hallucinating) while its attention stays on
    early words, and nothing in the rule stops it. With f=0 it is wait-lag_min (0: no bound,
    and f=0 then never READs after the first `k_min` words).
    """

    name: ClassVar[str] = "alignatt"
    needs: ClassVar[frozenset[Signal]] = frozenset({Signal.ATTENTION})
    paper: ClassVar[str] = ("Papi, Turchi & Negri 2023, AlignAtt: Using Attention-based Audio-"
                            "Translation Alignments as a Guide for Simultaneous Speech "
                            "Translation, Interspeech (arXiv:2305.11408)")

    # 2: a frame count of the paper's best speech settings scaled to words; sweep it
    f: int = field(default=2, metadata={
        "help": "READ while the next word attends most to one of the last f source words "
                "(>= 0; larger waits longer)"})
    k_min: int = field(default=1, metadata={
        "help": "source words always read before the first write (>= 1)"})
    # 1: never ahead of wait-1 (word i needs i source words); without it a model that
    # hallucinates on an unfinished source writes on unchecked
    lag_min: int = field(default=1, metadata={
        "help": "minimum lag: READ whenever src_read < lag_min + tgt_written, i.e. never "
                "run ahead of wait-lag_min (0: no bound)"})

    def validate(self) -> None:
        if self.f < 0:
            raise PolicyError(f"f must be >= 0 (got {self.f})")
        if self.k_min < 1:
            raise PolicyError(f"k_min must be >= 1 (got {self.k_min})")
        if self.lag_min < 0:
            raise PolicyError(f"lag_min must be >= 0 (got {self.lag_min})")

    def decide(self, obs: Observation) -> Action:
        bound = lag_bounds(obs, k_min=self.k_min, lag_min=self.lag_min)
        if bound is not None:
            return bound
        if self.f == 0:
            return Action.WRITE
        attn = _word_attention(obs, self.name)  # (W,)
        aligned = int(attn.argmax())  # 0-based source word the next word aligns to
        return Action.READ if aligned >= obs.src_read - self.f else Action.WRITE
