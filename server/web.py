"""The plain-HTTP side of the port: /healthz, /metrics, the captions page, the handshake gate.

`gate()` decides for each request before the websocket handshake: answer it as HTTP (page,
health, metrics, 404), refuse it (401 bad token, 403 bad origin, 503 loading or stopping), or
let the websocket handshake go on (None). A handshake without a token goes on when the server
has one: that connection's `start` must carry it (auth.py).
"""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import urlsplit

from simulmt.server.auth import Access, token_matches, token_of
from simulmt.server.metrics import CONTENT_TYPE as METRICS_TYPE
from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

WS_PATHS = ("/", "/ws")  # where websocket upgrades are accepted
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
SECURITY_HEADERS = {
    # the page loads only its own files and talks only to its own origin (ws: included)
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def load_static() -> dict[str, tuple[bytes, str]]:
    """Files under server/static: URL path -> (body, content type); `/` is index.html."""
    root = importlib.resources.files("simulmt.server") / "static"
    files: dict[str, tuple[bytes, str]] = {}
    for entry in root.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in CONTENT_TYPES:
            files[f"/static/{entry.name}"] = (entry.read_bytes(), CONTENT_TYPES[suffix])
    if "/static/index.html" in files:
        files["/"] = files["/static/index.html"]
    return files


@dataclass(frozen=True)
class Health:
    ok: bool  # the model is loaded and the server accepts sessions
    body: dict[str, object]


def is_upgrade(request: Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


def respond(
    ws: ServerConnection, status: HTTPStatus, body: bytes | str, content_type: str
) -> Response:
    data = body.encode() if isinstance(body, str) else body
    response = ws.respond(status, "")
    headers = Headers(
        [(k, v) for k, v in response.headers.raw_items() if k.lower() != "content-type"]
    )
    headers["Content-Type"] = content_type
    del headers["Content-Length"]
    headers["Content-Length"] = str(len(data))
    for key, value in SECURITY_HEADERS.items():
        headers[key] = value
    return Response(response.status_code, response.reason_phrase, headers, data)


def _text(ws: ServerConnection, status: HTTPStatus, message: str) -> Response:
    return respond(ws, status, message + "\n", "text/plain; charset=utf-8")


def gate(
    ws: ServerConnection,
    request: Request,
    *,
    static: dict[str, tuple[bytes, str]],
    health: Health,
    access: Access,
    metrics: Callable[[], bytes] | None,
) -> Response | None:
    """`metrics`: renders /metrics on this port (None: it is served elsewhere, or not at all)."""
    path = urlsplit(request.path).path
    if not is_upgrade(request):
        if path == "/healthz":
            status = HTTPStatus.OK if health.ok else HTTPStatus.SERVICE_UNAVAILABLE
            return respond(ws, status, json.dumps(health.body), "application/json")
        if path == "/metrics":
            if metrics is None:
                why = "/metrics is not on this port: see --metrics-port (or set a --token)"
                return _text(ws, HTTPStatus.NOT_FOUND, why)
            if access.token is not None and not token_matches(token_of(request), access.token):
                return _unauthorized(ws, "send 'Authorization: Bearer T' (a scrape's bearer token)")
            return respond(ws, HTTPStatus.OK, metrics(), METRICS_TYPE)
        if path in static:
            body, content_type = static[path]
            return respond(ws, HTTPStatus.OK, body, content_type)
        if path in WS_PATHS:
            return _text(ws, HTTPStatus.UPGRADE_REQUIRED, "this path takes websocket connections")
        return _text(ws, HTTPStatus.NOT_FOUND, f"no such page: {path[:80]}; try / or /healthz")
    if path not in WS_PATHS:
        return _text(ws, HTTPStatus.NOT_FOUND, f"websocket endpoints are {', '.join(WS_PATHS)}")
    if access.handshake_refused(request):
        return _unauthorized(ws, "send start.token, 'Authorization: Bearer T' or ?token=T")
    origin = request.headers.get("Origin")
    if not access.origin_ok(origin, request):
        return _text(
            ws,
            HTTPStatus.FORBIDDEN,
            f"origin {str(origin)[:80]!r} is not allowed here (see --allowed-origins)",
        )
    if not health.ok:
        return _text(ws, HTTPStatus.SERVICE_UNAVAILABLE, str(health.body.get("status")))
    return None


def _unauthorized(ws: ServerConnection, how: str) -> Response:
    response = _text(ws, HTTPStatus.UNAUTHORIZED, f"missing or wrong token: {how}")
    response.headers["WWW-Authenticate"] = "Bearer"
    return response
