"""Segmentation through the server: an endless unpunctuated stream loses no word, and the
`start.segmentation` option picks the mode (or is refused with a reason)."""

from __future__ import annotations

import functools
import json
import random
from importlib import resources

import pytest
import torch
from simulmt.server.config import PROTOCOL, Admission, Limits, ServerConfig
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError

from simulmt.client.stream import (
    MAX_UNCONFIRMED_WORDS,
    StartOptions,
    StreamLog,
    paced,
    run_stream,
)
from simulmt.engine import Engine
from simulmt.restore import Restorer, RestorerConfig, RestorerNet
from simulmt.segment.model import SegmenterConfig, SegmenterNet
from simulmt.segment.views import recognizer_view
from tests.test_server import engine, running, ws_url


@functools.cache
def engine_with_detector() -> Engine:
    """The tiny model with a detector that (almost) never ends a sentence: the length
    limit has to do all the cutting, with the network's cut_point."""
    e = Engine.tiny(0)
    torch.manual_seed(0)
    net = SegmenterNet(SegmenterConfig(buckets=256, dim=8, hidden=8, max_lookahead=4))
    net.thresholds.fill_(0.999)
    e.segmenter = net.eval()
    return e


def asr_words(n: int, seed: int = 0) -> list[str]:
    """`n` words of the tiny corpus's German side, lowercased, without punctuation."""
    text = (resources.files("simulmt") / "assets" / "tiny.tsv").read_text(encoding="utf-8")
    vocab = sorted(
        {w for row in text.splitlines() for w in recognizer_view(row.split("\t")[0]).split()}
    )
    rng = random.Random(seed)
    return [rng.choice(vocab) for _ in range(n)]


def finals(log: StreamLog) -> list[dict[str, object]]:
    return [m for m in log.messages if m["type"] == "final"]


@pytest.mark.slow
async def test_a_long_unpunctuated_stream_loses_no_word() -> None:
    """An endless recognizer stream, pumped as fast as the client may send: more 5-word frames
    than the rate limit's burst and more words than the client keeps unconfirmed (so its flow
    control paces the stream), and every sentence is cut by the length limit. It once sent
    10,000 words: the same paths at 7 times the cost (bench/longstream.py does 10,000)."""
    words = asr_words(1_500)
    chunks = [" ".join(words[i : i + 5]) for i in range(0, len(words), 5)]
    assert len(chunks) > 1.25 * Admission().burst_messages and len(words) > MAX_UNCONFIRMED_WORDS
    config = ServerConfig(port=0, limits=Limits(idle_timeout_s=60))
    async with running(config, load=engine_with_detector) as server:
        log = await run_stream(
            ws_url(server), paced(chunks, 0), start=StartOptions(policy="wait-k:k=3")
        )
    assert [m for m in log.messages if m["type"] == "error"] == []
    got = [str(m["source"]) for m in finals(log)]
    assert " ".join(got).split() == words
    assert max(len(s.split()) for s in got) <= 60
    assert len(got) >= len(words) // 60
    assert log.messages[-1] == {**log.messages[-1], "type": "end", "sentences": len(got)}


async def _start(server: object, **fields: object) -> list[dict[str, object]]:
    async with connect(ws_url(server)) as ws:  # type: ignore[arg-type]
        await ws.send(json.dumps({"type": "start", "protocol": PROTOCOL, **fields}))
        await ws.send(json.dumps({"type": "source", "text": "ich habe heute . wir gehen"}))
        await ws.send(json.dumps({"type": "end"}))
        out = []
        try:
            async for m in ws:
                out.append(json.loads(m))
        except ConnectionClosedError:
            pass  # a fatal error closes with 1008 after its message
        return out


async def test_auto_is_refused_when_the_model_has_no_detector_and_the_default_falls_back() -> None:
    async with running(load=engine) as server:
        refused = await _start(server, segmentation="auto")
        fallback = await _start(server)
        client = await _start(server, segmentation="client")
    assert refused[-1]["type"] == "error" and refused[-1]["code"] == "bad_start"
    assert "no segmenter.pt" in str(refused[-1]["message"])
    assert [m["source"] for m in fallback if m["type"] == "final"] == [
        "ich habe heute .",
        "wir gehen",
    ]
    assert [m["source"] for m in client if m["type"] == "final"] == ["ich habe heute . wir gehen"]
    # the `session` message says which mode is in effect: the fallback is visible to the client
    assert [m.get("segmentation") for m in fallback if m["type"] == "session"] == ["punctuation"]
    assert [m.get("segmentation") for m in client if m["type"] == "session"] == ["client"]


@pytest.mark.parametrize(
    ("lookahead", "refusal"),
    [
        (0, None),
        (5, "lookahead must be in 0..4"),  # the protocol allows it, this detector does not
        (9, "integer in 0..8"),  # the protocol's own bound
    ],
)
async def test_the_detectors_lookahead_is_checked(lookahead: int, refusal: str | None) -> None:
    async with running(load=engine_with_detector) as server:
        messages = await _start(server, segmentation="auto", segment_lookahead=lookahead)
    if refusal is None:
        assert messages[0]["type"] == "session" and messages[0]["segmentation"] == "auto"
        assert [m["source"] for m in messages if m["type"] == "final"] == [
            "ich habe heute . wir gehen"  # this detector never ends a sentence
        ]
    else:
        assert messages[-1]["type"] == "error" and messages[-1]["code"] == "bad_start"
        assert refusal in str(messages[-1]["message"])


async def test_segmentation_values_are_refused_with_the_accepted_ones() -> None:
    async with running(load=engine_with_detector) as server:
        bad = await _start(server, segmentation="sentences")
        clash = await _start(server, segmentation="client", segment_lookahead=2)
    assert bad[-1]["code"] == "bad_start" and bad[-1]["fatal"] is True
    assert "accepted: 'punctuation', 'client', 'auto'" in str(bad[-1]["message"])
    assert clash[-1]["code"] == "bad_start"
    assert "applies to segmentation 'auto' only" in str(clash[-1]["message"])


@functools.cache
def engine_with_restorer() -> Engine:
    """The tiny model with an (untrained, deterministic) case and comma restorer."""
    e = Engine.tiny(0)
    torch.manual_seed(0)
    e.restorer = RestorerNet(RestorerConfig(buckets=256, dim=8, hidden=16, head=16)).eval()
    return e


async def test_recognizer_input_is_restored_in_order_and_refused_without_a_restorer() -> None:
    """`start.input_kind: recognizer`: every word reaches the model once, in order, in the form the
    session's restorer gives it; a model without a restorer refuses it with the reason."""
    words = asr_words(300, seed=1)
    chunks = [" ".join(words[i : i + 7]) for i in range(0, len(words), 7)]
    async with running(load=engine_with_restorer) as server:
        log = await run_stream(
            ws_url(server),
            paced(chunks, 0),
            start=StartOptions(policy="wait-k:k=3", segmentation="client", input_kind="recognizer"),
        )
    assert [m for m in log.messages if m["type"] == "error"] == []
    # wait-k reads each word as it comes, so the restorer reads no word past it (the default)
    restorer = Restorer(engine_with_restorer().restorer, lookahead=0)  # type: ignore[arg-type]
    expected = [w for word in words for w in restorer.push(word)] + restorer.finish()
    assert expected != words  # the restorer changed something, and the server used it
    assert " ".join(str(m["source"]) for m in finals(log)).split() == expected
    async with running(load=engine) as server:
        refused = await _start(server, input_kind="recognizer")
    assert refused[-1]["type"] == "error" and refused[-1]["code"] == "bad_start"
    assert "no restorer.pt" in str(refused[-1]["message"])
