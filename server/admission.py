"""Who may open a connection: the client's real address, and connections per address.

Behind a proxy every connection comes from the proxy's address; the client's own is in
`X-Forwarded-For`, which anyone can write, so it is believed only from `trusted_proxies`: the
chain is read from the right (the peer first), skipping trusted proxies, and the first address
that is not one is the client. Sessions per address are counted by the session table (parked
ones hold their slot); connections per address are counted here.
"""

from __future__ import annotations

import ipaddress
import logging
from collections import Counter
from http import HTTPStatus

from simulmt.server.config import Admission
from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

logger = logging.getLogger(__name__)
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Addresses:
    """Open connections per client address, and the address of each request."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.proxies: tuple[Network, ...] = tuple(
            ipaddress.ip_network(p, strict=False) for p in admission.trusted_proxies
        )
        self.open: Counter[str] = Counter()
        self.refused = 0  # connections refused for their address (logged in aggregate)

    def _trusted(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address.strip())
        except ValueError:
            return False
        return any(ip in net for net in self.proxies)

    def client_of(self, peer: str, headers: Headers) -> str:
        """The client's address: the peer, or from X-Forwarded-For when the peer is trusted."""
        if not self.proxies or not self._trusted(peer):
            return peer
        chain = [a.strip() for h in headers.get_all("X-Forwarded-For") for a in h.split(",")]
        client = peer
        for address in reversed(chain):
            try:
                ipaddress.ip_address(address)
            except ValueError:
                break  # garbage: the last trusted hop is all we know
            client = address
            if not self._trusted(address):
                break
        return client

    def of(self, ws: ServerConnection) -> str:
        peer = ws.remote_address[0] if ws.remote_address else "unknown"
        headers = ws.request.headers if ws.request is not None else Headers()
        return self.client_of(str(peer), headers)

    def refuse(self, ws: ServerConnection, request: Request) -> Response | None:
        """At the handshake: 429 when this address already has its limit of connections."""
        address = self.client_of(
            str(ws.remote_address[0]) if ws.remote_address else "unknown", request.headers
        )
        limit = self.admission.max_connections_per_ip
        if self.open[address] < limit:
            return None
        self.refused += 1
        if self.refused & (self.refused - 1) == 0:  # 1, 2, 4, 8...: a flood is a few lines
            logger.info("refused %d connections over the per-address limit so far", self.refused)
        message = (
            f"this address has {self.open[address]} connections open; the limit is {limit} "
            "per address; close one or retry later\n"
        )
        response = ws.respond(HTTPStatus.TOO_MANY_REQUESTS, message)
        response.headers["Retry-After"] = "10"
        return response

    def opened(self, address: str) -> None:
        self.open[address] += 1

    def closed(self, address: str) -> None:
        self.open[address] -= 1
        if self.open[address] <= 0:
            del self.open[address]
