"""`--device` of train, eval and serve: one resolver; cpu runs, a missing GPU is a clear error
before anything slow starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from simulmt.cli import main
from simulmt.engine import Engine
from simulmt.model.checkpoint import save_checkpoint
from simulmt.model.devices import DeviceError, resolve_device
from simulmt.train.tiny import tiny_pairs as _tiny_pairs


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    engine = Engine.tiny(0)
    out = tmp_path_factory.mktemp("model")
    save_checkpoint(out / "model.pt", {
        "model_config": engine.model.cfg.to_dict(), "model": engine.model.state_dict(),
        "tokenizer": engine.tokenizer.to_bytes(), "meta": {"name": "tiny"}})
    return out


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_resolve(no_gpu: None) -> None:
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(DeviceError, match="sees no CUDA GPU; use --device cpu"):
        resolve_device("cuda:1")
    with pytest.raises(DeviceError, match="accepted: auto, cpu, cuda"):
        resolve_device("gpu")


def test_engine_loads_on_cpu_and_refuses_a_missing_gpu_before_loading(
    model_dir: Path, tmp_path: Path, no_gpu: None
) -> None:
    engine = Engine.load(model_dir, device="cpu")
    assert engine.device == torch.device("cpu")
    assert next(engine.model.parameters()).device == torch.device("cpu")
    with pytest.raises(DeviceError):  # no model there either: the device is checked first
        Engine.load(tmp_path / "nothing", device="cuda")


def test_eval_with_device_cpu_and_cuda_absent(
    model_dir: Path, tmp_path: Path, no_gpu: None, capsys: pytest.CaptureFixture[str]
) -> None:
    pairs = _tiny_pairs()[:4]
    src, ref = tmp_path / "src.de", tmp_path / "ref.en"
    src.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    ref.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    common = ["eval", "--model", str(model_dir), "--source", str(src), "--reference", str(ref),
              "--policy", "wait-k:k=2", "--no-progress", "--json", "--threads", "1"]
    assert main([*common, "--device", "cpu"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert rows and all("bleu" in json.dumps(r).lower() for r in rows)
    assert main([*common, "--device", "cuda"]) == 2
    assert "simulmt eval: " in (err := capsys.readouterr().err) and "sees no CUDA GPU" in err


def test_serve_refuses_a_missing_gpu_before_starting(
    no_gpu: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--tiny", "--port", "0", "--device", "cuda"]) == 2
    assert "sees no CUDA GPU" in capsys.readouterr().err


def test_serve_workers_inherit_the_device() -> None:
    import argparse

    from simulmt.server import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--device", "cpu", "--workers", "2"])
    child = cli._child_args(args, port=8001, threads=1)
    assert child[child.index("--device") + 1] == "cpu"


def test_serve_workers_inherit_every_per_process_option() -> None:
    """Each `--workers` child parses to the parent's options (bar its own port, route and
    threads): an option left out of `_child_args` would silently fall back to its default in
    the children (as `--switch-interval-ms` once did)."""
    import argparse

    from simulmt.server import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    own = {"help", "workers", "port", "route", "threads", "token", "token_file", "tiny", "model"}
    argv: list[str] = ["--workers", "2"]
    for action in parser._actions:
        if action.dest in own or not action.option_strings:
            continue
        flag = action.option_strings[-1]
        if action.nargs == 0:
            argv.append(flag)  # a switch: on
        elif action.choices is not None:
            argv += [flag, str([c for c in action.choices if c != action.default][0])]
        elif action.type in (int, float):
            argv += [flag, str(action.type(7))]
        elif action.nargs in ("+", "*"):
            argv += [flag, "http://a.example"]
        else:
            argv += [flag, "10.0.0.7" if "proxies" in action.dest or "host" in action.dest
                     else "x"]
    parent = parser.parse_args(argv)
    child = parser.parse_args(cli._child_args(parent, port=8001, threads=1))
    for dest, value in vars(parent).items():
        if dest in own:
            continue
        if dest == "metrics_port":  # one per process, as the main port
            assert child.metrics_port == value + 8001 - parent.port
            continue
        assert getattr(child, dest) == value, f"--workers children lose {dest}"
