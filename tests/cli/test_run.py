"""Stopping a real ``dagagent run`` process (SIGTERM, SIGKILL), then reviewing and replanning
it the way a user would (in process), counting which tools run again (the tools append to a
log file)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_shell import run_in_process
from eventually import wait_until

from dagagent.store import RunStore

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")]

TOOLS = '''
import os
import time

from dagagent import Registry

registry = Registry()
LOG = os.environ["QA_SIGNALS_LOG"]
SLOW = os.environ["QA_SIGNALS_SLOW"]


def _log(line: str) -> None:
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(line + "\\n")


@registry.tool
def step(name: str) -> str:
    """Log a call; block while the SLOW file exists and the name starts with 'slow'."""
    _log(f"start {name}")
    while name.startswith("slow") and os.path.exists(SLOW):
        time.sleep(0.02)
    _log(f"end {name}")
    return name.upper()
'''

PLAN = {
    "goal": "stop me",
    "tasks": [
        {"id": "a", "tool": "step", "args": {"name": "a"}},
        {"id": "slow", "tool": "step", "args": {"name": "slow"}},
        {"id": "c", "tool": "step", "args": {"name": "${a}-${slow}"}},
    ],
}


class Env:
    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        (tmp_path / "qa_signal_tools.py").write_text(TOOLS)
        self.tools = f"{tmp_path / 'qa_signal_tools.py'}:registry"
        self.plan = tmp_path / "plan.json"
        self.plan.write_text(json.dumps(PLAN))
        self.log = tmp_path / "calls.log"
        self.slow = tmp_path / "slow.flag"
        self.db = tmp_path / "runs.db"
        self.env = {
            **os.environ,
            "QA_SIGNALS_LOG": str(self.log),
            "QA_SIGNALS_SLOW": str(self.slow),
            "DAGAGENT_HOME": str(tmp_path),
            "NO_COLOR": "1",
        }

    def recorded(self, task_id: str) -> bool:
        """Whether the run store holds the result of ``task_id`` of the last run."""
        if not self.db.exists():
            return False
        with RunStore(self.db, create=False) as st:
            return task_id in st.last_run().tasks

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def start(self, executor: str, *more: str) -> subprocess.Popen[str]:
        self.slow.write_text("x")
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dagagent",
                "run",
                str(self.plan),
                "--tools",
                self.tools,
                "--executor",
                executor,
                *more,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
        )

    def wait_for(self, *lines: str, proc: subprocess.Popen[str]) -> None:
        try:
            wait_until(
                lambda: all(x in self.lines() for x in lines),
                f"the tools logged {lines}",
                unless=lambda: None if proc.poll() is None else f"exit {proc.returncode}",
            )
        except AssertionError as exc:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"{exc}: {self.lines()}\n{out}\n{err}") from None

    def replan(self) -> dict[str, Any]:
        self.slow.unlink(missing_ok=True)
        self.log.write_text("")
        proc = run_in_process(["replan", "--last", "--execute", "--json"], self.dir, self.env)
        assert proc.returncode == 0, proc.stderr
        doc: dict[str, Any] = json.loads(proc.stdout)
        return doc


@pytest.mark.parametrize(("executor", "sig"), [("levels", "SIGTERM"), ("dataflow", "SIGINT")])
def test_sigterm_stops_the_run_like_ctrl_c_and_replan_reruns_only_the_rest(
    tmp_path: Path, executor: str, sig: str
) -> None:
    env = Env(tmp_path)
    proc = env.start(executor)
    env.wait_for("end a", "start slow", proc=proc)
    proc.send_signal(getattr(signal, sig))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in err and "Traceback" not in err
    with RunStore(env.db, create=False) as st:
        rec = st.last_run()
    assert rec.status == "cancelled"  # recorded by the process itself, not guessed later
    assert {k: r.status.value for k, r in rec.tasks.items()} == {
        "a": "succeeded",
        "slow": "cancelled",
        "c": "cancelled",
    }
    # each task says why: the run was interrupted, not a failure
    assert rec.tasks["slow"].error == (
        "cancelled while running: the run was interrupted (Ctrl-C, a signal, or its caller)"
    )
    assert rec.tasks["c"].error.startswith("not run: the run was interrupted")
    # the message names the run and the commands that show it and run the rest of it
    assert f"interrupted: run {rec.run_id} is recorded as cancelled (1 of 3 tasks" in err
    assert f"dagagent show {rec.run_id}\n" in err
    assert f"  run the rest: dagagent replan {rec.run_id} --execute  # reuses that one\n" in err
    doc = env.replan()
    statuses = {k: t["status"] for k, t in doc["result"]["tasks"].items()}
    assert statuses == {"a": "reused", "slow": "succeeded", "c": "succeeded"}
    assert env.lines() == ["start slow", "end slow", "start A-SLOW", "end A-SLOW"]


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_an_interrupted_run_json_prints_the_runs_result_and_exits_130(
    tmp_path: Path, sig: str
) -> None:
    """--json promises one JSON object on stdout whatever happens: a stopped run's is its
    result, cancelled, with what finished (nothing at all was printed)."""
    env = Env(tmp_path)
    proc = env.start("dataflow", "--json")
    env.wait_for("end a", "start slow", proc=proc)
    proc.send_signal(getattr(signal, sig))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    doc = json.loads(out)
    with RunStore(env.db, create=False) as st:
        rec = st.last_run()
    assert doc["run_id"] == rec.run_id and doc["status"] == "cancelled"
    assert doc["tasks"]["a"]["status"] == "succeeded" and doc["tasks"]["a"]["output"] == "A"
    assert doc["tasks"]["slow"]["status"] == "cancelled"
    assert doc["tasks"]["c"]["status"] == "cancelled"
    assert doc["counts"] == {"succeeded": 1, "cancelled": 2}
    assert f"interrupted: run {rec.run_id} is recorded as cancelled" in err
    assert "Traceback" not in err


def test_sigkill_mid_run_leaves_an_interrupted_record_that_replan_completes(
    tmp_path: Path,
) -> None:
    env = Env(tmp_path)
    proc = env.start("dataflow")
    env.wait_for("end a", "start slow", proc=proc)
    wait_until(lambda: env.recorded("a"), "task a on record")  # the store's batch went out
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    with RunStore(env.db, create=False) as st:
        rec = st.last_run()
    assert rec.status == "interrupted"
    assert {k: r.status.value for k, r in rec.tasks.items()} == {"a": "succeeded"}
    assert rec.unrecorded == ["slow", "c"]
    doc = env.replan()
    assert doc["result"]["parent_id"] == rec.run_id
    statuses = {k: t["status"] for k, t in doc["result"]["tasks"].items()}
    assert statuses == {"a": "reused", "slow": "succeeded", "c": "succeeded"}
    assert env.lines() == ["start slow", "end slow", "start A-SLOW", "end A-SLOW"]


# -- a second stop signal ----------------------------------------------------------------------

DEAF_TOOLS = '''
import asyncio
import os

from dagagent import Registry
from dagagent.store import RunRecorder

registry = Registry()
# The run's results wait a minute for their batch: on record only if the second signal has the
# store commit them before the process ends (a busy main thread once delayed them past it).
RunRecorder.__init__.__kwdefaults__["flush_interval_s"] = 60.0


@registry.tool
async def deaf() -> str:
    """Catch everything, cancellations and interrupts included (a bare except), forever."""
    _log("start deaf")
    caught = False
    while True:
        try:
            await asyncio.Event().wait()
        except:  # noqa: E722
            if not caught:
                _log("caught")
            caught = True


def _log(line: str) -> None:
    with open(os.environ["QA_SIGNALS_LOG"], "a", encoding="utf-8") as f:
        f.write(line + "\\n")


@registry.tool
async def quick() -> str:
    return "quick"
'''


@pytest.mark.parametrize("first", ["SIGINT", "SIGTERM"])
def test_a_second_signal_ends_the_process_even_when_a_tool_ignores_the_first(
    tmp_path: Path, first: str
) -> None:
    """A tool that catches every exception holds the run after the first signal; the second
    one must end the process promptly, wherever it lands (asyncio's own second Ctrl-C raised
    KeyboardInterrupt into the event loop, then waited without end for the tasks to finish)."""
    env = Env(tmp_path)
    (tmp_path / "qa_deaf_tools.py").write_text(DEAF_TOOLS)
    plan = tmp_path / "deaf.json"
    plan.write_text(
        json.dumps({"tasks": [{"id": "q", "tool": "quick"}, {"id": "d", "tool": "deaf"}]})
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dagagent",
            "run",
            str(plan),
            "--json",
            "--tools",
            f"{tmp_path / 'qa_deaf_tools.py'}:registry",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env.env,
        # Ctrl-C reaches the process even when these tests run where SIGINT is ignored (a
        # background job): an ignored signal would stay ignored across exec.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        env.wait_for("start deaf", proc=proc)
        proc.send_signal(getattr(signal, first))
        env.wait_for("caught", proc=proc)  # the tool swallowed the run's cancellation
        assert proc.poll() is None, "the tool was meant to hold the run after one signal"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (out, err)
    assert "SIGINT again: exiting at once" in err and "Traceback" not in err
    with RunStore(env.db, create=False) as st:
        rec = st.last_run()
    assert rec.status == "interrupted"  # the process ended before the run did
    # The quick task had finished: the second signal still commits its result (its batch was
    # to wait for a minute), and the tool that held the run has none.
    assert {k: r.status.value for k, r in rec.tasks.items()} == {"q": "succeeded"}
