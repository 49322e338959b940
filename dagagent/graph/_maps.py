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

An argument that is exactly ``${@item}`` (or ``${@item.path}``) is checked against the tool's
parameter when the element's type is known: from a literal list's values, or from the return
type the upstream tool declares (its return annotation, or an MCP tool's output schema).
Only clear mismatches are issues (``bad_arguments``): a list where the tool takes a string, a
number where it takes text. Anything not declared is checked when the element runs.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter

from ..errors import Issue
from ..plan import Task, ToolTask
from ..references import ELEMENT_NAMES, INDEX, ITEM, Reference, Template
from ..text import did_you_mean

if TYPE_CHECKING:
    from ..tools import Registry, Tool

__all__ = ["element_issues", "for_each_reference", "map_issues"]

_JSON_TYPES = ("string", "integer", "number", "boolean", "object", "array", "null")


def for_each_reference(task: Task) -> Reference | None:
    """The reference a map task's ``for_each`` is (``None``: a literal list, or not one
    well-formed reference)."""
    if not isinstance(task.for_each, str):
        return None
    tmpl = Template(task.for_each)
    if len(tmpl.refs) != 1 or tmpl.malformed or tmpl.refs[0].text != task.for_each.strip():
        return None
    return tmpl.refs[0]


def element_issues(task: Task, tmpl: Template) -> list[Issue]:
    """``element_outside_map`` and ``unknown_element``: the ``${@...}`` references of a task's
    arguments or instruction."""
    issues: list[Issue] = []
    for ref in tmpl.refs:
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
    issues: list[Issue] = []
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
            issues.append(
                Issue(
                    "for_each_not_list",
                    tid,
                    f"for_each {ref.text} is not a list: {elements}",
                )
            )
            return issues
    else:
        elements = _literal_schema(task.for_each)
    if (
        elements is not None
        and isinstance(task, ToolTask)
        and registry is not None
        and task.tool in registry
    ):
        issues.extend(_argument_issues(task, registry.get(task.tool), elements))
    return issues


# -- what a list holds, as a JSON schema --------------------------------------------------------


def _literal_schema(values: list[Any]) -> dict[str, Any] | None:
    """The schema of a literal list's elements: the union of their JSON types."""
    kinds = sorted({_json_type(v) for v in values})
    if not kinds:
        return None
    return {"type": kinds[0] if len(kinds) == 1 else kinds}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    return "array"


def _list_schema(
    ref: Reference, tasks: Mapping[str, Task] | None, registry: Registry | None
) -> dict[str, Any] | str | None:
    """The schema of the elements of the list ``ref`` points to; a string saying what it is
    instead when the upstream declaration says it is not a list; ``None``: not known."""
    if tasks is None or registry is None:
        return None
    output = _output_schema(tasks.get(ref.task_id), tasks, registry, depth=0)
    if output is None:
        return None
    schema, defs = output
    node = _walk(schema, ref.path, defs)
    if node is None:
        return None
    kinds = _types(node, defs)
    if kinds is None or "array" in kinds:
        items = node.get("items") if kinds == {"array"} else None
        return _resolve(items, defs) if isinstance(items, dict) else None
    upstream = tasks[ref.task_id]
    what = " or ".join(sorted(kinds))
    return f"task {upstream.id!r} ({upstream.label}) declares it {_article(what)} {what}"


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _output_schema(
    task: Task | None, tasks: Mapping[str, Task], registry: Registry, depth: int
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The JSON schema of ``task``'s output and its ``$defs``, when its tool declares one."""
    if not isinstance(task, ToolTask) or task.tool not in registry or depth > 8:
        return None
    schema = _returns_schema(registry.get(task.tool))
    if schema is None:
        return None
    defs = schema.get("$defs") or schema.get("definitions") or {}
    if task.for_each is not None:  # a map's output: the list of its elements' outputs
        schema = {"type": "array", "items": schema}
    return schema, defs


def _returns_schema(tool: Tool) -> dict[str, Any] | None:
    if tool.output_schema is not None:
        return tool.output_schema
    try:
        annotation = inspect.signature(tool.fn).return_annotation
    except (TypeError, ValueError):
        return None
    if isinstance(annotation, str) and inspect.isfunction(tool.fn):
        with contextlib.suppress(Exception):
            annotation = inspect.get_annotations(tool.fn, eval_str=True).get("return", annotation)
    if annotation is inspect.Signature.empty or isinstance(annotation, str):
        return None
    try:
        schema: dict[str, Any] = TypeAdapter(annotation).json_schema()
    except Exception:  # a type pydantic cannot describe: not declared, as far as we know
        return None
    return schema


def _resolve(node: dict[str, Any], defs: Mapping[str, Any]) -> dict[str, Any] | None:
    for _ in range(8):
        ref = node.get("$ref")
        if not isinstance(ref, str):
            return node
        target = defs.get(ref.rsplit("/", 1)[-1])
        if not isinstance(target, dict):
            return None
        node = target
    return None


def _walk(
    schema: dict[str, Any], path: tuple[str, ...], defs: Mapping[str, Any]
) -> dict[str, Any] | None:
    node: dict[str, Any] | None = _resolve(schema, defs)
    for seg in path:
        if node is None:
            return None
        kinds = _types(node, defs)
        if kinds == {"object"}:
            props = node.get("properties")
            nxt = props.get(seg) if isinstance(props, dict) else None
            if nxt is None and isinstance(node.get("additionalProperties"), dict):
                nxt = node["additionalProperties"]
        elif kinds == {"array"} and seg.lstrip("-").isdigit():
            nxt = node.get("items")
        else:
            return None
        node = _resolve(nxt, defs) if isinstance(nxt, dict) else None
    return node


def _types(node: dict[str, Any], defs: Mapping[str, Any]) -> set[str] | None:
    """The JSON types a schema admits (``None``: any, or not known)."""
    kind = node.get("type")
    if isinstance(kind, str) and kind in _JSON_TYPES:
        return {kind}
    if isinstance(kind, list) and all(k in _JSON_TYPES for k in kind):
        return set(kind)
    branches = node.get("anyOf") or node.get("oneOf")
    if isinstance(branches, list) and branches:
        found: set[str] = set()
        for b in branches:
            sub = _resolve(b, defs) if isinstance(b, dict) else None
            kinds = _types(sub, defs) if sub is not None else None
            if kinds is None:
                return None
            found |= kinds
        return found
    if "const" in node:
        return {_json_type(node["const"])}
    return None


# -- the element against the tool's parameters --------------------------------------------------

# What a parameter of each JSON type takes, in pydantic's lax mode (a numeric string is a fine
# integer; a number is not a string).
_TAKES = {
    "string": {"string"},
    "integer": {"integer", "number", "string", "boolean"},
    "number": {"integer", "number", "string", "boolean"},
    "boolean": {"boolean", "integer", "number", "string"},
    "object": {"object"},
    "array": {"array"},
    "null": {"null"},
}


def _argument_issues(task: ToolTask, tool: Tool, elements: dict[str, Any]) -> list[Issue]:
    props = tool.parameters_schema.get("properties", {})
    defs = tool.parameters_schema.get("$defs", {})
    elem_defs = elements.get("$defs", {})
    problems = []
    for name, value in task.args.items():
        if not isinstance(value, str) or not isinstance(props.get(name), dict):
            continue
        tmpl = Template(value)
        if len(tmpl.refs) != 1 or tmpl.refs[0].text != value or tmpl.refs[0].task_id != ITEM:
            continue
        ref = tmpl.refs[0]
        node = _walk(elements, ref.path, elem_defs)
        param = _resolve(props[name], defs)
        have = _types(node, elem_defs) if node is not None else None
        want = _types(param, defs) if param is not None else None
        if have is None or want is None:
            continue
        takes = set().union(*(_TAKES[k] for k in want))
        if not have <= takes:
            shown = " or ".join(sorted(have))
            problems.append(
                f"{name}: {ref.text} is {_article(shown)} {shown} here, and the tool takes "
                + " or ".join(sorted(want))
            )
    if not problems:
        return []
    return [
        Issue(
            "bad_arguments",
            task.id,
            f"arguments for tool {task.tool!r} do not fit its schema: " + "; ".join(problems),
        )
    ]
