"""Side effects on record: the intent of every call of a tool with side effects, committed
before the call starts, and its outcome, committed after it ends (table ``effects``). A part
of :class:`~dagagent.store.RunStore` (:class:`EffectQueries`), written by an
:class:`EffectJournal`.

A row is keyed by its run and the call's idempotency key (see
:mod:`dagagent.tools._effects`): the same call, tried again or resumed in another process,
is the same row, found by identity and never by the order in which calls ended. Its
``state``:

- ``started``: the intent is on record and no outcome: the call is under way, or, once its
  run is not running any more, **in doubt** (its process died during it);
- ``succeeded`` (with its ``output``) or ``failed`` (with its ``error``);
- ``cancelled``: the run was stopped (a timeout, Ctrl-C) during the call: in doubt too, since
  it may have taken effect before it stopped.

A call in doubt is resolved when a resumed run gets to it (``resolution``: ``happened``,
``not_happened`` or ``denied``, ``resolved_by`` a reconciler, a person or a policy, and
``reason``); a person's "it happened" (``dagagent approve --happened``) is written here
directly, with the output they give.

**Each output stored once.** A call's ``output`` is on its row until the row of its task (or
of the map task holding its element) is written with the same output, by the run's writer,
a batch at a time: in that transaction the call's row gives up its copy and says where it
is (``output_in = 'task'``). A crash before that commit leaves it on the call's row; the
readers (:meth:`EffectQueries.effects`) take it from either place. Only the rows of tasks
that succeeded take it over: they are never written again with another output.

**Durability.** Each write is committed before the call goes on (the intent before the call
starts, the outcome before its task's result is handed on) through a connection of the
journal's own whose commits wait for the disk (``synchronous=FULL``): unlike a task's row,
which the run's writer commits a batch at a time, an intent is never lost to a crash, not
even of the machine. Writes that come at once (parallel calls) share one commit: the
journal's thread takes every write queued and commits them together.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel

from ..errors import StoreError
from ._codec import from_column
from ._file import connect
from ._part import StorePart, column_names, record_from_row
from .models import EffectRecord

__all__ = ["IN_DOUBT_STATES", "OUTPUT_IN_TASK", "EffectJournal", "EffectQueries", "output_held"]

#: States of a call whose outcome is unknown once its run is not running.
IN_DOUBT_STATES = ("started", "cancelled")

#: ``effects.output_in`` of a call whose output is kept by its task's row only (see the
#: module docstring).
OUTPUT_IN_TASK = "task"

#: The writer's statement, in the transaction that writes a task's row: a call of the task
#: (or of its element) whose output is the very text that the row now holds gives up its
#: copy.
_HELD = (
    "UPDATE effects SET output = NULL, output_in = 'task' WHERE run_id = ? AND task_id = ? "
    "AND element IS ? AND source = 'plan' AND state = 'succeeded' AND output = ?"
)


def output_held(
    conn: sqlite3.Connection, run_id: str, held: Sequence[tuple[str, int | None, str]]
) -> None:
    """In the transaction that writes task rows of run ``run_id``: ``held`` lists, for each
    output those rows hold (a succeeded task's, or a succeeded element's of a map task that
    succeeded), ``(task id, element or None, output's JSON text)``; the calls that made them
    give up their copies."""
    conn.executemany(_HELD, [(run_id, t, e, text) for t, e, text in held])


_COLUMNS = (
    "run_id, key, task_id, element, occurrence, tool, fingerprint, source, args, attempt, "
    "state, output, error, started_at, ended_at, pid, resolution, resolved_by, resolved_at, "
    "reason, output_in"
)
_NAMES = column_names(_COLUMNS)
_INTENT = (
    "INSERT INTO effects (run_id, key, task_id, element, occurrence, tool, fingerprint, "
    "source, args, attempt, state, started_at, pid) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'started', ?, ?) "
    "ON CONFLICT (run_id, key) DO UPDATE SET attempt = excluded.attempt, state = 'started', "
    "output = NULL, output_in = NULL, error = NULL, started_at = excluded.started_at, "
    "ended_at = NULL, "
    "pid = excluded.pid, args = excluded.args, resolution = NULL, resolved_by = NULL, "
    "resolved_at = NULL, reason = NULL"
)
#: The intent of a call under a key other runs may hold (see :meth:`EffectJournal.intent`):
#: written only if no other run made the call with it, or may be making it.
_INTENT_ALONE = (
    "INSERT INTO effects (run_id, key, task_id, element, occurrence, tool, fingerprint, "
    "source, args, attempt, state, started_at, pid) "
    "SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'started', ?, ? WHERE NOT EXISTS (SELECT 1 FROM "
    "effects WHERE key = ? AND run_id != ? AND (state = 'succeeded' OR (state IN "
    "('started', 'cancelled') AND resolution IS NULL))) " + _INTENT[_INTENT.index("ON CONFLICT") :]
)
_TAKEN_OVER = (
    "INSERT INTO effects (run_id, key, task_id, element, occurrence, tool, fingerprint, "
    "source, args, attempt, state, output, started_at, ended_at, pid, resolution, "
    "resolved_by, resolved_at, reason) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'succeeded', ?, ?, ?, ?, 'happened', ?, ?, ?) "
    "ON CONFLICT (run_id, key) DO UPDATE SET state = 'succeeded', output = excluded.output, "
    "output_in = NULL, error = NULL, ended_at = excluded.ended_at, resolution = 'happened', "
    "resolved_by = excluded.resolved_by, resolved_at = excluded.resolved_at, "
    "reason = excluded.reason"
)
_REDACT = "UPDATE effects SET args = ? WHERE run_id = ? AND key = ?"
_OUTCOME = (
    "UPDATE effects SET state = ?, output = ?, output_in = NULL, error = ?, ended_at = ? "
    "WHERE run_id = ? AND key = ?"
)
_RESOLVE = (
    "UPDATE effects SET resolution = ?, resolved_by = ?, resolved_at = ?, reason = ?, "
    "state = CASE WHEN ? = 'happened' THEN 'succeeded' ELSE state END, "
    "output = CASE WHEN ? = 'happened' THEN ? ELSE output END, "
    "output_in = CASE WHEN ? = 'happened' THEN NULL ELSE output_in END, "
    "ended_at = CASE WHEN ? = 'happened' THEN ? ELSE ended_at END "
    "WHERE run_id = ? AND key = ?"
)


def _record(row: Sequence[Any], in_doubt: bool, output: Any) -> EffectRecord:
    """A call's record from its row (:data:`_COLUMNS`), with its ``output`` (read from its
    row or from its task's: see :meth:`EffectQueries._held_outputs`)."""
    record = record_from_row(EffectRecord, _NAMES[:-1], row[:-1], json=("args",))
    update: dict[str, Any] = {"output": output}
    if in_doubt and record.state in IN_DOUBT_STATES and record.resolution is None:
        update["in_doubt"] = True
    return record.model_copy(update=update)


class EffectQueries(StorePart):
    """The side effects of a run store (mixed into :class:`~dagagent.store.RunStore`)."""

    def effects(self, run: str) -> list[EffectRecord]:
        """Every call with side effects of run ``run`` (an id or a unique prefix), in the order
        they started; a call whose run is not running any more and has no outcome is
        ``in_doubt``."""
        from ._store import effective_status

        run_id = self.resolve(run)
        status = self._query("SELECT status, pid FROM runs WHERE id = ?", (run_id,))
        live = bool(status) and effective_status(status[0][0], status[0][1]) == "running"
        rows = self._query(
            f"SELECT {_COLUMNS} FROM effects WHERE run_id = ? ORDER BY started_at, key", (run_id,)
        )
        held = self._held_outputs(run_id, {r[2] for r in rows if r[20] == OUTPUT_IN_TASK})
        return [
            _record(
                r,
                not live,
                held.get((r[2], r[3])) if r[20] == OUTPUT_IN_TASK else from_column(r[11]),
            )
            for r in rows
        ]

    def ancestry(self, run: str) -> list[str]:
        """Run ``run`` (an id or a unique prefix) and the runs it revises, nearest first: its
        parent (the run a replan of it, or a solve's round, was made from), the parent's
        parent, and so on. A parent no longer in the store ends the line."""
        line = [self.resolve(run)]
        seen = set(line)
        while True:
            rows = self._query(
                "SELECT p.id FROM runs AS r JOIN runs AS p ON p.id = r.parent_id WHERE r.id = ?",
                (line[-1],),
            )
            parent = rows[0][0] if rows else None
            if parent is None or parent in seen:
                return line
            line.append(parent)
            seen.add(parent)

    def inherited_effects(self, run: str, *, revising: str | None = None) -> list[EffectRecord]:
        """What a revision of run ``run`` (an id or a unique prefix) finds on record about its
        calls with side effects, over the whole line of runs it descends from (a revision of a
        revision, a solve's later rounds): for each call (task, element, source, fingerprint,
        occurrence), the record of the nearest run of :meth:`ancestry` that says it took
        effect (``succeeded``) or that a person resolved the doubt about it
        (``not_happened``: made again under its key; ``denied``).

        A call found not to have happened is made again under the key it had, which other
        revisions of that line inherit too (siblings, revisions of an earlier run): the
        records of other runs (but ``revising``, the revision itself) that hold that key are
        added, so that the call is taken over where one of them made it, and not made where
        one is making it or may have."""
        found: dict[tuple[str, int | None, str, str, int], EffectRecord] = {}
        line = self.ancestry(run)
        for run_id in line:
            for e in self.effects(run_id):
                if e.state == "succeeded" or e.resolution in ("not_happened", "denied"):
                    slot = (e.task_id, e.element, e.source, e.fingerprint, e.occurrence)
                    found.setdefault(slot, e)
        out = list(found.values())
        keys = {e.key: e.run_id for e in out if e.resolution == "not_happened"}
        for key, where in keys.items():
            rows = self._query(
                "SELECT DISTINCT run_id FROM effects WHERE key = ? AND run_id != ?", (key, where)
            )
            for (other,) in rows:
                if other != revising:
                    out.extend(e for e in self.effects(other) if e.key == key)
        return out

    def _held_outputs(self, run_id: str, task_ids: set[str]) -> dict[tuple[str, int | None], Any]:
        """The outputs that the rows of ``task_ids`` hold for their calls (see the module
        docstring), by task and element: each task's row read once, whatever the number of
        its elements."""
        if not task_ids:
            return {}
        ids = sorted(task_ids)
        marks = ",".join("?" * len(ids))
        rows = self._query(
            f"SELECT task_id, output, elements FROM tasks WHERE run_id = ? AND task_id IN "
            f"({marks})",
            [run_id, *ids],
        )
        out: dict[tuple[str, int | None], Any] = {}
        for task_id, output, elements in rows:
            out[(task_id, None)] = from_column(output)
            listed = from_column(elements) if elements is not None else None
            for i, e in enumerate(listed if isinstance(listed, list) else ()):
                if isinstance(e, dict):
                    out[(task_id, i)] = from_column(e.get("output"))
        return out

    def in_doubt_counts(self, run_ids: Sequence[str]) -> dict[str, int]:
        """How many calls of each of ``run_ids`` have no outcome and are not resolved (in doubt
        once the run is not running; the caller knows which are)."""
        if not run_ids:
            return {}
        marks = ",".join("?" * len(run_ids))
        rows = self._query(
            f"SELECT run_id, COUNT(*) FROM effects WHERE run_id IN ({marks}) "
            "AND state IN ('started', 'cancelled') AND resolution IS NULL GROUP BY run_id",
            list(run_ids),
        )
        return {r[0]: int(r[1]) for r in rows}

    def in_doubt_of_ended(self, run: str | None = None) -> list[EffectRecord]:
        """The calls in doubt of the runs that ended (``succeeded``, ``failed``,
        ``cancelled``: nothing resumes them), of run ``run`` (an id or a unique prefix) or
        of all, oldest first: a person says what became of each
        (:meth:`resolve_in_doubt`). The calls in doubt of a paused or interrupted run are
        its resume's to ask about."""
        sql = (
            "SELECT e.run_id FROM effects e JOIN runs r ON r.id = e.run_id "
            "WHERE e.state IN ('started', 'cancelled') AND e.resolution IS NULL "
            "AND r.status IN ('succeeded', 'failed', 'cancelled')"
        )
        params: list[Any] = []
        if run is not None:
            sql += " AND e.run_id = ?"
            params.append(self.resolve(run))
        run_ids = sorted({r[0] for r in self._query(sql, params)})
        found = [e for run_id in run_ids for e in self.effects(run_id) if e.in_doubt]
        return sorted(found, key=lambda e: (e.started_at, e.run_id, e.key))

    def resolve_in_doubt(
        self,
        run: str,
        task_id: str,
        resolution: str,
        *,
        by: str,
        reason: str | None = None,
        output: Any = None,
        key: str | None = None,
    ) -> list[EffectRecord]:
        """Record what a person found about the calls in doubt of task ``task_id`` (only the
        one with idempotency key ``key``, if given) of run ``run``, which ended (failed,
        cancelled: it is never resumed): ``happened`` (it took effect; ``output``, JSON-able,
        is its output: the call is then ``succeeded``, and a revision of the run that makes
        the same call takes that output over instead of making it), ``not_happened`` (a
        revision may make it again, with the same key) or ``denied`` (a revision that would
        make it denies its task instead). ``by`` says who, ``reason`` why. The calls as
        resolved.

        Raises :class:`~dagagent.errors.StoreError` for a run that does not exist and
        :class:`~dagagent.errors.DecisionError` for a run still running, paused or
        interrupted (``dagagent approve`` and ``resume`` decide there), a task or key with no
        call in doubt, or an output that is not JSON or would stand for several calls."""
        from ..errors import DecisionError
        from ._store import effective_status

        if resolution not in _FOUND:
            raise DecisionError(
                f"what became of a call in doubt is one of {', '.join(_FOUND)}, not {resolution!r}"
            )
        if not by.strip():
            raise DecisionError("a decision names who took it (by=...)")
        if output is not None and resolution != "happened":
            raise DecisionError("an output goes with 'happened', and only with it")
        text = _json_text(output, task_id) if output is not None else None
        run_id = self.resolve(run)
        now = time.time()
        with self._transaction() as conn:
            status, pid = conn.execute(
                "SELECT status, pid FROM runs WHERE id = ?", (run_id,)
            ).fetchone()
            status = effective_status(status, pid)
            if status == "running":
                raise DecisionError(
                    f"run {run_id} is running: its calls are not in doubt while it runs "
                    "(wait for it to end, or stop it)"
                )
            if status in ("paused", "interrupted"):
                raise DecisionError(
                    f"run {run_id} is {status}: it can be resumed, and the resume asks about "
                    f"its calls in doubt: 'dagagent resume {run_id}', then 'dagagent approve "
                    f"{run_id} TASK --happened | --allow | --deny'"
                )
            sql = (
                f"SELECT {_COLUMNS} FROM effects WHERE run_id = ? AND task_id = ? "
                "AND state IN ('started', 'cancelled') AND resolution IS NULL"
            )
            params: tuple[Any, ...] = (run_id, task_id)
            if key is not None:
                sql += " AND key = ?"
                params = (*params, key)
            rows = conn.execute(sql + " ORDER BY started_at, key", params).fetchall()
            if not rows:
                raise DecisionError(_no_doubt(conn, run_id, task_id, key))
            if text is not None and len(rows) > 1:
                raise DecisionError(
                    f"task {task_id!r} of run {run_id} has {len(rows)} calls in doubt: one "
                    "output would stand for all of them; give each its own with its key "
                    f"({', '.join(r[1] for r in rows)}), or say they happened without an output"
                )
            for r in rows:
                self.mark_resolved(
                    conn,
                    run_id,
                    task_id,
                    resolution,
                    output=text,
                    by=by,
                    reason=reason,
                    at=now,
                    key=r[1],
                )
        resolved = {r[1] for r in rows}
        return [e for e in self.effects(run_id) if e.key in resolved]

    def mark_resolved(
        self,
        conn: sqlite3.Connection,
        run_id: str,
        task_id: str,
        resolution: str,
        *,
        output: str | None,
        by: str,
        reason: str | None,
        at: float,
        key: str | None = None,
    ) -> int:
        """In a transaction of :meth:`~dagagent.store.RunStore.decide`: a person's decision
        about the calls in doubt of task ``task_id`` (the one with idempotency key ``key``, if
        given), on their own records: ``happened`` (``output``: JSON text of their output;
        they are then ``succeeded``), ``not_happened`` (the resume makes them again) or
        ``denied``. How many it resolved."""
        words = {
            "happened": "a person said it took effect",
            "not_happened": "a person said to make it again",
            "denied": "a person said not to make it",
        }
        happened = resolution == "happened"
        sql = (
            "UPDATE effects SET resolution = ?, resolved_by = ?, resolved_at = ?, reason = ?, "
            "state = CASE WHEN ? THEN 'succeeded' ELSE state END, "
            "output = CASE WHEN ? THEN ? ELSE output END, "
            "output_in = CASE WHEN ? THEN NULL ELSE output_in END, "
            "ended_at = CASE WHEN ? THEN ? ELSE ended_at END "
            "WHERE run_id = ? AND task_id = ? AND state IN ('started', 'cancelled') "
            "AND resolution IS NULL"
        )
        params: tuple[Any, ...] = (
            resolution,
            by,
            at,
            reason or words[resolution],
            happened,
            happened,
            output,
            happened,
            happened,
            at,
            run_id,
            task_id,
        )
        if key is not None:
            sql += " AND key = ?"
            params = (*params, key)
        return int(conn.execute(sql, params).rowcount)


#: What a person may find about a call in doubt of a run that ended.
_FOUND = ("happened", "not_happened", "denied")


def _json_text(output: Any, task_id: str) -> str:
    """``output`` as JSON text; :class:`~dagagent.errors.DecisionError` when it is not JSON
    (a value JSON has no form for: it would not be the call's output as a tool gives it)."""
    from ..errors import DecisionError

    try:
        return json.dumps(output, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise DecisionError(
            f"the output given for the call in doubt of task {task_id!r} is not JSON: {exc}"
        ) from None


def _no_doubt(conn: sqlite3.Connection, run_id: str, task_id: str, key: str | None) -> str:
    """Why task ``task_id`` (its call with ``key``) of run ``run_id`` has no call in doubt."""
    if key is not None:
        row = conn.execute(
            "SELECT task_id, state, resolution, resolved_by FROM effects "
            "WHERE run_id = ? AND key = ?",
            (run_id, key),
        ).fetchone()
        if row is None or row[0] != task_id:
            return f"task {task_id!r} of run {run_id} made no call with the key {key}"
        how = f" ({row[2]}, said {row[3]})" if row[2] else ""
        return (
            f"the call with the key {key} (task {task_id!r} of run {run_id}) is not in doubt: "
            f"it {row[1]}{how}"
        )
    rows = conn.execute(
        "SELECT state, resolution FROM effects WHERE run_id = ? AND task_id = ?",
        (run_id, task_id),
    ).fetchall()
    if not rows:
        return (
            f"task {task_id!r} of run {run_id} made no call with side effects: nothing of "
            "it is in doubt"
        )
    states = ", ".join(sorted({r[1] or r[0] for r in rows}))
    return f"task {task_id!r} of run {run_id} has no call in doubt (its calls: {states})"


class _Write:
    """A write waiting for the journal's thread: its statement and values, and how the thread
    tells its caller that it is committed (or why it is not)."""

    __slots__ = ("done", "error", "params", "rows", "sql", "token", "waiter")

    def __init__(self, sql: str, params: tuple[Any, ...]) -> None:
        self.sql = sql
        self.params = params
        self.rows = 0  # how many rows it wrote
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.waiter: anyio.Event | None = None
        self.token: Any = None


_STOP = object()


class EffectJournal:
    """Writes the intents and outcomes of a run's side-effecting calls into the store at
    ``path``, each committed before the caller goes on (see the module docstring). One thread
    of its own, started on the first write; :meth:`close` ends it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    # -- what the runner calls ------------------------------------------------------------

    async def intent(
        self,
        run_id: str,
        key: str,
        *,
        task_id: str,
        element: int | None,
        occurrence: int,
        tool: str,
        fingerprint: str,
        source: str,
        args: str | None,
        attempt: int,
        exclusive: bool = False,
    ) -> bool:
        """Commit the intent of a call (before it starts); raises
        :class:`~dagagent.errors.StoreError` when it cannot be recorded: the call must not
        start then. ``exclusive``: a key another run may hold too (inherited from the run
        both revise): the intent is committed only if no other run made the call with it
        or is making it (checked and written in one transaction); ``False`` when it is not
        (the call must not start)."""
        values = (
            run_id,
            key,
            task_id,
            element,
            occurrence,
            tool,
            fingerprint,
            source,
            args,
            attempt,
            time.time(),
            os.getpid(),
        )
        if exclusive:
            return await self._commit(_INTENT_ALONE, (*values, key, run_id)) > 0
        await self._commit(_INTENT, values)
        return True

    async def taken_over(
        self,
        run_id: str,
        key: str,
        *,
        task_id: str,
        element: int | None,
        occurrence: int,
        tool: str,
        fingerprint: str,
        source: str,
        args: str | None,
        attempt: int,
        output: str | None,
        by: str,
        reason: str,
    ) -> None:
        """Commit, in one write, a call that is not made because it took effect in the run
        this one revises (``by`` names it): on record as succeeded with ``output``, found
        to have happened."""
        now = time.time()
        await self._commit(
            _TAKEN_OVER,
            (
                run_id,
                key,
                task_id,
                element,
                occurrence,
                tool,
                fingerprint,
                source,
                args,
                attempt,
                output,
                now,
                now,
                os.getpid(),
                by,
                now,
                reason,
            ),
        )

    async def redact(self, run_id: str, key: str, args: str | None) -> None:
        """Commit ``args`` (JSON text: redacted) in place of the arguments on record of a call
        recorded before its run redacted them."""
        await self._commit(_REDACT, (args, run_id, key))

    async def outcome(
        self, run_id: str, key: str, state: str, *, output: str | None, error: str | None
    ) -> None:
        """Commit how a call ended: ``succeeded`` (``output``: JSON text), ``failed`` or
        ``cancelled`` (``error``)."""
        await self._commit(_OUTCOME, (state, output, error, time.time(), run_id, key))

    async def resolved(
        self,
        run_id: str,
        key: str,
        resolution: str,
        *,
        by: str,
        reason: str,
        output: str | None = None,
    ) -> None:
        """Commit how a call in doubt was resolved: ``happened`` (``output``: JSON text; the
        call is then ``succeeded``), ``not_happened`` (it is made again) or ``denied``."""
        now = time.time()
        await self._commit(
            _RESOLVE,
            (
                resolution,
                by,
                now,
                reason,
                resolution,
                resolution,
                output,
                resolution,
                resolution,
                now,
                run_id,
                key,
            ),
        )

    def close(self) -> None:
        """Commit what is queued, then end the thread. Idempotent."""
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(_STOP)
            thread.join()

    # -- the thread -----------------------------------------------------------------------

    async def _commit(self, sql: str, params: tuple[Any, ...]) -> int:
        write = _Write(sql, params)
        write.waiter = anyio.Event()
        write.token = anyio.lowlevel.current_token()
        with self._lock:
            if self._closed:
                raise StoreError(f"the side-effect journal of {self.path} is closed")
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name="dagagent-effects", daemon=True
                )
                self._thread.start()
        self._queue.put(write)
        # Shielded: a call cancelled while its intent is being committed still knows whether
        # it is on record (and an outcome is written whatever happens to its task meanwhile).
        with anyio.CancelScope(shield=True):
            await write.waiter.wait()
        if write.error is not None:
            raise StoreError(f"cannot record a side effect in run store {self.path}: {write.error}")
        return write.rows

    def _work(self) -> None:
        conn: sqlite3.Connection | None = None
        stop = False
        try:
            while not stop:
                batch: list[_Write] = []
                item = self._queue.get()
                while True:
                    if item is _STOP:
                        stop = True
                    else:
                        batch.append(item)
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                if not batch:
                    continue
                error: BaseException | None = None
                try:
                    if conn is None:
                        conn = connect(self.path)
                        conn.execute("PRAGMA synchronous=FULL")  # this connection's commits
                    conn.execute("BEGIN IMMEDIATE")
                    try:
                        for w in batch:
                            w.rows = conn.execute(w.sql, w.params).rowcount
                        conn.execute("COMMIT")
                    except BaseException:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        raise
                except (sqlite3.Error, StoreError) as exc:
                    error = exc
                for w in batch:
                    w.error = error
                    w.done.set()
                    _wake(w)
        finally:
            if conn is not None:
                conn.close()


def _wake(w: _Write) -> None:
    """Tell the waiting coroutine, on its own event loop, that its write is done."""
    waiter = w.waiter
    if waiter is None:
        return
    with contextlib.suppress(RuntimeError):  # the event loop is gone: nobody waits
        anyio.from_thread.run_sync(waiter.set, token=w.token)
