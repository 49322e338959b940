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

**A resumed run** (or solve) counts on from its record (:func:`recorded_calls`,
:meth:`CallLedger.restore`): each call that reached a tool before the pause counts, and the
last one's start (a Unix time on record) starts the tool's cool-down again. A policy's limit
counts the recorded calls of the tools it matches the first time it is checked
(:meth:`CallLedger.carry`). The record cannot tell a call a cache answered from one that
reached its tool: such a call counts (the limits fail closed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ..plan import AgentTask, ToolTask
from ..results import TaskResult, TaskStatus

if TYPE_CHECKING:
    from ..plan import Task
    from ..tools import Registry, Tool

__all__ = ["CallLedger", "Clock", "Crossing", "recorded_calls"]

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
        # What a resumed run's record says each tool was called: (calls, last start, Unix).
        self._before: dict[Tool, tuple[int, float | None]] = {}
        self._carried: set[Hashable] = set()

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

    def last_at(self, key: Hashable) -> float | None:
        """When the last call ``key`` counted started, as a Unix time (``None``: none yet)."""
        since = self.since_last(key)
        return None if since is None else time.time() - since

    def seed(self, key: Hashable, calls: int, last_at: float | None) -> None:
        """Count for ``key`` the ``calls`` made elsewhere in the same run, the last one
        started at ``last_at`` (a Unix time): a task run on a worker, told what the run's
        other tasks made (the Temporal executor's workflow counts them). A policy's limit so
        seeded is not carried again (:meth:`carry`)."""
        self._carried.add(key)
        self._add(key, calls, last_at)

    def count(self, key: Hashable) -> None:
        """Count a call of ``key`` starting now."""
        self._count[key] = self._count.get(key, 0) + 1
        self._last[key] = self.clock()

    def restore(self, counts: Mapping[Tool, tuple[int, float | None]]) -> None:
        """Count the calls a record says each tool made before a resume (see
        :func:`recorded_calls`): ``{tool: (calls, start of the last one, a Unix time)}``."""
        for tool, (calls, last_at) in counts.items():
            before, at = self._before.get(tool, (0, None))
            self._before[tool] = (before + calls, _later(at, last_at))
            self._add(tool.name, calls, last_at)

    def carry(self, key: Hashable, matches: Callable[[Tool], bool]) -> None:
        """Count for ``key`` (a policy's limit) the restored calls of the tools it
        ``matches``, once: the first time it is checked."""
        if key in self._carried or not self._before:
            return
        self._carried.add(key)
        calls, last_at = 0, None
        for tool, (n, at) in self._before.items():
            if matches(tool):
                calls += n
                last_at = _later(last_at, at)
        self._add(key, calls, last_at)

    def _add(self, key: Hashable, calls: int, last_at: float | None) -> None:
        if calls <= 0:
            return
        self._count[key] = self._count.get(key, 0) + calls
        if last_at is not None:
            last = self.clock() - max(0.0, time.time() - last_at)  # on this ledger's clock
            self._last[key] = max(self._last.get(key, last), last)


def _later(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def recorded_calls(
    tasks: Iterable[Task], results: Mapping[str, TaskResult], registry: Registry
) -> dict[Tool, tuple[int, float | None]]:
    """The calls of each tool of ``registry`` that the recorded ``results`` of a run of
    ``tasks`` made, and when the last one started (see :meth:`CallLedger.restore`): a tool
    task's attempts (an element's, for a map), less one refused by a guardrail; an agent's
    calls that had an observation and were not refused. A task denied, waiting, reused or
    never started made none."""
    out: dict[Tool, tuple[int, float | None]] = {}

    def add(name: str, calls: int, at: float | None) -> None:
        if calls <= 0 or name not in registry:
            return
        tool = registry.get(name)
        n, last = out.get(tool, (0, None))
        out[tool] = (n + calls, _later(last, at))

    def of_result(task: Task, r: TaskResult) -> None:
        if r.elements:
            for element in r.elements:
                of_result(task, element)
            return
        if r.started_at is None or r.status not in _MADE_CALLS:
            return
        if isinstance(task, ToolTask):
            if r.status is TaskStatus.WAITING:  # its call waits for a person: not made
                return
            refused = 1 if r.error_type in ("ToolLimitError", "TaskDeniedError") else 0
            add(task.tool, r.attempts - refused, r.started_at)
        elif isinstance(task, AgentTask):
            for step in r.steps or ():
                for call in step.calls:
                    seen = call.observation
                    if seen is not None and not seen.startswith(("refused", "denied")):
                        add(call.tool, 1, r.started_at)

    for task in tasks:
        result = results.get(task.id)
        if result is not None:
            of_result(task, result)
    return out


# The statuses of a task that may have reached its tool (a map's: of an element).
_MADE_CALLS = frozenset(
    {TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED, TaskStatus.WAITING}
)
