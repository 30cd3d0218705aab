"""An endless unpunctuated stream through `simulmt serve` with the bundled model: no word lost.

    .venv/bin/python bench/longstream.py --source ../shared/corpora/newstest/newstest2015-ende.de \\
        --words 10000 [--segmentation auto] [--segment-lookahead 2] [--policy wait-k:k=3] \
        [--model DIR] [--input-kind recognizer]

Starts a server (its default segmentation: auto with the bundled detector), streams the first
N words of the source in its recognizer view (lowercased, no punctuation), five words a
message, and checks what #16 asks: the finals' `source` fields together are the words sent,
in order; no `error` message; no final covers more than 60 words. With `--input-kind recognizer` the
server restores case and commas first, so the finals are compared as a recognizer writes them.
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from simulmt.client.stream import StartOptions, paced, run_stream
from simulmt.data.asr import recognizer_word
from simulmt.segment.views import recognizer_view


def wait_ready(port: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"the server on port {port} did not become ready")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--source", type=Path, required=True)
    p.add_argument("--words", type=int, default=10_000)
    p.add_argument("--policy", default="wait-k:k=3")
    p.add_argument("--segmentation", default=None, help="default: the server's (auto)")
    p.add_argument("--segment-lookahead", type=int, default=None, help="default: the server's (2)")
    p.add_argument("--model", type=Path, default=None, help="default: the bundled model")
    p.add_argument(
        "--input-kind", default=None, help="text or recognizer (default: the server's, text)"
    )
    p.add_argument("--port", type=int, default=8791)
    args = p.parse_args()
    from machine import facts

    text = recognizer_view(" ".join(args.source.read_text(encoding="utf-8").splitlines()))
    words = text.split()[: args.words]
    chunks = [" ".join(words[i : i + 5]) for i in range(0, len(words), 5)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    simulmt = str(Path(sys.executable).parent / "simulmt")
    cmd = [simulmt, "serve", "--port", str(args.port), "--threads", "1"]
    if args.model is not None:
        cmd += ["--model", str(args.model)]
    server = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    try:
        wait_ready(args.port)
        t = time.perf_counter()
        log = asyncio.run(
            run_stream(
                f"ws://127.0.0.1:{args.port}/ws",
                paced(chunks, 0),
                start=StartOptions(
                    policy=args.policy,
                    segmentation=args.segmentation,
                    segment_lookahead=args.segment_lookahead,
                    input_kind=args.input_kind,
                ),
            )
        )
        wall = time.perf_counter() - t
    finally:
        server.terminate()
        server.wait(timeout=30)
    finals = [str(m["source"]) for m in log.messages if m["type"] == "final"]
    errors = [m for m in log.messages if m["type"] == "error"]
    lengths = [len(f.split()) for f in finals]
    result = {
        "words": len(words),
        "lossless": [recognizer_word(w) for w in " ".join(finals).split()] == words,
        "errors": len(errors),
        "finals": len(finals),
        "max_final_words": max(lengths, default=0),
        "mean_final_words": round(sum(lengths) / max(1, len(lengths)), 1),
        "finals_at_60": sum(n == 60 for n in lengths),
        "policy": args.policy,
        "segmentation": args.segmentation or "server default",
        "segment_lookahead": args.segment_lookahead,
        "input_kind": args.input_kind or "server default",
        "wall_s": round(wall, 1),
        "machine": facts(),  # bench/machine.py: where this ran
    }
    print(json.dumps(result))
    ok = result["lossless"] and not errors and result["max_final_words"] <= 60
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
