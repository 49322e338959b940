"""Tools whose arguments a JSON schema describes, rather than a Python signature.

A tool from an MCP server arrives as a name, a description and an input schema; so may a tool
from any other source. :class:`SchemaTool` pairs an async function ``fn(**arguments)`` with
such a schema. Plans, the planner's JSON schema and the ReAct agent see the schema as given,
and arguments are checked before every call by a real JSON Schema validator (``jsonschema``,
in the dialect the schema names in ``$schema``, else 2020-12), with messages in the same form
as a Python tool's (``city: required argument is missing``).

As for Python tools, arguments the schema does not name are rejected, unless the schema itself
says what to do with them (``additionalProperties``, ``patternProperties`` or
``unevaluatedProperties``). Values are passed as given: nothing is coerced, and defaults are
left to the function.

``jsonschema`` comes with the ``mcp`` extra (``pip install "dagagent[mcp]"``).
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any
from urllib.parse import unquote

from ..errors import ToolArgumentsError, ToolDefinitionError
from ..text import is_secret_name, shorten
from ._tool import Tool

__all__ = ["SchemaTool"]

INSTALL_HINT = 'tools described by a JSON schema need jsonschema: pip install "dagagent[mcp]"'

# Keywords by which a schema decides for itself about names it does not list.
_OPEN_KEYWORDS = ("additionalProperties", "patternProperties", "unevaluatedProperties")
_MAX_MESSAGE = 200


class SchemaTool(Tool):
    """A tool defined by an async function and the JSON schema of its arguments.

    ``parameters`` must be an object schema (``{"type": "object", "properties": ...}``); a
    schema that is not valid JSON Schema, or that cannot be used (a ``$ref`` that resolves
    nowhere), raises :class:`~dagagent.errors.ToolDefinitionError`. ``connection`` is what a
    call needs open during a run (see :attr:`Tool.connection`); ``retryable=False`` forbids
    plans to retry the tool; ``output_schema`` describes its output to the planner. The other
    options are those of :class:`~dagagent.tools.Tool`.
    """

    def __init__(
        self,
        fn: Callable[..., Awaitable[Any]],
        *,
        name: str,
        parameters: Mapping[str, Any],
        description: str = "",
        timeout_s: float | None = None,
        retries: int = 0,
        max_concurrency: int | None = None,
        side_effects: bool = False,
        tags: Iterable[str] = (),
        connection: AbstractAsyncContextManager[Any] | None = None,
        retryable: bool = True,
        output_schema: Mapping[str, Any] | None = None,
        max_calls: int | None = None,
        cooldown_s: float | None = None,
    ) -> None:
        self._init_options(
            fn,
            name,
            timeout_s=timeout_s,
            retries=retries,
            max_concurrency=max_concurrency,
            side_effects=side_effects,
            tags=tags,
            max_calls=max_calls,
            cooldown_s=cooldown_s,
        )
        if not self._is_async:
            raise ToolDefinitionError(f"tool {self.name!r}: a SchemaTool's function must be async")
        if retries and not retryable:
            raise ToolDefinitionError(
                f"tool {self.name!r}: retries on a tool that is not retryable"
            )
        self.description = description
        self.connection = connection
        self.retryable = retryable
        self.output_schema = dict(output_schema) if output_schema is not None else None
        self._schema = _object_schema(self.name, parameters)
        self._validator = _validator(self.name, self._schema)
        self._properties: Mapping[str, Any] = self._schema.get("properties") or {}
        self._patterns = [
            re.compile(p) for p in (self._schema.get("patternProperties") or {}) if _compiles(p)
        ]

    # -- schema ---------------------------------------------------------------------------

    @functools.cached_property
    def parameters_schema(self) -> dict[str, Any]:
        """The argument schema as given (``additionalProperties: false`` added when the schema
        says nothing about names it does not list; ``$schema`` and ``title`` left out)."""
        shown = {k: v for k, v in self._schema.items() if k not in ("$schema", "title")}
        if "definitions" in shown and "$defs" not in shown:  # draft-07 spelling: one for all
            shown["$defs"] = shown.pop("definitions")
            renamed: dict[str, Any] = _defs_refs(shown)
            return renamed
        return copy.deepcopy(shown)

    # -- validation -----------------------------------------------------------------------

    def validate_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Check ``args`` against the schema; raise :class:`ToolArgumentsError` listing every
        problem. The arguments are returned as given (as a dict)."""
        if not isinstance(args, Mapping):
            raise ToolArgumentsError(self.name, [f"arguments: expected an object, got {args!r}"])
        problems = self._problems(args, frozenset())
        if problems:
            raise ToolArgumentsError(self.name, problems)
        return args if type(args) is dict else dict(args)

    def check_partial(self, literal: Mapping[str, Any], referenced: Iterable[str]) -> list[str]:
        """Problems with a plan task's literal arguments; ``referenced`` ones count as present
        and are checked when the run resolves them."""
        referenced = frozenset(referenced)
        problems = [f"{k}: unexpected argument" for k in sorted(referenced) if self._unknown(k)]
        return problems + self._problems(literal, referenced)

    def _unknown(self, name: str) -> bool:
        if name in self._properties:
            return False
        if any(p.search(name) for p in self._patterns):
            return False
        return self._schema.get("additionalProperties") is False

    def _problems(self, args: Mapping[str, Any], referenced: frozenset[str]) -> list[str]:
        problems: list[str] = []
        required_done = False
        try:
            errors = list(self._validator.iter_errors(dict(args)))
        except Exception as exc:  # the schema cannot check these arguments (a remote $ref...)
            return [
                "arguments: cannot be checked against the tool's schema: "
                + shorten(str(exc), _MAX_MESSAGE, one_line=False)
            ]
        for error in errors:
            path = list(error.absolute_path)
            if path and path[0] in referenced:
                continue
            if not path and error.validator == "required":
                if not required_done:  # one error per missing name: report them all once
                    required_done = True
                    problems.extend(
                        f"{k}: required argument is missing"
                        for k in error.validator_value
                        if k not in args and k not in referenced
                    )
                continue
            if not path and error.validator == "additionalProperties":
                problems.extend(f"{k}: unexpected argument" for k in args if self._unknown(k))
                continue
            if any(is_secret_name(part) for part in path):
                # jsonschema's messages quote the value
                problems.append(
                    _format(
                        path,
                        f"fails the schema's {error.validator!r} check (the value is "
                        "not shown: the name says it is a secret)",
                    )
                )
                continue
            problems.append(_format(path, error.message))
        return problems

    # -- pickling (the Dask executor ships tools without a connection) --------------------

    def __reduce__(self) -> Any:
        return (_rebuild, (self.fn, self._options()))

    def _options(self) -> dict[str, Any]:
        options = super()._options()
        del options["blocking"]  # its function is async: it never runs in a thread
        options.update(
            parameters=self._schema,
            connection=self.connection,
            retryable=self.retryable,
            output_schema=self.output_schema,
        )
        return options


def _defs_refs(node: Any) -> Any:
    """A copy of ``node`` with ``#/definitions/`` references spelled ``#/$defs/``."""
    if isinstance(node, Mapping):
        return {
            k: "#/$defs/" + v[len("#/definitions/") :]
            if k == "$ref" and isinstance(v, str) and v.startswith("#/definitions/")
            else _defs_refs(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_defs_refs(v) for v in node]
    return node


def _rebuild(fn: Callable[..., Awaitable[Any]], options: dict[str, Any]) -> SchemaTool:
    return SchemaTool(fn, **options)


def _object_schema(name: str, parameters: Any) -> dict[str, Any]:
    if not isinstance(parameters, Mapping):
        raise ToolDefinitionError(
            f"tool {name!r}: its argument schema must be a JSON object, "
            f"not {type(parameters).__name__}"
        )
    schema = copy.deepcopy(dict(parameters))
    if schema.get("type") != "object":
        raise ToolDefinitionError(
            f"tool {name!r}: its argument schema must describe an object "
            '("type": "object"), not '
            + shorten(repr(schema.get("type")), _MAX_MESSAGE, one_line=False)
        )
    props = schema.get("properties", {})
    if not isinstance(props, Mapping) or not all(
        isinstance(v, (Mapping, bool)) for v in props.values()
    ):
        raise ToolDefinitionError(
            f"tool {name!r}: 'properties' of its argument schema must map names to schemas"
        )
    if not any(k in schema for k in _OPEN_KEYWORDS):
        schema["additionalProperties"] = False
    return schema


def _validator(name: str, schema: dict[str, Any]) -> Any:
    try:
        import jsonschema  # type: ignore[import-untyped]  # no type information shipped
    except ImportError:
        raise ToolDefinitionError(f"tool {name!r}: {INSTALL_HINT}") from None
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "its root"
        raise ToolDefinitionError(
            f"tool {name!r}: its argument schema is not valid JSON Schema "
            f"(at {where}: {shorten(exc.message, _MAX_MESSAGE, one_line=False)})"
        ) from None
    for ref in _refs(schema):  # valid JSON Schema, and still unusable: a $ref to nowhere
        if not _resolves(schema, ref):
            raise ToolDefinitionError(
                f"tool {name!r}: its argument schema refers to "
                f"{shorten(repr(ref), _MAX_MESSAGE, one_line=False)}, "
                "which is not in the schema"
            )
    return cls(schema)


def _refs(node: Any) -> Iterable[str]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            elif key not in ("const", "enum", "default", "examples"):
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def _resolves(schema: Mapping[str, Any], ref: str) -> bool:
    """Whether ``ref`` is a JSON pointer into ``schema`` (``#``, ``#/$defs/x``) that exists."""
    if not ref.startswith("#"):
        return False
    node: Any = schema
    for part in ref[1:].split("/")[1:] if ref != "#" else ():
        part = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isascii() and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


def _format(path: list[Any], message: str) -> str:
    loc = ".".join(str(p) for p in path) or "arguments"
    return f"{loc}: {shorten(message, _MAX_MESSAGE, one_line=False)}"
