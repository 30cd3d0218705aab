"""The GPU recipe (scripts/gpu-train.sh, simulmt.train.recipe) end to end on CPU with a tiny
config and a tiny packed corpus: teacher run -> distilled targets -> student run -> weights in
pieces -> a model folder that loads, and a second student run that continues from the pieces."""

from __future__ import annotations

import json
import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulmt.data.pack import PackConfig, pack_corpus
from simulmt.data.tokenizer import train_tokenizer
from simulmt.engine import Engine
from simulmt.model.checkpoint import load_checkpoint
from simulmt.train import recipe
from simulmt.train.pieces import PiecesError, find_index, join_pieces, split_file
from simulmt.train.tiny import tiny_pairs as _tiny_pairs

ROOT = Path(__file__).resolve().parent.parent
TINY = """
wait_k = [1, 3, 0]
max_tokens = 300
warmup = 2
max_steps = 4
eval_every = 100000
save_every = 100000
log_every = 2
threads = 1
bf16 = false
device = "cpu"
dev_sentences = 0
[model]
vocab_size = 200
d_model = 32
n_heads = 4
enc_layers = 1
dec_layers = 1
d_ff = 64
[upsample]
europarl = 2
"""


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("recipe")
    corpus = root / "corpus"
    corpus.mkdir()
    pairs = _tiny_pairs()
    for split, rows in (("train", pairs), ("dev", pairs[:6]), ("test", pairs[6:10])):
        (corpus / f"{split}.de").write_text("".join(s + "\n" for s, _ in rows), encoding="utf-8")
        (corpus / f"{split}.en").write_text("".join(t + "\n" for _, t in rows), encoding="utf-8")
        names = "".join(("europarl" if i % 4 == 0 else "tatoeba") + "\n" for i in range(len(rows)))
        (corpus / f"{split}.source").write_text(names, encoding="utf-8")
    train_tokenizer([x for p in pairs for x in p], corpus, vocab_size=200, seed=0)
    news = root / "news"
    news.with_suffix(".de").write_text("".join(s + "\n" for s, _ in pairs[10:16]), encoding="utf-8")
    news.with_suffix(".en").write_text("".join(t + "\n" for _, t in pairs[10:16]), encoding="utf-8")
    pack_corpus(PackConfig(corpus=corpus, out=root / "pack", extra=(("newstest2013", news),)))
    # what a student run carries: no references (the teacher's translations replace them), no test
    pack_corpus(PackConfig(corpus=corpus, out=root / "pack-student",
                           extra=(("newstest2013", news),),
                           skip=("train.en", "test.de", "test.en", "test.source")))
    (root / "tiny.toml").write_text(TINY)
    return root / "pack"


def test_teacher_then_student_then_continue(pack: Path, tmp_path: Path) -> None:
    tiny = pack.parent / "tiny.toml"
    out1 = tmp_path / "out1"
    env = {**os.environ, "OUT": str(out1), "PYTHON": sys.executable, "PACK": str(pack),
           "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([str(ROOT / "scripts" / "gpu-train.sh"), "teacher", "--config",
                           str(tiny), "--work", str(tmp_path / "w1"), "--minutes", "3"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    teacher = json.loads((out1 / "teacher.json").read_text())
    assert teacher["steps"] == 4 and teacher["eval"]["set"] == "newstest2013"
    assert teacher["eval"]["sentences"] == 6
    assert teacher["eval"]["full"]["signature"].startswith("nrefs:1|")
    assert set(teacher["seconds"]) == {"unpack", "tokenize+build", "train", "eval", "distill"}
    assert teacher["throughput"]["tokens_per_s"] > 0 and "mfu_vs_989_tflops" not in teacher[
        "throughput"]  # no GPU, no GPU peak
    lines = lzma.decompress((out1 / "train.distill.en.xz").read_bytes()).decode().split("\n")
    assert len(lines) == len(_tiny_pairs()) + 1 and teacher["distilled"] == len(_tiny_pairs())
    assert "stage teacher on cpu" in (out1 / "recipe.log").read_text()

    out2 = tmp_path / "out2"
    common = ["--pack", str(pack), "--config", str(tiny), "--minutes", "3"]
    assert recipe.main(["student", *common, "--out", str(out2), "--work", str(tmp_path / "w2"),
                        "--distill", str(out1 / "train.distill.en.xz")]) == 0
    student = json.loads((out2 / "student.json").read_text())
    assert student["config"]["distill"].endswith("train.distill.en")
    assert student["pieces"] == ["model.pt.000", "model.pt.pieces.json"]
    model_dir = tmp_path / "model"
    assert recipe.main(["join", str(out2), "--out", str(model_dir)]) == 0
    engine = Engine.load(model_dir)
    assert engine.info.name == "simulmt-de-en-gpu"

    out3, work3 = tmp_path / "out3", tmp_path / "w3"
    lean = ["--pack", str(pack.parent / "pack-student"), *common[2:]]
    assert recipe.main(["student", *lean, "--out", str(out3), "--work", str(work3),
                        "--init-from", str(out2),
                        "--distill", str(out1 / "train.distill.en.xz")]) == 0
    run = load_checkpoint(work3 / "student" / "last.pt")
    assert run["warm_start"] == {"from": "simulmt-de-en-gpu", "steps": 4}
    assert run["train_config"]["distill"] is None  # the targets are the teacher's train.en
    assert (work3 / "corpus" / "train.en").read_text() == "\n".join(lines)
    assert not (work3 / "corpus" / "test.de").exists()


def test_pieces_join_back_exactly_and_refuse_a_damaged_set(tmp_path: Path) -> None:
    data = os.urandom(10_000)
    (tmp_path / "model.pt").write_bytes(data)
    written = split_file(tmp_path / "model.pt", tmp_path / "p", piece_bytes=4096)
    assert [p.name for p in written] == ["model.pt.000", "model.pt.001", "model.pt.002",
                                         "model.pt.pieces.json"]
    assert all(p.stat().st_size <= 4096 for p in written[:-1])
    assert join_pieces(find_index(tmp_path / "p"), tmp_path / "j").read_bytes() == data
    (tmp_path / "p" / "model.pt.001").write_bytes(b"x" * 4096)
    with pytest.raises(PiecesError, match="do not join"):
        join_pieces(find_index(tmp_path / "p"), tmp_path / "j2")
    (tmp_path / "p" / "model.pt.002").unlink()
    with pytest.raises(PiecesError, match="missing"):
        join_pieces(find_index(tmp_path / "p"), tmp_path / "j3")


def test_training_needs_only_what_the_gpu_machine_has() -> None:
    """The recipe, the trainer and the pack run where only torch, sentencepiece, sacrebleu and
    numpy are installed: the server's, the evaluator's and the progress bar's packages are
    blocked from importing in a fresh interpreter."""
    code = (
        "import sys\n"
        "for m in ('websockets', 'matplotlib', 'mweralign', 'tqdm', 'prometheus_client'):\n"
        "    sys.modules[m] = None\n"
        "import simulmt.train.recipe, simulmt.train.loop, simulmt.train.__main__\n"
        "import simulmt.data.pack, simulmt.train.export\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_distilled_targets_cut_short_by_the_time_limit_still_read(tmp_path: Path) -> None:
    """The teacher writes one xz stream per chunk as it goes: a run killed mid-write returns
    whole chunks and whole lines of the cut one, and the student pads the rest (references)."""
    chunks = [b"one\ntwo\n", b"three\nfour\n", b"five\nsix\n"]
    streams = [lzma.compress(c) for c in chunks]
    whole = tmp_path / "whole.xz"
    whole.write_bytes(b"".join(streams))
    assert recipe.read_distill(whole, 6).split("\n")[:-1] == [
        "one", "two", "three", "four", "five", "six"]
    cut = tmp_path / "cut.xz"
    cut.write_bytes(streams[0] + streams[1] + streams[2][: len(streams[2]) // 2])
    lines = recipe.read_distill(cut, 6).split("\n")[:-1]
    assert lines[:4] == ["one", "two", "three", "four"] and len(lines) == 6
    assert all(x in ("", "five", "six") for x in lines[4:])


class _CutOff(Exception):
    """Stands for the run's time limit ending the process."""


def test_a_student_cut_off_in_its_evaluation_has_returned_its_weights(
    pack: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The weights are written before the dev-set evaluation: a GPU run killed by its time limit
    while evaluating still brings the trained model back."""

    def cut_off(*args: object, **kwargs: object) -> None:
        raise _CutOff

    monkeypatch.setattr(recipe, "evaluate", cut_off)
    out = tmp_path / "out"
    with pytest.raises(_CutOff):
        recipe.main(["student", "--pack", str(pack), "--config", str(pack.parent / "tiny.toml"),
                     "--minutes", "3", "--out", str(out), "--work", str(tmp_path / "w")])
    assert json.loads((out / "student.json").read_text())["pieces"] == [
        "model.pt.000", "model.pt.pieces.json"]
    assert recipe.main(["join", str(out), "--out", str(tmp_path / "model")]) == 0
    assert Engine.load(tmp_path / "model").info.name == "simulmt-de-en-gpu"
