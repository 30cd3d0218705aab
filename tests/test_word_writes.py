"""Word-level writes (#14): a WRITE writes one whole word, committed where its last token was
written, with no extra READ. Property tests over random sentences, policies and beams."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulmt.engine import Engine
from simulmt.output.updates import Update
from simulmt.search.online import OnlineSearch, SourceView
from simulmt.search.options import SearchOptions, WriteUnit
from simulmt.search.state import StreamState
from simulmt.search.step import StepRequest, StepResult
from simulmt.session import Session

ENGINE = Engine.tiny(0)
TOK = ENGINE.tokenizer
SENTENCES = [
    "Ich habe heute ein Buch gelesen .",
    "Der Hund läuft schnell über die Straße .",
    "Wo ist der Bahnhof ?",
    "Die Kinder spielen im Garten Fußball .",
    "Er hat das Fenster geöffnet , weil es warm war .",
    "Sie trinkt Kaffee",
]
# policies whose decisions look at no source word beyond those read
POLICIES = [
    "wait-k:k=1",
    "wait-k:k=2",
    "wait-k:k=3,r=1.5",
    "schedule:g=[1,1,3,4]",
    "confidence:threshold=0.3",
    "alignatt:f=2",
    "local-agreement:n=2",
    "full",
]
PEEKING = ["wait-if-diff", "wait-if-worse"]  # they may look at one more word before writing


@dataclass
class _Written:
    """Per stream: the source position (max(words read, words peeked at)) at which the token
    now at each target position was written, i.e. produced by a decoder step."""

    stream: StreamState
    at: dict[int, int] = field(default_factory=dict)


@contextmanager
def recording() -> Iterator[dict[int, _Written]]:
    """Record, for every stream, where each target position was last written."""
    streams: dict[int, _Written] = {}
    apply = OnlineSearch.apply

    def spy(
        self: OnlineSearch, s: StreamState, src: SourceView, req: StepRequest, res: StepResult
    ) -> None:
        before = req.beam.length
        apply(self, s, src, req, res)
        if req.beam.length == before + 1:  # the step wrote position `before`
            rec = streams.setdefault(id(s), _Written(s))
            rec.at[before] = max(s.words_read, s.peeked)

    with mock.patch.object(OnlineSearch, "apply", spy):
        yield streams


def run(policy: str, text: str, cuts: list[int], opts: SearchOptions) -> tuple[
    list[Update], list[_Written]
]:
    session = Session(ENGINE, policy=policy, options=opts, tentative=True)
    words, ups, pos = text.split(), [], 0
    with recording() as streams:
        for c in cuts:
            ups += session.push(" ".join(words[pos : pos + c]))
            pos += c
        ups += session.push(" ".join(words[pos:])) + session.finish()
    return ups, list(streams.values())


def expected_delays(rec: _Written) -> list[int]:
    """Per whitespace word of the committed text: where its last token was written."""
    ids = rec.stream.committed
    starts = [i for i, t in enumerate(ids) if i == 0 or TOK.is_word_start(t)]
    out = []
    for w, s in enumerate(starts):
        e = starts[w + 1] if w + 1 < len(starts) else len(ids)
        out += [rec.at[e - 1]] * len(TOK.decode(ids[s:e]).split())
    return out


def check_never_retracted(ups: list[Update]) -> None:
    shown: dict[int, str] = {}
    for u in ups:
        before = shown.get(u.sentence_id, "")
        shown[u.sentence_id] = before + u.committed_delta
        assert u.committed_len == len(shown[u.sentence_id].split())
        if u.final:
            assert u.text == shown[u.sentence_id].strip()


STREAMS = st.tuples(
    st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=2).map(" ".join),
    st.lists(st.integers(0, 3), min_size=0, max_size=8),
)
OPTIONS = st.builds(
    SearchOptions, beam=st.sampled_from([1, 1, 2, 3]), speculate=st.sampled_from([1, 2])
)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(POLICIES + PEEKING), STREAMS, OPTIONS)
def test_a_word_is_committed_where_its_last_token_was_written(
    policy: str, stream: tuple[str, list[int]], opts: SearchOptions
) -> None:
    text, cuts = stream
    ups, records = run(policy, text, cuts, opts)
    check_never_retracted(ups)
    by_sentence: dict[int, list[int]] = {}
    for u in ups:
        by_sentence.setdefault(u.sentence_id, []).extend(u.delays)
    got = [by_sentence[i] for i in sorted(by_sentence)]
    want = [expected_delays(r) for r in records if r.stream.committed]
    assert [d for d in got if d] == want
    for sentence, u in zip(got, [u for u in ups if u.final], strict=True):
        assert all(1 <= d <= len(u.source.split()) for d in sentence)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STREAMS, OPTIONS)
def test_wait_1_commits_its_first_word_after_one_word(
    stream: tuple[str, list[int]], opts: SearchOptions
) -> None:
    text, cuts = stream
    ups, _ = run("wait-k:k=1", text, cuts, opts)
    firsts = {}
    for u in ups:
        if u.delays:
            firsts.setdefault(u.sentence_id, u.delays[0])
    assert firsts and set(firsts.values()) == {1}


def test_token_unit_commits_a_word_one_read_later() -> None:
    """The earlier token-level writes: the first word waits for the next word's first token,
    which wait-1 writes only after another READ (and one READ per token of the word)."""
    text = "Ich habe heute ein Buch gelesen ."
    word, _ = run("wait-k:k=1", text, [1] * 7, SearchOptions())
    token, _ = run("wait-k:k=1", text, [1] * 7, SearchOptions(unit=WriteUnit.TOKEN))
    assert next(u.delays[0] for u in word if u.delays) == 1
    assert next(u.delays[0] for u in token if u.delays) >= 2
