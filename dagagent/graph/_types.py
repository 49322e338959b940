"""What a reference will hold, before the run: the types tools declare, and whether a value
of one type fits a parameter of another.

A tool declares what it returns by its return annotation, or (an MCP tool) by its output
schema. From that, a reference ``${task.path}`` has a known JSON type, and so do a map's
element ``${@item}`` (from its list's declaration, or a literal list's values) and its
position ``${@index}`` (an integer).

**Scalars cross into text.** A value that is exactly one reference, fed to a parameter that
takes text only, is given as its text when it is a number or a boolean (``3`` → ``"3"``,
``True`` → ``"True"``: the text the same reference gives inside a longer string, see
:func:`~dagagent.references.reference_text`). :func:`text_slots` says where in a task's
arguments that happens; the task runner does it, for tasks and map elements alike.

**Clear mismatches are issues** (``bad_arguments``, from :func:`argument_type_issues`): a
whole reference whose declared type no parameter type takes, even by text (a list into an
``int``, an object into a ``str``, a string into a list). A type not declared, or one that
may fit, is checked when the task runs.
"""

from __future__ import annotations

import contextlib
import inspect
import weakref
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter

from ..errors import Issue
from ..plan import Task, ToolTask
from ..references import INDEX, ITEM, Reference, Template, reference_text

if TYPE_CHECKING:
    from ..tools import Registry, Tool

__all__ = ["argument_type_issues", "as_text", "json_type", "output_schema", "text_slots"]

_JSON_TYPES = ("string", "integer", "number", "boolean", "object", "array", "null")
_SCALARS = frozenset({"integer", "number", "boolean"})

# What a parameter of each JSON type takes from a whole reference: in pydantic's lax mode (a
# numeric string is a fine integer), and by text for a string (a number or a boolean).
_TAKES = {
    "string": {"string", "integer", "number", "boolean"},
    "integer": {"integer", "number", "string", "boolean"},
    "number": {"integer", "number", "string", "boolean"},
    "boolean": {"boolean", "integer", "number", "string"},
    "object": {"object"},
    "array": {"array"},
    "null": {"null"},
}

Schema = dict[str, Any]


def json_type(value: Any) -> str:
    """The JSON type of a Python value."""
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


def literal_schema(values: list[Any]) -> Schema | None:
    """The schema of a literal list's elements: the union of their JSON types."""
    kinds = sorted({json_type(v) for v in values})
    if not kinds:
        return None
    return {"type": kinds[0] if len(kinds) == 1 else kinds}


def article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def output_schema(
    task: Task | None, tasks: Mapping[str, Task], registry: Registry
) -> tuple[Schema, Mapping[str, Any]] | None:
    """The JSON schema of ``task``'s output and its ``$defs``, when its tool declares one (a
    map's output: the list of its elements' outputs)."""
    if not isinstance(task, ToolTask) or task.tool not in registry:
        return None
    schema = returns_schema(registry.get(task.tool))
    if schema is None:
        return None
    defs = schema.get("$defs") or schema.get("definitions") or {}
    if task.for_each is not None:
        schema = {"type": "array", "items": schema}
    return schema, defs


def returns_schema(tool: Tool) -> Schema | None:
    """What ``tool`` declares it returns, as a JSON schema (``None``: not declared); worked
    out once per tool (a plan references its tools' outputs many times)."""
    try:
        return _RETURNS[tool]
    except KeyError:
        found = _RETURNS[tool] = _declared_return(tool)
        return found


_RETURNS: weakref.WeakKeyDictionary[Tool, Schema | None] = weakref.WeakKeyDictionary()


def _declared_return(tool: Tool) -> Schema | None:
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
        schema: Schema = TypeAdapter(annotation).json_schema()
    except Exception:  # a type pydantic cannot describe: not declared, as far as we know
        return None
    return schema


def resolve(node: Schema, defs: Mapping[str, Any]) -> Schema | None:
    """``node``, its ``$ref`` followed."""
    for _ in range(8):
        ref = node.get("$ref")
        if not isinstance(ref, str):
            return node
        target = defs.get(ref.rsplit("/", 1)[-1])
        if not isinstance(target, dict):
            return None
        node = target
    return None


def walk(schema: Schema, path: tuple[str, ...], defs: Mapping[str, Any]) -> Schema | None:
    """The schema of what ``path`` reaches inside a value of ``schema`` (``None``: unknown).
    Of a union (``list[str] | None``), the one branch that can be walked into is taken."""
    node: Schema | None = resolve(schema, defs)
    for seg in path:
        if node is None:
            return None
        index = seg.lstrip("-").isdigit()
        node = _branch(node, "array" if index else "object", defs)
        if node is None:
            return None
        if not index or node.get("type") == "object":
            props = node.get("properties")
            nxt = props.get(seg) if isinstance(props, dict) else None
            if nxt is None and isinstance(node.get("additionalProperties"), dict):
                nxt = node["additionalProperties"]
        else:
            nxt = node.get("items")
        node = resolve(nxt, defs) if isinstance(nxt, dict) else None
    return node


def _branch(node: Schema, kind: str, defs: Mapping[str, Any]) -> Schema | None:
    """``node`` if it is of JSON type ``kind`` (an index may also be an object's key), else
    its only branch that is."""
    kinds = types(node, defs)
    if kinds == {kind} or (kind == "array" and kinds == {"object"}):
        return node
    branches = node.get("anyOf") or node.get("oneOf")
    if not isinstance(branches, list):
        return None
    fits = []
    for b in branches:
        sub = resolve(b, defs) if isinstance(b, dict) else None
        if sub is not None and types(sub, defs) in ({kind}, {kind, "null"}):
            fits.append(sub)
    return fits[0] if len(fits) == 1 else None


def types(node: Schema, defs: Mapping[str, Any]) -> set[str] | None:
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
            sub = resolve(b, defs) if isinstance(b, dict) else None
            kinds = types(sub, defs) if sub is not None else None
            if kinds is None:
                return None
            found |= kinds
        return found
    if "const" in node:
        return {json_type(node["const"])}
    if "enum" in node and isinstance(node["enum"], list) and node["enum"]:
        return {json_type(v) for v in node["enum"]}
    return None


# -- a task's whole references against its tool's parameters --------------------------------


def _parameter_types(tool: Tool, path: tuple[str, ...]) -> frozenset[str] | None:
    """The JSON types the parameter of ``tool`` at ``path`` takes (``None``: any, or not
    known); worked out once per tool and path."""
    known = _PARAMETERS.get(tool)
    if known is None:
        known = _PARAMETERS[tool] = {}
    try:
        return known[path]
    except KeyError:
        pass
    schema = tool.parameters_schema
    defs = schema.get("$defs") or {}
    node = walk(schema, path, defs)
    found = types(node, defs) if node is not None else None
    frozen = known[path] = frozenset(found) if found is not None else None
    return frozen


_PARAMETERS: weakref.WeakKeyDictionary[Tool, dict[tuple[str, ...], frozenset[str] | None]] = (
    weakref.WeakKeyDictionary()
)


def _whole_references(tmpl: Template) -> Iterator[tuple[tuple[str, ...], Reference]]:
    for path, ref in tmpl.whole_references():
        if path:  # the arguments are an object: a reference in place of all of them is not
            yield tuple(str(p) for p in path), ref


def text_slots(tool: Tool, tmpl: Template) -> tuple[tuple[str | int, ...], ...]:
    """Where in a task's arguments a whole reference meets a parameter that takes text and
    no number or boolean: there a number or boolean is given as its text (see the module
    docstring)."""
    slots = []
    for path, _ in tmpl.whole_references():
        if not path:
            continue
        want = _parameter_types(tool, tuple(str(p) for p in path))
        if want is not None and "string" in want and not want & _SCALARS:
            slots.append(path)
    return tuple(slots)


def as_text(args: Any, slots: tuple[tuple[str | int, ...], ...]) -> Any:
    """``args`` (resolved: a fresh copy, changed in place) with the number or boolean at each
    of ``slots`` given as its text."""
    for path in slots:
        *head, last = path
        node = args
        for seg in head:
            try:
                node = node[seg]
            except (KeyError, IndexError, TypeError):
                node = None
                break
        if node is None:
            continue
        try:
            value = node[last]
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(value, (bool, int, float)):
            node[last] = reference_text(value)
    return args


def _reference_types(
    ref: Reference,
    tasks: Mapping[str, Task] | None,
    registry: Registry,
    elements: Schema | None,
) -> set[str] | None:
    """The JSON types a whole reference will hold, when declared."""
    if ref.task_id == INDEX:
        return {"integer"}
    if ref.task_id == ITEM:
        if elements is None:
            return None
        defs = elements.get("$defs", {})
        node = walk(elements, ref.path, defs)
        return types(node, defs) if node is not None else None
    if ref.element or tasks is None:
        return None
    declared = output_schema(tasks.get(ref.task_id), tasks, registry)
    if declared is None:
        return None
    schema, defs = declared
    node = walk(schema, ref.path, defs)
    return types(node, defs) if node is not None else None


def _declared_where(ref: Reference, tasks: Mapping[str, Task] | None) -> str:
    if ref.task_id == INDEX:
        return "(the element's position)"
    if ref.task_id == ITEM or tasks is None:
        return "here"
    upstream = tasks[ref.task_id]
    return f"(as task {upstream.id!r} ({upstream.label}) declares it)"


def argument_type_issues(
    task: ToolTask,
    tmpl: Template,
    tasks: Mapping[str, Task] | None,
    registry: Registry,
    elements: Schema | None = None,
) -> list[Issue]:
    """``bad_arguments`` for the whole references of ``task``'s arguments whose declared type
    its tool's parameter cannot take (see the module docstring); ``tasks``: the plan's tasks
    by id, ``elements``: the schema of a map's elements, when known."""
    tool = registry.get(task.tool)
    problems = []
    for path, ref in _whole_references(tmpl):
        want = _parameter_types(tool, path)
        if want is None:
            continue
        kinds = _reference_types(ref, tasks, registry, elements)
        if kinds is None:
            continue
        takes = set().union(*(_TAKES[k] for k in want))
        possible = kinds - {"null"} or kinds
        if possible.isdisjoint(takes):
            shown = " or ".join(sorted(kinds))
            problems.append(
                f"{'.'.join(path)}: {ref.text} is {article(shown)} {shown} "
                f"{_declared_where(ref, tasks)}, and the tool takes " + " or ".join(sorted(want))
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
