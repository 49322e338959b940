"""Approvals that wait, through the ``dagagent`` commands (in process through
``cli_shell.Shell``; real processes where a SIGKILL or processes racing each other are the
point): a run pauses on an ``--ask`` rule without a terminal, ``dagagent approve`` records a
decision, ``dagagent resume`` continues the run; the tools append to a file, so every test
counts what really ran.
"""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import wait_tools
from cli_shell import TIMEOUT, Shell
from eventually import wait_until
from wait_tools import BESIDE, PLAN, TWO

import dagagent

SLOW = {
    "goal": "a message beside a slow branch",
    "tasks": [
        {"id": "mail", "tool": "send", "args": {"to": "ann"}},
        {"id": "long", "tool": "slow", "args": {"name": "long"}},
    ],
}


class WaitShell(Shell):
    """A user's shell with the waiting tools and their call log."""

    def __init__(self, tmp_path: Path) -> None:
        shutil.copy(wait_tools.__file__, tmp_path / "wait_tools.py")
        self.log = tmp_path / "calls.log"
        self.flag = tmp_path / "slow.flag"
        super().__init__(
            tmp_path, DAGAGENT_USER="ann", WAIT_LOG=str(self.log), WAIT_FLAG=str(self.flag)
        )
        self.tools = ["--tools", "wait_tools.py:registry"]

    def plan(self, plan: dict[str, Any]) -> str:
        return self.write_plan(plan)

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def paused_run(self, plan: dict[str, Any] = PLAN) -> str:
        run = self("run", self.plan(plan), *self.tools, "--ask", "send", "--json", code=6)
        doc = json.loads(run.stdout)
        assert doc["status"] == "paused"
        assert "paused:" in run.stderr and f"dagagent resume {doc['run_id']}" in run.stderr
        return str(doc["run_id"])


def statuses(record: dict[str, Any]) -> dict[str, str]:
    return {tid: t["status"] for tid, t in record["tasks"].items()}


@pytest.fixture
def sh(tmp_path: Path) -> WaitShell:
    return WaitShell(tmp_path)


def test_run_pauses_then_approve_and_resume_succeed(sh: WaitShell) -> None:
    run = sh.paused_run()
    assert sorted(sh.calls()) == ["fetch Paris", "fetch Tokyo"]  # the rest ran on
    record = sh.json("show", run)
    assert record["status"] == "paused"
    assert statuses(record) == {
        "a": "succeeded",
        "mail": "waiting",
        "done": "skipped",
        "b": "succeeded",
    }
    (asked,) = sh.json("approvals", "--run", run)["approvals"]
    assert (asked["task_id"], asked["tool"], asked["rule"]) == ("mail", "send", "rule '--ask send'")
    assert asked["args"] == {"to": "Paris", "text": "hi"} and asked["state"] == "waiting"
    listed = sh("approvals").stdout
    assert "mail" in listed and "send" in listed and "Paris" in listed
    assert f"then: dagagent resume {run}" in " ".join(listed.split())  # the id, not RUN

    approved = sh("approve", run, "mail", "--allow", "--reason", "looks fine")
    assert "recorded: allow" in approved.stdout and "nothing ran" in approved.stderr
    assert sorted(sh.calls()) == ["fetch Paris", "fetch Tokyo"]  # approving ran nothing

    resumed = sh.json("resume", run, code=0)
    assert resumed["run_id"] == run and resumed["status"] == "succeeded"
    assert sorted(sh.calls()) == [
        "after sent to Paris",
        "fetch Paris",
        "fetch Tokyo",
        "send Paris hi",
    ]
    record = sh.json("show", run)
    decision = record["tasks"]["mail"]["decisions"][-1]
    assert (decision["decision"], decision["decided_by"], decision["reason"]) == (
        "allow",
        "ann",
        "looks fine",
    )
    assert sh.json("approvals")["approvals"] == []
    # the decision was used: approving again is refused, and so is another resume
    again = sh("approve", run, "mail", "--deny", code=7)
    assert "was used by a resume" in again.stderr
    assert "not paused" in sh("resume", run, code=7).stderr
    assert len(sh.calls()) == 4


def test_deny_denies_the_task_and_nothing_is_sent(sh: WaitShell) -> None:
    run = sh.paused_run()
    sh("approve", run, "mail", "--deny", "--reason", "not today", "--by", "bob")
    resumed = sh.json("resume", run, code=1)
    assert statuses(resumed)["mail"] == "denied"
    assert resumed["tasks"]["mail"]["error"] == "denied by bob: not today"
    assert statuses(resumed)["done"] == "skipped"
    assert not [c for c in sh.calls() if c.startswith("send")]


def test_edit_is_checked_against_the_schema_then_used(sh: WaitShell) -> None:
    run = sh.paused_run()
    (sh.dir / "bad.json").write_text(json.dumps({"text": 3}))
    bad = sh("approve", run, "mail", "--edit", "bad.json", code=2)
    assert "text" in bad.stderr and "send" in bad.stderr
    assert sh.json("approvals", "--run", run)["approvals"][0]["state"] == "waiting"
    (sh.dir / "args.json").write_text(json.dumps({"to": "Lyon"}))
    sh("approve", run, "mail", "--edit", "args.json")
    resumed = sh.json("resume", run)
    assert resumed["status"] == "succeeded"
    assert "send Lyon hi" in sh.calls() and "after sent to Lyon" in sh.calls()


def test_two_waiting_branches_are_resumed_one_at_a_time(sh: WaitShell) -> None:
    run = sh.paused_run(TWO)
    assert sh.calls() == []
    waiting = sh.json("approvals", "--run", run)["approvals"]
    assert sorted(a["task_id"] for a in waiting) == ["m1", "m2"]
    sh("approve", run, "m2", "--allow")
    first = sh.json("resume", run, code=6)
    assert statuses(first) == {
        "m1": "waiting",
        "d1": "skipped",
        "m2": "succeeded",
        "d2": "succeeded",
    }
    assert sh.calls() == ["send bob hi", "after sent to bob"]
    (still,) = sh.json("approvals", "--run", run)["approvals"]
    assert still["task_id"] == "m1"
    sh("approve", run, "m1", "--allow")
    second = sh.json("resume", run)
    assert second["status"] == "succeeded"
    assert sh.calls() == ["send bob hi", "after sent to bob", "send ann hi", "after sent to ann"]


@pytest.mark.slow
def test_a_decision_survives_a_sigkill_of_the_run_before_the_resume(sh: WaitShell) -> None:
    """A branch waits while another still runs; a person approves it from another process;
    the run's process is killed; the resume uses the decision and runs the rest."""
    sh.flag.write_text("")
    proc = sh.start("run", "run", sh.plan(SLOW), *sh.tools, "--ask", "send")
    try:
        wait_until(
            lambda: "mail" in sh("approvals", code=None).stdout,
            "the call waits for approval",
            unless=lambda: None if proc.poll() is None else "the run ended",
        )
        sh("approve", proc_run_id(sh), "mail", "--allow")
        assert sh.calls() == ["slow long"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run = proc_run_id(sh)
    assert sh.json("show", run)["status"] == "interrupted"
    sh.flag.unlink()
    resumed = sh.json("resume", run)
    assert resumed["status"] == "succeeded"
    assert sh.calls() == ["slow long", "send ann hi", "slow long"] or sh.calls() == [
        "slow long",
        "slow long",
        "send ann hi",
    ]
    assert sh.json("approvals")["approvals"] == []


def proc_run_id(sh: WaitShell) -> str:
    (summary,) = sh.json("runs")["runs"]
    return str(summary["run_id"])


def test_resume_refuses_a_run_that_is_not_paused(sh: WaitShell) -> None:
    done = sh.json(
        "run", sh.plan({"tasks": [{"id": "a", "tool": "fetch", "args": {"city": "X"}}]}), *sh.tools
    )
    refused = sh("resume", done["run_id"], code=7)
    assert f"run {done['run_id']} is succeeded, not paused" in refused.stderr
    assert sh("resume", "abcdefabcdef", code=4).stderr.startswith("error: no run")
    assert "not waiting" in sh("approve", done["run_id"], "a", "--allow", code=7).stderr
    assert "has no task 'zz'" in sh("approve", done["run_id"], "zz", "--allow", code=7).stderr
    assert "--allow or --deny" in sh("approve", done["run_id"], "a", code=2).stderr
    assert sh.calls() == ["fetch X"]


@pytest.mark.slow
def test_concurrent_approve_and_resume_never_use_a_decision_twice(sh: WaitShell) -> None:
    run = sh.paused_run()
    approve = sh.start("approve", "approve", run, "mail", "--allow")
    resume = sh.start("resume", "resume", run, "--json")
    second = sh.start("second", "resume", run, "--json")
    codes = [p.wait(TIMEOUT) for p in (approve, resume, second)]
    outs = [sh.stderr(name) for name in ("approve", "resume", "second")]
    assert all("Traceback" not in e for e in outs), outs
    # one resume holds the run at a time: the other is refused (or finds it finished)
    assert sorted(codes[1:]) in ([0, 7], [6, 7], [6, 6], [0, 6]), (codes, outs)
    # whatever the order, the rest goes through, and the message is sent exactly once
    for _ in range(3):
        status = sh.json("show", run)["status"]
        if status == "succeeded":
            break
        if sh.json("approvals", "--run", run)["approvals"]:
            sh("approve", run, "mail", "--allow", code=None)
        sh("resume", run, code=None)
    assert sh.json("show", run)["status"] == "succeeded"
    assert [c for c in sh.calls() if c.startswith("send")] == ["send Paris hi"]
    assert sh.calls().count("fetch Paris") == 1


def _paused_beside(sh: WaitShell, *options: str) -> str:
    """A paused run of BESIDE, serially, with ``options``; both its calls approved."""
    run = sh("run", sh.plan(BESIDE), *sh.tools, "--ask", "send", "-e", "serial", *options,
             "--json", code=6)  # fmt: skip
    run_id = str(json.loads(run.stdout)["run_id"])
    for task in ("m1", "m2"):
        sh("approve", run_id, task, "--allow")
    return run_id


def test_resume_goes_on_with_the_failure_policy_the_run_was_started_with(sh: WaitShell) -> None:
    run = _paused_beside(sh, "--on-failure", "continue", "-j", "2")
    resumed = sh.json("resume", run, code=1)  # a task failed: the run did
    assert statuses(resumed) == {
        "m1": "succeeded",
        "bad": "failed",
        "m2": "succeeded",
        "d2": "succeeded",  # its branch went on after the failure, as the run was started
    }
    assert sh.calls() == ["send ann hi", "send bob hi", "after sent to bob"]
    record = sh.json("show", run)
    assert record["executor"] == "serial"
    kept = record["settings"]
    assert (kept["on_failure"], kept["max_concurrency"], kept["in_doubt"]) == ("continue", 2, "ask")
    assert "on_failure" not in record["context"]  # kept once, with the settings
    line = next(x for x in sh("show", run).stdout.splitlines() if x.startswith("executor"))
    assert line.startswith("executor serial (on_failure continue; max_concurrency 2); started")


def test_resume_options_win_over_the_recorded_settings_and_are_recorded(sh: WaitShell) -> None:
    run = _paused_beside(sh, "--on-failure", "continue", "-j", "2")
    resumed = sh.json("resume", run, "--on-failure", "cancel", "--max-elements", "7", code=1)
    assert statuses(resumed)["d2"] == "cancelled"
    assert "after sent to bob" not in sh.calls()
    kept = sh.json("show", run)["settings"]
    # what the resume was given replaces what it was recorded with; the rest stays
    assert (kept["on_failure"], kept["max_elements"], kept["max_concurrency"]) == ("cancel", 7, 2)


def test_resume_refuses_a_failure_policy_it_does_not_know(sh: WaitShell) -> None:
    run = _paused_beside(sh)
    bad = sh("resume", run, "--on-failure", "stop", code=2)
    assert "--on-failure must be cancel or continue, not 'stop'" in bad.stderr
    assert sh.calls() == []  # refused before anything ran
    assert sh.json("show", run)["status"] == "paused"


def test_a_run_paused_by_an_older_version_resumes_with_its_failure_policy(
    sh: WaitShell,
) -> None:
    """A store of schema version 17 kept the failure policy of a run with approval rules in
    its context: migrated, it is the run's recorded setting, and the resume keeps it."""
    from dagagent.store import MIGRATIONS

    run = _paused_beside(sh, "--on-failure", "continue")
    current = sh.dir / "home" / "runs.db"
    old = sh.dir / "v17.db"
    dagagent.RunStore(old, migrations=MIGRATIONS[:17]).close()
    with sqlite3.connect(old) as conn:  # the run as version 17 recorded it
        conn.execute("ATTACH DATABASE ? AS cur", (str(current),))
        found = conn.execute("SELECT name FROM main.sqlite_master WHERE type = 'table'")
        tables = [r[0] for r in found.fetchall()]
        for table in tables:
            columns = ", ".join(r[1] for r in conn.execute(f"PRAGMA main.table_info({table})"))
            conn.execute(f"INSERT INTO main.{table} ({columns}) SELECT {columns} FROM cur.{table}")
        (text,) = conn.execute("SELECT context FROM runs").fetchone()
        context = {**json.loads(text), "on_failure": "continue"}
        conn.execute("UPDATE runs SET context = ?", (json.dumps(context),))
    with dagagent.RunStore(old) as st:  # migrated to the current version
        record = st.get_run(run)
    assert record.settings == {"on_failure": "continue"}
    assert "on_failure" not in record.context and record.context["approval"]
    resumed = sh.json("resume", run, "--store", str(old), code=1)
    assert statuses(resumed)["d2"] == "succeeded"
    kept = sh.json("show", run, "--store", str(old))["settings"]
    assert (kept["on_failure"], kept["max_concurrency"]) == ("continue", None)


@pytest.mark.slow
def test_a_killed_run_resumes_with_the_failure_policy_it_was_started_with(
    sh: WaitShell,
) -> None:
    """No approval rules: the run's process dies mid-run (SIGKILL); its resume meets a
    failure and, as the run was started with --on-failure continue, the independent branch
    after it runs."""
    plan = {
        "goal": "a failure beside an independent branch, after a slow task",
        "tasks": [
            {"id": "long", "tool": "slow", "args": {"name": "long"}},
            {"id": "y", "tool": "fetch", "args": {"city": "Paris"}},
            {"id": "bad", "tool": "after", "args": {"note": "${long.missing}"}},
            {"id": "x", "tool": "after", "args": {"note": "${y.city}"}},
        ],
    }
    sh.flag.write_text("")
    proc = sh.start("run", "run", sh.plan(plan), *sh.tools, "-e", "serial", "--on-failure",
                    "continue")  # fmt: skip
    try:
        wait_until(
            lambda: sh.calls() == ["slow long"],
            "the slow task runs",
            unless=lambda: None if proc.poll() is None else "the run ended",
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run = proc_run_id(sh)
    assert sh.json("show", run)["status"] == "interrupted"
    sh.flag.unlink()
    resumed = sh.json("resume", run, code=1)
    assert statuses(resumed) == {
        "long": "succeeded",
        "y": "succeeded",
        "bad": "failed",
        "x": "succeeded",
    }
    assert sh.calls() == ["slow long", "slow long", "fetch Paris", "after Paris"]
