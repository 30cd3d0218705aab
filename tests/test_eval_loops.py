"""The loop detector of issue 15: word trigrams (or shorter n-grams) and 2–5 character units
repeated three times in a row; ordinary text does not count."""

from __future__ import annotations

import pytest
from simulmt.eval.loops import char_loop, loop_rate, loops, word_loop


@pytest.mark.parametrize("text", [
    "police of Karrathas 20-jestye to quickly quickly quickly",
    "he said that he said that he said that it was fine",
    "Motorniahgdiagdiagdiagdd",
    "hahahaha",
])
def test_loops_are_found(text: str) -> None:
    assert loops(text)


@pytest.mark.parametrize("text", [
    "The Lord Moddis is on a five sides of the world to Japanese",
    "Mr Modi is on a five-day trip to Japan.",
    "very very good",  # twice is English
    "Mississippi",  # 'ss' twice, 'issi' overlapping twice only
    "1000000 people",  # '00' three times, but numbers are not loops
])
def test_ordinary_text_does_not_loop(text: str) -> None:
    assert not loops(text)
    assert not char_loop(text)


def test_word_ngrams_of_each_size_and_rate() -> None:
    assert word_loop("a b c a b c a b c".split())
    assert not word_loop("a b c a b c".split())
    assert not word_loop("a b c d a b c d a b c d".split(), n=3)
    assert loop_rate(["a a a", "fine", "x y", "ok"]) == 25.0
    assert loop_rate([]) == 0.0
