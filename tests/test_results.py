"""``RunResult`` as a run leaves it: its task results in plan order, and a result that
round-trips through pickle, copies and JSON; ``TaskRunner.run_task`` gives each result."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

import dagagent
from dagagent import RunResult, RunStatus, TaskResult, TaskStatus, execute
from dagagent.runner import TaskRunner
from dagagent.settings import RunSettings

pytestmark = pytest.mark.anyio


def _plan(fail: bool = False) -> dict[str, Any]:
    return {
        "goal": "g",
        "tasks": [
            {"id": "a", "tool": "work", "args": {"name": "a", "value": 2}},
            {"id": "b", "tool": "work", "args": {"name": "b", "fail": fail}},
            {"id": "c", "tool": "echo", "args": {"value": "${a}!"}, "depends_on": ["a"]},
            {"id": "d", "tool": "echo", "args": {"value": "${b}"}},
            {"id": "e", "tool": "work", "args": {"name": "e"}, "depends_on": ["c"]},
        ],
    }


async def test_results_are_in_plan_order_and_round_trip(registry: dagagent.Registry) -> None:
    result = await execute(_plan(), registry, settings=RunSettings(executor="levels"))
    assert list(result.tasks) == ["a", "b", "c", "d", "e"]
    for again in (pickle.loads(pickle.dumps(result)), copy.deepcopy(result)):
        assert again == result
        assert again.tasks["e"].output == "e"
    dumped = result.model_dump(mode="json")
    assert dumped["tasks"]["c"]["output"] == "2!"
    back = RunResult.model_validate_json(result.model_dump_json())
    assert back == result
    assert result.to_json_dict()["tasks"]["a"]["output"] == 2


def test_a_run_result_checks_its_task_results() -> None:
    r = TaskResult(task_id="a", status=TaskStatus.SUCCEEDED, output=1)
    made = RunResult(
        run_id="x", status=RunStatus.SUCCEEDED, tasks={"a": r}, started_at=0, finished_at=1
    )
    assert made.tasks["a"] is r
    assert made.outputs == {"a": 1} and dict(made.counts) == {"succeeded": 1}
    with pytest.raises(ValueError, match="tasks"):
        RunResult(
            run_id="x", status=RunStatus.SUCCEEDED, tasks={"a": 1}, started_at=0, finished_at=1
        )


async def test_run_task_returns_the_result(registry: dagagent.Registry) -> None:
    graph = dagagent.validate(_plan(), registry)
    runner = TaskRunner(graph, registry, run_id="r")
    assert (await runner.run_task("a")).status is TaskStatus.SUCCEEDED
    r = await runner.run_task("c")
    assert isinstance(r, TaskResult) and r.output == "2!" and r is runner.results["c"]
    assert runner.results["a"].output == 2 and runner.outputs == {"a": 2, "c": "2!"}


class _OneByOne(dagagent.executors.BaseExecutor):
    """An executor of its own, as the Executor protocol describes one: run_task's result."""

    name = "one-by-one"

    def __init__(self) -> None:
        self.seen: list[TaskResult] = []

    async def run(self, graph: Any, runner: TaskRunner, on_failure: Any) -> None:
        for task_id in graph.order:
            r = await runner.run_task(task_id)
            self.seen.append(r)
            if not r.ok:
                return


async def test_an_executor_of_ones_own_gets_results(registry: dagagent.Registry) -> None:
    exe = _OneByOne()
    result = await execute(_plan(fail=True), registry, settings=RunSettings(executor=exe))
    assert [r.task_id for r in exe.seen] == ["a", "b"]
    assert exe.seen[0].output == 2 and exe.seen[1].status is TaskStatus.FAILED
    assert result.tasks["a"] == exe.seen[0]
    assert result.tasks["c"].status is TaskStatus.CANCELLED
