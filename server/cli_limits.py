"""`simulmt serve`'s options for admission control and flow control (issue 52): each flag is
named as its `ServerConfig`/`Admission` field, and takes its default from there."""

from __future__ import annotations

import argparse
from typing import Any

from simulmt.server.config import Admission, ServerConfig

# (field, type, help); the flag is --FIELD with dashes
ADMISSION_OPTIONS: tuple[tuple[str, type, str], ...] = (
    ("handshake_timeout_s", float, "close a connection that sends no `start` within S s"),
    ("max_unstarted", int, "connections waiting to send `start` at once (they hold no slot)"),
    ("max_connections_per_ip", int, "open websockets per client address (429 beyond)"),
    ("max_sessions_per_ip", int, "sessions per client address, parked ones included"),
    ("messages_per_s", float, "frames per second one connection may send (rate_limited, 1008)"),
    ("burst_messages", int, "frames one connection may send at once"),
    ("bytes_per_s", float, "bytes per second one connection may send"),
    ("burst_bytes", int, "bytes one connection may send at once"),
    ("max_queue", int, "unread frames buffered per connection"),
)
SERVER_OPTIONS: tuple[tuple[str, type, str], ...] = (
    ("max_backlog_words", int, "words waiting for the model per session (backlog_full beyond)"),
    ("drain_timeout_s", float, "close (1008) a client that reads none of its output for S s"),
    ("shutdown_timeout_s", float, "SIGTERM: grace time for open sentences; then sockets abort"),
)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_limit_arguments(parser: argparse.ArgumentParser) -> None:
    admission, server = Admission(), ServerConfig()
    group = parser.add_argument_group("limits (defaults are safe on a public address)")
    for name, kind, text in ADMISSION_OPTIONS:
        group.add_argument(
            _flag(name), type=kind, default=getattr(admission, name), metavar=kind.__name__.upper(),
            help=f"{text} (default %(default)s)",
        )  # fmt: skip
    group.add_argument(
        "--trusted-proxies",
        nargs="+",
        default=list(admission.trusted_proxies),
        metavar="ADDR",
        help="proxies (addresses or networks, e.g. 127.0.0.1 10.0.0.0/8) whose X-Forwarded-For "
        "names the client for the per-address limits (default: none; the peer's address)",
    )
    for name, kind, text in SERVER_OPTIONS:
        group.add_argument(
            _flag(name), type=kind, default=getattr(server, name), metavar=kind.__name__.upper(),
            help=f"{text} (default %(default)s)",
        )  # fmt: skip


def limit_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ServerConfig keyword arguments these flags set (ValueError when one is refused)."""
    admission = Admission(
        trusted_proxies=tuple(args.trusted_proxies),
        **{name: getattr(args, name) for name, _, _ in ADMISSION_OPTIONS},
    )
    return {"admission": admission, **{name: getattr(args, name) for name, _, _ in SERVER_OPTIONS}}


def limit_child_args(args: argparse.Namespace) -> list[str]:
    """The same flags for each child process of `--workers`."""
    out: list[str] = []
    for name, _, _ in ADMISSION_OPTIONS + SERVER_OPTIONS:
        out += [_flag(name), str(getattr(args, name))]
    if args.trusted_proxies:
        out += ["--trusted-proxies", *args.trusted_proxies]
    return out
