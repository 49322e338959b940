"""Guardrails per tool: a tool's ``max_calls`` and ``cooldown_s`` across a run (or a solve's
rounds, on one ledger), a policy's limits that deny or ask past them, and ``caching`` with a
time to live. Time is a clock the tests move, never a sleep."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

import dagagent
from dagagent import execute
from dagagent.approval import Approval, ApprovalRequest, Limit, Policy, Rule, ask_later
from dagagent.errors import ConfigError, ToolDefinitionError
from dagagent.executors import Executor, get_executor
from dagagent.interceptors import Stamped, caching
from dagagent.results import TaskStatus
from dagagent.runner import CallLedger
from dagagent.settings import RunSettings

pytestmark = pytest.mark.anyio

EXECUTORS = ["serial", "levels", "dataflow", "dask"]


def make(name: str) -> Executor:
    if name == "dask":
        pytest.importorskip("distributed")
        return get_executor("dask", processes=False, n_workers=1, threads_per_worker=4)
    return get_executor(name)


class Clock:
    """Seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Tools:
    def __init__(self, clock: Clock) -> None:
        self.calls: list[str] = []
        self.registry = reg = dagagent.Registry()
        tools = self

        @reg.tool(max_calls=2)
        def ping(name: str) -> str:
            """A tool that may be called twice in a run."""
            tools.calls.append(f"ping:{name}")
            return name

        @reg.tool(cooldown_s=10)
        def post(name: str) -> str:
            """A tool that needs 10 s between calls."""
            tools.calls.append(f"post:{name}")
            return name

        @reg.tool
        def wait(seconds: float, after: Any = None) -> float:
            """Move the test's clock (time passing between two calls)."""
            clock.now += seconds
            return clock.now

        @reg.tool
        def send(to: str) -> str:
            tools.calls.append(f"send:{to}")
            return to


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def tools(clock: Clock) -> Tools:
    return Tools(clock)


def pings(n: int, **task: Any) -> dict[str, Any]:
    return {
        "goal": "ping",
        "tasks": [
            {"id": f"p{i}", "tool": "ping", "args": {"name": f"n{i}"}, **task} for i in range(n)
        ],
    }


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_max_calls_holds_across_a_run_even_for_concurrent_calls(
    executor: str, tools: Tools
) -> None:
    result = await execute(
        pings(5, retries=3),
        tools.registry,
        settings=RunSettings(executor=make(executor), on_failure="continue"),
    )
    statuses = [r.status for r in result.tasks.values()]
    assert statuses.count(TaskStatus.SUCCEEDED) == 2
    assert statuses.count(TaskStatus.FAILED) == 3
    assert len(tools.calls) == 2  # the tool itself ran exactly twice
    refused = [r for r in result.tasks.values() if r.status is TaskStatus.FAILED]
    for r in refused:
        assert r.error_type == "ToolLimitError"
        assert r.error == (
            "tool 'ping' may be called at most 2 times in a run (max_calls=2) and was called "
            "2 times"
        )
        assert r.attempts == 1  # never retried: another attempt would only be refused again
        assert r.traceback is None


async def test_a_ledger_given_to_several_runs_counts_them_all(tools: Tools) -> None:
    ledger = CallLedger(scope="solve")
    first = await execute(pings(1), tools.registry, ledger=ledger)
    second = await execute(
        pings(2),
        tools.registry,
        ledger=ledger,
        settings=RunSettings(executor="serial", on_failure="continue"),
    )
    assert first.ok and ledger.calls("ping") == 2
    assert [r.status for r in second.tasks.values()] == [TaskStatus.SUCCEEDED, TaskStatus.FAILED]
    assert "at most 2 times in a solve" in (second.tasks["p1"].error or "")
    # a run of its own starts from nothing
    assert (await execute(pings(2), tools.registry)).ok


async def test_cooldown_counts_from_the_start_of_the_last_call(tools: Tools, clock: Clock) -> None:
    plan = {
        "goal": "post twice, then once more after waiting",
        "tasks": [
            {"id": "first", "tool": "post", "args": {"name": "a"}},
            {"id": "soon", "tool": "post", "args": {"name": "b"}, "depends_on": ["first"]},
            {"id": "pause", "tool": "wait", "args": {"seconds": 10, "after": "${first}"}},
            {"id": "later", "tool": "post", "args": {"name": "c"}, "depends_on": ["pause", "soon"]},
        ],
    }
    ledger = CallLedger(clock=clock)
    result = await execute(
        plan,
        tools.registry,
        settings=RunSettings(executor="serial", on_failure="continue"),
        ledger=ledger,
    )
    soon = result.tasks["soon"]
    assert soon.status is TaskStatus.FAILED and soon.error_type == "ToolLimitError"
    assert soon.error == (
        "tool 'post' was called 0 s ago and needs 10 s between calls (cooldown_s=10): it may "
        "be called again in 10 s"
    )
    # 'later' depends on the refused task: skipped; the tool ran once
    assert result.tasks["later"].status is TaskStatus.SKIPPED
    assert tools.calls == ["post:a"]
    # once the cooldown has passed, the next call goes through
    plan2 = {"goal": "g", "tasks": [{"id": "again", "tool": "post", "args": {"name": "d"}}]}
    again = await execute(plan2, tools.registry, ledger=ledger)
    assert again.ok and tools.calls == ["post:a", "post:d"]
    clock.now += 5
    too_soon = await execute(plan2, tools.registry, ledger=ledger)
    assert "was called 5 s ago" in (too_soon.tasks["again"].error or "")


async def test_a_cache_hit_is_not_a_call_of_the_tool(tools: Tools) -> None:
    plan = {
        "goal": "g",
        "tasks": [{"id": f"p{i}", "tool": "ping", "args": {"name": "same"}} for i in range(4)],
    }
    result = await execute(
        plan, tools.registry, settings=RunSettings(executor="serial"), interceptors=[caching()]
    )
    assert result.ok and tools.calls == ["ping:same"]


def test_guardrails_are_checked_when_a_tool_is_defined() -> None:
    reg = dagagent.Registry()
    with pytest.raises(ToolDefinitionError, match="tool 'noop': max_calls must be >= 1"):
        reg.tool(max_calls=0)(noop)
    with pytest.raises(ToolDefinitionError, match="tool 'noop': cooldown_s must be > 0"):
        reg.tool(cooldown_s=-1)(noop)
    t = reg.tool(max_calls=3, cooldown_s=1.5)(noop)
    assert (t.max_calls, t.cooldown_s) == (3, 1.5)
    back = pickle.loads(pickle.dumps(t))  # as the Dask executor ships it to a worker
    assert (back.max_calls, back.cooldown_s) == (3, 1.5)


def noop() -> None:
    """Nothing."""


async def test_the_call_seam_refuses_a_call_past_the_limit(tools: Tools) -> None:
    ledger = CallLedger()
    ledger.count("ping")
    ledger.count("ping")
    calls = dagagent.runner.ToolCalls("r", tools.registry, ledger=ledger)
    with pytest.raises(dagagent.ToolLimitError) as caught:
        await calls.call("t", tools.registry.get("ping"), {"name": "x"})
    assert caught.value.tool == "ping" and caught.value.limit == "max_calls"


# ---------------------------------------------------------------------------- policies


async def test_a_policy_limit_denies_past_its_max_calls(tools: Tools) -> None:
    policy = Policy(limits=[Limit(tool="send", max_calls=1, name="one mail")])
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "a", "tool": "send", "args": {"to": "x"}},
            {"id": "b", "tool": "send", "args": {"to": "y"}, "depends_on": ["a"]},
        ],
    }
    result = await execute(
        plan,
        tools.registry,
        interceptors=[policy],
        settings=RunSettings(executor="serial", on_failure="continue"),
    )
    assert result.tasks["a"].status is TaskStatus.SUCCEEDED
    b = result.tasks["b"]
    assert b.status is TaskStatus.DENIED
    assert b.error == (
        "denied by limit 'one mail': tool 'send' may be called at most 1 time in a run "
        "(max_calls=1) and was called 1 time"
    )
    (decision,) = b.decisions or []
    assert decision.decision == "deny" and decision.rule == "limit 'one mail'"
    assert tools.calls == ["send:x"]


async def test_a_policy_limit_that_asks_lets_a_person_decide(tools: Tools) -> None:
    asked: list[ApprovalRequest] = []

    def ask(request: ApprovalRequest) -> Approval:
        asked.append(request)
        if request.args["to"] == "y":
            return Approval.approve("fine, one more", by="alice")
        return Approval.deny("enough mail", by="alice")

    policy = Policy(
        [Rule(tool="send", action="allow", name="mail ok")],
        ask=ask,
        limits=[Limit(tool=["send", "post"], max_calls=1, action="ask")],
    )
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "a", "tool": "send", "args": {"to": "x"}},
            {"id": "b", "tool": "send", "args": {"to": "y"}, "depends_on": ["a"]},
            {"id": "c", "tool": "send", "args": {"to": "z"}, "depends_on": ["b"]},
        ],
    }
    result = await execute(
        plan,
        tools.registry,
        interceptors=[policy],
        settings=RunSettings(executor="serial", on_failure="continue"),
    )
    assert [r.status for r in result.tasks.values()] == [
        TaskStatus.SUCCEEDED,
        TaskStatus.SUCCEEDED,
        TaskStatus.DENIED,
    ]
    assert tools.calls == ["send:x", "send:y"]
    assert [r.args["to"] for r in asked] == ["y", "z"]
    assert asked[0].reason is not None and "tools send, post may be called at most 1" in (
        asked[0].reason
    )
    assert "beyond limit #1" in asked[0].describe()
    b_decisions = [(d.decision, d.decided_by) for d in result.tasks["b"].decisions or []]
    assert b_decisions == [("allow", "rule 'mail ok'"), ("allow", "alice")]
    assert result.tasks["c"].error == "denied by alice: enough mail"


async def test_a_policy_limit_may_leave_the_question_to_a_person_later(tools: Tools) -> None:
    policy = Policy(ask=ask_later, limits=[Limit(tool="send", max_calls=1, action="ask")])
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "a", "tool": "send", "args": {"to": "x"}},
            {"id": "b", "tool": "send", "args": {"to": "y"}, "depends_on": ["a"]},
        ],
    }
    result = await execute(
        plan, tools.registry, interceptors=[policy], settings=RunSettings(executor="serial")
    )
    assert result.status is dagagent.RunStatus.PAUSED
    assert result.tasks["b"].status is TaskStatus.WAITING


async def test_a_policy_cooldown_uses_the_ledgers_clock(tools: Tools, clock: Clock) -> None:
    policy = Policy(limits=[Limit(tool="send", cooldown_s=60)])
    ledger = CallLedger(clock=clock)
    plan = {"goal": "g", "tasks": [{"id": "a", "tool": "send", "args": {"to": "x"}}]}
    assert (await execute(plan, tools.registry, interceptors=[policy], ledger=ledger)).ok
    clock.now += 59
    refused = await execute(plan, tools.registry, interceptors=[policy], ledger=ledger)
    assert refused.tasks["a"].status is TaskStatus.DENIED
    assert "was called 59 s ago and needs 60 s between calls" in (refused.tasks["a"].error or "")
    clock.now += 1
    assert (await execute(plan, tools.registry, interceptors=[policy], ledger=ledger)).ok


def test_policy_files_take_limits_and_say_what_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_text(
        json.dumps(
            {
                "default": "allow",
                "limits": [
                    {"tool": "send_*", "max_calls": 3, "cooldown_s": 60, "action": "ask"},
                    {"side_effects": True, "max_calls": 10, "name": "ten side effects"},
                ],
            }
        )
    )
    policy = dagagent.load_policy(path)
    assert [lim.summary() for lim in policy.limits] == [
        "ask tools send_* past max_calls=3 and cooldown_s=60",
        "deny any tool with side effects past max_calls=10",
    ]
    assert policy.describe()[-1] == (
        "limit 'ten side effects': deny any tool with side effects past max_calls=10"
    )
    for limits, message in [
        ([{"tool": "x"}], "limit #1: a limit needs max_calls, cooldown_s or both"),
        ([{"tool": "x", "max_call": 3}], "'max_call' is not a limit key"),
        ([{"tool": "x", "max_calls": 3, "action": "allow"}], "limit #1: action"),
        ([{"tool": "x", "cooldown_s": 0}], "limit cooldown_s must be > 0"),
        (["x"], "limit #1: must be an object"),
    ]:
        path.write_text(json.dumps({"limits": limits}))
        with pytest.raises(ConfigError, match=message):
            dagagent.load_policy(path)


# ---------------------------------------------------------------------------- caching


async def test_caching_with_a_time_to_live(tools: Tools, clock: Clock) -> None:
    cache: dict[str, Any] = {}
    cached = caching(cache, ttl_s=30, clock=clock)
    plan = {"goal": "g", "tasks": [{"id": "a", "tool": "send", "args": {"to": "x"}}]}
    for _ in range(2):
        assert (await execute(plan, tools.registry, interceptors=[cached])).ok
    assert tools.calls == ["send:x"]
    (entry,) = cache.values()
    assert isinstance(entry, Stamped) and entry.output == "x" and entry.at == clock.now
    clock.now += 29.9
    assert (await execute(plan, tools.registry, interceptors=[cached])).ok
    assert tools.calls == ["send:x"]
    clock.now += 0.1  # 30 s old: stale
    assert (await execute(plan, tools.registry, interceptors=[cached])).ok
    assert tools.calls == ["send:x", "send:x"]
    assert next(iter(cache.values())).at == clock.now  # replaced
    # a caching() without ttl_s reads the stamped entries too
    assert (await execute(plan, tools.registry, interceptors=[caching(cache)])).ok
    assert tools.calls == ["send:x", "send:x"]
    with pytest.raises(ConfigError, match="ttl_s must be a positive number"):
        caching(ttl_s=0)
