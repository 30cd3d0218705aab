"""WebVTT/SRT generation: checked by two independent parsers (webvtt-py, srt) and properties."""

from __future__ import annotations

import datetime as dt
import html

import pytest
import srt
import webvtt
from hypothesis import given, settings
from hypothesis import strategies as st

from simulmt.client.subtitles import (
    Cue,
    CueConfig,
    TimedSentence,
    build_cues,
    to_srt,
    to_webvtt,
    wrap_words,
)


def sentence(text: str, start_ms: float, step_ms: float = 400.0) -> TimedSentence:
    words = tuple(text.split())
    return TimedSentence(words, tuple(start_ms + i * step_ms for i in range(len(words))))


def test_wrap_respects_line_limit_and_keeps_words() -> None:
    words = "the quick brown fox jumps over the lazy dog and keeps on running far away".split()
    lines = wrap_words(words, 20)
    assert all(len(" ".join(line)) <= 20 for line in lines)
    assert [w for line in lines for w in line] == words
    assert wrap_words(["x" * 50], 20) == [["x" * 20], ["x" * 20], ["x" * 10]]


def test_timestamps_and_layout_table() -> None:
    cues = [Cue(0, 1500, ("Hello world.",)), Cue(3_723_004, 3_725_000, ("a < b & c", "two"))]
    assert to_webvtt(cues) == (
        "WEBVTT\n\n"
        "00:00:00.000 --> 00:00:01.500\nHello world.\n\n"
        "01:02:03.004 --> 01:02:05.000\na &lt; b &amp; c\ntwo\n"
    )
    assert to_srt(cues) == (
        "1\n00:00:00,000 --> 00:00:01,500\nHello world.\n\n"
        "2\n01:02:03,004 --> 01:02:05,000\na < b & c\ntwo\n"
    )


def test_cue_timing_rules() -> None:
    cfg = CueConfig()
    # a short sentence: shown from its first word for at least min_duration
    [cue] = build_cues([sentence("Good morning.", 2000)], config=cfg)
    assert (cue.start_ms, cue.end_ms, cue.lines) == (2000, 3000, ("Good morning.",))
    # a long sentence emitted at once (full-sentence policy) becomes sequential cues
    long = sentence(" ".join(["word"] * 40), 0, step_ms=0)
    cues = build_cues([long], config=cfg)
    assert len(cues) == 3  # 40 words of 4 chars -> 8 per 42-char line -> 5 lines -> 3 cues
    assert cues[0].start_ms == 0 and cues[1].start_ms == cues[0].end_ms
    assert cues[0].end_ms - cues[0].start_ms == cfg.min_duration_ms


def test_webvtt_and_srt_parse_back() -> None:
    sentences = [
        sentence("This is the first sentence of the talk, and it is quite long indeed.", 500),
        sentence("Short one.", 9000),
        sentence("Then <tags> & ampersands --> arrows must survive the trip.", 9100, 100),
    ]
    cues = build_cues(sentences)
    vtt = webvtt.from_string(to_webvtt(cues))
    assert [html.unescape(c.text) for c in vtt] == [c.text for c in cues]
    expected = [(_vtt_ts(c.start_ms), _vtt_ts(c.end_ms)) for c in cues]
    assert [(c.start, c.end) for c in vtt] == expected
    subs = list(srt.parse(to_srt(cues)))
    assert [s.index for s in subs] == list(range(1, len(cues) + 1))
    assert [s.start for s in subs] == [dt.timedelta(milliseconds=c.start_ms) for c in cues]
    assert [s.end for s in subs] == [dt.timedelta(milliseconds=c.end_ms) for c in cues]
    assert " ".join(s.content.replace("\n", " ") for s in subs) == " ".join(
        " ".join(s.words) for s in sentences
    ).replace("-->", "->")


def _vtt_ts(ms: int) -> str:
    h, r = divmod(ms, 3_600_000)
    m, r = divmod(r, 60_000)
    s, r = divmod(r, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}.{r:03d}"


def test_mismatched_times_are_refused() -> None:
    with pytest.raises(ValueError, match="one time per word"):
        TimedSentence(("a", "b"), (0.0,))


_word = st.text(alphabet="abcdefghijklmnopqrstuvwxyzÄÖÜß.,?!", min_size=1, max_size=60)


@st.composite
def timed_sentences(draw: st.DrawFn) -> list[TimedSentence]:
    out = []
    t = draw(st.floats(0, 5000))
    for _ in range(draw(st.integers(1, 6))):
        words = draw(st.lists(_word, min_size=1, max_size=30))
        times = []
        for _ in words:
            t += draw(st.floats(0, 3000))
            times.append(t)
        out.append(TimedSentence(tuple(words), tuple(times)))
    return out


@settings(max_examples=150, deadline=None)
@given(timed_sentences())
def test_cue_invariants(sentences: list[TimedSentence]) -> None:
    cfg = CueConfig()
    cues = build_cues(sentences, config=cfg)
    for cue in cues:
        assert 1 <= len(cue.lines) <= cfg.max_lines
        assert all(0 < len(line) <= cfg.max_line_chars for line in cue.lines)
        assert cue.end_ms > cue.start_ms >= 0
        assert cue.end_ms - cue.start_ms <= cfg.max_duration_ms
    for a, b in zip(cues, cues[1:], strict=False):
        assert a.end_ms <= b.start_ms  # sorted, never overlapping
    # no text lost or reordered (words longer than a line are cut into pieces)
    assert "".join("".join(c.lines).replace(" ", "") for c in cues) == "".join(
        "".join(s.words) for s in sentences
    )
    # a cue never shows before its first word was emitted
    first_times = [s.times_ms[0] for s in sentences]
    assert cues[0].start_ms >= round(first_times[0])
    parsed = list(srt.parse(to_srt(cues)))
    assert len(parsed) == len(cues)
    assert len(webvtt.from_string(to_webvtt(cues)).captions) == len(cues)
