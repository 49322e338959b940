"""A policy's :class:`Limit`: at most so many calls of some tools, or so many seconds between
them, across a run or a solve; what to do with a call that would cross it."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..tools import Tool

__all__ = ["LIMIT_ACTIONS", "Limit", "LimitAction"]

LimitAction = Literal["deny", "ask"]
LIMIT_ACTIONS: tuple[str, ...] = ("deny", "ask")


@dataclass(frozen=True, eq=False)
class Limit:
    """Calls of the matching tools a policy lets through, counted together across a run (or a
    solve, across its rounds: see :class:`~dagagent.runner.CallLedger`).

    - ``tool``: a glob on the tool name, or several; ``side_effects``: only tools that
      declared (``True``) or did not declare (``False``) side effects.
    - ``max_calls``: at most this many calls of them; ``cooldown_s``: at least this many
      seconds between the starts of two of them. At least one of the two.
    - ``action``: what a call that would cross the limit meets: ``"deny"`` (the default: the
      task is ``denied``, its error says which limit and why) or ``"ask"`` (the policy's
      ``ask`` callback decides whether this one call may go beyond it; a resumed run hands
      it the decision a person recorded).
    - ``reason``, ``name``: as for a :class:`~dagagent.approval.Rule`.

    A tool's own ``max_calls`` and ``cooldown_s`` (``@registry.tool(max_calls=...)``) are
    checked as well, whatever its policies say, and fail the task when crossed.
    """

    tool: str | Sequence[str] = "*"
    max_calls: int | None = None
    cooldown_s: float | None = None
    action: LimitAction = "deny"
    side_effects: bool | None = None
    reason: str | None = None
    name: str | None = None
    _tool_rx: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.action not in LIMIT_ACTIONS:
            raise ConfigError(
                f"limit action must be one of {', '.join(LIMIT_ACTIONS)}, not {self.action!r}"
            )
        if self.max_calls is None and self.cooldown_s is None:
            raise ConfigError("a limit needs max_calls, cooldown_s or both")
        if self.max_calls is not None and (
            isinstance(self.max_calls, bool) or not isinstance(self.max_calls, int)
        ):
            raise ConfigError(f"limit max_calls must be a whole number, not {self.max_calls!r}")
        if self.max_calls is not None and self.max_calls < 0:
            raise ConfigError(f"limit max_calls must be 0 or more, not {self.max_calls}")
        if self.cooldown_s is not None and not self.cooldown_s > 0:
            raise ConfigError(f"limit cooldown_s must be > 0, not {self.cooldown_s!r}")
        tools = [self.tool] if isinstance(self.tool, str) else list(self.tool)
        if not tools or not all(isinstance(t, str) and t for t in tools):
            raise ConfigError(f"limit tool must be a glob or a list of globs, not {self.tool!r}")
        object.__setattr__(self, "tool", tools[0] if len(tools) == 1 else tuple(tools))
        tool_rx = re.compile("|".join(f"(?:{fnmatch.translate(t)})" for t in tools))
        object.__setattr__(self, "_tool_rx", tool_rx)

    def matches(self, tool: Tool) -> bool:
        """Whether the limit counts calls of ``tool``."""
        if self._tool_rx.match(tool.name) is None:
            return False
        return self.side_effects is None or bool(tool.side_effects) is self.side_effects

    def what(self) -> str:
        """How messages name the tools it counts: ``tool 'send'``, ``tools send_*``."""
        tools = [self.tool] if isinstance(self.tool, str) else list(self.tool)
        if tools == ["*"]:
            what = "any tool"
        elif len(tools) == 1 and not any(c in tools[0] for c in "*?["):
            what = f"tool {tools[0]!r}"
        else:
            what = "tools " + ", ".join(tools)
        if self.side_effects is True:
            what += " with side effects"
        elif self.side_effects is False:
            what += " without side effects"
        return what

    def summary(self) -> str:
        """One line: ``deny tools send_* past max_calls=3``."""
        bounds = []
        if self.max_calls is not None:
            bounds.append(f"max_calls={self.max_calls}")
        if self.cooldown_s is not None:
            bounds.append(f"cooldown_s={self.cooldown_s:g}")
        return f"{self.action} {self.what()} past {' and '.join(bounds)}"

    def label(self, position: int) -> str:
        """How decisions name this limit: ``limit 'name'`` or ``limit #1 (...)``."""
        if self.name:
            return f"limit {self.name!r}"
        return f"limit #{position} ({self.summary()})"
