"""The tool calls a turn asks for: resolved against the agent's tools, made, and told back.

A call the model writes is resolved first (:meth:`Toolbox.resolve`): the tool by its name, by
the name it was given on the wire, or by a case-insensitive match when that is unambiguous;
its arguments as a JSON object, or in text mode a bare ``Action Input`` mapped onto the tool's
only parameter (or only required one). A call that cannot be made — an unknown tool,
arguments that are not an object or nest too deep to store, show or send back — keeps its
problem, which becomes its observation.

:meth:`Toolbox.run` makes the calls of one turn concurrently, within the agent's deadline,
and turns each outcome into what the model is told: the output cut to
``max_observation_chars``, or an error (a tool that raises, times out, is denied, or gets
arguments that do not validate). A call that waits for a person's decision
(:class:`~dagagent.errors.TaskWaitingError`) is no observation: it is set aside and the agent
pauses once its siblings have finished.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from dagagent import telemetry
from dagagent.errors import (
    TaskDeniedError,
    TaskTimeoutError,
    TaskWaitingError,
    ToolArgumentsError,
    ToolLimitError,
    UnknownToolError,
)
from dagagent.text import shorten
from dagagent.tools import Registry, Tool

from .limits import call_signature

__all__ = ["TOO_DEEP", "Call", "CallTool", "Outcome", "Toolbox", "wire_name"]

CallTool = Callable[[Tool, dict[str, Any]], Awaitable[Any]]
"""``async (tool, args) -> output``: validates ``args`` and calls ``tool``. Plan nodes pass the
runner's, so that calls go through the run's interceptors (approval rules) and invoker."""

Outcome = tuple[str, bool]
"""What the model is told of one call, and whether it is an error."""

_WIRE_NAME_RE = re.compile(r"[^A-Za-z0-9_-]")

# How a cut observation ends: the model is told how much it is not seeing.
_CUT = "… [cut: {rest} more characters]"

_MAX_ARGS_DEPTH = 64
TOO_DEEP = f"nested more than {_MAX_ARGS_DEPTH} levels deep"
"""Stands for arguments nested too deep to keep: recorded in their place, never sent back."""


def wire_name(name: str) -> str:
    """A tool's name as function calling allows it (letters, digits, ``_``, ``-``; 64 at most)."""
    return _WIRE_NAME_RE.sub("_", name)[:64]


@dataclass
class Call:
    """A tool call the model asked for, resolved against the tools."""

    id: str
    name: str
    args: Any  # as the model wrote them
    tool: Tool | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None  # set: the call is not made, this is its observation

    def signature(self) -> str:
        """What makes two calls the same: the tool and the arguments it would get, so that
        ``{"a": 1}`` / ``{"a": 1.0}`` / ``{"a": "1"}`` for an int, or a bare ``Paris`` and
        ``{"city": "Paris"}`` in text mode, count as one call."""
        if self.tool is None or self.problem is not None:
            return call_signature(self.name, self.args)
        try:
            return call_signature(self.tool.name, self.tool.validate_args(self.arguments))
        except ToolArgumentsError:
            return call_signature(self.tool.name, self.arguments)


class Toolbox:
    """The agent's tools as the model may name them, and how calls to them are made
    (``call_tool``: the plan node's way, else :func:`_default_call`)."""

    def __init__(
        self, tools: Registry, *, call_tool: CallTool | None, max_observation_chars: int
    ) -> None:
        self.tools = tools
        self.max_observation_chars = max_observation_chars
        self._call_tool = call_tool
        # Everything that does not change between steps is worked out once, here.
        self._lookup: dict[str, Tool] = {t.name: t for t in tools}
        for t in tools:
            self._lookup.setdefault(wire_name(t.name), t)
        folded: dict[str, list[Tool]] = {}
        for t in tools:
            folded.setdefault(t.name.casefold(), []).append(t)
        self._folded = {k: ts[0] for k, ts in folded.items() if len(ts) == 1}
        self._params: dict[str, list[str]] = {
            t.name: list(t.parameters_schema.get("properties", {})) for t in tools
        }
        # The parameter a bare Action Input fills: the only one, or the only required one.
        self._bare: dict[str, str] = {}
        for t in tools:
            params = self._params[t.name]
            required = [p for p in params if p in t.parameters_schema.get("required", ())]
            if len(params) == 1 or len(required) == 1:
                self._bare[t.name] = params[0] if len(params) == 1 else required[0]

    def render(self, value: Any) -> str:
        """``value`` as the model sees it: text, cut to ``max_observation_chars``."""
        return shorten(value, self.max_observation_chars, one_line=False, ellipsis=_CUT, fit=False)

    # -- resolving ---------------------------------------------------------------------------

    def resolve(
        self, call_id: str, name: str, args: Any, args_error: str | None, text: bool
    ) -> Call:
        """The call of ``name`` with ``args`` as the model wrote them (``args_error``: why
        they are not JSON; ``text``: written in text mode, where a bare input may do)."""
        if _too_deep(args):  # nobody could store, show or send it back
            call = Call(call_id, name, TOO_DEEP)
            call.problem = f"the arguments of {name!r} are {TOO_DEEP}"
            return call
        call = Call(call_id, name, args)
        tool = self._lookup.get(name)
        if tool is None:
            tool = self._folded.get(name.casefold())  # "Search" for "search", if unambiguous
        if tool is None:
            call.problem = str(UnknownToolError(name, self.tools.names or None))
            if not self.tools.names:
                call.problem += " (no tools are available: answer directly)"
            return call
        call.tool = tool
        if args_error is not None:
            call.problem = f"tool {tool.name!r}: {args_error}"
        elif isinstance(args, dict):
            call.arguments = args
        elif not text:
            call.problem = f"tool {tool.name!r}: arguments must be a JSON object"
        else:
            params = self._params[tool.name]
            if args is None or (not params and args == ""):
                call.arguments = {}
            elif tool.name in self._bare:
                call.arguments = {self._bare[tool.name]: args}
            else:
                wanted = ", ".join(params) if params else "none"
                call.problem = (
                    f"the Action Input of {tool.name!r} must be a JSON object of its arguments "
                    f"(parameters: {wanted})"
                )
        return call

    # -- making the calls --------------------------------------------------------------------

    async def run(
        self,
        calls: list[Call],
        deadline: float | None,
        waited: MutableMapping[int, TaskWaitingError],
    ) -> list[Outcome] | None:
        """Make the calls (concurrently); ``None`` if the deadline passed first. A call that
        waits for a person's decision goes into ``waited`` (by position), its siblings run
        to their end."""
        results: list[Outcome] = [("", False)] * len(calls)

        async def one(i: int) -> None:
            try:
                results[i] = await self._call_one(calls[i])
            except TaskWaitingError as exc:
                waited[i] = exc

        remaining = None if deadline is None else deadline - anyio.current_time()
        with anyio.move_on_after(remaining) as scope:
            if len(calls) == 1:
                await one(0)
            else:
                async with anyio.create_task_group() as tg:
                    for i in range(len(calls)):
                        tg.start_soon(one, i)
        if scope.cancelled_caught:
            return None
        return results

    async def _call_one(self, call: Call) -> Outcome:
        if call.problem is not None or call.tool is None:
            return call.problem or f"unknown tool {call.name!r}", True
        tool = call.tool
        try:
            with telemetry.tool_call_id(call.id):  # for the call's span, when tracing
                if self._call_tool is not None:
                    output = await self._call_tool(tool, call.arguments)
                else:
                    output = await _default_call(tool, call.arguments)
        except TaskDeniedError as exc:
            return f"denied: {exc.reason}", True
        except TaskWaitingError:
            raise  # not an observation: the agent pauses until a person decides
        except TaskTimeoutError as exc:  # "timed out after N s"
            return f"tool {tool.name!r} {exc}", True
        except ToolLimitError as exc:  # a guardrail: the agent may do without the tool
            return f"refused: {exc}", True
        except (ToolArgumentsError, UnknownToolError) as exc:
            return str(exc), True
        except Exception as exc:
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return f"tool {tool.name!r} failed: {detail}", True
        return self.render(output), False


async def _default_call(tool: Tool, args: dict[str, Any]) -> Any:
    """Validate, then call in-process, bounded by the tool's ``timeout_s``."""
    validated = tool.validate_args(args)
    if tool.timeout_s is None:
        return await tool.acall(validated)
    try:
        with anyio.fail_after(tool.timeout_s):
            return await tool.acall(validated)
    except TimeoutError:
        raise TaskTimeoutError(f"timed out after {tool.timeout_s:g} s") from None


def _too_deep(value: Any, limit: int = _MAX_ARGS_DEPTH) -> bool:
    """Whether ``value`` nests lists / dicts more than ``limit`` levels (without recursing)."""
    if not isinstance(value, (dict, list)):
        return False
    level: list[Any] = [value]
    for _ in range(limit):
        level = [
            v
            for item in level
            for v in (item.values() if isinstance(item, dict) else item)
            if isinstance(v, (dict, list))
        ]
        if not level:
            return False
    return True
