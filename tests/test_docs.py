"""The user docs stay true: every relative link in README.md and docs/ resolves (files, and
headings for `#anchors` into markdown files), and README.md stays short."""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_LINES = 300
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]

FENCE = re.compile(r"^(\s*)(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target "title") and ![alt](target); the text may hold one level of brackets
MD_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_REF = re.compile(r"""<(?:img|a)\b[^>]*?\b(?:src|href)=["']([^"']+)["']""", re.IGNORECASE)
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ws:, …


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code removed."""
    lines, fence = [], ""
    for line in text.splitlines():
        m = FENCE.match(line)
        if m and (not fence or m.group(2) == fence):
            fence = "" if fence else m.group(2)
            continue
        if not fence:
            lines.append(INLINE_CODE.sub("", line))
    return lines


def links(page: Path) -> list[str]:
    found: list[str] = []
    for line in prose_lines(page.read_text(encoding="utf-8")):
        found += MD_LINK.findall(line) + HTML_REF.findall(line)
        if m := REF_DEF.match(line):
            found.append(m.group(1))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup and punctuation dropped, lowercase, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").lower()
    kept = [
        c for c in text
        if c in " -_" or unicodedata.category(c)[0] in "LN"
    ]
    return "".join(kept).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """Every heading's anchor in a markdown file (repeats get -1, -2, … as on GitHub)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    text = page.read_text(encoding="utf-8")
    lines, fence = [], ""
    for line in text.splitlines():  # headings in code blocks are not headings
        m = FENCE.match(line)
        if m and (not fence or m.group(2) == fence):
            fence = "" if fence else m.group(2)
            continue
        if not fence:
            lines.append(line)
    for line in lines:
        if m := HEADING.match(line):
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def problems(page: Path) -> list[str]:
    bad: list[str] = []
    for target in links(page):
        if EXTERNAL.match(target) or target.startswith("//"):
            continue
        path_part, _, anchor = target.partition("#")
        path_part = unquote(path_part.split("?")[0])
        dest = page if not path_part else (page.parent / path_part).resolve()
        if not dest.exists():
            shown = dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest
            bad.append(f"{target}: no such file ({shown})")
            continue
        if not dest.resolve().is_relative_to(ROOT):
            bad.append(f"{target}: outside the repository")
            continue
        if anchor and dest.suffix == ".md" and unquote(anchor).lower() not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert problems(page) == []


# a repository path in inline code: `scripts/x.py`, `simulmt/models/de-en/segmenter.pt`, `deploy/`
CODE_PATH = re.compile(
    r"`((?:simulmt|policies|server|eval|scripts|bench|configs|deploy|examples|tests)/"
    r"[A-Za-z0-9_./-]*)`"
)
CURRENT_PAGES = [p for p in PAGES if "releases" not in p.relative_to(ROOT).parts]


@pytest.mark.parametrize("page", CURRENT_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_repository_paths_exist(page: Path) -> None:
    """A file or folder the current docs name in code (`scripts/bleu_gap.py`) is there: a
    moved script or module must take its docs along (past releases' cards are left as they were)."""
    text = page.read_text(encoding="utf-8")
    missing = sorted({m for m in CODE_PATH.findall(text) if not (ROOT / m).exists()})
    assert missing == []


def test_readme_is_short() -> None:
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; keep it to {README_MAX_LINES}"


# The checker itself, on pages made up for it: it must fail where a reader would.
def test_the_checker_finds_broken_links_and_anchors(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title\n\n## Two words `code`\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md) [ok](a.md#two-words-code) [ok](#here) ![img](missing.png)\n"
        "[bad](a.md#nowhere) [web](https://example.org/x) `[code](nope.md)`\n"
        "```\n[in a block](nope.md)\n```\n## Here\n",
        encoding="utf-8",
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert problems(page) == [
            "missing.png: no such file (missing.png)",
            "a.md#nowhere: no heading #nowhere in a.md",
        ]
    finally:
        ROOT = saved


def test_slugs_follow_github() -> None:
    assert slug("The websocket protocol `simulmt.v1`") == "the-websocket-protocol-simulmtv1"
    assert slug("Measured: newstest2015 as one stream per document") == (
        "measured-newstest2015-as-one-stream-per-document"
    )
    assert slug("`data build`, `data tokenizer`") == "data-build-data-tokenizer"
