"""Every executor runs a plan that is still arriving: tasks start as they come, the run ends
when the plan is complete, and a plan cut short stops the run as ``on_failure`` says."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from eventually import until

import dagagent
from dagagent.events import PlanExtended, TaskStarted
from dagagent.executors import Executor, get_executor
from dagagent.graph import GrowingGraph, PlanChecker
from dagagent.plan import Task, ToolTask
from dagagent.settings import RunSettings

pytestmark = pytest.mark.anyio

EXECUTORS = ["serial", "levels", "dataflow", "dask"]
# A run of async tools in process waits only on the event loop: it skips time. Dask runs its
# tools in worker threads, and so do sync tools: those keep the real clock.
SKIPPING = [*(pytest.param(e, marks=pytest.mark.skip_time) for e in EXECUTORS[:3]), "dask"]


def make(name: str) -> Executor:
    if name == "dask":
        pytest.importorskip("distributed")
        return get_executor("dask", processes=False, n_workers=1, threads_per_worker=4)
    return get_executor(name)


def work(tid: str, seconds: float = 0.0, **fields: Any) -> ToolTask:
    return ToolTask(id=tid, tool="work", args={"name": tid, "seconds": seconds, **fields})


class Feed:
    """Adds checked tasks to a growing graph, as a streamed plan would."""

    def __init__(self, registry: dagagent.Registry) -> None:
        self.graph = GrowingGraph("goal")
        self.checker = PlanChecker(registry)
        self.added_at: dict[str, float] = {}

    def add(self, task: Task) -> None:
        check = self.checker.check(task)
        assert check.ok, check.issues
        self.added_at[task.id] = anyio.current_time()
        self.graph.add(check)


async def run_while(
    feed: Feed,
    registry: dagagent.Registry,
    executor: str,
    script: Any,
    **options: Any,
) -> dagagent.RunResult:
    result: list[dagagent.RunResult] = []
    settings = RunSettings(executor=make(executor), on_failure=options.pop("on_failure", "cancel"))

    async def run() -> None:
        result.append(await dagagent.execute(feed.graph, registry, settings=settings, **options))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await script()
    return result[0]


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_tasks_start_while_the_plan_grows(
    executor: str, registry: dagagent.Registry, recorder: Any
) -> None:
    feed = Feed(registry)
    extended: list[int] = []

    def listener(event: Any) -> None:
        if isinstance(event, PlanExtended):
            extended.append(len(event.plan.tasks))

    async def script() -> None:
        # A run that waits for the whole plan before starting fails here (run_while's bound).
        feed.add(work("a"))
        await until(lambda: "a" in recorder.intervals, "a ran to its end meanwhile")
        feed.add(work("b", value="${a}"))  # depends on a, which has finished by now
        feed.add(work("c", 0.2))
        await until(lambda: "b" in recorder.intervals, "b ran")
        feed.add(ToolTask(id="d", tool="add", args={"a": 1, "b": 2}, depends_on=["b", "c"]))
        feed.graph.close()

    result = await run_while(feed, registry, executor, script, listeners=[listener])
    assert result.status is dagagent.RunStatus.SUCCEEDED, result.tasks
    assert set(result.tasks) == {"a", "b", "c", "d"}
    assert result.tasks["b"].output == "a"
    assert result.tasks["d"].output == 3
    # a ran long before the plan was complete; b waited for its turn, not for the plan
    assert recorder.intervals["a"][1] < feed.added_at["b"]
    assert recorder.intervals["b"][0] < feed.added_at["d"]
    # the run's record follows the plan (a was there when the run began)
    assert extended == sorted(extended) and extended[-1] == 4


@pytest.mark.parametrize("executor", SKIPPING)
async def test_a_plan_cut_short_cancels_what_runs(
    executor: str, registry: dagagent.Registry, recorder: Any
) -> None:
    feed = Feed(registry)

    async def script() -> None:
        feed.add(work("slow", 10.0))
        await until(lambda: "slow" in recorder.calls, "slow started")
        feed.graph.close(aborted=True)

    t0 = anyio.current_time()
    result = await run_while(feed, registry, executor, script, on_failure="cancel")
    assert anyio.current_time() - t0 < 5
    assert result.tasks["slow"].status is dagagent.TaskStatus.CANCELLED


@pytest.mark.parametrize("executor", SKIPPING)
async def test_a_plan_cut_short_lets_running_tasks_finish_under_continue(
    executor: str, registry: dagagent.Registry, recorder: Any
) -> None:
    feed = Feed(registry)

    async def script() -> None:
        feed.add(work("a", 0.4))
        feed.add(work("b", value="${a}"))
        await until(lambda: "a" in recorder.calls, "a started")  # and runs for 0.4 s
        feed.graph.close(aborted=True)

    result = await run_while(feed, registry, executor, script, on_failure="continue")
    # Every task that ran succeeded, but the plan was cut short: the run did not.
    assert result.status is dagagent.RunStatus.FAILED
    assert result.tasks["b"].output == "a"


@pytest.mark.parametrize("executor", SKIPPING)
async def test_a_task_arriving_after_its_dependency_failed_is_skipped(
    executor: str, registry: dagagent.Registry, recorder: Any
) -> None:
    feed = Feed(registry)

    async def script() -> None:
        feed.add(work("bad", fail=True))
        feed.add(work("fine", 0.3))
        await until(lambda: "bad" in recorder.intervals, "bad failed")
        feed.add(work("late", value="${bad}"))
        feed.add(work("other"))
        feed.graph.close()

    result = await run_while(feed, registry, executor, script, on_failure="continue")
    statuses = {t: r.status.value for t, r in result.tasks.items()}
    assert statuses == {
        "bad": "failed",
        "fine": "succeeded",
        "late": "skipped",
        "other": "succeeded",
    }
    assert "bad" in (result.tasks["late"].error or "")
    assert "late" not in recorder.calls


@pytest.mark.skip_time
async def test_levels_runs_waves_while_the_plan_arrives(
    registry: dagagent.Registry, recorder: Any
) -> None:
    """A task that arrives while a wave runs waits for the next wave (the level barrier)."""
    feed = Feed(registry)
    started: list[str] = []

    def listener(event: Any) -> None:
        if isinstance(event, TaskStarted):
            started.append(event.task_id)

    async def script() -> None:
        feed.add(work("first", 0.5))
        await until(lambda: "first" in recorder.calls, "first started")  # and runs for 0.5 s
        feed.add(work("joins_late"))  # no dependency, but the first wave already started
        feed.graph.close()

    await run_while(feed, registry, "levels", script, listeners=[listener])
    assert recorder.intervals["joins_late"][0] >= recorder.intervals["first"][1]
    assert started == ["first", "joins_late"]


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_a_map_task_in_a_plan_that_grows(
    executor: str, registry: dagagent.Registry, recorder: Any
) -> None:
    feed = Feed(registry)

    async def script() -> None:
        feed.add(work("names", value=["x", "y", "z"]))
        await until(lambda: "names" in recorder.intervals, "names ran")
        feed.add(
            ToolTask(
                id="each",
                tool="work",
                for_each="${names}",
                args={"name": "${@item}", "value": "${@index}"},
            )
        )
        feed.add(ToolTask(id="sum", tool="add", args={"a": "${each.1}", "b": "${each.2}"}))
        feed.graph.close()

    result = await run_while(feed, registry, executor, script, store=None)
    assert result.status is dagagent.RunStatus.SUCCEEDED, result.tasks
    assert result.tasks["each"].output == [0, 1, 2]
    assert [e.task_id for e in result.tasks["each"].elements or ()] == [
        "each[0]",
        "each[1]",
        "each[2]",
    ]
    assert result.tasks["sum"].output == 3
    assert recorder.calls == {"names": 1, "x": 1, "y": 1, "z": 1}


@pytest.mark.parametrize("executor", ["serial", "levels", "dataflow"])
@pytest.mark.parametrize("on_failure", ["cancel", "continue"])
async def test_a_run_stopped_while_its_plan_is_cut_short_is_recorded_cancelled(
    executor: str, on_failure: str, registry: dagagent.Registry, tmp_path: Any
) -> None:
    """The race of a stop signal during streamed planning: the plan being written is closed
    (aborted) and the run's scope cancelled in the same step, so the executor wakes from its
    wait for more tasks with nothing left to run and returns before the cancellation reaches
    it. The run was stopped all the same: it is recorded ``cancelled``, as the solve is."""
    feed = Feed(registry)
    store = tmp_path / "runs.db"
    ended = anyio.Event()

    def listener(event: Any) -> None:
        if event.kind == "task.finished":
            ended.set()

    with anyio.CancelScope() as stop:
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: dagagent.execute(
                    feed.graph,
                    registry,
                    store=store,
                    run_id="0123456789ab",
                    listeners=[listener],
                    settings=RunSettings(executor=make(executor), on_failure=on_failure),
                )
            )
            feed.add(work("a"))
            await ended.wait()
            await anyio.wait_all_tasks_blocked()  # the executor waits for the next task
            feed.graph.close(aborted=True)  # the planner, stopped, cuts the plan short...
            stop.cancel()  # ...in the same step as the stop signal cancels the run
    with dagagent.RunStore(store) as st:
        record = st.get_run("0123456789ab")
    assert record.status is dagagent.RunStatus.CANCELLED
    assert record.tasks["a"].status is dagagent.TaskStatus.SUCCEEDED
