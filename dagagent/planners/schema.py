"""A JSON Schema for the plans a registry can run: the planner's constrained output format.

:func:`plan_json_schema` derives it from the registry::

    {"type": "object",
     "properties": {"tasks": {"type": "array", "minItems": 1,
                    "items": {"anyOf": [<one variant per tool>, ...]}}},
     "required": ["tasks"], "additionalProperties": false}

The goal is not asked for (optional in the non-strict schema, absent from the strict one): the
planner knows the goal, and a model writing it again spends output tokens and time on
nothing the plan needs.

Each tool variant fixes ``tool`` to the tool's name (``{"type": "string", "enum": [name]}``;
``enum`` rather than ``const`` because every structured-output backend accepts it), uses the
tool's own argument schema for ``args`` and has the plan's id pattern on ``id`` and on every
``depends_on`` entry; no object allows extra properties. So a constrained decoder can only
emit a registered tool with that tool's arguments.

**References in arguments.** Any argument may be a ``${id.path}`` reference instead of a
literal. A string argument already accepts one (references inside text are interpolated);
every other argument schema, at every depth, becomes ``anyOf: [<schema>, <reference>]``
where ``<reference>`` is a string matching :data:`REFERENCE_PATTERN` -- exactly one
reference, because only a string that is exactly one reference keeps the referenced value's
type (a number stays a number).

**Strict mode.** OpenAI's ``strict`` structured outputs accept a subset of JSON Schema:
every property listed in ``required``, ``additionalProperties: false`` on every object, no
free-form values (``Any``, ``dict[str, Any]``), no ``oneOf``/``allOf``/``not``/
``prefixItems``. ``plan_json_schema(registry, strict=True)`` rewrites the schema to fit:
optional arguments become required but nullable (``null`` means "leave it out, use the
default": :func:`drop_null_optionals` removes them again before validation), optional task
fields other than ``depends_on`` and ``for_each`` (a nullable reference: ``null`` is no map)
are left out, ``title``/``default``/``examples`` and the
length/uniqueness keywords are dropped (pydantic still checks those constraints after
parsing, and the planner feeds violations back to the model), ``const`` becomes a
one-value ``enum``. Registries whose tools cannot be expressed that way (free-form
arguments, tuples, optional fields inside nested models) raise :class:`ConfigError` listing
why. The planners send strict schemas only when asked (``strict=True``): a strict schema
makes the model write every field of every task, which costs output tokens and time. The
non-strict schema is guidance for OpenAI, and servers with guided decoding (such as vLLM or
the llama.cpp server) enforce it all the same.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, MutableMapping
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..llm import ResponseFormat
from ..plan import ID_PATTERN
from ._json_schema import (
    REFERENCE_PATTERN,
    allow_refs,
    nullable,
    rename_refs,
    strictify,
)

if TYPE_CHECKING:
    from ..tools import Registry, Tool

__all__ = [
    "PLAN_FORMAT_NAME",
    "REFERENCE_PATTERN",
    "drop_null_optionals",
    "optional_args",
    "plan_json_schema",
    "plan_response_format",
    "strict_problems",
]

PLAN_FORMAT_NAME = "dagagent_plan"
"""The name the plan format travels under (OpenAI ``json_schema.name``, Anthropic tool)."""

_ID_SCHEMA: dict[str, Any] = {"type": "string", "pattern": f"^{ID_PATTERN}$"}
_FOR_EACH_DESCRIPTION = (
    "run the task once per element of this list (a ${task_id.path} reference or a literal "
    "list); its args name the element ${@item} and its position ${@index}"
)
_LIST_REF_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": r'^\$\{[A-Za-z0-9_][A-Za-z0-9_-]*(\.[^.}"\\\x00-\x20]+)*\}$',
}


_WHEN_DESCRIPTION = "run the task only if this condition holds, e.g. ${search.count} > 0"


def _map_properties(strict: bool) -> dict[str, Any]:
    """``for_each`` (and, outside strict mode, the map options and ``when``) of a task
    variant. Strict mode offers ``for_each`` as a nullable reference: a free-form literal list
    cannot be expressed there; nor ``when``, which every task would then have to write."""
    if strict:
        return {
            "for_each": {
                "anyOf": [dict(_LIST_REF_SCHEMA), {"type": "null"}],
                "description": _FOR_EACH_DESCRIPTION,
            }
        }
    return {
        "for_each": {
            "anyOf": [dict(_LIST_REF_SCHEMA), {"type": "array"}],
            "description": _FOR_EACH_DESCRIPTION,
        },
        "max_concurrency": {"type": "integer", "minimum": 1},
        "allow_partial": {"type": "boolean"},
        "when": {"type": "string", "description": _WHEN_DESCRIPTION},
    }


def optional_args(tool: Tool) -> frozenset[str]:
    """Names of the tool's arguments that have a default."""
    schema = tool.parameters_schema
    return frozenset(schema.get("properties", {})) - frozenset(schema.get("required", ()))


# ---------------------------------------------------------------------------- the schema


def _tool_args_schema(
    tool: Tool, strict: bool, defs: dict[str, Any], problems: list[str]
) -> dict[str, Any]:
    raw = copy.deepcopy(tool.parameters_schema)
    prefix = f"{tool.name}__"
    raw = rename_refs(raw, prefix)
    for name, sub in raw.pop("$defs", {}).items():
        where = f"tool {tool.name!r}: model {name!r}"
        sub = _allow_refs_in_def(sub)
        defs[prefix + name] = strictify(sub, where, problems) if strict else sub
    properties: dict[str, Any] = raw.get("properties", {})
    required: list[str] = list(raw.get("required", []))
    args: dict[str, Any] = {"type": "object", "properties": {}}
    for pname, sub in properties.items():
        sub = allow_refs(sub)
        if strict:
            sub = strictify(sub, f"tool {tool.name!r}: argument {pname!r}", problems)
            if pname not in required:
                sub = nullable(sub)
        args["properties"][pname] = sub
    args["required"] = list(properties) if strict else required
    args["additionalProperties"] = False
    return args


def _allow_refs_in_def(node: Any) -> Any:
    if isinstance(node, dict) and isinstance(node.get("properties"), dict):
        return {**node, "properties": {k: allow_refs(v) for k, v in node["properties"].items()}}
    return node


def _tool_variant(tool: Tool, strict: bool, defs: dict[str, Any], problems: list[str]) -> Any:
    properties: dict[str, Any] = {
        "id": dict(_ID_SCHEMA),
        "tool": {"type": "string", "enum": [tool.name]},
        "args": _tool_args_schema(tool, strict, defs, problems),
        "depends_on": {
            "type": "array",
            "items": dict(_ID_SCHEMA),
            "description": "ids of tasks that must finish first (references imply this)",
        },
    }
    properties.update(_map_properties(strict))
    if not strict:
        properties["description"] = {"type": "string"}
        properties["retries"] = {"type": "integer", "minimum": 0}
        properties["timeout_s"] = {"type": "number", "exclusiveMinimum": 0}
    variant: dict[str, Any] = {"type": "object"}
    if tool.description:
        variant["description"] = tool.description
    variant["properties"] = properties
    variant["required"] = list(properties) if strict else ["id", "tool", "args"]
    variant["additionalProperties"] = False
    return variant


def _agent_variant(names: list[str], strict: bool, sub_solves: bool = False) -> dict[str, Any]:
    tools_schema: dict[str, Any] = {
        "type": "array",
        "items": {"type": "string", "enum": names},
        "description": "the tools the agent may use (default: all)",
    }
    properties: dict[str, Any] = {
        "id": dict(_ID_SCHEMA),
        "instruction": {
            "type": "string",
            "description": "a sub-goal for a tool-using agent; may contain ${...} references",
        },
        "tools": nullable(tools_schema) if strict else tools_schema,
        "depends_on": {"type": "array", "items": dict(_ID_SCHEMA)},
        **_map_properties(strict),
    }
    if sub_solves:
        properties["solve"] = {
            "type": "boolean",
            "description": "true: reach the sub-goal with plans of its own (a sub-solve)",
        }
    return {
        "type": "object",
        "description": "an agent task: a sub-goal that needs several steps or judgement",
        "properties": properties,
        "required": list(properties) if strict else ["id", "instruction"],
        "additionalProperties": False,
    }


def _build(
    registry: Registry, *, strict: bool, agent_tasks: bool, sub_solves: bool = False
) -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    defs: dict[str, Any] = {}
    variants: list[Any] = [_tool_variant(t, strict, defs, problems) for t in registry]
    if agent_tasks or sub_solves:
        variants.append(_agent_variant(sorted(registry.names), strict, sub_solves))
    if not variants:
        problems.append("the registry has no tools")
    items: dict[str, Any] = {"anyOf": variants} if len(variants) != 1 else variants[0]
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "tasks": {
                "type": "array",
                "minItems": 1,
                "items": items,
                "description": "the tasks; independent tasks run in parallel",
            },
        },
        "required": ["tasks"],
        "additionalProperties": False,
    }
    if not strict:  # a model may write the goal again (the prompt does not ask it to)
        schema["properties"] = {"goal": {"type": "string"}, **schema["properties"]}
    if defs:
        schema["$defs"] = defs
    return copy.deepcopy(schema), problems


def plan_json_schema(
    registry: Registry,
    *,
    strict: bool = False,
    agent_tasks: bool = False,
    sub_solves: bool = False,
) -> dict[str, Any]:
    """The JSON Schema of a plan for ``registry`` (see the module docstring).

    ``strict=True`` produces OpenAI strict-mode form and raises :class:`ConfigError` naming
    every tool argument that strict mode cannot express. ``agent_tasks=True`` adds a
    variant for agent tasks (``instruction`` + optional ``tools`` subset);
    ``sub_solves=True`` adds it with a ``solve`` flag (a sub-solve).
    """
    schema, problems = _build(
        registry, strict=strict, agent_tasks=agent_tasks, sub_solves=sub_solves
    )
    if strict and problems:
        raise ConfigError("the plan schema cannot be strict: " + "; ".join(dict.fromkeys(problems)))
    return schema


def strict_problems(registry: Registry, *, agent_tasks: bool = False) -> list[str]:
    """Why the registry's plan schema cannot be strict (empty when it can)."""
    return list(dict.fromkeys(_build(registry, strict=True, agent_tasks=agent_tasks)[1]))


def plan_response_format(
    registry: Registry,
    *,
    strict: bool | None = None,
    agent_tasks: bool = False,
    sub_solves: bool = False,
) -> ResponseFormat:
    """The structured-output request for a plan: not strict unless ``strict=True`` (a strict
    schema makes the model write every field of every task, ``null`` and ``[]`` included,
    which costs output tokens and time for nothing a plan needs)."""
    schema = plan_json_schema(
        registry, strict=bool(strict), agent_tasks=agent_tasks, sub_solves=sub_solves
    )
    return ResponseFormat(PLAN_FORMAT_NAME, schema, strict=bool(strict))


def drop_null_optionals(data: Any, registry: Registry, *, keep_nullable: bool = False) -> None:
    """Read ``null`` optional arguments as "not given": remove them in place (and a ``null``
    agent ``tools`` list).

    Strict mode makes every optional argument nullable for this purpose. Without it, pass
    ``keep_nullable=True``: an argument that may legitimately be ``null`` keeps it, and a
    ``null`` only goes where it could not be meant as a value (small models write ``null``
    for the optional arguments they do not want to set).
    """
    tasks = data.get("tasks") if isinstance(data, MutableMapping) else data
    if not isinstance(tasks, list):
        return
    for task in tasks:
        if not isinstance(task, MutableMapping):
            continue
        if task.get("tools", 0) is None:
            del task["tools"]
        name, args = task.get("tool"), task.get("args")
        if not isinstance(name, str) or name not in registry or not isinstance(args, dict):
            continue
        tool = registry.get(name)
        names: Iterable[str] = optional_args(tool)
        if keep_nullable:
            props = tool.parameters_schema.get("properties", {})
            names = [n for n in names if not _accepts_null(props.get(n))]
        _drop(args, names)


def _accepts_null(node: Any) -> bool:
    """Whether a (tool argument) schema admits ``null``; unresolved ``$ref`` s do not."""
    if not isinstance(node, dict):
        return True
    kind = node.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if "enum" in node:
        return None in node["enum"]
    if "const" in node:
        return node["const"] is None
    branches = [*node.get("anyOf", ()), *node.get("oneOf", ())]
    if branches:
        return any(_accepts_null(b) for b in branches)
    return kind is None and "$ref" not in node  # no type at all: any value


def _drop(args: MutableMapping[str, Any], names: Iterable[str]) -> None:
    for key in names:
        if key in args and args[key] is None:
            del args[key]
