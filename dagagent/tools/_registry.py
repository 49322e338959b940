"""The registry: named tools, and the connections their calls need while a run lasts."""

from __future__ import annotations

import fnmatch
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, overload

import anyio
from typing_extensions import Unpack

from ..errors import ToolDefinitionError, UnknownToolError
from ._tool import F, Tool, ToolOptions

__all__ = ["Registry", "connected"]


class Registry:
    """Named tools. ``@registry.tool`` registers a function; names must be unique."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.add(t)

    @overload
    def tool(self, fn: F, /) -> Tool: ...
    @overload
    def tool(self, /, **options: Unpack[ToolOptions]) -> Callable[[F], Tool]: ...
    def tool(self, fn: Any = None, /, **options: Any) -> Any:
        if fn is not None:
            return self.add(Tool(fn, **options))

        def deco(f: F) -> Tool:
            return self.add(Tool(f, **options))

        return deco

    def add(self, t: Tool | Callable[..., Any]) -> Tool:
        if not isinstance(t, Tool):
            t = Tool(t)
        if t.name in self._tools:
            raise ToolDefinitionError(f"a tool named {t.name!r} is already registered")
        self._tools[t.name] = t
        return t

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(name, list(self._tools)) from None

    def __getitem__(self, name: str) -> Tool:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"Registry({sorted(self._tools)})"

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        """Every tool's name, description and argument schema."""
        return [t.spec() for t in self._tools.values()]

    def subset(self, names: Iterable[str]) -> Registry:
        """A registry holding only ``names`` (unknown names raise :class:`UnknownToolError`)."""
        return Registry(self.get(n) for n in names)

    def select(self, pattern: str) -> list[Tool]:
        """Tools whose name matches a shell-style pattern."""
        return [t for n, t in self._tools.items() if fnmatch.fnmatchcase(n, pattern)]


@asynccontextmanager
async def connected(tools: Iterable[Tool]) -> AsyncIterator[None]:
    """Open the :attr:`~Tool.connection` of every tool that has one (each once) for as long as
    the block runs, and close them when it ends, also on failure or cancellation.

    Several connections (MCP servers, say) open at the same time, each in a task of its own
    that holds it until the block ends: a slow server does not make the others wait. If one
    cannot be opened, the others are closed again and its error is raised, as itself."""
    conns: list[AbstractAsyncContextManager[Any]] = []
    for t in tools:
        c = t.connection
        if c is not None and not any(c is o for o in conns):
            conns.append(c)
    if len(conns) <= 1:
        async with AsyncExitStack() as stack:
            for c in conns:
                await stack.enter_async_context(c)
            yield
        return
    failures: list[Exception] = []
    release = anyio.Event()

    async def hold(c: AbstractAsyncContextManager[Any], ready: anyio.Event) -> None:
        try:
            async with c:
                ready.set()
                await release.wait()
        except Exception as exc:  # could not be opened (or failed closing): the caller says
            failures.append(exc)
            release.set()  # the others let go of theirs
        finally:
            ready.set()

    error: BaseException | None = None
    async with anyio.create_task_group() as tg:
        opened = [anyio.Event() for _ in conns]
        for c, ready in zip(conns, opened, strict=True):
            tg.start_soon(hold, c, ready)
        for ready in opened:
            await ready.wait()
        if not failures:
            try:
                yield
            except BaseException as exc:  # raised again below, as itself: a task group
                error = exc  # would wrap it in an exception group
        release.set()
    if error is not None:
        raise error
    if failures:
        raise failures[0]
