"""A call in doubt of a run that ended, on the command line (in process): the payment's
timeout cuts it off and no retry is left, so the run fails with the call in doubt and
nothing resumes it. ``replan --execute`` is refused (exit 7), ``approvals`` lists the call
with its key and why, ``approve --happened --output`` (or ``--allow``) records what a
person found, and the next ``replan --execute`` takes the payment over (or makes it once,
with its key). The tool appends each payment to a file: every test counts what happened."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_shell import Shell

TOOLS = '''
import json, os
from pathlib import Path
import anyio
import dagagent

registry = dagagent.Registry()


@registry.tool(side_effects=True)
async def pay(account: str, cents: int) -> dict:
    """Pay an account."""
    key = dagagent.current_call().idempotency_key
    hang = Path(os.environ["PAY_HANG"])
    if hang.exists() and hang.read_text() == "before":
        await anyio.sleep_forever()  # cut off by its timeout before it paid
    with open(os.environ["PAID_LOG"], "a") as f:
        f.write(json.dumps([account, key]) + "\\n")
    if hang.exists():
        await anyio.sleep_forever()  # ... after it paid
    return {"paid": cents, "key": key}


@registry.tool
def double(payment: dict) -> int:
    """Twice a payment."""
    return 2 * payment["paid"]
'''

PLAN = {
    "goal": "pay a supplier",
    "tasks": [
        {"id": "pay", "tool": "pay", "args": {"account": "acme", "cents": 500}, "timeout_s": 0.5},
        {"id": "twice", "tool": "double", "args": {"payment": "${pay}"}},
    ],
}


class PayShell(Shell):
    def __init__(self, tmp_path: Path) -> None:
        (tmp_path / "paytools.py").write_text(TOOLS)
        self.log = tmp_path / "paid.log"
        self.hang = tmp_path / "hang"
        super().__init__(
            tmp_path, DAGAGENT_USER="ann", PAID_LOG=str(self.log), PAY_HANG=str(self.hang)
        )
        self.tools = ["--tools", "paytools.py:registry"]

    def paid(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def ended_in_doubt(self, when: str) -> tuple[str, dict[str, Any]]:
        """A run that failed with its payment cut off ``when`` (before or after it paid):
        its id and the call in doubt as ``approvals --json`` lists it."""
        self.hang.write_text(when)
        doc = self.json("run", self.write_plan(PLAN), *self.tools, "--json", code=1)
        self.hang.unlink()
        run_id = str(doc["run_id"])
        listed = self.json("approvals", "--json")
        assert listed["approvals"] == []
        (call,) = listed["in_doubt"]
        assert (call["run_id"], call["task_id"], call["tool"]) == (run_id, "pay", "pay")
        assert call["args"] == {"account": "acme", "cents": 500}
        assert call["run_status"] == "failed" and call["in_doubt"] is True
        assert call["why"].startswith("it was cut off during the call")
        refused = self("replan", run_id, *self.tools, "--execute", code=7)
        assert call["key"] in refused.stderr and "cannot be resumed" in refused.stderr
        assert f"dagagent approve {run_id} pay --happened" in refused.stderr
        return run_id, call


@pytest.fixture
def sh(tmp_path: Path) -> PayShell:
    return PayShell(tmp_path)


def test_a_call_that_happened_is_taken_over_by_the_revision(sh: PayShell) -> None:
    run_id, call = sh.ended_in_doubt("after")
    assert sh.paid() == [["acme", call["key"]]]
    record = sh("show", run_id)
    assert f"run {run_id} is failed: nothing resumes it" in " ".join(record.stdout.split())
    assert f"dagagent resume {run_id}" not in record.stdout
    shown = sh("approvals")
    assert "calls in doubt of runs that ended" in shown.stdout
    assert call["key"] in shown.stdout and "cut off" in shown.stdout
    receipt = {"paid": 500, "key": call["key"]}
    done = sh(
        "approve", run_id, "pay", "--happened", "--output", json.dumps(receipt),
        "--reason", "the bank lists it",
    )  # fmt: skip
    assert "took effect: a revision takes its output over" in done.stdout
    assert "the bank lists it" in done.stdout and "replan" in done.stderr
    assert sh.json("approvals", "--json")["in_doubt"] == []
    (effect,) = sh.json("show", run_id, "--json")["effects"]
    assert (effect["state"], effect["resolution"], effect["resolved_by"]) == (
        "succeeded",
        "happened",
        "ann",
    )
    # Said twice: refused, the call is not in doubt any more.
    again = sh("approve", run_id, "pay", "--allow", code=7)
    assert "no call in doubt" in again.stderr
    revised = sh.json("replan", run_id, *sh.tools, "--execute", "--json")
    assert revised["result"]["status"] == "succeeded", revised
    tasks = revised["result"]["tasks"]
    assert (tasks["pay"]["output"], tasks["twice"]["output"]) == (receipt, 1000)
    assert sh.paid() == [["acme", call["key"]]]  # paid once


def test_a_call_that_did_not_happen_is_made_once_with_its_key(sh: PayShell) -> None:
    run_id, call = sh.ended_in_doubt("before")
    assert sh.paid() == []
    done = sh("approve", run_id, "pay", "--allow", "--key", call["key"], "--json")
    (resolved,) = json.loads(done.stdout)["resolved"]
    assert (resolved["key"], resolved["resolution"]) == (call["key"], "not_happened")
    revised = sh.json("replan", run_id, *sh.tools, "--execute", "--json")
    assert revised["result"]["status"] == "succeeded", revised
    assert sh.paid() == [["acme", call["key"]]]  # once, with the key it had


def test_what_cannot_be_resolved_is_refused_with_a_clear_code(sh: PayShell) -> None:
    run_id, call = sh.ended_in_doubt("before")
    cases: list[tuple[list[str], int, str]] = [
        (["twice", "--happened"], 7, "made no call with side effects"),
        (["pay", "--happened", "--key", "dga-0"], 7, "made no call with the key dga-0"),
        (["pay", "--happened", "--output", "{paid"], 2, "--output: not valid JSON"),
        (["pay", "--happened", "--output", "NaN"], 7, "is not JSON"),
        (["pay", "--edit", "-"], 2, "--edit applies to a call waiting for approval"),
        (["nope", "--deny"], 7, "has no task 'nope'"),
        (["twice", "--allow"], 7, "is not waiting for approval"),
    ]
    for args, code, words in cases:
        refused = sh("approve", run_id, *args, code=code)
        assert words in refused.stderr, (args, refused.stderr)
    assert sh.json("approvals", "--json")["in_doubt"][0]["key"] == call["key"]
    denied = sh("approve", run_id, "pay", "--deny", "--reason", "paid by hand")
    assert "a revision denies its task" in denied.stdout
    revised = sh.json("replan", run_id, *sh.tools, "--execute", "--json", code=1)
    assert revised["result"]["tasks"]["pay"]["status"] == "denied"
    assert sh.paid() == []


# A revision of a revision: what was found about the payment holds over the whole line of
# runs, and for every revision of it (siblings too), not only for the run revised.

ASIDE = {
    "goal": "pay a supplier",
    "tasks": [{"id": "note", "tool": "double", "args": {"payment": {"paid": 1}}}],
}


def _revise(sh: PayShell, run_id: str, plan: dict[str, Any] | None = None) -> dict[str, Any]:
    given = ["--from", sh.write_plan(plan, "revised.json")] if plan is not None else []
    doc = sh.json("replan", run_id, *sh.tools, *given, "--execute", "--json")
    assert doc["result"]["status"] == "succeeded", doc
    return dict(doc["result"])


def test_a_payment_that_happened_is_taken_over_two_revisions_later(sh: PayShell) -> None:
    run_id, call = sh.ended_in_doubt("after")
    receipt = {"paid": 500, "key": call["key"]}
    sh("approve", run_id, "pay", "--happened", "--output", json.dumps(receipt))
    aside = _revise(sh, run_id, ASIDE)  # leaves the payment out: nothing of it on record
    back = _revise(sh, aside["run_id"], PLAN)  # brings it back
    assert back["tasks"]["pay"]["output"] == receipt
    assert sh.paid() == [["acme", call["key"]]]  # paid once, two revisions later too


def test_a_payment_found_not_made_is_made_once_under_its_key_by_all_revisions(
    sh: PayShell,
) -> None:
    run_id, call = sh.ended_in_doubt("before")
    sh("approve", run_id, "pay", "--allow")
    aside = _revise(sh, run_id, ASIDE)
    back = _revise(sh, aside["run_id"], PLAN)  # the grandparent's key, not a new one
    assert sh.paid() == [["acme", call["key"]]]
    sibling = _revise(sh, run_id)  # another revision of the run: takes the payment over
    assert sibling["tasks"]["pay"]["output"] == back["tasks"]["pay"]["output"]
    again = _revise(sh, aside["run_id"], PLAN)  # a sibling two levels down: the same
    assert again["tasks"]["pay"]["output"] == back["tasks"]["pay"]["output"]
    assert sh.paid() == [["acme", call["key"]]]  # once, whichever revision asks


def test_a_payment_in_doubt_blocks_a_revision_of_a_revision_that_brings_it_back(
    sh: PayShell,
) -> None:
    run_id, call = sh.ended_in_doubt("before")
    aside = _revise(sh, run_id, ASIDE)  # the payment left out: allowed
    refused = sh(
        "replan", aside["run_id"], *sh.tools, "--from", sh.write_plan(PLAN, "revised.json"),
        "--execute", code=7,
    )  # fmt: skip
    said = " ".join(refused.stderr.split())
    assert f"run {run_id}, which run {aside['run_id']} descends from," in said
    assert call["key"] in said and f"dagagent approve {run_id} pay" in said
    assert sh.paid() == []


def test_no_revision_pays_while_a_sibling_s_payment_under_the_key_is_in_doubt(
    sh: PayShell,
) -> None:
    run_id, call = sh.ended_in_doubt("before")
    sh("approve", run_id, "pay", "--allow")
    sh.hang.write_text("after")  # the first revision pays under the key, then is cut off
    first = sh.json("replan", run_id, *sh.tools, "--execute", "--json", code=1)
    sh.hang.unlink()
    assert sh.paid() == [["acme", call["key"]]]
    first_id = first["result"]["run_id"]
    second = sh("replan", run_id, *sh.tools, "--execute", "--json", code=6)  # waits
    said = " ".join(json.loads(second.stdout)["result"]["tasks"]["pay"]["error"].split())
    assert f"run {first_id} made it again since, under the same key" in said
    assert sh.paid() == [["acme", call["key"]]]  # not paid a second time
    receipt = {"paid": 500, "key": call["key"]}
    sh("approve", first_id, "pay", "--happened", "--output", json.dumps(receipt))
    third = _revise(sh, run_id)
    assert third["tasks"]["pay"]["output"] == receipt
    assert sh.paid() == [["acme", call["key"]]]
