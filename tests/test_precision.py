"""`--dtype auto`: the precision is measured at load (simulmt.model.precision), never assumed.

The selection logic is tested with injected timings; the real timing only for what does not
depend on its outcome (it returns a native precision and logs the times)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import pytest
from simulmt.server.app import CaptionServer
from simulmt.server.config import ServerConfig

from simulmt.client.stream import StartOptions, paced, run_stream
from simulmt.engine import Engine, for_inference, precision_of
from simulmt.model.precision import choose_precision, native_precisions, pick_fastest
from simulmt.model.runtime import CLI_DTYPE, DTYPE_NAMES
from simulmt.model.transformer import SimulTransformer


def test_the_fastest_wins_only_when_clearly_faster_than_float32() -> None:
    assert pick_fastest({"float32": 10.0, "int8": 5.0, "bfloat16": 7.0}) == "int8"
    assert pick_fastest({"float32": 10.0, "int8": 12.0, "bfloat16": 4.0}) == "bfloat16"
    # slower, or within the noise margin (10%): float32, never a slower precision
    assert pick_fastest({"float32": 10.0, "int8": 30.0, "bfloat16": 50.0}) == "float32"
    assert pick_fastest({"float32": 10.0, "int8": 9.5}) == "float32"
    assert pick_fastest({"float32": 10.0, "int8": 9.5}, min_gain=0.0) == "int8"
    assert pick_fastest({"float32": 10.0}) == "float32"
    with pytest.raises(ValueError, match="must include float32"):
        pick_fastest({"int8": 1.0})


def _timer(times: Mapping[str, float], seen: list[list[str]]):  # type: ignore[no-untyped-def]
    def timer(models: Mapping[str, SimulTransformer]) -> dict[str, float]:
        seen.append(list(models))
        return {name: times[name] for name in models}

    return timer


def test_auto_builds_and_times_every_candidate_and_keeps_the_fastest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tiny = Engine.tiny(0)
    model = tiny.model
    seen: list[list[str]] = []
    timer = _timer({"float32": 20.0, "int8": 8.0, "bfloat16": 30.0}, seen)
    with caplog.at_level(logging.INFO, logger="simulmt.model.precision"):
        chosen, choice = choose_precision(
            model, "auto", convert=for_inference, timer=timer,
            candidates=("float32", "bfloat16", "int8"),
        )  # fmt: skip
    assert seen == [["float32", "bfloat16", "int8"]]
    assert choice.name == "int8" and precision_of(chosen) == "int8"
    assert choice.times_ms == {"float32": 20.0, "int8": 8.0, "bfloat16": 30.0}
    assert precision_of(model) == "float32"  # the loaded model is left as it was
    assert "precision int8 (asked: auto" in caplog.text and "float32 20.0 ms" in caplog.text
    # a slower int8: float32, the model itself
    chosen, choice = choose_precision(
        model, "auto", convert=for_inference, timer=_timer({"float32": 5.0, "int8": 8.0}, seen),
        candidates=("float32", "int8"),
    )  # fmt: skip
    assert choice.name == "float32" and chosen is model


def test_an_explicit_dtype_is_obeyed_and_warned_about_when_slower(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = Engine.tiny(0).model
    seen: list[list[str]] = []
    timer = _timer({"float32": 5.0, "int8": 9.0}, seen)
    with caplog.at_level(logging.INFO, logger="simulmt.model.precision"):
        _, choice = choose_precision(model, "int8", convert=for_inference, timer=timer)
    assert choice.name == "int8" and seen == [["float32", "int8"]]
    assert "--dtype int8 is slower than float32 on this CPU" in caplog.text
    caplog.clear()
    timer = _timer({"float32": 9.0, "int8": 5.0}, seen)
    with caplog.at_level(logging.INFO, logger="simulmt.model.precision"):
        choose_precision(model, "int8", convert=for_inference, timer=timer)
    assert "slower" not in caplog.text and "precision int8 (asked: int8" in caplog.text
    # float32 costs no timing at all
    seen.clear()
    chosen, choice = choose_precision(model, "float32", convert=for_inference, timer=timer)
    assert chosen is model and choice.name == "float32" and not seen
    with pytest.raises(ValueError, match="unknown dtype 'int4': accepted are auto, float32"):
        choose_precision(model, "int4", convert=for_inference, timer=timer)


def test_the_real_timing_returns_a_native_precision_and_logs_the_times(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = Engine.tiny(0).model
    with caplog.at_level(logging.INFO, logger="simulmt.model.precision"):
        chosen, choice = choose_precision(model, "auto", convert=for_inference)
    assert choice.name in native_precisions()
    assert set(choice.times_ms) == set(native_precisions())
    assert all(t > 0 for t in choice.times_ms.values())
    assert f"precision {choice.name} (asked: auto; one turn of 8 streams: " in caplog.text
    assert precision_of(chosen) == choice.name


def test_auto_times_a_turn_as_wide_as_the_work_capped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The fastest precision depends on the batch (int8 wins 8 streams, bfloat16 64 on a Xeon
    with AMX): the timed turn has the caller's width, at most MAX_TIMED_STREAMS."""
    from simulmt.model import precision

    model = Engine.tiny(0).model
    widths: list[int] = []
    real = precision._turn

    def spy(net: SimulTransformer, inputs):  # type: ignore[no-untyped-def]
        widths.append(inputs.ids.shape[0])  # (B, S): the streams of the timed turn
        return real(net, inputs)

    monkeypatch.setattr(precision, "_turn", spy)
    expected = {1: 1, 3: 3, 10_000: precision.MAX_TIMED_STREAMS}
    for asked, timed in expected.items():
        widths.clear()
        with caplog.at_level(logging.INFO, logger="simulmt.model.precision"):
            _, choice = choose_precision(
                model, "auto", convert=for_inference, turn_streams=asked,
                candidates=("float32", "int8"),
            )  # fmt: skip
        assert widths == [timed, timed] and choice.streams == timed
        assert f"one turn of {timed} stream{'' if timed == 1 else 's'}: " in caplog.text
    widths.clear()
    choose_precision(model, "auto", convert=for_inference, candidates=("float32", "int8"))
    assert widths == [precision.TURN_STREAMS] * 2  # a server's turn by default
    with pytest.raises(ValueError, match="turn_streams must be at least 1, not 0"):
        choose_precision(model, "auto", convert=for_inference, turn_streams=0)


def test_each_command_times_its_own_workload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """eval times its batch, translate one session; the SimulEval agent times what eval
    would by default (the two must agree), serve the default (a server's turn)."""
    from simulmt.eval import cli as eval_cli
    from simulmt.eval.options import RunConfig
    from simulmt.eval.simuleval_agent import SimulmtAgent

    from simulmt.cli import translate

    class Loaded(Exception):
        pass

    asked: list[tuple[str, int]] = []

    def load(model_dir: object = None, *, dtype: str = "float32", turn_streams: int = 8,
             **_: object) -> Engine:  # fmt: skip
        asked.append((dtype, turn_streams))
        raise Loaded

    monkeypatch.setattr(Engine, "load", load)
    parser = argparse.ArgumentParser()
    eval_cli.add_arguments(parser)
    args = parser.parse_args(["--source", "x", "--reference", "y", "--batch-size", "40"])
    with pytest.raises(Loaded):
        eval_cli.load_for_run(args, ["wait-k:k=2"])
    parser = argparse.ArgumentParser()
    translate.add_arguments(parser)
    with pytest.raises(Loaded):
        translate.run(parser.parse_args([]))
    parser = argparse.ArgumentParser()
    SimulmtAgent.add_args(parser)
    with pytest.raises(Loaded):
        SimulmtAgent(parser.parse_args([]))
    assert asked == [("auto", 40), ("auto", 1), ("auto", RunConfig.batch_size)]


def test_native_precisions_leave_out_emulated_bfloat16(monkeypatch: pytest.MonkeyPatch) -> None:
    """oneDNN says bf16 is supported on any AVX-512 CPU (emulated there: 65 ms a turn against
    float32's 50 on an AVX-512 Xeon without AVX512-BF16); the CPU's flags decide."""
    import torch

    flags = {"avx512_f": True, "avx512_bf16": True}
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: flags)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)
    assert native_precisions() == ("float32", "int8")
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    assert native_precisions() == DTYPE_NAMES
    for bf16 in ({"amx_bf16": True}, {}):
        flags = {"avx512_f": True, **bf16}
        assert native_precisions() == (DTYPE_NAMES if bf16 else ("float32", "int8"))


@pytest.mark.parametrize(
    "command", ["simulmt.server.cli", "simulmt.eval.cli", "simulmt.cli.translate"]
)
def test_every_command_line_defaults_to_auto(command: str) -> None:
    import importlib

    parser = argparse.ArgumentParser()
    importlib.import_module(command).add_arguments(parser)
    assert CLI_DTYPE == "auto"
    required = ["--source", "x", "--reference", "y"] if command.endswith("eval.cli") else []
    assert parser.parse_args(required).dtype == "auto"
    assert parser.parse_args([*required, "--dtype", "int8"]).dtype == "int8"
    with pytest.raises(SystemExit):
        parser.parse_args([*required, "--dtype", "int4"])


def test_engine_precision_names_what_runs() -> None:
    tiny = Engine.tiny(0)
    assert tiny.precision == "float32"
    for name in DTYPE_NAMES:
        assert Engine(for_inference(tiny.model, name), tiny.tokenizer, tiny.info).precision == name
    assert precision_of(tiny.model) == "float32"  # converting leaves the original alone


async def test_the_server_shows_its_precision_in_healthz_and_the_session_message() -> None:
    tiny = Engine.tiny(0)
    int8 = Engine(for_inference(tiny.model, "int8"), tiny.tokenizer, tiny.info)
    server = CaptionServer(ServerConfig(port=0), load=lambda: int8, model_name="tiny")
    await server.start()
    try:
        await server.wait_ready()
        url = f"http://127.0.0.1:{server.port}/healthz"
        health = json.loads(await asyncio.to_thread(_read, url))
        log = await run_stream(
            f"ws://127.0.0.1:{server.port}/ws", paced("Ich habe ein Buch .".split(), 0),
            start=StartOptions(policy="wait-k:k=2"),
        )  # fmt: skip
    finally:
        await server.stop()
    assert health["precision"] == "int8" and health["model"] == "tiny-0"
    assert log.session is not None and log.session["precision"] == "int8"


def _read(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        return bytes(r.read())
