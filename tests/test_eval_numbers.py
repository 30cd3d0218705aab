"""Numbers right (simulmt.eval.numbers): `simulmt eval`'s "num %" column."""

from __future__ import annotations

import pytest
from simulmt.eval.corpus import LatencyConfig, SentenceStats
from simulmt.eval.documents import Document
from simulmt.eval.evaluate import evaluate
from simulmt.eval.longform import score_documents
from simulmt.eval.longform_cli import format_long_form
from simulmt.eval.numbers import number_counts, number_rate
from simulmt.eval.report import format_table
from simulmt.eval.runner import RunConfig

from simulmt.engine import Engine

SOURCES = ["Mehr als 2.100 Menschen, 16,1 Prozent", "Im Jahr 2015 kamen 300", "Es regnet."]
REFERENCES = ["More than 2,100 people, 16.1 percent", "In 2015, 300 came", "It rains."]


def test_numbers_count_in_the_references_notation_once_the_reference_repeats_them() -> None:
    hyps = ["More than 2.100 people, 16.1 per cent", "In 2015 came 30", "Rain."]
    # 2.100 copied in German notation is wrong; 16.1 and 2015 right; 300 missed
    assert number_counts(SOURCES, REFERENCES, hyps, src="de", tgt="en") == (2, 4)
    assert number_rate(SOURCES, REFERENCES, hyps, src="de", tgt="en") == pytest.approx(50.0)
    # a pair that writes numbers alike compares them as written
    assert number_counts(["2.100"], ["2.100"], ["2.100"], src="en", tgt="en") == (1, 1)
    assert number_rate(["Es regnet."], ["It rains."], ["Rain."], src="de", tgt="en") is None
    with pytest.raises(ValueError, match="line counts differ"):
        number_counts(SOURCES, REFERENCES, [], src="de", tgt="en")


def test_eval_reports_numbers_right_for_each_policy() -> None:
    engine = Engine.tiny(0)
    run = evaluate(engine, "wait-k:k=2", SOURCES, REFERENCES, config=RunConfig(batch_size=1))
    predictions = [s.prediction for s in run.stats]
    expected = number_rate(SOURCES, REFERENCES, predictions, src="de", tgt="en")
    assert expected is not None and run.result.numbers == expected
    assert run.result.as_dict()["numbers"] == expected
    assert "num %" in format_table([run.result]).splitlines()[0]


def test_long_form_counts_numbers_over_the_resegmented_sentences() -> None:
    doc = Document("d", (("es", "kostet", "2.100"), ("sie", "wohnt", "dort")),
                   ("it costs 2,100", "she lives there"))  # fmt: skip
    stats = SentenceStats(0, 6, " ".join(doc.references), "it costs 2,100 she lives there",
                          (1, 2, 3, 4, 5, 6), source=" ".join(doc.words))  # fmt: skip
    counted, _ = score_documents("p", [doc], [stats], LatencyConfig(), languages=("de", "en"))
    assert counted.numbers == pytest.approx(100.0) and counted.as_dict()["numbers"] == 100.0
    table = format_long_form([counted])
    assert "| num % |" in table and "| 100.00 |" in table
    uncounted, _ = score_documents("p", [doc], [stats], LatencyConfig())
    assert uncounted.numbers is None
