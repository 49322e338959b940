"""Recording a run: :class:`RunRecorder`, a listener that feeds a writer thread."""

from __future__ import annotations

import contextlib
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, cast

from pydantic_core import to_json

from ..errors import StoreError
from ..events import PlanExtended, RunFinished, RunStarted, TaskFinished, get_logger
from ..results import WAIT, RecordLoss, RunStatus, TaskResult, TaskStatus
from ._codec import ELEMENT_KEYS, to_column, why
from ._ids import check_run_id
from ._plans import plan_to_column
from ._rows import (
    JSON_ROWS,
    SuccessRow,
    all_plain,
    as_result,
    insert_json,
    insert_tuples,
    materialize,
    plain,
    success_rows,
)
from ._schema import connect
from ._store import DEFAULT_FLUSH_INTERVAL_S, RunStore

__all__ = ["OUTPUT_NOT_RECORDED", "RunRecorder", "flush_recorders"]

#: ``error_type`` of a succeeded task whose output could not be written (e.g. bytes that are
#: not UTF-8, a circular structure): its ``error`` says why, its output is not recorded, and
#: it is never reused (there is nothing faithful to reuse).
OUTPUT_NOT_RECORDED = "OutputNotRecorded"

_STOP = object()
_TASK_ID = attrgetter("task_id")
_FIRST = itemgetter(0)


class _Flush:
    """Put on a writer's queue by :meth:`RunRecorder.flush`: commit what came before me now,
    then set ``done``."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


#: The recorders of this process whose writer thread runs, for :func:`flush_recorders`.
_LIVE: set[RunRecorder] = set()


def flush_recorders(timeout_s: float) -> bool:
    """Commit what every recorder of this process has been given so far, waiting at most
    ``timeout_s`` in all; True if all of it is on record. For a process about to end without
    closing them (the CLI's second stop signal calls this before ``os._exit``): the writers do
    not wait out their flush interval, and a main thread blocked here no longer competes with
    them for the interpreter lock (a tool that ignores cancellation keeps it spinning)."""
    deadline = time.monotonic() + timeout_s
    done = True
    for recorder in list(_LIVE):
        done = recorder.flush(max(0.0, deadline - time.monotonic())) and done
    return done


#: At most this long for the run's first row before its tasks start (it normally takes a few
#: milliseconds); a store that another process holds locked does not hold up the run's tasks.
_RUN_START_WAIT_S = 5.0
#: How long the first write waits for another process's write lock (SQLite's busy timeout)
#: before the run goes on without its row: the writer keeps trying in the background.
_FIRST_WRITE_BUSY_MS = 250
_STORE_BUSY_MS = 10_000  # afterwards (SQLite's busy timeout of the store's connections)
_BUSY_RETRY_S = 0.5  # while the store is locked, try again this often
# Checkpoint the write-ahead log once about this much has been written to it (the plan's text,
# and a rough size per result).
_CHECKPOINT_BYTES = 256 * 1024
_RESULT_BYTES = 100
_RECORDED = frozenset((RunStarted, TaskFinished, RunFinished, PlanExtended))
# What the writer thread gets on its queue: one of the run's events, or (with a flush interval
# of 0) a task's result. The run's first row is written at once, the rest in batches.
_BATCHED = frozenset((TaskResult, RunFinished, PlanExtended))
_STATUS = attrgetter("status")
_WAITING = TaskStatus.WAITING


def _busy(exc: BaseException) -> bool:
    """Another connection holds the lock: the write may succeed later, as it was."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    name = getattr(exc, "sqlite_errorname", "")  # Python 3.11+
    if name:
        return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))
    return "locked" in str(exc) or "busy" in str(exc)


def _reason(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, StoreError) else f"{type(exc).__name__}: {exc}"


class RunRecorder:
    """Records one run into a :class:`RunStore`; pass it as a listener.

    ``RunRecorder(store, run_id)`` checks the run id (12 hex digits, not yet recorded) and
    nothing else; :meth:`start` starts the writer thread, :meth:`close` flushes and stops it.
    ``execute(..., store=...)`` does all of this. With ``resumed=True`` the run is already
    recorded (:func:`dagagent.resume` continues it): its row is updated, not inserted, and
    the results of the tasks that run again replace theirs. Calling the recorder (the
    listener), or :attr:`record` with a task's result (what ``execute`` does, without making
    an event; :attr:`record_success` with the values of a plain success), only hands it over
    (a task's result is appended to a list the writer looks at
    every ``flush_interval_s`` while the run is recorded; an event goes on a queue); JSON
    encoding and SQL happen in the writer thread, which commits at most one transaction per
    ``flush_interval_s`` (default 0.02 s), counted from the start of the one before (with 0,
    as soon as it can: each result wakes it); :meth:`flush` commits what it holds without
    waiting out the interval (the CLI's second stop signal does, before it ends the process).

    What is durable when: the run's first row is committed before its first task starts,
    unless another process holds the store's write lock at that moment (then the tasks start
    anyway, and the row is written as soon as the lock is free). A task's result is committed
    at most ``flush_interval_s`` after it finished, plus the time of the write in progress
    then and of its own batch (the 1,000 no-op tasks that finish in 0.02 s took 2-18 ms on a
    busy 2-core machine, mostly waiting for the interpreter lock; a checkpoint, after every
    ~256 KiB written, a few milliseconds more), or as soon as a lock another process holds
    is free. The writer needs the interpreter lock between its SQLite calls: an event loop
    that never waits (thousands of tasks that return at once) can keep it from the writer
    until the run ends; tools that wait for anything leave it the lock. A SIGKILL loses only
    the results of that window: the tasks that finished in the last ``flush_interval_s``
    plus one write (``tests/test_store_durability.py`` kills a run mid-way and finds every
    task that finished 2 s before on record). A store locked by another process is retried,
    never given up on while the run lasts, and for up to ``write_timeout_s`` after it (in
    :meth:`close`). A write that fails for another reason (a
    full disk, a file size limit, a damaged file) is retried event by event, a task's row
    without its output if only that fails. What could not be written is in :attr:`loss` (a
    :class:`~dagagent.results.RecordLoss`) and ``execute`` puts it in
    ``RunResult.record_loss``; ``error`` holds the last error.
    """

    def __init__(
        self,
        store: RunStore | str | Path | None,
        run_id: str,
        *,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        write_timeout_s: float = 60.0,
        resumed: bool = False,
    ) -> None:
        run_id = check_run_id(run_id, prefix=False)
        opened: RunStore | None = None
        if isinstance(store, RunStore):
            if store.read_only:
                raise StoreError(f"run store {store.path} is open read-only: cannot record")
            _check_new(store, run_id, resumed)
            path = store.path
            context = store.context
        else:
            opened = RunStore(store)
            try:
                _check_new(opened, run_id, resumed)
            except BaseException:
                opened.close()
                raise
            path = opened.path
            context = {}
        if flush_interval_s < 0:
            raise StoreError(f"flush_interval_s must be >= 0, not {flush_interval_s}")
        if write_timeout_s < 0:
            raise StoreError(f"write_timeout_s must be >= 0, not {write_timeout_s}")
        self.path = path
        self.run_id = run_id
        self.resumed = resumed
        self.flush_interval_s = flush_interval_s
        self.write_timeout_s = write_timeout_s
        self.error: str | None = None
        self._loss = RecordLoss()
        self._lost_any = False
        self._context = to_column(context) if context else None
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._put = self._queue.put
        # Task results, for the writer to take a slice at a time (it looks every interval):
        # appending to a list is the cheapest hand-over there is for the event loop, and the
        # writer takes a thousand results without a Python loop. With no interval, each
        # result goes on the queue instead, which wakes the writer at once.
        self._results: list[TaskResult | SuccessRow] = []
        #: Takes a task's final result for the record (what a ``TaskFinished`` event carries),
        #: without the event: ``execute`` hands results to the recorder this way.
        self.record: Callable[[TaskResult], None] = (
            self._results.append if flush_interval_s > 0 else self._queue.put
        )
        #: Takes the result of a task that succeeded with nothing more to say (no error,
        #: steps, decisions, elements or traceback), as the tuple ``(task_id, output,
        #: attempts, started_at, finished_at, args)``: what :attr:`record` takes, as the
        #: runner has it at hand. The writer then reads each result from one small tuple
        #: made moments before, not from the fields of a model the event loop's thread made
        #: (a look at each of which misses this thread's cache), and a batch of them is
        #: written as it is given.
        self.record_success: Callable[[SuccessRow], None] = (
            self._results.append if flush_interval_s > 0 else self._queue.put
        )
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        # Wakes the writer from its wait for the batch to fill: set to close or to flush.
        self._wake = threading.Event()
        self._closed = False
        self._created = time.time()
        self._run_written = threading.Event()
        self._run_row = False  # the run's first row is in the store
        self._run_row_lost = False
        #: The tasks this recorder has put on record (committed), in a log row or a row.
        self._written: set[str] = set()
        self._unchecked = 0  # about how many bytes were committed since the last checkpoint
        # The store this recorder opened: its connection becomes the writer's (closing the
        # last connection of a store checkpoints it: milliseconds, on disk).
        self._opened = opened

    @property
    def loss(self) -> RecordLoss | None:
        """What could not be written (after :meth:`close`), or ``None``: all of it was."""
        return self._loss if self._lost_any else None

    def __call__(self, event: Any) -> None:
        kind = type(event)
        if kind is TaskFinished:
            self.record(event.result)
        elif kind in _RECORDED:
            self._put(event)
            if kind is RunStarted and self._thread is not None:
                # The run row is committed before any task starts: a process killed at any
                # moment after this leaves a record (shown as interrupted), never a run whose
                # tools ran with no trace of it. One short wait per run; none if the store is
                # locked by another process (the writer then keeps trying).
                self._run_written.wait(_RUN_START_WAIT_S)

    def start(self) -> RunRecorder:
        if self._thread is None and not self._closed:
            self._created = time.time()
            self._thread = threading.Thread(
                target=self._work, name=f"dagagent-store-{self.run_id}", daemon=True
            )
            _LIVE.add(self)
            self._thread.start()
        return self

    def close(self) -> None:
        """Write everything still queued (waiting up to ``write_timeout_s`` for a store another
        process holds locked), then stop the writer thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._thread is None:
            self._close_opened()
            return
        self._stopping.set()
        self._put(_STOP)
        self._wake.set()
        self._thread.join()
        if self._lost_any:
            get_logger(run_id=self.run_id).warning(
                "store.record_incomplete", path=str(self.path), lost=str(self._loss)
            )

    def flush(self, timeout_s: float) -> bool:
        """Commit what this recorder has been given so far now, without waiting out the flush
        interval, and wait for it up to ``timeout_s``; True if it is on record (or there is no
        writer to wait for). For a process about to end without :meth:`close` (see
        :func:`flush_recorders`); a store another process holds locked is waited for, within
        ``timeout_s``."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return True
        deadline = time.monotonic() + timeout_s
        if self._stopping.is_set():  # closing: the writer writes everything, then ends
            thread.join(timeout_s)
            return not thread.is_alive()
        marker = _Flush()
        self._put(marker)
        self._wake.set()  # after the marker: the writer clears it, then takes the marker
        while not marker.done.wait(min(0.05, max(0.0, deadline - time.monotonic()))):
            if not thread.is_alive():
                return not self._queue.qsize() and not self._results
            if time.monotonic() >= deadline:
                return False
        return True

    def __enter__(self) -> RunRecorder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the writer thread ------------------------------------------------------------------

    def _work(self) -> None:
        try:
            self._write_until_closed()
        finally:
            _LIVE.discard(self)

    def _write_until_closed(self) -> None:
        get, get_nowait = self._queue.get, self._queue.get_nowait
        given = self._results  # what record() appended, taken a slice at a time
        interval = self.flush_interval_s
        # With an interval, results come without waking the writer: it looks every interval
        # (while a run is recorded; the thread ends with the run).
        poll = interval if interval > 0 else None
        stopping, wake = self._stopping, self._wake
        events: list[Any] = []  # the run's events to write, in the order they came
        # the task results to write, in the order they came (a plain success as its tuple)
        results: list[TaskResult | SuccessRow] = []
        flushes: list[_Flush] = []  # asked to commit what came before them
        conn: sqlite3.Connection | None = None
        stop = False
        deadline: float | None = None  # once stopping: when to give up on a locked store
        warned = False
        busy_ms = -1  # the connection's busy timeout
        last_write = -interval  # when the last write started
        while True:
            try:
                # Sleep until there is something to write, or until it is time to try a
                # locked store again; with an interval, until the interval since the last
                # write is up (at once if results wait by then), or, idle, for an interval.
                if events or results:
                    item = get(timeout=_BUSY_RETRY_S)
                elif poll is None:
                    item = get()
                else:
                    left = last_write + poll - time.monotonic()
                    if left > 0:
                        item = get(timeout=left)
                    elif given:
                        item = get_nowait()
                    else:
                        item = get(timeout=poll)
            except queue.Empty:
                item = None
            if (
                interval > 0
                and not stop
                and (given or (item is not None and type(item) in _BATCHED))
            ):
                # Let the batch fill: at most one transaction per interval, counted from the
                # start of the one before (a write that took longer is followed at once).
                left = last_write + interval - time.monotonic()
                if left > 0 and wake.wait(left) and not stopping.is_set():
                    wake.clear()  # a flush: its marker is on the queue, taken below
            while True:
                if item is _STOP:
                    stop = True
                    deadline = time.monotonic() + self.write_timeout_s
                elif type(item) is _Flush:
                    flushes.append(item)
                elif type(item) is TaskResult or type(item) is tuple:
                    results.append(item)
                elif item is not None:
                    events.append(item)
                try:
                    item = get_nowait()
                except queue.Empty:
                    break
            # The results after the events: every result given before an event taken above
            # (a run's end, a flush, the close) is taken with it.
            n = len(given)
            if n:
                results += given[:n]
                del given[:n]  # only those: more may have been appended meanwhile
            if events or results:
                try:
                    if conn is None:
                        # The connection of the store this recorder opened, if it did: a
                        # second one would cost its own opening.
                        conn = self._take_opened() or connect(self.path)
                        busy_ms = -1
                    # How long to wait for another process's write lock: briefly for the
                    # first write (the tasks wait for it), at most the time left once closing.
                    want = _STORE_BUSY_MS if self._run_row else _FIRST_WRITE_BUSY_MS
                    if deadline is not None:
                        left = int((deadline - time.monotonic()) * 1000)
                        want = max(0, min(want, left))
                    if want != busy_ms:
                        conn.execute(f"PRAGMA busy_timeout = {want:d}")
                        busy_ms = want
                    last_write = time.monotonic()
                    self._write(conn, events, results)
                    self._wrote(events)
                    events, results = [], []
                    self.error = None
                except Exception as exc:
                    self.error = _reason(exc)
                    if not _busy(exc):
                        # Not a lock that will pass: write what can be written, one event at
                        # a time, and account for the rest.
                        events, results = self._write_each(conn, events, results)
                    elif deadline is not None and time.monotonic() >= deadline:
                        self._lose([*events, *results])
                        events, results = [], []
                    elif not warned:
                        warned = True
                        get_logger(run_id=self.run_id).warning(
                            "store.locked",
                            path=str(self.path),
                            detail="another process holds the run store's write lock: the "
                            f"record is written once it is free (waiting up to "
                            f"{self.write_timeout_s:g} s after the run)",
                        )
                finally:
                    # Written, or not now: the run goes on either way (the writer retries).
                    self._run_written.set()
            pending = events or results
            if flushes and not pending:
                for marker in flushes:
                    marker.done.set()
                flushes = []
            if stop and not pending:
                break
            if conn is not None and not pending and self._unchecked >= _CHECKPOINT_BYTES:
                # Copy what the log holds into the database file now, while the run goes on
                # (the interpreter lock is released), rather than all of it when the last
                # connection closes at the end of the run, which the caller waits for.
                # Housekeeping: if it fails, the next checkpoint, or the close, copies it.
                self._unchecked = 0
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        for marker in flushes:
            marker.done.set()
        if conn is not None:
            conn.close()
        self._close_opened()

    def _take_opened(self) -> sqlite3.Connection | None:
        opened, self._opened = self._opened, None
        return opened._detach() if opened is not None else None

    def _close_opened(self) -> None:
        opened, self._opened = self._opened, None
        if opened is not None:
            opened.close()

    def _wrote(self, events: list[Any]) -> None:
        if not self._run_row and any(type(ev) is RunStarted for ev in events):
            self._run_row = True

    def _write_each(
        self,
        conn: sqlite3.Connection | None,
        events: list[Any],
        results: list[TaskResult | SuccessRow],
    ) -> tuple[list[Any], list[TaskResult | SuccessRow]]:
        """Write ``events`` and ``results`` one by one (the run's first row and its plan
        before the results, the run's end after them; a task's row without its output if the
        row does not fit), recording what cannot be written; returns the events and results
        to try again later (those that failed only because the store became locked)."""
        ends = [ev for ev in events if type(ev) is RunFinished]
        later: list[Any] = []
        given = map(as_result, results)
        for ev in [*(ev for ev in events if type(ev) is not RunFinished), *given, *ends]:
            if later:  # keep the order once the store is locked again
                later.append(ev)
                continue
            if conn is None or self._run_row_lost:
                self._lose([ev])
                continue
            try:
                if type(ev) is TaskResult:
                    self._write(conn, [], [ev])
                else:
                    self._write(conn, [ev], [])
                    self._wrote([ev])
                continue
            except Exception as exc:
                self.error = _reason(exc)
                if _busy(exc):
                    later.append(ev)
                    continue
            if type(ev) is TaskResult and ev.status.ok and ev.output is not None:
                try:
                    self._write_rows(conn, [self._task_row(ev, output_lost=self.error)])
                    self._mark_lost()
                    self._loss.outputs.append(ev.task_id)
                    continue
                except Exception as exc:
                    self.error = _reason(exc)
            self._lose([ev])
        return (
            [ev for ev in later if type(ev) is not TaskResult],
            [ev for ev in later if type(ev) is TaskResult],
        )

    def _mark_lost(self) -> None:
        self._lost_any = True
        self._loss.error = self.error or "unknown error"

    def _lose(self, events: list[Any]) -> None:
        """Account for ``events`` that will never be written."""
        if not events:
            return
        self._mark_lost()
        loss = self._loss
        for ev in events:
            kind = type(ev)
            if kind is RunStarted:
                if not self._run_row:
                    self._run_row_lost = True
                    loss.run = True
            elif kind is TaskResult:
                loss.tasks.append(ev.task_id)
            elif kind is tuple:  # a plain success's values
                loss.tasks.append(ev[0])
            elif kind is RunFinished:
                loss.finish = True
            elif kind is PlanExtended:
                loss.plan = True

    def _write_rows(self, conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
        ids = {row[1] for row in rows}
        conn.execute("BEGIN IMMEDIATE")
        try:
            if not self._written.isdisjoint(ids):
                materialize(conn, self.run_id)
            insert_tuples(conn, rows)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._written |= ids

    def _write(
        self,
        conn: sqlite3.Connection,
        events: list[Any],
        given: Sequence[TaskResult | SuccessRow],
    ) -> None:
        """Write the run's ``events`` and task results (``given``) in one transaction."""
        starts: list[tuple[Any, ...]] = []
        asked: list[tuple[Any, ...]] = []  # calls left for a person (waiting tasks)
        finishes: list[tuple[Any, ...]] = []
        grown: PlanExtended | None = None  # the latest plan of a run still being planned
        plan_bytes = 0
        n = len(given)
        rows = list(map(type, given)).count(tuple)
        successes: list[SuccessRow] | None
        if rows == n and JSON_ROWS:  # the usual batch: plain successes, written as given
            successes = cast("list[SuccessRow]", given)
        else:
            made = list(map(as_result, given)) if rows else cast("list[TaskResult]", given)
            successes = success_rows(made) if JSON_ROWS else None
            if successes is None and _WAITING in map(_STATUS, made):
                for r in made:  # rare: looked for without a Python loop
                    if r.status is _WAITING:
                        asked.extend(self._asked(r))
            given = made
        for ev in events:
            if type(ev) is RunStarted:
                plan = ev.plan
                text = plan_to_column(plan)
                plan_bytes += len(text)
                starts.append(
                    (
                        ev.run_id,
                        ev.parent_id,
                        self._created,
                        plan.goal,
                        text,
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
                        os.getpid(),
                        res.started_at,
                        res.finished_at,
                        to_column(res.critical_path),
                        res.critical_path_s,
                        ev.run_id,
                    )
                )
        conn.execute("BEGIN IMMEDIATE")
        try:
            if starts and self.resumed:  # claimed by the resume: running, in this process
                conn.executemany(
                    "UPDATE runs SET executor = ?, pid = ? WHERE id = ?",
                    [(s[7], s[8], s[0]) for s in starts],
                )
            elif starts:
                # The plan in a table of its own: the run's row changes when the run ends.
                conn.executemany(
                    "INSERT INTO runs (id, parent_id, created, goal, plan, n_tasks, status, "
                    "executor, pid, context) VALUES (?, ?, ?, ?, '', ?, ?, ?, ?, ?)",
                    [s[:4] + s[5:] for s in starts],
                )
                conn.executemany(
                    "INSERT INTO run_plans (run_id, plan) VALUES (?, ?)",
                    [(s[0], s[4]) for s in starts],
                )
            if grown is not None:
                text = plan_to_column(grown.plan)
                plan_bytes += len(text)
                conn.execute(
                    "INSERT OR REPLACE INTO run_plans (run_id, plan) VALUES (?, ?)",
                    (grown.run_id, text),
                )
                conn.execute(
                    "UPDATE runs SET n_tasks = ? WHERE id = ?",
                    (len(grown.plan.tasks), grown.run_id),
                )
            written = self._insert(conn, given, successes) if n else None
            for row in asked:
                conn.execute(
                    "INSERT INTO approvals (run_id, task_id, seq, tool, args, rule, source, "
                    "asked_at, state) SELECT ?, ?, COALESCE(MAX(seq), 0) + 1, ?, ?, ?, ?, ?, "
                    "'waiting' FROM approvals WHERE run_id = ? AND task_id = ?",
                    (*row, row[0], row[1]),
                )
            if finishes:
                # A resumed run keeps the time it first started.
                conn.executemany(
                    "UPDATE runs SET status = ?, pid = ?, started_at = COALESCE(started_at, ?), "
                    "finished_at = ?, critical_path = ?, critical_path_s = ? WHERE id = ?",
                    finishes,
                )
                ended = [(f"the run ended {f[0]}", f[-1]) for f in finishes if f[0] != "paused"]
                conn.executemany(  # nobody can decide about a run that will not resume
                    "UPDATE approvals SET state = 'closed', note = ? "
                    "WHERE run_id = ? AND state = 'waiting'",
                    ended,
                )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        if written:
            self._written |= written
        self._unchecked += plan_bytes + _RESULT_BYTES * n

    def _asked(self, r: TaskResult) -> list[tuple[Any, ...]]:
        """The calls of a waiting task left for a person: one row each (its ``wait``
        decisions, or its waiting elements' of a map task: the tool, the arguments as the rule
        saw them, the rule, the caller)."""
        calls = [*(r.decisions or ())]
        for e in r.elements or ():  # a map task: its elements' calls
            calls.extend(e.decisions or ())
        return [
            (self.run_id, r.task_id, d.tool, to_column(d.args), d.rule, d.source, d.at)
            for d in calls
            if d.decision == WAIT
        ]

    def _insert(
        self,
        conn: sqlite3.Connection,
        results: Sequence[TaskResult | SuccessRow],
        successes: list[SuccessRow] | None,
    ) -> set[str]:
        """Insert ``results``: the plain ones as log rows (a batch document each), the others
        (and every result, when that way is refused) row by row; returns their task ids. A
        task on record already (a resumed run, a task recorded twice) is written row by row
        over its row, once the run's log rows are rows (a task is never in both).
        ``successes``: when every result is a plain success, their :func:`success_rows`
        (then ``results`` may be those rows too, as they were given)."""
        ids = set(map(_TASK_ID, results) if successes is None else map(_FIRST, successes))
        if self.resumed or len(ids) < len(results) or not self._written.isdisjoint(ids):
            materialize(conn, self.run_id)
            insert_tuples(conn, [self._task_row(as_result(r)) for r in results])
            return ids
        if successes is not None:  # one document
            if not insert_json(conn, self.run_id, (), successes):
                insert_tuples(conn, [self._task_row(as_result(r)) for r in results])
            return ids
        made = cast("list[TaskResult]", results)  # not rows: results, as made
        if JSON_ROWS and all_plain(made):  # one document per layout
            if not insert_json(conn, self.run_id, made):
                insert_tuples(conn, [self._task_row(r) for r in made])
            return ids
        # Each stretch of plain results is a batch document (one the document cannot carry
        # goes row by row alone); the others go row by row.
        start, n = 0, len(made)
        while start < n:
            end = start
            while end < n and JSON_ROWS and plain(made[end]):
                end += 1
            if end > start:
                if not insert_json(conn, self.run_id, made[start:end]):
                    insert_tuples(conn, [self._task_row(r) for r in made[start:end]])
                start = end
            while end < n and not (JSON_ROWS and plain(made[end])):
                end += 1
            if end > start:
                insert_tuples(conn, [self._task_row(r) for r in made[start:end]])
                start = end
        return ids

    def _elements_column(self, elements: list[TaskResult], output_lost: str | None) -> str | None:
        stored = [
            dict(zip(ELEMENT_KEYS, self._result_row(e, output_lost), strict=True)) for e in elements
        ]
        return to_column(stored)

    def _task_row(self, r: TaskResult, *, output_lost: str | None = None) -> tuple[Any, ...]:
        row = self._result_row(r, output_lost)
        elements = r.elements
        if elements is None:
            return (self.run_id, *row, None)
        return (self.run_id, *row, self._elements_column(elements, output_lost))

    def _result_row(self, r: TaskResult, output_lost: str | None) -> tuple[Any, ...]:
        """A result's columns (an element's keys): outputs as JSON text, redacted arguments."""
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
        )


def _check_new(store: RunStore, run_id: str, resumed: bool) -> None:
    """A new run must not be recorded yet; a resumed one must be."""
    if store.exists(run_id) != resumed:
        if resumed:
            raise StoreError(f"no run {run_id} in {store.path} to resume")
        raise StoreError(f"run {run_id} is already recorded in {store.path}")
