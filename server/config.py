"""Configuration of the captioning server: one frozen dataclass, defaults with their reasons."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

PROTOCOL = "simulmt.v1"  # the protocol this server speaks; a client's `start` names it
PROTOCOLS = (PROTOCOL,)  # every version this server speaks, preferred first


@dataclass(frozen=True)
class Limits:
    """Per-session input limits, announced to the client in the `session` message."""

    max_message_bytes: int = 64 * 1024  # a spoken minute is < 2 KiB of text; 64 KiB is paste-size
    max_word_chars: int = 100  # longer "words" are garbage (base64, URLs) and blow up subwords
    # a longer sentence is cut (never dropped) at its likeliest boundary: a caption of more
    # than 60 words is unreadable, and the detector ends almost all sentences well before
    max_sentence_words: int = 60
    idle_timeout_s: float = 300.0  # a silent client for 5 min holds a slot for nothing

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if value <= 0:
                raise ValueError(f"Limits.{name} must be > 0, got {value!r}")

    def as_dict(self) -> dict[str, float | int]:
        return dict(asdict(self))


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"  # loopback unless asked: the server has no TLS of its own
    port: int = 8765  # 0 = any free port (tests)
    max_sessions: int = 200  # the load goal is >= 100 concurrent sessions on 2 cores
    token: str | None = None  # shared secret; None = no authentication
    allowed_origins: tuple[str, ...] = ()  # browser Origin values allowed; () = any origin
    limits: Limits = field(default_factory=Limits)
    max_batch: int = 64  # sessions advanced in one batched call; 1 = one session at a time
    # after work arrives, wait up to this long for more sessions to join the batch (0: never):
    # fewer, fuller batches under load, at the price of this much latency when idle
    batch_window_ms: float = 0.0
    steps_per_turn: int = 1  # decoder steps per worker turn before updates go out
    # transport cap: frames above this are cut by websockets itself (1009, no `error` first)
    hard_max_bytes: int = 1024 * 1024
    outbox_high_water: int = 256  # pause a session while this many of its messages are unsent
    max_inflight_words: int = 256  # stop reading a client while this many words await the model
    write_limit_bytes: int = 64 * 1024  # per connection: send() waits beyond this (slow readers)
    ping_interval_s: float | None = 20.0  # keeps nginx's 60 s proxy_read_timeout from cutting us
    ping_timeout_s: float | None = 20.0  # a peer that misses a pong this long is dead
    shutdown_timeout_s: float = 10.0  # SIGTERM: time open sessions get to finish their sentences
    default_policy: str = "wait-k:k=3"  # used when `start` names no policy
    max_beam: int = 8  # beam cost grows linearly; 8 is plenty for captions
    # the search's loop guard for every session (simulmt.search.loops; 0 = off): bans the token that
    # would repeat a cycle of up to this many tokens a third time in a row, and a double stop
    loop_guard: int = 0
    # a connection that drops (1006, 1001) leaves its session parked this long for a resume:
    # Wi-Fi hand-overs and proxy restarts take seconds, a closed laptop lid takes longer
    resume_window_s: float = 30.0
    # messages kept per session for a resume's replay (~200 bytes each): more than a
    # connection has in flight when it drops (the outbox pauses at outbox_high_water)
    replay_messages: int = 1024
    # this process's name for a sticky proxy (deploy/nginx.conf maps ?route= to it); None: alone
    route: str | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if self.max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {self.max_sessions}")
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {self.max_batch}")
        if self.steps_per_turn < 1:
            raise ValueError(f"steps_per_turn must be >= 1, got {self.steps_per_turn}")
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
        if self.outbox_high_water < 2 or self.max_inflight_words < 1:
            raise ValueError("need outbox_high_water >= 2 and max_inflight_words >= 1")
        if self.resume_window_s < 0:
            raise ValueError(f"resume_window_s must be >= 0, got {self.resume_window_s}")
        if self.replay_messages < self.outbox_high_water:
            raise ValueError(
                f"replay_messages ({self.replay_messages}) must be >= outbox_high_water "
                f"({self.outbox_high_water}): a resume must be able to replay a full outbox"
            )
        if self.token == "":
            raise ValueError("token must be a non-empty string or None")
