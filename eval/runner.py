"""Streaming simulation of a test set: every line goes through a real `Session`.

Each line gets its own session and is fed exactly as a live stream (and SimulEval) would feed
it: one word, then model work until the session waits for the next word, then the next word;
the source is marked complete together with its last word. So a word's delay is the number of
source words *received* when it was written — what SimulEval counts, and the honest figure for
policies that peek at the next word before writing — and its compute time is what was actually
spent so far (incremental encoding included). Sessions of a batch advance together: the decoder
steps of all waiting-free sessions go through the model as one batch.

A line may hold several sentences (the session splits where `RunConfig.segmentation` says:
at . ! ? by default, or where the boundary detector says with `auto`); they are scored as one
line: delays count the line's words, compute times add up, the prediction is their texts joined.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import multiprocessing.connection
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from simulmt.eval.corpus import SentenceStats
from simulmt.eval.options import RunConfig
from simulmt.eval.quality import segment_statistics
from simulmt.policies.base import CommitMode, Policy
from simulmt.policies.registry import load_policy

from simulmt.engine import Engine
from simulmt.input.kinds import InputKind
from simulmt.input.sentences import Segmentation
from simulmt.input.stages import make_detector, make_restorer
from simulmt.output.updates import Update
from simulmt.session import (
    InputError,
    Session,
    SessionLimits,
    advance,
    check_words,
    max_source_tokens,
)

__all__ = ["RunConfig", "Simulation", "open_session", "simulate"]

log = logging.getLogger(__name__)


@dataclass
class _Track:
    """One line: what has been fed, and what its session's updates add up to."""

    index: int
    words: list[str]
    reference: str
    record_displays: bool
    fed: int = 0  # source words given to the session
    committed: list[str] = field(default_factory=list)  # committed words of the whole line
    delays: list[int] = field(default_factory=list)  # words received when each was written
    compute_ms: list[float] = field(default_factory=list)
    displays: list[str] = field(default_factory=list)
    read_base: int = 0  # words of the line's finished sentences
    compute_base: float = 0.0  # compute of the line's finished sentences
    compute_now: float = 0.0  # latest compute reading of the current sentence
    finished_ids: set[int] = field(default_factory=set)  # the session's finished sentence ids

    def feed_next(self, session: Session) -> None:
        session.feed(self.words[self.fed])
        self.fed += 1
        if self.fed == len(self.words):
            session.end_source()

    def absorb(self, update: Update) -> None:
        if update.sentence_id in self.finished_ids:
            log.debug("line %d: ignoring a repeated final update", self.index)
            return
        new = update.committed_delta.split()
        delays, compute = _per_word(self.index, update, len(new))
        self.committed += new
        self.delays += [self.fed] * len(new)
        self.compute_ms += [self.compute_base + c for c in compute]
        self.compute_now = max([self.compute_now, *compute])
        if self.record_displays:
            shown = " ".join(self.committed + update.tentative.split())
            if not self.displays or self.displays[-1] != shown:
                self.displays.append(shown)
        if update.final:
            self.finished_ids.add(update.sentence_id)
            self.read_base += len(update.source.split())
            self.compute_base += self.compute_now
            self.compute_now = 0.0

    def stats(self, fillers: int) -> SentenceStats:
        """`fillers`: source words the line's session left out (`simulmt.input.fillers`)."""
        if self.read_base + fillers != len(self.words):
            raise RuntimeError(
                f"line {self.index}: sessions finished {self.read_base} of "
                f"{len(self.words)} source words ({fillers} fillers left out)"
            )
        return SentenceStats(
            index=self.index,
            source_length=len(self.words),
            reference=self.reference,
            prediction=" ".join(self.committed),
            delays=tuple(self.delays),
            compute_ms=tuple(self.compute_ms),
            sentence_compute_ms=self.compute_base,
            displays=tuple(self.displays) if self.record_displays else None,
            source=" ".join(self.words),
        )


@dataclass(frozen=True)
class Simulation:
    stats: list[SentenceStats]
    wall_s: float  # wall-clock time of the whole simulation
    compute_ms: float  # model time the engine spent


def _per_word(line: int, update: Update, n_words: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """The update's delays and compute times, one per whitespace word of its committed delta.

    The session counts subword groups (a word-start piece and its continuations); one group
    may decode to no text or to several whitespace words (e.g. ``<unk>`` pieces). All entries
    of one update are equal, so they are spread over the delta's whitespace words.
    """
    delays, compute = update.delays, update.compute_ms
    if len(delays) == n_words and len(compute) == n_words:
        return delays, compute
    if delays and len(set(delays)) == 1 and len(compute) == len(delays) and len(set(compute)) == 1:
        log.debug("line %d: %d subword groups gave %d words", line, len(delays), n_words)
        return (delays[0],) * n_words, (compute[0],) * n_words
    raise RuntimeError(
        f"line {line}: update with {n_words} new words carries {len(delays)} delays and "
        f"{len(compute)} compute times"
    )


def open_session(
    engine: Engine, policy: Policy | str, config: RunConfig, *, tentative: bool
) -> Session:
    """A line's session as `config` says: the evaluator and the SimulEval agent both open
    theirs here, so the two translate every line alike."""
    return Session(
        engine,
        policy=policy,
        options=config.search_options(),
        tentative=tentative,
        segmentation=config.segmentation,
        segment_lookahead=config.segment_lookahead,
        drop_fillers=config.drop_fillers,
        localise_numbers=config.localise_numbers,
        input_kind=config.input_kind,
        restore_lookahead=config.restore_lookahead,
    )


def _run_pool(
    engine: Engine,
    policy: Policy,
    tracks: Sequence[_Track],
    config: RunConfig,
    progress: Callable[[int], None] | None,
) -> list[SentenceStats]:
    """Continuous, iteration-level batching: up to `batch_size` lines are in flight; each
    model step serves every session that has work, a session that waits for input gets its
    next word at once (it never waits for slower neighbours), and a finished line's slot is
    refilled with the next line. Each session still sees exactly the live-stream order: one
    word, then model work until it waits, then the next word."""
    # Longest lines first: a line needs as many iterations as it has steps, so a long line
    # started late would leave a tail of iterations with a nearly empty batch. Every session
    # is independent, so the order changes nothing but the time.
    todo = iter(sorted(tracks, key=lambda t: -len(t.words)))
    engine.cache_pool.reserve(min(config.batch_size, len(tracks)))  # one source slot per line
    active: list[tuple[_Track, Session]] = []
    done: list[SentenceStats] = []
    while True:
        while len(active) < config.batch_size:
            track = next(todo, None)
            if track is None:
                break
            session = open_session(engine, policy, config, tentative=track.record_displays)
            active.append((track, session))
        if not active:
            return sorted(done, key=lambda st: st.index)
        for track, session in active:
            if not session.has_work and track.fed < len(track.words):
                track.feed_next(session)
        updates = advance(engine, [session for _, session in active], max_steps=1)
        still = []
        for (track, session), ups in zip(active, updates, strict=True):
            for u in ups:
                track.absorb(u)
            stream = session.stream
            if stream is not None:
                track.compute_now = max(track.compute_now, stream.compute_ms)
            if session.has_work or track.fed < len(track.words):
                still.append((track, session))
            elif not session.idle:
                raise RuntimeError(
                    f"line {track.index}: the session stalled after its source was complete"
                )
            else:
                done.append(track.stats(session.fillers_dropped))
                if progress is not None:
                    progress(1)
        active = still


def simulate(
    engine: Engine,
    policy: str | Policy,
    sources: Sequence[str],
    references: Sequence[str],
    *,
    config: RunConfig | None = None,
    progress: Callable[[int], None] | None = None,
) -> Simulation:
    """Run every sentence through a streaming session under ``policy`` (a spec string or a
    policy object; policies are stateless, so every session shares it)."""
    config = config or RunConfig()
    loaded = load_policy(policy) if isinstance(policy, str) else policy
    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} source lines but {len(references)} reference lines")
    lines = [src.split() for src in sources]
    limits, max_tokens = SessionLimits(), max_source_tokens(engine, config.search_options())
    for i, words in enumerate(lines):  # every line a session would refuse, before any model work
        if not words:
            raise ValueError(f"source line {i + 1} is empty: every sentence needs >= 1 word")
        try:
            check_words(words, engine=engine, limits=limits, max_tokens=max_tokens)
        except InputError as e:
            raise ValueError(f"source line {i + 1}: {e}; nothing was evaluated") from None
    if config.segmentation is Segmentation.AUTO:  # fail here, not in a forked job
        make_detector(engine, lookahead=config.segment_lookahead)
    if config.input_kind is InputKind.RECOGNIZER:
        make_restorer(engine, lookahead=config.restore_lookahead, policy=loaded,
                      segmentation=config.segmentation)
    retranslation = loaded.mode is CommitMode.RETRANSLATION
    start, compute_before = time.perf_counter(), engine.compute_ms
    tracks = [
        _Track(i, words, ref.strip(), retranslation)
        for i, (words, ref) in enumerate(zip(lines, references, strict=True))
    ]
    jobs = min(config.jobs, len(tracks))
    if jobs > 1 and "fork" not in multiprocessing.get_all_start_methods():
        log.warning("--jobs needs fork (Linux); running %d lines in one process", len(tracks))
        jobs = 1
    if jobs > 1:
        stats, compute_ms = _run_forked(engine, loaded, tracks, config, progress, jobs)
    else:
        stats = _run_pool(engine, loaded, tracks, config, progress)
        compute_ms = engine.compute_ms - compute_before
    wall = time.perf_counter() - start
    log.debug("%s: %d sentences in %.1f s (%d jobs)", policy, len(stats), wall, jobs)
    return Simulation(stats, wall, compute_ms)


def _run_forked(
    engine: Engine,
    policy: Policy,
    tracks: Sequence[_Track],
    config: RunConfig,
    progress: Callable[[int], None] | None,
    jobs: int,
) -> tuple[list[SentenceStats], float]:
    """Split the lines round-robin over `jobs` forked processes (they share the loaded
    weights copy-on-write and run one torch thread each, see `_worker`); each runs `_run_pool`
    on its share and sends back progress, then its results. A session never crosses
    processes, so every line is simulated exactly as in one process."""
    ctx = multiprocessing.get_context("fork")
    workers = []
    for j in range(jobs):
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=_worker,
            args=(engine, policy, tracks[j::jobs], config, send),
            name=f"simulmt-eval-{j}",
            daemon=True,
        )
        proc.start()
        send.close()  # the child holds the only writer: EOF here means the child is gone
        workers.append((proc, receive))
    stats: list[SentenceStats] = []
    compute_ms = 0.0
    pending = {receive: (j, proc) for j, (proc, receive) in enumerate(workers)}
    try:
        while pending:  # whichever job speaks next: progress stays live for all of them
            for conn in multiprocessing.connection.wait(list(pending)):
                assert isinstance(conn, multiprocessing.connection.Connection)
                j, proc = pending[conn]
                try:
                    kind, payload = conn.recv()
                except EOFError:
                    proc.join()
                    raise RuntimeError(
                        f"evaluation job {j} ended without results (exit code {proc.exitcode})"
                    ) from None
                if kind == "progress":
                    if progress is not None:
                        progress(payload)
                elif kind == "error":
                    raise RuntimeError(f"evaluation job {j} failed: {payload}")
                else:
                    job_stats, job_ms = payload
                    stats += job_stats
                    compute_ms += job_ms
                    del pending[conn]
    finally:
        for proc, receive in workers:
            receive.close()
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
    return sorted(stats, key=lambda st: st.index), compute_ms


def with_quality(stats: Sequence[SentenceStats]) -> list[SentenceStats]:
    """`stats` with each sentence's BLEU/chrF statistics (`SentenceStats.quality`)."""
    seg = segment_statistics([s.prediction for s in stats], [s.reference for s in stats])
    return [dataclasses.replace(s, quality=q) for s, q in zip(stats, seg, strict=True)]


def _worker(
    engine: Engine,
    policy: Policy,
    tracks: Sequence[_Track],
    config: RunConfig,
    send: multiprocessing.connection.Connection,
) -> None:
    """One forked job. It runs one torch thread: a child forked after the parent ran a
    multi-threaded op inherits OpenMP's thread pool without its threads, and its first parallel
    op waits for them forever (`eval --jobs 2` hung without `--threads 1`)."""
    torch.set_num_threads(1)
    try:
        before = engine.compute_ms
        stats = _run_pool(engine, policy, tracks, config, lambda n: send.send(("progress", n)))
        stats = with_quality(stats)  # scored here, in parallel; the caller sums the statistics
        send.send(("done", (stats, engine.compute_ms - before)))
    except BaseException as e:  # reported to the parent, which raises it
        send.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        send.close()
