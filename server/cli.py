"""Serve live captions over websockets (`simulmt.v1`), the captions page and /healthz.

simulmt serve                                  # bundled model, http://127.0.0.1:8765/
simulmt serve --host 0.0.0.0 --token-file /etc/simulmt/token --allowed-origins https://talks.example.org
simulmt serve --workers 2 --port 8701          # processes on 8701, 8702 (for nginx)
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from simulmt.server.app import CaptionServer
from simulmt.server.auth import read_token_file
from simulmt.server.cli_limits import add_limit_arguments, limit_child_args, limit_options
from simulmt.server.config import Limits, ServerConfig
from simulmt.server.liveness import EXIT_WORKER_FAILED
from simulmt.server.supervise import supervise

from simulmt.cli.options import add_device_argument, add_dtype_argument, add_guard_arguments
from simulmt.engine import Engine, model_checkpoint
from simulmt.model.devices import resolve_device
from simulmt.model.runtime import CLI_DTYPE
from simulmt.search.options import PrematureStops, SearchOptions

logger = logging.getLogger(__name__)

# `simulmt serve` runs live captions. Its precision is CLI_DTYPE (auto, the fastest measured
# on this CPU; a fixed int8 was 5x slower than float32 on AVX2-only CPUs), where the library's
# Engine.load keeps float32 so that a server in a test decides exactly as a Session alone; its
# search defaults are SearchOptions', as everywhere.


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = ServerConfig()
    lim = Limits()
    parser.add_argument("--host", default=d.host, help=f"address to bind (default {d.host})")
    parser.add_argument("--port", type=int, default=d.port, help=f"port (default {d.port}; 0=any)")
    model = parser.add_mutually_exclusive_group()
    model.add_argument("--model", type=Path, help="model folder (default: the bundled model)")
    model.add_argument(
        "--tiny",
        action="store_true",
        help="a random tiny model: for tests and demos, its output is nonsense",
    )
    parser.add_argument(
        "--max-sessions",
        type=int,
        default=d.max_sessions,
        help=f"concurrent sessions per process (default {d.max_sessions})",
    )
    secret = parser.add_mutually_exclusive_group()
    secret.add_argument(
        "--token",
        default=os.environ.get("SIMULMT_TOKEN"),
        help="require this token (start.token, Bearer or ?token=); default $SIMULMT_TOKEN; "
        "--token-file keeps it out of `ps`",
    )
    secret.add_argument(
        "--token-file",
        type=Path,
        help="require the token held in this file (one line)",
    )
    parser.add_argument(
        "--allowed-origins",
        nargs="+",
        default=None,
        metavar="ORIGIN",
        help="browser origins allowed to connect besides the server's own page ('*': any); "
        "default: any on a loopback --host or with a token, else the server's own page only",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=d.metrics_port,
        help="serve GET /metrics (Prometheus) on this separate port, without token (default: "
        "on the main port, behind the token when there is one; a non-loopback --host without "
        "a token serves none there)",
    )
    parser.add_argument(
        "--metrics-host",
        default=d.metrics_host,
        help=f"address of the --metrics-port listener (default {d.metrics_host})",
    )
    parser.add_argument(
        "--worker-stall-s",
        type=float,
        default=d.worker_stall_s,
        help="a model turn running longer than this means the worker is stuck: /healthz turns "
        f"503 and the process exits with status {EXIT_WORKER_FAILED} (default "
        f"{d.worker_stall_s:g})",
    )
    parser.add_argument(
        "--load-timeout-s",
        type=float,
        default=d.load_timeout_s,
        help="a model still loading after this long will not load (a hung disk or device): "
        f"/healthz turns 503 and the process exits with status {EXIT_WORKER_FAILED} (default "
        f"{d.load_timeout_s:g})",
    )
    parser.add_argument(
        "--max-batch",
        type=int,
        default=d.max_batch,
        help=f"sessions per batched model call; 1 = none (default {d.max_batch})",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=lim.idle_timeout_s,
        help=f"close silent sessions after S s (default {lim.idle_timeout_s:g})",
    )
    parser.add_argument(
        "--resume-window-s",
        type=float,
        default=d.resume_window_s,
        help="keep a dropped session this long for its client to resume (default "
        f"{d.resume_window_s:g}; 0 = never park)",
    )
    parser.add_argument(
        "--route",
        default=None,
        help="this process's name for a sticky proxy: resuming clients add ?route=NAME "
        "(--workers sets each process's to its port; see deploy/nginx.conf)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes on ports PORT..PORT+N-1 (put nginx in front)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads per process (default: cores / workers)",
    )
    parser.add_argument(
        "--batch-window-ms",
        type=float,
        default=d.batch_window_ms,
        help="wait up to MS after work arrives for more sessions to batch with (default "
        f"{d.batch_window_ms:g}: none)",
    )
    add_guard_arguments(parser)  # --loop-guard, --premature-stops, for every session
    parser.add_argument(
        "--live-max-sentence-words",
        type=int,
        default=lim.live_max_sentence_words,
        metavar="N",
        help="cut a live sentence longer than this at its likeliest boundary (never dropped): "
        "a longer caption is unreadable (default "
        f"{lim.live_max_sentence_words}; `eval` keeps 120, so that test sentences stay whole)",
    )
    parser.add_argument(
        "--steps-per-turn",
        type=int,
        default=d.steps_per_turn,
        help=f"decoder steps per batched turn before updates go out (default {d.steps_per_turn})",
    )
    parser.add_argument(
        "--tentative-hold-ms",
        type=float,
        default=d.tentative_hold_ms,
        metavar="MS",
        help="hold a change of the tentative tail alone up to MS while the model still works "
        "on the sentence; shown at once when the session waits for input (default "
        f"{d.tentative_hold_ms:g}; 0: every change is a message)",
    )
    parser.add_argument(
        "--switch-interval-ms",
        type=float,
        default=0.5,
        help="Python thread switch interval (default 0.5; CPython's own is 5)",
    )
    add_dtype_argument(parser)
    add_device_argument(parser)
    add_limit_arguments(parser)


def token_from_args(args: argparse.Namespace) -> str | None:
    """The token of --token-file, else of --token / $SIMULMT_TOKEN; ValueError if unreadable."""
    if args.token_file is not None:
        return read_token_file(args.token_file)
    return args.token or None


def config_from_args(args: argparse.Namespace, *, port: int | None = None) -> ServerConfig:
    origins = args.allowed_origins
    return ServerConfig(
        host=args.host,
        port=args.port if port is None else port,
        max_sessions=args.max_sessions,
        token=token_from_args(args),
        allowed_origins=None if origins is None else tuple(origins),
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        worker_stall_s=args.worker_stall_s,
        load_timeout_s=args.load_timeout_s,
        max_batch=args.max_batch,
        batch_window_ms=args.batch_window_ms,
        steps_per_turn=args.steps_per_turn,
        tentative_hold_ms=args.tentative_hold_ms,
        loop_guard=args.loop_guard,
        premature_stops=PrematureStops(args.premature_stops),
        copy_bonus=args.copy_bonus,
        limits=Limits(
            idle_timeout_s=args.idle_timeout,
            live_max_sentence_words=args.live_max_sentence_words,
        ),
        resume_window_s=args.resume_window_s,
        route=args.route,
        **limit_options(args),
    )


def run(args: argparse.Namespace) -> int:
    if args.workers < 1:
        print("simulmt serve: --workers must be >= 1", file=sys.stderr)
        return 2
    try:
        config = config_from_args(args)
        resolve_device(args.device)  # a missing GPU fails here, before anything starts
        if not args.tiny:
            model_checkpoint(args.model)  # so does a model folder that is not one
    except ValueError as e:
        print(f"simulmt serve: {e}", file=sys.stderr)
        return 2
    if args.workers > 1:
        return _supervise(args)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    load: Callable[[], Engine]
    if args.tiny:
        load, name = functools.partial(Engine.tiny, 0), "tiny-0"
    else:
        load = functools.partial(Engine.load, args.model, dtype=args.dtype, device=args.device)
        name = str(args.model or "default")
        logger.info(
            "precision %s, loop guard %s (defaults: --dtype %s --loop-guard %d)",
            args.dtype,
            args.loop_guard or "off",
            CLI_DTYPE,
            SearchOptions.loop_guard,
        )
    # The model worker thread runs hundreds of small torch ops per step, each releasing and
    # re-taking the GIL; with the default 5 ms switch interval a busy event loop makes it wait
    # up to 5 ms for every one of them (a convoy). A short interval keeps steps fast under load.
    sys.setswitchinterval(args.switch_interval_ms / 1000)
    return asyncio.run(_serve(config, load, name))


async def _serve(config: ServerConfig, load: Callable[[], Engine], name: str) -> int:
    if not logger.isEnabledFor(logging.DEBUG):  # one line per connection is noise at 100s
        logging.getLogger("websockets.server").setLevel(logging.WARNING)
    server = CaptionServer(config, load=load, model_name=name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
    except OSError as e:
        print(f"simulmt serve: cannot listen on {config.host}:{config.port}: {e}", file=sys.stderr)
        return 1
    ready = asyncio.create_task(server.wait_ready())
    await asyncio.wait({ready, asyncio.create_task(stop.wait())}, return_when="FIRST_COMPLETED")
    if ready.done() and ready.exception() is not None:
        await server.stop()
        if server.failed.is_set():  # hung: another try may load it
            print(
                f"simulmt serve: {ready.exception()}; exiting with status {EXIT_WORKER_FAILED} "
                "so that a supervisor restarts the server",
                file=sys.stderr,
            )
            return EXIT_WORKER_FAILED
        print(f"simulmt serve: model failed to load: {ready.exception()}", file=sys.stderr)
        return 1
    if ready.done():
        host = f"[{config.host}]" if ":" in config.host else config.host
        print(
            f"serving {server.model_name} on http://{host}:{server.port}/ "
            f"(websocket ws://{host}:{server.port}/ws, instance {server.instance})",
            flush=True,
        )
    failed = asyncio.create_task(server.failed.wait())
    await asyncio.wait({failed, asyncio.create_task(stop.wait())}, return_when="FIRST_COMPLETED")
    await server.stop()
    if server.failed.is_set():
        state = server.worker_failure.value if server.worker_failure else "failed"
        print(
            f"simulmt serve: the model worker is {state}; exiting with status "
            f"{EXIT_WORKER_FAILED} so that a supervisor restarts the server",
            file=sys.stderr,
        )
        return EXIT_WORKER_FAILED
    return 0


def _supervise(args: argparse.Namespace) -> int:
    """Run `--workers N` child processes on consecutive ports (supervise.py)."""
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.workers)
    base = [sys.executable, "-m", "simulmt.cli"] + (["-v"] if args.verbose else []) + ["serve"]
    env = dict(os.environ)
    token = token_from_args(args)
    if token:
        env["SIMULMT_TOKEN"] = token  # not on the command line, where `ps` shows it
    commands = [
        base + _child_args(args, port=args.port + i, threads=threads) for i in range(args.workers)
    ]
    print(
        f"started {args.workers} servers on ports {args.port}..{args.port + args.workers - 1}",
        flush=True,
    )
    return supervise(commands, env=env)


def _child_args(args: argparse.Namespace, *, port: int, threads: int) -> list[str]:
    out = [
        "--host",
        args.host,
        "--port",
        str(port),
        "--max-sessions",
        str(args.max_sessions),
        "--max-batch",
        str(args.max_batch),
        "--batch-window-ms",
        str(args.batch_window_ms),
        "--steps-per-turn",
        str(args.steps_per_turn),
        "--tentative-hold-ms",
        str(args.tentative_hold_ms),
        "--loop-guard",
        str(args.loop_guard),
        "--premature-stops",
        args.premature_stops,
        "--copy-bonus",
        str(args.copy_bonus),
        "--live-max-sentence-words",
        str(args.live_max_sentence_words),
        "--idle-timeout",
        str(args.idle_timeout),
        "--resume-window-s",
        str(args.resume_window_s),
        "--switch-interval-ms",
        str(args.switch_interval_ms),
        "--route",
        str(port),
        "--threads",
        str(threads),
        "--dtype",
        args.dtype,
        "--device",
        args.device,
    ]
    out += limit_child_args(args)
    if args.tiny:
        out.append("--tiny")
    elif args.model is not None:
        out += ["--model", str(args.model)]
    if args.allowed_origins is not None:
        out += ["--allowed-origins", *args.allowed_origins]
    if args.metrics_port is not None:  # one port per process, as for the main port
        out += ["--metrics-port", str(args.metrics_port + port - args.port)]
        out += ["--metrics-host", args.metrics_host]
    out += ["--worker-stall-s", str(args.worker_stall_s)]
    out += ["--load-timeout-s", str(args.load_timeout_s)]
    return out  # the token goes through the environment, not the process list
