"""The benchmarks' added-delay bookkeeping (bench/load.py) and the worker replay
(bench/serve_cpu.py) on the tiny model."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from simulmt.client.stream import StreamLog
from simulmt.engine import Engine

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import serve_cpu  # noqa: E402
from load import added_delays, load_sentences  # noqa: E402


def test_added_delays_tell_the_words_written_after_the_sentences_last_word() -> None:
    """A word whose delay is its sentence's length was written after the source ended; the
    next sentence's delays count from its own first word."""
    log = StreamLog(sent_ms=[0.0, 100.0, 200.0, 300.0, 400.0])
    messages: list[tuple[dict[str, Any], float]] = [
        ({"type": "partial", "delays": [1]}, 150.0),  # needed word 0, sent at 0
        ({"type": "partial", "delays": [3, 3]}, 450.0),  # word 2 is the sentence's last
        ({"type": "final", "source": "a b c"}, 460.0),
        ({"type": "partial", "delays": [1]}, 500.0),  # word 3, the next sentence's first
        ({"type": "final", "source": "d e"}, 600.0),
    ]
    for message, recv in messages:
        log.messages.append(message)
        log.recv_ms.append(recv)
    assert added_delays(log) == [(150.0, False), (250.0, True), (250.0, True), (200.0, False)]


def test_the_replay_feeds_every_word_and_times_every_committed_one() -> None:
    args = argparse.Namespace(
        sessions=3, seconds=2.0, rate=2.5, policy="wait-k:k=2", seed=0, turn_ms=20.0,
        steps_per_turn=1, tentative_hold_ms=100.0,
    )
    run = serve_cpu.replay(Engine.tiny(), load_sentences(None), args)
    assert run.source_words == sum(
        len(serve_cpu.client_words(load_sentences(None), i, 5)) for i in range(3)
    )
    assert run.turns > 0 and run.rows >= run.turns
    assert run.delays and all(ms >= 0 for ms, _ in run.delays)
    assert any(end for _, end in run.delays)  # the tails of the sentences the clients ended
