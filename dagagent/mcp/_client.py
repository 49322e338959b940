"""One MCP server as dagagent connects to it: the session's life, listing, calls.

The SDK's transports and session are async context managers that run task groups, so they
must be entered and left by one task. :class:`MCPClient` gives them a task of their own (the
*owner*), started in a task group that the first ``async with client`` opens and the same
block closes. Every other user (tool calls from any task, nested ``async with`` from other
runs) only talks to the session. So a transport that breaks (an HTTP server gone, a crashed
subprocess) ends the owner task, never the run: the owner notes why, and every call still
waiting fails with :class:`~dagagent.errors.MCPServerLostError` instead of hanging.

Starting the server and its transport is :mod:`._launch`; what a call returns,
:mod:`._results`; the server's tools as dagagent tools, :mod:`._tools`.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TextIO, cast

import anyio

from ..errors import ConfigError, MCPConnectError, MCPServerLostError, MCPToolError
from ..text import redact_command_line
from ._bounded import DEFAULT_MAX_BLOCKS, DEFAULT_MAX_BYTES, DEFAULT_MAX_SCHEMA_BYTES, MCPLimits
from ._launch import ServerStderr, brief, connect, import_sdk, startup_failure
from ._results import call_output

if TYPE_CHECKING:
    from mcp import Client
    from mcp_types import RequestParamsMeta, Tool as MCPToolSpec

    from ..tools import Registry
    from ._tools import MCPTool

__all__ = ["MCPClient"]

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,31}$")
_MAX_PAGES = 1000  # a server whose listing never ends is not listed forever


class MCPClient:
    """A connection to one MCP server: a command run as a subprocess (stdio) or a URL
    (streamable HTTP, with ``headers`` sent on every request).

    ``async with client:`` opens the session (a configuration error,
    :class:`~dagagent.errors.MCPConnectError`, if the server cannot be started, reached or
    does not complete the MCP handshake within ``connect_timeout_s``) and closes it when the
    block ends, also on failure and cancellation. Entering it again (from any task) while it
    is open shares the session; the first block closes it once the others have left.
    :func:`~dagagent.execute` opens the clients of the tools a run uses, so a client needs no
    block of its own unless it should stay open across several runs.

    ``timeout_s`` is the default timeout of its tools' calls (a task's ``timeout_s`` overrides
    it; ``None``: none). What the server sends is bounded as it is read, before it is parsed:
    ``max_output_bytes`` per message (16 MiB), ``max_blocks`` content blocks per result
    (10,000), ``max_schema_bytes`` per tool schema (256 KiB); a call past them fails with
    :class:`~dagagent.errors.MCPToolError`, a listing with
    :class:`~dagagent.errors.MCPConnectError`, a tool's schema with
    :class:`~dagagent.errors.ToolDefinitionError`. A subprocess gets the MCP SDK's minimal
    environment (``PATH``, ``HOME``...) plus ``env``, so dagagent's own keys do not reach it;
    its stderr is kept and its last lines are shown when it fails (pass ``stderr`` to see it
    as it comes).
    """

    def __init__(
        self,
        name: str,
        *,
        command: str | None = None,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        connect_timeout_s: float = 60.0,
        timeout_s: float | None = 300.0,
        stderr: TextIO | None = None,
        max_output_bytes: int = DEFAULT_MAX_BYTES,
        max_blocks: int = DEFAULT_MAX_BLOCKS,
        max_schema_bytes: int = DEFAULT_MAX_SCHEMA_BYTES,
    ) -> None:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ConfigError(
                f"MCP server name {name!r} is not valid: use 1-32 letters, digits, '_' or '-', "
                "starting with a letter or '_'"
            )
        if (command is None) == (url is None):
            raise ConfigError(f"MCP server {name!r}: give a command or a URL (one of them)")
        if command is not None and not command.strip():
            raise ConfigError(f"MCP server {name!r}: the command is empty")
        if url is not None and not re.match(r"^https?://", url):
            raise ConfigError(f"MCP server {name!r}: the URL must start with http:// or https://")
        if url is None and headers:
            raise ConfigError(f"MCP server {name!r}: headers are for a server reached by URL")
        if connect_timeout_s <= 0:
            raise ConfigError(f"MCP server {name!r}: connect_timeout_s must be > 0")
        if timeout_s is not None and timeout_s <= 0:
            raise ConfigError(f"MCP server {name!r}: timeout_s must be > 0")
        for option, value in (
            ("max_output_bytes", max_output_bytes),
            ("max_blocks", max_blocks),
            ("max_schema_bytes", max_schema_bytes),
        ):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"MCP server {name!r}: {option} must be a whole number >= 1")
        self.name = name
        self.command = command
        self.args = tuple(args)
        self.env = dict(env) if env else None
        self.cwd = cwd
        self.url = url
        self.headers = dict(headers) if headers else None
        self.connect_timeout_s = connect_timeout_s
        self.timeout_s = timeout_s
        #: What the server may send: a message's bytes, a result's content blocks, a schema's
        #: bytes (see :mod:`._bounded`).
        self.limits = MCPLimits(max_output_bytes, max_blocks, max_schema_bytes)
        self._stderr = ServerStderr(stderr)
        # -- the open session (see the module docstring) --
        self._stack: AsyncExitStack | None = None  # holds the owner's task group while open
        self._client: Client | None = None
        self._opening: anyio.Event | None = None
        self._open_error: str | None = None
        self._opener: int | None = None  # id of the task whose block opened the session
        self._opener_depth = 0
        self._others = 0  # blocks of other tasks inside the opener's
        self._idle: anyio.Event | None = None
        self._closing: anyio.Event | None = None
        self._lost: str | None = None
        self._calls: set[anyio.CancelScope] = set()

    @classmethod
    def stdio(cls, name: str, command: str, args: Sequence[str] = (), **options: Any) -> MCPClient:
        """A server started as ``command args...``, speaking MCP over its stdin/stdout."""
        return cls(name, command=command, args=args, **options)

    @classmethod
    def http(
        cls, name: str, url: str, headers: Mapping[str, str] | None = None, **options: Any
    ) -> MCPClient:
        """A server reached over streamable HTTP at ``url``."""
        return cls(name, url=url, headers=headers, **options)

    @classmethod
    def parse(cls, spec: str, **options: Any) -> MCPClient:
        """``NAME=URL`` (http:// or https://) or ``NAME=COMMAND ARGS...`` (split like a shell
        would), as ``--mcp`` takes it."""
        name, sep, target = spec.partition("=")
        name, target = name.strip(), target.strip()
        if not sep or not name or not target:
            raise ConfigError(f"--mcp must look like NAME=COMMAND... or NAME=URL, got {spec!r}")
        if re.match(r"^https?://", target):
            return cls.http(name, target, **options)
        try:
            words = shlex.split(target)
        except ValueError as exc:
            raise ConfigError(f"--mcp {name}: cannot split the command: {exc}") from None
        return cls.stdio(name, words[0], words[1:], **options)

    def __repr__(self) -> str:
        return f"MCPClient({self.name!r}, {self.where})"

    @property
    def where(self) -> str:
        """The command or URL as messages show them: never the headers, and every value that
        may be a secret hidden (see :func:`~dagagent.text.redact_command_line`)."""
        if self.url is not None:
            return redact_command_line(self.url)
        return redact_command_line(shlex.join([self.command or "", *self.args]))

    @property
    def is_open(self) -> bool:
        return self._client is not None

    # -- the session ----------------------------------------------------------------------

    async def __aenter__(self) -> MCPClient:
        me = anyio.get_current_task().id
        if self._opening is not None:  # another task is opening it: share the outcome
            await self._opening.wait()
            if self._stack is None:
                raise MCPConnectError(self._open_error or f"MCP server {self.name!r} failed")
        if self._stack is not None:
            if me == self._opener:
                self._opener_depth += 1
            else:
                if self._others == 0:
                    self._idle = anyio.Event()
                self._others += 1
            return self
        import_sdk()
        opening = self._opening = anyio.Event()
        stack = self._stack = AsyncExitStack()
        self._opener, self._opener_depth, self._others = me, 1, 0
        try:
            tg = await stack.enter_async_context(anyio.create_task_group())
            await tg.start(self._own)
        except BaseException as exc:
            self._stack = None
            self._open_error = str(exc)
            await stack.aclose()  # no task left in it: returns at once
            raise
        finally:
            self._opening = None
            opening.set()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if anyio.get_current_task().id != self._opener:
            self._others -= 1
            if self._others == 0 and self._idle is not None:
                self._idle.set()
            return
        self._opener_depth -= 1
        if self._opener_depth:
            return
        try:
            if self._others and self._idle is not None:
                await self._idle.wait()  # the runs sharing the session finish first
        finally:
            stack, self._stack = self._stack, None
            if self._closing is not None:
                self._closing.set()
            if stack is not None:
                await stack.aclose()  # the owner leaves the SDK's contexts
            self._opener = None

    async def _own(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """The owner task: open the SDK's transport and session, keep them until closed."""
        started = False
        self._lost = None
        self._closing = closing = anyio.Event()
        try:
            deadline = anyio.current_time() + self.connect_timeout_s
            with anyio.CancelScope(deadline=deadline) as scope:
                async with AsyncExitStack() as stack:
                    client = await connect(self, stack, self._stderr)
                    scope.deadline = math.inf
                    self._client = client
                    started = True
                    task_status.started()
                    await closing.wait()
            if scope.cancelled_caught and not started:
                raise MCPConnectError(
                    f"MCP server {self.name!r} ({self.where}) did not complete the MCP "
                    f"handshake within {self.connect_timeout_s:g} s{self._stderr.tail()}"
                )
        except MCPConnectError:
            raise
        except Exception as exc:
            if not started:
                raise MCPConnectError(
                    f"cannot connect to MCP server {self.name!r} ({self.where}): "
                    f"{startup_failure(exc)}{self._stderr.tail()}"
                ) from None
            # the transport broke: the run goes on, the calls fail
            self._lost = f"broke the connection ({brief(exc)})"
        finally:
            self._client = None
            for call in self._calls:
                call.cancel()
            self._stderr.forget()

    # -- listing and calls ----------------------------------------------------------------

    async def list_tools(self) -> list[MCPToolSpec]:
        """Every tool the server offers (all pages), as the SDK describes them. Opens the
        session for the listing if it is not open."""
        if not self.is_open:
            async with self:
                return await self.list_tools()
        client = self._live()
        tools: list[MCPToolSpec] = []
        cursor: str | None = None
        seen: set[str] = set()
        try:
            with anyio.fail_after(self.connect_timeout_s):
                for _ in range(_MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        return tools
                    if cursor in seen:
                        raise MCPConnectError(
                            f"MCP server {self.name!r}: its tool listing repeats page "
                            f"{cursor[:40]!r}"
                        )
                    seen.add(cursor)
        except TimeoutError:
            raise MCPConnectError(
                f"MCP server {self.name!r} did not list its tools within "
                f"{self.connect_timeout_s:g} s"
            ) from None
        except MCPConnectError:
            raise
        except Exception as exc:
            raise MCPConnectError(
                f"cannot list the tools of MCP server {self.name!r}: {brief(exc)}"
                f"{self._stderr.tail()}"
            ) from None
        raise MCPConnectError(
            f"MCP server {self.name!r}: its tool listing has more than {_MAX_PAGES} pages"
        )

    async def tools(
        self,
        *,
        prefix: str | None = None,
        include: str | Iterable[str] | None = None,
        exclude: str | Iterable[str] | None = None,
    ) -> list[MCPTool]:
        """The server's tools as dagagent tools (see :mod:`dagagent.mcp`): named
        ``prefix + name``, only those whose server-side name matches a glob of ``include``
        (default: all) and none of ``exclude``."""
        from ._tools import build_tools

        return build_tools(self, await self.list_tools(), prefix, include, exclude)

    async def add_to(
        self,
        registry: Registry,
        *,
        prefix: str | None = None,
        include: str | Iterable[str] | None = None,
        exclude: str | Iterable[str] | None = None,
    ) -> list[MCPTool]:
        """Add the server's tools to ``registry`` (see :meth:`tools`); return them."""
        tools = await self.tools(prefix=prefix, include=include, exclude=exclude)
        for t in tools:
            registry.add(t)
        return tools

    def _live(self) -> Client:
        client = self._client
        if client is None:  # gone before the call: it is not sent
            raise MCPServerLostError(self._lost_message(), mid_call=False)
        return client

    def _lost_message(self, tool: str | None = None, *, lost_before: bool = True) -> str:
        """Why a call cannot be answered. ``tool`` was running when the connection went,
        unless it was gone before the call (``lost_before``); the first call to find out
        records it, for the calls after it."""
        if self._stack is None:
            return (
                f"MCP server {self.name!r} is not connected: its tools are called during "
                "execute() (which opens it) or inside `async with client:`"
            )
        if self._lost is None:
            self._lost = "closed the connection"
        when = " earlier" if lost_before or tool is None else f" while tool {tool!r} was running"
        return f"MCP server {self.name!r} {self._lost}{when}{self._stderr.tail()}"

    async def call(
        self, tool: str, arguments: Mapping[str, Any], *, meta: Mapping[str, Any] | None = None
    ) -> Any:
        """Call the server's tool ``tool``; return its output (see :mod:`dagagent.mcp`).
        ``meta``: entries of the request's ``_meta`` (an MCP tool with side effects sends
        its call's identity, see :func:`~dagagent.mcp._tools.call_meta`)."""
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED

        client = self._live()
        lost_before = self._lost is not None
        scope = anyio.CancelScope()
        self._calls.add(scope)
        try:
            with scope:
                result = await client.call_tool(
                    tool,
                    dict(arguments),
                    meta=cast("RequestParamsMeta", dict(meta)) if meta else None,
                )
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                raise MCPServerLostError(
                    self._lost_message(tool, lost_before=lost_before), mid_call=not lost_before
                ) from None
            raise MCPToolError(f"MCP server {self.name!r}: {exc.message}") from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream):
            raise MCPServerLostError(
                self._lost_message(tool, lost_before=lost_before), mid_call=not lost_before
            ) from None
        except Exception as exc:  # an answer that does not fit its schema or the protocol
            raise MCPToolError(f"MCP server {self.name!r}: {brief(exc)}") from None
        finally:
            self._calls.discard(scope)
        if scope.cancelled_caught:
            raise MCPServerLostError(
                self._lost_message(tool, lost_before=lost_before), mid_call=not lost_before
            )
        return call_output(result, self.name, self.limits)
