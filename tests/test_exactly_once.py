"""Exactly once, in one process: the intent of a call with side effects is on record before
the call, its outcome after; its idempotency key is the tool's to read; a resumed run never
makes a call again that took effect, and resolves one in doubt (a person, a reconciler, the
``in_doubt`` policy) instead of making it silently.

A crash is reproduced here without killing anything: the run is stopped while a call is in
flight (its outcome is then ``cancelled``), and its record is made what a SIGKILL leaves (the
run ``running`` under a process that is gone, the call ``started``, the task unrecorded).
``test_exactly_once_chaos.py`` kills real processes."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from backends import BACKENDS, both_backends
from eventually import until

import dagagent
from dagagent import Reconciled, RunStatus
from dagagent.settings import RunSettings
from dagagent.store import RunStore

pytestmark = pytest.mark.anyio


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Both event loops: the journal's thread wakes each on its own."""
    return both_backends(request)


def _dead_pid() -> int:
    """A process id no process can have (above Linux's largest, 2**22): the record of a run
    whose process is gone names one like it."""
    return 2**22 + 1


class World:
    """What the tools did, outside the run: one entry per effect, with its key."""

    def __init__(self) -> None:
        self.effects: list[tuple[str, str, Any]] = []  # (tool, key, value)
        self.hang_before: set[str] = set()  # task ids whose call hangs before its effect
        self.hang_after: set[str] = set()  # ... after it
        self.entered = anyio.Event()
        self.release = anyio.Event()

    def keys(self, tool: str | None = None) -> list[str]:
        return [k for t, k, _ in self.effects if tool is None or t == tool]

    def find(self, key: str) -> Any:
        return next((v for _, k, v in self.effects if k == key), None)


def registry(world: World, *, reconcile: Callable[..., Any] | None = None) -> dagagent.Registry:
    reg = dagagent.Registry()

    async def effect(tool: str, task: str, value: Any) -> dict[str, Any]:
        call = dagagent.current_call()
        if task in world.hang_before:
            world.entered.set()
            await world.release.wait()
        out = {"value": value, "key": call.idempotency_key}
        world.effects.append((tool, call.idempotency_key, out))
        if task in world.hang_after:
            world.entered.set()
            await world.release.wait()
        return out

    @reg.tool(side_effects=True, reconcile=reconcile)
    async def pay(n: int, task: str) -> dict[str, Any]:
        return await effect("pay", task, n)

    @reg.tool(side_effects=True, reconcile=reconcile)
    async def charge(n: int, task: str, api_token: str) -> dict[str, Any]:
        return await effect("charge", task, n)

    @reg.tool(side_effects=True)
    async def transfer(n: int, task: str, currency: str = "EUR") -> dict[str, Any]:
        return await effect("pay", task, f"{n} {currency}")

    @reg.tool(side_effects=True)
    def mail(n: int, task: str) -> dict[str, Any]:
        call = dagagent.current_call()  # a sync tool, in a worker thread
        out = {"value": n, "key": call.idempotency_key}
        world.effects.append(("mail", call.idempotency_key, out))
        return out

    @reg.tool
    def add(a: int, b: int) -> int:
        return a + b

    return reg


def _plan(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"goal": "effects", "tasks": list(tasks)}


PAY = {"id": "p", "tool": "pay", "args": {"n": 5, "task": "p"}}
AFTER = {"id": "s", "tool": "add", "args": {"a": "${p.value}", "b": 1}}


async def _crashed(
    store: Path,
    world: World,
    reg: dagagent.Registry,
    plan: dict[str, Any],
    *,
    after: bool,
    **options: Any,
) -> str:
    """Run ``plan`` (with ``options`` for ``execute``) until the call of task ``p`` is in
    flight (before or ``after`` its effect), then leave the record as a SIGKILL of the
    process would: the run's id."""
    (world.hang_after if after else world.hang_before).add("p")
    run_id = dagagent.new_run_id()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: dagagent.execute(plan, reg, store=store, run_id=run_id, **options))
        await world.entered.wait()
        tg.cancel_scope.cancel()
    world.hang_before.clear()
    world.hang_after.clear()
    world.entered = anyio.Event()
    with sqlite3.connect(store) as conn:
        (state,) = conn.execute("SELECT state FROM effects WHERE task_id = 'p'").fetchone()
        assert state == "cancelled"  # the stop was recorded: a kill records nothing
        conn.execute("UPDATE effects SET state = 'started', error = NULL, ended_at = NULL")
        conn.execute(
            "UPDATE runs SET status = 'running', pid = ?, finished_at = NULL WHERE id = ?",
            (_dead_pid(), run_id),
        )
        conn.execute("DELETE FROM tasks WHERE status != 'succeeded'")
    return run_id


async def test_the_intent_is_on_record_before_the_call_and_the_outcome_after(
    tmp_path: Path,
) -> None:
    store = tmp_path / "runs.db"
    seen: list[Any] = []
    reg = dagagent.Registry()

    @reg.tool(side_effects=True)
    def send(to: str) -> str:
        call = dagagent.current_call()
        with RunStore(store) as st:
            (e,) = st.effects(call.run_id)
        seen.append((e.key, e.state, e.in_doubt, e.args))
        return f"sent to {to}"

    result = await dagagent.execute(
        _plan({"id": "m", "tool": "send", "args": {"to": "ann"}}), reg, store=store
    )
    assert result.status is RunStatus.SUCCEEDED
    (key, state, in_doubt, args) = seen[0]
    assert (state, in_doubt, args) == ("started", False, {"to": "ann"})  # live: not in doubt
    with RunStore(store) as st:
        (e,) = st.effects(result.run_id)
    assert (e.key, e.state, e.output, e.task_id, e.element, e.attempt) == (
        key,
        "succeeded",
        "sent to ann",
        "m",
        None,
        1,
    )
    assert key.startswith("dga-") and len(key) == 36


async def test_keys_are_known_to_async_and_sync_tools_and_differ_by_call(tmp_path: Path) -> None:
    world = World()
    plan = _plan(
        PAY,
        {"id": "m", "tool": "mail", "args": {"n": 1, "task": "m"}},
        {
            "id": "each",
            "for_each": [1, 2, 1],
            "tool": "mail",
            "args": {"n": "${@item}", "task": "e"},
        },
    )
    first = await dagagent.execute(plan, registry(world), store=tmp_path / "runs.db")
    keys = world.keys()
    assert len(keys) == len(set(keys)) == 5  # equal arguments in two elements: two calls
    assert first.outputs["p"]["key"] in keys
    again = World()
    await dagagent.execute(plan, registry(again), run_id=first.run_id)
    assert sorted(again.keys()) == sorted(keys)  # the same calls again: the same keys
    other = World()
    await dagagent.execute(plan, registry(other))
    assert not set(other.keys()) & set(keys)  # another run: other keys


async def test_current_call_outside_a_side_effecting_call_says_why() -> None:
    reg = dagagent.Registry()

    @reg.tool
    def pure() -> str:
        return dagagent.current_call().idempotency_key

    result = await dagagent.execute(_plan({"id": "x", "tool": "pure"}), reg)
    assert result.tasks["x"].error_type == "NoCurrentCallError"
    assert "side_effects=True" in (result.tasks["x"].error or "")
    with pytest.raises(dagagent.NoCurrentCallError):
        dagagent.current_call()


def test_a_reconciler_needs_side_effects() -> None:
    with pytest.raises(dagagent.ToolDefinitionError, match="side_effects=True"):
        dagagent.Tool(lambda: 1, name="x", reconcile=lambda call: Reconciled.happened())


async def test_pure_tools_leave_no_effects(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    result = await dagagent.execute(
        _plan({"id": "a", "tool": "add", "args": {"a": 1, "b": 2}}), registry(World()), store=store
    )
    with RunStore(store) as st:
        assert st.effects(result.run_id) == []


async def test_a_retry_keeps_the_key(tmp_path: Path) -> None:
    keys: list[str] = []
    reg = dagagent.Registry()

    @reg.tool(side_effects=True, retries=2)
    def flaky() -> str:
        keys.append(dagagent.current_call().idempotency_key)
        if len(keys) < 3:
            raise ConnectionError("try again")
        return "ok"

    store = tmp_path / "runs.db"
    result = await dagagent.execute(
        _plan({"id": "f", "tool": "flaky"}),
        reg,
        store=store,
        settings=RunSettings(retry=dagagent.TaskRetryPolicy(base_delay_s=0)),
    )
    assert result.status is RunStatus.SUCCEEDED and len(set(keys)) == 1 and len(keys) == 3
    with RunStore(store) as st:
        (e,) = st.effects(result.run_id)
    assert (e.state, e.attempt) == ("succeeded", 3)


async def test_a_retry_after_a_timeout_makes_the_call_again_with_the_key(tmp_path: Path) -> None:
    """A call stopped by its task's timeout may have taken effect: the task's retry makes it
    again with the same key (only the key protects it), it does not wait for a person."""
    keys: list[tuple[str, int]] = []
    reg = dagagent.Registry()

    @reg.tool(side_effects=True, retries=1)
    async def pay() -> str:
        call = dagagent.current_call()
        keys.append((call.idempotency_key, call.attempt))
        if len(keys) == 1:
            await anyio.sleep_forever()
        return "paid"

    store = tmp_path / "runs.db"
    result = await dagagent.execute(
        _plan({"id": "p", "tool": "pay", "timeout_s": 0.5}),
        reg,
        store=store,
        settings=RunSettings(retry=dagagent.TaskRetryPolicy(base_delay_s=0)),
    )
    assert result.status is RunStatus.SUCCEEDED, result.tasks
    assert result.outputs["p"] == "paid"
    (key, _), (again, attempt) = keys
    assert again == key and attempt == 2
    with RunStore(store) as st:
        (e,) = st.effects(result.run_id)
    assert (e.key, e.state, e.attempt) == (key, "succeeded", 2)


@pytest.mark.parametrize("after", [False, True])
async def test_a_call_in_doubt_waits_for_a_person_and_never_runs_again_silently(
    tmp_path: Path, after: bool
) -> None:
    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    run_id = await _crashed(store, world, reg, _plan(PAY, AFTER), after=after)
    with RunStore(store) as st:
        (e,) = st.effects(run_id)
        assert e.in_doubt and st.list_runs()[0].in_doubt == 1
    effects_before = list(world.effects)
    result = await dagagent.resume(run_id, reg, store=store)
    assert result.status is RunStatus.PAUSED
    assert world.effects == effects_before  # not made again
    p = result.tasks["p"]
    assert p.status.value == "waiting" and p.error_type == "CallInDoubtError"
    (wait,) = p.decisions or []
    assert (wait.decision, wait.rule) == ("wait", "in doubt")
    with RunStore(store) as st:
        (asked,) = st.approvals(run_id)
        assert (asked.task_id, asked.rule, asked.tool) == ("p", "in doubt", "pay")
        if after:  # a person checks: it went through
            st.decide(run_id, "p", "happened", by="ann", output={"value": 5, "key": e.key})
        else:
            st.decide(run_id, "p", "allow", by="ann")
    result = await dagagent.resume(run_id, reg, store=store)
    assert result.status is RunStatus.SUCCEEDED
    assert world.keys("pay") == [e.key]  # exactly once, whichever way it went
    assert result.outputs["s"] == 6
    (decision,) = result.tasks["p"].decisions or []
    assert decision.decision == ("happened" if after else "allow")
    with RunStore(store) as st:
        (e,) = st.effects(run_id)
        assert e.state == "succeeded" and not e.in_doubt
        (used,) = [a for a in st.approval_history(run_id) if a.state == "used"]
    assert decision.at == used.decided_at  # when ann decided, not when the resume used it


async def test_a_person_may_deny_a_call_in_doubt(tmp_path: Path) -> None:
    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    run_id = await _crashed(store, world, reg, _plan(PAY, AFTER), after=False)
    await dagagent.resume(run_id, reg, store=store)
    with RunStore(store) as st:
        with pytest.raises(dagagent.DecisionError, match="in doubt"):
            st.decide(run_id, "p", "edit", by="ann", edit_args={"n": 6})
        st.decide(run_id, "p", "deny", by="ann", reason="refunded by hand")
    result = await dagagent.resume(run_id, reg, store=store)
    assert result.tasks["p"].status.value == "denied"
    assert "refunded by hand" in (result.tasks["p"].error or "")
    assert world.keys("pay") == []


@pytest.mark.parametrize("verdict", ["happened", "not_happened", "unknown", "raises", "junk"])
async def test_a_reconciler_decides_about_a_call_in_doubt(tmp_path: Path, verdict: str) -> None:
    store, world = tmp_path / "runs.db", World()
    asked: list[dagagent.CallIdentity] = []

    async def check(call: dagagent.CallIdentity) -> Any:
        asked.append(call)
        if verdict == "raises":
            raise ConnectionError("the bank does not answer")
        if verdict == "junk":
            return True
        if verdict == "unknown":
            return Reconciled.unknown("the bank's log is a day late")
        found = world.find(call.idempotency_key)
        return Reconciled.happened(found) if found else Reconciled.not_happened()

    reg = registry(world, reconcile=check)
    run_id = await _crashed(store, world, reg, _plan(PAY, AFTER), after=verdict == "happened")
    result = await dagagent.resume(run_id, reg, store=store)
    (call,) = asked
    assert (call.task_id, call.tool, call.args) == ("p", "pay", {"n": 5, "task": "p"})
    if verdict in ("happened", "not_happened"):
        assert result.status is RunStatus.SUCCEEDED
        assert len(world.keys("pay")) == 1 and world.keys("pay")[0] == call.idempotency_key
        (d,) = result.tasks["p"].decisions or []
        assert d.decision == ("happened" if verdict == "happened" else "allow")
        assert d.decided_by == "reconcile:check"
    else:  # it could not tell: a person decides
        assert result.status is RunStatus.PAUSED and world.keys("pay") == []
        (wait,) = result.tasks["p"].decisions or []
        assert wait.decision == "wait"
        why = {"unknown": "a day late", "raises": "ConnectionError", "junk": "returned bool"}
        assert why[verdict] in (wait.reason or "")


SECRET = "sekrit-123-token"
CHARGE = {"id": "p", "tool": "charge", "args": {"n": 5, "task": "p", "api_token": SECRET}}


def _holds_secret(store: Path) -> bool:
    return any(SECRET.encode() in f.read_bytes() for f in store.parent.glob(store.name + "*"))


@pytest.mark.parametrize("by", ["person", "reconciler"])
async def test_a_call_in_doubt_with_a_secret_is_found_and_decided_without_storing_it(
    tmp_path: Path, by: str
) -> None:
    """The record of a call with a secret that ``redacting()`` hides holds it redacted (so
    does its fingerprint); a resume (whose plan, from the store, is redacted too) finds the
    call by its key, asks about it with the same redacted arguments, and a decision about
    it by key (or its reconciler's) is matched with it: made once, with its key."""
    from dagagent.interceptors import redacting

    store, world = tmp_path / "runs.db", World()
    asked: list[dagagent.CallIdentity] = []

    def check(call: dagagent.CallIdentity) -> Reconciled:
        asked.append(call)
        return Reconciled.not_happened()

    reg = registry(world, reconcile=check if by == "reconciler" else None)
    hide = [redacting()]
    run_id = await _crashed(store, world, reg, _plan(CHARGE, AFTER), after=False, interceptors=hide)
    assert not _holds_secret(store)
    with RunStore(store) as st:
        (e,) = st.effects(run_id)
    assert e.in_doubt and e.args == {"n": 5, "task": "p", "api_token": "[redacted]"}
    if by == "person":
        paused = await dagagent.resume(run_id, reg, store=store, interceptors=hide)
        assert paused.status is RunStatus.PAUSED and world.effects == []  # found: not made
        with RunStore(store) as st:
            (question,) = st.approvals(run_id)
            assert question.args == e.args
            st.decide(run_id, "p", "allow", by="ann", key=e.key)
    result = await dagagent.resume(run_id, reg, store=store, interceptors=hide)
    assert result.status is RunStatus.SUCCEEDED and result.outputs["s"] == 6
    assert world.keys("charge") == [e.key]  # once, with the key of its intent
    if by == "reconciler":
        (call,) = asked  # the task's arguments as the resume resolves them: from the
        assert call.idempotency_key == e.key  # stored plan, as the tool gets them
        assert call.args == {"n": 5, "task": "p", "api_token": "[redacted]"}
    with RunStore(store) as st:
        (e,) = st.effects(run_id)
        assert e.state == "succeeded" and e.args["api_token"] == "[redacted]"
    assert not _holds_secret(store)


async def test_a_reconciler_sees_the_secret_an_agent_gave_a_call_in_doubt_the_store_does_not(
    tmp_path: Path,
) -> None:
    """An agent's call with a secret, in doubt after a crash: the resumed agent makes it
    again with the secret, the call is found by its key (that of its redacted arguments) and
    its reconciler gets the arguments as the model wrote them (in memory) to check with."""
    from dagagent.interceptors import redacting
    from dagagent.llm import LLMResponse, ScriptedLLM, ToolCall

    store, world = tmp_path / "runs.db", World()
    asked: list[dagagent.CallIdentity] = []

    def check(call: dagagent.CallIdentity) -> Reconciled:
        asked.append(call)
        found = world.find(call.idempotency_key)
        return Reconciled.happened(found) if found else Reconciled.not_happened()

    reg = registry(world, reconcile=check)
    hide = [redacting()]
    charge = ToolCall(id="c1", name="charge", arguments={"n": 5, "task": "p", "api_token": SECRET})
    plan = _plan({"id": "p", "instruction": "charge 5", "tools": ["charge"]})
    with ScriptedLLM([LLMResponse(tool_calls=[charge])]) as llm:
        run_id = await _crashed(store, world, reg, plan, after=True, interceptors=hide, llm=llm)
    (paid,) = world.keys("charge")
    with ScriptedLLM([LLMResponse(tool_calls=[charge]), "charged"]) as llm:
        result = await dagagent.resume(run_id, reg, store=store, interceptors=hide, llm=llm)
    assert result.status is RunStatus.SUCCEEDED and result.outputs["p"] == "charged"
    (call,) = asked
    assert call.idempotency_key == paid and call.args["api_token"] == SECRET
    assert world.keys("charge") == [paid]  # it happened: not made again
    assert not _holds_secret(store)


async def test_a_call_recorded_unredacted_is_found_by_a_resume_that_redacts(
    tmp_path: Path,
) -> None:
    """A run started without ``redacting()`` and resumed with it: its call in doubt, on
    record under the fingerprint of its plain arguments, is found all the same."""
    from dagagent.interceptors import redacting

    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    run_id = await _crashed(store, world, reg, _plan(CHARGE, AFTER), after=False)
    with RunStore(store) as st:
        (e,) = st.effects(run_id)
    hide = [redacting()]
    paused = await dagagent.resume(run_id, reg, store=store, interceptors=hide)
    assert paused.status is RunStatus.PAUSED and world.effects == []
    with RunStore(store) as st:
        (e,) = st.effects(run_id)  # its record now holds what the resume hides
        assert e.args == {"n": 5, "task": "p", "api_token": "[redacted]"}
        st.decide(run_id, "p", "allow", by="ann", key=e.key)
    result = await dagagent.resume(run_id, reg, store=store, interceptors=hide)
    assert result.status is RunStatus.SUCCEEDED and world.keys("charge") == [e.key]


@pytest.mark.parametrize("run_state", ["cancelled", "interrupted"])
async def test_a_revision_is_refused_while_a_call_cut_off_in_its_run_is_in_doubt(
    tmp_path: Path, run_state: str
) -> None:
    """A call cut off (its run stopped, its worker or server lost) is recorded ``cancelled``
    and is in doubt like one whose process died: a revision that would make it again, under
    a new key, is refused, and says what to do about it."""
    from dagagent.workflows.replan import revise_run, run_revision

    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    if run_state == "interrupted":  # its process died after the call was cut off
        run_id = await _crashed(store, world, reg, _plan(PAY, AFTER), after=False)
        with sqlite3.connect(store) as conn:
            conn.execute("UPDATE effects SET state = 'cancelled'")
        how = f"resume run {run_id} first"
    else:  # the run was stopped during the call
        world.hang_before.add("p")
        run_id = dagagent.new_run_id()
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: dagagent.execute(_plan(PAY, AFTER), reg, store=store, run_id=run_id)
            )
            await world.entered.wait()
            tg.cancel_scope.cancel()
        world.hang_before.clear()
        how = f"run {run_id} is cancelled and cannot be resumed"
    with RunStore(store) as st:
        (e,) = st.effects(run_id)
        assert e.state == "cancelled" and e.in_doubt
        record = st.get_run(run_id)
    assert record.status.value == run_state
    revision = await revise_run(record, reg)
    with pytest.raises(dagagent.DecisionError, match="in doubt") as refused:
        await run_revision(revision, reg, store=store)
    assert how in str(refused.value) and e.key in str(refused.value)
    assert world.effects == []


@pytest.mark.parametrize("policy", ["retry", "deny"])
async def test_the_in_doubt_policy(tmp_path: Path, policy: str) -> None:
    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    run_id = await _crashed(store, world, reg, _plan(PAY, AFTER), after=False)
    result = await dagagent.resume(
        run_id,
        reg,
        store=store,
        settings=RunSettings(in_doubt=policy),  # type: ignore[arg-type]
    )
    if policy == "retry":
        assert result.status is RunStatus.SUCCEEDED and len(world.keys("pay")) == 1
    else:
        assert result.tasks["p"].status.value == "denied" and world.keys("pay") == []
    with pytest.raises(dagagent.ConfigError, match="in_doubt"):
        RunSettings(in_doubt="maybe")  # type: ignore[arg-type]


async def test_the_in_doubt_policy_the_run_was_started_with_holds_on_resume(
    tmp_path: Path,
) -> None:
    """A run started with in_doubt="deny" whose process died mid-call: a resume given no
    settings denies the call in doubt (the default would leave it waiting for a person)."""
    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    run_id = await _crashed(
        store, world, reg, _plan(PAY, AFTER), after=False, settings=RunSettings(in_doubt="deny")
    )
    result = await dagagent.resume(run_id, reg, store=store)
    assert result.tasks["p"].status.value == "denied", result.tasks["p"]
    assert world.keys("pay") == []
    with RunStore(store) as st:
        assert st.get_run(run_id).settings["in_doubt"] == "deny"


async def test_a_call_that_took_effect_is_replayed_not_made_again(tmp_path: Path) -> None:
    """Its outcome is on record but its task's row is not (a kill between the two): the
    resumed run takes the recorded output."""
    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    plan = _plan(
        {"id": "p", "tool": "pay", "args": {"n": 5, "task": "p"}},
        {"id": "q", "tool": "pay", "args": {"n": 7, "task": "q"}, "depends_on": ["p"]},
        AFTER,
    )
    run_id = await _crashed(store, world, reg, plan, after=True)  # p took effect, in doubt
    with sqlite3.connect(store) as conn:
        conn.execute(
            "UPDATE effects SET state = 'succeeded', output = ?", ('{"value": 5, "key": "k"}',)
        )
        conn.execute("DELETE FROM tasks")
    result = await dagagent.resume(run_id, reg, store=store)
    assert result.status is RunStatus.SUCCEEDED
    assert len(world.keys("pay")) == 2  # p once (before the crash), q once
    assert result.outputs["p"] == {"value": 5, "key": "k"}  # as recorded, not made again
    (d,) = result.tasks["p"].decisions or []
    assert d.decision == "replayed"


async def test_an_intent_that_cannot_be_recorded_stops_the_call(tmp_path: Path) -> None:
    store, world = tmp_path / "runs.db", World()
    RunStore(store).close()
    with sqlite3.connect(store) as conn:
        conn.execute("DROP TABLE effects")  # a damaged store
    result = await dagagent.execute(_plan(PAY), registry(world), store=store)
    assert result.tasks["p"].status.value == "failed"
    assert "was not made: its intent could not be recorded first" in (result.tasks["p"].error or "")
    assert world.effects == []


async def test_an_agent_tasks_repeated_call_is_two_calls_and_replays_by_identity(
    tmp_path: Path,
) -> None:
    from dagagent.runner import Effects
    from dagagent.store import EffectRecord

    reg = registry(World())
    tool = reg.get("mail")
    effects = Effects("0123456789ab")
    one = effects.identify("t", None, tool, {"n": 1, "task": "t"}, 1, "agent")
    two = effects.identify("t", None, tool, {"n": 1, "task": "t"}, 1, "agent")
    retried = effects.identify("t", None, tool, {"n": 1, "task": "t"}, 2, "agent")
    assert one.idempotency_key != two.idempotency_key
    assert retried.idempotency_key == one.idempotency_key  # a retry: the same call again
    record = EffectRecord(
        run_id="0123456789ab",
        key=two.idempotency_key,
        task_id="t",
        tool="mail",
        fingerprint=two.fingerprint,
        state="succeeded",
        output="sent",
        started_at=0.0,
    )
    resumed = Effects("0123456789ab", prior=[record])
    first = resumed.identify("t", None, tool, {"n": 1, "task": "t"}, 1, "agent")
    second = resumed.identify("t", None, tool, {"n": 1, "task": "t"}, 1, "agent")
    assert await resumed.before(first, tool, [], []) == (False, None)  # not on record
    assert await resumed.before(second, tool, [], []) == (True, "sent")


async def test_a_success_stands_when_a_resume_is_stopped_before_it_gets_to_it(
    tmp_path: Path,
) -> None:
    """A resumed run that a denial stops at once still records, as they were, the tasks that
    succeeded before (they were never lost to 'cancelled: not run')."""
    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    policy = dagagent.Policy([dagagent.Rule(tool="pay", action="ask")], ask=dagagent.ask_later)
    plan = _plan(*({"id": t, "tool": "pay", "args": {"n": 1, "task": t}} for t in "abc"))
    first = await dagagent.execute(plan, reg, store=store, interceptors=[policy])
    with RunStore(store) as st:
        st.decide(first.run_id, "b", "allow", by="ann")
    second = await dagagent.resume(first.run_id, reg, store=store, interceptors=[policy])
    assert second.tasks["b"].status is dagagent.TaskStatus.SUCCEEDED
    with RunStore(store) as st:
        st.decide(first.run_id, "a", "deny", by="ann")
    third = await dagagent.resume(first.run_id, reg, store=store, interceptors=[policy])
    assert third.status is RunStatus.FAILED
    assert third.tasks["b"].status is dagagent.TaskStatus.SUCCEEDED  # not "cancelled"
    assert third.tasks["b"].output == second.tasks["b"].output
    assert len(world.keys("pay")) == 1


async def _kill_in_flight(
    store: Path, world: World, reg: dagagent.Registry, plan: dict[str, Any], policy: Any
) -> str:
    """Run ``plan`` (with ``policy``) until task ``p``'s call has taken effect, then leave the
    record as a SIGKILL would (``p``'s call started, with no outcome): the run's id."""
    world.hang_after.add("p")
    run_id = dagagent.new_run_id()
    async with anyio.create_task_group() as tg:
        tg.start_soon(
            lambda: dagagent.execute(plan, reg, store=store, run_id=run_id, interceptors=[policy])
        )
        await world.entered.wait()
        await anyio.wait_all_tasks_blocked()  # the other branch asked its question
        tg.cancel_scope.cancel()
    world.hang_after.clear()
    world.entered = anyio.Event()
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE effects SET state = 'started', error = NULL, ended_at = NULL")
        conn.execute(
            "UPDATE runs SET status = 'running', pid = ?, finished_at = NULL WHERE id = ?",
            (_dead_pid(), run_id),
        )
        conn.execute("DELETE FROM tasks WHERE status NOT IN ('succeeded', 'waiting')")
        # the questions the run asked stay open: a kill closes nothing
        conn.execute("UPDATE approvals SET state = 'waiting', note = NULL WHERE state = 'closed'")
    return run_id


@pytest.mark.parametrize("known", ["happened", "committed"])
async def test_a_call_that_took_effect_ends_its_task_succeeded_when_a_denial_stops_the_run_first(
    tmp_path: Path, known: str
) -> None:
    await _took_effect_then_denied(tmp_path, known, PAY)


async def test_a_success_taken_from_the_record_keeps_the_arguments_a_revision_compares(
    tmp_path: Path,
) -> None:
    """The task's record keeps the arguments as the plan gives them (not as the tool's
    validation fills them in: a default), so that a revision finds the success unchanged."""
    await _took_effect_then_denied(
        tmp_path, "happened", {**PAY, "tool": "transfer", "args": {"n": 5, "task": "p"}}
    )


async def _took_effect_then_denied(tmp_path: Path, known: str, pay: dict[str, Any]) -> None:
    """A call on record as having taken effect (a person said it happened, or its outcome
    was committed before the crash lost its task's row): a resume that a denial elsewhere
    stops before the task is scheduled records the task succeeded with that output (not
    'cancelled: not run', which would hide a payment made), and a revision reuses it."""
    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    policy = dagagent.Policy([dagagent.Rule(tool="mail", action="ask")], ask=dagagent.ask_later)
    # m (asked about) comes first: its denial stops the resumed run before p is scheduled
    plan = _plan({"id": "m", "tool": "mail", "args": {"n": 1, "task": "m"}}, pay)
    run_id = await _kill_in_flight(store, world, reg, plan, policy)
    (key,) = world.keys("pay")
    paid = world.find(key)
    if known == "committed":  # the outcome made it to the record, the task's row did not
        with sqlite3.connect(store) as conn:
            conn.execute(
                "UPDATE effects SET state = 'succeeded', output = ?, ended_at = 1",
                (json.dumps(paid),),
            )
    else:  # in doubt: the resume asks a person, who finds that it went through
        paused = await dagagent.resume(run_id, reg, store=store, interceptors=[policy])
        assert paused.status is RunStatus.PAUSED
        assert paused.tasks["p"].error_type == "CallInDoubtError"
        with RunStore(store) as st:
            st.decide(run_id, "p", "happened", by="ann", output=paid)
    with RunStore(store) as st:
        st.decide(run_id, "m", "deny", by="bob")
    result = await dagagent.resume(run_id, reg, store=store, interceptors=[policy])
    assert result.status is RunStatus.FAILED and result.tasks["m"].status.value == "denied"
    p = result.tasks["p"]
    assert p.status is dagagent.TaskStatus.SUCCEEDED, p
    assert p.output == paid and p.args == pay["args"]
    (note,) = p.decisions or []
    assert (note.decision, note.decided_by) == (
        ("happened", "ann") if known == "happened" else ("replayed", "record")
    )
    with RunStore(store) as st:
        record = st.get_run(run_id)
    assert record.tasks["p"].status is dagagent.TaskStatus.SUCCEEDED
    assert record.tasks["p"].output == paid
    # A revision of the run reuses the payment: it is never made again under a new key.
    revised = await dagagent.execute(
        plan, reg, store=store, reuse=dagagent.review.reuse_map(record)
    )
    assert revised.tasks["p"].status is dagagent.TaskStatus.REUSED
    assert revised.outputs["p"] == paid
    assert world.keys("pay") == [key]


async def test_map_elements_that_took_effect_stand_when_the_run_is_stopped_first(
    tmp_path: Path,
) -> None:
    """A map killed during its third element, the first two paid: a resume that a denial
    stops before the map runs again keeps the two payments as the elements' outputs (the
    third, in doubt, did not run), and makes none again."""
    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    plan = _plan(
        {"id": "first", "tool": "add", "args": {"a": 1, "b": 2}},
        {
            "id": "each",
            "for_each": ["e1", "e2", "e3"],
            "tool": "pay",
            "args": {"n": 1, "task": "${@item}"},
            "max_concurrency": 1,  # one at a time: e1 and e2 have ended when e3 starts
        },
    )
    world.hang_before.add("e3")
    run_id = dagagent.new_run_id()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: dagagent.execute(plan, reg, store=store, run_id=run_id))
        await world.entered.wait()
        tg.cancel_scope.cancel()
    world.hang_before.clear()
    paid = [world.find(k) for k in world.keys("pay")]
    assert len(paid) == 2
    with sqlite3.connect(store) as conn:  # what a SIGKILL leaves
        conn.execute("UPDATE effects SET state = 'started' WHERE state = 'cancelled'")
        conn.execute(
            "UPDATE runs SET status = 'running', pid = ?, finished_at = NULL", (_dead_pid(),)
        )
        conn.execute("DELETE FROM tasks WHERE task_id = 'each'")
    deny = dagagent.Policy([dagagent.Rule(tool="add", action="deny")])
    with sqlite3.connect(store) as conn:
        conn.execute("DELETE FROM tasks WHERE task_id = 'first'")  # runs again: denied
    result = await dagagent.resume(run_id, reg, store=store, interceptors=[deny])
    assert result.tasks["first"].status.value == "denied"
    each = result.tasks["each"]
    assert [e.status.value for e in each.elements or ()] == ["succeeded", "succeeded", "cancelled"]
    assert [e.output for e in each.elements or ()][:2] == paid
    assert each.status is dagagent.TaskStatus.CANCELLED  # the third did not run again
    # its call, cut off before the crash, is still in doubt: its record says so, not "not run"
    with RunStore(store) as st:
        (doubt,) = st.in_doubt_of_ended(run_id)
    third = (each.elements or [])[2].error or ""
    assert (doubt.task_id, doubt.element) == ("each", 2)
    assert third.startswith("not run again: ") and f"key {doubt.key}) is in doubt" in third
    assert len(world.keys("pay")) == 2  # none made again
    with RunStore(store) as st:
        recorded = st.get_run(run_id).tasks["each"]
    assert [e.output for e in recorded.elements or ()][:2] == paid


async def test_a_revision_takes_over_a_call_that_took_effect_in_a_task_that_failed_after_it(
    tmp_path: Path,
) -> None:
    """The call took effect, then its task failed (here an interceptor refused the output):
    the parent's record of the task does not hold the payment. A run revising it (its
    parent_id) takes the call over by identity instead of paying again under a new key."""
    store, world = tmp_path / "runs.db", World()
    reg = registry(world)

    async def refuse_output(call: Any, call_next: Any) -> Any:
        await call_next(call)
        raise ValueError("the bank's receipt did not parse")

    plan = _plan(PAY)
    first = await dagagent.execute(plan, reg, store=store, interceptors=[refuse_output])
    assert first.tasks["p"].status.value == "failed" and len(world.keys("pay")) == 1
    with RunStore(store) as st:
        (lost,) = st.effects(first.run_id)
        assert (lost.task_id, lost.state) == ("p", "succeeded")
    revised = await dagagent.execute(plan, reg, store=store, parent_id=first.run_id)
    assert revised.status is RunStatus.SUCCEEDED
    assert len(world.keys("pay")) == 1  # not made again
    assert revised.outputs["p"] == world.find(world.keys("pay")[0])
    (note,) = revised.tasks["p"].decisions or []
    assert (note.decision, note.decided_by) == ("replayed", f"run {first.run_id}")
    with RunStore(store) as st:
        (e,) = st.effects(revised.run_id)
        assert (e.state, e.resolution, e.resolved_by) == (
            "succeeded",
            "happened",
            f"run {first.run_id}",
        )
        assert e.output == revised.outputs["p"] and e.key != lost.key
    # Other arguments are another call: made.
    other = await dagagent.execute(
        _plan({**PAY, "args": {"n": 6, "task": "p"}}), reg, store=store, parent_id=first.run_id
    )
    assert other.status is RunStatus.SUCCEEDED and len(world.keys("pay")) == 2


async def test_a_revision_takes_over_a_success_it_runs_again_for_its_upstream(
    tmp_path: Path,
) -> None:
    """A task that succeeded, run again by a revision because a task upstream gave another
    output this time, makes the same call: taken over, not paid twice."""
    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    seen: list[int] = []

    @reg.tool
    def clock() -> int:
        seen.append(1)
        return len(seen)  # another output each run

    plan = _plan(
        {"id": "c", "tool": "clock"},
        {**PAY, "depends_on": ["c"]},
    )
    first = await dagagent.execute(plan, reg, store=store)
    with RunStore(store) as st:
        record = st.get_run(first.run_id)
    revised = await dagagent.execute(
        plan,
        reg,
        store=store,
        parent_id=first.run_id,
        reuse={"p": dagagent.review.reuse_map(record)["p"]},  # c runs again (a new version)
    )
    assert revised.tasks["c"].output == 2  # upstream changed: p is not reused...
    assert revised.tasks["p"].status is dagagent.TaskStatus.SUCCEEDED
    assert revised.outputs["p"] == first.outputs["p"]  # ...but its call is taken over
    assert len(world.keys("pay")) == 1


async def test_a_revision_takes_over_the_calls_an_agent_made_before_it_failed(
    tmp_path: Path,
) -> None:
    from dagagent.llm import LLMResponse, ScriptedLLM, ToolCall

    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    pay = ToolCall(id="c1", name="pay", arguments={"n": 3, "task": "ag"})

    def broken(request: Any) -> Any:
        raise ConnectionError("the model went away")

    plan = _plan({"id": "ag", "instruction": "pay 3", "tools": ["pay"]})
    with ScriptedLLM([LLMResponse(tool_calls=[pay]), broken]) as llm:
        first = await dagagent.execute(plan, reg, store=store, llm=llm)
    assert first.tasks["ag"].status.value == "failed" and len(world.keys("pay")) == 1
    with ScriptedLLM([LLMResponse(tool_calls=[pay]), "paid"]) as llm:
        revised = await dagagent.execute(plan, reg, store=store, llm=llm, parent_id=first.run_id)
    assert revised.outputs["ag"] == "paid"
    assert len(world.keys("pay")) == 1  # the agent's call was taken over, not made again
    (note,) = revised.tasks["ag"].decisions or []
    assert (note.decision, note.source) == ("replayed", "agent")


async def test_each_output_is_stored_once_and_every_reader_still_gets_it(tmp_path: Path) -> None:
    """A call's output is kept by its task's row (or its element's object there) once that
    row holds it; the call's row says where, and reads back the same output."""
    store, world = tmp_path / "runs.db", World()
    plan = _plan(
        PAY,
        {"id": "each", "for_each": [1, 2], "tool": "mail", "args": {"n": "${@item}", "task": "e"}},
        AFTER,
    )
    result = await dagagent.execute(plan, registry(world), store=store)
    assert result.status is RunStatus.SUCCEEDED
    with sqlite3.connect(store) as conn:
        rows = conn.execute("SELECT output, output_in FROM effects").fetchall()
    assert rows == [(None, "task")] * 3  # no copy on the calls' rows
    with RunStore(store) as st:
        effects = {(e.task_id, e.element): e.output for e in st.effects(result.run_id)}
        record = st.get_run(result.run_id)
    assert effects == {
        ("p", None): result.outputs["p"],
        ("each", 0): result.outputs["each"][0],
        ("each", 1): result.outputs["each"][1],
    }
    assert record.tasks["p"].output == result.outputs["p"]
    # a resume (here of the record a crash leaves after the rows were written) replays them
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE runs SET status = 'running', pid = ?", (_dead_pid(),))
        conn.execute("DELETE FROM tasks WHERE task_id = 's'")
    again = await dagagent.resume(result.run_id, registry(world), store=store)
    assert again.outputs == result.outputs and len(world.effects) == 3


async def test_a_call_that_is_made_again_keeps_its_own_output(tmp_path: Path) -> None:
    """A task that is not a success keeps no output: its call's row keeps its own (the
    record a resume replays from)."""
    store, world = tmp_path / "runs.db", World()

    async def refuse_output(call: Any, call_next: Any) -> Any:
        await call_next(call)
        raise ValueError("no")

    result = await dagagent.execute(
        _plan(PAY), registry(world), store=store, interceptors=[refuse_output]
    )
    with sqlite3.connect(store) as conn:
        ((output, where),) = conn.execute("SELECT output, output_in FROM effects").fetchall()
    assert where is None and json.loads(output) == world.find(world.keys()[0])
    assert result.tasks["p"].status.value == "failed"


def test_a_store_of_version_12_keeps_each_output_once_after_its_migration(
    tmp_path: Path,
) -> None:
    from dagagent.store import MIGRATIONS, SCHEMA_VERSION

    db = tmp_path / "v12.db"
    RunStore(db, migrations=MIGRATIONS[:12]).close()
    out = json.dumps({"id": "tr_1"})
    elements = [
        {"task_id": "m[0]", "status": "succeeded", "output": '"a"'},
        {"task_id": "m[1]", "status": "succeeded", "output": '"b"'},
    ]
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO runs (id, created, goal, plan, status) VALUES ('0123456789ab', 1, "
            "'g', '', 'succeeded')"
        )
        conn.executemany(
            "INSERT INTO tasks (run_id, task_id, status, output, elements) VALUES (?, ?, ?, ?, ?)",
            [
                ("0123456789ab", "p", "succeeded", out, None),
                ("0123456789ab", "m", "succeeded", '["a", "b"]', json.dumps(elements)),
                ("0123456789ab", "f", "failed", None, None),
            ],
        )
        conn.executemany(
            "INSERT INTO effects (run_id, key, task_id, element, tool, fingerprint, state, "
            "output, started_at) VALUES ('0123456789ab', ?, ?, ?, 'pay', 'fp', 'succeeded', ?, 1)",
            [
                ("k-p", "p", None, out),
                ("k-m0", "m", 0, '"a"'),
                ("k-m1", "m", 1, '"other"'),  # not what the row holds: kept
                ("k-f", "f", None, '"paid"'),  # its task failed: kept
            ],
        )
    with RunStore(db) as st:
        assert st.schema_version == SCHEMA_VERSION
        got = {e.key: e.output for e in st.effects("0123456789ab")}
    assert got == {"k-p": {"id": "tr_1"}, "k-m0": "a", "k-m1": "other", "k-f": "paid"}
    with sqlite3.connect(db) as conn:
        kept = dict(conn.execute("SELECT key, output FROM effects WHERE output_in IS NULL"))
    assert kept == {"k-m1": '"other"', "k-f": '"paid"'}


async def test_a_paused_maps_elements_stand_when_a_resume_is_stopped_before_it(
    tmp_path: Path,
) -> None:
    """A map task that paused (one element waits for a person, the others paid) keeps its
    paid elements when the resume is stopped by a denial before the map runs again."""
    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    policy = dagagent.Policy(
        [
            dagagent.Rule(tool="pay", args=lambda a: a["task"] == "e2", action="ask"),
            dagagent.Rule(tool="mail", action="ask"),
        ],
        ask=dagagent.ask_later,
    )
    plan = _plan(
        {"id": "m", "tool": "mail", "args": {"n": 1, "task": "m"}},
        {
            "id": "each",
            "for_each": ["e1", "e2", "e3"],
            "tool": "pay",
            "args": {"n": 1, "task": "${@item}"},
        },
    )
    first = await dagagent.execute(plan, reg, store=store, interceptors=[policy])
    assert first.status is RunStatus.PAUSED
    paid = [world.find(k) for k in world.keys("pay")]
    assert len(paid) == 2
    with RunStore(store) as st:
        st.decide(first.run_id, "m", "deny", by="ann")
    result = await dagagent.resume(first.run_id, reg, store=store, interceptors=[policy])
    assert result.status is RunStatus.FAILED
    each = result.tasks["each"]
    assert [e.status.value for e in each.elements or ()] == ["succeeded", "cancelled", "succeeded"]
    assert [e.output for e in each.elements or ()] == [paid[0], None, paid[1]]
    assert len(world.keys("pay")) == 2


async def _ended_in_doubt(store: Path, world: World, reg: dagagent.Registry, *, after: bool) -> str:
    """A run that ends failed with the call of task ``p`` in doubt: its timeout cut it off
    (before or ``after`` its effect) and no retry was left. The run's id."""
    (world.hang_after if after else world.hang_before).add("p")
    result = await dagagent.execute(_plan({**PAY, "timeout_s": 0.5}, AFTER), reg, store=store)
    world.hang_before.clear()
    world.hang_after.clear()
    assert result.status is RunStatus.FAILED, result.tasks
    with RunStore(store) as st:
        (e,) = st.effects(result.run_id)
        assert (e.state, e.in_doubt) == ("cancelled", True)
        assert [c.key for c in st.in_doubt_of_ended()] == [e.key]
    return result.run_id


async def _revision(store: Path, reg: dagagent.Registry, run_id: str) -> dagagent.RunResult:
    from dagagent.workflows.replan import revise_run, run_revision

    with RunStore(store) as st:
        record = st.get_run(run_id)
    return await run_revision(await revise_run(record, reg), reg, store=store)


async def test_a_call_in_doubt_of_an_ended_run_that_happened_is_taken_over_by_a_revision(
    tmp_path: Path,
) -> None:
    """The run ended (its timeout cut the payment off after it went through): nothing can
    resume it, and a revision that would pay again is refused. A person finds the payment
    at the bank and says so, with its output: the revision takes it over, and pays nothing."""
    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    run_id = await _ended_in_doubt(store, world, reg, after=True)
    (key,) = world.keys("pay")
    with pytest.raises(dagagent.DecisionError, match="cannot be resumed") as refused:
        await _revision(store, reg, run_id)
    assert f"dagagent approve {run_id} p --happened" in str(refused.value)
    receipt = world.find(key)
    with RunStore(store) as st:
        (e,) = st.resolve_in_doubt(
            run_id, "p", "happened", by="ann", reason="the bank has it", output=receipt
        )
        assert (e.state, e.resolution, e.resolved_by, e.reason) == (
            "succeeded",
            "happened",
            "ann",
            "the bank has it",
        )
        assert e.output == receipt and not e.in_doubt
        assert st.in_doubt_of_ended() == []
    revised = await _revision(store, reg, run_id)
    assert revised.status is RunStatus.SUCCEEDED, revised.tasks
    assert world.keys("pay") == [key]  # paid once, whatever ran after
    assert revised.outputs == {"p": receipt, "s": 6}
    (note,) = revised.tasks["p"].decisions or []
    assert (note.decision, note.decided_by) == ("replayed", f"run {run_id}")


async def test_a_call_in_doubt_of_an_ended_run_that_did_not_happen_is_made_again_with_its_key(
    tmp_path: Path,
) -> None:
    """The timeout cut the payment off before it went through; a person finds nothing at the
    bank: the revision makes it, once, under the key it was first made with (should the
    person be wrong, the bank sees that key again)."""
    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    run_id = await _ended_in_doubt(store, world, reg, after=False)
    assert world.effects == []
    with RunStore(store) as st:
        (e,) = st.resolve_in_doubt(run_id, "p", "not_happened", by="ann")
        assert (e.state, e.resolution, e.resolved_by) == ("cancelled", "not_happened", "ann")
        assert not e.in_doubt
    revised = await _revision(store, reg, run_id)
    assert revised.status is RunStatus.SUCCEEDED, revised.tasks
    assert world.keys("pay") == [e.key]  # once, with the parent's key
    assert revised.outputs["s"] == 6
    (note,) = revised.tasks["p"].decisions or []
    assert (note.decision, note.decided_by) == ("allow", "ann") and e.key in note.reason
    with RunStore(store) as st:
        (made,) = st.effects(revised.run_id)
    assert (made.key, made.state) == (e.key, "succeeded")


async def test_a_call_in_doubt_of_an_ended_run_denied_denies_the_revisions_task(
    tmp_path: Path,
) -> None:
    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    run_id = await _ended_in_doubt(store, world, reg, after=False)
    with RunStore(store) as st:
        st.resolve_in_doubt(run_id, "p", "denied", by="ann", reason="paid by hand")
    revised = await _revision(store, reg, run_id)
    assert revised.tasks["p"].status.value == "denied"
    assert "paid by hand" in str(revised.tasks["p"].error)
    assert world.effects == []


async def test_resolving_a_call_in_doubt_refuses_what_it_cannot_resolve(tmp_path: Path) -> None:
    """No call in doubt (a task without one, a key of another task, a call resolved already),
    a bad output, an output for several calls, a run that can still be resumed or runs."""
    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    run_id = await _ended_in_doubt(store, world, reg, after=False)
    with RunStore(store) as st:
        (e,) = st.effects(run_id)
        refusals = {
            "made no call with side effects": lambda: st.resolve_in_doubt(
                run_id, "s", "happened", by="ann"
            ),
            "made no call with the key": lambda: st.resolve_in_doubt(
                run_id, "s", "happened", by="ann", key=e.key
            ),
            "is not JSON": lambda: st.resolve_in_doubt(
                run_id, "p", "happened", by="ann", output=float("nan")
            ),
            "goes with 'happened'": lambda: st.resolve_in_doubt(
                run_id, "p", "not_happened", by="ann", output=1
            ),
            "one of happened": lambda: st.resolve_in_doubt(run_id, "p", "allow", by="ann"),
            "names who": lambda: st.resolve_in_doubt(run_id, "p", "happened", by=" "),
        }
        for words, attempt in refusals.items():
            with pytest.raises(dagagent.DecisionError, match=words):
                attempt()
        assert st.effects(run_id)[0].in_doubt  # none of them touched it
        with pytest.raises(dagagent.DecisionError, match=r"RunStore\.resolve_in_doubt"):
            st.decide(run_id, "p", "happened", by="ann")  # nothing asked: no question
        st.resolve_in_doubt(run_id, "p", "not_happened", by="ann", key=e.key)
        with pytest.raises(dagagent.DecisionError, match="not in doubt: it cancelled"):
            st.resolve_in_doubt(run_id, "p", "happened", by="bob", key=e.key)
        with pytest.raises(dagagent.DecisionError, match="has no call in doubt"):
            st.resolve_in_doubt(run_id, "p", "happened", by="bob")
    crashed = await _crashed(store, world, reg, _plan(PAY, AFTER), after=False)
    resumable = pytest.raises(dagagent.DecisionError, match="interrupted: it can be resumed")
    with RunStore(store) as st, resumable:
        st.resolve_in_doubt(crashed, "p", "happened", by="ann")
    with sqlite3.connect(store) as conn:
        conn.execute("UPDATE runs SET pid = ? WHERE id = ?", (os.getpid(), crashed))
    with RunStore(store) as st, pytest.raises(dagagent.DecisionError, match="is running"):
        st.resolve_in_doubt(crashed, "p", "happened", by="ann")


async def test_an_inherited_key_is_claimed_by_one_run_only(tmp_path: Path) -> None:
    """Two revisions that inherit the same key (a call found not to have happened in the run
    both revise): the intent of the second is not written while the first made the call
    under it, or may be making it; checked and written in one transaction."""
    from dagagent.store._effects import EffectJournal

    db = tmp_path / "r.db"
    RunStore(db).close()  # the schema
    journal = EffectJournal(db)
    call: dict[str, Any] = {
        "task_id": "pay",
        "element": None,
        "occurrence": 1,
        "tool": "pay",
        "fingerprint": "fp",
        "source": "plan",
        "args": None,
        "attempt": 1,
    }
    try:
        assert await journal.intent("a", "dga-k", **call, exclusive=True)
        assert not await journal.intent("b", "dga-k", **call, exclusive=True)  # a makes it
        assert await journal.intent("a", "dga-k", **call, exclusive=True)  # a again: its own
        await journal.outcome("a", "dga-k", "succeeded", output="1", error=None)
        assert not await journal.intent("b", "dga-k", **call, exclusive=True)  # a made it
        await journal.outcome("a", "dga-k", "failed", output=None, error="refused")
        assert await journal.intent("b", "dga-k", **call, exclusive=True)  # it did not happen
        assert await journal.intent("c", "dga-other", **call, exclusive=True)
    finally:
        journal.close()
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT run_id, key, state FROM effects ORDER BY run_id").fetchall()
    conn.close()
    assert rows == [
        ("a", "dga-k", "failed"),
        ("b", "dga-k", "started"),
        ("c", "dga-other", "started"),
    ]


async def test_two_revisions_at_once_make_a_call_found_not_to_have_happened_once(
    tmp_path: Path,
) -> None:
    """A person found that the payment did not happen; two revisions of the run then reach
    it at the same moment: one makes it, under the key it had, and the other's intent is
    refused (its task fails, nothing made). A third revision takes the payment over."""
    from dagagent.workflows.replan import revise_run, run_revision

    store, world = tmp_path / "runs.db", World()
    reg = registry(world)
    run_id = await _ended_in_doubt(store, world, reg, after=False)
    with RunStore(store) as st:
        (e,) = st.resolve_in_doubt(run_id, "p", "not_happened", by="ann")
        record = st.get_run(run_id)
    world.entered, world.release = anyio.Event(), anyio.Event()
    world.hang_after.add("p")  # the payment holds once made, until both revisions got to it
    results: list[dagagent.RunResult] = []

    async def revise() -> None:
        revision = await revise_run(record, reg, plan=_plan(PAY, AFTER))
        results.append(await run_revision(revision, reg, store=store))

    async with anyio.create_task_group() as tg:
        tg.start_soon(revise)
        tg.start_soon(revise)
        # one revision ends (refused) while the other holds its payment, or both paid
        await until(lambda: results or len(world.keys("pay")) > 1, "a revision to end or pay")
        world.hang_after.clear()
        world.release.set()
    assert world.keys("pay") == [e.key]  # once
    refused, made = results
    assert refused.status is RunStatus.FAILED and made.status is RunStatus.SUCCEEDED
    error = refused.tasks["p"].error or ""
    assert f"another run made it under the same key ({e.key})" in error
    third = await _revision(store, reg, run_id)
    assert third.status is RunStatus.SUCCEEDED
    assert third.outputs["p"] == made.outputs["p"] and world.keys("pay") == [e.key]
