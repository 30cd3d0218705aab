"""Per-connection rate limits: token buckets over frames and bytes received.

A bucket holds up to `burst` tokens and refills at `rate` per second; each frame takes one
message token and its size in byte tokens. A client that empties either bucket is flooding:
the connection answers `rate_limited` and closes with 1008. A speaker sends a few words a
second, and a resume re-sends its backlog at once, which the burst covers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from simulmt.server.config import Admission


@dataclass
class Bucket:
    rate: float  # tokens added per second
    burst: float  # the most tokens held
    clock: Callable[[], float] = time.monotonic
    tokens: float = field(init=False)
    stamp: float = field(init=False)

    def __post_init__(self) -> None:
        self.tokens, self.stamp = self.burst, self.clock()

    def take(self, amount: float) -> bool:
        """Take `amount` tokens; False (taking none) when fewer are left."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if amount > self.tokens:
            return False
        self.tokens -= amount
        return True


class RateLimiter:
    """The frame and byte buckets of one connection."""

    def __init__(self, admission: Admission, *, clock: Callable[[], float] = time.monotonic):
        self.admission = admission
        self.messages = Bucket(admission.messages_per_s, admission.burst_messages, clock)
        self.bytes = Bucket(admission.bytes_per_s, admission.burst_bytes, clock)

    def allow(self, size: int) -> str | None:
        """Count one frame of `size` bytes: None if allowed, else why it is refused."""
        a = self.admission
        if not self.messages.take(1):
            return (
                f"more than {a.messages_per_s:g} messages per second (bursts up to "
                f"{a.burst_messages}); closing"
            )
        if not self.bytes.take(size):
            return (
                f"more than {a.bytes_per_s:g} bytes per second (bursts up to "
                f"{a.burst_bytes}); closing"
            )
        return None
