"""A resumed run's guardrails count on from its record: the calls made before the pause
count against a tool's ``max_calls`` and a policy's limits after it, as they would have had
the run not paused."""

from __future__ import annotations

from pathlib import Path

import pytest

import dagagent
from dagagent import Approval
from dagagent.approval import Limit, Policy, Rule, ask_later
from dagagent.plan import Plan
from dagagent.results import AgentStep, CallRecord, TaskResult, TaskStatus
from dagagent.runner import CallLedger, recorded_calls
from dagagent.settings import RunSettings

pytestmark = pytest.mark.anyio


def _registry(calls: list[str]) -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool(max_calls=2)
    def ping(name: str) -> str:
        """May be called twice in a run."""
        calls.append(f"ping:{name}")
        return name

    @reg.tool
    def post(name: str) -> str:
        """Bounded by the policy: once."""
        calls.append(f"post:{name}")
        return name

    @reg.tool
    def send(to: str) -> str:
        """Asks a person first."""
        calls.append(f"send:{to}")
        return to

    return reg


def _policy() -> Policy:
    return Policy(
        [Rule(tool="send", action="ask", name="ask first")],
        default="allow",
        limits=[Limit(tool="post", max_calls=1)],
        ask=ask_later,
    )


PLAN = {
    "tasks": [
        {"id": "a", "tool": "ping", "args": {"name": "a"}},
        {"id": "b", "tool": "ping", "args": {"name": "b"}},
        {"id": "p1", "tool": "post", "args": {"name": "1"}},
        {"id": "gate", "tool": "send", "args": {"to": "ann"}},
        {"id": "c", "tool": "ping", "args": {"name": "c"}, "depends_on": ["gate"]},
        {"id": "p2", "tool": "post", "args": {"name": "2"}, "depends_on": ["gate"]},
    ]
}


async def test_a_resumed_run_counts_the_calls_made_before_its_pause(tmp_path: Path) -> None:
    calls: list[str] = []
    registry = _registry(calls)
    store = tmp_path / "runs.db"
    paused = await dagagent.execute(PLAN, registry, interceptors=[_policy()], store=store)
    assert paused.status.value == "paused"
    assert sorted(calls) == ["ping:a", "ping:b", "post:1"]

    result = await dagagent.resume(
        paused.run_id,
        registry,
        store=store,
        interceptors=[_policy()],
        decisions={"gate": Approval.approve("ok", by="ann")},
        settings=RunSettings(on_failure="continue"),
    )
    assert calls[-1] == "send:ann" and "ping:c" not in calls and "post:2" not in calls
    c, p2 = result.tasks["c"], result.tasks["p2"]
    assert c.status is TaskStatus.FAILED and c.error_type == "ToolLimitError"
    assert "may be called at most 2 times in a run (max_calls=2) and was called 2 times" in (
        c.error or ""
    )
    assert p2.status is TaskStatus.DENIED
    assert "at most 1 time" in (p2.error or "")


def test_recorded_calls_count_what_reached_the_tools() -> None:
    registry = _registry([])
    plan = Plan.load(
        {
            "tasks": [
                {"id": "twice", "tool": "ping", "args": {"name": "x"}, "retries": 1},
                {"id": "refused", "tool": "ping", "args": {"name": "y"}},
                {"id": "denied", "tool": "post", "args": {"name": "z"}},
                {"id": "map", "tool": "post", "for_each": [1, 2], "args": {"name": "${@item}"}},
                {"id": "agent", "instruction": "send it"},
            ]
        }
    )
    element = TaskResult(task_id="map", status=TaskStatus.SUCCEEDED, attempts=1, started_at=5.0)
    results = {
        "twice": TaskResult(
            task_id="twice", status=TaskStatus.SUCCEEDED, attempts=2, started_at=1.0
        ),
        "refused": TaskResult(
            task_id="refused",
            status=TaskStatus.FAILED,
            attempts=1,
            started_at=2.0,
            error_type="ToolLimitError",
        ),
        "denied": TaskResult(
            task_id="denied", status=TaskStatus.DENIED, attempts=1, started_at=3.0
        ),
        "map": TaskResult(
            task_id="map", status=TaskStatus.SUCCEEDED, started_at=4.0, elements=[element] * 2
        ),
        "agent": TaskResult(
            task_id="agent",
            status=TaskStatus.SUCCEEDED,
            started_at=6.0,
            steps=[
                AgentStep(
                    step=1,
                    calls=[
                        CallRecord(id="1", tool="send", observation="ok"),
                        CallRecord(id="2", tool="send", observation="refused: no"),
                        CallRecord(id="3", tool="send"),  # the run stopped before it
                    ],
                )
            ],
        ),
    }
    counted = {tool.name: n for tool, n in recorded_calls(plan.tasks, results, registry).items()}
    assert counted == {"ping": (2, 1.0), "post": (2, 5.0), "send": (1, 6.0)}
    ledger = CallLedger(clock=lambda: 100.0)
    ledger.restore(recorded_calls(plan.tasks, results, registry))
    assert ledger.calls("ping") == 2 and ledger.calls("post") == 2


async def test_a_call_let_beyond_a_limit_while_paused_is_dated_when_the_person_decided(
    tmp_path: Path,
) -> None:
    """A limit's question answered while the run was paused: the resumed call's decision
    is dated when the person took it, not when the resume came to use it."""
    registry = _registry([])
    store = tmp_path / "runs.db"
    policy = Policy(
        [], default="allow", limits=[Limit(tool="post", max_calls=1, action="ask")], ask=ask_later
    )
    plan = {
        "tasks": [
            {"id": "p1", "tool": "post", "args": {"name": "1"}},
            {"id": "p2", "tool": "post", "args": {"name": "2"}, "depends_on": ["p1"]},
        ]
    }
    paused = await dagagent.execute(plan, registry, interceptors=[policy], store=store)
    assert paused.tasks["p2"].status is TaskStatus.WAITING
    result = await dagagent.resume(
        paused.run_id,
        registry,
        store=store,
        interceptors=[policy],
        decisions={"p2": Approval.approve("once more", by="ann")},
    )
    assert result.tasks["p2"].status is TaskStatus.SUCCEEDED
    decision = (result.tasks["p2"].decisions or [])[-1]
    with dagagent.RunStore(store) as s:
        (used,) = s.approval_history(paused.run_id)
    assert (decision.decision, decision.decided_by) == ("allow", "ann")
    assert decision.at == used.decided_at
