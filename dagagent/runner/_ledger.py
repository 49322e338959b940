"""The guardrails' ledger: how many calls each tool made in a run (or in a solve, across its
rounds) and when the last one started.

A tool may declare ``max_calls`` (at most that many calls) and ``cooldown_s`` (at least that
many seconds between the starts of two calls); an approval policy may declare limits of its
own over globs of tool names (:class:`~dagagent.approval.Limit`). Both are checked against one
:class:`CallLedger`: ``execute`` makes one per run unless given one, and ``solve`` gives the
same one to every round, so a limit holds across the whole solve.

A tool's own guardrails are checked at the innermost layer of the call seam, when the call is
about to reach its tool (after the interceptors: a call a cache answers, or a policy refuses,
is not a call of the tool), in the same step as the call is counted: concurrent calls can
never get past a limit together. A call that would cross one fails its task with
:class:`~dagagent.errors.ToolLimitError`, which is never retried. Time comes from the
ledger's ``clock`` (``time.monotonic`` unless given one: tests give a clock they move).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Literal

__all__ = ["CallLedger", "Clock", "Crossing"]

Clock = Callable[[], float]
"""Seconds, from any origin, that never go back (``time.monotonic``)."""


@dataclass(frozen=True)
class Crossing:
    """Why a call would cross a limit: which (``max_calls`` or ``cooldown_s``) and in words."""

    limit: Literal["max_calls", "cooldown_s"]
    message: str


class CallLedger:
    """Calls counted by key (a tool's name, or a policy's limit), with the start of the last
    one. ``scope`` names what it counts ("run" or "solve") in messages."""

    def __init__(self, *, clock: Clock | None = None, scope: str = "run") -> None:
        self.clock: Clock = clock or time.monotonic
        self.scope = scope
        self._count: dict[Hashable, int] = {}
        self._last: dict[Hashable, float] = {}

    def __repr__(self) -> str:
        return f"CallLedger(scope={self.scope!r}, {sum(self._count.values())} calls)"

    def calls(self, key: Hashable) -> int:
        """How many calls ``key`` counted so far."""
        return self._count.get(key, 0)

    def since_last(self, key: Hashable) -> float | None:
        """Seconds since the last call ``key`` counted started (``None``: none yet)."""
        last = self._last.get(key)
        return None if last is None else self.clock() - last

    def crossing(
        self, key: Hashable, what: str, *, max_calls: int | None, cooldown_s: float | None
    ) -> Crossing | None:
        """Whether one more call of ``key`` would cross ``max_calls`` or ``cooldown_s``, and
        why in words (``what`` names it: ``"tool 'send'"``); ``None``: it would not."""
        made = self.calls(key)
        if max_calls is not None and made >= max_calls:
            times = "time" if max_calls == 1 else "times"
            return Crossing(
                "max_calls",
                f"{what} may be called at most {max_calls} {times} in a {self.scope} "
                f"(max_calls={max_calls}) and was called {made} {'time' if made == 1 else 'times'}",
            )
        if cooldown_s is not None:
            since = self.since_last(key)
            if since is not None and since < cooldown_s:
                return Crossing(
                    "cooldown_s",
                    f"{what} was called {since:.3g} s ago and needs {cooldown_s:g} s between "
                    f"calls (cooldown_s={cooldown_s:g}): it may be called again in "
                    f"{cooldown_s - since:.3g} s",
                )
        return None

    def count(self, key: Hashable) -> None:
        """Count a call of ``key`` starting now."""
        self._count[key] = self._count.get(key, 0) + 1
        self._last[key] = self.clock()
