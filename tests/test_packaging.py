"""The wheel carries every package: pyproject's list matches the folders on disk.

`pip install -e .` finds modules through the source tree and hides a package missing from the
list; a plain `pip install .` then fails at import (it once lost `simulmt.restore`).
`scripts/check-wheel.sh` (run by `make test`) proves the built wheel in a clean venv.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _configured() -> tuple[list[str], dict[str, str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = config["tool"]["setuptools"]
    return list(setuptools["packages"]), dict(setuptools["package-dir"])


def _on_disk(package_dir: dict[str, str]) -> set[str]:
    """Import names of every folder with an `__init__.py` under the installed roots."""
    roots = {"simulmt": ROOT / "simulmt"} | {name: ROOT / d for name, d in package_dir.items()}
    found: set[str] = set()
    for name, folder in roots.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder)
            if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
                continue
            found.add(".".join([name, *rel.parts]))
    return found


def test_every_package_on_disk_is_in_the_wheel_list() -> None:
    listed, package_dir = _configured()
    assert len(listed) == len(set(listed)), "a package is listed twice"
    on_disk = _on_disk(package_dir)
    assert set(listed) == on_disk, (
        f"missing from pyproject: {sorted(on_disk - set(listed))}; "
        f"listed but absent: {sorted(set(listed) - on_disk)}"
    )


def test_mapped_folders_are_top_level_and_exist() -> None:
    _, package_dir = _configured()
    assert package_dir == {
        "simulmt.policies": "policies",
        "simulmt.server": "server",
        "simulmt.eval": "eval",
    }
    for folder in package_dir.values():
        assert (ROOT / folder / "__init__.py").is_file()
