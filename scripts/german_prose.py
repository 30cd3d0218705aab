"""German prose in document order, for the sentence-boundary detector's training text.

The detector learns where an unpunctuated German sentence may end from long sentences in
context, and its news-free sources have few (Europarl's 6,000 lines; Tatoeba and the package
corpus are short). Three Debian packages carry more, written in German (not translated by us,
no news):

- `debian-handbook`: The Debian Administrator's Handbook, `html/de-DE/*.html` (GPL-2+ or
  CC-BY-SA 3.0); paragraphs left in English in the German edition are skipped;
- `debian-reference-de`: the Debian Reference, `usr/share/debian-reference/*.de.html` (GPL-2+);
- `fortunes-de`: German quotations, anecdotes and jokes, `usr/share/games/fortunes/de/*.u8`
  (GPL-2+ and public-domain texts), eight consecutive fortunes of one file to a document.

    apt-get download debian-handbook debian-reference-de fortunes-de
    for f in debian-handbook_*.deb debian-reference-de_*.deb fortunes-de_*.deb; do
      dpkg -x "$f" x; done
    python scripts/german_prose.py x > cache/segmenter/data/train-prose.de

Output: one sentence a line, a blank line between documents (`simulmt train-segmenter
--text`). Sentences are split at . ! ? before a capital, except after common abbreviations and
ordinal numbers; a skipped block (code, English, a listing) ends the document, so no stream
joins text that was not adjacent. Tried for the shipped detector and not adopted: the gain was
within the spread of training seeds (docs/SEGMENTER.md, "Tried: more German prose").
"""

from __future__ import annotations

import argparse
import html
import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("german_prose")

_GERMAN = frozenset(
    "der die das und ist nicht ein eine zu den mit sich des auf für im dem von es sie wird "
    "werden kann sind auch als wenn oder wie bei aus nach einem einer noch nur so dass daß "
    "über man hat haben wir ich du er diese dieser dieses".split()
)
_ENGLISH = frozenset(
    "the and is of to in a that this it for with be are as on by you can not or".split()
)
_ABBREVIATION = re.compile(
    r"\b(?:z|d|u|s|o|bzw|usw|ca|Nr|vgl|etc|evtl|ggf|inkl|bspw|Dr|Prof|St|Hr|Fr|Abb|Kap|Bd|S|Jh"
    r"|min|max|ff|ebd|sog|u\.a|z\.B|d\.h)\.$"
)
_STOP = re.compile(r"[.!?][\"'“”»«)]*$")
_MARKUP = re.compile(r"[{}$#]|/[a-z]+/|\w+\(\d\)")  # code, paths, man page references
_FORTUNES_SKIPPED = frozenset(
    {"asciiart", "quiz", "woerterbuch", "vornamen", "namen", "translations",
     "channel-debian.fortunes"}
)  # pictures, word lists, question/answer pairs, chat logs: not running prose


def is_german(text: str) -> bool:
    """At least two common German words, and more than twice as many as English ones."""
    words = [w.lower().strip(".,;:!?\"'()") for w in text.split()]
    de = sum(w in _GERMAN for w in words)
    en = sum(w in _ENGLISH for w in words)
    return de >= 2 and de > 2 * en


def split_sentences(paragraph: str) -> list[str]:
    """Sentences of a paragraph: a word ending in . ! ? (quotes allowed) ends one when the next
    word starts with a capital or a quote, unless it is an abbreviation or an ordinal ("3.")."""
    out: list[str] = []
    current: list[str] = []
    words = paragraph.split()
    for i, word in enumerate(words):
        current.append(word)
        following = words[i + 1] if i + 1 < len(words) else ""
        if (
            _STOP.search(word)
            and not _ABBREVIATION.search(word)
            and not re.fullmatch(r"\d+\.", word)
            and (not following or following[0].isupper() or following[0] in "\"„“»(")
        ):
            out.append(" ".join(current))
            current = []
    if current:
        out.append(" ".join(current))
    return out


def _plain(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


def html_documents(files: list[Path], block: str) -> Iterator[list[str]]:
    """Each file's German prose blocks (regex `block`, one group) as documents of sentences."""
    pattern = re.compile(block, re.S)
    for path in files:
        doc: list[str] = []
        for raw in pattern.findall(path.read_text(encoding="utf-8")):
            text = _plain(raw)
            if len(text.split()) < 4 or not is_german(text) or _MARKUP.search(text):
                if doc:
                    yield doc
                doc = []
                continue
            doc += [s for s in split_sentences(text) if len(s.split()) >= 2]
        if doc:
            yield doc


def fortunes(folder: Path) -> Iterator[list[str]]:
    """Each German fortune of running prose as a list of sentences (attribution lines dropped)."""
    for path in sorted(folder.glob("*.u8")):
        if path.stem in _FORTUNES_SKIPPED:
            continue
        for block in path.read_text(encoding="utf-8").split("\n%\n"):
            lines = [line for line in block.splitlines() if not re.match(r"\s*--", line)]
            text = " ".join(" ".join(lines).split())
            if len(text.split()) < 6 or not is_german(text) or re.search(r"[<>|{}]|:\s*$", text):
                continue
            sentences = [s for s in split_sentences(text) if len(s.split()) >= 2]
            if sentences:
                yield sentences


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="folder the three packages were dpkg -x'ed into")
    parser.add_argument("--fortunes-per-document", type=int, default=8)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    share = args.root / "usr/share"
    parts = {
        "handbook": list(html_documents(
            sorted((share / "doc/debian-handbook/html/de-DE").glob("*.html")),
            r'<div class="para">(.*?)</div>')),
        "reference": list(html_documents(
            sorted((share / "debian-reference").glob("*.de.html")), r"<p>(.*?)</p>")),
    }
    single = list(fortunes(share / "games/fortunes/de"))
    n = args.fortunes_per_document
    parts["fortunes"] = [sum(single[i : i + n], []) for i in range(0, len(single), n)]
    for name, docs in parts.items():
        if not docs:
            parser.error(f"no {name} text under {args.root}: extract the package there first")
        for doc in docs:
            sys.stdout.write("".join(s + "\n" for s in doc) + "\n")
        words = sum(len(s.split()) for doc in docs for s in doc)
        log.info("%-9s %5d documents %7d sentences %8d words",
                 name, len(docs), sum(map(len, docs)), words)
    return 0


if __name__ == "__main__":
    sys.exit(main())
