"""The worker pool of the levels and dataflow executors: how its workers are spawned (as members
of the task group's cancel scope on asyncio, with ``start_soon`` elsewhere) and that anyio's
cancellation reaches them as it reaches spawned tasks — fail-fast stops every queued task from
starting, a swallowed cancellation is delivered again, a shielded scope holds, and no worker
outlives the run."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from functools import partial
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

import dagagent
from dagagent.events import TaskStarted
from dagagent.executors import _pool
from dagagent.results import TaskStatus

pytestmark = pytest.mark.anyio

PARALLEL = ["levels", "dataflow"]
LONG = 30  # a bound no passing test comes near: a worker anyio cannot cancel hangs the run


@pytest.fixture(params=["asyncio-tasks", "start_soon"])
def spawn(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Every test runs with both ways of spawning a worker."""
    if request.param == "start_soon":
        monkeypatch.setattr(_pool, "_backend", None)
    yield request.param


async def test_workers_are_asyncio_tasks_in_the_groups_scope_on_asyncio() -> None:
    # The fast path is taken where it can be (else every test below runs start_soon twice).
    async with anyio.create_task_group() as tg:
        pool: _pool.WorkerPool[None] = _pool.WorkerPool(tg, _nothing, _ignore)
        assert _pool._asyncio_spawner(pool) is not None

        async def elsewhere() -> None:  # not the group's owner: no fast path
            assert _pool._asyncio_spawner(pool) is None

        tg.start_soon(elsewhere)


async def _nothing(task_id: str) -> None:
    await anyio.lowlevel.checkpoint()


def _ignore(task_id: str, r: None) -> None:
    pass


def _started(events: list[Any]) -> list[str]:
    return [e.task_id for e in events if isinstance(e, TaskStarted)]


@pytest.mark.parametrize("executor", PARALLEL)
async def test_a_failure_while_a_thousand_blocking_tasks_are_queued_starts_none_of_them(
    executor: str, spawn: str
) -> None:
    # "first" blocks once, so the pool spawns a worker for each of the 1,000 queued tasks;
    # it fails before any of them has run a step: none of them may start.
    reg = dagagent.Registry()
    called: list[str] = []

    @reg.tool
    async def first() -> None:
        await anyio.lowlevel.checkpoint()
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
            {"tasks": tasks}, reg, executor=executor, listeners=[events.append]
        )
    assert result.tasks["first"].status is TaskStatus.FAILED
    assert called == []
    assert _started(events) == ["first"]
    queued = [result.tasks[f"b{i}"] for i in range(1000)]
    assert all(r.status is TaskStatus.CANCELLED and r.attempts == 0 for r in queued)


@pytest.mark.parametrize("executor", PARALLEL)
async def test_a_failure_cancels_running_workers_and_none_waiting_for_a_slot_starts(
    executor: str, spawn: str
) -> None:
    # 10 tasks block forever in their slots, 989 wait for one. When "bad" fails, the 10 must
    # be cancelled (or the run never ends), and the slots they free go to tasks that must not
    # start: the run is stopped.
    reg = dagagent.Registry()
    called: list[str] = []

    @reg.tool
    async def bad() -> None:
        await anyio.sleep(0.05)
        raise RuntimeError("boom")

    @reg.tool
    async def block(name: str) -> None:
        called.append(name)
        await anyio.sleep_forever()

    tasks: list[dict[str, Any]] = [{"id": "bad", "tool": "bad"}]
    tasks += [{"id": f"b{i}", "tool": "block", "args": {"name": f"b{i}"}} for i in range(999)]
    events: list[Any] = []
    with anyio.fail_after(LONG):
        result = await dagagent.execute(
            {"tasks": tasks},
            reg,
            executor=executor,
            max_concurrency=11,
            listeners=[events.append],
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
async def test_a_swallowed_cancellation_is_delivered_again(executor: str, spawn: str) -> None:
    reg = dagagent.Registry()
    swallowed = 0

    @reg.tool
    async def bad() -> None:
        await anyio.sleep(0.05)
        raise RuntimeError("boom")

    @reg.tool
    async def stubborn() -> None:
        nonlocal swallowed
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            swallowed += 1
        await anyio.sleep_forever()  # cancelled again, at once: the run is still stopped

    tasks = [{"id": "bad", "tool": "bad"}] + [{"id": f"s{i}", "tool": "stubborn"} for i in range(5)]
    with anyio.fail_after(LONG):
        result = await dagagent.execute({"tasks": tasks}, reg, executor=executor)
    assert swallowed == 5
    assert all(result.tasks[f"s{i}"].status is TaskStatus.CANCELLED for i in range(5))


@pytest.mark.parametrize("executor", PARALLEL)
async def test_a_shielded_scope_in_a_worker_holds_and_the_run_waits_for_it(
    executor: str, spawn: str
) -> None:
    reg = dagagent.Registry()
    finished: list[str] = []

    @reg.tool
    async def bad() -> None:
        await anyio.sleep(0.05)
        raise RuntimeError("boom")

    @reg.tool
    async def careful(name: str) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.sleep(0.3)  # not cut by the run's cancellation
            finished.append(name)
        await anyio.sleep_forever()

    tasks: list[dict[str, Any]] = [{"id": "bad", "tool": "bad"}]
    tasks += [{"id": f"c{i}", "tool": "careful", "args": {"name": f"c{i}"}} for i in range(5)]
    with anyio.fail_after(LONG):
        result = await dagagent.execute({"tasks": tasks}, reg, executor=executor)
    assert sorted(finished) == [f"c{i}" for i in range(5)]  # all of them, before execute ended
    assert all(result.tasks[f"c{i}"].status is TaskStatus.CANCELLED for i in range(5))


@pytest.mark.parametrize("executor", PARALLEL)
async def test_a_cancelled_caller_leaves_no_worker_running(executor: str, spawn: str) -> None:
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
                await dagagent.execute(plan, reg, executor=executor)

            tg.start_soon(run)
            await entered.wait()
            tg.cancel_scope.cancel()
    assert running == 0  # every worker's cleanup ran before the group ended


@pytest.mark.parametrize("executor", PARALLEL)
async def test_a_sync_tools_result_after_the_run_stopped_is_dropped(
    executor: str, spawn: str
) -> None:
    reg = dagagent.Registry()
    release, all_returned = threading.Event(), threading.Event()
    returned: list[str] = []

    @reg.tool
    async def bad() -> None:
        await anyio.sleep(0.05)
        raise RuntimeError("boom")

    @reg.tool
    def held(name: str) -> str:
        release.wait(LONG)
        returned.append(name)
        if len(returned) == 3:
            all_returned.set()
        return name

    tasks: list[dict[str, Any]] = [{"id": "bad", "tool": "bad"}]
    tasks += [{"id": f"h{i}", "tool": "held", "args": {"name": f"h{i}"}} for i in range(3)]
    try:
        with anyio.fail_after(LONG):
            result = await dagagent.execute({"tasks": tasks}, reg, executor=executor)
    finally:
        release.set()
    await anyio.to_thread.run_sync(all_returned.wait, LONG)
    assert sorted(returned) == ["h0", "h1", "h2"]  # the functions did return...
    for i in range(3):  # ... after their tasks were recorded as cancelled, which stands
        r = result.tasks[f"h{i}"]
        assert r.status is TaskStatus.CANCELLED and r.output is None


async def test_an_error_in_a_worker_ends_the_pool_and_is_raised() -> None:
    # ``after`` is the executor's own code: an exception there is a bug, raised from drive()
    # once every other worker has been cancelled and has ended.
    ended: list[str] = []

    async def run(task_id: str) -> str:
        try:
            if task_id == "bad":
                await anyio.lowlevel.checkpoint()
            else:
                await anyio.sleep_forever()
        finally:
            ended.append(task_id)
        return task_id

    def after(task_id: str, r: str) -> None:
        if r == "bad":
            raise KeyError("a bug")

    for backend in (_pool._backend, None):
        ended.clear()
        _pool._backend, saved = backend, _pool._backend
        try:
            with anyio.fail_after(LONG), pytest.raises(BaseException) as info:
                async with anyio.create_task_group() as tg:
                    pool: _pool.WorkerPool[str] = _pool.WorkerPool(tg, run, after)
                    pool.extend(["a", "bad", "b", "c"])
                    await pool.drive()
        finally:
            _pool._backend = saved
        assert _leaf(info.value).args == ("a bug",)
        assert sorted(ended) == ["a", "b", "bad", "c"]


async def test_a_workers_error_is_reported_once_and_by_drive_only() -> None:
    # On asyncio a worker ends by its own last step, not in a done callback that would read
    # its exception: a bug in ``after`` must be raised by drive() and leave no task whose
    # exception nobody retrieved (asyncio would report it to the loop when it is collected).
    import gc

    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))

    def after(task_id: str, r: None) -> None:
        raise KeyError("a bug")

    try:
        with anyio.fail_after(LONG), pytest.raises(BaseException) as info:
            async with anyio.create_task_group() as tg:
                pool: _pool.WorkerPool[None] = _pool.WorkerPool(tg, _nothing, after)
                pool.extend(["a", "b"])
                await pool.drive()
        assert _leaf(info.value).args == ("a bug",)
        del info, pool  # the error's traceback holds the workers' frames, and they their tasks
        gc.collect()
        await anyio.lowlevel.checkpoint()
    finally:
        loop.set_exception_handler(None)
    assert reported == []


@pytest.mark.parametrize("executor", PARALLEL)
async def test_a_worker_that_ends_leaves_the_task_groups_tables(executor: str) -> None:
    # What anyio does for a task it spawned when the task ends, the pool does for a worker:
    # it leaves the cancel scope's tasks and anyio's table of task states. Held here (the
    # table holds its tasks weakly, so a worker nobody holds would leave it anyway).
    from anyio._backends._asyncio import _task_states

    reg = dagagent.Registry()
    held: list[asyncio.Task[Any]] = []

    @reg.tool
    async def hop(name: str) -> str:
        await anyio.lowlevel.checkpoint()
        return name

    @reg.tool
    async def join(names: list[str]) -> int:
        return len(names)

    plan = _fan_plan(50)

    async def watch() -> None:  # holds every worker it sees while the run goes on
        while not done:
            held.extend(t for t in asyncio.all_tasks() if t not in held and _is_worker(t))
            await anyio.lowlevel.checkpoint()

    done = False
    with anyio.fail_after(LONG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            result = await dagagent.execute(plan, reg, executor=executor)
            done = True
    assert result.ok and result.outputs["join"] == 50
    assert len(held) >= 50  # a worker per blocked task of the wide level
    assert all(t.done() and not t.cancelled() and t.exception() is None for t in held)
    assert [t for t in held if t in _task_states] == []


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _wide_blocking(n: int) -> tuple[Any, dagagent.Registry, anyio.Event, list[int]]:
    """A validated plan of ``n`` tasks with no dependencies whose tool waits for the event,
    its registry, the event, and how many have entered the tool."""
    reg = dagagent.Registry()
    release = anyio.Event()
    entered = [0]

    @reg.tool
    async def wait() -> None:
        entered[0] += 1
        await release.wait()

    plan = {"tasks": [{"id": f"w{i}", "tool": "wait"} for i in range(n)]}
    return dagagent.validate(plan, reg), reg, release, entered


@pytest.mark.parametrize("executor", PARALLEL)
async def test_a_burst_of_workers_goes_to_the_oldest_generation_with_no_garbage(
    executor: str,
) -> None:
    # A wide level that blocks starts a worker per task at once: they go straight to the
    # collector's oldest generation (young collections would walk them for nothing), after a
    # collection of the young ones, so that garbage made before is not moved there with them.
    import gc
    import weakref

    from dagagent._gc import MANY

    graph, reg, release, entered = _wide_blocking(MANY + 5)
    in_oldest: list[bool] = []

    async def look() -> None:
        while entered[0] < MANY + 5:
            await anyio.lowlevel.checkpoint()
        oldest = {id(o) for o in gc.get_objects(generation=2)}
        in_oldest.extend(id(t) in oldest for t in asyncio.all_tasks() if _is_worker(t))
        release.set()

    gc.collect()
    cycle = _Cycle()
    dead = weakref.ref(cycle)
    del cycle  # garbage only the collector frees, made before the run
    with anyio.fail_after(LONG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(look)
            result = await dagagent.execute(graph, reg, executor=executor)
    assert result.ok
    assert len(in_oldest) >= MANY and all(in_oldest)
    gc.collect(1)  # the young generations only
    assert dead() is None
    assert gc.isenabled() and gc.get_freeze_count() == 0


async def test_a_burst_leaves_a_collector_someone_turned_off_or_froze_as_it_was() -> None:
    import gc

    from dagagent._gc import MANY

    graph, reg, release, entered = _wide_blocking(MANY + 5)

    async def let_go() -> None:
        while entered[0] < MANY + 5:
            await anyio.lowlevel.checkpoint()
        release.set()

    kept = _Cycle()
    gc.freeze()  # (a frozen object is in no generation the collector walks)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(let_go)
            assert (await dagagent.execute(graph, reg, executor="dataflow")).ok
        assert gc.isenabled() and gc.get_freeze_count()
        assert not [o for o in gc.get_objects(generation=2) if o is kept]  # still frozen
    finally:
        gc.unfreeze()
    graph, reg, release, entered = _wide_blocking(MANY + 5)
    gc.disable()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(let_go)
            assert (await dagagent.execute(graph, reg, executor="levels")).ok
        assert not gc.isenabled()
    finally:
        gc.enable()


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


def _is_worker(task: asyncio.Task[Any]) -> bool:
    return getattr(task.get_coro(), "__qualname__", "") == "WorkerPool._worker"


def _leaf(exc: BaseException) -> BaseException:
    while (group := getattr(exc, "exceptions", None)) is not None:  # an exception group
        exc = group[0]
    return exc


# -- batches (the levels executor): workers park between levels -------------------------------


def _count_workers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many workers the pools start (each runs ``_worker`` once)."""
    started = [0]
    worker = _pool.WorkerPool._worker

    async def counted(self: _pool.WorkerPool[Any]) -> None:
        started[0] += 1
        await worker(self)

    monkeypatch.setattr(_pool.WorkerPool, "_worker", counted)
    return started


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


async def test_the_workers_of_one_level_run_the_next_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 20 levels of 10 tasks that each block once: 10 workers carry all 200 tasks (a worker
    # spawned per blocked task would be 200), and each level still waits for the one before.
    started = _count_workers(monkeypatch)
    reg = dagagent.Registry()
    order: list[str] = []

    @reg.tool
    async def hop(name: str) -> str:
        order.append(f"start {name}")
        await anyio.lowlevel.checkpoint()
        order.append(f"end {name}")
        return name

    with anyio.fail_after(LONG):
        result = await dagagent.execute(_levels_plan(20, 10), reg, executor="levels")
    assert result.ok and len(result.tasks) == 200
    assert started[0] <= 10
    for i in range(1, 20):  # the barrier: no task of a level starts before the last one ended
        last_end = max(order.index(f"end l{i - 1}-{j}") for j in range(10))
        first_start = min(order.index(f"start l{i}-{j}") for j in range(10))
        assert last_end < first_start


async def test_without_the_asyncio_fast_path_workers_end_with_their_level(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_pool, "_backend", None)
    started = _count_workers(monkeypatch)
    reg = dagagent.Registry()

    @reg.tool
    async def hop(name: str) -> str:
        await anyio.lowlevel.checkpoint()
        return name

    with anyio.fail_after(LONG):
        result = await dagagent.execute(_levels_plan(5, 4), reg, executor="levels")
    assert result.ok and started[0] == 20  # one per blocked task: nothing parks


@pytest.mark.parametrize("executor", PARALLEL)
async def test_after_a_wide_level_the_workers_nothing_will_need_end_rather_than_park(
    executor: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fan: 200 tasks that block once, then one that joins them. Only one task is still to
    # come when the 200 end, so at most one of their workers parks for it; the others end
    # (a parked worker is an asyncio task still alive when the join runs). The last of them
    # ending, not parking, must still wake the pool's owner: else the run hangs.
    started = _count_workers(monkeypatch)
    reg = dagagent.Registry()
    alive: list[int] = []

    @reg.tool
    async def hop(name: str) -> str:
        await anyio.lowlevel.checkpoint()
        return name

    @reg.tool
    async def join(names: list[str]) -> int:
        alive.append(len(asyncio.all_tasks()))
        return len(names)

    plan = _fan_plan(200)
    with anyio.fail_after(LONG):
        result = await dagagent.execute(plan, reg, executor=executor)
    assert result.ok, result.counts
    assert result.outputs["join"] == 200
    assert started[0] >= 200  # every blocked task of the level had a worker of its own
    assert alive and alive[0] <= 5  # the test's task, the join's worker and little else


async def test_a_chain_that_never_blocks_takes_no_turn_of_the_loop_per_level() -> None:
    # Under "levels", a chain is a level of one task after another. The worker that ends a
    # level starts the next one itself (it is the only one busy, so every task so far is
    # done) rather than park and wait for the pool's owner to hand it over: a turn of the
    # event loop per task. Counted in turns of a task that checks in at each one.
    reg = dagagent.Registry()

    @reg.tool
    async def step(n: int) -> int:
        return n + 1

    plan = {
        "tasks": [
            {"id": f"s{i}", "tool": "step", "args": {"n": f"${{s{i - 1}}}" if i else 0}}
            for i in range(300)
        ]
    }
    turns = 0
    done = False

    async def count_turns() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await anyio.lowlevel.checkpoint()

    with anyio.fail_after(LONG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(count_turns)
            result = await dagagent.execute(plan, reg, executor="levels")
            done = True
    assert result.ok and result.outputs["s299"] == 300
    assert turns < 60, turns  # a turn per level would be 300


async def test_a_failure_in_a_later_level_cancels_it_and_runs_nothing_after(spawn: str) -> None:
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
        result = await dagagent.execute(_levels_plan(5, 4), reg, executor="levels")
    statuses = {t: r.status for t, r in result.tasks.items()}
    assert statuses["l2-0"] is TaskStatus.FAILED
    assert {statuses[f"l2-{j}"] for j in (1, 2, 3)} == {TaskStatus.CANCELLED}
    assert all(statuses[f"l{i}-{j}"] is TaskStatus.SUCCEEDED for i in (0, 1) for j in range(4))
    assert not [n for n in started if n.startswith(("l3-", "l4-"))]


async def test_a_failure_under_continue_skips_its_descendants_and_the_levels_go_on(
    spawn: str,
) -> None:
    reg = dagagent.Registry()

    @reg.tool
    async def hop(name: str) -> str:
        await anyio.lowlevel.checkpoint()
        if name == "l1-2":
            raise RuntimeError("boom")
        return name

    with anyio.fail_after(LONG):
        result = await dagagent.execute(
            _levels_plan(4, 4), reg, executor="levels", on_failure="continue"
        )
    statuses = {t: r.status.value for t, r in result.tasks.items()}
    assert statuses.pop("l1-2") == "failed"
    assert statuses.pop("l2-2") == statuses.pop("l3-2") == "skipped"
    assert set(statuses.values()) == {"succeeded"}


async def test_a_cancelled_caller_ends_parked_workers_too() -> None:
    # Four tasks of the level end at once (their workers park, waiting for the next level);
    # one blocks. Cancelling the caller must end the parked workers as well as the blocked one.
    reg = dagagent.Registry()
    entered = anyio.Event()

    @reg.tool
    async def hop(name: str) -> str:
        await anyio.lowlevel.checkpoint()
        if name == "l0-4":
            entered.set()
            await anyio.sleep_forever()
        return name

    def workers() -> list[Any]:
        return [t for t in asyncio.all_tasks() if _is_worker(t) and not t.done()]

    with anyio.fail_after(LONG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(dagagent.execute, _levels_plan(3, 5), reg, executor="levels"))
            await entered.wait()
            for _ in range(10):
                await anyio.lowlevel.checkpoint()
            assert len(workers()) == 5  # four parked, one blocked
            tg.cancel_scope.cancel()
    assert workers() == []


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
        result = await dagagent.execute(graph, registry, executor=executor, on_failure=on_failure)
        del graph
        assert held() is None
    finally:
        gc.enable()
    assert result.tasks["bad"].status == "failed"
