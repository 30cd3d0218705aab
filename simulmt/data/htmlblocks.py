"""Text blocks of an HTML help page, in document order, with their `id` attribute."""

from __future__ import annotations

from dataclasses import dataclass
from html.parser import HTMLParser

BLOCK_TAGS = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "dt", "dd", "td", "th",
                        "caption", "title", "pre"})
SKIP_TAGS = frozenset({"script", "style", "head", "noscript"})  # text inside is never prose
VOID_TAGS = frozenset({"br", "img", "meta", "link", "input", "hr", "area", "base", "col", "wbr"})


@dataclass(frozen=True)
class Block:
    """One block element: its tag, its `id` (or ""), and its text with inline markup removed."""

    tag: str
    id: str
    text: str


class _BlockParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[Block] = []
        self._stack: list[tuple[str, str, list[str]]] = []  # open blocks: tag, id, text pieces
        self._skip = 0  # depth inside SKIP_TAGS
        self._variant: list[str] = []  # open tags of a skipped platform variant (LibreOffice "MAC")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._variant or ("class", "MAC") in attrs:  # keep only the default variant's text
            if tag not in VOID_TAGS:
                self._variant.append(tag)
        elif tag in SKIP_TAGS:
            self._skip += 1
        elif tag in BLOCK_TAGS:
            ident = next((v or "" for k, v in attrs if k == "id"), "")
            self._stack.append((tag, ident, []))
        elif tag == "br" and self._stack:
            self._stack[-1][2].append(" ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "br" and self._stack:
            self._stack[-1][2].append(" ")

    def handle_endtag(self, tag: str) -> None:
        if self._variant:
            if tag in self._variant:
                while self._variant.pop() != tag:
                    pass
        elif tag in SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
        elif tag in BLOCK_TAGS and any(t == tag for t, _, _ in self._stack):
            while self._stack:  # close unclosed inner blocks too
                open_tag, ident, pieces = self._stack.pop()
                self.blocks.append(Block(open_tag, ident, "".join(pieces)))
                if open_tag == tag:
                    break

    def handle_data(self, data: str) -> None:
        if self._stack and not self._skip and not self._variant:
            self._stack[-1][2].append(data)


def parse_blocks(markup: str) -> list[Block]:
    """Blocks of `markup` in the order they close (innermost first), `pre` blocks included."""
    parser = _BlockParser()
    parser.feed(markup)
    parser.close()
    return parser.blocks
