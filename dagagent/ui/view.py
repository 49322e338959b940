"""What the viewer shows of a run, computed once from its record: the task statuses and
levels, the critical path, the DAG laid out by level (:mod:`._dag`), the timeline's bars and
waits (:mod:`._bars`), and the limits that keep a big run usable.

Everything here is plain data (no HTML): the templates draw it, :mod:`.timeline` prints it,
and tests check it. The words shared by all of them (statuses, labels, durations) are in
:mod:`._labels`.

**Big runs.** A DAG of more than :data:`MAX_DAG_NODES` tasks (or with a level wider than
:data:`MAX_LEVEL_NODES`) is drawn collapsed: one box per level with its tasks counted by
status, linking to the task table filtered to that level. The timeline draws at most
:data:`MAX_BARS` bars: the critical path first, then the longest tasks, in start order, and
says how many it left out. The task table shows :data:`PAGE_SIZE` rows a page.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..graph import PlanGraph, finished_critical_path, recorded_graph
from ..store import RunRecord
from ._bars import MAX_BARS, Bar, TimelineView, layout_timeline, waits_of
from ._dag import MAX_DAG_NODES, MAX_LEVEL_NODES, DagView, Edge, LevelBox, Node, layout_dag
from ._labels import STATUSES, fmt_s, status_counts, task_kind, task_statuses, task_what

__all__ = [
    "MAX_BARS",
    "MAX_DAG_NODES",
    "MAX_LEVEL_NODES",
    "PAGE_SIZE",
    "STATUSES",
    "Bar",
    "DagView",
    "Edge",
    "LevelBox",
    "Node",
    "RunView",
    "TimelineView",
    "build_view",
    "fmt_s",
    "task_kind",
    "task_what",
    "waits_of",
]

PAGE_SIZE = 100


@dataclass
class RunView:
    """A run as the viewer shows it."""

    record: RunRecord
    graph: PlanGraph
    status_of: dict[str, str]
    level_of: dict[str, int]
    critical: list[str]
    critical_s: float
    counts: list[tuple[str, int]]
    dag: DagView
    timeline: TimelineView
    waits: dict[str, float]

    @property
    def running(self) -> bool:
        return self.record.status == "running"

    def task_ids(self, *, status: str | None = None, level: int | None = None) -> list[str]:
        """Task ids in plan order, optionally only those of one status or level."""
        return [
            t.id
            for t in self.record.plan.tasks
            if (status is None or self.status_of[t.id] == status)
            and (level is None or self.level_of[t.id] == level)
        ]


def build_view(record: RunRecord, *, now: float | None = None) -> RunView:
    """The viewer's picture of ``record`` (``now``: the time a running run is drawn at)."""
    graph = recorded_graph(record.plan)
    status_of = task_statuses(record)
    level_of = {t: i for i, lv in enumerate(graph.levels) for t in lv}
    critical_s, critical = _critical(record, graph)
    waits = {t: s - r for t, (r, s) in waits_of(record, graph).items()}
    return RunView(
        record=record,
        graph=graph,
        status_of=status_of,
        level_of=level_of,
        critical=critical,
        critical_s=critical_s,
        counts=status_counts(status_of),
        dag=layout_dag(graph, status_of, record, critical),
        timeline=layout_timeline(record, graph, status_of, critical, now),
        waits=waits,
    )


def _critical(record: RunRecord, graph: PlanGraph) -> tuple[float, list[str]]:
    if record.critical_path:
        return record.critical_path_s or 0.0, list(record.critical_path)
    return finished_critical_path(graph.order, graph.dependencies, record.tasks)
