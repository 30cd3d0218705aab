"""The layering of the package, checked on the source: the model layer never reaches up into the
search, and where a beam's cache lives (a pool slot, its *home*) stays inside the cache module."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import simulmt

PACKAGE = Path(simulmt.__file__).parent
MODEL = PACKAGE / "model"


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, at any depth (TYPE_CHECKING blocks and functions too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_model_layer_does_not_import_the_search() -> None:
    files = sorted(MODEL.glob("*.py"))
    assert len(files) >= 8  # the folder is where this test thinks it is
    search = re.compile(r"^simulmt\.search(\.|$)")
    offenders = {f.name: sorted(filter(search.match, _imports(f))) for f in files}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_import_check_sees_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("if TYPE_CHECKING:\n    from simulmt.search.step import StepResult\n")
    assert "simulmt.search.step" in _imports(probe)


def test_a_caches_home_is_the_cache_modules_business() -> None:
    """The words home/unhome (where a beam's cache lives in the pool) appear in no other
    source file of the package."""
    word = re.compile(r"\b(un)?home[sd]?\b|_home|home_", re.IGNORECASE)
    folders = [PACKAGE] + [PACKAGE.parent / name for name in ("policies", "server", "eval")]
    found = [
        str(f)
        for folder in folders
        for f in sorted(folder.rglob("*.py"))
        if f != MODEL / "cache.py" and word.search(f.read_text(encoding="utf-8"))
    ]
    assert found == []
    assert word.search((MODEL / "cache.py").read_text(encoding="utf-8"))


def test_advance_uses_only_the_public_session_api() -> None:
    """The module-level functions of session.py (the batched `advance`) drive sessions through
    their public decision round, never through a private member."""
    tree = ast.parse((PACKAGE / "session.py").read_text(encoding="utf-8"))
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    assert "advance" in {f.name for f in functions}
    private = sorted(
        {
            node.attr
            for f in functions
            for node in ast.walk(f)
            if isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        }
    )
    assert private == []


def test_inference_does_not_import_training() -> None:
    """Loading the engine, a session or the server's worker loads no trainer: the tiny test
    model's trainer (`simulmt.train.tiny`) is imported only when `Engine.tiny` is called."""
    modules = ("simulmt.engine", "simulmt.session", "simulmt.server.worker")
    probe = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "simulmt.engine" in out  # the probe saw what it imported
    training = re.compile(r"^simulmt\.(train|fitting|smallnet\.fitting)(\.|$)|\.train$")
    assert [name for name in out if training.search(name)] == []
