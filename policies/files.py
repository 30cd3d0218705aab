"""Policies from a Python file (`--policy-file my_policy.py`): try a policy out in `eval`,
`translate` and the SimulEval agent before packaging it with an entry point.

Every class the file itself defines that subclasses `BasePolicy` and sets a ClassVar `name` is
registered under that name for this process, as an entry point would be. Forked `eval --jobs`
workers inherit it. A name that is taken, a file that fails to import or defines no policy is
a PolicyError that says so: nothing is registered then.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path

from simulmt.policies.base import PolicyError
from simulmt.policies.registry import add_policies
from simulmt.policies.spec import BasePolicy

_LOADED: dict[Path, list[str]] = {}  # resolved file -> the names it registered


def load_policy_file(path: Path) -> list[str]:
    """Register the policies `path` defines; returns their names (a file read before: the
    same names, not run again)."""
    origin = f"--policy-file {path}"
    if not path.is_file():
        raise PolicyError(f"{origin}: no such file; give a Python file that defines a policy "
                          "class (a BasePolicy subclass with a ClassVar name)")
    key = path.resolve()
    if key in _LOADED:
        return _LOADED[key]
    # a module name of its own per file: dataclasses and pickling look classes up there
    module_name = f"simulmt_policy_file_{hashlib.sha1(str(key).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(module_name, key)
    if spec is None or spec.loader is None:
        raise PolicyError(f"{origin}: not a Python file that can be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's code: any error, said in one line
        del sys.modules[module_name]
        raise PolicyError(f"{origin} failed to import ({type(exc).__name__}: {exc})") from None
    classes = [obj for obj in vars(module).values()
               if isinstance(obj, type) and obj.__module__ == module_name
               and issubclass(obj, BasePolicy) and "name" in vars(obj)]  # fmt: skip
    if not classes:
        del sys.modules[module_name]
        raise PolicyError(f"{origin} defines no policy: expected a class that subclasses "
                          "simulmt.policies.BasePolicy and sets a ClassVar name")
    try:
        names = add_policies(classes, origin=str(path))
    except PolicyError as exc:
        del sys.modules[module_name]
        raise PolicyError(f"--policy-file {exc}") from None
    _LOADED[key] = names
    return names


def load_policy_files(paths: Iterable[Path] | None) -> list[str]:
    """`load_policy_file` for each of `paths` (None: none); the names of all."""
    return [name for path in paths or () for name in load_policy_file(path)]
