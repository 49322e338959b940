"""Checking a plan as a graph, and what the graph tells.

- :func:`validate` checks a whole plan and returns its :class:`PlanGraph` (levels,
  dependencies, dependents), or raises with every issue at once (:mod:`._validate`, and the
  checks of map tasks in :mod:`._maps`);
- a plan that streams is checked task by task (:class:`PlanChecker`) into a
  :class:`GrowingGraph` that executors run while it grows (:mod:`._growing`);
- what a reference will hold, from the types tools declare, and whether it fits the
  parameter it is fed to (:mod:`._types`: :func:`text_slots`, where a number or boolean is
  given to a text parameter as its text);
- :func:`critical_path` is the longest chain of dependent tasks by their durations.
"""

from ._critical_path import critical_path, finished_critical_path
from ._graph import PlanGraph
from ._growing import GrowingGraph, PlanChecker, TaskCheck, Watcher
from ._maps import element_issues, element_schema, for_each_reference, map_issues
from ._types import argument_type_issues, as_text, text_slots
from ._validate import (
    check_task,
    dependencies_of,
    dependency_graph,
    recorded_graph,
    sub_solve_allowed,
    sub_solve_issues,
    validate,
)

__all__ = [
    "GrowingGraph",
    "PlanChecker",
    "PlanGraph",
    "TaskCheck",
    "Watcher",
    "argument_type_issues",
    "as_text",
    "check_task",
    "critical_path",
    "dependencies_of",
    "dependency_graph",
    "element_issues",
    "element_schema",
    "finished_critical_path",
    "for_each_reference",
    "map_issues",
    "recorded_graph",
    "sub_solve_allowed",
    "sub_solve_issues",
    "text_slots",
    "validate",
]
