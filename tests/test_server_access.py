"""Who may open a session, through real sockets: the token in `start` (what the captions page
sends), in the handshake, from a file; the origins admitted by default; random session ids."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from simulmt.server.app import CaptionServer
from simulmt.server.auth import Access, is_loopback, read_token_file
from simulmt.server.config import PROTOCOL, ServerConfig
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from simulmt.client.stream import StartOptions, paced, run_stream
from tests._server_helpers import engine, running

TOKEN = "s3cret-token"
START: dict[str, Any] = {"type": "start", "protocol": PROTOCOL, "policy": "wait-k:k=2"}


async def exchange(url: str, frames: list[dict[str, Any]], **kw: Any) -> tuple[list[Any], int]:
    """Send frames, read until the server closes; the messages and the close code."""
    async with connect(url, **kw) as ws:
        for frame in frames:
            await ws.send(json.dumps(frame))
        messages = []
        try:
            async with asyncio.timeout(20):
                async for raw in ws:
                    messages.append(json.loads(raw))
        except ConnectionClosed:
            pass
    assert ws.close_code is not None
    return messages, ws.close_code


SOURCE = {"type": "source", "text": "ja ."}
END = {"type": "end"}


async def test_the_token_can_come_in_start_instead_of_the_url() -> None:
    async with running(ServerConfig(port=0, token=TOKEN)) as server:
        url = f"ws://127.0.0.1:{server.port}/ws"
        # no token in the handshake: the connection opens, and `start` must carry it
        wrong = ("wrong", TOKEN[:-1], TOKEN + "\ud800", "\ud800")  # lone surrogates included
        for start in (START, *({**START, "token": t} for t in wrong)):
            messages, code = await exchange(url, [start, SOURCE])
            assert [(m["code"], m["fatal"]) for m in messages] == [("unauthorized", True)]
            assert "start.token" in messages[0]["message"] and code == 1008
        messages, code = await exchange(url, [{**START, "token": TOKEN}, SOURCE, END])
        assert code == 1000 and [m["type"] for m in messages][0] == "session"
        assert messages[-1]["type"] == "end" and any(m["type"] == "final" for m in messages)
        # a token in the handshake is checked there: wrong is 401, right needs none in start
        for bad_url, headers in [
            (url + "?token=wrong", None),
            (url, {"Authorization": "Bearer x"}),
        ]:
            with pytest.raises(InvalidStatus) as info:
                async with connect(bad_url, additional_headers=headers):
                    pass
            assert info.value.response.status_code == 401
        for good_url, headers in [
            (url + f"?token={TOKEN}", None),
            (url, {"Authorization": f"Bearer {TOKEN}"}),
        ]:
            messages, code = await exchange(
                good_url, [START, SOURCE, END], additional_headers=headers
            )
            assert code == 1000 and messages[0]["type"] == "session"
        # a resume needs the server's token too
        resume = {"session_id": "x", "token": "y", "last_seq": 0}
        messages, code = await exchange(url, [{**START, "resume": resume}])
        assert messages[0]["code"] == "unauthorized" and code == 1008


async def test_the_stream_client_sends_its_token_in_start() -> None:
    async with running(ServerConfig(port=0, token=TOKEN)) as server:
        url = f"ws://127.0.0.1:{server.port}/ws"
        log = await run_stream(
            url, paced("ja . nein .".split(), 0), start=StartOptions(policy="wait-k:k=2"),
            token=TOKEN,
        )  # fmt: skip
        assert log.close_code == 1000 and len(log.finals()) == 2
        refused = await run_stream(url, paced(["ja"], 0), token="wrong", reconnect=False)
        assert refused.close_code == 1008
        assert [m["code"] for m in refused.messages if m["type"] == "error"] == ["unauthorized"]


def test_origins_default_to_same_origin_on_a_public_address_without_token() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("10.0.0.2")
    assert Access.of(host="0.0.0.0", token=None, allowed=None).origins == ()  # own page only
    assert Access.of(host="0.0.0.0", token="t", allowed=None).origins is None  # any
    assert Access.of(host="127.0.0.1", token=None, allowed=None).origins is None
    assert Access.of(host="0.0.0.0", token=None, allowed=("*",)).origins is None
    assert Access.of(host="::", token=None, allowed=("https://a.example",)).origins == (
        "https://a.example",
    )
    server = CaptionServer(ServerConfig(host="0.0.0.0", port=0), load=engine, model_name="t")
    assert server.access.origins == ()  # what the server built from its config (not started)


async def test_same_origin_admits_the_servers_own_page_only() -> None:
    """What a public server without token does by default (`origins == ()`), on loopback."""
    async with running(ServerConfig(port=0, allowed_origins=())) as server:
        url = f"ws://127.0.0.1:{server.port}/ws"
        with pytest.raises(InvalidStatus) as info:
            async with connect(url, origin="https://evil.example"):  # type: ignore[arg-type]
                pass
        assert info.value.response.status_code == 403
        own = f"http://127.0.0.1:{server.port}"
        for origin in (own, None):  # the page it serves, or not a browser
            messages, code = await exchange(url, [START, END], origin=origin)
            assert code == 1000 and messages[0]["type"] == "session"


async def test_session_ids_are_random() -> None:
    async with running(ServerConfig(port=0)) as server:
        url = f"ws://127.0.0.1:{server.port}/ws"
        ids = [(await exchange(url, [START, END]))[0][0]["session_id"] for _ in range(3)]
    assert len(set(ids)) == 3 and all(len(i) >= 16 for i in ids)
    assert not any(server.instance in i for i in ids)


def test_read_token_file(tmp_path: Path) -> None:
    (tmp_path / "t").write_text(TOKEN + "\n", encoding="utf-8")
    assert read_token_file(tmp_path / "t") == TOKEN
    for text in ("", "two words\n"):
        (tmp_path / "bad").write_text(text, encoding="utf-8")
        with pytest.raises(ValueError, match="must hold one token"):
            read_token_file(tmp_path / "bad")
    with pytest.raises(ValueError, match="cannot read the token file"):
        read_token_file(tmp_path / "missing")


@pytest.mark.slow
async def test_serve_and_client_take_the_token_from_a_file(tmp_path: Path) -> None:
    """`serve --token-file`: the token is not on the command line (`ps`), the server requires
    it, and `simulmt client --token-file` sends it in `start`."""
    from simulmt.cli import main

    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n", encoding="utf-8")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "simulmt.cli", "serve", "--tiny", "--port", "0", "--threads", "1",
        "--token-file", str(secret),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(180):
            line = ""
            while "serving" not in line:
                line = (await proc.stdout.readline()).decode()
                assert line, "serve exited before serving"
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert TOKEN.encode() not in cmdline and str(secret).encode() in cmdline
        url = f"ws://127.0.0.1:{port}/ws"
        messages, code = await exchange(url, [START, SOURCE])
        assert messages[0]["code"] == "unauthorized" and code == 1008
        text = tmp_path / "talk.de.txt"
        text.write_text("ja . nein .", encoding="utf-8")
        vtt = tmp_path / "talk.vtt"
        args = ["client", str(text), "--url", url, "--rate", "0", "--vtt", str(vtt)]
        assert await asyncio.to_thread(main, [*args, "--token-file", str(secret)]) == 0
        assert vtt.read_text(encoding="utf-8").startswith("WEBVTT")
        assert await asyncio.to_thread(main, [*args, "--token", "wrong"]) == 1
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), timeout=30)
    assert main(["serve", "--token-file", str(tmp_path / "missing")]) == 2
