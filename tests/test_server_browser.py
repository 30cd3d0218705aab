"""The captions page in headless Chromium (Debian's `chromium`, driven by playwright).

The page connects back to the server it came from, streams typed text, shows the translation
in its DOM, and reconnects on its own when the server goes away and comes back.
"""

from __future__ import annotations

import asyncio
import functools
import shutil
from collections.abc import AsyncIterator

import pytest
from simulmt.server.app import CaptionServer
from simulmt.server.config import ServerConfig

from simulmt.client.stream import StartOptions, paced, run_stream
from simulmt.engine import Engine

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        shutil.which("chromium") is None,
        reason="Debian's chromium is not installed (`apt-get install chromium`; make setup-test)",
    ),
]
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-extensions",
    "--no-first-run",
]
TEXT = "ich habe heute einen Brief geschrieben . das Wetter ist schön ."
POLICY = "wait-k:k=2"


@functools.cache
def engine() -> Engine:
    return Engine.tiny(0)  # trains on one thread whatever the caller's setting


async def start_server(port: int = 0) -> CaptionServer:
    server = CaptionServer(ServerConfig(port=port), load=engine, model_name="tiny")
    await server.start()
    await server.wait_ready()
    return server


@pytest.fixture
async def browser() -> AsyncIterator[object]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        chromium = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


def shown_session(status: str | None) -> str:
    """The session id in the page's status line ("connected · MODEL · session ID")."""
    return str(status).rsplit("session ", 1)[-1].strip()


async def test_page_streams_text_shows_captions_and_reconnects(browser: object) -> None:
    server = await start_server()
    port = server.port
    expected = (
        await run_stream(
            f"ws://127.0.0.1:{port}/ws", paced(TEXT.split(), 0), start=StartOptions(policy=POLICY)
        )
    ).finals()
    assert len(expected) == 2 and any(expected)
    page = await browser.new_page()  # type: ignore[attr-defined]
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    try:
        await page.goto(f"http://127.0.0.1:{port}/?policy={POLICY}")
        status = page.locator("#status.ok")
        await status.wait_for(timeout=20_000)
        assert shown_session(await status.text_content()) in server.table.sessions
        await page.fill("#source", TEXT)
        await page.fill("#rate", "20")
        await page.click("#send")
        finals = page.locator(".sentence.final .committed")
        await finals.nth(1).wait_for(timeout=30_000)
        assert await finals.all_text_contents() == expected  # the translation is in the DOM
        grey = await page.locator(".hint .tentative").evaluate("e => getComputedStyle(e).color")
        black = await finals.first.evaluate("e => getComputedStyle(e).color")
        assert grey == "rgb(138, 138, 138)" and black == "rgb(17, 17, 17)"

        await server.stop()  # the page sees 1001 and keeps trying
        await page.locator("#status.wait").wait_for(timeout=10_000)
        server = await start_server(port)  # back on the same port
        status = page.locator("#status.ok", has_text="connected")
        await status.wait_for(timeout=30_000)
        assert shown_session(await status.text_content()) in server.table.sessions  # the new one
        await page.fill("#source", "das Wetter ist schön .")
        await page.click("#send")
        await finals.nth(2).wait_for(timeout=30_000)
        assert (await finals.all_text_contents())[2] == expected[1]
        assert problems == []
    finally:
        await page.close()
        await server.stop()


async def test_page_resumes_a_killed_connection_without_losing_or_repeating(
    browser: object,
) -> None:
    """The server side cuts the page's socket mid-sentence (no close frame, as a proxy
    restart or a dead Wi-Fi does): the page resumes its session and the captions go on with
    every sentence once, each exactly as an uninterrupted session makes it."""
    text = TEXT + " wir gehen heute nach Hause ."
    server = await start_server()
    page = await browser.new_page()  # type: ignore[attr-defined]
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on(
        "console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None
    )
    try:
        url = f"ws://127.0.0.1:{server.port}/ws"
        expected = (
            await run_stream(url, paced(text.split(), 0), start=StartOptions(policy=POLICY))
        ).finals()
        await page.goto(f"http://127.0.0.1:{server.port}/?policy={POLICY}")
        await page.locator("#status.ok").wait_for(timeout=20_000)
        await page.fill("#source", text)
        await page.fill("#rate", "8")
        await page.click("#send")
        for cut_after in (4, 11):  # mid-sentence, twice
            while max((c.machine.words_in for c in server.connections), default=0) < cut_after:
                await asyncio.sleep(0.01)
            [conn] = [c for c in server.connections if c.started]
            conn.ws.transport.abort()
            await page.locator("#status.ok", has_text="resumed").wait_for(timeout=20_000)
        finals = page.locator(".sentence.final .committed")
        await finals.nth(len(expected) - 1).wait_for(timeout=30_000)
        await asyncio.sleep(0.5)  # nothing more arrives
        assert await finals.all_text_contents() == expected
        assert await page.locator(".sentence").count() == len(expected)  # no repeated line
        assert await page.locator(".interrupted").count() == 0
        assert len(server.table.sessions) == 1  # the same session all along
        assert problems == []
    finally:
        await page.close()
        await server.stop()


async def test_page_sends_the_token_in_start_never_in_a_url(browser: object) -> None:
    """A server with a token: the page takes it from its #token= fragment (which the browser
    never sends) or its Token field, sends it in `start`, and puts it in no URL."""
    token = "page-s3cret"
    server = CaptionServer(ServerConfig(port=0, token=token), load=engine, model_name="tiny")
    await server.start()
    await server.wait_ready()
    page = await browser.new_page()  # type: ignore[attr-defined]
    sockets: list[str] = []
    requests: list[str] = []
    page.on("websocket", lambda ws: sockets.append(ws.url))
    page.on("request", lambda r: requests.append(r.url))
    try:
        await page.goto(f"http://127.0.0.1:{server.port}/?policy={POLICY}#token={token}")
        await page.locator("#status.ok").wait_for(timeout=20_000)
        assert token not in page.url  # taken out of the address bar
        await page.fill("#source", "das Wetter ist schön .")
        await page.click("#send")
        await page.locator(".sentence.final").first.wait_for(timeout=30_000)
        await page.close()

        page = await browser.new_page()  # type: ignore[attr-defined]  # a new tab: no token
        page.on("websocket", lambda ws: sockets.append(ws.url))
        await page.goto(f"http://127.0.0.1:{server.port}/")
        status = page.locator("#status.error", has_text="unauthorized")
        await status.wait_for(timeout=20_000)
        await page.fill("#token", token)
        await page.dispatch_event("#token", "change")
        await page.locator("#status.ok").wait_for(timeout=20_000)
        assert len(sockets) >= 3 and not any(token in url for url in sockets + requests)
    finally:
        await page.close()
        await server.stop()
