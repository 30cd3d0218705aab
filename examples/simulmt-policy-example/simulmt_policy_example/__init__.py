"""An example third-party simulmt policy, registered through the `simulmt.policies` group."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from simulmt.policies import FixedSchedule, PolicyError


@dataclass(frozen=True)
class WaitKStride(FixedSchedule):
    """Wait-k in chunks: read k words, then write s tokens and read s words in turn.

    g(i) = k + s·⌊(i − 1)/s⌋ (wait-k-stride-n, Zeng et al. 2021); s = 1 is plain wait-k.
    """

    name: ClassVar[str] = "wait-k-stride"

    k: int = field(default=2, metadata={"help": "source words read before the first write (>= 1)"})
    s: int = field(default=2, metadata={"help": "tokens written (and words read) per chunk (>= 1)"})

    def validate(self) -> None:
        if self.k < 1:
            raise PolicyError(f"k must be >= 1 (got {self.k})")
        if self.s < 1:
            raise PolicyError(f"s must be >= 1 (got {self.s})")

    def g(self, i: int) -> float:
        if i < 1:
            raise PolicyError(f"g(i) is defined for i >= 1, got i={i}")
        return self.k + self.s * ((i - 1) // self.s)
