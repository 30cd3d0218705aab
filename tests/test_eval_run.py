"""The streaming simulation, `simulmt eval`, and the SimulEval adapter, with a tiny model."""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from simulmt.eval.cli import policy_dir_name
from simulmt.eval.instances import read_instances
from simulmt.eval.loops import loop_rate
from simulmt.eval.quality import corpus_quality, quality_from_statistics
from simulmt.eval.runner import RunConfig, simulate
from simulmt.policies import Action, BasePolicy, Observation

from simulmt.cli.options import add_search_arguments, search_settings
from simulmt.data.tokenizer import EOS_ID
from simulmt.engine import Engine
from simulmt.model.checkpoint import save_checkpoint
from simulmt.model.int8 import FbgemmInt8Linear, Int8Linear
from simulmt.search.options import SearchOptions, WriteUnit
from simulmt.session import InputError, Session

SOURCES = ["Ich habe heute ein Buch gelesen", "Der Hund läuft .", "a b . c d e"]
REFERENCES = ["I read a book today", "The dog runs .", "x y . z"]


def scripted_engine() -> Engine:
    """A real engine whose decoder output is constant: it always prefers EOS, then the word
    "the". EOS is allowed only once the source is complete, so under wait-k it writes "the"
    once per READ from the k-th word on and stops when the source ends: outputs we can predict.
    """
    engine = Engine.tiny(seed=0)
    tok, model = engine.tokenizer, engine.model
    (the,) = tok.encode("the")
    assert tok.is_word_start(the)
    with torch.no_grad():
        model.dec_ln.weight.zero_()
        model.dec_ln.bias.zero_()
        model.dec_ln.bias[0] = 1.0  # every decoder state is the unit vector e_0
        model.out_proj.weight.zero_()
        model.out_proj.weight[the, 0] = 1.0  # logits: EOS 2, "the" 1, anything else 0
        model.out_proj.weight[EOS_ID, 0] = 2.0
    return engine


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny matrices: one thread is much faster than two fighting over a busy CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return scripted_engine()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, engine: Engine) -> Path:
    """A model folder holding the scripted engine, and the test set."""
    root = tmp_path_factory.mktemp("tiny")
    save_checkpoint(root / "model" / "model.pt", {
        "model_config": engine.model.cfg.to_dict(),
        "model": engine.model.state_dict(),
        "tokenizer": engine.tokenizer.to_bytes(),
        "meta": {"name": "scripted", "src": "de", "tgt": "en"},
    })  # fmt: skip
    (root / "src.txt").write_text("\n".join(SOURCES) + "\n")
    (root / "ref.txt").write_text("\n".join(REFERENCES) + "\n")
    return root


SERIAL = RunConfig(batch_size=1)
# the scripted model writes "the" again and again: the loop guard (on by default) would ban
# its third copy, so the delay tests that count the "the"s run without it
UNGUARDED = RunConfig(batch_size=1, loop_guard=0)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_wait_k_delays(engine: Engine, k: int) -> None:
    """Word t is written and committed after k+t-1 reads (its look-ahead, the next word's
    start, costs no READ); at the last word the source ends and EOS wins: n-k words."""
    sim = simulate(engine, f"wait-k:k={k}", SOURCES[:1], REFERENCES[:1], config=UNGUARDED)
    (s,) = sim.stats
    n = s.source_length
    assert s.source == SOURCES[0] and n == 6
    assert s.delays == tuple(range(k, n))
    assert set(s.prediction.split()) == {"the"} and len(s.delays) == len(s.prediction.split())
    assert s.compute_ms is not None and list(s.compute_ms) == sorted(s.compute_ms)
    assert s.displays is None  # not a re-translation policy
    assert sim.wall_s > 0 and sim.compute_ms > 0


@pytest.mark.parametrize("k", [1, 2, 3])
def test_token_unit_delays(engine: Engine, k: int) -> None:
    """`unit=token` (earlier releases): a one-token word is shown when the next token is
    written, one READ later: word t after k+t reads."""
    config = RunConfig(batch_size=1, unit=WriteUnit.TOKEN, loop_guard=0)
    sim = simulate(engine, f"wait-k:k={k}", SOURCES[:1], REFERENCES[:1], config=config)
    (s,) = sim.stats
    assert s.delays == tuple(range(k + 1, s.source_length + 1))


def test_generation_stops_at_eos(engine: Engine) -> None:
    """Once the source is complete EOS is the argmax: wait-k writes n-k words, full none.
    (Fails while the search drops EOS-complete hypotheses when it commits the next token.)"""
    sim = simulate(engine, "wait-k:k=2", SOURCES[:1], REFERENCES[:1], config=SERIAL)
    assert sim.stats[0].delays == (2, 3, 4, 5)
    sim = simulate(engine, "full", SOURCES[:1], REFERENCES[:1], config=SERIAL)
    assert sim.stats[0].prediction == ""


def test_line_with_two_sentences_counts_line_words(engine: Engine) -> None:
    sim = simulate(engine, "wait-k:k=2", SOURCES[2:], REFERENCES[2:], config=SERIAL)
    (s,) = sim.stats
    assert s.source_length == 6
    # "a b .": one word after 2 reads; "c d e": one after the line's 5th word
    assert s.delays == (2, 5)


def test_full_sentence_waits_for_everything() -> None:
    """The trained tiny model (not the scripted one, which writes nothing under `full`)
    translates its own corpus's sentences: every word only after the whole source."""
    sim = simulate(Engine.tiny(0), "full", SOURCES[:2], REFERENCES[:2], config=SERIAL)
    for s in sim.stats:
        assert s.delays, "full sentence wrote nothing: the test would pass vacuously"
        assert set(s.delays) == {s.source_length}


def test_batching_does_not_change_results(engine: Engine) -> None:
    one = simulate(engine, "wait-k:k=2", SOURCES, REFERENCES, config=SERIAL)
    all_ = simulate(engine, "wait-k:k=2", SOURCES, REFERENCES, config=RunConfig(batch_size=3))
    assert [(s.prediction, s.delays) for s in one.stats] == [
        (s.prediction, s.delays) for s in all_.stats
    ]


LINES = [
    "Ich habe heute ein Buch gelesen",
    "Der Hund läuft schnell über die Straße",
    "Wir sehen uns morgen",
    "Das Haus ist groß und alt",
    "Sie trinkt Kaffee",
]


@pytest.mark.parametrize(
    "policy", ["wait-k:k=2", "confidence:threshold=0.3", "alignatt:f=1", "full"]
)
def test_continuous_batching_equals_one_line_at_a_time(policy: str) -> None:
    """With a real (tiny, trained) model: 5 lines through 2 slots — lines of different lengths
    finish at different times and their slots are refilled — give each line exactly what it
    gets alone."""
    engine = Engine.tiny(seed=0)
    refs = ["x"] * len(LINES)
    alone = simulate(engine, policy, LINES, refs, config=SERIAL).stats
    pooled = simulate(engine, policy, LINES, refs, config=RunConfig(batch_size=2)).stats
    assert [s.index for s in pooled] == list(range(len(LINES)))
    assert any(s.prediction for s in alone)
    assert [(s.prediction, s.delays) for s in pooled] == [(s.prediction, s.delays) for s in alone]


@pytest.mark.parametrize("policy", ["wait-k:k=2", "full"])
def test_jobs_give_what_one_process_gives(policy: str) -> None:
    """Lines spread over 2 forked processes: the same outputs, delays and order as one process,
    progress for every line, and the workers' compute time is counted."""
    engine = Engine.tiny(seed=0)
    refs = ["x"] * len(LINES)
    alone = simulate(engine, policy, LINES, refs, config=SERIAL)
    done: list[int] = []
    forked = simulate(engine, policy, LINES, refs, config=RunConfig(jobs=2), progress=done.append)
    assert [s.index for s in forked.stats] == list(range(len(LINES)))
    assert [(s.prediction, s.delays, s.source) for s in forked.stats] == [
        (s.prediction, s.delays, s.source) for s in alone.stats
    ]
    assert sum(done) == len(LINES)
    assert forked.compute_ms > 0
    # each job scored its sentences; their statistics add up to the corpus scores
    assert all(s.quality is not None for s in forked.stats)
    preds = [s.prediction for s in alone.stats]
    stats = [s.quality for s in forked.stats if s.quality is not None]
    assert quality_from_statistics(stats) == corpus_quality(preds, refs)


# a parent whose OpenMP pool has threads (a big product on 2 threads), then jobs that each run
# a parallel op: before, the first one waited for the parent's pool threads forever
_FORKED_AFTER_THREADS = """
import torch
from simulmt.eval import runner
from simulmt.engine import Engine
torch.set_num_threads(2)
a = torch.randn(1024, 1024)
(a @ a).sum()
pool = runner._run_pool
def run_pool(*args, **kwargs):
    assert torch.get_num_threads() == 1, torch.get_num_threads()
    (a @ a).sum()
    return pool(*args, **kwargs)
runner._run_pool = run_pool
sim = runner.simulate(Engine.tiny(seed=0), "wait-k:k=2", ["a b c", "d e f"], ["x", "y"],
                      config=runner.RunConfig(jobs=2))
print(len(sim.stats))
"""


def test_jobs_run_one_thread_each_after_a_multithreaded_parent() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _FORKED_AFTER_THREADS], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["2"]


def test_eval_refuses_threads_with_jobs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before the model load, with what works instead."""
    from simulmt.cli import main

    src = tmp_path / "s.de"
    src.write_text("a b\n", encoding="utf-8")
    argv = ["eval", "--source", str(src), "--reference", str(src), "--jobs", "2", "--threads", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "simulmt eval: --threads 2 with --jobs 2: each job runs one torch thread" in err
    assert "--jobs 1 --threads N" in err


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_line_a_session_refuses_fails_the_run_before_any_model_work(jobs: int) -> None:
    """Before: the line failed inside its job, after every earlier batch had been computed (a
    distillation pass lost 8 minutes to one URL); now every line is checked up front."""
    engine = Engine.tiny(seed=0)
    garbage = "Ich " + "x" * 101  # a "word" longer than a session takes
    lines = [LINES[0], LINES[1], garbage]
    with pytest.raises(ValueError, match=r"source line 3: a word of 101 characters \('xxx"):
        simulate(engine, "wait-k:k=2", lines, ["x"] * 3, config=RunConfig(jobs=jobs))
    assert engine.compute_ms == 0


def test_a_failing_job_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Engine.tiny(seed=0)

    def feed_fails_on_gift(self: Session, text: str) -> None:  # a failure only the job sees
        if text == "Gift":
            raise InputError("no Gift here")
        feed(self, text)

    feed = Session.feed
    monkeypatch.setattr(Session, "feed", feed_fails_on_gift)
    lines = [LINES[0], "Das Gift", LINES[1]]
    with pytest.raises(RuntimeError, match="job 1 failed: InputError: no Gift here"):
        simulate(engine, "wait-k:k=2", lines, ["x"] * 3, config=RunConfig(jobs=2))


def test_a_line_over_the_models_positions_is_cut_not_fatal() -> None:
    """Before: a ValueError from the encoder; now the session cuts the sentence by tokens and
    the line is scored as one (its sentences' outputs joined, delays over all its words)."""
    engine = Engine.tiny(seed=0)
    too_long = " ".join(["Donaudampfschifffahrtsgesellschaft"] * 119)  # > 512 tokens
    sim = simulate(engine, "wait-k:k=2", [LINES[0], too_long], ["x", "y"], config=SERIAL)
    long_line = sim.stats[1]
    assert long_line.source_length == 119 and long_line.prediction
    assert list(long_line.delays) == sorted(long_line.delays) and max(long_line.delays) <= 119


def test_bfloat16_engine_runs_in_bfloat16(files: Path) -> None:
    engine = Engine.load(files / "model", dtype="bfloat16")
    assert engine.model.dtype is torch.bfloat16
    sim = simulate(engine, "wait-k:k=2", SOURCES, REFERENCES, config=RunConfig(batch_size=3))
    fp32 = simulate(Engine.load(files / "model"), "wait-k:k=2", SOURCES, REFERENCES)
    assert [s.prediction for s in sim.stats] == [s.prediction for s in fp32.stats]
    with pytest.raises(
        ValueError, match="unknown dtype 'int4': accepted are auto, float32, bfloat16, int8"
    ):
        Engine.load(files / "model", dtype="int4")


def test_int8_engine_quantizes_every_linear_layer(files: Path) -> None:
    """int8: the weights of all linear layers (projections, FFN, vocabulary) are int8, the
    caches stay float32, and the tiny model's outputs match float32's on these lines."""
    fp32_engine = Engine.load(files / "model")
    engine = Engine.load(files / "model", dtype="int8")
    assert engine.model.dtype is torch.float32  # activations and caches
    assert engine.info.parameters == fp32_engine.info.parameters  # counted before quantizing
    linears = [m for m in engine.model.modules() if isinstance(m, torch.nn.Linear)]
    # the kernel (simulmt.model.int8.default_kernel): fbgemm where torch has it, else _int_mm
    quantized = [
        m for m in engine.model.modules() if isinstance(m, (Int8Linear, FbgemmInt8Linear))
    ]
    assert not linears and quantized and engine.precision == "int8"
    assert all(m.weight.dtype is torch.int8 for m in quantized if isinstance(m, Int8Linear))
    sim = simulate(engine, "wait-k:k=2", SOURCES, REFERENCES, config=RunConfig(batch_size=3))
    fp32 = simulate(fp32_engine, "wait-k:k=2", SOURCES, REFERENCES)
    assert [s.prediction for s in sim.stats] == [s.prediction for s in fp32.stats]


def test_retranslation_records_displays(engine: Engine) -> None:
    sim = simulate(engine, "local-agreement", SOURCES[:1], REFERENCES[:1], config=SERIAL)
    (s,) = sim.stats
    assert s.displays is not None and len(s.displays) >= 1
    assert s.displays[-1] == s.prediction  # the last display is the final output


def test_bad_input_is_explained(engine: Engine) -> None:
    with pytest.raises(ValueError, match="source line 2 is empty"):
        simulate(engine, "wait-k:k=1", ["a b", " "], ["x", "y"])
    with pytest.raises(ValueError, match="2 source lines but 1 reference"):
        simulate(engine, "wait-k:k=1", ["a b", "c"], ["x"])
    with pytest.raises(ValueError, match="batch_size"):
        RunConfig(batch_size=0)
    with pytest.raises(ValueError, match="jobs must be >= 1, got 0"):
        RunConfig(jobs=0)
    with pytest.raises(ValueError, match="coverage penalty weight must be >= 0"):
        RunConfig(beta=-0.1)
    with pytest.raises(ValueError, match="speculate must be >= 1"):
        RunConfig(speculate=0)


def test_search_options_reach_the_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    """--scoring/--alpha/--coverage (RunConfig) become the SearchOptions of every simulated
    session."""
    from simulmt.eval import runner

    from simulmt.search.options import Scoring, SearchOptions

    seen: list[SearchOptions] = []
    real = runner.Session

    def spy(*args: object, **kw: object) -> object:
        options = kw["options"]
        assert isinstance(options, SearchOptions)
        seen.append(options)
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "Session", spy)
    config = RunConfig(beam=3, scoring=Scoring.LENGTH_NORM, alpha=1.4, beta=0.3, speculate=2,
                       batch_size=2)  # fmt: skip
    simulate(Engine.tiny(seed=0), "full", LINES[:2], ["x", "y"], config=config)
    assert seen and all(
        (o.beam, o.scoring, o.alpha, o.beta, o.speculate) == (3, Scoring.LENGTH_NORM, 1.4, 0.3, 2)
        for o in seen
    )


def _simulmt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "simulmt.cli", *args],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_eval_cli_json_output_and_plot(files: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _simulmt(
        "eval", "--policy", "full", "--sweep", "wait-k:k=1,3", "--source", str(files / "src.txt"),
        "--reference", str(files / "ref.txt"), "--model", str(files / "model"),
        "--output", str(out), "--json", "--threads", "1", "--no-progress", "--batch-size", "1",
        "--jobs", "2", "--alpha", "1.4", "--coverage", "0.2", "--speculate", "2",
        "--loop-guard", "0",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert all((r["scoring"], r["alpha"], r["beta"], r["speculate"]) == ("gnmt", 1.4, 0.2, 2)
               for r in rows)  # fmt: skip
    assert [r["policy"] for r in rows] == ["full", "wait-k:k=1", "wait-k:k=3"]
    for r in rows:
        assert {"policy", "bleu", "chrf", "al", "laal", "dal", "ap", "ca_al", "sentences",
                "empty", "bleu_signature"} <= set(r)  # fmt: skip
        assert r["sentences"] == 3 and r["bleu_signature"].startswith("nrefs:1|")
    assert rows[0]["al"] > rows[1]["al"]  # full sentence lags more than wait-1
    stats = read_instances(out / "wait-k_k=1" / "instances.log")
    assert [s.source for s in stats] == SOURCES
    for r in rows:  # the share of outputs that loop, as eval/loops.py counts them
        outputs = [s.prediction for s in read_instances(out / policy_dir_name(r["policy"]) /
                                                        "instances.log")]
        assert r["loops"] == loop_rate(outputs)
    assert any(r["loops"] > 0 for r in rows)  # the random tiny model's junk does loop
    assert {p.name for p in out.iterdir()} == {"full", "wait-k_k=1", "wait-k_k=3"}
    for r in rows:  # run.json: what produced the folder, options as parsed and as resolved
        record = json.loads((out / policy_dir_name(r["policy"]) / "run.json").read_text())
        assert record["policy"] == r["policy"]
        assert record["model"]["folder"] == str((files / "model").resolve())
        assert record["precision"]["asked"] == "auto"
        assert record["precision"]["ran"] in ("float32", "bfloat16", "int8")
        assert record["test_set"]["items"] == 3
        digest = hashlib.sha256((files / "src.txt").read_bytes()).hexdigest()
        assert record["test_set"]["source_sha256"] == digest
        assert record["run_config"]["loop_guard"] == 0 and record["run_config"]["jobs"] == 2
        assert record["run_config"]["scoring"] == "gnmt" and record["run_config"]["alpha"] == 1.4
        assert record["arguments"]["speculate"] == 2 and record["arguments"]["threads"] == 1
        assert record["software"]["torch"] and record["machine"]["cores"]
    png = tmp_path / "curve.png"
    proc = _simulmt("plot", str(out), "-o", str(png))
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_eval_cli_errors(files: Path) -> None:
    common = ["--source", str(files / "src.txt"), "--reference", str(files / "ref.txt")]
    proc = _simulmt("eval", "--policy", "no-such-policy", *common)
    assert proc.returncode == 2 and "no-such-policy" in proc.stderr
    proc = _simulmt("eval", *common)
    assert proc.returncode == 2 and "--policy" in proc.stderr
    proc = _simulmt("eval", "--policy", "full", "--source", "missing.txt",
                    "--reference", str(files / "ref.txt"))  # fmt: skip
    assert proc.returncode == 2 and "missing.txt" in proc.stderr
    taken = files / "src.txt"  # an --output that cannot be written fails before any model work
    proc = _simulmt("eval", "--policy", "full", *common, "--output", str(taken))
    assert proc.returncode == 2 and f"--output {taken} is a file" in proc.stderr
    proc = _simulmt("eval", "--policy", "full", *common, "--output", str(taken / "sub"))
    assert proc.returncode == 2 and "cannot write there (Not a directory)" in proc.stderr
    assert "loaded" not in proc.stderr
    short = files / "short_ref.txt"  # one line short: said before the model loads
    short.write_text("\n".join(files.joinpath("ref.txt").read_text().splitlines()[:-1]) + "\n")
    proc = _simulmt("eval", "--policy", "full", "--source", str(files / "src.txt"),
                    "--reference", str(short))  # fmt: skip
    assert proc.returncode == 2 and f"--reference {short} has" in proc.stderr
    assert "one reference line per source line" in proc.stderr
    assert "loaded" not in proc.stderr


@pytest.mark.parametrize("policy", ["wait-k:k=2", "alignatt:f=1"])
def test_simuleval_cli_with_adapter_agrees(
    files: Path, tmp_path: Path, engine: Engine, policy: str
) -> None:
    """The real `simuleval` CLI drives our agent; its delays and output equal ours."""
    exe = Path(sys.executable).parent / "simuleval"
    out = tmp_path / "se"
    proc = subprocess.run(
        [str(exe), "--agent-class", "simulmt.eval.simuleval_agent.SimulmtAgent",
         "--source", str(files / "src.txt"), "--target", str(files / "ref.txt"),
         "--policy", policy, "--model", str(files / "model"), "--output", str(out),
         "--latency-metrics", "AL", "LAAL", "AP", "DAL", "--no-progress-bar"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    theirs = read_instances(out / "instances.log")
    # `simulmt eval`'s defaults: the agent takes the same search arguments with the same
    # defaults, SearchOptions' (the loop guard on)
    parser = argparse.ArgumentParser()
    add_search_arguments(parser)
    config = RunConfig(batch_size=1, **search_settings(parser.parse_args([])))
    assert config.loop_guard == SearchOptions.loop_guard > 0
    ours = simulate(engine, policy, SOURCES, REFERENCES, config=config).stats
    assert [(s.prediction, s.delays) for s in theirs] == [(s.prediction, s.delays) for s in ours]


def _never_ending_detector(engine: Engine) -> None:
    from simulmt.segment.model import SegmenterConfig, SegmenterNet

    torch.manual_seed(0)
    net = SegmenterNet(SegmenterConfig(buckets=256, dim=8, hidden=8, max_lookahead=4))
    net.thresholds.fill_(0.999)  # P(boundary) of an untrained net is near 0.5: never
    engine.segmenter = net.eval()


def test_segmentation_reaches_the_sessions() -> None:
    """RunConfig.segmentation decides where a line's sentences end, and auto's lookahead
    shows in the delays (a word waits for the decision on the word before it)."""
    from simulmt.input.sentences import Segmentation

    engine = scripted_engine()
    line = SOURCES[2:]  # "a b . c d e"

    def delays(**kw: object) -> tuple[int, ...]:
        config = RunConfig(batch_size=1, **kw)  # type: ignore[arg-type]
        return simulate(engine, "wait-k:k=2", line, REFERENCES[2:], config=config).stats[0].delays

    assert delays(segmentation=Segmentation.PUNCTUATION) == (2, 5)
    assert delays(segmentation=Segmentation.CLIENT) == (2, 3, 4, 5)  # one 6-word sentence
    with pytest.raises(ValueError, match="no segmenter.pt"):
        delays(segmentation=Segmentation.AUTO)
    _never_ending_detector(engine)
    assert delays(segmentation=Segmentation.AUTO, segment_lookahead=0) == (2, 3, 4, 5)
    # lookahead 2: each word is readable one word later, so every write comes one word later
    assert delays(segmentation=Segmentation.AUTO, segment_lookahead=2) == (3, 4, 5, 6)
    with pytest.raises(ValueError, match="lookahead must be in 0..4"):
        delays(segmentation=Segmentation.AUTO, segment_lookahead=5)


def test_eval_cli_segmentation_options(files: Path, tmp_path: Path) -> None:
    common = ["eval", "--policy", "wait-k:k=2", "--source", str(files / "src.txt"),
              "--reference", str(files / "ref.txt"), "--model", str(files / "model"),
              "--threads", "1", "--no-progress", "--json"]  # fmt: skip
    proc = _simulmt(*common, "--segmentation", "client", "--output", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    stats = read_instances(tmp_path / "o" / "wait-k_k=2" / "instances.log")
    assert stats[2].delays == (2, 3, 4, 5)  # "a b . c d e" is one sentence
    proc = _simulmt(*common, "--segmentation", "auto", "--segment-lookahead", "1")
    assert proc.returncode == 2 and "no segmenter.pt" in proc.stderr
    proc = _simulmt(*common, "--segmentation", "auto", "--segment-lookahead", "-1")
    assert proc.returncode == 2 and "segment_lookahead must be >= 0" in proc.stderr
    # the earlier spelling still works for one release, and says what replaces it
    proc = _simulmt(*common, "--segmentation", "auto", "--lookahead", "-1")
    assert proc.returncode == 2 and "segment_lookahead must be >= 0" in proc.stderr
    assert "--lookahead is deprecated" in proc.stderr and "use --segment-lookahead" in proc.stderr


def test_recognizer_input_reaches_the_sessions_and_its_lookahead_shows_in_the_delays(
    files: Path,
) -> None:
    """RunConfig.input_kind recognizer restores each word once `restore_lookahead` more have
    arrived, so every write comes that many words later (capped by the line's end)."""
    from simulmt.input.kinds import InputKind
    from simulmt.input.sentences import Segmentation
    from simulmt.restore import RestorerConfig, RestorerNet

    engine = scripted_engine()
    line = SOURCES[2:]  # "a b . c d e"

    def delays(**kw: object) -> tuple[int, ...]:
        config = RunConfig(batch_size=1, segmentation=Segmentation.CLIENT, **kw)  # type: ignore[arg-type]
        return simulate(engine, "wait-k:k=2", line, REFERENCES[2:], config=config).stats[0].delays

    recognizer = {"input_kind": InputKind.RECOGNIZER}
    with pytest.raises(ValueError, match="no restorer.pt"):
        delays(**recognizer)
    engine.restorer = RestorerNet(RestorerConfig(buckets=64, dim=4, hidden=4, head=4)).eval()
    assert delays() == (2, 3, 4, 5)
    assert delays(**recognizer) == (2, 3, 4, 5)  # wait-k's default: no lookahead, no delay
    assert delays(**recognizer, restore_lookahead=0) == (2, 3, 4, 5)
    assert delays(**recognizer, restore_lookahead=1) == (3, 4, 5, 6)
    assert delays(**recognizer, restore_lookahead=2) == (4, 5, 6, 6)
    with pytest.raises(ValueError, match="restore lookahead must be in 0..2"):
        delays(**recognizer, restore_lookahead=3)


def test_eval_cli_input_options(files: Path) -> None:
    common = ["eval", "--policy", "wait-k:k=2", "--source", str(files / "src.txt"),
              "--reference", str(files / "ref.txt"), "--model", str(files / "model"),
              "--threads", "1", "--no-progress", "--json"]  # fmt: skip
    proc = _simulmt(*common, "--input-kind", "recognizer")
    assert proc.returncode == 2 and "needs a case and comma restorer" in proc.stderr
    # auto: the recognizer view is read as it is when the model has no restorer
    proc = _simulmt(*common, "--source-view", "recognizer")
    assert proc.returncode == 0 and "no restorer.pt" in proc.stderr, proc.stderr
    # the earlier spellings, one release more: the same run, with a warning
    old = _simulmt(*common, "--source-style", "asr", "--input", "auto")
    assert old.returncode == 0, old.stderr
    keys = ("bleu", "chrf", "al", "laal", "yaal", "dal", "ap", "loops", "splits", "sentences")
    scores = [{k: json.loads(p.stdout)[k] for k in keys} for p in (old, proc)]
    assert scores[0] == scores[1]  # (computation-aware latency is wall time: it varies)
    assert "--source-style is deprecated" in old.stderr and "--input is deprecated" in old.stderr
    proc = _simulmt(*common, "--input-kind", "recognizer", "--restore-lookahead", "-1")
    assert proc.returncode == 2 and "restore_lookahead must be >= 0" in proc.stderr


@dataclass(frozen=True)
class _NotebookLag(BasePolicy):
    """A policy defined where it is used (a notebook), never registered."""

    name: ClassVar[str] = "notebook-lag"
    lag: int = 2

    def decide(self, obs: Observation) -> Action:
        if obs.source_finished or obs.src_read >= obs.tgt_written + self.lag:
            return Action.WRITE
        return Action.READ


def test_evaluate_scores_a_policy_object_as_eval_scores_its_spec(
    files: Path, engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    from simulmt.eval.evaluate import evaluate
    from simulmt.policies.registry import available
    from simulmt.policies.schedules import WaitK

    from simulmt.cli import main

    by_spec = evaluate(engine, "wait-k:k=2", SOURCES, REFERENCES, config=UNGUARDED)
    by_object = evaluate(engine, WaitK(k=2), SOURCES, REFERENCES, config=UNGUARDED)
    assert [(s.prediction, s.delays) for s in by_object.stats] == [
        (s.prediction, s.delays) for s in by_spec.stats]
    assert by_object.result.policy == WaitK(k=2).spec()
    assert by_object.result.quality == by_spec.result.quality
    lat = [(r.al, r.laal, r.yaal, r.dal, r.ap) for r in (by_object.result.latency,
                                                         by_spec.result.latency)]
    assert lat[0] == lat[1]  # the computation-aware ones time this run
    # an unregistered class, in forked jobs too: its argument moves the latency
    runs = [evaluate(engine, _NotebookLag(lag=lag), SOURCES, REFERENCES,
                     config=RunConfig(loop_guard=0, jobs=jobs))
            for lag, jobs in ((1, 1), (3, 2))]  # fmt: skip
    assert runs[0].result.latency.al < runs[1].result.latency.al
    assert runs[1].result.policy == "notebook-lag:lag=3" and "notebook-lag" not in available()
    # `simulmt eval` prints the row `evaluate` computes
    assert main(["eval", "--model", str(files / "model"), "--source", str(files / "src.txt"),
                 "--reference", str(files / "ref.txt"), "--policy", "wait-k:k=2",
                 "--loop-guard", "0", "--dtype", "float32", "--json", "--no-progress"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["bleu"] == by_spec.result.quality.bleu and row["al"] == by_spec.result.latency.al
