"""A run's record in SQL: what one batch writes (:func:`write`), in one transaction.

A batch holds some of a run's events and task results, in the order they came. The
transaction writes the run's row and its plan first (the task rows refer to the run), then
the plan as it grew (and when each of its tasks joined it: :data:`PLANNED_AT`), then one row
of ``tasks`` per result and one row of ``approvals`` per
call a waiting task left for a person, then the run's end.

A task's row is keyed by its run and its id, and a row written again for a task replaces
the one before: the last one written stands. A resumed run writes the results of the tasks
it runs again over their rows this way; so may a task recorded when it starts
(``running``) and again when it ends. The rows go to SQLite with ``executemany``: one
prepared statement for the batch, no SQL text per row.

Outputs, arguments, steps and decisions are JSON text (:func:`~._codec.to_column`), as the
readers take them back; a map task's elements are one JSON list in its row, each element an
object of the same columns (:data:`~._codec.ELEMENT_KEYS`). A redacted call is recorded with
the arguments its tool received (``TaskResult.redacted_args``), never the ones the redaction
hid, and so is the plan: its tasks' arguments as the run's redacting interceptors pass them
on to the tools. An output that cannot be encoded is not recorded: the row says why
(:data:`OUTPUT_NOT_RECORDED`).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Union

from pydantic_core import to_json

from ..events import PlanExtended, RunFinished, RunStarted
from ..plan import Plan
from ..results import WAIT, RunStatus, TaskResult, TaskStatus
from ._codec import ELEMENT_KEYS, from_column, to_column, why
from ._effects import output_held
from ._lease import LEASE_S, here
from ._plans import plan_to_column
from ._schema import TASK_COLUMNS

__all__ = [
    "OUTPUT_NOT_RECORDED",
    "PLANNED_AT",
    "Row",
    "RunRow",
    "renew_lease",
    "task_row",
    "write",
]

#: ``error_type`` of a succeeded task whose output could not be written (e.g. bytes that are
#: not UTF-8, a circular structure): its ``error`` says why, its output is not recorded, and
#: it is never reused (there is nothing faithful to reuse).
OUTPUT_NOT_RECORDED = "OutputNotRecorded"

#: The key of the run's context (``runs.context``, a JSON object) under which a plan written
#: while it ran keeps when each task joined it (``{task id: Unix time}``); the readers take
#: it out of the context into :attr:`~dagagent.store.RunRecord.planned_at`.
PLANNED_AT = "planned_at"

#: About how many bytes a task's row adds to the write-ahead log (for its checkpoints).
_RESULT_BYTES = 100

_INSERT_TASK = (
    f"INSERT OR REPLACE INTO tasks ({TASK_COLUMNS}) VALUES "
    f"({', '.join('?' * len(TASK_COLUMNS.split(',')))})"
)
_INSERT_ASKED = (
    "INSERT INTO approvals (run_id, task_id, seq, tool, args, rule, source, asked_at, state) "
    "SELECT ?, ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ?, ?, ?, 'waiting' FROM approvals "
    "WHERE run_id = ? AND task_id = ?"
)


PlanRedaction = Callable[[Plan], Plan]
"""``plan -> the plan as the store keeps it`` (its arguments redacted)."""


@dataclass(frozen=True, slots=True)
class RunRow:
    """What the run's first row holds beyond its ``RunStarted`` event: when the recorder
    started, the caller's context (JSON text), whether the run is a resumed one (its row
    exists: it is claimed, not inserted), and how its plan is redacted for the record (the
    run's redacting interceptors: a secret they hide never reaches the stored plan)."""

    run_id: str
    created: float
    context: str | None
    resumed: bool
    redact_plan: PlanRedaction | None = None
    #: The run may call tools with side effects: the outputs of its tasks' rows are taken
    #: off the rows of the calls that made them (each output stored once).
    side_effects: bool = False
    #: The settings the run runs with (JSON text; see ``RunRecord.settings``): written with
    #: its first row, and over the recorded ones when a resume goes on with them.
    settings: str | None = None


_WHERE = {name.strip(): i for i, name in enumerate(TASK_COLUMNS.split(","))}
_ERROR_COLUMN, _ELEMENTS_COLUMN = _WHERE["error"], _WHERE["elements"]  # in a task_row()

Row = Union[TaskResult, "tuple[str, float]"]
"""What a batch writes of a task: its result, or its start, ``(task id, when)``, written as
``running``."""


def write(
    conn: sqlite3.Connection,
    run: RunRow,
    events: Sequence[object],
    results: Sequence[Row],
    *,
    output_lost: str | None = None,
) -> int:
    """Write ``events`` (the run's ``RunStarted``, ``PlanExtended`` and ``RunFinished``) and
    ``results`` in one transaction, in the order of the module's docstring; ``output_lost``:
    why the results' outputs could not be written (they are left out, and their rows say
    so). Returns about how many bytes went to the write-ahead log."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        size = _write(conn, run, events, results, output_lost)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return size


def _write(
    conn: sqlite3.Connection,
    run: RunRow,
    events: Sequence[object],
    results: Sequence[Row],
    output_lost: str | None,
) -> int:
    size = 0
    grown: PlanExtended | None = None  # only the plan as it is now matters
    for ev in events:
        if isinstance(ev, RunStarted):
            size += _start(conn, run, ev)
        elif isinstance(ev, PlanExtended):
            grown = ev
    if grown is not None:
        text = _plan(run, grown.plan)
        size += len(text)
        conn.execute(
            "INSERT OR REPLACE INTO run_plans (run_id, plan) VALUES (?, ?)", (run.run_id, text)
        )
        conn.execute(
            "UPDATE runs SET n_tasks = ?, context = ? WHERE id = ?",
            (len(grown.plan.tasks), _with_planned(run.context, grown), run.run_id),
        )
    if results:
        run_id = run.run_id
        held: list[tuple[str, int | None, str]] | None = [] if run.side_effects else None
        conn.executemany(
            _INSERT_TASK,
            (
                _started_row(run_id, r)
                if type(r) is tuple
                else task_row(run_id, r, output_lost, held)  # type: ignore[arg-type]
                for r in results
            ),
        )
        if held:
            output_held(conn, run_id, held)
        asked = [
            row
            for r in results
            if type(r) is not tuple and r.status is TaskStatus.WAITING  # type: ignore[union-attr]
            for row in _asked(run, r)  # type: ignore[arg-type]
        ]
        if asked:
            conn.executemany(_INSERT_ASKED, [(*row, row[0], row[1]) for row in asked])
        size += _RESULT_BYTES * len(results)
    for ev in events:
        if isinstance(ev, RunFinished):
            _finish(conn, run, ev)
    return size


def _with_planned(context: str | None, grown: PlanExtended) -> str | None:
    """The run's context (JSON text) with when each task of a plan written while it ran
    joined the plan (:data:`PLANNED_AT`)."""
    if not grown.planned_at:
        return context
    data = from_column(context) if context else None
    data = dict(data) if isinstance(data, dict) else {}
    data[PLANNED_AT] = dict(grown.planned_at)
    return to_column(data)


def _start(conn: sqlite3.Connection, run: RunRow, ev: RunStarted) -> int:
    """The run's first row and its plan; a resumed run's row is claimed (running, in this
    process) and keeps its plan."""
    lease = time.time() + LEASE_S
    if run.resumed:
        conn.execute(
            "UPDATE runs SET executor = ?, pid = ?, owner = ?, lease_until = ?, "
            "settings = COALESCE(?, settings) WHERE id = ?",
            (ev.executor, os.getpid(), here(), lease, run.settings, run.run_id),
        )
        return 0
    plan = ev.plan
    text = _plan(run, plan)
    conn.execute(
        "INSERT INTO runs (id, parent_id, created, goal, plan, n_tasks, status, executor, pid, "
        "context, owner, lease_until, settings) VALUES (?, ?, ?, ?, '', ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            run.run_id,
            ev.parent_id,
            run.created,
            plan.goal,
            len(plan.tasks),
            RunStatus.RUNNING.value,
            ev.executor,
            os.getpid(),
            run.context,
            here(),
            lease,
            run.settings,
        ),
    )
    conn.execute("INSERT INTO run_plans (run_id, plan) VALUES (?, ?)", (run.run_id, text))
    return len(text)


def _plan(run: RunRow, plan: Plan) -> str:
    """The plan's column, its arguments as the run's redacting interceptors leave them."""
    return plan_to_column(plan if run.redact_plan is None else run.redact_plan(plan))


def renew_lease(conn: sqlite3.Connection, run_id: str) -> None:
    """Renew the lease of run ``run_id`` while it runs in this process (see ``._lease``)."""
    conn.execute(
        "UPDATE runs SET lease_until = ? WHERE id = ? AND status = 'running' AND pid = ? "
        "AND owner = ?",
        (time.time() + LEASE_S, run_id, os.getpid(), here()),
    )


def _finish(conn: sqlite3.Connection, run: RunRow, ev: RunFinished) -> None:
    """The run's end; nobody can decide any more about a run that will not resume."""
    res = ev.result
    status = res.status.value
    # A resumed run keeps the time it first started.
    conn.execute(
        "UPDATE runs SET status = ?, pid = ?, started_at = COALESCE(started_at, ?), "
        "finished_at = ?, critical_path = ?, critical_path_s = ? WHERE id = ?",
        (
            status,
            os.getpid(),
            res.started_at,
            res.finished_at,
            to_column(res.critical_path),
            res.critical_path_s,
            run.run_id,
        ),
    )
    if res.status is not RunStatus.PAUSED:
        conn.execute(
            "UPDATE approvals SET state = 'closed', note = ? "
            "WHERE run_id = ? AND state = 'waiting'",
            (f"the run ended {status}", run.run_id),
        )
        # a task left waiting says so now: it did not run, and what runs it again (its row
        # was written while it still waited for a decision)
        left = [
            (task_row(run.run_id, r, None), r.task_id)
            for r in res.tasks.values()
            if r.status is TaskStatus.WAITING
        ]
        if left:
            conn.executemany(
                "UPDATE tasks SET error = ?, elements = ? WHERE run_id = ? AND task_id = ?",
                [
                    (row[_ERROR_COLUMN], row[_ELEMENTS_COLUMN], run.run_id, task_id)
                    for row, task_id in left
                ],
            )


def _asked(run: RunRow, r: TaskResult) -> list[tuple[Any, ...]]:
    """The calls of a waiting task left for a person: one row each (its ``wait`` decisions,
    or those of its waiting elements for a map task: the tool, the arguments as the rule saw
    them, the rule, the caller, when)."""
    calls = [*(r.decisions or ())]
    for e in r.elements or ():
        calls.extend(e.decisions or ())
    return [
        (run.run_id, r.task_id, d.tool, to_column(d.args), d.rule, d.source, d.at)
        for d in calls
        if d.decision == WAIT
    ]


_RUNNING = TaskStatus.RUNNING.value


def _started_row(run_id: str, start: tuple[str, float]) -> tuple[Any, ...]:
    """The row of a task that started: ``running`` since then, nothing else yet (its
    arguments come with its result, after any redaction)."""
    return (run_id, start[0], _RUNNING, None, None, None, 0, start[1], *(None,) * 7)


def task_row(
    run_id: str,
    r: TaskResult,
    output_lost: str | None = None,
    held: list[tuple[str, int | None, str]] | None = None,
) -> tuple[Any, ...]:
    """The row of ``r`` in ``tasks`` (:data:`~._schema.TASK_COLUMNS`). ``held``, if given,
    gets ``(task id, element or None, output's JSON text)`` for each output of a task that
    succeeded that the row holds: its own, and, for a map task, its elements' (see
    :func:`~._effects.output_held`)."""
    elements = r.elements
    columns = _columns(r, output_lost)
    ok = held is not None and r.status.ok
    if ok and columns[2] is not None and held is not None:
        held.append((r.task_id, None, columns[2]))
    if elements is None:
        return (run_id, *columns, None)
    stored = [dict(zip(ELEMENT_KEYS, _columns(e, output_lost), strict=True)) for e in elements]
    if ok and held is not None:
        held.extend(
            (r.task_id, i, e["output"]) for i, e in enumerate(stored) if e["output"] is not None
        )
    return (run_id, *columns, to_column(stored))


def _columns(r: TaskResult, output_lost: str | None) -> tuple[Any, ...]:
    """A result's columns (an element's keys): the output as JSON text (only a task that has
    one: succeeded or reused), the redacted arguments of a redacted call."""
    status = r.status
    steps, decisions = r.steps, r.decisions
    output, error, error_type = None, r.error, r.error_type
    if output_lost is not None:
        error = f"the output could not be written to the run store: {output_lost}"
        error_type = OUTPUT_NOT_RECORDED
    elif status.ok and r.output is not None:
        try:
            output = to_json(r.output, fallback=str).decode()
        except Exception as exc:
            # Not a placeholder in its place: a replan would reuse the placeholder as if it
            # were the output. Say why, and leave the output out (never reused).
            error = f"the output could not be recorded: {why(exc)}"
            error_type = OUTPUT_NOT_RECORDED
    args = r.args
    if decisions:
        redacted = r.redacted_args
        if redacted is not None:
            args = redacted  # never the secrets a redacting interceptor hid
    return (
        r.task_id,
        status.value,
        output,
        error,
        error_type,
        r.attempts,
        r.started_at,
        r.finished_at,
        to_column(args),
        None if steps is None else to_column(steps),
        None if decisions is None else to_column(decisions),
        r.traceback,
        r.worker,
    )
