"""Who may open a session: the shared token and the browser origins allowed.

A client proves it knows the token in the handshake (`Authorization: Bearer T`, or `?token=T`,
which lands in access logs) or in its first frame (`start.token`, what the captions page does).
A wrong token in the handshake is refused there (401); a handshake without one is let through
and its `start` must carry the token. Tokens are compared in constant time.

Origins: a browser page on any site can open a websocket to any server it can reach, so a
server on a public address without a token admits only its own page by default.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from websockets.http11 import Request

ANY_ORIGIN = "*"  # in --allowed-origins: every origin may connect
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name or a wildcard address (0.0.0.0, ::) others can reach


def token_matches(given: str | None, token: str) -> bool:
    """Constant-time comparison; any string (lone surrogates included) is safe to pass."""
    if given is None:
        return False
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), token.encode("utf-8", "surrogatepass")
    )


def token_of(request: Request) -> str | None:
    """The token of the handshake: `Authorization: Bearer T` or the `?token=T` query parameter."""
    auth = request.headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    values = parse_qs(urlsplit(request.path).query).get("token")
    return values[0] if values else None


def read_token_file(path: Path) -> str:
    """The token kept in a file (so that it stays out of `ps`): its text, stripped."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read the token file {path}: {e}") from None
    if not text or any(c.isspace() for c in text):
        raise ValueError(
            f"the token file {path} must hold one token: non-empty, without spaces or newlines"
        )
    return text


@dataclass(frozen=True)
class Access:
    """The access rules of one server: its token and the origins it admits."""

    token: str | None  # None: no authentication
    origins: tuple[str, ...] | None  # admitted besides the server's own page; None: any origin

    @classmethod
    def of(cls, *, host: str, token: str | None, allowed: tuple[str, ...] | None) -> Access:
        """`allowed` None (not configured): any origin on a loopback address or with a token,
        else only the server's own page; a list with "*" admits any origin."""
        if allowed is None:
            return cls(token, None if token is not None or is_loopback(host) else ())
        return cls(token, None if ANY_ORIGIN in allowed else allowed)

    def origin_ok(self, origin: str | None, request: Request) -> bool:
        """Listed origins pass, and so does this server's own page (same host and port);
        a request without `Origin` is not a browser page's, and passes."""
        if origin is None or self.origins is None:
            return True
        return origin in self.origins or urlsplit(origin).netloc == request.headers.get("Host")

    def handshake_refused(self, request: Request) -> bool:
        """A token in the handshake that is wrong (a missing one waits for `start.token`)."""
        if self.token is None:
            return False
        given = token_of(request)
        return given is not None and not token_matches(given, self.token)

    def start_token_needed(self, request: Request) -> str | None:
        """The token this connection's `start` must carry: None if the handshake proved it."""
        if self.token is None or token_of(request) is not None:
            return None
        return self.token
