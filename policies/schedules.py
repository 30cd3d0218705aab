"""Fixed policies given by a schedule g(i): source words to read before writing target word i.

Every policy here decides the same way, with i = tgt_written + 1:

    source finished → WRITE;   src_read < g(i) → READ;   otherwise → WRITE.

So the delay of word i is min(|x|, g(i)) source words (`g_bounded`). g is non-decreasing
and ≥ 1, which makes every schedule monotone: a WRITE at (j, i) is also a WRITE at (j+1, i).
"""

from __future__ import annotations

import abc
import functools
import importlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import ClassVar, cast

from simulmt.policies.base import Action, Observation, PolicyError, check_observation
from simulmt.policies.spec import BasePolicy, parse_int_list

CALLABLE_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")  # module.path:function
VALIDATED_PREFIX = 256  # a callable g is checked for i = 1..this when the policy is built


class FixedSchedule(BasePolicy):
    """Base class of schedule policies: implement `g(i)`; `decide` follows from it."""

    @abc.abstractmethod
    def g(self, i: int) -> float:
        """Source words that must be read before target word i (1-based) is written."""

    def g_bounded(self, i: int, src_len: int) -> int:
        """min(|x|, g(i)): the source prefix length word i sees in a sentence of src_len words."""
        return int(min(src_len, self.g(i)))

    def decide(self, obs: Observation) -> Action:
        check_observation(obs)
        if obs.source_finished:
            return Action.WRITE
        return Action.READ if obs.src_read < self.g(obs.tgt_written + 1) else Action.WRITE


def _check_i(i: int) -> None:
    if isinstance(i, bool) or not isinstance(i, int) or i < 1:
        raise PolicyError(f"g(i) is defined for target positions i >= 1, got i={i!r}")


@dataclass(frozen=True)
class FullSentence(FixedSchedule):
    """Read the whole sentence, then write (the offline baseline): g(i) = |x|."""

    name: ClassVar[str] = "full"

    def g(self, i: int) -> float:
        _check_i(i)
        return math.inf


@functools.lru_cache(maxsize=64)
def _catchup(r: float) -> Fraction:
    return Fraction(repr(r)) - 1  # decimal arithmetic: r=1.7 gives c=7/10, not 0.6999…


@dataclass(frozen=True)
class WaitK(FixedSchedule):
    """Read k words, then alternate WRITE/READ (STACL, Ma et al. 2019), optionally catching up.

    g(i) = k + i − 1 − ⌊c·i⌋ with the catch-up frequency c = r − 1, as STACL's "wait-k with
    catchup" (Ma et al. 2019, §3.3: g_wait-k,c(t) = min{k + t − 1 − ⌊ct⌋, |x|}), where
    r = |y|/|x| is the expected target/source length ratio. With r = 1 (the default) this is
    plain wait-k, g(i) = k + i − 1. With r > 1 every 1/c-th word is written without reading
    a word (asymptotically 1/(1 − c) target words per source word), so the tail after the source
    ends stays short when targets are longer than sources. STACL defines catch-up only for
    such targets: r must lie in [1, 2), which keeps g(1) = k and g non-decreasing; for
    shorter targets write the schedule out with `schedule:g=…`.
    """

    name: ClassVar[str] = "wait-k"
    paper: ClassVar[str] = ("Ma et al. 2019, STACL: Simultaneous Translation with Implicit "
                            "Anticipation and Controllable Latency, ACL (arXiv:1810.08398)")

    k: int = field(default=3, metadata={"help": "source words read before the first write (>= 1)"})
    # 1.0 = plain wait-k (no catch-up); e.g. 1.25 when targets run 25% longer than sources
    r: float = field(default=1.0, metadata={
        "help": "expected |y|/|x| for STACL catch-up, c = r - 1 (1 <= r < 2; 1 = none)"})

    def validate(self) -> None:
        if self.k < 1:
            raise PolicyError(f"k must be >= 1 (got {self.k})")
        if not 1 <= self.r < 2:
            raise PolicyError(f"r must be in [1, 2) (got {self.r}); 1 means no catch-up")

    def g(self, i: int) -> float:
        _check_i(i)
        c = _catchup(self.r)
        return self.k + i - 1 - (math.floor(c * i) if c else 0)  # c = 0: plain wait-k


def _parse_values(text: str) -> tuple[int, ...] | str:
    if text.startswith("["):
        return parse_int_list(text)
    if CALLABLE_RE.match(text):
        return text
    raise ValueError(f"expected a list like [1,2,4] or module:function, got {text!r}")


@functools.lru_cache(maxsize=64)
def _resolve(path: str) -> Callable[[int], int]:
    module_name, _, attr = path.partition(":")
    try:
        obj: object = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise PolicyError(f"g={path}: cannot load it ({type(exc).__name__}: {exc})") from None
    if not callable(obj):
        raise PolicyError(f"g={path}: {type(obj).__name__} object is not callable")
    return cast(Callable[[int], int], obj)


def _call(path: str, i: int) -> object:
    """g(i) from the callable named by `path`, with its failures turned into PolicyError."""
    try:
        return _resolve(path)(i)
    except PolicyError:
        raise
    except Exception as exc:  # user code: any failure is a bad schedule argument
        raise PolicyError(f"g={path} failed at i={i} ({type(exc).__name__}: {exc}); it must "
                          "take the target position i (int >= 1) and return an int") from None


def _check_step(i: int, value: object, previous: int | None) -> int:
    """Raise PolicyError if g(i) = value breaks 'integer, >= 1, non-decreasing'."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(f"g({i}) = {value!r} is not an integer")
    if value < 1:
        raise PolicyError(f"g({i}) = {value} < 1: a schedule must read at least one word "
                          f"(first violation at i={i})")
    if previous is not None and value < previous:
        raise PolicyError(f"g({i}) = {value} < g({i - 1}) = {previous}: a schedule must be "
                          f"non-decreasing (first violation at i={i})")
    return value


@dataclass(frozen=True)
class Schedule(FixedSchedule):
    """Any monotone schedule: a list g(1), g(2), … or a Python callable `module:function`.

    A list is continued past its end with step 1: g(i) = g(n) + (i − n) for i > n (the
    wait-k continuation). A callable takes i (int, ≥ 1) and returns an int; it is checked
    for i = 1..256 when the policy is built and for every later i when asked.
    Both must give integers ≥ 1 that never decrease; PolicyError names the first bad i.
    """

    name: ClassVar[str] = "schedule"

    values: tuple[int, ...] | str = field(metadata={
        "key": "g", "parse": _parse_values, "type_name": "list[int] | module:function",
        "help": "g(1), g(2), … in brackets, or a callable i -> g(i)"})

    def validate(self) -> None:
        values = self.values
        if isinstance(values, list):
            values = tuple(values)
            object.__setattr__(self, "values", values)
        if isinstance(values, tuple):
            if not values:
                raise PolicyError("g must hold at least one value, e.g. g=[1,2,3]")
            previous = None
            for i, value in enumerate(values, start=1):
                previous = _check_step(i, value, previous)
        elif isinstance(values, str) and CALLABLE_RE.match(values):
            previous = None
            for i in range(1, VALIDATED_PREFIX + 1):
                previous = _check_step(i, _call(values, i), previous)
        else:
            raise PolicyError(f"g must be a list of ints or 'module:function', got {values!r}")

    def g(self, i: int) -> float:
        _check_i(i)
        if isinstance(self.values, tuple):
            n = len(self.values)
            return self.values[i - 1] if i <= n else self.values[-1] + (i - n)
        if i <= VALIDATED_PREFIX:  # checked when the policy was built
            return _resolve(self.values)(i)
        previous = _check_step(i - 1, _call(self.values, i - 1), None)
        return _check_step(i, _call(self.values, i), previous)
