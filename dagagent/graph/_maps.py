"""Checking map tasks (``for_each``) before the run: what can be seen of the list and its
elements without running anything.

Issue codes (part of :func:`dagagent.validate`'s list):

=====================  ========================================================================
``bad_for_each``       ``for_each`` is a string but not exactly one ``${task_id.path}``
                       reference (or it names a map element)
``for_each_not_list``  the upstream tool's declared return type says the list is not a list
``element_outside_map`` ``${@item}`` / ``${@index}`` in a task without ``for_each``
``unknown_element``    ``${@name}`` that is neither ``@item`` nor ``@index``
``map_option``         ``max_concurrency`` or ``allow_partial`` on a task without ``for_each``
=====================  ========================================================================

The type of a map's elements (:func:`element_schema`) is known from a literal list's values, or
from the return type the upstream tool declares (its return annotation, or an MCP tool's output
schema); an argument that is exactly ``${@item}`` (or ``${@item.path}``) is checked against the
tool's parameter with it, as every whole reference is (see :mod:`._types`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import Issue
from ..plan import Task
from ..references import ELEMENT_NAMES, INDEX, Reference, Template
from ..text import did_you_mean
from ._types import article, literal_schema, output_schema, resolve, types, walk

if TYPE_CHECKING:
    from ..tools import Registry

__all__ = ["element_issues", "element_schema", "for_each_reference", "map_issues"]


def for_each_reference(task: Task) -> Reference | None:
    """The reference a map task's ``for_each`` is (``None``: a literal list, or not one
    well-formed reference)."""
    if not isinstance(task.for_each, str):
        return None
    tmpl = Template(task.for_each)
    if len(tmpl.refs) != 1 or tmpl.malformed or tmpl.refs[0].text != task.for_each.strip():
        return None
    return tmpl.refs[0]


def element_issues(task: Task, refs: Iterable[Reference]) -> list[Issue]:
    """``element_outside_map`` and ``unknown_element``: the ``${@...}`` references of a task's
    arguments or instruction (``refs``: a template's), or of its ``when``."""
    issues: list[Issue] = []
    for ref in refs:
        if not ref.element:
            continue
        if ref.task_id not in ELEMENT_NAMES:
            hint = did_you_mean(ref.task_id, ELEMENT_NAMES)
            issues.append(
                Issue(
                    "unknown_element",
                    task.id,
                    f"{ref.text}: a map names its element ${{@item}} and its position "
                    f"${{@index}}{hint}",
                )
            )
        elif task.for_each is None:
            issues.append(
                Issue(
                    "element_outside_map",
                    task.id,
                    f"{ref.text} names a map's element, but the task has no 'for_each'",
                )
            )
        elif ref.task_id == INDEX and ref.path:
            issues.append(Issue("unknown_element", task.id, f"{ref.text}: ${{@index}} is a number"))
    return issues


def map_issues(
    task: Task,
    tmpl: Template,
    tasks: Mapping[str, Task] | None,
    registry: Registry | None,
) -> list[Issue]:
    """The checks of a task's ``for_each`` and map options (see the module docstring);
    ``tasks``: the plan's tasks by id, for the upstream tool's return type."""
    tid = task.id
    if task.for_each is None:
        used = [n for n in ("max_concurrency", "allow_partial") if getattr(task, n)]
        if not used:
            return []
        return [
            Issue(
                "map_option",
                tid,
                f"{' and '.join(used)} is for map tasks, and the task has no 'for_each'",
            )
        ]
    if isinstance(task.for_each, str):
        ref = for_each_reference(task)
        if ref is None or ref.element:
            return [
                Issue(
                    "bad_for_each",
                    tid,
                    f"for_each {task.for_each!r} is not a list: write a literal list or one "
                    "reference to a task's output, such as ${search.results}",
                )
            ]
        elements = _list_schema(ref, tasks, registry)
        if isinstance(elements, str):
            return [
                Issue("for_each_not_list", tid, f"for_each {ref.text} is not a list: {elements}")
            ]
    return []


def element_schema(
    task: Task, tasks: Mapping[str, Task] | None, registry: Registry | None
) -> dict[str, Any] | None:
    """The JSON schema of a map task's elements, when known (``None``: not known, or the
    list is no list, which :func:`map_issues` reports)."""
    if task.for_each is None:
        return None
    if not isinstance(task.for_each, str):
        return literal_schema(task.for_each)
    ref = for_each_reference(task)
    if ref is None or ref.element:
        return None
    elements = _list_schema(ref, tasks, registry)
    return elements if isinstance(elements, dict) else None


def _list_schema(
    ref: Reference, tasks: Mapping[str, Task] | None, registry: Registry | None
) -> dict[str, Any] | str | None:
    """The schema of the elements of the list ``ref`` points to; a string saying what it is
    instead when the upstream declaration says it is not a list; ``None``: not known."""
    if tasks is None or registry is None:
        return None
    output = output_schema(tasks.get(ref.task_id), tasks, registry)
    if output is None:
        return None
    schema, defs = output
    node = walk(schema, ref.path, defs)
    if node is None:
        return None
    kinds = types(node, defs)
    if kinds is None or "array" in kinds:
        items = node.get("items") if kinds == {"array"} else None
        found = resolve(items, defs) if isinstance(items, dict) else None
        if found is not None and defs and "$defs" not in found:
            found = {**found, "$defs": dict(defs)}
        return found
    upstream = tasks[ref.task_id]
    what = " or ".join(sorted(kinds))
    return f"task {upstream.id!r} ({upstream.label}) declares it {article(what)} {what}"
