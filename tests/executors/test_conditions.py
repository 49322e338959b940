"""Conditional tasks (``when``) on every executor: a false condition skips its task and every
task that depends on it, never fails the run nor stops its other branches; a condition that
cannot be decided fails its task; in a map, a condition on the element skips elements; in a
plan that streams, a condition may read a task that arrives later."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

import dagagent
from dagagent import execute
from dagagent.events import TaskFinished
from dagagent.executors import Executor, get_executor
from dagagent.graph import GrowingGraph, PlanChecker
from dagagent.plan import Task, ToolTask
from dagagent.results import CONDITION_FALSE, TaskStatus
from dagagent.settings import RunSettings
from dagagent.store import RunStore

pytestmark = pytest.mark.anyio

EXECUTORS = ["serial", "levels", "dataflow", "dask"]


@pytest.fixture(params=EXECUTORS)
def executor(request: pytest.FixtureRequest) -> str:
    """Each test that takes it runs on every executor."""
    name: str = request.param
    return name


def make(name: str) -> Executor:
    if name == "dask":
        pytest.importorskip("distributed")
        return get_executor("dask", processes=False, n_workers=1, threads_per_worker=4)
    return get_executor(name)


def settings(executor: str, on_failure: str = "cancel") -> RunSettings:
    return RunSettings(executor=make(executor), on_failure=on_failure)  # type: ignore[arg-type]


def work(tid: str, **fields: Any) -> dict[str, Any]:
    return {"id": tid, "tool": "work", "args": {"name": tid, **fields.pop("args", {})}, **fields}


ROUTED = {
    "goal": "route on what the search found",
    "tasks": [
        work("search", args={"value": {"count": 0, "items": []}}),
        # found nothing: ask instead of summarising
        work("summarise", args={"value": "${search.items}"}, when="${search.count} > 0"),
        work("publish", args={"value": "${summarise}"}),  # reads a skipped task
        work("notify", depends_on=["summarise"]),  # only waits for it
        work("ask", when="not ${search.count}"),
        work("after_ask", args={"value": "${ask}"}),
        work("independent"),
    ],
}


@pytest.mark.parametrize("on_failure", ["cancel", "continue"])
async def test_a_false_condition_skips_its_task_and_those_that_depend_on_it(
    executor: str, on_failure: str, registry: dagagent.Registry, recorder: Any
) -> None:
    result = await execute(ROUTED, registry, settings=settings(executor, on_failure))
    assert result.status is dagagent.RunStatus.SUCCEEDED, result.tasks
    statuses = {t: r.status for t, r in result.tasks.items()}
    assert statuses == {
        "search": TaskStatus.SUCCEEDED,
        "summarise": TaskStatus.SKIPPED,
        "publish": TaskStatus.SKIPPED,
        "notify": TaskStatus.SKIPPED,
        "ask": TaskStatus.SUCCEEDED,
        "after_ask": TaskStatus.SUCCEEDED,
        "independent": TaskStatus.SUCCEEDED,
    }
    # the skipped tasks' tools were never called; the others once each
    assert recorder.calls == {"search": 1, "ask": 1, "after_ask": 1, "independent": 1}
    summarise = result.tasks["summarise"]
    assert summarise.skipped_by_condition and summarise.error_type == CONDITION_FALSE
    assert summarise.error == "condition '${search.count} > 0' is false: ${search.count} = 0"
    assert summarise.started_at is None and summarise.attempts == 0
    for downstream in ("publish", "notify"):
        r = result.tasks[downstream]
        assert r.skipped_by_condition, r
        assert r.error == "not run: upstream task 'summarise' was skipped by a condition"
    assert result.counts["skipped"] == 3
    result.raise_for_status()  # a condition's skip is no failure


async def test_a_skip_downstream_of_a_failure_is_a_failures_skip(
    executor: str, registry: dagagent.Registry
) -> None:
    """A task with a failed dependency and a condition-skipped one is skipped, and the run
    failed. When both are known as it is skipped (serial, levels), the record names the
    failure; the event-driven executors skip it as soon as the first is known."""
    plan = {
        "tasks": [
            work("broken", args={"fail": True}),
            work("gate", when="false"),
            work("both", args={"value": ["${broken}", "${gate}"]}),
        ]
    }
    result = await execute(plan, registry, settings=settings(executor, "continue"))
    assert result.status is dagagent.RunStatus.FAILED
    both = result.tasks["both"]
    assert both.status is TaskStatus.SKIPPED
    if executor in ("serial", "levels"):
        assert not both.skipped_by_condition
        assert both.error == "not run: upstream task 'broken' failed"


async def test_a_condition_skip_does_not_cancel_the_tasks_running_beside_it(
    executor: str, registry: dagagent.Registry, recorder: Any
) -> None:
    plan = {
        "tasks": [
            work("slow", args={"seconds": 0.1}),
            work("gate", when="1 > 2"),
        ]
    }
    result = await execute(plan, registry, settings=settings(executor, "cancel"))
    assert result.ok, result.tasks
    assert result.tasks["slow"].status is TaskStatus.SUCCEEDED
    assert result.tasks["gate"].skipped_by_condition


async def test_a_condition_that_cannot_be_decided_fails_its_task(
    executor: str, registry: dagagent.Registry, recorder: Any
) -> None:
    plan = {
        "tasks": [
            work("search", args={"value": {"count": "three"}}),
            work("gate", when="${search.count} > 0"),
            work("missing", when="${search.total} > 0"),
        ]
    }
    result = await execute(plan, registry, settings=settings(executor, "continue"))
    assert result.status is dagagent.RunStatus.FAILED
    gate, missing = result.tasks["gate"], result.tasks["missing"]
    assert gate.status is TaskStatus.FAILED and gate.error_type == "ConditionError"
    assert gate.error is not None and "not a text" in gate.error and "'>'" in gate.error
    assert missing.status is TaskStatus.FAILED
    assert missing.error is not None and "search has no key 'total'" in missing.error
    assert recorder.calls == {"search": 1}


async def test_a_map_skips_the_elements_its_condition_rejects(
    executor: str, registry: dagagent.Registry, recorder: Any
) -> None:
    plan = {
        "tasks": [
            work(
                "files",
                args={
                    "value": [{"n": "a", "size": 3}, {"n": "b", "size": 0}, {"n": "c", "size": 7}]
                },
            ),
            {
                "id": "read",
                "tool": "work",
                "for_each": "${files}",
                "args": {"name": "${@item.n}", "value": "${@item.size}"},
                "when": "${@item.size} > 0 and ${@index} < 2 or ${@item.n} == 'c'",
            },
            {"id": "total", "tool": "echo", "args": {"value": "${read}"}},
        ]
    }
    result = await execute(plan, registry, settings=settings(executor))
    assert result.ok, result.tasks
    read = result.tasks["read"]
    assert read.status is TaskStatus.SUCCEEDED
    assert read.output == [3, None, 7]  # a skipped element is null, in its place
    elements = read.elements or []
    assert [e.status for e in elements] == [
        TaskStatus.SUCCEEDED,
        TaskStatus.SKIPPED,
        TaskStatus.SUCCEEDED,
    ]
    assert elements[1].skipped_by_condition
    assert elements[1].error is not None and "${@item.size} = 0" in elements[1].error
    assert result.tasks["total"].output == [3, None, 7]
    assert recorder.calls == {"files": 1, "a": 1, "c": 1}


async def test_a_condition_on_a_map_that_reads_no_element_skips_the_whole_map(
    executor: str, registry: dagagent.Registry, recorder: Any
) -> None:
    plan = {
        "tasks": [
            work("search", args={"value": {"ok": False, "items": "not a list"}}),
            {
                "id": "each",
                "tool": "work",
                "for_each": "${search.items}",
                "args": {"name": "${@item}"},
                "when": "${search.ok}",
            },
        ]
    }
    result = await execute(plan, registry, settings=settings(executor))
    # decided before the list is read: a list that is not one does not matter
    assert result.ok, result.tasks
    each = result.tasks["each"]
    assert each.skipped_by_condition and each.elements is None
    assert recorder.calls == {"search": 1}


# ---------------------------------------------------------------------------- streamed


class Feed:
    """Takes tasks into a growing graph as a streamed plan does: a task that names a task
    still to come is held until it comes."""

    def __init__(self, registry: dagagent.Registry) -> None:
        self.registry = registry
        self.graph = GrowingGraph("goal")
        self.checker = PlanChecker(registry)
        self.result: dagagent.RunResult | None = None

    def take(self, task: Task) -> list[str]:
        accepted, issues = self.checker.take(task)
        assert not issues, issues
        for check in accepted:
            self.graph.add(check)
        return [c.task.id for c in accepted]

    @asynccontextmanager
    async def running(self, executor: str, *, watch: str) -> AsyncIterator[anyio.Event]:
        """Run the graph on ``executor`` while the block feeds it, then close it; the event
        the block gets is set once task ``watch`` has finished; :attr:`result` is the run's
        when the block has left."""
        finished = anyio.Event()

        def listener(event: Any) -> None:
            if isinstance(event, TaskFinished) and event.result.task_id == watch:
                finished.set()

        async def run() -> None:
            self.result = await execute(
                self.graph, self.registry, settings=settings(executor), listeners=[listener]
            )

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                yield finished
                self.graph.close()


async def test_a_streamed_condition_may_read_a_task_that_arrives_later(
    executor: str, registry: dagagent.Registry, recorder: Any
) -> None:
    feed = Feed(registry)
    async with feed.running(executor, watch="first") as first_finished:
        assert feed.take(ToolTask(id="first", tool="work", args={"name": "first"})) == ["first"]
        # reads 'check', which the plan has not given yet: held, not refused
        gated = ToolTask(id="gated", tool="work", args={"name": "gated"}, when="${check.go}")
        assert feed.take(gated) == []
        opened = ToolTask(id="opened", tool="work", args={"name": "opened"}, when="not ${check.go}")
        assert feed.take(opened) == []
        await first_finished.wait()  # the run is under way before the condition's task arrives
        check = ToolTask(id="check", tool="work", args={"name": "check", "value": {"go": False}})
        assert feed.take(check) == ["check", "gated", "opened"]
    run_result = feed.result
    assert run_result is not None
    assert run_result.status is dagagent.RunStatus.SUCCEEDED, run_result.tasks
    assert run_result.tasks["gated"].skipped_by_condition
    assert run_result.tasks["opened"].status is TaskStatus.SUCCEEDED
    assert recorder.calls == {"first": 1, "check": 1, "opened": 1}


async def test_a_task_arriving_after_a_skipped_dependency_is_skipped(
    executor: str, registry: dagagent.Registry, recorder: Any
) -> None:
    feed = Feed(registry)
    async with feed.running(executor, watch="gate") as gate_skipped:
        feed.take(ToolTask(id="gate", tool="work", args={"name": "gate"}, when="false"))
        await gate_skipped.wait()
        feed.take(ToolTask(id="late", tool="work", args={"name": "${gate}"}))
    assert feed.result is not None
    late = feed.result.tasks["late"]
    assert late.skipped_by_condition, late
    assert feed.result.ok
    assert recorder.calls == {}


async def test_the_store_records_why_a_task_was_skipped(
    registry: dagagent.Registry, tmp_path: Any
) -> None:
    store = tmp_path / "runs.db"
    result = await execute(ROUTED, registry, store=store)
    assert result.ok
    with RunStore(store) as runs:
        record = runs.get_run(result.run_id)
    assert record.status is dagagent.RunStatus.SUCCEEDED
    summarise = record.tasks["summarise"]
    assert summarise.status is TaskStatus.SKIPPED and summarise.skipped_by_condition
    assert summarise.error == "condition '${search.count} > 0' is false: ${search.count} = 0"
    assert record.plan.tasks[1].when == "${search.count} > 0"
