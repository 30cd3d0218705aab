"""Wall time of `simulmt eval` vs SimulEval 1.1.4 driving our adapter, on the same set and policy.

    .venv/bin/python bench/eval_speed.py --source test.de --reference test.en \\
        --policy wait-k:k=3 --limit 200 [--model DIR | --tiny] [--batch-size 256] [--threads 1] \\
        [--jobs 2] [--simuleval-threads 1] [--repeats 3]

Both run end to end as subprocesses (model loading included); the report gives the speed
ratio and whether the two agree: per-sentence outputs and delays, BLEU, AL, LAAL, AP, DAL.
The search options (`simulmt.cli.options`: beam, loop guard, precision, …, with
`simulmt eval`'s defaults) are passed explicitly and identically to both sides; `--dtype auto`
(the default) is resolved first, as `simulmt eval` resolves it, and the precision it names
runs on both. The script exits with status 1 when any sentence's output or delays differ.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

from simulmt.cli.options import add_search_arguments, add_session_arguments

BIN = Path(sys.executable).parent


def save_tiny(folder: Path, seed: int) -> Path:
    """A randomly initialised tiny model folder (a smoke test: its output is junk)."""
    from simulmt.engine import Engine
    from simulmt.model.checkpoint import save_checkpoint

    engine = Engine.tiny(seed=seed)
    save_checkpoint(
        folder / "model.pt",
        {
            "model_config": engine.model.cfg.to_dict(),
            "model": engine.model.state_dict(),
            "tokenizer": engine.tokenizer.to_bytes(),
            "meta": {"name": f"tiny-{seed}", "src": "de", "tgt": "en"},
        },
    )
    return folder


def batch_bound(model: Path | None, rows: int, threads: int) -> tuple[float, float]:
    """Per-row milliseconds of the model's decoder step run for 1 row and for `rows` rows at
    once (16 target tokens cached, 32 source tokens): how much batching alone gains on this
    CPU. SimulEval steps one sentence at a time and `simulmt eval` batches the same work, so
    the 1-job speed ratio cannot go far beyond this ratio; float32 GEMMs near the core's peak
    make it the CPU's (batched GEMM / matrix-vector throughput), not the code's."""
    import torch

    from simulmt.engine import Engine

    torch.set_num_threads(threads)
    net = Engine.load(model, dtype="float32", trace=False).model
    cfg = net.cfg
    past_len, src_len = 16, 32

    def per_row(n: int) -> float:
        gen = torch.Generator().manual_seed(0)
        kv = (n, cfg.n_heads, past_len, cfg.head_dim)
        past = [(torch.randn(kv, generator=gen), torch.randn(kv, generator=gen))
                for _ in range(cfg.dec_layers)]  # fmt: skip
        ckv = (n, cfg.n_heads, src_len, cfg.head_dim)
        cross = [(torch.randn(ckv, generator=gen), torch.randn(ckv, generator=gen))
                 for _ in range(cfg.dec_layers)]  # fmt: skip
        args = (
            torch.full((n,), 5), torch.full((n,), past_len), past,
            torch.ones(n, past_len, dtype=torch.bool), cross,
            torch.ones(n, src_len, dtype=torch.bool),
        )  # fmt: skip
        calls = max(3, 600 // n)
        best = float("inf")
        with torch.inference_mode():
            net.decode_step(*args)
            for _ in range(3):  # best of 3 windows: a shared machine drifts
                start = time.perf_counter()
                for _ in range(calls):
                    net.decode_step(*args)
                best = min(best, (time.perf_counter() - start) / calls / n)
        return best * 1000

    return per_row(1), per_row(rows)


def auto_precision(model: Path | None, batch_size: int) -> str:
    """The precision `simulmt eval --dtype auto --batch-size N` runs on this CPU."""
    from simulmt.engine import Engine

    return Engine.load(model, dtype="auto", turn_streams=batch_size, trace=False).precision


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return wall, proc


def simuleval_scores(stdout: str) -> dict[str, float]:
    header, row = stdout.strip().splitlines()[-2:]
    return dict(zip(header.split(), map(float, row.split()), strict=True))


def search_parser() -> argparse.ArgumentParser:
    """The search options both sides take, with `simulmt eval`'s defaults."""
    search = argparse.ArgumentParser(add_help=False)
    add_search_arguments(search)
    add_session_arguments(search, old_spellings=False)
    # `auto` (eval's default) times the precisions at every load, so two processes could pick
    # different ones near a tie: it is resolved once here as `simulmt eval` resolves it
    # (`auto_precision`) and that one named precision runs on both sides
    return search


def forwarded(
    search: argparse.ArgumentParser, args: argparse.Namespace, dtype_flag: str
) -> list[str]:
    """Every search option as a command-line argument, the precision under `dtype_flag`."""
    out: list[str] = []
    for action in search._actions:
        if not action.option_strings:
            continue
        value = getattr(args, action.dest)
        if value is None:  # the default of both sides
            continue
        flag = dtype_flag if action.dest == "dtype" else action.option_strings[0]
        if isinstance(action, argparse._StoreTrueAction):
            out += [flag] if value else []
        else:
            out += [flag, str(value)]
    return out


def main() -> int:
    search = search_parser()
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter, parents=[search]
    )
    p.add_argument("--source", type=Path, required=True)
    p.add_argument("--reference", type=Path, required=True)
    p.add_argument("--policy", default="wait-k:k=3")
    p.add_argument("--limit", type=int, default=100, help="first N sentences")
    p.add_argument("--model", type=Path, default=None, help="model folder (default: bundled)")
    p.add_argument("--tiny", action="store_true", help="use a random tiny model (smoke test)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--threads", type=int, default=1, help="torch threads per simulmt job")
    p.add_argument("--jobs", type=int, default=1, help="simulmt eval worker processes")
    p.add_argument(
        "--simuleval-threads",
        type=int,
        default=None,
        help="torch threads of the SimulEval run (default: --threads x --jobs, the same cores)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run both N times, alternating (a shared machine drifts): every ratio and the median",
    )
    args = p.parse_args()
    from machine import describe  # bench/machine.py: where this ran

    print(describe(), flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="eval_speed_"))
    model = save_tiny(tmp / "model", 0) if args.tiny else args.model
    src, ref = tmp / "src.txt", tmp / "ref.txt"
    src.write_text("\n".join(args.source.read_text().splitlines()[: args.limit]) + "\n")
    ref.write_text("\n".join(args.reference.read_text().splitlines()[: args.limit]) + "\n")
    model_args = ["--model", str(model)] if model else []
    asked = args.dtype
    if asked == "auto":
        args.dtype = auto_precision(model, args.batch_size)
    se_threads = args.simuleval_threads or args.threads * args.jobs
    env_threads = f"import torch; torch.set_num_threads({se_threads});"

    ours_cmd = [
        str(BIN / "simulmt"),
        "eval",
        "--policy",
        args.policy,
        "--source",
        str(src),
        "--reference",
        str(ref),
        "--output",
        str(tmp / "ours"),
        "--json",
        "--no-progress",
        "--batch-size",
        str(args.batch_size),
        "--threads",
        str(args.threads),
        "--jobs",
        str(args.jobs),
        *forwarded(search, args, "--dtype"),
        *model_args,
    ]
    se_cmd = [
        sys.executable,
        "-c",
        env_threads + "from simuleval.cli import main; main()",
        "--agent-class",
        "simulmt.eval.simuleval_agent.SimulmtAgent",
        "--source",
        str(src),
        "--target",
        str(ref),
        "--policy",
        args.policy,
        "--output",
        str(tmp / "se"),
        "--latency-metrics",
        "AL",
        "LAAL",
        "AP",
        "DAL",
        "--no-progress-bar",
        *forwarded(search, args, "--precision"),
        *model_args,
    ]
    one, many = batch_bound(model, args.batch_size, args.threads)
    print(
        f"decoder step per row: {one:.3f} ms alone, {many:.3f} ms in {args.batch_size} rows "
        f"({one / many:.1f}x: what batching alone gains on this CPU)",
        flush=True,
    )
    if asked == "auto":
        print(f"--dtype auto: {args.dtype} (what simulmt eval picks here), on both sides")
    ratios: list[tuple[float, float]] = []
    for _ in range(args.repeats):  # alternating: each pair sees the machine as it is then
        t_ours, ours = timed(ours_cmd)
        t_se, se = timed(se_cmd)
        ratios.append((t_ours, t_se))

    from simulmt.eval.instances import read_instances

    mine = json.loads(ours.stdout.splitlines()[0])
    theirs = simuleval_scores(se.stdout)
    a = read_instances(tmp / "ours" / _dir(args.policy) / "instances.log")
    b = read_instances(tmp / "se" / "instances.log")
    same = sum(
        (x.prediction, x.delays) == (y.prediction, y.delays) for x, y in zip(a, b, strict=True)
    )
    print(f"sentences: {len(a)}  policy: {args.policy}  batch: {args.batch_size}", end="")
    print(f"  jobs: {args.jobs} x {args.threads} thread(s)", end="")
    print(f"  simuleval threads: {se_threads}", end="")
    print(f"  dtype: {args.dtype}")
    print(f"simulmt eval : {t_ours:8.1f} s wall (simulation alone {mine['wall_s']:.1f} s)")
    print(f"simuleval    : {t_se:8.1f} s wall")
    print(f"speed ratio  : {t_se / t_ours:8.1f}x")
    if len(ratios) > 1:
        each = sorted(se_s / ours_s for ours_s, se_s in ratios)
        runs = ", ".join(f"{o:.1f} s vs {t:.1f} s" for o, t in ratios)
        print(f"all runs     : {runs}")
        print(f"ratios       : {', '.join(f'{r:.1f}x' for r in each)}  median {median(each):.1f}x")
    print(f"identical sentences (output and delays): {same}/{len(a)}")
    skip = _skip_empty(a)  # SimulEval leaves empty hypotheses out of the latency means
    print(f"{'':8s}{'simulmt':>10s}{'(skip empty)':>14s}{'simuleval':>11s}")
    for key, name in [
        ("bleu", "BLEU"),
        ("al", "AL"),
        ("laal", "LAAL"),
        ("ap", "AP"),
        ("dal", "DAL"),
    ]:
        print(f"  {name:5s} {mine[key]:10.3f}{skip.get(key, mine[key]):14.3f}{theirs[name]:11.3f}")
    print(f"empty hypotheses: {mine['empty']} (simulmt scores them as full latency by default)")
    print(f"search options (both): {' '.join(forwarded(search, args, '--dtype'))}")
    print(f"files in {tmp}")
    if same != len(a):
        print(f"FAILED: {len(a) - same} sentences differ in output or delays", file=sys.stderr)
        return 1
    return 0


def _skip_empty(stats: list[Any]) -> dict[str, float]:
    from simulmt.eval.corpus import EmptyHypothesis, LatencyConfig, corpus_latency, sentence_latency

    config = LatencyConfig(empty=EmptyHypothesis.SKIP)
    lat = corpus_latency([sentence_latency(s, config) for s in stats], config)
    return {k: v for k, v in vars(lat).items() if isinstance(v, float)}


def _dir(spec: str) -> str:
    from simulmt.eval.cli import policy_dir_name

    return policy_dir_name(spec)


if __name__ == "__main__":
    sys.exit(main())
