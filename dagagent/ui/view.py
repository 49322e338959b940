"""What the viewer shows of a run, computed once from its record: the task statuses and
levels, the critical path, the DAG laid out by level (:mod:`._dag`), the timeline's bars and
waits (:mod:`._bars`), and the limits that keep a big run usable.

Everything here is plain data (no HTML): the templates draw it, :mod:`.timeline` prints it,
and tests check it. The words shared by all of them (statuses, labels, durations) are in
:mod:`._labels`.

**Big runs.** A DAG of more than :data:`MAX_DAG_NODES` tasks (or with a level wider than
:data:`MAX_LEVEL_NODES`) is drawn collapsed: one box per level with its tasks counted by
status, linking to the task table filtered to that level; a DAG of more than
:data:`MAX_LEVEL_BOXES` levels puts consecutive levels in one box. The timeline draws at most
:data:`MAX_BARS` bars: the critical path first, then the longest tasks, in start order, and
says how many it left out. The task table shows :data:`PAGE_SIZE` rows a page. So what a page
holds does not grow with the run; any task is one search (its id) or one filter away.

The DAG, the timeline and the waits are computed when first used: a task's panel needs none
of them (only that task's wait, :meth:`RunView.wait_of`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ..graph import PlanGraph, finished_critical_path, recorded_graph
from ..store import ApprovalRecord, RunRecord, person_wait_s, person_waits
from ._bars import MAX_BARS, Bar, TimelineView, Waits, layout_timeline, waits_of
from ._dag import (
    MAX_DAG_NODES,
    MAX_LEVEL_BOXES,
    MAX_LEVEL_NODES,
    DagView,
    Edge,
    LevelBox,
    Node,
    layout_dag,
)
from ._labels import STATUSES, fmt_s, status_counts, task_kind, task_statuses, task_what

__all__ = [
    "MAX_BARS",
    "MAX_DAG_NODES",
    "MAX_LEVEL_BOXES",
    "MAX_LEVEL_NODES",
    "PAGE_SIZE",
    "STATUSES",
    "Bar",
    "DagView",
    "Edge",
    "LevelBox",
    "LevelSpan",
    "Node",
    "RunView",
    "TimelineView",
    "Waits",
    "build_view",
    "fmt_s",
    "task_kind",
    "task_what",
    "waits_of",
]

PAGE_SIZE = 100

LevelSpan = tuple[int, int]
"""Levels ``first`` to ``last`` (both included): what a box of a collapsed DAG holds, and what
the task table can be filtered to."""


@dataclass
class RunView:
    """A run as the viewer shows it, at ``now``."""

    record: RunRecord
    graph: PlanGraph
    status_of: dict[str, str]
    level_of: dict[str, int]
    critical: list[str]
    critical_s: float
    counts: list[tuple[str, int]]
    now: float
    #: When each task waited for a person's decision (Unix times), by task.
    people: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    @cached_property
    def waits(self) -> dict[str, Waits]:
        """What came before each task that started (see :class:`Waits`)."""
        return waits_of(self.record, self.graph, self.people)

    def wait_of(self, task_id: str) -> Waits | None:
        """What came before one task (``None``: it did not start), without the others'."""
        if "waits" in self.__dict__:
            return self.waits.get(task_id)
        return waits_of(self.record, self.graph, self.people, only=(task_id,)).get(task_id)

    @cached_property
    def dag(self) -> DagView:
        """The DAG laid out by level (collapsed when it is too big to draw)."""
        return layout_dag(self.graph, self.status_of, self.record, self.critical, now=self.now)

    @cached_property
    def timeline(self) -> TimelineView:
        """The timeline's bars and ticks."""
        return layout_timeline(
            self.record,
            self.graph,
            self.status_of,
            self.critical,
            self.now,
            self.people,
            waits=self.__dict__.get("waits"),
        )

    @property
    def running(self) -> bool:
        return self.record.status == "running"

    @property
    def started_at(self) -> float:
        """When the run started (a run still under way: when its record began)."""
        r = self.record
        return r.started_at if r.started_at is not None else r.created

    @property
    def elapsed_s(self) -> float | None:
        """The run's wall time; so far, for a run still under way (``None``: not known, a run
        whose process died)."""
        r = self.record
        if r.wall_time_s is not None:
            return r.wall_time_s
        if self.running:
            return max(0.0, self.now - self.started_at)
        return None

    @property
    def people_s(self) -> float:
        """How much of the run's wall time a call of it waited for a person's decision (a
        paused run until a resume used the decision; a question on the terminal)."""
        end = self.record.finished_at if self.record.finished_at is not None else self.now
        return person_wait_s(self.people, self.started_at, end)

    def task_elapsed_s(self, task_id: str) -> float | None:
        """How long a task took, or has been running so far."""
        r = self.record.tasks.get(task_id)
        if r is None:
            return None
        if r.duration_s is not None:
            return r.duration_s
        if r.started_at is not None and self.status_of.get(task_id) == "running":
            return max(0.0, self.now - r.started_at)
        return None

    def waiting_tasks(self) -> list[str]:
        """The tasks that wait for a person's decision, in plan order."""
        return [t for t, s in self.status_of.items() if s == "waiting"]

    def task_ids(
        self, *, status: str | None = None, level: int | LevelSpan | None = None
    ) -> list[str]:
        """Task ids in plan order, optionally only those of one status, or of one level (or
        span of levels)."""
        lo, hi = (level, level) if isinstance(level, int) else level or (0, 0)
        return [
            t.id
            for t in self.record.plan.tasks
            if (status is None or self.status_of[t.id] == status)
            and (level is None or lo <= self.level_of[t.id] <= hi)
        ]


def build_view(
    record: RunRecord,
    *,
    now: float | None = None,
    approvals: Sequence[ApprovalRecord] = (),
) -> RunView:
    """The viewer's picture of ``record`` at ``now`` (default: now); ``approvals``: the run's
    :meth:`~dagagent.store.RunStore.approval_history`, for the time its tasks waited for a
    person."""
    now = time.time() if now is None else now
    graph = recorded_graph(record.plan)
    status_of = task_statuses(record)
    level_of = {t: i for i, lv in enumerate(graph.levels) for t in lv}
    critical_s, critical = _critical(record, graph)
    # A question still open waits until now: the run is paused (or still going) for it.
    until = now if record.status in ("paused", "running") else record.finished_at
    people = person_waits(approvals, until=until)
    return RunView(
        record=record,
        graph=graph,
        status_of=status_of,
        level_of=level_of,
        critical=critical,
        critical_s=critical_s,
        counts=status_counts(status_of),
        now=now,
        people=people,
    )


def _critical(record: RunRecord, graph: PlanGraph) -> tuple[float, list[str]]:
    if record.critical_path:
        return record.critical_path_s or 0.0, list(record.critical_path)
    return finished_critical_path(graph.order, graph.dependencies, record.tasks)
