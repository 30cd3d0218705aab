"""A setting's name (CLI, protocol, Python) parsed into its enum member, or an error that
names what was given and lists what is accepted. Shared by the input settings (`InputKind`,
`Segmentation`). No torch here: clients import those enums."""

from __future__ import annotations

import enum
from typing import TypeVar

E = TypeVar("E", bound=enum.Enum)


def parse_choice(cls: type[E], value: str | E, what: str) -> E:
    """`value` as a member of `cls` (a member passes through); `what` names the setting in the
    error, e.g. "unknown input kind 'x'; accepted: text, recognizer"."""
    if isinstance(value, cls):
        return value
    try:
        return cls(value)
    except ValueError:
        accepted = ", ".join(str(m.value) for m in cls)
        raise ValueError(f"unknown {what} {value!r}; accepted: {accepted}") from None
