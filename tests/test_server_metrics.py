"""GET /metrics through real sockets, parsed with prometheus_client's own parser: what a
Prometheus scrape reads after real sessions ran; behind the token or on its own port."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from simulmt.server.app import CaptionServer
from simulmt.server.config import PROTOCOL, ServerConfig
from simulmt.server.protocol import ErrorCode
from websockets.asyncio.client import connect

from simulmt.client.stream import StartOptions, paced, run_stream
from tests._server_helpers import engine, running

TEXT = "ich habe heute einen Brief geschrieben . das Wetter ist schön . wir gehen"
START = json.dumps({"type": "start", "protocol": PROTOCOL, "policy": "wait-k:k=2"})
DASHBOARD = Path(__file__).parents[1] / "deploy" / "grafana-dashboard.json"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def get(url: str, token: str | None = None) -> tuple[int, str, str]:
    """Status, content type and body of a GET."""
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


async def scrape(url: str, token: str | None = None) -> Samples:
    status, content_type, body = await asyncio.to_thread(get, url, token)
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


async def test_a_scrape_after_sessions_counts_what_they_did() -> None:
    async with running(ServerConfig(port=0)) as server:
        ws_url = f"ws://127.0.0.1:{server.port}/ws"
        log = await run_stream(
            ws_url, paced(TEXT.split(), 0), start=StartOptions(policy="wait-k:k=2")
        )
        assert log.close_code == 1000
        committed = sum(len(m["delays"]) for m in log.messages if m["type"] == "partial")
        async with connect(ws_url) as ws:  # one bad message (non-fatal), then a drop: parked
            await ws.send(START)
            await ws.send(json.dumps({"type": "source", "text": "x" * 101}))
            messages = [json.loads(await ws.recv()) for _ in range(2)]
            assert messages[1]["code"] == "word_too_long"
            ws.transport.abort()
        async with asyncio.timeout(10):
            while server.table.parked != 1:
                await asyncio.sleep(0.01)
        samples = await scrape(f"http://127.0.0.1:{server.port}/metrics")
        health = json.loads(
            (await asyncio.to_thread(get, f"http://127.0.0.1:{server.port}/healthz"))[2]
        )
        resume = {"session_id": messages[0]["session_id"], "last_seq": 2}
        resume["token"] = messages[0]["resume"]["token"]
        async with connect(ws_url) as ws:  # the parked session resumed, then ended
            await ws.send(json.dumps({**json.loads(START), "resume": resume}))
            await ws.send(json.dumps({"type": "end"}))
            assert [json.loads(m)["type"] async for m in ws][-1] == "end"
        after = await scrape(f"http://127.0.0.1:{server.port}/metrics")
    assert (
        value(samples, "simulmt_resumes_total") == 0 and value(after, "simulmt_resumes_total") == 1
    )
    assert value(after, "simulmt_sessions", state="parked") == 0
    assert value(samples, "simulmt_source_words_total") == len(TEXT.split())
    assert committed > 0 and value(samples, "simulmt_target_words_total") == committed
    assert value(samples, "simulmt_added_delay_seconds_count") == committed  # one per word
    assert value(samples, "simulmt_added_delay_seconds_sum") > 0
    assert value(samples, "simulmt_errors_total", code="word_too_long") == 1
    assert value(samples, "simulmt_errors_total", code="internal") == 0
    assert {k[1][0][1] for k in samples if k[0] == "simulmt_errors_total"} == {
        c.value for c in ErrorCode
    }  # every code, including any added later
    assert value(samples, "simulmt_sessions", state="parked") == 1
    assert value(samples, "simulmt_sessions", state="active") == 0
    assert value(samples, "simulmt_sessions_started_total") == 2
    assert value(samples, "simulmt_connections_opened_total") == 2
    assert value(samples, "simulmt_connections") == 0
    assert value(samples, "simulmt_queue_sessions") == 0
    assert value(samples, "simulmt_worker_up") == 1
    batches = health["batches"]
    assert batches > 0 and value(samples, "simulmt_batch_sessions_count") == batches
    assert value(samples, "simulmt_batch_sessions_sum") == health["sessions_advanced"]
    assert value(samples, "simulmt_model_step_seconds_count") == batches
    # the Grafana dashboard of deploy/ asks only for series a real scrape has
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queries.append(dashboard["templating"]["list"][0]["definition"])
    names = set(re.findall(r"simulmt_[a-z_]+", " ".join(queries)))
    assert len(names) >= 10 and names <= {name for name, _ in samples}


async def test_metrics_are_behind_the_token_and_each_server_has_its_own() -> None:
    async with running(ServerConfig(port=0, token="tok")) as server:
        async with running(ServerConfig(port=0)) as quiet:  # same process, its own registry
            url = f"http://127.0.0.1:{server.port}/metrics"
            for token in (None, "wrong"):
                status, _, body = await asyncio.to_thread(get, url, token)
                assert status == 401 and "Bearer" in body
            ws_url = f"ws://127.0.0.1:{server.port}/ws"
            log = await run_stream(ws_url, paced(["ja", "."], 0), token="tok")
            assert log.close_code == 1000
            assert value(await scrape(url, "tok"), "simulmt_source_words_total") == 2
            other = await scrape(f"http://127.0.0.1:{quiet.port}/metrics")
            assert value(other, "simulmt_source_words_total") == 0


async def test_metrics_on_a_separate_port() -> None:
    async with running(ServerConfig(port=0, token="tok", metrics_port=0)) as server:
        main = f"http://127.0.0.1:{server.port}/metrics"
        status, _, body = await asyncio.to_thread(get, main, "tok")
        assert status == 404 and "--metrics-port" in body  # not on the main port
        url = f"http://127.0.0.1:{server.metrics_port}/metrics"
        assert value(await scrape(url), "simulmt_worker_up") == 1  # no token on this port
        status, _, _ = await asyncio.to_thread(get, f"http://127.0.0.1:{server.metrics_port}/")
        assert status == 404


def test_metrics_are_never_open_on_a_public_address() -> None:
    """On a non-loopback address /metrics is on the main port only behind a token (else on
    --metrics-port, or nowhere). Not started: these tests bind loopback only."""

    def serves(**kw: object) -> bool:
        config = ServerConfig(port=0, **kw)  # type: ignore[arg-type]
        return CaptionServer(config, load=engine, model_name="t").serves_metrics

    assert not serves(host="0.0.0.0") and serves(host="0.0.0.0", token="t")
    assert serves(host="127.0.0.1") and not serves(host="127.0.0.1", metrics_port=9000)


def test_words_the_worker_drops_do_not_shift_the_added_delays() -> None:
    """A `source` message the worker drops unread (a word over the token limit) leaves no
    arrival behind: the next committed word's delay is measured from its own source word."""
    from simulmt.server.metrics import ServerMetrics, SessionMetrics, Snapshot

    from simulmt.output.updates import Update

    now = [0.0]
    metrics = ServerMetrics(lambda: Snapshot(**{f: 0 for f in Snapshot.__dataclass_fields__}))
    session = SessionMetrics(metrics, clock=lambda: now[0])
    session.source(["ich", "habe"], feed=1)  # at 0 s
    now[0] = 1.0
    session.source(["xxxxxxxx"], feed=2)  # at 1 s; the worker drops it
    now[0] = 2.0
    session.source(["heute"], feed=3)  # at 2 s
    session.dropped(2, 0, 1)
    now[0] = 5.0
    session.update(Update(1, " I have today", 3, "", delays=(1, 2, 3)))
    hist = {s.name: s.value for s in metrics.added_delay.collect()[0].samples}
    assert hist["simulmt_added_delay_seconds_count"] == 3
    assert hist["simulmt_added_delay_seconds_sum"] == 5.0 + 5.0 + 3.0  # "heute" came at 2 s
