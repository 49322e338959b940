"""The timeline as the viewer draws it: a bar for each task that ran, from its start to its
end; before it, the time the task waited once it was ready (for a free slot or a level
barrier); inside it, the part its call waited for an approval decision. The critical path is
marked, ticks fall at round times, and a "now" line shows while the run goes on. Times are
seconds since the run started; coordinates are in SVG user units.

At most :data:`MAX_BARS` bars are drawn: the critical path first, then the longest tasks, in
start order; the view says how many it left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..graph import PlanGraph
from ..results import TaskResult
from ..store import RunRecord
from ._labels import fmt_s, short_label

__all__ = ["MAX_BARS", "Bar", "TimelineView", "layout_timeline", "waits_of"]

MAX_BARS = 300

BAR_H = 16.0
ROW_H = 24.0
LABEL_W = 180.0
CHART_W = 760.0


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


def layout_timeline(
    record: RunRecord,
    graph: PlanGraph,
    status_of: Mapping[str, str],
    critical: list[str],
    now: float | None,
) -> TimelineView:
    """The timeline of ``record`` (``now``: the time a running run is drawn at)."""
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


def _approval_end(r: TaskResult) -> float | None:
    """When the last decision about the task's own call was taken (the call waited for it)."""
    ats = [d.at for d in r.decisions or () if d.source == "plan"]
    return max(ats) if ats else None


def _nice_step(span: float) -> float:
    raw = span / 6 if span > 0 else 1.0
    step = 10.0 ** int(f"{raw:e}".split("e")[1])
    for m in (1, 2, 5, 10):
        if step * m >= raw:
            return step * m
    return step * 10  # pragma: no cover


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
