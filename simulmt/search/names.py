"""The pieces of the source's names, which the search favours (`SearchOptions.copy_bonus`).

The model has no copy mechanism: a name it should carry over is written piece by piece from
its 16k joint pieces and often comes out as a word it knows better ("Hasso Plattner" -> "Haso
Platforms"). Adding a bonus to the log-probabilities of the name's own pieces tips such close
calls towards the copy. A name here is a word after the sentence's first that starts with an
upper-case letter and is two or more pieces: German capitalises every noun, but the common
ones are one piece and are translated anyway; a bonus on every source piece instead copied
German words into the output (newstest2015: chrF fell).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulmt.data.tokenizer import Tokenizer
from simulmt.model.state import SourceState

__all__ = ["NamePieces"]

_AROUND = "\"'„“”‚‘’»«()[]{}.,;:!?-–—/"


@dataclass
class NamePieces:
    """One sentence's name pieces, found word by word as the policy reads the source."""

    words: int = 0  # source words looked at
    ids: tuple[int, ...] = ()  # the pieces of the names among them, each once

    def read(self, source: SourceState, words_read: int, tokenizer: Tokenizer) -> tuple[int, ...]:
        """The name pieces of the first `words_read` words of `source` (only new words are
        looked at)."""
        if words_read <= self.words:
            return self.ids
        found = set(self.ids)
        for w in range(max(self.words, 1), words_read):
            start = source.ends[w - 1]
            word = tokenizer.decode(source.ids[start : source.ends[w]]).strip(_AROUND)
            if not word[:1].isupper() or " " in word:
                continue
            pieces = tokenizer.encode_word(word, first=False)
            if len(pieces) >= 2:
                found.update(pieces)
        self.words = words_read
        self.ids = tuple(sorted(found))
        return self.ids
