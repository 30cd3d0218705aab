"""The plain-HTTP side of the port: /healthz, the captions page, and the handshake gate.

`gate()` decides for each request before the websocket handshake: answer it as HTTP (page,
health, 404), refuse it (401 bad token, 403 bad origin, 503 loading or stopping), or let the
websocket handshake go on (None).
"""

from __future__ import annotations

import hmac
import importlib.resources
import json
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

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


def token_of(request: Request) -> str | None:
    """The client's token: `Authorization: Bearer T` or the `?token=T` query parameter."""
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    values = parse_qs(urlsplit(request.path).query).get("token")
    return values[0] if values else None


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
    token: str | None,
    allowed_origins: tuple[str, ...],
) -> Response | None:
    path = urlsplit(request.path).path
    if not is_upgrade(request):
        if path == "/healthz":
            status = HTTPStatus.OK if health.ok else HTTPStatus.SERVICE_UNAVAILABLE
            return respond(ws, status, json.dumps(health.body), "application/json")
        if path in static:
            body, content_type = static[path]
            return respond(ws, HTTPStatus.OK, body, content_type)
        if path in WS_PATHS:
            return _text(ws, HTTPStatus.UPGRADE_REQUIRED, "this path takes websocket connections")
        return _text(ws, HTTPStatus.NOT_FOUND, f"no such page: {path[:80]}; try / or /healthz")
    if path not in WS_PATHS:
        return _text(ws, HTTPStatus.NOT_FOUND, f"websocket endpoints are {', '.join(WS_PATHS)}")
    if token is not None:
        given = token_of(request)
        if given is None or not hmac.compare_digest(given.encode(), token.encode()):
            response = _text(
                ws,
                HTTPStatus.UNAUTHORIZED,
                "missing or wrong token: send ?token=T or 'Authorization: Bearer T'",
            )
            response.headers["WWW-Authenticate"] = "Bearer"
            return response
    origin = request.headers.get("Origin")
    if allowed_origins and origin is not None and not _origin_ok(origin, request, allowed_origins):
        return _text(ws, HTTPStatus.FORBIDDEN, f"origin {origin[:80]!r} is not allowed here")
    if not health.ok:
        return _text(ws, HTTPStatus.SERVICE_UNAVAILABLE, str(health.body.get("status")))
    return None


def _origin_ok(origin: str, request: Request, allowed: tuple[str, ...]) -> bool:
    """Listed origins pass, and so does this server's own page (same host and port)."""
    return origin in allowed or urlsplit(origin).netloc == request.headers.get("Host")
