"""The timeline as the viewer draws it: a bar for each task that ran (or runs now), from its
start to its end (to now while it runs); before it, the time the task waited once it was
ready (for a free slot or a level barrier) and, in a plan written while it ran, the time it
could have run but was not planned yet; the time it waited for a person's decision, inside
its bar (a question answered on the terminal) or before it (a run paused until a resume
used the decision). The critical path is marked, ticks fall at round times, and a "now" line
shows while the run goes on. Times are seconds since the run started; coordinates are in
SVG user units.

At most :data:`MAX_BARS` bars are drawn: the critical path first, then the longest tasks, in
start order; the view says how many it left out.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import IN_DOUBT_RULE
from ..graph import PlanGraph
from ..results import UNANSWERED, CallDecision, TaskResult, TaskStatus
from ..store import RunRecord
from ._labels import fmt_s, short_label

__all__ = ["MAX_BARS", "Bar", "TimelineView", "Waits", "layout_timeline", "waits_of"]

MAX_BARS = 300

BAR_H = 16.0
ROW_H = 24.0
LABEL_W = 180.0
CHART_W = 760.0

#: Shorter than this, a gap is the scheduler's own moment, not a wait worth drawing (s).
_NOTICEABLE_S = 0.0005

PersonWaits = Mapping[str, Sequence[tuple[float, float]]]
"""When each task waited for a person, by task (Unix times; see
:func:`dagagent.store.person_waits`)."""


@dataclass(frozen=True)
class Waits:
    """What came before a task started (Unix times): its dependencies were done (or the run
    began) at ``deps_done``; it joined the plan at ``planned`` (a plan written while it ran;
    otherwise when the run began); so it was ready at ``ready``, the later of the two, and
    started at ``started``. ``people``: the time of ``ready`` to ``started`` it waited for a
    person's decision (a paused run, resumed), in seconds."""

    deps_done: float
    planned: float
    ready: float
    started: float
    people: float = 0.0

    @property
    def unplanned_s(self) -> float:
        """How long it could have run but was not planned yet."""
        return max(0.0, self.planned - self.deps_done)

    @property
    def after_ready_s(self) -> float:
        """How long it waited once ready (a slot, a level barrier), a person's decision left
        out."""
        return max(0.0, self.started - self.ready - self.people)


@dataclass
class Bar:
    """One task's interval; times are seconds since the run started. ``end`` is now for a
    task that is still running. ``unplanned``: when it could have run but was not planned
    yet (``None``: no such time); ``approvals``: the spans it waited for a person's
    decision."""

    task_id: str
    label: str
    status: str
    row: int
    ready: float
    start: float
    end: float
    critical: bool
    running: bool = False
    unplanned: float | None = None
    approvals: list[tuple[float, float]] = field(default_factory=list)
    people_s: float = 0.0
    y: float = 0.0
    x_unplanned: float | None = None
    x_ready: float = 0.0
    x_start: float = 0.0
    x_end: float = 0.0
    x_approvals: list[tuple[float, float]] = field(default_factory=list)

    @property
    def wait_s(self) -> float:
        """How long it waited after it was ready, a person's decision left out."""
        return max(0.0, self.start - self.ready - self.people_s)

    @property
    def unplanned_s(self) -> float:
        return 0.0 if self.unplanned is None else max(0.0, self.ready - self.unplanned)

    @property
    def approval_s(self) -> float:
        return sum(b - a for a, b in self.approvals)

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
    planned: bool = False  # the plan was written while it ran: "not planned yet" can show


def _overlap(spans: Sequence[tuple[float, float]], lo: float, hi: float) -> float:
    return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in spans)


def waits_of(
    record: RunRecord,
    graph: PlanGraph,
    people: PersonWaits | None = None,
    *,
    only: Collection[str] | None = None,
) -> dict[str, Waits]:
    """What came before each task that started (see :class:`Waits`), or only the tasks of
    ``only``: it was ready once its last dependency finished (or the run began) and it had
    joined the plan."""
    out: dict[str, Waits] = {}
    origin = record.started_at if record.started_at is not None else record.created
    planned_at = record.planned_at
    results = record.tasks
    if only is not None:
        results = {t: results[t] for t in only if t in results}
    for tid, r in results.items():
        if r.started_at is None or r.status is TaskStatus.REUSED:
            continue
        deps_done = origin
        for dep in graph.dependencies.get(tid, ()):
            d = record.tasks.get(dep)
            if d is not None and d.finished_at is not None:
                deps_done = max(deps_done, d.finished_at)
        started = r.started_at
        deps_done = min(deps_done, started)
        planned = min(max(planned_at.get(tid, origin), origin), started)
        ready = max(deps_done, planned)
        spans = (people or {}).get(tid)
        waited = _overlap(spans, ready, started) if spans else 0.0
        out[tid] = Waits(deps_done, planned, ready, started, waited)
    return out


def layout_timeline(
    record: RunRecord,
    graph: PlanGraph,
    status_of: Mapping[str, str],
    critical: list[str],
    now: float | None,
    people: PersonWaits | None = None,
    *,
    waits: Mapping[str, Waits] | None = None,
) -> TimelineView:
    """The timeline of ``record`` (``now``: the time a running run is drawn at; ``people``:
    when its tasks waited for a person; ``waits``: :func:`waits_of` the run, if known)."""
    running = record.status == "running"
    people = people or {}
    if now is None or record.status not in ("running", "paused"):
        now = None  # a paused run waits for a person until now: its timeline goes on too
    timed = [
        (tid, r)
        for tid, r in record.tasks.items()
        if r.started_at is not None and (r.finished_at is not None or (running and now is not None))
    ]
    origin = record.started_at if record.started_at is not None else record.created
    starts = [r.started_at for _, r in timed if r.started_at is not None]
    origin = min([origin, *starts])
    ends: list[float] = [r.finished_at for _, r in timed if r.finished_at is not None]
    ends += [b for spans in people.values() for _, b in spans]
    if record.finished_at is not None:
        ends.append(record.finished_at)
    if now is not None:
        ends.append(now)
    span = max([e - origin for e in ends] + [1e-3])
    left_out = 0
    if len(timed) > MAX_BARS:
        crit = set(critical)
        first = [x for x in timed if x[0] in crit]
        rest = sorted(
            (x for x in timed if x[0] not in crit),
            key=lambda x: -((x[1].finished_at or now or 0) - (x[1].started_at or 0)),
        )
        keep = {tid for tid, _ in (first + rest)[:MAX_BARS]}
        left_out = len(timed) - len(keep)
        timed = [x for x in timed if x[0] in keep]
    if waits is None:  # only those of the bars drawn
        waits = waits_of(record, graph, people, only=[tid for tid, _ in timed])
    pos = {t.id: i for i, t in enumerate(record.plan.tasks)}
    timed.sort(key=lambda x: (x[1].started_at or 0.0, pos.get(x[0], 0)))
    crit = set(critical)
    scale = CHART_W / span

    def x(t: float) -> float:
        return LABEL_W + t * scale

    bars: list[Bar] = []
    for row, (tid, r) in enumerate(timed):
        assert r.started_at is not None
        is_running = r.finished_at is None
        end = r.finished_at if r.finished_at is not None else (now or r.started_at)
        w = waits.get(tid)
        ready = w.ready if w is not None else r.started_at
        unplanned = w.deps_done if w is not None and w.unplanned_s > _NOTICEABLE_S else None
        spans = _approval_spans(r, people.get(tid, ()), end)
        bar = Bar(
            task_id=tid,
            label=short_label(tid, 24),
            status=status_of.get(tid, r.status.value),
            row=row,
            ready=ready - origin,
            start=r.started_at - origin,
            end=end - origin,
            critical=tid in crit,
            running=is_running,
            unplanned=None if unplanned is None else unplanned - origin,
            approvals=[(a - origin, b - origin) for a, b in spans],
            people_s=w.people if w is not None else 0.0,
        )
        bar.y = 28 + row * ROW_H
        bar.x_ready = x(bar.ready)
        bar.x_start = x(bar.start)
        bar.x_end = max(x(bar.end), bar.x_start + 1.5)
        if bar.unplanned is not None:
            bar.x_unplanned = x(bar.unplanned)
        bar.x_approvals = [(x(a), max(x(b), x(a) + 1.5)) for a, b in bar.approvals]
        bars.append(bar)
    step = _nice_step(span)
    ticks: list[tuple[float, str]] = []
    i = 0
    while i * step <= span * 1.0001:
        t = round(i * step, 9)
        ticks.append((x(t), _tick_label(t, step)))
        i += 1
    return TimelineView(
        span_s=span,
        bars=bars,
        left_out=left_out,
        ticks=ticks,
        width=LABEL_W + CHART_W + 24,
        height=28 + max(len(bars), 1) * ROW_H + 8,
        now_x=x(now - origin) if now is not None else None,
        planned=bool(record.planned_at),
    )


def _approval_spans(
    r: TaskResult, people: Sequence[tuple[float, float]], end: float
) -> list[tuple[float, float]]:
    """When the task waited for a person (Unix times): its questions to a person that a
    resume answered, or that still wait (``people``); and, inside its run, its call's wait
    for the answers a person gave then (a question on the terminal: :func:`_asked_then`).
    A decision a person recorded while the run was paused is dated when they took it,
    before the resumed task started: its wait is the question's, in ``people``."""
    assert r.started_at is not None
    spans = [(a, b) for a, b in people if b - a > _NOTICEABLE_S]
    if not spans and r.status is TaskStatus.WAITING:  # no history given: since it asked
        asked = [d.at for d in r.decisions or () if d.source == "plan" and d.decision == "wait"]
        if asked and end - min(asked) > _NOTICEABLE_S:
            spans.append((min(asked), end))
    decided = [d.at for d in r.decisions or () if d.source == "plan" and _asked_then(d)]
    if decided:
        last = min(max(decided), end)
        if last - r.started_at > _NOTICEABLE_S and not any(a <= r.started_at < b for a, b in spans):
            spans.append((r.started_at, last))
    return sorted(spans)


def _asked_then(d: CallDecision) -> bool:
    """Whether decision ``d`` is the answer to a question put to a person while its call
    waited (an ``ask`` rule's or a limit's, or the run stopped before it came): not what a
    rule decided by itself (the rule is who decided), nor a redaction, nor what became of a
    call in doubt (decided while the run was paused, or by its reconciler), nor a call's
    outcome taken from the record. Those take no person's time, however long the call took
    to reach them."""
    return (
        d.decision in ("allow", "deny", "edit", UNANSWERED)
        and d.rule != IN_DOUBT_RULE
        and d.decided_by != d.rule
    )


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
