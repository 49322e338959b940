"""An approval :class:`Rule`: which calls it matches, and what to do with them."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..errors import ConfigError
from ._matchers import Matcher, compile_glob, compile_matcher

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["ACTIONS", "Action", "ArgsPredicate", "Rule"]

Action = Literal["allow", "deny", "ask"]
ACTIONS: tuple[str, ...] = ("allow", "deny", "ask")
_SOURCES = ("plan", "agent")

ArgsPredicate = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True, eq=False)
class Rule:
    """Match a tool call and say what to do with it (first matching rule of a policy wins).

    - ``action``: ``"allow"``, ``"deny"`` or ``"ask"``.
    - ``tool``: a glob on the tool name, or several (any may match); default every tool.
    - ``args``: a predicate on the validated arguments, or ``{arg name: matcher}`` (all must
      match; an argument the tool does not have never matches). See the module docstring.
    - ``side_effects``: match only tools that declared (``True``) or did not declare
      (``False``) side effects.
    - ``task``: a glob on the task id. ``source``: ``"plan"`` or ``"agent"`` calls only.
    - ``reason``: why (shown when the rule denies; recorded with every decision).
    - ``name``: how records and messages refer to the rule (default: its position).
    """

    action: Action
    tool: str | Sequence[str] = "*"
    args: Mapping[str, Any] | ArgsPredicate | None = None
    side_effects: bool | None = None
    task: str | None = None
    source: str | None = None
    reason: str | None = None
    name: str | None = None
    _tool_rx: re.Pattern[str] = field(init=False, repr=False)
    _task_rx: re.Pattern[str] | None = field(init=False, repr=False)
    _arg_matchers: tuple[tuple[str, Matcher, str], ...] = field(init=False, repr=False)
    _predicate: ArgsPredicate | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ConfigError(
                f"rule action must be one of {', '.join(ACTIONS)}, not {self.action!r}"
            )
        if self.source is not None and self.source not in _SOURCES:
            raise ConfigError(f"rule source must be 'plan' or 'agent', not {self.source!r}")
        tools = [self.tool] if isinstance(self.tool, str) else list(self.tool)
        if not tools or not all(isinstance(t, str) and t for t in tools):
            raise ConfigError(f"rule tool must be a glob or a list of globs, not {self.tool!r}")
        object.__setattr__(self, "tool", tools[0] if len(tools) == 1 else tuple(tools))
        tool_rx = re.compile("|".join(f"(?:{fnmatch.translate(t)})" for t in tools))
        object.__setattr__(self, "_tool_rx", tool_rx)
        object.__setattr__(self, "_task_rx", compile_glob(self.task) if self.task else None)
        matchers: list[tuple[str, Matcher, str]] = []
        predicate: ArgsPredicate | None = None
        if isinstance(self.args, Mapping):
            for name, spec in self.args.items():
                # an allow rule lets a collection through only if all of it matches
                m, desc = compile_matcher(spec, every=self.action == "allow")
                matchers.append((str(name), m, desc))
        elif callable(self.args):
            predicate = self.args
        elif self.args is not None:
            raise ConfigError(
                f"rule args must be a mapping of argument matchers or a predicate, "
                f"not {type(self.args).__name__}"
            )
        object.__setattr__(self, "_arg_matchers", tuple(matchers))
        object.__setattr__(self, "_predicate", predicate)

    # -- matching --------------------------------------------------------------------------

    def matches_tool(self, tool: Tool) -> bool:
        """Whether the tool name and the side-effects flag match."""
        if self._tool_rx.match(tool.name) is None:
            return False
        return self.side_effects is None or bool(tool.side_effects) is self.side_effects

    def matches_context(self, task_id: str = "", source: str = "plan") -> bool:
        """Whether the task id and the caller match."""
        if self._task_rx is not None and self._task_rx.match(task_id) is None:
            return False
        return self.source is None or self.source == source

    def matches_call(self, tool: Tool, task_id: str = "", source: str = "plan") -> bool:
        """Whether the parts of the rule that do not look at arguments match."""
        return self.matches_tool(tool) and self.matches_context(task_id, source)

    @property
    def looks_at_args(self) -> bool:
        return bool(self._arg_matchers) or self._predicate is not None

    @property
    def arg_names(self) -> tuple[str, ...]:
        """The arguments the rule's matchers look at (none for a predicate)."""
        return tuple(name for name, _, _ in self._arg_matchers)

    @property
    def has_predicate(self) -> bool:
        """Whether the rule looks at the arguments through a predicate (``args=callable``)."""
        return self._predicate is not None

    def matches_args(self, args: Mapping[str, Any]) -> bool:
        if self._predicate is not None:
            try:
                return bool(self._predicate(args))
            except Exception as exc:
                raise ConfigError(
                    f"{self.summary()}: its args predicate raised {type(exc).__name__}: {exc}"
                ) from exc
        for name, m, _ in self._arg_matchers:
            if name not in args:
                return False
            try:
                if not m(args[name]):
                    return False
            except Exception as exc:
                raise ConfigError(
                    f"{self.summary()}: the matcher for argument {name!r} raised "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        return True

    def matches(
        self, tool: Tool, args: Mapping[str, Any], task_id: str = "", source: str = "plan"
    ) -> bool:
        """Whether this rule applies to a call of ``tool`` with (validated) ``args``."""
        return self.matches_call(tool, task_id, source) and (
            not self.looks_at_args or self.matches_args(args)
        )

    # -- descriptions ----------------------------------------------------------------------

    def summary(self) -> str:
        """One line: ``deny tool delete_* if path=/etc/*``."""
        tools = [self.tool] if isinstance(self.tool, str) else list(self.tool)
        what = "any tool" if tools == ["*"] else "tool " + ",".join(tools)
        parts = [self.action, what]
        if self.side_effects is True:
            parts.append("with side effects")
        elif self.side_effects is False:
            parts.append("without side effects")
        if self.task:
            parts.append(f"in task {self.task}")
        if self.source:
            parts.append(f"called by {self.source}")
        if self._arg_matchers:
            parts.append("if " + ", ".join(f"{n}={d}" for n, _, d in self._arg_matchers))
        elif self._predicate is not None:
            name = getattr(self._predicate, "__name__", "predicate")
            parts.append(f"if {name}(args)")
        return " ".join(parts)

    def label(self, position: int) -> str:
        """How decisions name this rule: ``rule 'name'`` or ``rule #2 (ask tool x)``."""
        if self.name:
            return f"rule {self.name!r}"
        return f"rule #{position} ({self.summary()})"
