"""Configuration of the captioning server: one frozen dataclass, defaults with their reasons."""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, field

from simulmt.defaults import DEFAULT_POLICY
from simulmt.search.options import PrematureStops, SearchOptions

PROTOCOL = "simulmt.v1"  # the protocol this server speaks; a client's `start` names it
PROTOCOLS = (PROTOCOL,)  # every version this server speaks, preferred first


@dataclass(frozen=True)
class Limits:
    """Per-session input limits, announced to the client in the `session` message."""

    max_message_bytes: int = 64 * 1024  # a spoken minute is < 2 KiB of text; 64 KiB is paste-size
    max_word_chars: int = 100  # longer "words" are garbage (base64, URLs) and blow up subwords
    # the live sentence-length limit: a longer sentence is cut (never dropped) at its likeliest
    # boundary. A caption of more than 60 words is unreadable, and the detector ends almost all
    # sentences well before; `simulmt eval` and a library `Session` keep 120
    # (`SessionLimits.max_sentence_words`) so that a test set's sentences stay whole
    live_max_sentence_words: int = 60
    idle_timeout_s: float = 300.0  # a silent client for 5 min holds a slot for nothing

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value <= 0:
                raise ValueError(f"Limits.{name} must be > 0, got {value!r}")

    def as_dict(self) -> dict[str, float | int]:
        """The limits as the `session` message announces them; `max_sentence_words` is the
        earlier name of `live_max_sentence_words`, sent too until the next release."""
        return {**asdict(self), "max_sentence_words": self.live_max_sentence_words}


@dataclass(frozen=True)
class Admission:
    """Who may connect, and how much one connection may send: safe on a public address."""

    handshake_timeout_s: float = 10.0  # a connection that has not sent `start` by then is closed
    # connections that have not sent `start` (they hold no session slot) at any one time
    max_unstarted: int = 64
    max_connections_per_ip: int = 16  # open websockets per client address (a class room: one)
    max_sessions_per_ip: int = 8  # sessions per client address, parked ones included
    # proxies (addresses or networks) whose X-Forwarded-For names the real client; () = none
    trusted_proxies: tuple[str, ...] = ()
    # per connection: a speaker sends ~3 words/s; a resume re-sends a backlog at once (burst)
    messages_per_s: float = 20.0
    burst_messages: int = 200
    bytes_per_s: float = 64 * 1024
    burst_bytes: int = 1024 * 1024  # one frame of hard_max_bytes fits
    max_queue: int = 4  # unread frames websockets buffers per connection (each <= hard_max)

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if name != "trusted_proxies" and value <= 0:
                raise ValueError(f"Admission.{name} must be > 0, got {value!r}")
        for proxy in self.trusted_proxies:
            try:
                ipaddress.ip_network(proxy, strict=False)
            except ValueError:
                raise ValueError(
                    f"trusted proxy {proxy!r} is not an IP address or network (e.g. 10.0.0.0/8)"
                ) from None


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"  # loopback unless asked: the server has no TLS of its own
    port: int = 8765  # 0 = any free port (tests)
    max_sessions: int = 200  # the load goal is >= 100 concurrent sessions on 2 cores
    token: str | None = None  # shared secret; None = no authentication
    # browser Origin values admitted besides the server's own page; "*": any origin. None (not
    # set): any origin on a loopback host or with a token, else the server's own page only
    # (any web page could otherwise open sessions on a public server without a token)
    allowed_origins: tuple[str, ...] | None = None
    limits: Limits = field(default_factory=Limits)
    max_batch: int = 64  # sessions advanced in one batched call; 1 = one session at a time
    # after work arrives, wait up to this long for more sessions to join the batch (0: never):
    # fewer, fuller batches under load, at the price of this much latency when idle
    batch_window_ms: float = 0.0
    steps_per_turn: int = 1  # decoder steps per worker turn before updates go out
    # a change of a session's tentative tail alone waits up to this long while the model still
    # works on the sentence (a step later it is mostly committed or replaced); shown at once
    # when the session waits for input. Each update is a message to send, relay and parse
    tentative_hold_ms: float = 100.0
    # transport cap: frames above this are cut by websockets itself (1009, no `error` first)
    hard_max_bytes: int = 1024 * 1024
    outbox_high_water: int = 256  # pause a session while this many of its messages are unsent
    # words that may wait for the model per session while the reader goes on reading (so pings,
    # flush and end are always answered); a `source` past it is refused (`backlog_full`). A
    # client at speaking rate never comes near; a pasted 4000-word talk fits
    max_backlog_words: int = 4096
    drain_timeout_s: float = 30.0  # a client that reads none of its output this long: 1008
    admission: Admission = field(default_factory=Admission)
    write_limit_bytes: int = 64 * 1024  # per connection: send() waits beyond this (slow readers)
    ping_interval_s: float | None = 20.0  # keeps nginx's 60 s proxy_read_timeout from cutting us
    ping_timeout_s: float | None = 20.0  # a peer that misses a pong this long is dead
    shutdown_timeout_s: float = 10.0  # SIGTERM: time open sessions get to finish their sentences
    default_policy: str = DEFAULT_POLICY  # used when `start` names no policy
    max_beam: int = 8  # beam cost grows linearly; 8 is plenty for captions
    # the search's loop guard for every session (simulmt.search.loops; 0 = off): bans the token that
    # would repeat a cycle of up to this many tokens a third time in a row, and a double stop
    loop_guard: int = SearchOptions.loop_guard
    # a sentence end before the source sentence is finished, in every session (simulmt.search.stops)
    premature_stops: PrematureStops = SearchOptions.premature_stops
    # the bonus for the source's name pieces, in every session (simulmt.search.names; 0 = off)
    copy_bonus: float = SearchOptions.copy_bonus
    # a connection that drops (1006, 1001) leaves its session parked this long for a resume:
    # Wi-Fi hand-overs and proxy restarts take seconds, a closed laptop lid takes longer
    resume_window_s: float = 30.0
    # messages kept per session for a resume's replay (~200 bytes each): more than a
    # connection has in flight when it drops (the outbox pauses at outbox_high_water)
    replay_messages: int = 1024
    replay_bytes: int = 512 * 1024  # and at most this many bytes of them (a final can be 6 KB)
    # this process's name for a sticky proxy (deploy/nginx.conf maps ?route= to it); None: alone
    route: str | None = None
    # GET /metrics (Prometheus) on a separate listener at metrics_host:metrics_port; None: on the
    # main port, behind the token when there is one
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"  # a scraper on this machine; an internal address otherwise
    # a model turn running longer than this means a stuck worker: /healthz 503, process exits
    # (a step of the bundled model takes milliseconds; loading the model is not a turn)
    worker_stall_s: float = 60.0
    # a model still loading after this long will not load (a hung network file system or
    # device): /healthz 503, process exits for a supervisor to restart it. The bundled model
    # loads in about a second; a large one from a slow disk in a minute or two
    load_timeout_s: float = 600.0
    step_retries: int = 2  # failed batched turns in a row a session is retried alone after

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if self.max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {self.max_sessions}")
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {self.max_batch}")
        if self.steps_per_turn < 1:
            raise ValueError(f"steps_per_turn must be >= 1, got {self.steps_per_turn}")
        if self.tentative_hold_ms < 0:
            raise ValueError(f"tentative_hold_ms must be >= 0, got {self.tentative_hold_ms}")
        if self.batch_window_ms < 0:
            raise ValueError(f"batch_window_ms must be >= 0, got {self.batch_window_ms}")
        if self.max_beam < 1:
            raise ValueError(f"max_beam must be >= 1, got {self.max_beam}")
        if self.loop_guard < 0:
            raise ValueError(f"loop_guard must be >= 0 (0 = off), got {self.loop_guard}")
        if self.hard_max_bytes < self.limits.max_message_bytes:
            raise ValueError(
                f"hard_max_bytes ({self.hard_max_bytes}) must be >= "
                f"limits.max_message_bytes ({self.limits.max_message_bytes})"
            )
        if self.outbox_high_water < 2 or self.max_backlog_words < 1:
            raise ValueError("need outbox_high_water >= 2 and max_backlog_words >= 1")
        if self.drain_timeout_s <= 0 or self.replay_bytes < self.limits.max_message_bytes:
            raise ValueError(
                "need drain_timeout_s > 0 and replay_bytes >= limits.max_message_bytes"
            )
        if self.resume_window_s < 0:
            raise ValueError(f"resume_window_s must be >= 0, got {self.resume_window_s}")
        if self.replay_messages < self.outbox_high_water:
            raise ValueError(
                f"replay_messages ({self.replay_messages}) must be >= outbox_high_water "
                f"({self.outbox_high_water}): a resume must be able to replay a full outbox"
            )
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics_port must be in 0..65535, got {self.metrics_port}")
        if self.worker_stall_s <= 0 or self.step_retries < 0 or self.load_timeout_s <= 0:
            raise ValueError("need worker_stall_s > 0, load_timeout_s > 0 and step_retries >= 0")
        if self.token == "":
            raise ValueError("token must be a non-empty string or None")
