"""``RunResult.tasks`` as a run leaves it: a plain success is held as its values and its
``TaskResult`` built when read, once, the same as the runner would have built it at once."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import dagagent
import dagagent.results
from dagagent import RunResult, RunStatus, TaskResult, TaskResults, TaskStatus, execute
from dagagent.runner import TaskRunner

pytestmark = pytest.mark.anyio

EXECUTORS = ["serial", "levels", "dataflow"]


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


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The ids of the held successes whose result gets built, in order."""
    built: list[str] = []
    one, many = dagagent.results._from_success, dagagent.results._from_successes

    def counting(held: Any) -> TaskResult:
        built.append(held[0])
        return one(held)

    def counting_many(held: list[Any]) -> list[TaskResult]:
        built.extend(h[0] for h in held)
        return many(held)

    monkeypatch.setattr(dagagent.results, "_from_success", counting)
    monkeypatch.setattr(dagagent.results, "_from_successes", counting_many)
    yield built


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_a_success_is_built_when_read_and_only_once(
    executor: str, registry: dagagent.Registry, builds: list[str]
) -> None:
    result = await execute(_plan(), registry, executor=executor)
    assert result.ok and builds == []
    assert isinstance(result.tasks, TaskResults)
    first = result.tasks["c"]
    assert builds == ["c"]
    assert result.tasks["c"] is first and result.tasks.get("c") is first
    assert first.status is TaskStatus.SUCCEEDED and first.output == "2!"
    assert first.args == {"value": "2!"} and first.attempts == 1
    assert builds == ["c"]
    assert list(result.tasks) == ["a", "b", "c", "d", "e"]  # plan order
    assert [r.task_id for r in result.tasks.values()] == ["a", "b", "c", "d", "e"]
    assert sorted(builds) == ["a", "b", "c", "d", "e"]


async def test_values_and_items_build_the_rest_at_once_and_keep_what_was_built(
    registry: dagagent.Registry, builds: list[str]
) -> None:
    result = await execute(_plan(), registry)
    c = result.tasks["c"]
    values = list(result.tasks.values())
    assert sorted(builds) == ["a", "b", "c", "d", "e"] and builds[0] == "c"  # c once
    assert [r.task_id for r in values] == ["a", "b", "c", "d", "e"] and values[2] is c
    assert [(t, r) for t, r in result.tasks.items()] == list(zip("abcde", values, strict=True))
    assert all(type(r) is TaskResult for r in values)
    assert values[0].output == 2 and values[0].status is TaskStatus.SUCCEEDED
    assert list(vars(values[0])) == list(TaskResult.model_fields)
    assert values[0].model_fields_set == set(TaskResult.model_fields)
    assert len(builds) == 5  # nothing built again


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_a_built_success_is_what_the_runner_builds_at_once(
    executor: str, registry: dagagent.Registry
) -> None:
    # A listener takes each result as its task ends: then every result is built at once.
    events: list[Any] = []
    eager = await execute(_plan(), registry, executor=executor, listeners=[events.append])
    lazy = await execute(_plan(), registry, executor=executor)  # read one by one
    at_once = dict((await execute(_plan(), registry, executor=executor)).tasks.items())
    assert any(isinstance(e, dagagent.events.TaskFinished) for e in events)
    for task_id, other in [*((t, lazy.tasks[t]) for t in "abcde"), *at_once.items()]:
        one = eager.tasks[task_id]
        assert type(one) is type(other) is TaskResult
        times = {"started_at", "finished_at"}
        assert one.model_dump(exclude=times) == other.model_dump(exclude=times)
        assert one.model_fields_set == other.model_fields_set == set(TaskResult.model_fields)
        assert list(vars(other)) == list(TaskResult.model_fields)  # field order
        assert other.started_at is not None and other.finished_at is not None
        assert other.duration_s is not None and other.duration_s >= 0
        # a result that is a normal model: copies, changes, validates
        assert TaskResult.model_validate(other.model_dump()) == other
        changed = other.model_copy(update={"output": "x"})
        assert changed.output == "x" and other.output != "x"


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_reading_a_run_as_a_whole_builds_no_success(
    executor: str, registry: dagagent.Registry, builds: list[str]
) -> None:
    result = await execute(_plan(fail=True), registry, executor=executor, on_failure="continue")
    assert result.status is RunStatus.FAILED
    assert result.outputs == {"a": 2, "c": "2!", "e": "e"}
    assert dict(result.counts) == {"succeeded": 3, "failed": 1, "skipped": 1}
    assert [r.task_id for r in result.failures()] == ["b"]
    assert result.waiting() == []
    assert "3 succeeded" in repr(result)
    assert list(result.tasks.statuses()) == [
        ("a", TaskStatus.SUCCEEDED),
        ("b", TaskStatus.FAILED),
        ("c", TaskStatus.SUCCEEDED),
        ("d", TaskStatus.SKIPPED),
        ("e", TaskStatus.SUCCEEDED),
    ]
    assert result.tasks.status("c") is TaskStatus.SUCCEEDED
    assert result.tasks["d"].error == "not run: upstream task 'b' failed"
    with pytest.raises(dagagent.RunFailedError, match="b: failed"):
        result.raise_for_status()
    assert builds == []


async def test_a_run_stopped_by_a_failure_names_it_without_building(
    registry: dagagent.Registry, builds: list[str]
) -> None:
    plan = {
        "tasks": [
            {"id": "ok", "tool": "work", "args": {"name": "ok"}},
            {"id": "slow", "tool": "work", "args": {"name": "slow", "seconds": 30}},
            {
                "id": "boom",
                "tool": "work",
                "args": {"name": "boom", "fail": True},
                "depends_on": ["ok"],
            },
        ]
    }
    with anyio.fail_after(20):
        result = await execute(plan, registry, executor="dataflow")
    assert result.tasks.status("slow") is TaskStatus.CANCELLED
    assert result.tasks["slow"].error == (
        "cancelled while running: the run was stopped after task 'boom' failed"
    )
    assert builds == []


async def test_results_compare_copy_pickle_and_serialise_like_a_dict(
    registry: dagagent.Registry,
) -> None:
    result = await execute(_plan(), registry)
    tasks = result.tasks
    plain = dict(tasks)
    assert type(plain) is dict and tasks == plain and plain == tasks
    assert tasks != {**plain, "a": plain["b"]}
    assert len(tasks) == 5 and "a" in tasks and "zz" not in tasks and tasks.get("zz") is None
    with pytest.raises(KeyError):
        tasks["zz"]
    with pytest.raises(TypeError):
        tasks["a"] = plain["a"]  # type: ignore[index]
    assert repr(tasks) == repr(plain)
    for again in (pickle.loads(pickle.dumps(result)), copy.deepcopy(result)):
        assert again == result and isinstance(again.tasks, TaskResults)
        assert again.tasks["e"].output == "e"
    dumped = result.model_dump(mode="json")
    assert dumped["tasks"]["c"]["output"] == "2!"
    assert set(dumped["tasks"]) == set(plain)
    back = RunResult.model_validate_json(result.model_dump_json())
    assert isinstance(back.tasks, TaskResults) and back.tasks == result.tasks
    assert back == result
    assert result.to_json_dict()["tasks"]["a"]["output"] == 2


def test_a_run_result_made_from_a_dict_holds_task_results() -> None:
    r = TaskResult(task_id="a", status=TaskStatus.SUCCEEDED, output=1)
    made = RunResult(
        run_id="x", status=RunStatus.SUCCEEDED, tasks={"a": r}, started_at=0, finished_at=1
    )
    assert isinstance(made.tasks, TaskResults) and made.tasks["a"] is r
    assert made.outputs == {"a": 1} and dict(made.counts) == {"succeeded": 1}
    again = RunResult(
        run_id="x", status=RunStatus.SUCCEEDED, tasks=made.tasks, started_at=0, finished_at=1
    )
    assert again.tasks is made.tasks
    with pytest.raises(ValueError, match="tasks"):
        RunResult(
            run_id="x", status=RunStatus.SUCCEEDED, tasks={"a": 1}, started_at=0, finished_at=1
        )
    assert TaskResults([("a", r)]) == {"a": r} and TaskResults() == {}


async def test_run_task_still_returns_the_result(registry: dagagent.Registry) -> None:
    graph = dagagent.validate(_plan(), registry)
    runner = TaskRunner(graph, registry, run_id="r")
    assert await runner.run_task_status("a") is TaskStatus.SUCCEEDED
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
    result = await execute(_plan(fail=True), registry, executor=exe)
    assert [r.task_id for r in exe.seen] == ["a", "b"]
    assert exe.seen[0].output == 2 and exe.seen[1].status is TaskStatus.FAILED
    assert result.tasks["a"] == exe.seen[0]
    assert result.tasks.status("c") is TaskStatus.CANCELLED


def test_a_dict_set_without_validation_still_reads() -> None:
    r = TaskResult(task_id="a", status=TaskStatus.FAILED, error="no")
    made = RunResult.model_construct(
        run_id="x", status=RunStatus.FAILED, tasks={"a": r}, started_at=0, finished_at=1
    )
    assert made.failures() == [r] and dict(made.counts) == {"failed": 1} and made.outputs == {}
    copied = made.model_copy(update={"tasks": {"b": r.model_copy(update={"task_id": "b"})}})
    assert [f.task_id for f in copied.failures()] == ["b"]
