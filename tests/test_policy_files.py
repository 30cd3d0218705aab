"""`--policy-file`: a policy tried out from a Python file, without packaging it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from simulmt.policies import Action, Observation
from simulmt.policies.base import PolicyError
from simulmt.policies.files import load_policy_file
from simulmt.policies.registry import available, load_policy

from tests._model_helpers import save_tiny_folder

POLICY = '''
from dataclasses import dataclass
from typing import ClassVar
from simulmt.policies import Action, BasePolicy, Observation

@dataclass(frozen=True)
class ReadTwoWriteOne(BasePolicy):
    """READ until LAG more source words than target words written, then WRITE."""
    name: ClassVar[str] = "{name}"
    lag: int = 2

    def decide(self, obs: Observation) -> Action:
        if obs.source_finished or obs.src_read >= obs.tgt_written + self.lag:
            return Action.WRITE
        return Action.READ
'''


def _file(folder: Path, text: str, stem: str = "my_policy") -> Path:
    path = folder / f"{stem}.py"
    path.write_text(text)
    return path


def _obs(src_read: int, tgt_written: int) -> Observation:
    return Observation(src_read=src_read, tgt_written=tgt_written, source_finished=False)


def test_a_files_policy_is_selected_by_spec_like_a_registered_one(tmp_path: Path) -> None:
    path = _file(tmp_path, POLICY.format(name="read-two-a"))
    assert load_policy_file(path) == ["read-two-a"]
    policy = load_policy("read-two-a:lag=3")
    assert policy.spec() == "read-two-a:lag=3"
    assert policy.decide(_obs(2, 0)) is Action.READ
    assert policy.decide(_obs(3, 0)) is Action.WRITE
    assert "read-two-a" in available()
    assert load_policy_file(path) == ["read-two-a"]  # read again: the same, not run twice
    with pytest.raises(PolicyError, match="bad value for lag"):
        load_policy("read-two-a:lag=x")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (POLICY.format(name="wait-k"), "policy name 'wait-k' is taken by simulmt.policies"),
        ("1 / 0\n", r"failed to import \(ZeroDivisionError: division by zero\)"),
        ("x = 1\n", "defines no policy: expected a class that subclasses"),
        (POLICY.format(name="read-two-b") + POLICY.format(name="read-two-b").split("\n", 4)[4]
         .replace("ReadTwoWriteOne", "Twin"),
         r"--policy-file .*my_policy\.py: policy name 'read-two-b' is taken by .*my_policy\.py"),
        (POLICY.format(name="read-two-c").replace("def decide", "def other"),
         r"is not a usable policy: it leaves abstract methods unimplemented \(decide\)"),
    ],
    ids=["builtin-name", "import-error", "no-policy", "same-name-twice", "abstract"],
)
def test_a_bad_file_is_refused_with_what_is_wrong_and_registers_nothing(
    tmp_path: Path, text: str, message: str
) -> None:
    before = set(available())
    with pytest.raises(PolicyError, match=message):
        load_policy_file(_file(tmp_path, text))
    assert set(available()) == before
    assert type(load_policy("wait-k:k=3")).__module__ == "simulmt.policies.schedules"


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match=r"--policy-file .*none\.py: no such file"):
        load_policy_file(tmp_path / "none.py")


def _simulmt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "simulmt.cli", *args],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


@pytest.mark.slow
def test_eval_translate_and_policies_take_a_policy_file(tmp_path: Path) -> None:
    """The commands a researcher tries a policy with; eval with 2 forked jobs inherits it."""
    model = save_tiny_folder(tmp_path / "model")
    path = _file(tmp_path, POLICY.format(name="read-two"))
    src, ref = tmp_path / "src.txt", tmp_path / "ref.txt"
    src.write_text("ich habe ein buch\nwo ist der bahnhof\nguten morgen\n")
    ref.write_text("i have a book\nwhere is the station\ngood morning\n")
    proc = _simulmt("eval", "--model", str(model), "--source", str(src), "--reference",
                    str(ref), "--policy-file", str(path), "--sweep", "read-two:lag=1,3",
                    "--jobs", "2", "--json", "--no-progress")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["policy"] for r in rows] == ["read-two:lag=1", "read-two:lag=3"]
    assert rows[0]["al"] < rows[1]["al"]  # the argument took effect
    proc = _simulmt("translate", "--model", str(model), "--policy-file", str(path),
                    "--policy", "read-two:lag=2", "--jsonl", "--source", str(src))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sum(json.loads(line)["final"] for line in proc.stdout.splitlines()) == 3
    proc = _simulmt("policies", "read-two", "--policy-file", str(path))
    assert proc.returncode == 0 and "READ until LAG more source words" in proc.stdout
    assert f"class: {path}:ReadTwoWriteOne" in proc.stdout
    proc = _simulmt("eval", "--model", str(model), "--source", str(src), "--reference",
                    str(ref), "--policy-file", str(tmp_path / "typo.py"), "--policy", "read-two")
    assert proc.returncode == 2 and "typo.py: no such file" in proc.stderr
