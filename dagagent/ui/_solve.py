"""A solve as the viewer shows it, computed once from its record: each round's model calls
and tasks on one timeline, and what the calls used, per round and in all.

The timeline has one row per model call of the planner, the replanner and the joiner, and
one per task of each round's run, in the order they happened; an agent task's model calls
are ticks on its task's row. A model call's bar shows the wait for its first token (light)
and the writing (solid). Times are seconds since the solve began; coordinates are SVG user
units, as in the run's timeline (:mod:`._bars`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..llm import Usage
from ..results import ModelCall
from ..store import ChildSolve, RunRecord, SolveRecord
from ._bars import _nice_step, _tick_label
from ._labels import short_label

__all__ = [
    "MAX_SOLVE_ROWS",
    "RoundView",
    "SolveBar",
    "SolveView",
    "SubSolvesView",
    "build_solve_view",
]

#: The most rows the solve's timeline draws (the rest are in the tables).
MAX_SOLVE_ROWS = 200

ROW_H = 22.0
LABEL_W = 200.0
CHART_W = 740.0
TOP = 28.0


@dataclass
class SolveBar:
    """One row of the solve's timeline: a model call (``call``) or a task (``task_id``)."""

    label: str
    kind: str  # planner, replanner, joiner, task
    status: str
    round: int | None
    start: float
    end: float
    first: float | None = None  # a model call: when its first token came
    call: ModelCall | None = None
    task_id: str | None = None
    run_id: str | None = None
    ticks: list[tuple[float, ModelCall]] = field(default_factory=list)  # agent calls
    y: float = 0.0
    x_start: float = 0.0
    x_first: float | None = None
    x_end: float = 0.0
    x_ticks: list[tuple[float, ModelCall]] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass
class RoundView:
    """One round: its record, its run (if still in the store), its calls and their usage."""

    number: int
    outcome: str
    reason: str
    run_id: str | None
    run: RunRecord | None
    calls: list[ModelCall]
    usage: Usage
    decision: dict[str, object] | None
    feedback: str | None
    start: float | None
    end: float | None

    @property
    def duration_s(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return max(0.0, self.end - self.start)


@dataclass
class SubSolvesView:
    """The sub-solves one task of a round's run started (one per element of a map task)."""

    round: int | None
    run_id: str
    task_id: str
    children: list[ChildSolve]

    @property
    def anchor(self) -> str:
        return f"sub-{self.run_id}-{self.task_id}"


@dataclass
class SolveView:
    record: SolveRecord
    rounds: list[RoundView]
    bars: list[SolveBar]
    left_out: int
    ticks: list[tuple[float, str]]
    span_s: float
    width: float
    height: float
    total: Usage
    by_role: dict[str, Usage]
    servers: list[str]
    raw_answer: ModelCall | None
    label_w: float = LABEL_W
    #: The sub-solves of its tasks, by task, in the order of its rounds.
    subsolves: list[SubSolvesView] = field(default_factory=list)

    def subsolves_of(self, run_id: str | None, task_id: str | None) -> SubSolvesView | None:
        """The sub-solves task ``task_id`` of run ``run_id`` started, if any."""
        return next(
            (v for v in self.subsolves if v.run_id == run_id and v.task_id == task_id), None
        )

    @property
    def wall_s(self) -> float | None:
        r = self.record
        return None if r.finished_at is None else max(0.0, r.finished_at - r.created)


def _call_end(c: ModelCall) -> float:
    return c.started_at + (c.duration_s or 0.0)


def build_solve_view(
    record: SolveRecord, runs: Mapping[str, RunRecord], *, now: float | None = None
) -> SolveView:
    """The viewer's picture of solve ``record`` with the runs of its rounds (``runs``: by id;
    a run missing from the store is left out of the timeline)."""
    origin = record.created
    rows: list[SolveBar] = []
    rounds: list[RoundView] = []
    agent_calls: dict[tuple[str | None, str], list[ModelCall]] = {}
    for c in record.calls:
        if c.role == "agent" and c.task_id is not None:
            agent_calls.setdefault((c.run_id, c.task_id), []).append(c)
    # A session turn's compression of the turns before it comes before its first round.
    rows.extend(_call_bar(c, origin) for c in record.calls if c.role == "compress")
    for rnd in record.rounds:
        calls = record.calls_of(rnd.round)
        run = runs.get(rnd.run_id) if rnd.run_id is not None else None
        times = [c.started_at for c in calls] + [_call_end(c) for c in calls]
        if run is not None:
            times += [t for r in run.tasks.values() for t in (r.started_at, r.finished_at) if t]
        rounds.append(
            RoundView(
                number=rnd.round,
                outcome=rnd.outcome,
                reason=rnd.reason,
                run_id=rnd.run_id,
                run=run,
                calls=calls,
                usage=sum((c.usage for c in calls), Usage()),
                decision=rnd.decision,
                feedback=rnd.feedback,
                start=min(times) if times else None,
                end=max(times) if times else None,
            )
        )
        planners = [c for c in calls if c.role in ("planner", "replanner")]
        joiners = [c for c in calls if c.role == "joiner"]
        for c in planners:
            rows.append(_call_bar(c, origin))
        if run is not None:
            timed = [
                (tid, r)
                for tid, r in run.tasks.items()
                if r.started_at is not None and r.finished_at is not None
            ]
            timed.sort(key=lambda x: x[1].started_at or 0.0)
            for tid, r in timed:
                assert r.started_at is not None and r.finished_at is not None
                bar = SolveBar(
                    label=f"r{rnd.round} {short_label(tid, 22)}",
                    kind="task",
                    status=r.status.value,
                    round=rnd.round,
                    start=r.started_at - origin,
                    end=r.finished_at - origin,
                    task_id=tid,
                    run_id=run.run_id,
                )
                bar.ticks = [
                    (c.started_at - origin, c) for c in agent_calls.get((run.run_id, tid), [])
                ]
                rows.append(bar)
        for c in joiners:
            rows.append(_call_bar(c, origin))
    ends = [b.end for b in rows] + [0.001]
    if record.finished_at is not None:
        ends.append(record.finished_at - origin)
    elif now is not None:
        ends.append(now - origin)
    span = max(ends)
    left_out = max(0, len(rows) - MAX_SOLVE_ROWS)
    rows = rows[:MAX_SOLVE_ROWS]
    scale = CHART_W / span
    for i, b in enumerate(rows):
        b.y = TOP + i * ROW_H
        b.x_start = LABEL_W + b.start * scale
        b.x_end = LABEL_W + max(b.end * scale, b.start * scale + 1.5)
        if b.first is not None:
            b.x_first = LABEL_W + min(b.first, b.end) * scale
        b.x_ticks = [(LABEL_W + t * scale, c) for t, c in b.ticks]
    step = _nice_step(span)
    ticks: list[tuple[float, str]] = []
    i = 0
    while i * step <= span * 1.0001:
        t = round(i * step, 9)
        ticks.append((LABEL_W + t * scale, _tick_label(t, step)))
        i += 1
    by_role: dict[str, Usage] = {}
    for c in record.calls:
        by_role[c.role] = by_role.get(c.role, Usage()) + c.usage
    joiner_calls = [c for c in record.calls if c.role == "joiner" and c.status == "answered"]
    round_of = {r.run_id: r.round for r in record.rounds if r.run_id is not None}
    subsolves: dict[tuple[str, str], SubSolvesView] = {}
    for child in record.children:
        key = (child.link.run_id, child.link.task_id)
        if key not in subsolves:
            subsolves[key] = SubSolvesView(round_of.get(key[0]), key[0], key[1], [])
        subsolves[key].children.append(child)
    for view in subsolves.values():
        view.children.sort(key=lambda c: (c.link.element is None, c.link.element or 0, c.created))
    return SolveView(
        record=record,
        rounds=rounds,
        bars=rows,
        left_out=left_out,
        ticks=ticks,
        span_s=span,
        width=LABEL_W + CHART_W + 24,
        height=TOP + max(len(rows), 1) * ROW_H + 8,
        total=record.spent,
        by_role=by_role,
        servers=sorted({c.server for c in record.calls if c.server}),
        raw_answer=joiner_calls[-1] if joiner_calls and record.status == "answered" else None,
        subsolves=sorted(subsolves.values(), key=lambda v: (v.round or 0, v.task_id)),
    )


def _call_bar(c: ModelCall, origin: float) -> SolveBar:
    start = c.started_at - origin
    return SolveBar(
        label=f"r{c.round} {c.role} #{c.seq}" if c.round is not None else f"{c.role} #{c.seq}",
        kind=c.role,
        status=c.status + ("-rejected" if c.issues else ""),
        round=c.round,
        start=start,
        end=start + (c.duration_s or 0.0),
        first=start + c.first_token_s if c.first_token_s is not None else None,
        call=c,
    )
