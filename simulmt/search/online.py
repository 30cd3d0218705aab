"""The online beam search (the seed's OnlineBeamSearch, NLP book ch. 5.4.3), one decision at a time.

`plan` makes every decision that needs no model work (READs, commits of tokens the beam already
agrees on, the end of a sentence) and returns the decoder step it needs next, or None when the
stream must wait for input. `apply` consumes the step's result. A driver (`simulmt.session`)
batches the steps of many streams into one forward pass between the two.

Word-level writes (`WriteUnit.WORD`, the default): the policy decides once per target word, and
a WRITE commits subword tokens until the commit rule picks a token that opens a new word. That
token, the *look-ahead*, proves the word complete: the word is committed at the source position
where its last token was written (no extra READ). The look-ahead itself is neither committed
nor shown. If the next decision is WRITE with no READ in between, it is reused as the next
word's first token (no decoder step; a policy that needs model signals decides on those of the
step that found it). A READ drops it (`read` truncates the beam to the committed tokens) and the
next WRITE recomputes it with the new word visible: one more decoder step for every word that
a READ follows. After a committed word the next token must open a new word, so continuations
are masked there: a committed word is never extended.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from simulmt.data.tokenizer import Tokenizer
from simulmt.policies.base import Action, CommitMode, ModelSignals, Observation, Policy, Signal
from simulmt.search.agreement import agreed_prefix, agreement, chunk
from simulmt.search.beam import best_hypothesis, expand, finished
from simulmt.search.offline import max_target_len
from simulmt.search.options import SearchOptions, WriteUnit
from simulmt.search.pieces import continuations_mask, stop_pieces
from simulmt.search.signals import model_signals, wants_attention
from simulmt.search.state import BeamState, StreamState, reorder, truncate
from simulmt.search.step import StepRequest, StepResult
from simulmt.search.stops import StopRule


@dataclass(frozen=True)
class SourceView:
    """What the stream has received of its current sentence."""

    n_words: int  # words received (and encoded)
    complete: bool  # no more words will come


@dataclass(frozen=True)
class OnlineSearch:
    """The online beam search of one session: the policy, the search options and the target
    tokenizer (word boundaries), and no stream state of its own. A driver calls `plan` for the
    next decoder step a stream needs (it makes every decision that needs no model work on the
    way: READs, commits, the end of a sentence), runs the steps of many streams as one batch
    (`run_step`), and hands each result back to `apply`, which extends the beam and commits what
    the commit rule allows. Everything it changes lives in the stream's `StreamState`."""

    policy: Policy
    opts: SearchOptions
    tokenizer: Tokenizer

    # ---- helpers -------------------------------------------------------------------
    @property
    def by_word(self) -> bool:
        return self.opts.unit is WriteUnit.WORD

    def source_finished(self, st: StreamState, src: SourceView) -> bool:
        return src.complete and st.words_read >= src.n_words

    def observe(
        self, st: StreamState, src: SourceView, signals: ModelSignals | None = None
    ) -> Observation:
        return Observation(
            src_read=st.words_read,
            tgt_written=len(st.completed_at) if self.by_word else len(st.committed),
            source_finished=self.source_finished(st, src),
            src_available=src.n_words - st.words_read,
            signals=signals,
        )

    def max_len(self, st: StreamState) -> int:
        """The longest hypothesis the source *read so far* allows. Not the source received:
        how many words have arrived depends on timing (a server's chunks), and the output must
        not (a Session alone, a server and the evaluator give the same translation)."""
        return max_target_len(
            st.source.visible(st.words_read),
            ratio=self.opts.max_len_ratio,
            extra=self.opts.max_len_extra,
        )

    def read(self, st: StreamState) -> None:
        st.words_read += 1
        st.signals = None
        # speculative tokens and the look-ahead saw less source: redo them
        truncate(st.beam, len(st.committed))

    def commit(self, st: StreamState, tokens: list[int], *, agreed: bool = False) -> None:
        """Commit `tokens`. `agreed`: every active hypothesis already continues with them, so
        only completed hypotheses need pruning."""
        for tok in tokens:
            if self.tokenizer.is_word_start(tok) and st.committed:
                self._complete(st, len(st.committed))
            st.committed.append(tok)
        if agreed:
            if st.beam.complete:
                _prune_to_prefix(st.beam, st.committed, active=False)
            return
        _prune_to_prefix(st.beam, st.committed)

    def _complete(self, st: StreamState, n: int) -> None:
        """The first `n` committed tokens are known to form whole words: the new ones get
        their delay, the source position now."""
        is_start, ids = self.tokenizer.is_word_start, st.committed
        words = sum(1 for i in range(st.complete_tokens, n) if i == 0 or is_start(ids[i]))
        st.completed_at += [max(st.words_read, st.peeked)] * words
        st.complete_tokens = n

    def tentative_tail(self, st: StreamState) -> list[int]:
        """The best hypothesis' tokens beyond the committed ones that may be shown: with word
        writes, only its whole words (the look-ahead and any word not known to be complete
        are not shown)."""
        tail = st.beam.best()[len(st.committed) :]
        if not self.by_word or self.policy.mode is CommitMode.RETRANSLATION or st.beam.size == 0:
            return tail
        starts = [i for i, tok in enumerate(tail) if self.tokenizer.is_word_start(tok)]
        return tail[: starts[-1]] if starts else []

    @functools.cached_property
    def _attention(self) -> bool:
        return wants_attention(self.policy, self.opts)

    @functools.cached_property
    def stops(self) -> StopRule:
        return StopRule(self.opts.premature_stops, self.tokenizer)

    # ---- planning ------------------------------------------------------------------
    def plan(self, st: StreamState, src: SourceView, now: float) -> StepRequest | None:
        if self.policy.mode is CommitMode.RETRANSLATION:
            return self._plan_retranslation(st, src)
        while not st.done:
            if self.source_finished(st, src):
                return self._plan_finish(st, now)
            if st.stalled:
                return None
            # nothing to attend to yet, or the hypothesis is as long as the source allows: read
            if st.words_read == 0 or st.beam.length >= self.max_len(st):
                if st.word_start is not None:
                    self._stop_write(st)
                if st.words_read >= src.n_words:
                    return None
                self.read(st)
                continue
            if st.word_start is None:  # between two WRITEs: the policy decides
                signals = None
                if self.policy.needs:
                    signals = self._kept_signals(st, src)
                    if signals is None:
                        return self._request(st, src, signals=True)
                if self.policy.decide(self.observe(st, src, signals)) is Action.READ:
                    if st.words_read >= src.n_words:
                        return None
                    self.read(st)
                    continue
                self._begin_write(st, signals)
            if self._write(st):
                continue
            return self._request(st, src, signals=self.by_word and bool(self.policy.needs))
        return None

    def _request(self, st: StreamState, src: SourceView, *, signals: bool = False) -> StepRequest:
        visible = st.source.visible(st.words_read)
        look = 0
        if signals and Signal.PEEK in self.policy.needs and st.words_read < src.n_words:
            look = st.source.visible(st.words_read + 1)
        return StepRequest(st.source, st.beam, visible, self._attention, look, *self._boost(st))

    def _boost(self, st: StreamState) -> tuple[tuple[int, ...], float]:
        """The tokens a step favours (the pieces of the names read so far) and by how much."""
        if not self.opts.copy_bonus:
            return (), 0.0
        return st.names.read(st.source, st.words_read, self.tokenizer), self.opts.copy_bonus

    def _kept_signals(self, st: StreamState, src: SourceView) -> ModelSignals | None:
        """The signals kept from the step that found the last word boundary, if a decision
        step would compute the same now; otherwise None, and the beam is cut back to the
        committed tokens so that the decision step computes them (and the look-ahead)."""
        sig = st.signals
        if sig is not None and (
            Signal.PEEK not in self.policy.needs
            or sig.peek_log_probs is not None
            or st.words_read >= src.n_words
        ):
            return sig
        st.signals = None
        if self.by_word:
            truncate(st.beam, len(st.committed))
        return None

    def _begin_write(self, st: StreamState, signals: ModelSignals | None) -> None:
        st.word_start = len(st.committed)
        st.signals = None
        if signals is not None and signals.peek_log_probs is not None:
            st.peeked = max(st.peeked, st.words_read + 1)  # the decision saw the next word

    def _plan_finish(self, st: StreamState, now: float) -> StepRequest | None:
        if st.finish_started is None:
            st.finish_started = now
            self.stops.drop(st)  # a stop written before the source finished: write it again
        budget = self.opts.time_budget_ms
        over = budget > 0 and (now - st.finish_started) * 1000 > budget
        if over or finished(st.beam, self.opts, len(st.source.ids)):
            hyp = best_hypothesis(st.beam, self.opts, len(st.source.ids))
            self.commit(st, list(hyp.tokens[len(st.committed) :]))
            self._complete(st, len(st.committed))
            st.done = True
            return None
        return self._request(st, SourceView(st.words_read, True))

    # ---- the commit rule -------------------------------------------------------------
    def _pick(self, st: StreamState) -> tuple[int, bool] | None:
        """The next token the commit rule allows, and whether every hypothesis agrees on it:
        once every hypothesis agrees on it or the beam is `speculate` tokens ahead of what is
        committed (speculative commit)."""
        beam, c = st.beam, len(st.committed)
        depth = beam.length - c
        if depth < 1 or beam.size == 0:
            return None
        if beam.size == 1:
            return int(beam.tokens[0, c + 1]), True
        column = beam.tokens[:, c + 1]  # (Bm,)
        agree = bool((column == column[0]).all())
        if agree or depth >= self.opts.speculate:
            return int(column[0]), agree
        return None

    def _try_commit(self, st: StreamState) -> bool:
        pick = self._pick(st)
        if pick is not None:
            self.commit(st, [pick[0]], agreed=pick[1])
        return pick is not None

    def _write(self, st: StreamState) -> bool:
        """Go on with the WRITE under way by the token the commit rule allows; False if it
        allows none yet. The WRITE ends after one token (`WriteUnit.TOKEN`) or, with word
        writes, at a token that opens a new word: the look-ahead, left uncommitted."""
        pick = self._pick(st)
        if pick is None:
            return False
        token, agreed = pick
        if self.tokenizer.is_word_start(token) and self.stops.drop(st):
            return True  # a premature stop was taken back: write its position again
        start = st.word_start
        if self.by_word and start is not None and len(st.committed) > start:
            if self.tokenizer.is_word_start(token):
                self._end_word(st)
                return True
        self.commit(st, [token], agreed=agreed)
        if not self.by_word:
            st.word_start = None
        return True

    def _stop_write(self, st: StreamState) -> None:
        """The hypothesis reached the length the source received allows: the WRITE under way
        ends at what is committed (a started word is complete there: it cannot grow before
        more source comes, and then it may not be extended)."""
        truncate(st.beam, len(st.committed))
        self.stops.drop(st)  # more source will come: the word may not end the sentence
        start = st.word_start
        st.word_start = None
        if self.by_word and start is not None and len(st.committed) > start:
            self._end_word(st)

    def _end_word(self, st: StreamState) -> None:
        """The written word is complete: commit it as whole, and keep only the hypotheses that
        open a new word after it."""
        c = len(st.committed)
        self._complete(st, c)
        st.word_start = None
        beam = st.beam
        if beam.size > 1 and beam.length > c:
            column = beam.tokens[:, c + 1].tolist()  # (Bm,)
            keep = [h for h, tok in enumerate(column) if self.tokenizer.is_word_start(tok)]
            if len(keep) < beam.size:
                reorder(beam, torch.tensor(keep, dtype=torch.long))

    def _forbid(self, st: StreamState) -> torch.Tensor | None:
        """(V,) the tokens that may not come next: continuations right after a committed
        whole word (word writes), else none."""
        c = len(st.committed)
        if self.by_word and c and st.beam.length == c == st.complete_tokens:
            return self._continuations_mask
        return None

    # ---- applying a step -------------------------------------------------------------
    def apply(self, st: StreamState, src: SourceView, req: StepRequest, res: StepResult) -> None:
        if self.policy.mode is CommitMode.RETRANSLATION:
            self._apply_retranslation(st, src, res)
            return
        fin = self.source_finished(st, src)
        if st.word_start is None and self.policy.needs and not fin:  # a decision step
            signals = model_signals(self.policy, res, st.source, st.words_read)
            if self.policy.decide(self.observe(st, src, signals)) is Action.READ:
                if st.words_read < src.n_words:
                    self.read(st)
                else:
                    st.stalled = True
                return
            self._begin_write(st, signals)
        n = len(st.source.ids)
        forbid = self._forbid(st)
        expand(
            st.beam, res, self.opts, allow_eos=fin, max_len=self.max_len(st), src_len=n,
            forbid=forbid, stops=stop_pieces(self.tokenizer),
            bans=() if fin else self.stops.bans(st, st.beam.tokens),
        )
        if fin:
            if finished(st.beam, self.opts, n):
                return  # `plan` takes the best complete hypothesis
            if self.opts.beam == 1:  # full-sentence beams search freely until the end
                self._try_commit(st)
            return
        self._write(st)
        if self.by_word and st.word_start is None and self.policy.needs:
            # the next decision's, if no READ comes
            st.signals = model_signals(self.policy, res, st.source, st.words_read)

    # ---- re-translation (LocalAgreement) -----------------------------------------------
    @property
    def _continuations_mask(self) -> torch.Tensor:
        return continuations_mask(self.tokenizer)

    def _plan_retranslation(self, st: StreamState, src: SourceView) -> StepRequest | None:
        if st.done:
            return None
        if st.redecode is None:
            every = chunk(self.policy)
            while True:
                if st.words_read < src.n_words and not self.source_finished(st, src):
                    if st.words_read > 0 and (
                        self.policy.decide(self.observe(st, src)) is Action.WRITE
                    ):
                        break  # the policy may ask to re-decode before reading more
                    st.words_read += 1
                    if st.words_read % every == 0:
                        break  # a chunk is read: re-decode
                elif self.source_finished(st, src) and st.words_read > 0:
                    break  # the final decode
                else:
                    return None  # wait for the rest of the chunk (or any word)
            st.redecode = BeamState.start(list(st.committed))
        return StepRequest(
            st.source, st.redecode, st.source.visible(st.words_read), self._attention, 0,
            *self._boost(st),
        )

    def _apply_retranslation(self, st: StreamState, src: SourceView, res: StepResult) -> None:
        beam = st.redecode
        assert beam is not None
        n = len(st.source.ids)
        # committed words are whole: what follows them must start a new word
        at_boundary = beam.length == len(st.committed) and bool(st.committed)
        forbid = self._continuations_mask if at_boundary else None
        fin = self.source_finished(st, src)
        expand(  # a re-decode ends where it would end the sentence too early (the rule's
            # bans as ends): pushed past that point, it runs on and repeats phrases
            beam, res, self.opts, allow_eos=True, max_len=self.max_len(st), src_len=n,
            forbid=forbid, stops=stop_pieces(self.tokenizer),
            ends=() if fin else self.stops.bans(st, beam.tokens),
        )
        if not finished(beam, self.opts, n):
            return
        hyp = best_hypothesis(beam, self.opts, n).tokens
        st.redecode = None
        st.history.append(hyp)
        st.beam = BeamState.start(list(hyp))  # the tentative display: the latest hypothesis
        if fin:
            self.commit(st, list(hyp[len(st.committed) :]))
            self._complete(st, len(st.committed))
            st.done = True
            return
        agreed = agreed_prefix(st.history, agreement(self.policy), self.tokenizer)
        agreed = self.stops.agreed(hyp, len(st.committed), agreed)
        if agreed > len(st.committed):
            self.commit(st, list(hyp[len(st.committed) : agreed]))
            self._complete(st, len(st.committed))


def _prune_to_prefix(beam: BeamState, committed: list[int], *, active: bool = True) -> None:
    """Drop hypotheses (active, unless `active` is False, and complete) that disagree with the
    committed tokens."""
    c = len(committed)
    if active and beam.size and beam.length >= c:
        want = torch.tensor(committed, dtype=torch.long)
        ok = (beam.tokens[:, 1 : c + 1] == want).all(dim=1)  # (Bm,)
        if not bool(ok.all()):
            reorder(beam, ok.nonzero().flatten())
    beam.complete = [h for h in beam.complete if list(h.tokens[:c]) == committed]
