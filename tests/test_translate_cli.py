"""`simulmt translate` end to end (subprocess), including a third-party policy by entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests._model_helpers import save_tiny_folder


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_folder(tmp_path_factory.mktemp("model"))


def translate(model_dir: Path, stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "simulmt.cli", "translate", "--model", str(model_dir), *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=120)


def test_jsonl_updates_and_finals(model_dir: Path) -> None:
    proc = translate(
        model_dir,
        "Ich habe heute ein Buch gelesen .\nWo ist der Bahnhof ?\n",
        "--policy",
        "wait-k:k=2",
        "--jsonl",
    )
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines()]
    finals = [r for r in records if r["final"]]
    assert [f["source"] for f in finals] == [
        "Ich habe heute ein Buch gelesen .",
        "Wo ist der Bahnhof ?",
    ]
    for f in finals:
        deltas = "".join(
            r["committed_delta"] for r in records if r["sentence_id"] == f["sentence_id"]
        )
        assert f["text"] == deltas.strip()
    assert all(
        set(r) >= {"committed_delta", "tentative", "delays", "emitted_ms", "final"} for r in records
    )


def test_third_party_policy_through_the_cli(model_dir: Path) -> None:
    proc = translate(
        model_dir,
        "Ich habe heute ein Buch gelesen .\n",
        "--policy",
        "wait-k-stride:k=2,s=2",
        "--jsonl",
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1])["final"]


def test_bad_input_is_reported_and_nothing_lost(model_dir: Path) -> None:
    text = "Ich habe heute .\n\n" + "x" * 500 + "\nWo ist der Bahnhof ?\n"
    proc = translate(model_dir, text, "--policy", "wait-k:k=1", "--jsonl")
    assert proc.returncode == 0
    assert "line 2: empty line skipped" in proc.stderr
    assert "line 3:" in proc.stderr and "longer than the limit" in proc.stderr
    finals = [json.loads(x) for x in proc.stdout.splitlines() if json.loads(x)["final"]]
    assert [f["source"] for f in finals] == ["Ich habe heute .", "Wo ist der Bahnhof ?"]


@pytest.mark.parametrize("via", ["--source", "stdin"])
def test_bytes_that_are_not_utf8_are_dropped_with_a_note(
    model_dir: Path, tmp_path: Path, via: str
) -> None:
    """A byte that is not UTF-8 crashed `translate` (a traceback from a file, sentencepiece's
    RuntimeError from stdin) and lost the rest; now it is dropped, the line named."""
    data = "Ich habe heute .\nWo ist \xff der Bahnhof ?\nDas \x07 Ende .\n".encode("latin-1")
    cmd = [sys.executable, "-m", "simulmt.cli", "translate", "--model", str(model_dir),
           "--policy", "wait-k:k=1", "--jsonl"]  # fmt: skip
    if via == "--source":
        (tmp_path / "in.de").write_bytes(data)
        proc = subprocess.run([*cmd, "--source", str(tmp_path / "in.de")], capture_output=True,
                              timeout=120)  # fmt: skip
    else:
        proc = subprocess.run(cmd, input=data, capture_output=True, timeout=120)
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert "line 2: dropped 1 lone surrogate (U+DCFF)" in err
    assert "line 3: dropped 1 control character (U+0007" in err
    lines = proc.stdout.decode().splitlines()
    finals = [json.loads(x)["source"] for x in lines if json.loads(x)["final"]]
    assert finals == ["Ich habe heute .", "Wo ist der Bahnhof ?", "Das Ende ."]


@pytest.mark.parametrize("rate", ["-1", "nan"])
def test_a_rate_below_zero_is_refused(model_dir: Path, rate: str) -> None:
    proc = translate(model_dir, "Hallo Welt .\n", "--rate", rate)
    assert proc.returncode == 2
    assert "--rate must be >= 0 words per second" in proc.stderr and proc.stdout == ""


def test_unknown_policy_lists_the_available_ones(model_dir: Path) -> None:
    proc = translate(model_dir, "Hallo .\n", "--policy", "wait-q:k=3")
    assert proc.returncode == 2
    assert "wait-k" in proc.stderr and "full" in proc.stderr


def test_plain_output_prints_one_line_per_sentence(model_dir: Path) -> None:
    proc = translate(model_dir, "Ich habe heute .\nWo ist der Bahnhof ?\n", "--policy", "full")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 2


@pytest.mark.parametrize(("unit", "first_delay"), [("word", 1), ("token", 2)])
def test_wait_1_first_word_delay(model_dir: Path, unit: str, first_delay: int) -> None:
    """#14's example: under wait-1 the first word is committed after one source word; with
    token writes it waits for the next word's first token, one READ (or more) later."""
    proc = translate(
        model_dir, "Ich habe heute ein Buch gelesen .\n", "--policy", "wait-k:k=1", "--jsonl",
        "--unit", unit,
    )
    assert proc.returncode == 0, proc.stderr
    delays = [d for line in proc.stdout.splitlines() for d in json.loads(line)["delays"]]
    assert delays[0] == first_delay if unit == "word" else delays[0] >= first_delay


def _finals(proc: subprocess.CompletedProcess[str]) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    return [r["source"] for r in map(json.loads, proc.stdout.splitlines()) if r["final"]]


TWO_LINES = "Ich habe heute . Der Hund\nläuft schnell\n"


def test_segmentation_punctuation_and_client(model_dir: Path) -> None:
    common = ("--policy", "wait-k:k=2", "--jsonl")
    assert _finals(translate(model_dir, TWO_LINES, *common)) == [
        "Ich habe heute .",
        "Der Hund",  # each line's end is a flush
        "läuft schnell",
    ]
    assert _finals(translate(model_dir, TWO_LINES, *common, "--segmentation", "client")) == [
        "Ich habe heute . Der Hund",
        "läuft schnell",
    ]


def test_segmentation_auto_needs_a_detector_and_ignores_line_breaks(
    model_dir: Path, tmp_path: Path
) -> None:
    common = ("--policy", "wait-k:k=2", "--jsonl", "--segmentation", "auto")
    proc = translate(model_dir, TWO_LINES, *common)
    assert proc.returncode == 2 and "no segmenter.pt" in proc.stderr
    import shutil

    import torch

    from simulmt.segment.model import SegmenterConfig, SegmenterNet, save_segmenter

    with_detector = tmp_path / "model"
    shutil.copytree(model_dir, with_detector)
    torch.manual_seed(0)
    net = SegmenterNet(SegmenterConfig(buckets=256, dim=8, hidden=8, max_lookahead=4))
    net.thresholds.fill_(0.999)  # it (almost) never ends a sentence
    save_segmenter(with_detector / "segmenter.pt", net, meta={})
    got = _finals(translate(with_detector, TWO_LINES, *common, "--segment-lookahead", "3"))
    assert got == ["Ich habe heute . Der Hund läuft schnell"]
    proc = translate(with_detector, TWO_LINES, *common, "--segment-lookahead", "5")
    assert proc.returncode == 2 and "lookahead must be in 0..4" in proc.stderr


def test_translate_searches_as_deep_as_eval_and_serve() -> None:
    """`translate --beam 5` once committed after one token while eval and serve look three
    ahead (worth 1.0-1.6 BLEU on newstest2015): every entry point must share one default."""
    import argparse

    from simulmt.eval import cli as eval_cli

    from simulmt.cli import translate as translate_cli
    from simulmt.search.options import SearchOptions

    parser = argparse.ArgumentParser()
    translate_cli.add_arguments(parser)
    eval_parser = argparse.ArgumentParser()
    eval_cli.add_arguments(eval_parser)
    eval_depth = eval_cli.run_config_from_args(
        eval_parser.parse_args(["--source", "x.de", "--reference", "x.en"])).speculate
    server_depth = SearchOptions(beam=5).speculate  # what server/connection.py builds
    assert parser.parse_args([]).speculate == eval_depth == server_depth > 1
    assert parser.parse_args(["--speculate", "2"]).speculate == 2
    assert parser.parse_args(["--lookahead", "2"]).speculate == 2  # the flag's earlier name


def test_recognizer_lines_are_restored_by_the_models_restorer(
    model_dir: Path, tmp_path: Path
) -> None:
    """`--input-kind recognizer`: the restorer.pt beside the model (here the shipped one) gives
    the words their case and commas back before the policy reads them; without one, a clear
    refusal."""
    import shutil

    from simulmt.engine import RESTORER_FILE, default_model_dir

    line = "die kanzlerin sagte gestern in berlin dass die usa zustimmen\n"
    common = ("--policy", "full", "--jsonl", "--input-kind", "recognizer")
    proc = translate(model_dir, line, *common)
    assert proc.returncode == 2 and "no restorer.pt" in proc.stderr
    with_restorer = tmp_path / "model"
    shutil.copytree(model_dir, with_restorer)
    shutil.copy(default_model_dir() / RESTORER_FILE, with_restorer / RESTORER_FILE)
    assert _finals(translate(with_restorer, line, *common)) == [
        "Die Kanzlerin sagte gestern in Berlin, dass die USA zustimmen"
    ]
    assert _finals(translate(with_restorer, line, "--policy", "full", "--jsonl")) == [line.strip()]
