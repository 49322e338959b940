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
