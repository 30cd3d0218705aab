"""Every weight file we read (model, sentence-boundary detector, learned policy) fails the same
clear way: its own error type, the file named, what is wrong, and nothing half-written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from simulmt.policies.base import PolicyError
from simulmt.policies.learned_net import FORMAT as POLICY_FORMAT
from simulmt.policies.learned_net import read_policy_file

from simulmt.model.checkpoint import FORMAT as MODEL_FORMAT
from simulmt.model.checkpoint import CheckpointError, load_checkpoint
from simulmt.model.torchfile import load_checked, save_atomic
from simulmt.segment.model import FORMAT as SEGMENTER_FORMAT
from simulmt.segment.model import SegmenterError, load_segmenter

READERS: list[tuple[Callable[[Path], Any], type[Exception], str, tuple[str, ...]]] = [
    (load_checkpoint, CheckpointError, MODEL_FORMAT, ("model_config", "model")),
    (load_segmenter, SegmenterError, SEGMENTER_FORMAT, ("config", "model")),
    (read_policy_file, PolicyError, POLICY_FORMAT, ("net_config", "net", "meta")),
]


@pytest.mark.parametrize(("read", "error", "fmt", "keys"), READERS)
def test_each_reader_names_the_file_and_what_is_wrong(
    tmp_path: Path, read: Callable[[Path], Any], error: type[Exception], fmt: str,
    keys: tuple[str, ...],
) -> None:
    with pytest.raises(error, match="nothing.pt does not exist"):
        read(tmp_path / "nothing.pt")
    whole = {"format": fmt, **{k: {} for k in keys}}
    good = tmp_path / "good.pt"
    save_atomic(good, whole)
    half = tmp_path / "half.pt"
    half.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(error, match="half.pt is corrupt or truncated"):
        read(half)
    noise = tmp_path / "noise.pt"  # not a torch file at all: one line, no unsafe-load advice
    noise.write_bytes(bytes(range(256)) * 20)
    with pytest.raises(error, match="noise.pt is corrupt or truncated") as caught:
        read(noise)
    assert "\n" not in str(caught.value) and "weights_only" not in str(caught.value)
    foreign = tmp_path / "foreign.pt"  # a pickle torch's safe loader refuses
    torch.save({"format": fmt, "object": Path("x")}, foreign)
    with pytest.raises(error, match="foreign.pt is corrupt or truncated") as caught:
        read(foreign)
    assert "\n" not in str(caught.value) and "if you trust" not in str(caught.value)
    other = tmp_path / "other.pt"
    save_atomic(other, {**whole, "format": "someone-else-v1"})
    with pytest.raises(error, match=f"other.pt is not a .*format='{fmt}'"):
        read(other)
    for key in keys:
        gap = tmp_path / f"no-{key}.pt"
        save_atomic(gap, {k: v for k, v in whole.items() if k != key})
        with pytest.raises(error, match=f"no-{key}.pt has no '{key}' entry"):
            read(gap)


def test_save_atomic_leaves_no_temp_file_and_a_hint_follows_every_message(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "f.pt"
    save_atomic(path, {"format": "x-v1", "a": torch.ones(2)})
    assert [p.name for p in path.parent.iterdir()] == ["f.pt"]
    assert load_checked(path, fmt="x-v1", keys=("a",), error=ValueError, what="file",
                        kind="x file")["a"].tolist() == [1.0, 1.0]
    with pytest.raises(KeyError, match="has no 'b' entry; make one with `x`"):
        load_checked(path, fmt="x-v1", keys=("a", "b"), error=KeyError, what="file",
                     kind="x file", hint="make one with `x`")
