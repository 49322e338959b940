"""A plan that arrives task by task: each task checked against those accepted before it (held
until the tasks it names have come), and the graph that grows while it runs."""

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


def ids(checks: list[Any]) -> list[str]:
    return [c.task.id for c in checks]


def test_a_task_naming_tasks_still_to_come_waits_for_them(registry: dagagent.Registry) -> None:
    checker = PlanChecker(registry)
    # d waits for c and b; c waits for b; b waits for a: nothing is accepted before a
    assert checker.take(task("d", args={"a": "${c}", "b": "${b}"})) == ([], [])
    assert checker.take(task("c", args={"a": "${b}", "b": 1})) == ([], [])
    assert checker.take(task("x", args={"a": 1, "b": 2})) != ([], [])  # not waiting: at once
    assert checker.take(task("b", args={"a": 1, "b": 2}, depends_on=["a"])) == ([], [])
    assert set(checker.held) == {"d", "c", "b"}
    accepted, issues = checker.take(task("a", args={"a": 1, "b": 2}))
    assert issues == []
    # each after what it depends on: a prefix of them is always a valid plan
    assert ids(accepted) == ["a", "b", "c", "d"]
    assert [c.dependencies for c in accepted] == [(), ("a",), ("b",), ("c", "b")]
    assert checker.held == {} and checker.finish() == []


def test_a_held_task_is_checked_again_as_a_whole_when_its_tasks_come(
    registry: dagagent.Registry,
) -> None:
    @registry.tool
    def names() -> list[dict[str, str]]:
        """Names."""
        return [{"name": "a"}]

    checker = PlanChecker(registry)
    # the map's list is a list of objects, and add takes integers: seen once 'n' is known
    mapped = task("m", for_each="${n}", args={"a": "${@item}", "b": 1})
    assert checker.take(mapped) == ([], [])
    accepted, issues = checker.take(task("n", tool="names"))
    assert accepted == []
    assert [(i.code, i.task_id) for i in issues] == [("bad_arguments", "m")]


def test_a_task_closing_a_loop_of_waiting_tasks_is_a_cycle_at_once(
    registry: dagagent.Registry,
) -> None:
    checker = PlanChecker(registry)
    assert checker.take(task("a", args={"a": "${c}", "b": 1})) == ([], [])
    assert checker.take(task("b", args={"a": "${a}", "b": 1})) == ([], [])
    accepted, issues = checker.take(task("c", args={"a": "${b}", "b": 1}))
    assert accepted == []
    assert [(i.code, i.task_id, i.message) for i in issues] == [
        ("cycle", "c", "dependency cycle: c -> a -> b -> c")
    ]


def test_tasks_still_held_when_the_plan_ends_name_what_never_came(
    registry: dagagent.Registry,
) -> None:
    checker = PlanChecker(registry)
    assert checker.take(task("a", args={"a": "${gone}", "b": 1})) == ([], [])
    assert checker.take(task("b", args={"a": "${a}", "b": 1}, depends_on=["lost"])) == ([], [])
    assert checker.take(task("m", for_each=[1], args={"a": "${item}", "b": 1})) == ([], [])
    # an id held is an id taken, and other issues are issues at once
    assert [i.code for i in checker.take(task("a", args={"a": 1, "b": 1}))[1]] == ["duplicate_id"]
    bad = checker.take(task("z", tool="nope", args={"x": "${later}"}))[1]
    assert [i.code for i in bad] == ["unknown_tool"]  # what it names may still come
    assert [(i.task_id, i.message) for i in checker.finish()] == [
        ("a", "has reference ${gone} to unknown task 'gone': the plan ended without it"),
        ("b", "depends on unknown task 'lost': the plan ended without it"),
        ("b", "has reference ${a} to task 'a', which waits for a task the plan never gave"),
        (
            "m",
            "has reference ${item} to unknown task 'item' (the element of a map is ${@item}, "
            "with an '@'): the plan ended without it",
        ),
    ]
    assert {i.code for i in checker.finish()} == {"missing_dependency"}


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
