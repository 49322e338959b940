"""Recording a run: :class:`RunRecorder`, a listener that feeds a writer thread."""

from __future__ import annotations

import os
import queue
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from pydantic_core import to_json

from ..errors import StoreError
from ..events import PlanExtended, RunFinished, RunStarted, TaskFinished, get_logger
from ..results import RunStatus, TaskResult
from ._codec import to_column, why
from ._ids import check_run_id
from ._schema import connect
from ._store import DEFAULT_FLUSH_INTERVAL_S, RunStore

__all__ = ["OUTPUT_NOT_RECORDED", "RunRecorder"]

#: ``error_type`` of a succeeded task whose output could not be written (e.g. bytes that are
#: not UTF-8, a circular structure): its ``error`` says why, its output is not recorded, and
#: it is never reused (there is nothing faithful to reuse).
OUTPUT_NOT_RECORDED = "OutputNotRecorded"

_STOP = object()


_TASK_COLUMNS = (
    "run_id, task_id, status, output, error, error_type, attempts, started_at, finished_at, "
    "args, steps, decisions"
)
_N_COLUMNS = 12
# Rows per INSERT: several rows per statement means one GIL release per statement rather than
# per row (executemany), which matters when the event loop thread is busy. SQLite before 3.32
# allows at most 999 parameters in a statement.
_ROWS_PER_INSERT = min(200, (32766 if sqlite3.sqlite_version_info >= (3, 32) else 999) // 12)
_insert_sql: dict[int, str] = {}


def _insert_rows(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    step = _ROWS_PER_INSERT
    for start in range(0, len(rows), step):
        part = rows[start : start + step]
        n = len(part)
        sql = _insert_sql.get(n)
        if sql is None:
            one = "(" + ",".join("?" * _N_COLUMNS) + ")"
            sql = f"INSERT OR REPLACE INTO tasks ({_TASK_COLUMNS}) VALUES " + ",".join([one] * n)
            _insert_sql[n] = sql
        conn.execute(sql, [v for row in part for v in row])


_MAX_BATCH_FAILURES = 3  # then write event by event, dropping what cannot be written
_RUN_START_WAIT_S = 30.0  # at most this long for the run row (the store may be busy)
_RECORDED = frozenset((RunStarted, TaskFinished, RunFinished, PlanExtended))


class RunRecorder:
    """Records one run into a :class:`RunStore`; pass it as a listener.

    ``RunRecorder(store, run_id)`` checks the run id (12 hex digits, not yet recorded) and
    nothing else; :meth:`start` starts the writer thread, :meth:`close` flushes and stops it.
    ``execute(..., store=...)`` does all of this. Calling the recorder (the listener) only puts
    the event on a queue; JSON encoding and SQL happen in the writer thread, which commits a
    batch at most ``flush_interval_s`` after its first event. A write that fails (e.g. the
    database is locked for longer than its timeout) is retried with the next batch; if it
    still fails at :meth:`close`, ``error`` holds the reason.
    """

    def __init__(
        self,
        store: RunStore | str | Path | None,
        run_id: str,
        *,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
    ) -> None:
        run_id = check_run_id(run_id, prefix=False)
        if isinstance(store, RunStore):
            if store.exists(run_id):
                raise StoreError(f"run {run_id} is already recorded in {store.path}")
            path = store.path
            context = store.context
        else:
            with RunStore(store) as opened:
                if opened.exists(run_id):
                    raise StoreError(f"run {run_id} is already recorded in {opened.path}")
                path = opened.path
            context = {}
        if flush_interval_s < 0:
            raise StoreError(f"flush_interval_s must be >= 0, not {flush_interval_s}")
        self.path = path
        self.run_id = run_id
        self.flush_interval_s = flush_interval_s
        self.error: str | None = None
        self._context = to_column(context) if context else None
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._put = self._queue.put
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._closed = False
        self._created = time.time()
        self._run_written = threading.Event()

    def __call__(self, event: Any) -> None:
        kind = type(event)
        if kind in _RECORDED:
            self._put(event)
            if kind is RunStarted and self._thread is not None:
                # The run row is committed before any task starts: a process killed at any
                # moment after this leaves a record (shown as interrupted), never a run whose
                # tools ran with no trace of it. One short wait per run.
                self._run_written.wait(_RUN_START_WAIT_S)

    def start(self) -> RunRecorder:
        if self._thread is None and not self._closed:
            self._created = time.time()
            self._thread = threading.Thread(
                target=self._work, name=f"dagagent-store-{self.run_id}", daemon=True
            )
            self._thread.start()
        return self

    def close(self) -> None:
        """Write everything still queued, then stop the writer thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._thread is None:
            return
        self._stopping.set()
        self._put(_STOP)
        self._thread.join()
        if self.error is not None:
            get_logger(run_id=self.run_id).warning(
                "store.write_failed", path=str(self.path), error=self.error
            )

    def __enter__(self) -> RunRecorder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the writer thread ------------------------------------------------------------------

    def _work(self) -> None:
        get, get_nowait = self._queue.get, self._queue.get_nowait
        interval = self.flush_interval_s
        stopping = self._stopping
        pending: list[Any] = []
        conn: sqlite3.Connection | None = None
        stop = False
        failures = 0
        while not stop:
            item = get()  # sleep until there is something to write
            if item is not _STOP and interval > 0 and type(item) is not RunStarted:
                # Let the batch fill: one wake-up and one transaction per batch, not per event.
                stopping.wait(interval)
            while True:
                if item is _STOP:
                    stop = True
                else:
                    pending.append(item)
                try:
                    item = get_nowait()
                except queue.Empty:
                    break
            if not pending:
                continue
            try:
                if conn is None:
                    conn = connect(self.path)
                self._write(conn, pending)
                pending = []
                failures = 0
                self.error = None
            except Exception as exc:  # kept for the next batch; reported at close()
                self.error = f"{type(exc).__name__}: {exc}"
                failures += 1
                if (failures >= _MAX_BATCH_FAILURES or stop) and conn is not None:
                    pending = self._write_each(conn, pending)  # what still fails is dropped
                    failures = 0
            finally:
                self._run_written.set()  # written, or failed: the run goes on either way
        if conn is not None:
            conn.close()

    def _write_each(self, conn: sqlite3.Connection, events: list[Any]) -> list[Any]:
        for ev in events:
            try:
                self._write(conn, [ev])
            except Exception as exc:
                self.error = f"{type(exc).__name__}: {exc} (an event was not recorded)"
        return []

    def _write(self, conn: sqlite3.Connection, events: list[Any]) -> None:
        starts: list[tuple[Any, ...]] = []
        rows: list[tuple[Any, ...]] = []
        finishes: list[tuple[Any, ...]] = []
        grown: PlanExtended | None = None  # the latest plan of a run still being planned
        for ev in events:
            if type(ev) is TaskFinished:
                rows.append(self._task_row(ev.result))
            elif type(ev) is RunStarted:
                plan = ev.plan
                starts.append(
                    (
                        ev.run_id,
                        ev.parent_id,
                        self._created,
                        plan.goal,
                        plan.to_json(indent=None),
                        len(plan.tasks),
                        RunStatus.RUNNING.value,
                        ev.executor,
                        os.getpid(),
                        self._context,
                    )
                )
            elif type(ev) is PlanExtended:
                grown = ev
            elif type(ev) is RunFinished:
                res = ev.result
                finishes.append(
                    (
                        res.status.value,
                        res.started_at,
                        res.finished_at,
                        to_column(res.critical_path),
                        res.critical_path_s,
                        ev.run_id,
                    )
                )
        conn.execute("BEGIN IMMEDIATE")
        try:
            if starts:
                conn.executemany(
                    "INSERT INTO runs (id, parent_id, created, goal, plan, n_tasks, status, "
                    "executor, pid, context) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    starts,
                )
            if grown is not None:
                conn.execute(
                    "UPDATE runs SET plan = ?, n_tasks = ? WHERE id = ?",
                    (grown.plan.to_json(indent=None), len(grown.plan.tasks), grown.run_id),
                )
            if rows:
                _insert_rows(conn, rows)
            if finishes:
                conn.executemany(
                    "UPDATE runs SET status = ?, started_at = ?, finished_at = ?, "
                    "critical_path = ?, critical_path_s = ? WHERE id = ?",
                    finishes,
                )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _task_row(self, r: TaskResult) -> tuple[Any, ...]:
        status = r.status
        steps, decisions = r.steps, r.decisions
        output, error, error_type = None, r.error, r.error_type
        if status.ok and r.output is not None:
            try:
                output = to_json(r.output, fallback=str).decode()
            except Exception as exc:
                # Not a placeholder in its place: a replan would reuse the placeholder as if
                # it were the output. Say why, and leave the output out (never reused).
                error = f"the output could not be recorded: {why(exc)}"
                error_type = OUTPUT_NOT_RECORDED
        args = r.args
        if decisions:
            redacted = r.redacted_args
            if redacted is not None:
                args = redacted  # never the secrets a redacting interceptor hid
        return (
            self.run_id,
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
        )
