"""The registry: named tools, and the connections their calls need while a run lasts."""

from __future__ import annotations

import fnmatch
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from types import MappingProxyType
from typing import Any, overload

import anyio
from typing_extensions import Unpack

from ..errors import ToolDefinitionError, UnknownToolError
from ._skills import READ_SKILL, Skill, load_skills
from ._tool import F, Tool, ToolOptions

__all__ = ["Registry", "connected"]


class Registry:
    """Named tools. ``@registry.tool`` registers a function; names must be unique.

    It also holds skills (:mod:`dagagent.tools._skills`): ``registry.skill(name, summary,
    text)`` or ``registry.load_skills(folder)``; the first one adds the ``read_skill`` tool,
    which returns a skill's full text, and the prompts of the planner and the agent list the
    summaries."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._skills: dict[str, Skill] = {}
        for t in tools:
            self.add(t)

    # -- skills ----------------------------------------------------------------------------

    @property
    def skills(self) -> Mapping[str, Skill]:
        """The skills, by name (read-only)."""
        return MappingProxyType(self._skills)

    def skill(self, name: str, summary: str, text: str) -> Skill:
        """Add a skill: ``summary`` (one line) goes in the prompts, ``text`` (Markdown) to a
        model that calls ``read_skill`` with ``name``."""
        return self.add_skill(Skill(name=name, summary=summary, text=text))

    def add_skill(self, skill: Skill) -> Skill:
        if skill.name in self._skills:
            raise ToolDefinitionError(f"a skill named {skill.name!r} is already registered")
        if not self._skills:
            if READ_SKILL in self._tools:
                raise ToolDefinitionError(
                    f"a tool named {READ_SKILL!r} is already registered: skills need that name "
                    "for the tool that reads them"
                )
            self.add(_skill_reader(self._skills))
        self._skills[skill.name] = skill
        return skill

    def load_skills(self, directory: str | Path) -> list[Skill]:
        """Add the skills of a folder of Markdown files (see
        :func:`~dagagent.tools.load_skills`); a :class:`~dagagent.errors.ConfigError` names
        the file that cannot be used."""
        skills = load_skills(directory)
        for s in skills:
            if s.name in self._skills:
                raise ToolDefinitionError(
                    f"a skill named {s.name!r} is already registered (again in {s.source})"
                )
        for s in skills:
            self.add_skill(s)
        return skills

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
        """A registry holding only ``names`` (unknown names raise :class:`UnknownToolError`),
        and this one's skills with ``read_skill``: what a procedure says is not a tool the
        subset leaves out."""
        sub = Registry(self.get(n) for n in names)
        if self._skills:
            if READ_SKILL not in sub:
                sub.add(self.get(READ_SKILL))
            sub._skills = self._skills
        return sub

    def select(self, pattern: str) -> list[Tool]:
        """Tools whose name matches a shell-style pattern."""
        return [t for n, t in self._tools.items() if fnmatch.fnmatchcase(n, pattern)]


def _skill_reader(skills: Mapping[str, Skill]) -> Tool:
    async def read_skill(name: str) -> str:
        """The full text of a skill: a procedure written down for a kind of task. The skills
        and what each is for are listed in the prompt; read one when a task matches it.

        Args:
            name: The skill's name, as listed.
        """
        skill = skills.get(name)
        if skill is None:
            known = ", ".join(sorted(skills)) or "none"
            raise LookupError(f"no skill is named {name!r}; the skills are: {known}")
        return skill.text

    return Tool(read_skill, tags=("skills",))


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
