"""How the levels and dataflow executors stop: fail-fast stops every task not started yet, a
swallowed cancellation is delivered again, a shielded scope holds, and nothing outlives the
run."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

import dagagent
from dagagent.events import TaskFinished, TaskStarted
from dagagent.results import TaskStatus
from dagagent.settings import RunSettings

pytestmark = pytest.mark.anyio

PARALLEL = ["levels", "dataflow"]
LONG = 30  # a bound no passing test comes near: a worker anyio cannot cancel hangs the run


def _started(events: list[Any]) -> list[str]:
    return [e.task_id for e in events if isinstance(e, TaskStarted)]


@pytest.mark.parametrize("executor", PARALLEL)
async def test_a_failure_before_a_thousand_siblings_started_starts_none_of_them(
    executor: str,
) -> None:
    # "first" fails at once, before any of its 1,000 siblings of the level has run a step:
    # none of them may start (each is cancelled before its first step, and never recorded as
    # started).
    reg = dagagent.Registry()
    called: list[str] = []

    @reg.tool
    async def first() -> None:
        raise RuntimeError("boom")

    @reg.tool
    async def block(name: str) -> None:
        called.append(name)
        await anyio.sleep_forever()

    tasks: list[dict[str, Any]] = [{"id": "first", "tool": "first"}]
    tasks += [{"id": f"b{i}", "tool": "block", "args": {"name": f"b{i}"}} for i in range(1000)]
    events: list[Any] = []
    with anyio.fail_after(LONG):
        result = await dagagent.execute(
            {"tasks": tasks},
            reg,
            listeners=[events.append],
            settings=RunSettings(executor=executor),
        )
    assert result.tasks["first"].status is TaskStatus.FAILED
    assert called == []
    assert _started(events) == ["first"]
    queued = [result.tasks[f"b{i}"] for i in range(1000)]
    assert all(r.status is TaskStatus.CANCELLED and r.attempts == 0 for r in queued)


@pytest.mark.parametrize("executor", PARALLEL)
async def test_a_failure_cancels_running_workers_and_none_waiting_for_a_slot_starts(
    executor: str,
) -> None:
    # 10 tasks block forever in their slots, 989 wait for one. When "bad" fails, the 10 must
    # be cancelled (or the run never ends), and the slots they free go to tasks that must not
    # start: the run is stopped.
    reg = dagagent.Registry()
    called: list[str] = []
    full = anyio.Event()  # every slot but bad's is held by a started task

    @reg.tool
    async def bad() -> None:
        await full.wait()
        raise RuntimeError("boom")

    @reg.tool
    async def block(name: str) -> None:
        called.append(name)
        if len(called) == 10:
            full.set()
        await anyio.sleep_forever()

    tasks: list[dict[str, Any]] = [{"id": "bad", "tool": "bad"}]
    tasks += [{"id": f"b{i}", "tool": "block", "args": {"name": f"b{i}"}} for i in range(999)]
    events: list[Any] = []
    with anyio.fail_after(LONG):
        result = await dagagent.execute(
            {"tasks": tasks},
            reg,
            listeners=[events.append],
            settings=RunSettings(executor=executor, max_concurrency=11),
        )
    started = _started(events)
    assert len(started) == 11 and started[0] == "bad"
    assert sorted(called) == sorted(started[1:])
    for task_id, r in result.tasks.items():
        if task_id == "bad":
            assert r.status is TaskStatus.FAILED
        elif task_id in started:
            assert r.status is TaskStatus.CANCELLED and r.attempts == 1
        else:
            assert r.status is TaskStatus.CANCELLED and r.attempts == 0, task_id


@pytest.mark.parametrize("executor", PARALLEL)
async def test_a_swallowed_cancellation_is_delivered_again(executor: str) -> None:
    reg = dagagent.Registry()
    swallowed = entered = 0
    all_in = anyio.Event()

    @reg.tool
    async def bad() -> None:
        await all_in.wait()  # every sibling is in its tool
        raise RuntimeError("boom")

    @reg.tool
    async def stubborn() -> None:
        nonlocal swallowed, entered
        entered += 1
        if entered == 5:
            all_in.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            swallowed += 1
        await anyio.sleep_forever()  # cancelled again, at once: the run is still stopped

    tasks = [{"id": "bad", "tool": "bad"}] + [{"id": f"s{i}", "tool": "stubborn"} for i in range(5)]
    with anyio.fail_after(LONG):
        result = await dagagent.execute(
            {"tasks": tasks}, reg, settings=RunSettings(executor=executor)
        )
    assert swallowed == 5
    assert all(result.tasks[f"s{i}"].status is TaskStatus.CANCELLED for i in range(5))


@pytest.mark.parametrize("executor", PARALLEL)
async def test_a_shielded_scope_in_a_worker_holds_and_the_run_waits_for_it(executor: str) -> None:
    reg = dagagent.Registry()
    finished: list[str] = []
    entered: list[str] = []
    all_in = anyio.Event()

    @reg.tool
    async def bad() -> None:
        await all_in.wait()  # every sibling is in its shielded scope
        raise RuntimeError("boom")

    @reg.tool
    async def careful(name: str) -> None:
        with anyio.CancelScope(shield=True):
            entered.append(name)
            if len(entered) == 5:
                all_in.set()
            for _ in range(20):  # awaits, not cut by the run's cancellation
                await anyio.lowlevel.checkpoint()
            finished.append(name)
        await anyio.sleep_forever()

    tasks: list[dict[str, Any]] = [{"id": "bad", "tool": "bad"}]
    tasks += [{"id": f"c{i}", "tool": "careful", "args": {"name": f"c{i}"}} for i in range(5)]
    with anyio.fail_after(LONG):
        result = await dagagent.execute(
            {"tasks": tasks}, reg, settings=RunSettings(executor=executor)
        )
    assert sorted(finished) == [f"c{i}" for i in range(5)]  # all of them, before execute ended
    assert all(result.tasks[f"c{i}"].status is TaskStatus.CANCELLED for i in range(5))


@pytest.mark.parametrize("executor", PARALLEL)
async def test_a_cancelled_caller_leaves_no_worker_running(executor: str) -> None:
    reg = dagagent.Registry()
    running = 0
    entered = anyio.Event()

    @reg.tool
    async def slow(name: str) -> None:
        nonlocal running
        running += 1
        if running == 100:
            entered.set()
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.01)  # cleanup that awaits
            running -= 1

    plan = {
        "tasks": [{"id": f"t{i}", "tool": "slow", "args": {"name": f"t{i}"}} for i in range(100)]
    }
    with anyio.fail_after(LONG):
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                await dagagent.execute(plan, reg, settings=RunSettings(executor=executor))

            tg.start_soon(run)
            await entered.wait()
            tg.cancel_scope.cancel()
    assert running == 0  # every worker's cleanup ran before the group ended


@pytest.mark.parametrize("executor", PARALLEL)
async def test_a_sync_tools_result_after_the_run_stopped_is_dropped(executor: str) -> None:
    reg = dagagent.Registry()
    release, all_returned = threading.Event(), threading.Event()
    returned: list[str] = []
    entered = 0
    lock, all_in = threading.Lock(), threading.Event()

    @reg.tool
    async def bad() -> None:
        await anyio.to_thread.run_sync(all_in.wait, LONG)  # every sibling is in its thread
        raise RuntimeError("boom")

    @reg.tool
    def held(name: str) -> str:
        nonlocal entered
        with lock:
            entered += 1
            if entered == 3:
                all_in.set()
        release.wait(LONG)
        returned.append(name)
        if len(returned) == 3:
            all_returned.set()
        return name

    tasks: list[dict[str, Any]] = [{"id": "bad", "tool": "bad"}]
    tasks += [{"id": f"h{i}", "tool": "held", "args": {"name": f"h{i}"}} for i in range(3)]
    try:
        with anyio.fail_after(LONG):
            result = await dagagent.execute(
                {"tasks": tasks}, reg, settings=RunSettings(executor=executor)
            )
    finally:
        release.set()
    await anyio.to_thread.run_sync(all_returned.wait, LONG)
    assert sorted(returned) == ["h0", "h1", "h2"]  # the functions did return...
    for i in range(3):  # ... after their tasks were recorded as cancelled, which stands
        r = result.tasks[f"h{i}"]
        assert r.status is TaskStatus.CANCELLED and r.output is None


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _fan_plan(width: int) -> dict[str, Any]:
    """A task ("root", tool "hop"), ``width`` tasks after it ("hop"), then one joining them
    all ("join")."""
    middle = [f"m{i}" for i in range(width)]
    return {
        "tasks": [
            {"id": "root", "tool": "hop", "args": {"name": "root"}},
            *({"id": t, "tool": "hop", "args": {"name": "${root}"}} for t in middle),
            {"id": "join", "tool": "join", "args": {"names": [f"${{{t}}}" for t in middle]}},
        ]
    }


def _leaf(exc: BaseException) -> BaseException:
    while (group := getattr(exc, "exceptions", None)) is not None:  # an exception group
        exc = group[0]
    return exc


# -- batches (the levels executor): workers park between levels -------------------------------


async def test_a_failure_in_a_later_level_cancels_it_and_runs_nothing_after() -> None:
    reg = dagagent.Registry()
    started: list[str] = []

    @reg.tool
    async def hop(name: str) -> str:
        started.append(name)
        if name == "l2-0":
            await anyio.lowlevel.checkpoint()
            raise RuntimeError("boom")
        if name.startswith("l2-"):
            await anyio.sleep_forever()
        await anyio.lowlevel.checkpoint()
        return name

    with anyio.fail_after(LONG):
        result = await dagagent.execute(
            _levels_plan(5, 4), reg, settings=RunSettings(executor="levels")
        )
    statuses = {t: r.status for t, r in result.tasks.items()}
    assert statuses["l2-0"] is TaskStatus.FAILED
    assert {statuses[f"l2-{j}"] for j in (1, 2, 3)} == {TaskStatus.CANCELLED}
    assert all(statuses[f"l{i}-{j}"] is TaskStatus.SUCCEEDED for i in (0, 1) for j in range(4))
    assert not [n for n in started if n.startswith(("l3-", "l4-"))]


@pytest.mark.asyncio_only("the cancellation is called from the event loop, as a stop signal's is")
async def test_a_run_cancelled_as_its_level_ends_starts_nothing_of_the_next_one() -> None:
    """The run is cancelled (Ctrl-C) in the turn of the event loop after a task of the level
    ended, whose end had already woken the level's owner: anyio does not cancel a task that
    is being woken, so the level's task group can end without raising. The next level must
    not start: its task would run without the output of the one cancelled (and fail)."""
    reg = dagagent.Registry()
    stop = anyio.CancelScope()  # the caller's, as the command line's stop signal cancels it
    b_started = anyio.Event()

    @reg.tool
    async def first() -> str:
        await b_started.wait()
        # as a stop signal does (call_soon_threadsafe): in the next turn of the loop, once
        # this task's end has woken the level's owner
        asyncio.get_running_loop().call_soon(stop.cancel)
        return "a"

    @reg.tool
    async def block() -> str:
        b_started.set()
        await anyio.sleep_forever()
        return "b"

    @reg.tool
    async def join(a: str, b: str) -> str:
        return a + b

    plan = {
        "tasks": [
            {"id": "a", "tool": "first"},
            {"id": "b", "tool": "block"},
            {"id": "c", "tool": "join", "args": {"a": "${a}", "b": "${b}"}},
        ]
    }
    events: list[Any] = []
    with anyio.fail_after(LONG), stop:
        await dagagent.execute(
            plan, reg, listeners=[events.append], settings=RunSettings(executor="levels")
        )
    assert stop.cancelled_caught  # the run was cancelled, not ended
    finished = {e.result.task_id: e.result for e in events if isinstance(e, TaskFinished)}
    assert _started(events) == ["a", "b"]
    assert {t: r.status.value for t, r in finished.items()} == {
        "a": "succeeded",
        "b": "cancelled",
        "c": "cancelled",
    }
    assert finished["c"].error is not None and finished["c"].error.startswith("not run")


async def test_a_failure_under_continue_skips_its_descendants_and_the_levels_go_on() -> None:
    reg = dagagent.Registry()

    @reg.tool
    async def hop(name: str) -> str:
        await anyio.lowlevel.checkpoint()
        if name == "l1-2":
            raise RuntimeError("boom")
        return name

    with anyio.fail_after(LONG):
        result = await dagagent.execute(
            _levels_plan(4, 4), reg, settings=RunSettings(executor="levels", on_failure="continue")
        )
    statuses = {t: r.status.value for t, r in result.tasks.items()}
    assert statuses.pop("l1-2") == "failed"
    assert statuses.pop("l2-2") == statuses.pop("l3-2") == "skipped"
    assert set(statuses.values()) == {"succeeded"}


@pytest.mark.parametrize("executor", ["serial", "levels", "dataflow"])
@pytest.mark.parametrize("on_failure", ["cancel", "continue"])
async def test_a_finished_run_leaves_no_cycle_holding_its_graph(
    executor: str, on_failure: str
) -> None:
    """Once execute() returns, the graph it ran is freed as soon as nobody holds it, without
    the cycle collector: a pool whose ``after`` pushes dependents holds itself through it,
    and would keep a run's graph (a million tasks' worth, say) until a full collection."""
    import gc
    import weakref

    registry = dagagent.Registry()

    @registry.tool
    async def step(fail: bool = False) -> None:
        """A task that may fail."""
        if fail:
            raise RuntimeError("on purpose")

    tasks: list[dict[str, Any]] = [{"id": "t0", "tool": "step"}]
    for i in range(1, 30):
        tasks.append({"id": f"t{i}", "tool": "step", "depends_on": [f"t{i - 1}", "t0"]})
    tasks.append({"id": "bad", "tool": "step", "args": {"fail": True}, "depends_on": ["t3"]})
    graph = dagagent.validate({"tasks": tasks}, registry)
    held = weakref.ref(graph)
    gc.collect()
    gc.disable()
    try:
        result = await dagagent.execute(
            graph, registry, settings=RunSettings(executor=executor, on_failure=on_failure)
        )
        del graph
        assert held() is None
    finally:
        gc.enable()
    assert result.tasks["bad"].status == "failed"


def _levels_plan(levels: int, width: int, tool: str = "hop") -> dict[str, Any]:
    return {
        "tasks": [
            {
                "id": f"l{i}-{j}",
                "tool": tool,
                "args": {"name": f"l{i}-{j}"},
                "depends_on": [f"l{i - 1}-{j}"] if i else [],
            }
            for i in range(levels)
            for j in range(width)
        ]
    }
