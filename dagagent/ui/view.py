"""What the viewer shows of a run, computed once from its record: the DAG laid out by level,
the timeline's bars and waits, the critical path, and the limits that keep a 10,000-task run
usable.

Everything here is plain data (no HTML): the templates draw it, :mod:`.timeline` prints it,
and tests check it. Coordinates are in SVG user units.

**Big runs.** A DAG of more than :data:`MAX_DAG_NODES` tasks (or with a level wider than
:data:`MAX_LEVEL_NODES`) is drawn collapsed: one box per level with its tasks counted by
status, linking to the task table filtered to that level. The timeline draws at most
:data:`MAX_BARS` bars: the critical path first, then the longest tasks, in start order, and
says how many it left out. The task table shows :data:`PAGE_SIZE` rows a page.

(Over 400 lines: the layout of the graph and of the timeline read the same run data and
share its types; apart, each would re-derive statuses, levels and the critical path.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from ..graph import PlanGraph, finished_critical_path, validate
from ..results import TaskResult
from ..store import RunRecord
from ..text import shorten

__all__ = [
    "MAX_BARS",
    "MAX_DAG_NODES",
    "MAX_LEVEL_NODES",
    "PAGE_SIZE",
    "Bar",
    "DagView",
    "Edge",
    "LevelBox",
    "Node",
    "RunView",
    "TimelineView",
    "build_view",
    "task_kind",
    "task_what",
]

MAX_DAG_NODES = 300
MAX_LEVEL_NODES = 60
MAX_BARS = 300
PAGE_SIZE = 100

#: Task statuses in the order the viewer lists them; ``pending`` (a running run's task with no
#: result yet) and ``unrecorded`` (a finished run's task without one) are the viewer's own.
STATUSES = (
    "succeeded",
    "reused",
    "failed",
    "denied",
    "cancelled",
    "skipped",
    "waiting",
    "pending",
    "unrecorded",
)

NODE_W = 168.0
NODE_H = 40.0
COL_GAP = 64.0
ROW_GAP = 14.0
PAD = 16.0

BAR_H = 16.0
ROW_H = 24.0
LABEL_W = 180.0
CHART_W = 760.0


def task_kind(task: Any) -> str:
    """``tool`` or ``agent`` (read by attribute, so any task type of the plan will do)."""
    return "agent" if getattr(task, "instruction", None) is not None else "tool"


def task_what(task: Any) -> str:
    """What a task runs: its tool's name, or ``agent``."""
    tool = getattr(task, "tool", None)
    return tool if isinstance(tool, str) else "agent"


@dataclass
class Node:
    id: str
    label: str
    what: str
    kind: str
    status: str
    level: int
    x: float
    y: float
    critical: bool
    duration_s: float | None


@dataclass
class Edge:
    src: str
    dst: str
    d: str
    critical: bool


@dataclass
class LevelBox:
    level: int
    x: float
    y: float
    h: float
    n: int
    counts: list[tuple[str, int]]
    segments: list[tuple[str, float, float]]  # status, x offset, width of the status bar


@dataclass
class DagView:
    width: float
    height: float
    collapsed: bool
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    levels: list[LevelBox] = field(default_factory=list)
    level_edges: list[str] = field(default_factory=list)
    node_w: float = NODE_W
    node_h: float = NODE_H


@dataclass
class Bar:
    """One task's interval; times are seconds since the run started."""

    task_id: str
    label: str
    status: str
    row: int
    ready: float
    start: float
    end: float
    approval_end: float | None
    critical: bool
    y: float = 0.0
    x_ready: float = 0.0
    x_start: float = 0.0
    x_end: float = 0.0
    x_approval: float | None = None

    @property
    def wait_s(self) -> float:
        return max(0.0, self.start - self.ready)

    @property
    def duration_s(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass
class TimelineView:
    span_s: float
    bars: list[Bar]
    left_out: int
    ticks: list[tuple[float, str]]
    width: float
    height: float
    label_w: float = LABEL_W
    chart_w: float = CHART_W
    now_x: float | None = None


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


def _status_of(record: RunRecord) -> dict[str, str]:
    missing = "pending" if record.status == "running" else "unrecorded"
    return {
        t.id: (r.status.value if (r := record.tasks.get(t.id)) is not None else missing)
        for t in record.plan.tasks
    }


def _critical(record: RunRecord, graph: PlanGraph) -> tuple[float, list[str]]:
    if record.critical_path:
        return record.critical_path_s or 0.0, list(record.critical_path)
    return finished_critical_path(graph.order, graph.dependencies, record.tasks)


def _counts(status_of: Mapping[str, str]) -> list[tuple[str, int]]:
    n: dict[str, int] = {}
    for s in status_of.values():
        n[s] = n.get(s, 0) + 1
    return [(s, n[s]) for s in STATUSES if n.get(s)]


def short_label(text: str, n: int) -> str:
    return shorten(text, n, one_line=False)


def _layout_dag(
    graph: PlanGraph, status_of: Mapping[str, str], record: RunRecord, critical: Iterable[str]
) -> DagView:
    levels = graph.levels
    widest = max((len(lv) for lv in levels), default=0)
    crit = set(critical)
    if len(graph) > MAX_DAG_NODES or widest > MAX_LEVEL_NODES:
        return _collapsed_dag(levels, status_of)
    tall = widest * (NODE_H + ROW_GAP) - ROW_GAP
    height = tall + 2 * PAD
    width = len(levels) * (NODE_W + COL_GAP) - COL_GAP + 2 * PAD
    pos: dict[str, tuple[float, float]] = {}
    nodes: list[Node] = []
    for li, level in enumerate(levels):
        x = PAD + li * (NODE_W + COL_GAP)
        own = len(level) * (NODE_H + ROW_GAP) - ROW_GAP
        y0 = PAD + (tall - own) / 2
        for i, tid in enumerate(level):
            y = y0 + i * (NODE_H + ROW_GAP)
            pos[tid] = (x, y)
            task = graph.tasks[tid]
            r = record.tasks.get(tid)
            nodes.append(
                Node(
                    id=tid,
                    label=short_label(tid, 20),
                    what=short_label(task_what(task), 22),
                    kind=task_kind(task),
                    status=status_of[tid],
                    level=li,
                    x=x,
                    y=y,
                    critical=tid in crit,
                    duration_s=r.duration_s if r is not None else None,
                )
            )
    edges: list[Edge] = []
    crit_pairs = set(pairwise(critical))
    for tid in graph.order:
        x2, y2 = pos[tid]
        for dep in graph.dependencies[tid]:
            x1, y1 = pos[dep]
            sx, sy = x1 + NODE_W, y1 + NODE_H / 2
            ex, ey = x2, y2 + NODE_H / 2
            mid = (sx + ex) / 2
            d = f"M{sx:.1f},{sy:.1f} C{mid:.1f},{sy:.1f} {mid:.1f},{ey:.1f} {ex - 2:.1f},{ey:.1f}"
            edges.append(Edge(dep, tid, d, (dep, tid) in crit_pairs))
    return DagView(
        width=max(width, 240.0), height=height, collapsed=False, nodes=nodes, edges=edges
    )


def _collapsed_dag(levels: list[list[str]], status_of: Mapping[str, str]) -> DagView:
    box_h = 64.0
    gap = 18.0
    boxes: list[LevelBox] = []
    per_row = 5
    for li, level in enumerate(levels):
        row, col = divmod(li, per_row)
        x = PAD + col * (NODE_W + COL_GAP)
        y = PAD + row * (box_h + gap + 14)
        counts = _counts({t: status_of[t] for t in level})
        segs: list[tuple[str, float, float]] = []
        off = 0.0
        inner = NODE_W - 16
        for s, n in counts:
            w = inner * n / len(level)
            segs.append((s, off, w))
            off += w
        boxes.append(LevelBox(li, x, y, box_h, len(level), counts, segs))
    arrows = []
    for a, b in pairwise(boxes):
        if a.y == b.y:
            sy = a.y + box_h / 2
            arrows.append(f"M{a.x + NODE_W:.1f},{sy:.1f} L{b.x - 2:.1f},{sy:.1f}")
    rows = (len(levels) + per_row - 1) // per_row
    width = min(len(levels), per_row) * (NODE_W + COL_GAP) - COL_GAP + 2 * PAD
    height = rows * (box_h + gap + 14) - gap + 2 * PAD
    return DagView(
        width=max(width, 240.0),
        height=height,
        collapsed=True,
        levels=boxes,
        level_edges=arrows,
        node_h=box_h,
    )


def _nice_step(span: float) -> float:
    raw = span / 6 if span > 0 else 1.0
    step = 10.0 ** int(f"{raw:e}".split("e")[1])
    for m in (1, 2, 5, 10):
        if step * m >= raw:
            return step * m
    return step * 10  # pragma: no cover


def fmt_s(s: float) -> str:
    """A duration for people: ``340ms``, ``2.41s``, ``3m05s``."""
    if s < 1:
        return f"{s * 1000:.0f}ms"
    if s < 60:
        return f"{s:.2f}s"
    m, sec = divmod(round(s), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


def _decimals(x: float) -> int:
    return min(3, len(f"{x:.3f}".rstrip("0").rstrip(".").partition(".")[2]))


def _tick_label(t: float, step: float) -> str:
    """A tick's time, with as many decimals as the step between ticks needs."""
    if t == 0:
        return "0"
    if t >= 60:
        return fmt_s(t)
    if t >= 1 or step >= 1:
        return f"{t:.{_decimals(step)}f}s"
    return f"{t * 1000:.{_decimals(step * 1000)}f}ms"


def waits_of(record: RunRecord, graph: PlanGraph) -> dict[str, tuple[float, float]]:
    """``task -> (ready_at, started_at)`` (Unix times): a task was ready when the run started
    or when its last dependency finished; what lies between is time it waited for a slot or a
    level barrier."""
    out: dict[str, tuple[float, float]] = {}
    origin = record.started_at
    for tid, r in record.tasks.items():
        if r.started_at is None or r.status.value == "reused":
            continue
        ready = origin if origin is not None else r.started_at
        for dep in graph.dependencies.get(tid, ()):
            d = record.tasks.get(dep)
            if d is not None and d.finished_at is not None:
                ready = max(ready, d.finished_at)
        out[tid] = (min(ready, r.started_at), r.started_at)
    return out


def _approval_end(r: TaskResult) -> float | None:
    """When the last decision about the task's own call was taken (the call waited for it)."""
    ats = [d.at for d in r.decisions or () if d.source == "plan"]
    return max(ats) if ats else None


def _timeline(
    record: RunRecord,
    graph: PlanGraph,
    status_of: Mapping[str, str],
    critical: list[str],
    now: float | None,
) -> TimelineView:
    timed = [
        (tid, r)
        for tid, r in record.tasks.items()
        if r.started_at is not None and r.finished_at is not None
    ]
    origin_candidates = [r.started_at for _, r in timed if r.started_at is not None]
    origin = record.started_at if record.started_at is not None else min(origin_candidates or [0])
    end_candidates = [r.finished_at for _, r in timed if r.finished_at is not None]
    if record.finished_at is not None:
        end_candidates.append(record.finished_at)
    if now is not None and record.status == "running":
        end_candidates.append(now)
    span = max([e - origin for e in end_candidates] + [1e-3])
    waits = waits_of(record, graph)
    left_out = 0
    if len(timed) > MAX_BARS:
        crit = set(critical)
        first = [x for x in timed if x[0] in crit]
        rest = sorted(
            (x for x in timed if x[0] not in crit),
            key=lambda x: -((x[1].finished_at or 0) - (x[1].started_at or 0)),
        )
        keep = {tid for tid, _ in (first + rest)[:MAX_BARS]}
        left_out = len(timed) - len(keep)
        timed = [x for x in timed if x[0] in keep]
    pos = {t.id: i for i, t in enumerate(record.plan.tasks)}
    timed.sort(key=lambda x: (x[1].started_at or 0.0, pos.get(x[0], 0)))
    crit = set(critical)
    scale = CHART_W / span
    bars: list[Bar] = []
    for row, (tid, r) in enumerate(timed):
        assert r.started_at is not None and r.finished_at is not None
        ready_at, _ = waits.get(tid, (r.started_at, r.started_at))
        appr = _approval_end(r)
        bar = Bar(
            task_id=tid,
            label=short_label(tid, 24),
            status=status_of.get(tid, r.status.value),
            row=row,
            ready=ready_at - origin,
            start=r.started_at - origin,
            end=r.finished_at - origin,
            approval_end=(min(max(appr, r.started_at), r.finished_at) - origin)
            if appr is not None
            else None,
            critical=tid in crit,
        )
        bar.y = 28 + row * ROW_H
        bar.x_ready = LABEL_W + bar.ready * scale
        bar.x_start = LABEL_W + bar.start * scale
        bar.x_end = LABEL_W + max(bar.end * scale, bar.start * scale + 1.5)
        if bar.approval_end is not None:
            bar.x_approval = LABEL_W + bar.approval_end * scale
        bars.append(bar)
    step = _nice_step(span)
    ticks: list[tuple[float, str]] = []
    i = 0
    while i * step <= span * 1.0001:
        t = round(i * step, 9)
        ticks.append((LABEL_W + t * scale, _tick_label(t, step)))
        i += 1
    now_x = None
    if now is not None and record.status == "running":
        now_x = LABEL_W + (now - origin) * scale
    return TimelineView(
        span_s=span,
        bars=bars,
        left_out=left_out,
        ticks=ticks,
        width=LABEL_W + CHART_W + 24,
        height=28 + max(len(bars), 1) * ROW_H + 8,
        now_x=now_x,
    )


def build_view(record: RunRecord, *, now: float | None = None) -> RunView:
    """The viewer's picture of ``record`` (``now``: the time a running run is drawn at)."""
    graph = validate(record.plan)
    status_of = _status_of(record)
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
        counts=_counts(status_of),
        dag=_layout_dag(graph, status_of, record, critical),
        timeline=_timeline(record, graph, status_of, critical, now),
        waits=waits,
    )
