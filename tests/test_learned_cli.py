"""`simulmt train-policy` end to end on the tiny model exported to a folder: train, resume,
errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from simulmt.policies import load_policy
from simulmt.policies import train_policy as tp
from simulmt.policies.learned_net import read_policy_file

from simulmt.cli import main
from simulmt.engine import Engine
from simulmt.model.checkpoint import save_checkpoint
from simulmt.train.tiny import tiny_pairs as _tiny_pairs

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(model folder, corpus folder) built from the tiny model and its toy corpus."""
    root = tmp_path_factory.mktemp("learned_cli")
    engine = Engine.tiny(0)
    save_checkpoint(root / "model" / "model.pt", {
        "model_config": engine.model.cfg.to_dict(), "model": engine.model.state_dict(),
        "tokenizer": engine.tokenizer.to_bytes(),
        "meta": {"name": "tiny", "src": "de", "tgt": "en"},
    })
    pairs = _tiny_pairs()
    corpus = root / "corpus"
    corpus.mkdir()
    for split, rows in (("train", pairs), ("dev", pairs[20:])):
        for side, lang in ((0, "de"), (1, "en")):
            (corpus / f"{split}.{lang}").write_text("".join(p[side] + "\n" for p in rows))
    return root / "model", corpus


def command(folders: tuple[Path, Path], out: Path, *extra: str) -> list[str]:
    model, corpus = folders
    return ["train-policy", "--model", str(model), "--data", str(corpus), "--out", str(out),
            "--pairs", "24", "--dev-pairs", "8", "--batch-size", "32", "--no-progress", *extra]


def test_train_policy_end_to_end(folders: tuple[Path, Path], tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "policy.pt"
    assert main(command(folders, out, "--epochs", "3")) == 0
    text = capsys.readouterr().out
    assert "oracle: " in text and "training states" in text
    assert "epoch 3/3: " in text and "dev accuracy" in text
    assert f"saved {out}" in text
    assert not tp.cache_path(out).exists()  # the oracle cache is removed when done
    data = torch.load(out, map_location="cpu", weights_only=True)  # plain tensors/primitives
    assert data["meta"]["model"] == "tiny" and len(data["meta"]["history"]) == 3
    policy = load_policy(f"learned:threshold=0.4,path={out}")
    assert policy.spec() == f"learned:threshold=0.4,k_min=1,k_max=0,lag_min=1,path={out}"

    # resume: three more epochs continue the same run (same oracle settings)
    assert main(command(folders, out, "--epochs", "6", "--resume")) == 0
    text = capsys.readouterr().out
    assert "resuming training after epoch 3" in text and "epoch 4/6" in text
    assert "epoch 3/6" not in text
    assert [h["epoch"] for h in read_policy_file(out)["meta"]["history"]] == [1, 2, 3, 4, 5, 6]


def test_oracle_generation_resumes_after_an_interruption(
        folders: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = tmp_path / "whole.pt"
    assert main(command(folders, whole, "--epochs", "1", "--keep-oracle")) == 0
    expected = torch.load(tp.cache_path(whole), weights_only=True)

    monkeypatch.setattr(tp, "CHUNK_PAIRS", 10)
    real = tp.generate_oracle
    calls = []

    def interrupted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the process dies during the second chunk
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tp, "generate_oracle", interrupted)
    out = tmp_path / "policy.pt"
    with pytest.raises(KeyboardInterrupt):
        main(command(folders, out, "--epochs", "1", "--keep-oracle"))
    assert torch.load(tp.cache_path(out), weights_only=True)["done"] == 10
    monkeypatch.setattr(tp, "generate_oracle", real)
    assert main(command(folders, out, "--epochs", "1", "--keep-oracle", "--resume")) == 0
    got = torch.load(tp.cache_path(out), weights_only=True)
    assert got["done"] == expected["done"] == 24
    for key in ("features", "labels", "pair", "src_read", "tgt_written"):
        torch.testing.assert_close(got["train"][key], expected["train"][key])


def test_resume_refuses_other_settings_and_corrupt_files(
        folders: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "policy.pt"
    assert main(command(folders, out, "--epochs", "1")) == 0
    assert main(command(folders, out, "--epochs", "2", "--r", "3", "--resume")) == 2
    assert "trained with other settings" in capsys.readouterr().err
    # the oracle's labels differ without the word-end look-ahead
    assert main(command(folders, out, "--epochs", "2", "--no-word-end", "--resume")) == 2
    assert "trained with other settings" in capsys.readouterr().err
    out.write_bytes(b"garbage")
    assert main(command(folders, out, "--epochs", "2", "--resume")) == 2
    assert "corrupt or truncated" in capsys.readouterr().err


@pytest.mark.parametrize(("change", "message"), [
    (("--data", "/nonexistent/corpus"), "does not exist"),
    (("--model", "/nonexistent/model"), "no model at /nonexistent/model"),
    (("--pairs", "0"), "--pairs must be >= 1"),
    (("--r", "0"), "oracle r must be >= 1"),
])
def test_bad_inputs(folders: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                    change: tuple[str, str], message: str) -> None:
    args = command(folders, tmp_path / "p.pt", "--epochs", "1")
    pos = args.index(change[0]) if change[0] in args else len(args)
    args = args[:pos] + list(change) + args[pos + 2:] if change[0] in args else args + list(change)
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_dagger_round_adds_the_policys_rollouts(folders: tuple[Path, Path], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """--dagger PREV: the oracle-path states of a plain run, then the same pairs walked by
    PREV (pair ids shifted by the pair count), labelled by the oracle; the job records
    PREV's hash, so a resume with another policy file is refused."""
    prev, out = tmp_path / "prev.pt", tmp_path / "dagger.pt"
    assert main(command(folders, prev, "--epochs", "2", "--keep-oracle")) == 0
    plain = torch.load(tp.cache_path(prev), weights_only=True)["train"]
    assert main(command(folders, out, "--epochs", "1", "--keep-oracle", "--dagger", str(prev),
                        "--dagger-threshold", "0.7")) == 0
    cache = torch.load(tp.cache_path(out), weights_only=True)
    assert cache["job"]["dagger"] == tp.file_hash(prev) and cache["done"] == 48
    got = cache["train"]
    first = got["pair"] < 24
    for key in ("features", "labels", "pair", "src_read", "tgt_written"):
        torch.testing.assert_close(got[key][first], plain[key])  # the oracle paths unchanged
    rolled = ~first
    assert int(rolled.sum()) > 0 and int(got["pair"][rolled].min()) >= 24
    net = load_policy(f"learned:path={prev}").net
    assert net is not None
    wants = (net.write_prob(got["features"][rolled]) >= 0.7).tolist()
    # along a rollout, a WRITE move follows exactly where PREV wants to write (below EOS)
    steps = list(zip(got["pair"][rolled].tolist(), got["src_read"][rolled].tolist(),
                     got["tgt_written"][rolled].tolist(), wants, strict=True))
    for (k, j, i, want), (k2, j2, i2, _) in zip(steps, steps[1:], strict=False):
        if k2 == k:
            assert want == (i2 == i + 1) or (want and j2 == j + 1)  # EOS waits even if wanted

    other = tmp_path / "other.pt"
    assert main(command(folders, other, "--epochs", "1", "--seed", "3")) == 0
    assert main(command(folders, out, "--epochs", "1", "--dagger", str(other), "--resume")) == 2
    assert "other settings" in capsys.readouterr().err
