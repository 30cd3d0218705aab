"""Streaming sessions: a pure, I/O-free API over the engine.

    s = Session(engine, policy="wait-k:k=3")
    for update in s.push("Ich habe heute"):  ...
    s.finish()

`feed` only queues words; `advance(engine, sessions)` does the model work for many sessions
at once (one batched forward per decoder step), which is how the server batches across
connections. `push = feed + advance([self])`.

`advance` is a loop over a session's public decision round, which any driver may run itself:
`Session.encode_arrivals(engine, sessions)` (one batched encoder pass, the only encode path),
`plan(out)` (every decision that needs no model work; returns the decoder step needed),
`engine.step(requests)` for many sessions at once, and `apply(req, res, out)`.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from simulmt.defaults import DEFAULT_POLICY, SEGMENT_LOOKAHEAD
from simulmt.engine import Engine
from simulmt.input.fillers import filler_ends_sentence, is_filler
from simulmt.input.kinds import InputKind
from simulmt.input.placeholders import Placeholders
from simulmt.input.sentences import BoundaryDetector, Segmentation, Sentence, SentenceCutter
from simulmt.input.stages import make_detector, make_restorer
from simulmt.input.textcheck import BAD, describe
from simulmt.output.display import Display
from simulmt.output.notes import Notes
from simulmt.output.numbers import NumberNotation
from simulmt.output.updates import Update
from simulmt.policies.base import Policy
from simulmt.policies.registry import load_policy
from simulmt.restore.stream import Restorer
from simulmt.search.online import OnlineSearch, SourceView
from simulmt.search.options import SearchOptions
from simulmt.search.state import StreamState
from simulmt.search.step import StepRequest, StepResult

log = logging.getLogger(__name__)


class InputError(ValueError):
    """Input a session cannot take; nothing already committed is lost."""


def max_source_tokens(engine: Engine, options: SearchOptions) -> int:
    """Source tokens a sentence may have: its translation (cut at ratio*|x|+extra tokens)
    must still fit the decoder's positions: the step that ends the longest hypothesis feeds its
    last token at position ratio*|x|+extra, which must be below max_len."""
    last_position = engine.model.cfg.max_len - 1
    return max(1, int((last_position - options.max_len_extra) / options.max_len_ratio))


@dataclass(frozen=True)
class SessionLimits:
    max_word_chars: int = 100  # longer "words" are rejected (garbage, not speech)
    # longer sentences are cut (never dropped) at their likeliest boundary near this length;
    # the model's own limit is in subword tokens (`max_source_tokens`) and cuts too. A library
    # session and `simulmt eval` keep a test set's sentences whole (news sentences reach 100
    # words); the server cuts live captions sooner (`Limits.live_max_sentence_words`, 60)
    max_sentence_words: int = 120
    cut_window: int = 10  # the cut chooses among this many last words (held from the policy)

    def __post_init__(self) -> None:
        for name in ("max_word_chars", "max_sentence_words", "cut_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"SessionLimits.{name} must be >= 1, got {getattr(self, name)}")


def check_words(
    words: Sequence[str], *, engine: Engine, limits: SessionLimits, max_tokens: int
) -> list[int]:
    """Each word's subword-token count, or InputError naming the first word a session refuses:
    one longer than `limits.max_word_chars`, or one of more tokens than a sentence may hold.
    Shared by `Session.feed` and by whoever wants to check a whole input before any model work
    (`simulmt eval` checks every line up front, so a bad line costs no compute). Text no
    tokenizer can take (lone surrogates, control characters: `simulmt.input.textcheck`) is
    refused here too; the server and `simulmt translate` drop such characters before."""
    bad = Counter(ch for w in words for ch in BAD.findall(w))
    if bad:
        raise InputError(
            f"the text holds {describe(bad)}, which no text may hold (give valid Unicode "
            "without control characters)"
        )
    for w in words:
        if len(w) > limits.max_word_chars:
            raise InputError(
                f"a word of {len(w)} characters ({w[:30]!r}…) is longer than the limit of "
                f"{limits.max_word_chars}"
            )
    sizes = [len(engine.tokenizer.encode_word(w, first=False)) for w in words]
    for w, n in zip(words, sizes, strict=True):
        if n > max_tokens:
            raise InputError(
                f"the word {w[:20]!r}… is {n} subword tokens, more than a sentence may hold "
                f"({max_tokens})"
            )
    return sizes


class Session:
    def __init__(
        self,
        engine: Engine,
        *,
        policy: str | Policy = DEFAULT_POLICY,
        beam: int | None = None,
        options: SearchOptions | None = None,
        limits: SessionLimits = SessionLimits(),
        clock: Callable[[], float] = time.monotonic,
        tentative: bool = True,
        segmentation: Segmentation | str = Segmentation.PUNCTUATION,
        segment_lookahead: int = SEGMENT_LOOKAHEAD,
        detector: BoundaryDetector | None = None,
        drop_fillers: bool = True,
        localise_numbers: bool = True,
        input_kind: InputKind | str = InputKind.TEXT,
        restore_lookahead: int | None = None,
        restorer: Restorer | None = None,
        lookahead: int | None = None,
        tentative_hold_ms: float = 0.0,
    ) -> None:
        """`tentative=False`: updates carry committed words only (no tentative tail is
        detokenized), for consumers that never show it (evaluation, subtitle files).

        `tentative_hold_ms`: while the session still has model work for its sentence, a change
        of the tentative tail alone is held back up to this long (it is often committed or
        replaced a step later); the tail is always shown once the session waits for input.
        0: every change makes an update. A server sets it: each update is a message.

        `drop_fillers`: hesitation sounds ("äh", "ähm", "hm"; `simulmt.input.fillers`) never reach
        the model (a filler that ends a sentence, "äh.", still ends it in `punctuation` mode).

        `localise_numbers`: numbers the model would miscopy reach it as placeholders and come
        back as the source's numbers, and currency signs it never learnt as words
        (`simulmt.input.placeholders`); a number the model copies in the source's notation is
        written in the target's ("2.100" -> "2,100" for de→en; `simulmt.output.numbers`).
        False: the model reads the numbers and writes them as it does.

        `beam` is a shorthand for `options=SearchOptions(beam=…)`; give one or the other
        (ValueError for both: the beam of `options` would silently win).

        `segmentation` says what ends a sentence (see `simulmt.input.sentences`); `auto` uses
        `detector`, or else the engine's boundary network read with `segment_lookahead` words
        (ValueError if the engine has none). `lookahead` is its earlier name (deprecated).

        `input_kind` `recognizer`: the words are a speech recognizer's (lowercase, no
        punctuation); each gets its case and a following comma back from `restorer`, or else
        the engine's restorer reading `restore_lookahead` more words (None: what costs no
        latency under the policy, `make_restorer`; ValueError if the engine has none), before
        segmentation and the policy see it."""
        self.engine = engine
        self.policy = load_policy(policy) if isinstance(policy, str) else policy
        if options is not None and beam is not None:
            raise ValueError(
                "give the beam size either as beam= or inside options=SearchOptions(beam=…), "
                "not both"
            )
        if lookahead is not None:
            warnings.warn(
                "Session(lookahead=) is deprecated; use segment_lookahead=", DeprecationWarning,
                stacklevel=2,
            )
            segment_lookahead = lookahead
        opts = options or SearchOptions(beam=1 if beam is None else beam)
        self.search = OnlineSearch(self.policy, opts, engine.tokenizer)
        self.limits = limits
        self.max_tokens = max_source_tokens(engine, opts)  # per sentence (model positions)
        self.clock = clock
        self.tentative = tentative
        if tentative_hold_ms < 0:
            raise ValueError(f"tentative_hold_ms must be >= 0, got {tentative_hold_ms}")
        self.tentative_hold_ms = tentative_hold_ms
        self._held_since: float | None = None  # clock of the first step not shown since
        self.segmentation = Segmentation.parse(segmentation)
        self.drop_fillers = drop_fillers
        self.fillers_dropped = 0  # hesitation sounds received and left out
        self.localise_numbers = localise_numbers
        self.numbers = (
            NumberNotation.for_pair(engine.info.src, engine.info.tgt) if localise_numbers else None
        )
        if self.segmentation is Segmentation.AUTO and detector is None:
            detector = make_detector(engine, lookahead=segment_lookahead)
        self.input_kind = InputKind.parse(input_kind)
        if self.input_kind is InputKind.RECOGNIZER and restorer is None:
            restorer = make_restorer(
                engine,
                lookahead=restore_lookahead,
                policy=self.policy,
                segmentation=self.segmentation,
            )
        self.restorer = restorer if self.input_kind is InputKind.RECOGNIZER else None
        self._unrestored: deque[str] = deque()  # words in the restorer, as received
        # human-readable notes about the input (unknown chars, cuts), capped in count and bytes
        self.warnings: list[str] = Notes()
        self.cutter = SentenceCutter(
            mode=self.segmentation,
            detector=detector,
            cut_net=engine.segmenter,
            max_words=limits.max_sentence_words,
            max_tokens=self.max_tokens,
            window=limits.cut_window,
            clock=clock,
            warn=self.warnings.append,
        )
        self.sentences: list[Sentence] = self.cutter.sentences  # [0] is being decoded
        self.stream: StreamState | None = None  # the decoding state of sentences[0]
        self.placeholders = self._placeholders()  # the model's view of sentences[0]
        self.display = Display(numbers=self.numbers, placeholders=self.placeholders)
        self.encoded = 0  # words of sentences[0] already encoded
        self.closed = False
        self._has_work = False  # set by `plan`; new input sets it too

    # ---- input (no compute) ------------------------------------------------------------
    def feed(self, text: str) -> None:
        """Queue source words; the segmentation mode decides where their sentences end."""
        if self.closed:
            raise InputError("this session has finished; start a new one")
        words = text.split()
        try:
            sizes = check_words(
                words, engine=self.engine, limits=self.limits, max_tokens=self.max_tokens
            )
        except InputError as e:
            raise InputError(f"{e}; nothing of this text was taken") from None
        for w, n in zip(words, sizes, strict=True):
            if self.drop_fillers and is_filler(w):
                self.fillers_dropped += 1
                if self.segmentation is Segmentation.PUNCTUATION and filler_ends_sentence(w):
                    self._restore_rest()
                    self.cutter.end()
                continue
            if self.restorer is None:
                self.cutter.add(w, n)
                continue
            self._unrestored.append(w)
            for restored in self.restorer.push(w):
                self._add_restored(restored)
        if words:
            self._wake()

    def _add_restored(self, word: str) -> None:
        """Queue a restored word; should its restored form hold more subword tokens than a
        sentence may (the raw word was checked), the word goes on as it was received."""
        raw = self._unrestored.popleft()
        n = len(self.engine.tokenizer.encode_word(word, first=False))
        if n > self.max_tokens:
            word, n = raw, len(self.engine.tokenizer.encode_word(raw, first=False))
        self.cutter.add(word, n, received=raw)

    def _restore_rest(self) -> None:
        """The source so far is complete: the restorer decides the words it still holds."""
        if self.restorer is not None:
            for restored in self.restorer.finish():
                self._add_restored(restored)

    def end_source(self) -> None:
        """The current sentence's source is complete (what `flush` does, without compute)."""
        self._restore_rest()
        if self.cutter.waiting or (self.sentences and not self.sentences[-1].complete):
            self.cutter.end()
            self._wake()

    def _wake(self) -> None:
        self._has_work = True
        if self.stream is not None:
            self.stream.stalled = False

    # ---- input + compute ------------------------------------------------------------------
    def push(self, text: str) -> list[Update]:
        self.feed(text)
        return advance(self.engine, [self])[0]

    def flush(self) -> list[Update]:
        self.end_source()
        return advance(self.engine, [self])[0]

    def finish(self) -> list[Update]:
        self.end_source()
        out = advance(self.engine, [self])[0]
        self.closed = True
        return out

    @property
    def has_work(self) -> bool:
        """True when `advance` would do model work for this session right now."""
        return self._has_work

    @property
    def backlog_words(self) -> int:
        """Source words received but not yet read by the policy (a server's input backpressure)."""
        total = sum(len(sent.words) for sent in self.sentences) + self.cutter.waiting
        total += len(self._unrestored)
        return total - (self.stream.words_read if self.stream is not None else 0)

    @property
    def idle(self) -> bool:
        """True when nothing is left to do until new input arrives."""
        return not self.sentences

    # ---- one decision round: `advance` drives these for many sessions at once ----------
    @staticmethod
    def encode_arrivals(engine: Engine, sessions: Sequence[Session]) -> None:
        """Encode the newly arrived words of every session in one batched encoder pass (the
        only encode path: a lone session is a batch of one). Starts a sentence's stream."""
        todo = [(s, s._start_stream()) for s in sessions]
        todo = [(s, words) for s, words in todo if words]
        if not todo:
            return
        streams = [s.stream for s, _ in todo if s.stream is not None]
        ms = engine.encode_many([st.source for st in streams], [words for _, words in todo])
        for (s, words), st in zip(todo, streams, strict=True):
            st.compute_ms += ms / len(todo)
            s._check_unknown(words)
            s.encoded = len(s.sentences[0].words)

    def plan(self, out: list[Update], *, encode: bool = True) -> StepRequest | None:
        """Make every decision that needs no model work (READs, commits, the end of a sentence,
        starting the next) and return the decoder step this session needs next; None when it
        waits for input or has nothing left (`has_work` says which). Updates go to `out`.

        With `encode` False (`advance`), a sentence started here is not encoded alone: plan
        returns None with `needs_encode` set, for the next batched `encode_arrivals` (a lone
        encode at every sentence start was a tenth of a loaded server's model time)."""
        while True:
            if not self._settle(out, encode=encode):
                self._has_work = True
                return None
            if self.stream is None:
                req = None
                break
            req = self.search.plan(self.stream, self._view(), self.clock())
            self._emit(out, settled=req is None)  # None: it waits, so show the tail now
            if req is not None or not self.stream.done:
                break
        self._has_work = req is not None
        return req

    def apply(
        self, req: StepRequest, res: StepResult, out: list[Update], *, compute_ms: float = 0.0
    ) -> None:
        """Take the result of the step `plan` asked for (`compute_ms`: this session's share of
        the batched step's time). Updates go to `out`."""
        if self.stream is None:
            raise RuntimeError("apply without a planned step")
        self.stream.compute_ms += compute_ms
        self.search.apply(self.stream, self._view(), req, res)
        self._emit(out)

    def _placeholders(self) -> Placeholders | None:
        """A new sentence's model view of its numbers (None with `localise_numbers` off)."""
        if not self.localise_numbers:
            return None
        return Placeholders(notation=self.numbers, src_lang=self.engine.info.src)

    def _start_stream(self) -> list[str]:
        """The current sentence's words not yet encoded, as the model reads them (starting
        its stream if none)."""
        if self.stream is None and self.sentences:
            self.stream, self.encoded = StreamState(), 0
            self.placeholders = self._placeholders()
            self.display = Display(numbers=self.numbers, placeholders=self.placeholders)
            self._held_since = None
        if self.stream is None:
            return []
        words = self.sentences[0].words
        if self.placeholders is not None:
            words = self.placeholders.model_words(words)
        return words[self.encoded :]

    def _settle(self, out: list[Update], *, encode: bool = True) -> bool:
        """Encode newly arrived words (or, without `encode`, return False if some wait);
        emit and drop finished sentences, starting the next."""
        while True:
            if encode:
                Session.encode_arrivals(self.engine, [self])  # nothing to do after `advance`'s
            elif self._start_stream():
                return False
            if self.stream is None or not self.stream.done:
                return True
            self._emit(out)
            self.sentences.pop(0)
            self.stream = None

    @property
    def needs_encode(self) -> bool:
        """Words of the current sentence wait for the encoder (`encode_arrivals`)."""
        return self.stream is not None and self.encoded < len(self.sentences[0].words)

    def _view(self) -> SourceView:
        sent = self.sentences[0]
        return SourceView(n_words=len(sent.words), complete=sent.complete)

    def _check_unknown(self, words: Sequence[str]) -> None:
        unk = [w for w in words if 1 in self.engine.tokenizer.encode_word(w, first=False)]
        if unk:
            self.warnings.append(
                f"unknown characters in {', '.join(map(repr, unk))} (read as <unk>)"
            )

    def _emit(self, out: list[Update], *, settled: bool = False) -> None:
        """Append an Update if the visible output changed (`Display.update`). `settled`: the
        session waits for input now, so a tail held back (`tentative_hold_ms`) is shown."""
        assert self.stream is not None
        tail = self.search.tentative_tail if self.tentative else None
        hold = False
        if tail is not None and self.tentative_hold_ms > 0 and not settled:
            now = self.clock()
            if self._held_since is None:
                self._held_since = now
            hold = (now - self._held_since) * 1000 < self.tentative_hold_ms
        update = self.display.update(
            self.stream, self.sentences[0], tokenizer=self.engine.tokenizer, tail=tail,
            clock=self.clock, hold_tail=hold,
        )
        if update is not None or settled:  # what is shown is current
            self._held_since = None
        if update is not None:
            out.append(update)


def advance(
    engine: Engine, sessions: Sequence[Session], *, max_steps: int | None = None
) -> list[list[Update]]:
    """Run every session until it waits for input or has nothing left; decoder steps of all
    sessions that need one go through the model together. Returns each session's updates.

    With `max_steps`, return after that many batched decoder steps (iteration-level
    batching: a server interleaves sessions and sends updates out between steps);
    `Session.has_work` then tells which sessions want more."""
    out: list[list[Update]] = [[] for _ in sessions]
    steps = 0
    while True:
        Session.encode_arrivals(engine, sessions)
        pending = []
        todo = list(range(len(sessions)))
        while todo:  # sentences started while planning are encoded together, then planned
            for i in todo:
                req = sessions[i].plan(out[i], encode=False)
                if req is not None:
                    pending.append((i, req))
            todo = [i for i in todo if sessions[i].needs_encode]
            Session.encode_arrivals(engine, [sessions[i] for i in todo])
        pending.sort(key=lambda p: p[0])  # rows in session order, however they were planned
        if not pending or (max_steps is not None and steps >= max_steps):
            return out
        steps += 1
        t = time.perf_counter()
        results = engine.step([req for _, req in pending])
        share = (time.perf_counter() - t) * 1000 / len(pending)
        for (i, req), res in zip(pending, results, strict=True):
            sessions[i].apply(req, res, out[i], compute_ms=share)
