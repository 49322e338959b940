"""A plan that arrives task by task: each task checked against those before it, and the
graph that grows while it runs."""

from __future__ import annotations

from typing import Any

import pytest

import dagagent
from dagagent.graph import GrowingGraph, PlanChecker
from dagagent.plan import AgentTask, ToolTask


def task(tid: str, tool: str = "add", **fields: Any) -> ToolTask:
    return ToolTask(id=tid, tool=tool, **fields)


def test_each_task_is_checked_against_the_tasks_before_it(registry: dagagent.Registry) -> None:
    checker = PlanChecker(registry, agent_tasks=False)
    assert checker.check(task("a", args={"a": 1, "b": 2})).ok
    cases = {
        "unknown_tool": task("x", tool="nope"),
        "bad_arguments": task("y", args={"a": "many", "b": 2}),
        "missing_dependency": task("z", args={"a": "${later}", "b": 2}),
        "duplicate_id": task("a", args={"a": 1, "b": 2}),
        "agent_task": AgentTask(id="w", instruction="think"),
    }
    for code, bad in cases.items():
        found = checker.check(bad)
        assert [i.code for i in found.issues] == [code], code
    assert checker.ids == {"a"}  # no rejected task counts as seen
    ok = checker.check(task("b", args={"a": "${a}", "b": 2}))
    assert ok.ok and ok.dependencies == ("a",)


def test_a_growing_graph_ends_with_the_levels_validate_computes(
    registry: dagagent.Registry,
) -> None:
    plan = [
        task("a", args={"a": 1, "b": 2}),
        task("b", args={"a": "${a}", "b": 2}),
        task("c", args={"a": 1, "b": 2}),
        task("d", args={"a": "${b}", "b": "${c}"}),
        task("e", args={"a": 5, "b": 6}, depends_on=["a"]),
    ]
    checker = PlanChecker(registry)
    graph = GrowingGraph("goal")
    told: list[str | None] = []
    graph.watch(told.append)
    assert not graph.complete
    for t in plan:
        graph.add(checker.check(t))
    graph.close()
    assert told == ["a", "b", "c", "d", "e", None]
    whole = dagagent.validate(dagagent.Plan(goal="goal", tasks=plan), registry)
    assert graph.levels == whole.levels
    assert graph.order == whole.order
    assert graph.dependencies == whole.dependencies
    assert {k: list(v) for k, v in graph.dependents.items()} == {
        k: list(v) for k, v in whole.dependents.items()
    }
    assert graph.plan == whole.plan
    late: list[str | None] = []
    graph.watch(late.append)
    assert late == [None]
    with pytest.raises(RuntimeError):
        graph.add(checker.check(task("f", args={"a": 1, "b": 2})))


def test_a_validated_graph_is_complete_for_its_watchers(registry: dagagent.Registry) -> None:
    graph = dagagent.validate({"tasks": [{"id": "a", "tool": "add", "args": {"a": 1, "b": 2}}]})
    told: list[str | None] = []
    graph.watch(told.append)
    assert graph.complete and told == [None]
