"""The approval rules a command-line run is started with stay with it: ``resume`` applies them
as they were (a policy file edited since is reported, not obeyed), and ``replan --execute``
applies them too unless it is given rules of its own; a waiting call is never a success of
the review nor of the reuse map. Without a terminal (``CliRunner``'s stdin is none), a call
a rule asks about waits for a person. The tools log every call, so each test counts what ran.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dagagent.cli import app
from dagagent.review import reuse_map, review_run
from dagagent.store import RunStore

TOOLS = ["--tools", "wait_tools:registry"]

#: A payment waits for a person; the receipt after it must never be sent to the auditor.
PAY = {
    "goal": "pay, then send the receipt",
    "tasks": [
        {"id": "quote", "tool": "fetch", "args": {"city": "Quito"}},
        {"id": "pay", "tool": "send", "args": {"to": "${quote.city}", "text": "EUR 40"}},
        {"id": "receipt", "tool": "after", "args": {"note": "auditor: ${pay}"}},
    ],
}

STRICT = {
    "default": "allow",
    "rules": [
        {"tool": "send", "action": "ask", "name": "payments"},
        {
            "tool": "after",
            "args": {"note": {"regex": "^auditor"}},
            "action": "deny",
            "reason": "receipts stay in-house",
        },
    ],
}


class Env:
    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.log = tmp_path / "calls.log"
        self.store = tmp_path / "runs.db"
        self.policy = tmp_path / "policy.json"
        self.policy.write_text(json.dumps(STRICT))

    def cli(self, *args: str, code: int) -> Any:
        res = CliRunner().invoke(app, [*args, "--store", str(self.store)])
        assert res.exit_code == code, (args, res.exit_code, res.output)
        assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
        return res

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def paused(self, plan: dict[str, Any] = PAY) -> str:
        path = self.dir / "plan.json"
        path.write_text(json.dumps(plan))
        res = self.cli("run", str(path), *TOOLS, "--policy", str(self.policy), "--json", code=6)
        doc = json.loads(res.stdout)
        assert doc["tasks"]["pay"]["status"] == "waiting"
        return str(doc["run_id"])

    def statuses(self, run: str) -> dict[str, str]:
        with RunStore(self.store, create=False) as st:
            return {k: r.status.value for k, r in st.get_run(run).tasks.items()}


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    e = Env(tmp_path)
    monkeypatch.setenv("WAIT_LOG", str(e.log))
    monkeypatch.setenv("WAIT_FLAG", str(tmp_path / "flag"))
    monkeypatch.setenv("DAGAGENT_USER", "ann")
    return e


# -- resume: the rules kept with the run --------------------------------------------------------


def test_resume_applies_the_rules_the_run_started_with_not_the_edited_file(env: Env) -> None:
    run = env.paused()
    env.policy.write_text(json.dumps({"default": "allow", "rules": []}))  # edited after the pause
    env.cli("approve", run, "pay", "--allow", code=0)
    res = env.cli("resume", run, *TOOLS, code=1)
    assert "the policy file" in res.stderr and "has changed since run" in res.stderr
    assert env.calls() == ["fetch Quito", "send Quito EUR 40"]  # no receipt to the auditor
    assert env.statuses(run)["receipt"] == "denied"


def test_resume_without_a_change_says_nothing_about_the_file(env: Env) -> None:
    run = env.paused()
    env.policy.write_text(json.dumps(STRICT, indent=4))  # the same rules, laid out anew
    env.cli("approve", run, "pay", "--deny", "--reason", "wrong amount", code=0)
    res = env.cli("resume", run, *TOOLS, code=1)
    assert "policy file" not in res.stderr
    assert env.statuses(run)["pay"] == "denied" and env.calls() == ["fetch Quito"]


def test_resume_keeps_the_rules_when_the_file_is_gone(env: Env) -> None:
    run = env.paused()
    env.policy.unlink()
    env.cli("approve", run, "pay", "--allow", code=0)
    res = env.cli("resume", run, *TOOLS, code=1)
    assert "cannot be read any more" in res.stderr
    assert env.statuses(run) == {"quote": "succeeded", "pay": "succeeded", "receipt": "denied"}


def test_the_run_is_recorded_with_the_rules_themselves(env: Env) -> None:
    run = env.paused()
    with RunStore(env.store, create=False) as st:
        kept = st.get_run(run).context["approval"]
    assert kept["policy"] == str(env.policy.resolve()) and kept["rules"] == STRICT


# -- replan --execute: the same rules unless told otherwise ------------------------------------


def test_replan_execute_applies_the_recorded_rules(env: Env) -> None:
    run = env.paused()
    res = env.cli("replan", run, "--execute", *TOOLS, "--json", code=6)
    doc = json.loads(res.stdout)
    assert doc["result"]["status"] == "paused"
    assert doc["result"]["tasks"]["pay"]["status"] == "waiting"
    assert env.calls() == ["fetch Quito"]  # reused quote; pay waits again; nothing sent
    assert "the approval rules run" in res.stderr


def test_replan_execute_denies_what_the_recorded_rules_deny(env: Env) -> None:
    denied = {
        "goal": "a note to the auditor",
        "tasks": [{"id": "note", "tool": "after", "args": {"note": "auditor: all paid"}}],
    }
    path = env.dir / "denied.json"
    path.write_text(json.dumps(denied))
    res = env.cli("run", str(path), *TOOLS, "--policy", str(env.policy), "--json", code=1)
    run = json.loads(res.stdout)["run_id"]
    env.cli("replan", run, "--execute", *TOOLS, code=1)
    assert env.calls() == []
    # the new run is recorded with the same rules: a resume of it would apply them too
    with RunStore(env.store, create=False) as st:
        child = next(r for r in st.list_runs() if r.parent_id == run)
        assert st.get_run(child.run_id).context["approval"]["rules"] == STRICT
        assert st.get_run(child.run_id).tasks["note"].status.value == "denied"


def test_replan_no_wait_denies_the_waiting_call(env: Env) -> None:
    run = env.paused()
    env.cli("replan", run, "--execute", "--no-wait", *TOOLS, code=1)
    assert env.calls() == ["fetch Quito"]


def test_replan_with_rules_of_its_own_replaces_the_recorded_ones(env: Env) -> None:
    run = env.paused()
    mine = env.dir / "mine.json"
    mine.write_text(json.dumps({"rules": [{"tool": "after", "action": "deny"}]}))
    res = env.cli("replan", run, "--execute", "--policy", str(mine), *TOOLS, code=1)
    assert "instead of the rules run" in res.stderr
    assert env.calls() == ["fetch Quito", "send Quito EUR 40"]  # told otherwise: pay ran
    env.cli("replan", run, "--execute", "--ask", "send", *TOOLS, code=6)
    assert env.calls() == ["fetch Quito", "send Quito EUR 40"]  # the payment waits this time


def test_replan_approve_needs_a_terminal(env: Env) -> None:
    run = env.paused()
    res = env.cli("replan", run, "--execute", "--approve", *TOOLS, code=2)
    assert "--approve needs a terminal" in res.stderr
    assert env.calls() == ["fetch Quito"]


# -- a waiting call is never a success ----------------------------------------------------------


def test_a_waiting_task_is_reviewed_as_waiting_never_as_succeeded(env: Env) -> None:
    run = env.paused()
    with RunStore(env.store, create=False) as st:
        record = st.get_run(run)
    review = review_run(record)
    assert [o.task_id for o in review.succeeded] == ["quote"]
    assert [o.task_id for o in review.waiting] == ["pay"]
    assert "pay" not in reuse_map(record) and "quote" in reuse_map(record)
    res = env.cli("replan", run, *TOOLS, code=0)
    assert "waiting for a person's decision (1):" in res.stdout
    assert "= null" not in res.stdout
    assert f"dagagent resume {run}" in res.stdout
    doc = json.loads(env.cli("replan", run, *TOOLS, "--json", code=0).stdout)
    assert [o["task_id"] for o in doc["review"]["waiting"]] == ["pay"]
    assert [o["task_id"] for o in doc["review"]["succeeded"]] == ["quote"]


# -- approve --edit reads a bounded file --------------------------------------------------------


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_approve_edit_of_an_endless_file_is_refused_with_a_message(env: Env) -> None:
    run = env.paused()
    res = env.cli("approve", run, "pay", "--edit", "/dev/zero", code=2)
    assert "--edit" in res.stderr and "larger than" in res.stderr
    res = CliRunner().invoke(
        app,
        ["approve", run, "pay", "--edit", "-", "--store", str(env.store)],
        input="{" + " " * (2 * 1024 * 1024) + "}",
    )
    assert res.exit_code == 2 and "larger than" in res.stderr, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    # nothing was decided: the call still waits
    env.cli("approve", run, "pay", "--edit", str(_args(env, {"text": "EUR 30"})), code=0)


def _args(env: Env, args: dict[str, Any]) -> Path:
    path = env.dir / "args.json"
    path.write_text(json.dumps(args))
    return path
