"""Sweep specs: one string that stands for several policy specs.

``wait-k:k=1,3,5`` → ``wait-k:k=1``, ``wait-k:k=3``, ``wait-k:k=5``. Items without ``=`` are
further values of the key before them; several swept keys give their cartesian product
(``confidence:threshold=0.5,0.9,k_min=1,2`` → four specs). Bracketed lists stay one value
(``schedule:g=[1,2,4]``).
"""

from __future__ import annotations

import itertools

__all__ = ["expand_sweep"]

GRAMMAR = "name:key=v1,v2,… (e.g. wait-k:k=1,3,5,7,9)"


def _split_top_level(text: str, sweep: str) -> list[str]:
    items, depth, start = [], 0, 0
    for pos, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0:
            raise ValueError(f"unbalanced ']' in sweep {sweep!r}")
        if char == "," and depth == 0:
            items.append(text[start:pos].strip())
            start = pos + 1
    if depth:
        raise ValueError(f"unclosed '[' in sweep {sweep!r}")
    items.append(text[start:].strip())
    if any(not item for item in items):
        raise ValueError(f"empty item in sweep {sweep!r}; expected {GRAMMAR}")
    return items


def expand_sweep(sweep: str) -> list[str]:
    """The policy specs a sweep string stands for, in order (first key varies slowest)."""
    name, sep, rest = sweep.strip().partition(":")
    if not name.strip() or not sep or not rest.strip():
        raise ValueError(f"bad sweep {sweep!r}: expected {GRAMMAR}")
    values: dict[str, list[str]] = {}
    key = None
    for item in _split_top_level(rest, sweep):
        k, eq, v = item.partition("=")
        if eq:
            key = k.strip()
            if not key or key in values:
                raise ValueError(f"bad or repeated key {k!r} in sweep {sweep!r}")
            values[key] = [v.strip()]
        elif key is None:
            raise ValueError(
                f"value {item!r} before any key in sweep {sweep!r}; expected {GRAMMAR}"
            )
        else:
            values[key].append(item)
    keys = list(values)
    return [
        f"{name.strip()}:" + ",".join(f"{k}={v}" for k, v in zip(keys, combo, strict=True))
        for combo in itertools.product(*(values[k] for k in keys))
    ]
