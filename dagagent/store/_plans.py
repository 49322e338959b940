"""A run's plan as the store keeps it (``run_plans.plan``), and back.

**Hot path**: the plan is written with the run's first row, which is committed before the
run's first task may start, so every run with a store waits for this encoding. A plan whose
tasks are all tool tasks that set nothing but ``id``, ``tool``, ``args`` and ``depends_on``
(most plans, and every plan of the overhead benchmark) is kept as ``[goal, [[id, tool, args,
depends_on], ...]]``, made by C code alone (attrgetter, ``pydantic_core.to_json``): about half
the time of the plan's JSON without defaults, which builds a dict per task. Any other plan is
kept as that JSON (:meth:`~dagagent.plan.Plan.to_json`), as a plan file holds it; so is every
plan recorded before (``runs.plan``). Readers tell the two apart by the first character.
"""

from __future__ import annotations

import json
from operator import attrgetter
from typing import Any

from pydantic_core import to_json

from ..plan import Plan, ToolTask

__all__ = ["plan_from_column", "plan_task_ids", "plan_to_column"]

_TOOL_FIELDS = frozenset(("id", "tool", "args", "depends_on"))
_FIELDS_SET = attrgetter("__pydantic_fields_set__")
_TOOL_ROW = attrgetter("id", "tool", "args", "depends_on")


def plan_to_column(plan: Plan) -> str:
    """``plan`` as the store keeps it (see the module's docstring)."""
    tasks = plan.tasks
    n = len(tasks)
    if (
        type(plan) is Plan
        and not plan.__pydantic_extra__
        and list(map(type, tasks)).count(ToolTask) == n
        # a field never set holds its default (the mutable ones, args and depends_on, are
        # kept whatever they hold)
        and all(map(_TOOL_FIELDS.issuperset, map(_FIELDS_SET, tasks)))
    ):
        try:
            return to_json([plan.goal, list(map(_TOOL_ROW, tasks))]).decode()
        except Exception:  # arguments JSON cannot hold as they are: the plan's own JSON says
            pass
    return plan.to_json(indent=None)


def _plan_data(text: str) -> Any:
    goal, rows = json.loads(text)
    return {
        "goal": goal,
        "tasks": [{"id": i, "tool": t, "args": a, "depends_on": d} for i, t, a, d in rows],
    }


def plan_from_column(text: str) -> Plan:
    """The plan a column holds (either form); a ``ValueError`` if it is not a plan."""
    if text.startswith("["):
        try:
            data = _plan_data(text)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"not a recorded plan: {exc}") from None
        return Plan.model_validate(data)
    return Plan.model_validate_json(text)


def plan_task_ids(text: str) -> list[Any]:
    """The ids of the tasks of the plan a column holds, without validating it."""
    data = _plan_data(text) if text.startswith("[") else json.loads(text)
    return [t.get("id") for t in data.get("tasks", []) if isinstance(t, dict)]
