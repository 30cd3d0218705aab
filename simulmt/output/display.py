"""What a session has shown of its current sentence, and the `Update` when that changes.

Kept apart from the decoding state (`StreamState`): the search never reads it, and only the
session's output depends on it (which committed tokens are already detokenized into words,
which words and which tentative tail updates have shown).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from simulmt.data.tokenizer import Tokenizer
from simulmt.input.placeholders import Placeholders
from simulmt.input.sentences import Sentence
from simulmt.output.numbers import NumberNotation
from simulmt.output.updates import Update
from simulmt.search.state import StreamState


@dataclass
class Display:
    """The display bookkeeping of one sentence (a new one per sentence)."""

    words: list[str] = field(default_factory=list)  # committed whole words, detokenized
    word_delays: list[int] = field(default_factory=list)  # the delay of each of `words`
    decoded_tokens: int = 0  # committed tokens already detokenized into `words`
    shown_words: int = 0  # committed whole words already emitted in updates
    shown_tentative: str = ""
    shown_tail: tuple[int, ...] | None = None  # tentative token ids last shown
    shown_final: bool = False
    # rewrites numbers copied in the source's notation ("2.100" -> "2,100"); None: as written
    numbers: NumberNotation | None = None
    # the sentence's numbers behind the placeholders the model read; None: none used
    placeholders: Placeholders | None = None

    def update(
        self,
        st: StreamState,
        sent: Sentence,
        *,
        tokenizer: Tokenizer,
        tail: Callable[[StreamState], list[int]] | None,
        clock: Callable[[], float],
        hold_tail: bool = False,
    ) -> Update | None:
        """The Update if the visible output changed (committed words or tentative tail), else
        None. Only what changed is detokenized: committed words once, the tail when it moved.
        `tail`: the stream's tentative tail ids; None: updates carry committed words only.
        `hold_tail`: a change of the tail alone makes no update now (nor is the tail worked
        out); an update for new committed words still carries the current tail."""
        if self.shown_final:
            return None
        if st.complete_tokens > self.decoded_tokens:
            self._decode_words(st, tokenizer, sent.words)
        new_words = self.words[self.shown_words :]
        if not new_words and not st.done and (tail is None or hold_tail):
            return None
        tail_ids: tuple[int, ...] = ()
        if tail is not None:
            tail_ids = tuple(st.committed[self.decoded_tokens :] + tail(st))
            if not new_words and not st.done and tail_ids == self.shown_tail:
                return None
        self.shown_tail = tail_ids
        tentative = "" if st.done or not tail_ids else tokenizer.decode(list(tail_ids))
        if tentative and (self.numbers is not None or self.placeholders is not None):
            tentative = " ".join(self._localise(tentative.split(), sent.words))
        if tentative and self.words:
            tentative = " " + tentative
        if not new_words and tentative == self.shown_tentative and not st.done:
            return None
        now = clock()
        prefix = " " if self.shown_words and new_words else ""
        delays = tuple(self.word_delays[self.shown_words :])
        self.shown_words += len(new_words)
        self.shown_tentative = tentative
        self.shown_final = st.done
        n = len(new_words)
        return Update(
            sentence_id=sent.id,
            committed_delta=prefix + " ".join(new_words),
            committed_len=self.shown_words,
            tentative=tentative,
            delays=delays,
            emitted_ms=((now - sent.t0) * 1000,) * n,
            compute_ms=(st.compute_ms,) * n,
            final=st.done,
            text=" ".join(self.words) if st.done else "",
            source=" ".join(sent.words) if st.done else "",
        )

    def _decode_words(self, st: StreamState, tok: Tokenizer, source: list[str]) -> None:
        """Detokenize the newly complete committed words, one subword group at a time so that
        each whitespace word gets its group's delay (a group may decode to 0 or 2 words).
        `source`: the sentence's words received so far, whose numbers `numbers` converts."""
        ids, end = st.committed, st.complete_tokens
        starts = [i for i in range(self.decoded_tokens, end) if i == 0 or tok.is_word_start(ids[i])]
        delays = st.completed_at[len(st.completed_at) - len(starts) :]  # the span's groups'
        first_new = len(self.words)
        for s, e, delay in zip(starts, [*starts[1:], end], delays, strict=True):
            words = tok.decode(ids[s:e]).split()
            self.words += words
            self.word_delays += [delay] * len(words)
        self.words[first_new:] = self._localise(self.words[first_new:], source)
        self.decoded_tokens = end

    def _localise(self, words: list[str], source: list[str]) -> list[str]:
        """Placeholders written as their numbers, then numbers copied in the source's notation
        in the target's."""
        if self.placeholders is not None:
            words = self.placeholders.restore(words)
        if self.numbers is not None:
            words = self.numbers.localise_words(words, source)
        return words
