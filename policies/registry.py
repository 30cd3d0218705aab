"""Find policies through the entry-point group `simulmt.policies` and build them from specs.

    >>> load_policy("wait-k:k=3")
    WaitK(k=3, r=1.0)
    >>> load_policy("schedule:g=[1,2,4,4,6]").spec()
    'schedule:g=[1,2,4,4,6]'

A plugin registers a class under a name in its pyproject.toml:

    [project.entry-points."simulmt.policies"]
    my-policy = "my_package.module:MyPolicy"

The class follows the `Policy` protocol, its ClassVar `name` equals the entry-point name,
it has `spec()` (the canonical spec string) and, to take arguments, it is a frozen
dataclass whose fields are the arguments: subclass `BasePolicy` for all of this. A plugin
that fails to import or is malformed is skipped with a warning; the others still load.
"""

from __future__ import annotations

import difflib
import functools
import importlib.metadata
import inspect
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from simulmt.policies.base import CommitMode, PolicyError, Signal, SpecPolicy
from simulmt.policies.spec import Argument, arguments, convert, format_value, split_spec

logger = logging.getLogger(__name__)

GROUP = "simulmt.policies"
BUILTIN_PREFIX = "simulmt.policies."  # modules of the built-in policies


@dataclass(frozen=True)
class Registry:
    policies: dict[str, type[SpecPolicy]]  # name -> class, for every plugin that loaded
    failures: dict[str, str]  # name -> why it did not load


def _problem(name: str, obj: object) -> str | None:
    """Why `obj` (loaded from entry point `name`) is not a usable policy class, if it is not."""
    if not isinstance(obj, type):
        return f"it is a {type(obj).__name__}, not a class"
    if not callable(getattr(obj, "decide", None)):
        return "it has no decide(obs) method"
    if inspect.isabstract(obj):  # it could not be built from a spec
        missing = ", ".join(sorted(getattr(obj, "__abstractmethods__", ())))
        return f"it leaves abstract methods unimplemented ({missing})"
    if not callable(getattr(obj, "spec", None)):
        return "it has no spec() method (subclass simulmt.policies.BasePolicy)"
    if getattr(obj, "name", None) != name:
        return f"its ClassVar name is {getattr(obj, 'name', None)!r}, not {name!r}"
    needs = getattr(obj, "needs", None)
    if not isinstance(needs, frozenset) or not all(isinstance(s, Signal) for s in needs):
        return "its ClassVar needs is not a frozenset of Signal"
    if not isinstance(getattr(obj, "mode", None), CommitMode):
        return "its ClassVar mode is not a CommitMode"
    try:
        arguments(obj)
    except TypeError as exc:
        return str(exc)
    return None


def build_registry(entry_points: Iterable[importlib.metadata.EntryPoint]) -> Registry:
    """Load every entry point; log and skip those that fail, preferring built-ins on clashes."""
    policies: dict[str, type[SpecPolicy]] = {}
    origin: dict[str, str] = {}
    failures: dict[str, str] = {}
    for ep in entry_points:
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plugin must not break the others
            failures[ep.name] = f"{ep.value} failed to import ({type(exc).__name__}: {exc})"
            logger.warning("policy plugin %r skipped: %s", ep.name, failures[ep.name])
            continue
        problem = _problem(ep.name, obj)
        if problem is not None:
            failures[ep.name] = f"{ep.value} is not a usable policy: {problem}"
            logger.warning("policy plugin %r skipped: %s", ep.name, failures[ep.name])
            continue
        if ep.name in policies:
            if origin[ep.name].startswith(BUILTIN_PREFIX):
                logger.warning("policy name %r: %s ignored, the built-in %s wins",
                               ep.name, ep.value, origin[ep.name])
                continue
            logger.warning("policy name %r registered twice: %s replaces %s",
                           ep.name, ep.value, origin[ep.name])
        policies[ep.name], origin[ep.name] = cast(type[SpecPolicy], obj), ep.value
        failures.pop(ep.name, None)
    return Registry(dict(sorted(policies.items())), failures)


# policies registered from Python at run time (`simulmt.policies.files`): name -> (class, where)
_ADDED: dict[str, tuple[type[SpecPolicy], str]] = {}


@functools.lru_cache(maxsize=1)
def _registry() -> Registry:
    registry = build_registry(importlib.metadata.entry_points(group=GROUP))
    for name, (cls, _) in _ADDED.items():
        registry.policies.setdefault(name, cls)  # `add_policies` refused clashes
    return Registry(dict(sorted(registry.policies.items())), registry.failures)


def add_policies(classes: Sequence[type], *, origin: str) -> list[str]:
    """Register policy `classes` from `origin` (the file that defines them) for this process,
    beside the entry points; returns their names. PolicyError, and none registered, if one is
    no usable policy class or its name is taken by another class."""
    names = []
    for cls in classes:
        name = getattr(cls, "name", None)
        if not isinstance(name, str) or not name:
            raise PolicyError(f"{origin}: class {cls.__qualname__} has no ClassVar name (the "
                              "name its specs use)")
        problem = _problem(name, cls)
        if problem is not None:
            raise PolicyError(f"{origin}: {cls.__qualname__} is not a usable policy: {problem}")
        taken = _registry().policies.get(name)
        where = origin if name in names else None
        if where is None and taken is not None and taken is not cls:
            where = location(name)
        if where is not None:
            raise PolicyError(f"{origin}: policy name {name!r} is taken by {where}; give "
                              f"{cls.__qualname__} another ClassVar name")
        names.append(name)
    for name, cls in zip(names, classes, strict=True):
        _ADDED[name] = (cast(type[SpecPolicy], cls), origin)
    _registry.cache_clear()
    return names


def location(name: str) -> str:
    """Where policy `name`'s class is: `module:Class`, or `file.py:Class` for one from a file."""
    cls = _registry().policies[name]
    if name in _ADDED:
        return f"{_ADDED[name][1]}:{cls.__qualname__}"
    return f"{cls.__module__}:{cls.__qualname__}"


def available(*, refresh: bool = False) -> dict[str, type[SpecPolicy]]:
    """Every policy that loads, by name (sorted). `refresh` re-reads the entry points."""
    if refresh:
        _registry.cache_clear()
    return dict(_registry().policies)


def _unknown(name: str) -> PolicyError:
    registry = _registry()
    names = list(registry.policies)
    if name in registry.failures:
        return PolicyError(f"policy {name!r} is registered but unusable: "
                           f"{registry.failures[name]}; available policies: {', '.join(names)}")
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return PolicyError(f"unknown policy {name!r}{hint}; available policies: {', '.join(names)} "
                       "(`simulmt policies` lists their arguments)")


def usage(name: str) -> str:
    """One line listing the accepted arguments of policy `name` with types and defaults."""
    args = arguments(_registry().policies[name])
    if not args:
        return f"policy {name!r} takes no arguments"
    return f"policy {name!r} accepts: " + "; ".join(a.usage() for a in args)


def load_policy(spec: str) -> SpecPolicy:
    """Build the policy selected by `spec` (`name:key=value,…`, see simulmt.policies.spec)."""
    name, raw = split_spec(spec)
    cls = _registry().policies.get(name)
    if cls is None:
        raise _unknown(name)
    try:
        policy = cls(**convert(cls, raw))
    except PolicyError as exc:
        raise PolicyError(f"bad spec {spec!r}: {exc}. {usage(name)}") from None
    return policy


def _summary(cls: type) -> str:
    return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""


def describe(name: str) -> str:
    """A few lines about policy `name`: summary, signals, commit mode and arguments."""
    cls = _registry().policies.get(name)
    if cls is None:
        raise _unknown(name)
    lines = [f"{name} — {_summary(cls)}"]
    needs = ", ".join(sorted(s.value for s in cls.needs)) or "none"
    if note := getattr(cls, "needs_note", ""):  # signals that depend on the instance
        needs += f" ({note})"
    lines.append(f"  signals: {needs}; commit mode: {cls.mode.value}; class: "
                 f"{location(name)}")
    if paper := getattr(cls, "paper", ""):  # optional for third-party policies
        lines.append(f"  paper: {paper}")
    args = arguments(cls)
    lines += [f"  {a.usage()}" for a in args] or ["  (no arguments)"]
    return "\n".join(lines)


def _json_default(arg: Argument) -> Any:
    if arg.required:
        return None
    return list(arg.default) if isinstance(arg.default, tuple) else arg.default


def info(name: str) -> dict[str, Any]:
    """What `describe` says, as JSON-ready data (for `simulmt policies --json`)."""
    cls = _registry().policies.get(name)
    if cls is None:
        raise _unknown(name)
    return {
        "name": name,
        "description": _summary(cls),
        "class": location(name),
        "needs": sorted(s.value for s in cls.needs),
        "mode": cls.mode.value,
        "paper": getattr(cls, "paper", "") or None,
        "arguments": [
            {"name": a.key, "type": a.type_name, "required": a.required,
             "default": _json_default(a),
             "default_text": None if a.required else format_value(a.default), "help": a.help}
            for a in arguments(cls)
        ],
    }
