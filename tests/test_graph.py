from __future__ import annotations

import random
from typing import Any

import pytest

import dagagent
import dagagent.graph
from dagagent import PlanValidationError, validate


def codes(
    plan: dict[str, Any], registry: dagagent.Registry | None = None
) -> list[tuple[str, str | None]]:
    with pytest.raises(PlanValidationError) as ei:
        validate(plan, registry)
    return [(i.code, i.task_id) for i in ei.value.issues]


def t(id: str, tool: str = "add", **kw: Any) -> dict[str, Any]:
    return {"id": id, "tool": tool, "args": kw.pop("args", {"a": 1, "b": 2}), **kw}


def test_empty_plan() -> None:
    assert codes({"tasks": []}) == [("empty_plan", None)]


def test_duplicate_id() -> None:
    assert codes({"tasks": [t("a"), t("a")]}) == [("duplicate_id", "a")]


def test_missing_dependency_and_unknown_reference() -> None:
    found = codes(
        {"tasks": [t("a", depends_on=["ghost"]), t("b", args={"a": "${nope.x}", "b": 1})]}
    )
    assert found == [("missing_dependency", "a"), ("missing_dependency", "b")]


def test_self_dependency() -> None:
    assert codes({"tasks": [t("a", depends_on=["a"])]}) == [("self_dependency", "a")]


def test_cycle_names_its_path() -> None:
    plan = {"tasks": [t("a", depends_on=["c"]), t("b", depends_on=["a"]), t("c", depends_on=["b"])]}
    with pytest.raises(PlanValidationError) as ei:
        validate(plan)
    (issue,) = ei.value.issues
    assert issue.code == "cycle"
    assert "a -> b -> c -> a" in issue.message


def test_cycle_through_references() -> None:
    plan = {"tasks": [t("a", args={"a": "${b}", "b": 1}), t("b", args={"a": "${a}", "b": 1})]}
    assert [c for c, _ in codes(plan)] == ["cycle"]


def test_unknown_tool_and_bad_arguments(registry: dagagent.Registry) -> None:
    plan = {
        "tasks": [
            t("a", tool="nope"),
            t("b", args={"a": "x", "b": 1}),
            t("c", args={"a": 1}),
            t("d", args={"a": 1, "b": 2, "c": 3}),
        ]
    }
    assert codes(plan, registry) == [
        ("unknown_tool", "a"),
        ("bad_arguments", "b"),
        ("bad_arguments", "c"),
        ("bad_arguments", "d"),
    ]


def test_referenced_arguments_are_checked_at_run_time_only(registry: dagagent.Registry) -> None:
    plan = {"tasks": [t("a"), t("b", args={"a": "${a}", "b": 2})]}
    g = validate(plan, registry)
    assert g.levels == [["a"], ["b"]]


def test_agent_task_without_instruction_and_other_shape_issues() -> None:
    plan = {
        "tasks": [
            {"id": "x"},
            {"id": "y", "tool": "add", "instruction": "do"},
            {"id": "z", "instruction": "do it", "args": {"q": 1}},
            {"id": "bad.id", "tool": "add"},
            {"id": "w", "tool": "add", "args": {"a": "${oops"}},
        ]
    }
    assert codes(plan) == [
        ("invalid_id", "bad.id"),
        ("missing_instruction", "x"),
        ("tool_and_instruction", "y"),
        ("agent_args", "z"),
        ("bad_reference", "w"),
    ]


def test_unknown_agent_tools(registry: dagagent.Registry) -> None:
    plan = {"tasks": [{"id": "n", "instruction": "go", "tools": ["add", "nope"]}]}
    assert codes(plan, registry) == [("unknown_tool", "n")]


def test_all_issues_reported_together(registry: dagagent.Registry) -> None:
    plan = {
        "tasks": [
            t("a", depends_on=["c"]),
            t("b", depends_on=["a"]),
            t("c", depends_on=["b"]),
            t("a"),
            t("d", tool="teleport"),
            t("e", depends_on=["nowhere"]),
        ]
    }
    found = {c for c, _ in codes(plan, registry)}
    assert found == {"cycle", "duplicate_id", "missing_dependency", "unknown_tool"}


def test_levels_and_critical_path() -> None:
    plan = {"tasks": [t("a"), t("b"), t("c", depends_on=["a"]), t("d", depends_on=["b", "c"])]}
    g = validate(plan)
    assert g.levels == [["a", "b"], ["c"], ["d"]]
    length, path = g.critical_path({"a": 1.0, "b": 5.0, "c": 1.0, "d": 1.0})
    assert path == ["b", "d"] and length == 6.0
    length, path = g.critical_path({"a": 3.0, "b": 1.0, "c": 3.0, "d": 1.0})
    assert path == ["a", "c", "d"] and length == 7.0
    assert g.level_bound({"a": 1.0, "b": 5.0, "c": 1.0, "d": 1.0}) == 7.0


def test_dependents_in_plan_order() -> None:
    tasks = [
        t("a"),
        t("b"),
        t("d", depends_on=["b", "a"]),
        t("c", depends_on=["a"]),
        t("e", depends_on=["a"]),
        t("f", depends_on=["c", "d"]),
    ]
    in_order = validate({"tasks": tasks}).dependents
    backwards = validate({"tasks": tasks[::-1]}).dependents
    assert list(in_order) == ["a", "b", "d", "c", "e", "f"]
    assert {k: list(v) for k, v in in_order.items()} == {
        "a": ["d", "c", "e"],
        "b": ["d"],
        "d": ["f"],
        "c": ["f"],
        "e": [],
        "f": [],
    }
    # In plan order, whichever way the plan is written.
    assert list(backwards) == ["f", "e", "c", "d", "b", "a"]
    assert {k: list(v) for k, v in backwards.items()} == {
        "f": [],
        "e": [],
        "c": ["f"],
        "d": ["f"],
        "b": ["d"],
        "a": ["e", "c", "d"],
    }
    # A plan with an agent task has the same dependents.
    agent = {"tasks": [*tasks, {"id": "g", "instruction": "sum up", "depends_on": ["f"]}]}
    full = validate(agent).dependents
    assert {k: list(v) for k, v in full.items()} == {
        **{k: list(v) for k, v in in_order.items()},
        "f": ["g"],
        "g": [],
    }


def _longest_path_by_the_book(
    order: list[str], deps: dict[str, tuple[str, ...]], took: dict[str, float]
) -> tuple[float, list[str]]:
    """The critical path as its definition says, one dependency at a time: each task's path
    comes through the first of its dependencies that finishes last."""
    finish: dict[str, float] = {}
    via: dict[str, str | None] = {}
    for n in order:
        best, best_dep = 0.0, None
        for d in deps.get(n, ()):
            f = finish.get(d, 0.0)
            if best_dep is None or f > best:
                best, best_dep = f, d
        finish[n] = best + took.get(n, 0.0)
        via[n] = best_dep
    if not finish:
        return 0.0, []
    end = max(finish, key=lambda k: finish[k])
    path: list[str] = []
    node: str | None = end
    while node is not None:
        path.append(node)
        node = via[node]
    return finish[end], path[::-1]


@pytest.mark.parametrize("seed", range(40))
def test_the_critical_path_matches_its_definition_on_random_graphs(seed: int) -> None:
    """Tasks of 0 to 4 dependencies (the two-dependency case has a road of its own), with
    durations drawn from a few values so that ties happen, and some durations missing."""
    rng = random.Random(seed)
    n = rng.randint(1, 60)
    order = [f"t{i}" for i in range(n)]
    deps = {
        t: tuple(rng.sample(order[:i], min(i, rng.choice((0, 1, 2, 2, 2, 3, 4)))))
        for i, t in enumerate(order)
    }
    took = {t: rng.choice((0.0, 1.0, 1.0, 2.0, 3.0)) for t in order if rng.random() < 0.9}
    assert dagagent.graph.critical_path(order, deps, took) == _longest_path_by_the_book(
        order, deps, took
    )


def test_the_critical_path_breaks_ties_by_the_first_dependency() -> None:
    deps: dict[str, tuple[str, ...]] = {"a": (), "b": (), "c": ("a", "b"), "d": ("b", "a")}
    took = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}
    assert dagagent.graph.critical_path(["a", "b", "c"], deps, took) == (2.0, ["a", "c"])
    assert dagagent.graph.critical_path(["a", "b", "d"], deps, took) == (2.0, ["b", "d"])


def test_no_llm_warning() -> None:
    g = validate({"tasks": [{"id": "n", "instruction": "go"}]}, check_llm=True)
    assert [w.code for w in g.warnings] == ["no_llm"]


def _ran(task_id: str, start: float, end: float, status: str = "succeeded") -> Any:
    from dagagent.results import TaskResult, TaskStatus

    return TaskResult(task_id=task_id, status=TaskStatus(status), started_at=start, finished_at=end)


def test_a_runs_critical_path_follows_the_dependency_that_finished_last() -> None:
    # total needs l0 and l4; l0 ran longer, but l4 was planned late and finished last: l4 is
    # what total waited for (a streamed plan, a level barrier, a concurrency limit...)
    order = ["l0", "l4", "total"]
    deps = {"l0": (), "l4": (), "total": ("l0", "l4")}
    results = {
        "l0": _ran("l0", 0.0, 0.35),
        "l4": _ran("l4", 0.9, 1.2),
        "total": _ran("total", 1.2, 1.3),
    }
    length, path = dagagent.graph.finished_critical_path(order, deps, results)
    assert path == ["l4", "total"] and length == pytest.approx(0.4)
    # by durations alone the longest chain runs through l0
    durations = {t: r.duration_s for t, r in results.items()}
    assert dagagent.graph.critical_path(order, deps, durations)[1] == ["l0", "total"]


def test_a_runs_critical_path_ends_at_the_task_that_finished_last_and_skips_the_unfinished() -> (
    None
):
    order = ["a", "b", "c", "d"]
    deps = {"a": (), "b": ("a",), "c": (), "d": ("c",)}
    results = {
        "a": _ran("a", 0.0, 1.0),
        "b": _ran("b", 1.0, 1.5),
        "c": _ran("c", 0.0, 0.2),
        "d": _ran("d", 1.4, 1.6, "failed"),  # finished (failed) last
    }
    assert dagagent.graph.finished_critical_path(order, deps, results)[1] == ["c", "d"]
    results["d"] = _ran("d", 1.4, 1.6, "cancelled")  # stopped: no path runs through it
    assert dagagent.graph.finished_critical_path(order, deps, results)[1] == ["a", "b"]
