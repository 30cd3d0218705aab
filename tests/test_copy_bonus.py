"""The copy bonus: the search favours the pieces of the source's names
(simulmt.search.names, `SearchOptions.copy_bonus`)."""

from __future__ import annotations

import pytest
import torch

from simulmt.data.tokenizer import Tokenizer
from simulmt.engine import Engine, default_model_dir
from simulmt.model.batch import StepRequest
from simulmt.model.state import SourceState
from simulmt.search.names import NamePieces
from simulmt.search.options import SearchOptions
from simulmt.search.state import BeamState
from simulmt.search.step import run_step
from simulmt.session import Session


def _source(tok: Tokenizer, text: str) -> SourceState:
    source = SourceState()
    for w in text.split():
        source.ids += tok.encode_word(w, first=not source.ids)
        source.ends.append(len(source.ids))
    return source


def test_names_are_capitalised_words_of_several_pieces_after_the_first() -> None:
    tok = Tokenizer.load(default_model_dir() / "spm.model")
    source = _source(tok, 'Premier Plattner traf „Karratha", den Hund und die Stadt .')
    names = NamePieces()
    assert names.read(source, 1, tok) == ()  # the sentence's first word is no name
    pieces = names.read(source, len(source.ends), tok)
    want = set(tok.encode_word("Plattner", first=False)) | set(
        tok.encode_word("Karratha", first=False))  # without its quotes and comma
    assert len(tok.encode_word("Hund", first=False)) == 1  # a common noun: one piece
    assert set(pieces) == want
    assert NamePieces().read(source, 3, tok) == tuple(sorted(
        set(tok.encode_word("Plattner", first=False))))  # only the words read so far


def test_the_bonus_lands_on_the_boosted_rows_and_tokens_only() -> None:
    engine = Engine.tiny(0)
    sources = [SourceState(), SourceState()]
    engine.encode_many(sources, [["ich", "habe", "ein", "Buch"], ["der", "Hund"]])
    beams = [BeamState.start(), BeamState.start()]
    plain = [StepRequest(s, b, len(s.ids)) for s, b in zip(sources, beams, strict=True)]
    boost = (5, 7)
    boosted = [StepRequest(sources[0], beams[0], len(sources[0].ids), boost=boost, boost_by=2.5),
               plain[1]]
    before = [r.log_probs.clone() for r in run_step(engine.model, plain)]
    after = [r.log_probs for r in run_step(engine.model, boosted)]
    expected = before[0].clone()
    expected[:, list(boost)] += 2.5
    torch.testing.assert_close(after[0], expected)
    torch.testing.assert_close(after[1], before[1])  # another stream of the batch: untouched


def test_a_session_with_a_large_bonus_copies_the_name() -> None:
    engine = Engine.tiny(0)
    tok = engine.tokenizer
    text = "ich habe Karratha gesehen ."
    name = tok.encode_word("Karratha", first=False)
    outputs = {}
    for bonus in (0.0, 10.0):
        session = Session(engine, policy="full", options=SearchOptions(copy_bonus=bonus))
        final = [u for u in session.push(text) if u.final]
        outputs[bonus] = final[0].text
    letters = set("".join(tok.piece(i) for i in name).replace("\u2581", " "))
    assert not set(outputs[0.0]) <= letters  # the tiny model's own words ("I have …")
    assert outputs[10.0] and set(outputs[10.0]) <= letters  # only the name's pieces


def test_the_bonus_is_checked() -> None:
    with pytest.raises(ValueError, match="copy_bonus must be in"):
        SearchOptions(copy_bonus=-1)
