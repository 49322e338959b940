"""Paths a user gives the command line that could hurt: an output file that is the run store
(or another SQLite database), and inputs that never end (/dev/zero as a plan, a policy or
stdin), which must end in a message, not a MemoryError or the OOM killer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dagagent.cli import app
from dagagent.store import RunStore

runner = CliRunner()

PLAN = {"goal": "g", "tasks": [{"id": "a", "tool": "calculate", "args": {"expression": "1+1"}}]}


def _recorded(tmp_path: Path) -> tuple[Path, Path]:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(PLAN))
    store = tmp_path / ".dagagent" / "runs.db"
    result = runner.invoke(app, ["run", str(plan), "--store", str(store)])
    assert result.exit_code == 0, result.output
    return plan, store


@pytest.mark.parametrize("target", ["runs.db", "copy.db"])
def test_replan_out_never_writes_over_the_run_store_or_another_database(
    tmp_path: Path, target: str
) -> None:
    plan, store = _recorded(tmp_path)
    copy = tmp_path / "copy.db"
    copy.write_bytes(store.read_bytes())
    out = copy if target == "copy.db" else store.parent / target
    before = out.read_bytes()
    args = ["replan", "--last", "--from", str(plan), "--store", str(store), "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "would destroy it" in result.output
    assert out.read_bytes() == before
    with RunStore(store) as st:
        assert len(st.list_runs()) == 1


def test_report_never_writes_over_the_run_store(tmp_path: Path) -> None:
    _, store = _recorded(tmp_path)
    before = store.read_bytes()
    result = runner.invoke(app, ["report", "--last", "--store", str(store), "-o", str(store)])
    assert result.exit_code == 2, result.output
    assert "is the run store" in result.output
    assert store.read_bytes() == before


def test_replan_out_still_writes_an_ordinary_file(tmp_path: Path) -> None:
    plan, store = _recorded(tmp_path)
    out = tmp_path / "next.json"
    out.write_text("old")
    args = ["replan", "--last", "--from", str(plan), "--store", str(store), "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["tasks"][0]["id"] == "a"


# An endless input, read in a child process whose memory is capped at 1 GiB: reading it whole
# would end in a MemoryError traceback (or, uncapped, the OOM killer).
_CAPPED = (
    "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
    "from dagagent.cli import main; sys.argv[0] = 'dagagent'; main()"
)


def _capped(
    tmp_path: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    with open(stdin or "/dev/null", "rb") as source:
        return subprocess.run(
            [sys.executable, "-c", _CAPPED, *args],
            stdin=source,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )


needs_dev_zero = pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")


@pytest.mark.slow
@needs_dev_zero
def test_run_dev_zero_is_refused_as_too_large(tmp_path: Path) -> None:
    proc = _capped(tmp_path, "run", "/dev/zero", "--store", str(tmp_path / "runs.db"))
    assert proc.returncode == 2, proc.stderr
    assert "cannot read plan file /dev/zero: larger than" in proc.stderr
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr


@pytest.mark.slow
@needs_dev_zero
def test_a_plan_on_stdin_that_never_ends_is_refused_as_too_large(tmp_path: Path) -> None:
    proc = _capped(tmp_path, "validate", "-", stdin="/dev/zero")
    assert proc.returncode == 2, proc.stderr
    assert "cannot read the plan on stdin: larger than" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
@needs_dev_zero
def test_policy_dev_zero_is_refused_as_too_large(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(PLAN))
    args = ("run", str(plan), "--policy", "/dev/zero", "--store", str(tmp_path / "runs.db"))
    proc = _capped(tmp_path, *args)
    assert proc.returncode == 2, proc.stderr
    assert "policy file '/dev/zero': cannot read it: larger than" in proc.stderr
    assert "Traceback" not in proc.stderr
