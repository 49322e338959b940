"""MCP tools as dagagent tools: names, schemas, and what their annotations allow."""

from __future__ import annotations

import fnmatch
import inspect
import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ToolDefinitionError
from ..tools import SchemaTool
from ..tools._effects import call_of

if TYPE_CHECKING:
    from mcp_types import Tool as MCPToolSpec

    from ._client import MCPClient

__all__ = [
    "ATTEMPT_META",
    "ELEMENT_META",
    "IDEMPOTENCY_KEY_META",
    "RUN_ID_META",
    "TASK_ID_META",
    "MCPTool",
    "build_tools",
    "call_meta",
]

# The ``_meta`` keys of a tools/call request of a tool with side effects (see call_meta).
IDEMPOTENCY_KEY_META = "dagagent/idempotency-key"
"""``_meta`` key of the call's idempotency key (``dga-...``; the same on retries and resumes)."""
RUN_ID_META = "dagagent/run-id"
"""``_meta`` key of the id of the run making the call."""
TASK_ID_META = "dagagent/task-id"
"""``_meta`` key of the id of the task making the call."""
ELEMENT_META = "dagagent/element"
"""``_meta`` key of the index of the map element making the call (absent outside a map)."""
ATTEMPT_META = "dagagent/attempt"
"""``_meta`` key of the task's attempt (1 for the first; a retry keeps the key)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def call_meta(tool: str) -> dict[str, Any] | None:
    """The ``_meta`` of the request of a call of ``tool`` (its dagagent name): the identity of
    the call, when it is the call of a tool with side effects being made (its idempotency
    key, run, task, map element and attempt, under the ``dagagent/`` prefix); else ``None``
    (a read-only tool's call sends none)."""
    call = call_of(tool)
    if call is None:
        return None
    meta: dict[str, Any] = {
        IDEMPOTENCY_KEY_META: call.idempotency_key,
        RUN_ID_META: call.run_id,
        TASK_ID_META: call.task_id,
        ATTEMPT_META: call.attempt,
    }
    if call.element is not None:
        meta[ELEMENT_META] = call.element
    return meta


class _RemoteCall:
    """The function of an :class:`MCPTool`: one tool of one server, called by name (``local``:
    the tool's dagagent name, by which its calls with side effects are known)."""

    __slots__ = ("client", "local", "remote")

    def __init__(self, client: MCPClient, remote: str, local: str) -> None:
        self.client = client
        self.remote = remote
        self.local = local

    async def __call__(self, **arguments: Any) -> Any:
        return await self.client.call(self.remote, arguments, meta=call_meta(self.local))

    def __repr__(self) -> str:
        return f"<MCP tool {self.remote!r} of server {self.client.name!r}>"

    @property
    def __signature__(self) -> inspect.Signature:
        """No Python signature to show: the tool's schemas say what it takes and gives."""
        return inspect.Signature()


class MCPTool(SchemaTool):
    """A tool of an MCP server. Its argument schema is the server's ``inputSchema``; its
    annotations can only make it safer to use:

    - side effects unless it is declared read-only (``readOnlyHint``) and not destructive
      (``destructiveHint``): approval rules on side effects apply to it, streamed planning
      holds its tasks until the plan is complete, and the caching interceptor leaves it alone;
    - retries allowed (a plan may give its task ``retries``) only when it is declared
      idempotent (``idempotentHint``) or read-only.

    A call of a tool with side effects sends its identity in the request's ``_meta``
    (:func:`call_meta`): ``dagagent/idempotency-key`` (the same for the call's retries and
    resumes), ``dagagent/run-id``, ``dagagent/task-id``, ``dagagent/attempt`` and, for an
    element of a map, ``dagagent/element``.

    ``server`` is the client's name, ``remote_name`` the tool's name on the server,
    ``annotations`` the hints as the server sent them.
    """

    def __init__(self, client: MCPClient, spec: MCPToolSpec, name: str) -> None:
        hints = spec.annotations
        read_only = hints is not None and hints.read_only_hint is True
        destructive = hints is not None and hints.destructive_hint is True
        idempotent = hints is not None and hints.idempotent_hint is True
        title = spec.title or (hints.title if hints is not None else None)
        super().__init__(
            _RemoteCall(client, spec.name, name),
            name=name,
            parameters=spec.input_schema,
            description=spec.description or title or "",
            timeout_s=client.timeout_s,
            side_effects=destructive or not read_only,
            tags=("mcp", f"mcp:{client.name}"),
            connection=client,
            retryable=(read_only and not destructive) or idempotent,
            output_schema=spec.output_schema,
        )
        self.server = client.name
        self.remote_name = spec.name
        self.annotations: dict[str, Any] = (
            hints.model_dump(exclude_none=True) if hints is not None else {}
        )

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r}, server={self.server!r})"

    def __reduce__(self) -> Any:
        raise TypeError(
            f"tool {self.name!r} is bound to the session of MCP server {self.server!r} "
            "and cannot be pickled"
        )


def build_tools(
    client: MCPClient,
    specs: Iterable[MCPToolSpec],
    prefix: str | None,
    include: str | Iterable[str] | None,
    exclude: str | Iterable[str] | None,
) -> list[MCPTool]:
    """The tools ``specs`` of ``client`` that pass the filters, named ``prefix + name``."""
    wanted = _globs(include)
    unwanted = _globs(exclude) or []
    if prefix and _UNSAFE.search(prefix):
        raise ToolDefinitionError(
            f"MCP server {client.name!r}: tool name prefix {prefix!r} may hold only letters, "
            "digits, '_', '.' and '-'"
        )
    tools: list[MCPTool] = []
    names: dict[str, str] = {}
    for spec in specs:
        remote = spec.name
        if wanted is not None and not _matches(remote, wanted):
            continue
        if _matches(remote, unwanted):
            continue
        name = _local_name(prefix or "", remote)
        where = f"MCP server {client.name!r}, tool {remote!r}"
        if len(name) > 64:
            raise ToolDefinitionError(
                f"{where}: the name {name!r} is longer than 64 characters (leave the tool out "
                "with exclude=..., or use a shorter prefix)"
            )
        if name in names:
            raise ToolDefinitionError(
                f"{where}: its name {name!r} is also that of tool {names[name]!r}"
            )
        names[name] = remote
        for what, schema in (("input", spec.input_schema), ("output", spec.output_schema)):
            size = len(json.dumps(schema, default=str)) if schema is not None else 0
            if size > client.limits.max_schema_bytes:
                raise ToolDefinitionError(
                    f"{where}: its {what} schema is {size:,} bytes of JSON, more than the "
                    f"{client.limits.max_schema_bytes:,} a tool's schema may hold "
                    "(MCPClient(max_schema_bytes=...); leave the tool out with exclude=...)"
                )
        try:
            tools.append(MCPTool(client, spec, name))
        except ToolDefinitionError as exc:
            message = str(exc).removeprefix(f"tool {name!r}: ")
            raise ToolDefinitionError(
                f"{where}: {message} (leave the tool out with exclude=...)"
            ) from None
    return tools


def _local_name(prefix: str, remote: str) -> str:
    """``prefix + remote`` with what a dagagent tool name cannot hold replaced by ``_``."""
    name = prefix + _UNSAFE.sub("_", remote)
    return name if re.match(r"^[A-Za-z_]", name) else "_" + name


def _globs(value: str | Iterable[str] | None) -> list[str] | None:
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


def _matches(name: str, globs: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, g) for g in globs)


def describe_hints(annotations: Mapping[str, Any]) -> str:
    """The annotations a tool listing shows (``read-only, idempotent``)."""
    words = {
        "read_only_hint": "read-only",
        "destructive_hint": "destructive",
        "idempotent_hint": "idempotent",
        "open_world_hint": "open-world",
    }
    shown = [w for k, w in words.items() if annotations.get(k) is True]
    return ", ".join(shown)
