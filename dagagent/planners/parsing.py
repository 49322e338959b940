"""Reading a model's answer as a plan: :func:`parse_plan_answer` reads it with the one reader
of every answer (:func:`~dagagent.planners.reading.read_tasks`: JSON with code fences, prose,
comments or trailing commas, or LLMCompiler's text format) and validates the plan against a
registry. :func:`extract_json` is the JSON value in a text, read the same way. The issue
codes are those of :mod:`dagagent.planners.heal`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import Issue, PlanLoadError, PlanValidationError
from ..graph import PlanGraph, sub_solve_issues, validate
from ..plan import AgentTask, BaseTask, Task, read_plan
from ..text import shorten
from ..tools import Registry
from .conversation import with_given
from .incremental import StreamedPlanError, extract_json
from .reading import read_tasks
from .schema import drop_null_optionals

__all__ = ["extract_json", "parse_plan_answer", "plan_data", "task_data"]


def task_data(task: dict[str, Any]) -> dict[str, Any]:
    """A task object as a model wrote it, its integer ids read as the text they are
    (``"id": 1``, ``"depends_on": [1, 2]``: small models number their tasks)."""
    tid = task.get("id")
    deps = task.get("depends_on")
    numbered = isinstance(deps, list) and any(_integer(d) for d in deps)
    if not (_integer(tid) or numbered):
        return task
    task = dict(task)
    if _integer(tid):
        task["id"] = str(tid)
    if numbered and isinstance(deps, list):
        task["depends_on"] = [str(d) if _integer(d) else d for d in deps]
    return task


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def plan_data(raw: list[Any], goal: str) -> tuple[dict[str, Any] | None, list[Issue]]:
    """The plan (as data for :func:`~dagagent.plan.read_plan`) of the tasks an answer held:
    JSON objects, or tasks read from LLMCompiler lines; ``schema`` issues for the elements
    that are no task at all."""
    tasks: list[Any] = []
    issues: list[Issue] = []
    for index, task in enumerate(raw):
        if isinstance(task, BaseTask):
            tasks.append(task.model_dump(exclude_defaults=True))
        elif isinstance(task, dict):
            tasks.append(task_data(task))
        else:
            issues.append(
                Issue("schema", None, f"tasks[{index}] is not a JSON object: {shorten(task, 80)}")
            )
    return ({"goal": goal, "tasks": tasks} if not issues else None), issues


def parse_plan_answer(
    raw: str,
    registry: Registry,
    *,
    goal: str,
    finish_reason: str | None = None,
    null_optionals: bool = False,
    agent_tasks: bool = False,
    given: Mapping[str, Task] | None = None,
    solve_depth: int | None = None,
) -> tuple[PlanGraph | None, list[Issue]]:
    """Read one model answer as a plan for ``goal`` and validate it against ``registry``.

    Returns ``(graph, [])`` for a valid plan, else ``(None, issues)``. The plan's goal is
    always ``goal`` (the model's restatement is dropped). ``null`` for an optional argument
    that cannot be ``null`` means "not given" (the default); ``null_optionals``: the answer
    followed a strict schema, so every ``null`` optional argument means that. ``given``:
    tasks the plan may reference without writing them (an earlier turn's outputs, see
    :mod:`dagagent.planners.conversation`); those it references are put in front of its tasks.
    ``agent_tasks``: the plan may hold agent tasks; ``solve_depth``: sub-solves (see
    :func:`dagagent.graph.sub_solve_issues`).
    """
    if finish_reason == "length":
        return None, [
            Issue(
                "truncated",
                None,
                "the answer was cut off by the output token limit (finish_reason 'length')",
            )
        ]
    try:
        raw_tasks = read_tasks(raw, registry)
    except StreamedPlanError as exc:
        return None, [exc.issue]
    value, issues = plan_data(raw_tasks, goal)
    if value is None:
        return None, issues
    if given:
        value["tasks"] = with_given(value["tasks"], given)
    drop_null_optionals(value, registry, keep_nullable=not null_optionals)
    try:
        plan, issues = read_plan(value)  # with the issues of tasks that mix the two kinds
    except PlanLoadError as exc:
        return None, exc.issues or [Issue("schema", None, str(exc))]
    issues += sub_solve_issues(plan.tasks, solve_depth)
    if not agent_tasks:
        issues += [
            Issue(
                "agent_task",
                t.id,
                "the task has no 'tool': every task must call one of the listed tools",
            )
            for t in plan.tasks
            if isinstance(t, AgentTask) and not t.solve  # a sub-solve's issue is its own
        ]
    flagged = {i.task_id for i in issues}
    try:
        graph = validate(plan, registry)
    except PlanValidationError as exc:
        issues += [
            i for i in exc.issues if not (i.code == "missing_instruction" and i.task_id in flagged)
        ]
        return None, issues
    if issues:
        return None, issues
    return graph, []
