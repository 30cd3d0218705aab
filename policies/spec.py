"""Spec strings `name:key=value,…`, and the dataclass base class that reads and writes them.

Grammar (whitespace around names, keys, values and list items is ignored):

    spec  := NAME [ ":" arg ( "," arg )* ]
    arg   := KEY "=" value
    value := "[" [ INT ( ("," | " ") INT )* ] "]"   a list of integers, e.g. g=[1,2,4,4,6]
           | TEXT                                  any text without "," "[" "]"

The name ends at the first ":", so a value may itself hold ":" and "=" (g=my.module:func).
Commas separate arguments only outside brackets, so list values are unambiguous.
Values are converted by the type of the policy's dataclass field: int, float,
bool (true/false, yes/no, on/off, 1/0), str, list[int] or tuple[int, ...].
"""

from __future__ import annotations

import abc
import dataclasses
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from simulmt.policies.base import Action, CommitMode, Observation, PolicyError, Signal

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
INT_RE = re.compile(r"^[+-]?\d+$")
FORBIDDEN_IN_TEXT = ",[]"  # characters that a TEXT value cannot hold (they delimit the grammar)
BOOL_WORDS = {"true": True, "yes": True, "on": True, "1": True,
              "false": False, "no": False, "off": False, "0": False}
GRAMMAR = "name or name:key=value,key=value (lists in brackets: g=[1,2,4])"


@dataclass(frozen=True)
class Argument:
    """One argument of a policy, as a spec string and `simulmt policies` show it."""

    key: str  # the key in a spec string
    attr: str  # the dataclass field it sets (usually == key)
    type_name: str  # shown to users: "int", "float", "list[int]", …
    default: object  # dataclasses.MISSING when required
    help: str
    parse: Callable[[str], object]  # spec text -> value

    @property
    def required(self) -> bool:
        return self.default is dataclasses.MISSING

    def usage(self) -> str:
        default = "required" if self.required else f"default {format_value(self.default)}"
        text = f"{self.key}: {self.type_name} ({default})"
        return f"{text} — {self.help}" if self.help else text


def split_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Split `name:key=value,…` into the name and the raw (unconverted) argument texts."""
    if not isinstance(spec, str) or not spec.strip():
        raise PolicyError(f"empty policy spec {spec!r}; expected {GRAMMAR}")
    name, sep, rest = spec.strip().partition(":")
    name = name.strip()
    if not NAME_RE.match(name):
        raise PolicyError(f"bad policy name {name!r} in spec {spec!r}; expected {GRAMMAR}")
    raw: dict[str, str] = {}
    if not sep:
        return name, raw
    for item in _split_top_level(rest, spec):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not KEY_RE.match(key):
            raise PolicyError(f"bad argument {item.strip()!r} in spec {spec!r}: "
                              f"expected key=value; the spec grammar is {GRAMMAR}")
        if key in raw:
            raise PolicyError(f"argument {key!r} given twice in spec {spec!r}")
        raw[key] = value.strip()
    return name, raw


def _split_top_level(text: str, spec: str) -> list[str]:
    """Split on commas outside brackets; reject unbalanced brackets and empty items."""
    items, depth, start = [], 0, 0
    for pos, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise PolicyError(f"nested brackets in spec {spec!r}: lists hold integers only")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise PolicyError(f"unbalanced ']' in spec {spec!r}")
        elif char == "," and depth == 0:
            items.append(text[start:pos])
            start = pos + 1
    if depth:
        raise PolicyError(f"unclosed '[' in spec {spec!r}")
    items.append(text[start:])
    if any(not item.strip() for item in items):
        raise PolicyError(f"empty argument in spec {spec!r}; expected {GRAMMAR}")
    return items


def parse_int(text: str) -> int:
    if not INT_RE.match(text):
        raise ValueError(f"expected an integer, got {text!r}")
    return int(text)


def parse_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {text!r}") from None


def parse_bool(text: str) -> bool:
    try:
        return BOOL_WORDS[text.lower()]
    except KeyError:
        raise ValueError(f"expected true or false, got {text!r}") from None


def parse_str(text: str) -> str:
    if not text:
        raise ValueError("expected a non-empty text")
    return text


def parse_int_list(text: str) -> tuple[int, ...]:
    if not (text.startswith("[") and text.endswith("]")):
        raise ValueError(f"expected a list of integers in brackets like [1,2,4], got {text!r}")
    items = [item for item in re.split(r"[,\s]+", text[1:-1].strip()) if item]
    return tuple(parse_int(item) for item in items)


# field type -> (name shown to users, parser)
SIMPLE_TYPES: dict[object, tuple[str, Callable[[str], object]]] = {
    int: ("int", parse_int),
    float: ("float", parse_float),
    bool: ("bool", parse_bool),
    str: ("str", parse_str),
    tuple[int, ...]: ("list[int]", parse_int_list),
    list[int]: ("list[int]", parse_int_list),
}


def arguments(cls: type) -> list[Argument]:
    """The spec arguments of a policy class: its dataclass fields (none if not a dataclass)."""
    if not dataclasses.is_dataclass(cls):
        return []
    hints = typing.get_type_hints(cls)
    result = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        type_name, parser = SIMPLE_TYPES.get(hints.get(f.name), (str(hints.get(f.name)), None))
        parser = f.metadata.get("parse", parser)
        if parser is None:
            raise TypeError(f"{cls.__name__}.{f.name}: type {type_name} has no spec parser; "
                            "use int, float, bool, str, list[int] or metadata={'parse': fn}")
        default: object = f.default
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        result.append(Argument(
            key=f.metadata.get("key", f.name), attr=f.name,
            type_name=f.metadata.get("type_name", type_name), default=default,
            help=f.metadata.get("help", ""), parse=parser,
        ))
    return result


def convert(cls: type, raw: dict[str, str]) -> dict[str, object]:
    """Turn raw spec texts into constructor keyword arguments (PolicyError on any problem)."""
    args = {a.key: a for a in arguments(cls)}
    unknown = [key for key in raw if key not in args]
    if unknown:
        raise PolicyError(f"unknown argument {unknown[0]!r}")
    missing = [a.key for a in args.values() if a.required and a.key not in raw]
    if missing:
        raise PolicyError(f"missing required argument {missing[0]!r}")
    kwargs: dict[str, object] = {}
    for key, text in raw.items():
        try:
            kwargs[args[key].attr] = args[key].parse(text)
        except ValueError as exc:
            raise PolicyError(f"bad value for {key} ({args[key].type_name}): {exc}") from None
    return kwargs


def format_value(value: object) -> str:
    """The spec text of a value; `parse` of the field's type reads it back to an equal value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, tuple | list):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)


def _coerce(name: str, hint: object, value: object) -> object:
    """Check a field value set from Python against its type; return it in canonical form."""
    if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise PolicyError(f"{name} must be an int, got {value!r}")
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise PolicyError(f"{name} must be a float, got {value!r}")
        return float(value)
    if hint is bool and not isinstance(value, bool):
        raise PolicyError(f"{name} must be a bool, got {value!r}")
    if hint is str and not (isinstance(value, str) and value):
        raise PolicyError(f"{name} must be a non-empty str, got {value!r}")
    if hint in (tuple[int, ...], list[int]):
        if not isinstance(value, tuple | list) or any(
            isinstance(v, bool) or not isinstance(v, int) for v in value
        ):
            raise PolicyError(f"{name} must be a list of ints, got {value!r}")
        return tuple(value)
    if isinstance(value, str) and (
        any(c in value for c in FORBIDDEN_IN_TEXT) or value != value.strip()
    ):
        raise PolicyError(f"{name}={value!r}: a text value cannot hold any of "
                          f"{FORBIDDEN_IN_TEXT!r} (they delimit spec strings) nor start or "
                          "end with whitespace")
    return value


class BasePolicy(abc.ABC):
    """Base class for policies that are frozen dataclasses whose fields are spec arguments.

    Subclasses are `@dataclass(frozen=True)`, set the ClassVars `name` (the entry-point
    name), `needs`, `mode` and optionally `paper` (the publication the rule comes from, shown
    by `simulmt policies` so users can cite and compare), implement `decide`, and put range
    checks in `validate` (raise PolicyError). Field metadata: `help` (one line), optionally
    `key` (spec key when it differs from the field name), `parse` (str -> value) and
    `type_name`. Values set from Python are type-checked; list[int] values are stored as
    tuples (hashable).
    """

    name: ClassVar[str]
    needs: ClassVar[frozenset[Signal]] = frozenset()
    mode: ClassVar[CommitMode] = CommitMode.SIMULTANEOUS
    paper: ClassVar[str] = ""  # "" = no publication (a project heuristic)

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if "parse" in f.metadata:  # custom-typed fields are checked by validate()
                continue
            value = _coerce(f.metadata.get("key", f.name), hints[f.name], getattr(self, f.name))
            object.__setattr__(self, f.name, value)
        self.validate()

    def validate(self) -> None:
        """Range checks of the arguments; raise PolicyError saying what is accepted."""
        return None  # no checks beyond the field types by default

    @abc.abstractmethod
    def decide(self, obs: Observation) -> Action:
        """READ or WRITE; a pure function of `obs`."""

    def spec(self) -> str:
        """The canonical spec string: every argument, in field order; load_policy reads it back."""
        parts = [f"{a.key}={format_value(getattr(self, a.attr))}" for a in arguments(type(self))]
        return self.name + (":" + ",".join(parts) if parts else "")

    def __str__(self) -> str:
        return self.spec()

