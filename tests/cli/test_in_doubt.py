"""A call in doubt on the command line: ``dagagent run`` is killed (SIGKILL) during a payment;
``runs`` counts the call in doubt, ``show`` marks it and lists its key, ``resume`` does not
make it again but waits (exit 6), ``approvals`` lists it with its key, ``approve --happened
--output`` (or ``--allow --key``) decides, and the next ``resume`` finishes the run. The tool
appends each payment to a file: every test counts what really happened."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dagagent.cli import _app as cli_app, app

pytestmark = pytest.mark.slow  # each test kills a real `dagagent run`

TOOLS = textwrap.dedent(
    """
    import json, os, signal
    import dagagent

    registry = dagagent.Registry()

    @registry.tool(side_effects=True)
    def pay(account: str, cents: int) -> dict:
        '''Pay an account.'''
        key = dagagent.current_call().idempotency_key
        with open(os.environ["PAID_LOG"], "a") as f:
            f.write(json.dumps([account, key]) + "\\n")
        if os.environ.get("DIE_AFTER_PAYING") == account:
            os.kill(os.getpid(), signal.SIGKILL)
        return {"paid": cents, "key": key}

    @registry.tool
    def total(a: dict, b: dict) -> int:
        '''Sum two payments.'''
        return a["paid"] + b["paid"]
    """
)
PLAN = {
    "goal": "pay two suppliers",
    "tasks": [
        {"id": "bob", "tool": "pay", "args": {"account": "bob", "cents": 500}},
        {
            "id": "acme",
            "tool": "pay",
            "args": {"account": "acme", "cents": 1200},
            "depends_on": ["bob"],  # bob's outcome is on record before acme's call
        },
        {"id": "sum", "tool": "total", "args": {"a": "${bob}", "b": "${acme}"}},
    ],
}


class Killed:
    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.log = tmp_path / "paid.log"

    def paid(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Killed:
    """A run killed right after its payment to acme went through (its outcome unrecorded)."""
    (tmp_path / "paytools.py").write_text(TOOLS)
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    home = tmp_path / "home"
    env = {
        "PATH": "/usr/bin:/bin",
        "DAGAGENT_HOME": str(home),
        "PAID_LOG": str(tmp_path / "paid.log"),
        "DIE_AFTER_PAYING": "acme",
        "PYTHONPATH": ":".join(sys.path),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "dagagent", "run", "plan.json", "--tools", "paytools.py:registry"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -9, proc.stderr
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DAGAGENT_HOME", str(home))
    monkeypatch.setenv("PAID_LOG", str(tmp_path / "paid.log"))
    monkeypatch.setenv("DAGAGENT_USER", "ann")
    monkeypatch.delenv("DIE_AFTER_PAYING", raising=False)
    monkeypatch.setattr(cli_app.out, "_width", 250)
    return Killed(tmp_path)


def cli(*args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, (args, result.exit_code, result.output)
    return result


def test_a_payment_in_doubt_is_shown_asked_about_and_never_made_twice(killed: Killed) -> None:
    paid = killed.paid()
    assert [a for a, _ in paid].count("acme") == 1
    acme_key = next(k for a, k in paid if a == "acme")
    runs = json.loads(cli("runs", "--json").stdout)
    (run,) = runs["runs"]
    run_id = run["run_id"]
    assert run["status"] == "interrupted" and run["in_doubt"] == 1
    assert "1 in doubt" in cli("runs").stdout
    shown = cli("show", run_id).stdout
    assert "in doubt" in shown and acme_key in shown
    doc = json.loads(cli("show", run_id, "--json").stdout)
    assert doc["in_doubt"] == [acme_key]

    # the resume does not pay acme again: it waits for a person (exit 6, paused)
    cli("resume", run_id, code=6)
    assert [a for a, _ in killed.paid()].count("acme") == 1
    listed = cli("approvals").stdout
    assert "in doubt" in listed and acme_key in listed and "--happened" in listed
    asked = json.loads(cli("approvals", "--json").stdout)["approvals"]
    assert [(a["task_id"], a["rule"], a["keys"]) for a in asked] == [
        ("acme", "in doubt", [acme_key])
    ]

    # a person checks the bank: it went through
    cli("approve", run_id, "acme", "--happened", "--output", '{"paid": 1200, "key": "bank"}')
    result = cli("resume", run_id, "--json")
    doc = json.loads(result.stdout)
    assert doc["status"] == "succeeded"
    assert doc["tasks"]["sum"]["output"] == 1700
    assert sorted(a for a, _ in killed.paid()) == ["acme", "bob"]  # each paid once


def test_approve_says_what_does_not_fit_a_call_in_doubt(killed: Killed) -> None:
    run_id = json.loads(cli("runs", "--json").stdout)["runs"][0]["run_id"]
    cli("resume", run_id, code=6)
    out = cli("approve", run_id, "acme", "--allow", "--output", "1", code=2).output
    assert "--output is the output of a call that happened" in out
    out = cli("approve", run_id, "acme", "--happened", "--output", "{nope", code=2).output
    assert "not valid JSON" in out
    out = cli("approve", run_id, "acme", "--allow", "--key", "dga-0000", code=7).output
    assert "made no call with the key dga-0000" in out
    key = next(k for a, k in killed.paid() if a == "acme")
    cli("approve", run_id, "acme", "--allow", "--key", key)  # it did not: pay again, same key
    cli("resume", run_id)
    acme = [k for a, k in killed.paid() if a == "acme"]
    assert acme == [key, key]  # made again as told, with the same key: the bank drops it


def test_a_run_with_a_call_in_doubt_is_not_replanned_into_a_new_run(killed: Killed) -> None:
    """Run again under a new run, the payment would get a new key: replan --execute refuses
    until the run is resumed (exit 7, nothing runs)."""
    run_id = json.loads(cli("runs", "--json").stdout)["runs"][0]["run_id"]
    before = killed.paid()
    out = cli("replan", run_id, "--execute", code=7).output
    assert "in doubt" in out and f"dagagent resume {run_id}" in out
    assert killed.paid() == before


def test_resume_in_doubt_deny_settles_the_call_without_making_it(killed: Killed) -> None:
    """``resume --in-doubt deny``: the call in doubt is not made again and its task is denied,
    without a person's question; a value other than ask, retry or deny is refused first."""
    run_id = json.loads(cli("runs", "--json").stdout)["runs"][0]["run_id"]
    before = killed.paid()
    out = cli("resume", run_id, "--in-doubt", "maybe", code=2).output
    assert "--in-doubt must be ask, retry or deny, not 'maybe'" in out
    doc = json.loads(cli("resume", run_id, "--in-doubt", "deny", "--json", code=1).stdout)
    assert doc["tasks"]["acme"]["status"] == "denied"
    assert doc["tasks"]["bob"]["status"] == "succeeded"
    assert killed.paid() == before  # acme was not paid a second time
