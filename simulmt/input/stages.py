"""The per-session input stages over the engine's shared, read-only small networks: the
sentence-boundary detector (`segmentation auto`) and the case and comma restorer (recognizer
input). The engine holds the networks; each session gets its own stream over them."""

from __future__ import annotations

from simulmt.engine import Engine
from simulmt.input.sentences import Segmentation
from simulmt.policies.base import Policy
from simulmt.policies.schedules import FullSentence
from simulmt.restore.stream import Restorer
from simulmt.segment.stream import Segmenter

__all__ = ["make_detector", "make_restorer"]


def make_detector(engine: Engine, *, lookahead: int) -> Segmenter:
    """A per-session detector over the engine's shared, read-only boundary network."""
    if engine.segmenter is None:
        raise ValueError(
            "segmentation auto needs a sentence-boundary detector, and this model has none "
            "(no segmenter.pt in its folder; train one with `simulmt train-segmenter`); "
            "accepted without one: punctuation, client"
        )
    return Segmenter(engine.segmenter, lookahead=lookahead)


def make_restorer(
    engine: Engine, *, lookahead: int | None, policy: Policy, segmentation: Segmentation
) -> Restorer:
    """A per-session restorer over the engine's shared, read-only case and comma network.

    `lookahead` None: the right context that costs no latency. A full-sentence policy reads
    nothing before its sentence ends, and where the client or punctuation ends sentences, the
    end releases every held word at once: the words may wait for all the context the restorer
    can use (newstest2015, beam 5: 12.92 BLEU against 12.54 without). Anywhere else a word
    would be read later (a simultaneous policy; `auto`, whose detector reads the words the
    restorer gives it), and at equal AL lookahead 0 is best (wait-k on newstest2015;
    notes/model-notes.md, "Recognizer input")."""
    if engine.restorer is None:
        raise ValueError(
            "input recognizer needs a case and comma restorer, and this model has none "
            "(no restorer.pt in its folder; train one with `simulmt train-restorer`); "
            "accepted without one: text"
        )
    if lookahead is None:
        free = isinstance(policy, FullSentence) and segmentation is not Segmentation.AUTO
        lookahead = engine.restorer.cfg.max_lookahead if free else 0
    return Restorer(engine.restorer, lookahead=lookahead)
