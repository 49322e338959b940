"""The writer thread of a run's record (:class:`Writer`): it takes what the recorder was given
off one queue, in the order it was given, and commits it a batch at a time
(:func:`._rows.write`: one transaction per batch).

**Batches.** The run's first row is written as soon as it comes: the run's tasks wait for
it. Everything else (task results, the plan as it grows, the run's end) waits for the
batch to fill: at most one transaction per ``flush_interval_s``, counted from the start of
the one before (a write that took longer is followed at once; with an interval of 0, each
write follows the one before at once). A flush or the close cuts the wait short. A task
comes twice, its start (written as ``running``) and its result: a batch holding both
writes only the result. The writer
needs the interpreter lock to take results off the queue and make their rows, and shares it
with the event loop: tools that wait for anything leave it the lock; an event loop that
never waits can keep the writer behind until the run ends, when the close writes the rest.

**A locked store.** Another process holding the store's write lock makes the first write
wait briefly (the run's tasks then start without their run's row, which is written when the
lock is free); later writes wait up to SQLite's busy timeout, and a batch that still finds
the store locked is tried again every half second, never given up while the run lasts, and
for up to ``write_timeout_s`` once the recorder closes. Meanwhile the queue keeps taking
results: nothing is lost to a lock that passes.

**Other failures.** A batch that fails for another reason (a full disk, a file size limit, a
damaged file) is written again item by item, a task's row without its output if only the
output does not fit. What cannot be written is accounted for in :attr:`Writer.loss` (a
:class:`~dagagent.results.RecordLoss`), and :attr:`Writer.error` holds the last error.

**Checkpoints.** Once about 256 KiB went to the write-ahead log, the writer copies it into
the database file while the run goes on, rather than all of it when the last connection
closes at the end of the run (which the caller of ``execute`` waits for).
"""

from __future__ import annotations

import contextlib
import math
import queue
import sqlite3
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import StoreError
from ..events import PlanExtended, RunFinished, RunStarted, get_logger
from ..results import RecordLoss, TaskResult
from . import _lease
from ._file import connect
from ._rows import PlanRedaction, Row, RunRow, renew_lease, write

if TYPE_CHECKING:
    from ._store import RunStore

__all__ = ["Writer"]

#: How long the first write waits for another process's write lock (SQLite's busy timeout)
#: before the run goes on without its row: the writer keeps trying in the background.
_FIRST_WRITE_BUSY_MS = 250
_STORE_BUSY_MS = 10_000  # afterwards (SQLite's busy timeout of the store's connections)
_BUSY_RETRY_S = 0.5  # while the store is locked, try again this often
_CHECKPOINT_BYTES = 256 * 1024
# What waits for its batch to fill (the run's first row does not: its tasks wait for it).
_BATCHED = (TaskResult, tuple, RunFinished, PlanExtended)


class _Flush:
    """Put on the queue by :meth:`Writer.flush`: commit what came before me now, then set
    ``done``."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


_STOP = object()  # put on the queue by Writer.close: write what came before me, then end


def _latest(results: list[Row]) -> list[Row]:
    """The last of each task's rows in a batch: a task that started and ended within one
    batch writes its result only, not the ``running`` row its start gave."""
    latest = {r[0] if type(r) is tuple else r.task_id: r for r in results}  # type: ignore[union-attr]
    return results if len(latest) == len(results) else list(latest.values())


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


class Writer:
    """The thread that writes one run's record into the store at ``path`` (see the module's
    docstring). :attr:`put` takes what to write (the run's events, task results), from any
    thread, before or after :meth:`start`; :meth:`close` writes the rest and ends the
    thread. ``opened``: a store opened for this run, whose connection the thread takes over
    (else it opens its own)."""

    def __init__(
        self,
        path: Path,
        run_id: str,
        *,
        context: str | None,
        resumed: bool,
        side_effects: bool = False,
        settings: str | None = None,
        flush_interval_s: float,
        write_timeout_s: float,
        opened: RunStore | None,
    ) -> None:
        self.path = path
        self.run_id = run_id
        self.flush_interval_s = flush_interval_s
        self.write_timeout_s = write_timeout_s
        #: The last error of a write (``None`` once a write succeeds again).
        self.error: str | None = None
        #: Set once the first write was tried (written, or the store is locked: the run goes
        #: on either way).
        self.run_written = threading.Event()
        self._run = RunRow(
            run_id, time.time(), context, resumed, side_effects=side_effects, settings=settings
        )
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        #: Takes an event or a task result to write: a queue's ``put``, the whole hand-over.
        self.put = self._queue.put
        put = self.put

        def started(task_id: str, at: float) -> None:
            put((task_id, at))  # a task's start: a tuple, the least there is to hand over

        #: Takes a task's start (its id, when): its row says ``running`` until its result.
        self.started = started
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._wake = threading.Event()  # cuts the wait for a batch short: a flush, the close
        self._opened = opened
        self._conn: sqlite3.Connection | None = None
        self._busy_ms = -1  # the connection's busy timeout
        self._warned = False  # about a locked store
        self._loss = RecordLoss()
        self._lost_any = False
        self._run_row = False  # the run's first row is in the store
        self._run_row_lost = False
        self._unchecked = 0  # about how many bytes were committed since the last checkpoint
        self._next_beat = math.inf  # when the run's lease is due for renewal

    def redact_plan(self, redact: PlanRedaction) -> None:
        """How the run's plan is redacted for the record (before :meth:`start`)."""
        self._run = replace(self._run, redact_plan=redact)

    @property
    def loss(self) -> RecordLoss | None:
        """What could not be written, or ``None``: all of it was (so far)."""
        return self._loss if self._lost_any else None

    def start(self) -> None:
        self._run = replace(self._run, created=time.time())
        self._thread = threading.Thread(
            target=self._work, name=f"dagagent-store-{self.run_id}", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Write everything given so far (waiting up to ``write_timeout_s`` for a store another
        process holds locked), then end the thread."""
        if self._thread is None:
            self._close_opened()
            return
        self._stopping.set()
        self.put(_STOP)
        self._wake.set()
        self._thread.join()

    def flush(self, timeout_s: float) -> bool:
        """Commit what was given so far now, without waiting for the batch to fill, and wait
        for it up to ``timeout_s``; True if it is on record (or there is no thread to wait
        for)."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return True
        deadline = time.monotonic() + timeout_s
        if self._stopping.is_set():  # closing: the thread writes everything, then ends
            thread.join(timeout_s)
            return not thread.is_alive()
        marker = _Flush()
        self.put(marker)
        self._wake.set()  # after the marker: the thread clears it, then takes the marker
        while not marker.done.wait(min(0.05, max(0.0, deadline - time.monotonic()))):
            if not thread.is_alive():
                return self._queue.empty()
            if time.monotonic() >= deadline:
                return False
        return True

    # -- the thread -------------------------------------------------------------------------

    def _work(self) -> None:
        try:
            self._write_until_closed()
        finally:
            self.run_written.set()  # never a run waiting for a row this thread will not write
            if self._conn is not None:
                self._conn.close()
            self._close_opened()

    def _write_until_closed(self) -> None:
        get, get_nowait = self._queue.get, self._queue.get_nowait
        interval = self.flush_interval_s
        events: list[object] = []  # the run's events to write, in the order they came
        results: list[Row] = []  # the tasks' starts and results, in the order they came
        flushes: list[_Flush] = []  # asked to commit what came before them
        stop = False
        deadline: float | None = None  # once closing: when to give up on a locked store
        last_write = -math.inf  # when the last write started
        while True:
            # Sleep until something comes, or, with a batch the store was locked for, until
            # it is time to try it again, or until the run's lease is due for renewal.
            item: object
            wait = None  # nothing due: sleep until something comes
            if self._run_row and self._next_beat != math.inf:  # a lease held: renew it on time
                wait = max(0.0, self._next_beat - time.monotonic())
            if events or results:
                wait = _BUSY_RETRY_S if wait is None else min(wait, _BUSY_RETRY_S)
            try:
                item = get(timeout=wait) if wait is not None else get()
            except queue.Empty:
                item = None
            if interval > 0 and not stop and isinstance(item, _BATCHED):
                # Let the batch fill: at most one transaction per interval, counted from the
                # start of the one before.
                left = last_write + interval - time.monotonic()
                if left > 0 and self._wake.wait(left) and not self._stopping.is_set():
                    self._wake.clear()  # a flush: its marker is on the queue, taken below
            while item is not None:  # take everything given so far
                if item is _STOP:
                    stop = True
                    deadline = time.monotonic() + self.write_timeout_s
                elif isinstance(item, _Flush):
                    flushes.append(item)
                elif isinstance(item, (TaskResult, tuple)):
                    results.append(item)
                else:
                    events.append(item)
                try:
                    item = get_nowait()
                except queue.Empty:
                    item = None
            if events or results:
                last_write = time.monotonic()
                events, results = self._write(events, _latest(results), deadline)
            if events or results:
                continue  # the store is locked: try again
            for marker in flushes:
                marker.done.set()
            flushes = []
            if stop:
                break
            if self._run_row and time.monotonic() >= self._next_beat:
                self._renew_lease()
            if self._conn is not None and self._unchecked >= _CHECKPOINT_BYTES:
                # Housekeeping: if it fails, the next checkpoint, or the close, copies it.
                self._unchecked = 0
                with contextlib.suppress(sqlite3.Error):
                    self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _connection(self, deadline: float | None) -> sqlite3.Connection:
        """The thread's connection, waiting for another process's write lock briefly for the
        first write (the tasks wait for it), at most the time left once closing."""
        conn = self._conn
        if conn is None:
            # The connection of the store opened for this run, if there is one: a second
            # one would cost its own opening.
            conn = self._conn = self._take_opened() or connect(self.path)
            self._busy_ms = -1
        want = _STORE_BUSY_MS if self._run_row else _FIRST_WRITE_BUSY_MS
        if deadline is not None:
            want = max(0, min(want, int((deadline - time.monotonic()) * 1000)))
        if want != self._busy_ms:
            conn.execute(f"PRAGMA busy_timeout = {want:d}")
            self._busy_ms = want
        return conn

    def _write(
        self, events: list[object], results: list[Row], deadline: float | None
    ) -> tuple[list[object], list[Row]]:
        """Write a batch; returns what to try again (the store is locked)."""
        try:
            self._unchecked += write(self._connection(deadline), self._run, events, results)
            self._wrote(events)
            self.error = None
            return [], []
        except Exception as exc:
            self.error = _reason(exc)
            if not _busy(exc):
                # Not a lock that will pass: write what can be written, one item at a time,
                # and account for the rest.
                return self._write_each(events, results)
            if deadline is not None and time.monotonic() >= deadline:
                self._lose([*events, *results])
                return [], []
            if not self._warned:
                self._warned = True
                get_logger(run_id=self.run_id).warning(
                    "store.locked",
                    path=str(self.path),
                    detail="another process holds the run store's write lock: the record is "
                    "written once it is free (waiting up to "
                    f"{self.write_timeout_s:g} s after the run)",
                )
            return events, results
        finally:
            self.run_written.set()  # written, or not now: the run goes on either way

    def _write_each(
        self, events: list[object], results: list[Row]
    ) -> tuple[list[object], list[Row]]:
        """Write ``events`` and ``results`` one by one (the run's first row and its plan before
        the results, the run's end after them; a task's row without its output if the row
        does not fit), accounting for what cannot be written; returns what to try again
        (what failed only because the store became locked)."""
        conn = self._conn
        ends = [ev for ev in events if isinstance(ev, RunFinished)]
        later: list[object] = []
        for item in [*(ev for ev in events if not isinstance(ev, RunFinished)), *results, *ends]:
            if later:  # keep the order once the store is locked again
                later.append(item)
                continue
            if conn is None or self._run_row_lost:
                self._lose([item])
                continue
            row = item if isinstance(item, (TaskResult, tuple)) else None
            result = item if isinstance(item, TaskResult) else None
            try:
                if row is not None:
                    self._unchecked += write(conn, self._run, [], [row])
                else:
                    self._unchecked += write(conn, self._run, [item], [])
                    self._wrote([item])
                continue
            except Exception as exc:
                self.error = _reason(exc)
                if _busy(exc):
                    later.append(item)
                    continue
            if result is not None and result.status.ok and result.output is not None:
                try:
                    self._unchecked += write(conn, self._run, [], [result], output_lost=self.error)
                    self._mark_lost()
                    self._loss.outputs.append(result.task_id)
                    continue
                except Exception as exc:
                    self.error = _reason(exc)
            self._lose([item])
        return (
            [ev for ev in later if not isinstance(ev, (TaskResult, tuple))],
            [r for r in later if isinstance(r, (TaskResult, tuple))],
        )

    def _wrote(self, events: list[object]) -> None:
        if not self._run_row and any(isinstance(ev, RunStarted) for ev in events):
            self._run_row = True  # written with its lease: renewed from now on
            self._next_beat = time.monotonic() + _lease.HEARTBEAT_S
        if any(isinstance(ev, RunFinished) for ev in events):
            self._next_beat = math.inf  # the run ended: nothing to hold

    def _renew_lease(self) -> None:
        """Renew the run's lease (see ``._lease``); a store that is locked or fails now is
        tried again at the next beat (a lease lasts several)."""
        self._next_beat = time.monotonic() + _lease.HEARTBEAT_S
        conn = self._conn
        if conn is None:
            return
        try:
            renew_lease(conn, self.run_id)
        except sqlite3.Error as exc:
            self.error = _reason(exc)

    def _mark_lost(self) -> None:
        self._lost_any = True
        self._loss.error = self.error or "unknown error"

    def _lose(self, items: list[object]) -> None:
        """Account for ``items`` that will never be written."""
        if not items:
            return
        self._mark_lost()
        loss = self._loss
        for item in items:
            if isinstance(item, RunStarted):
                if not self._run_row:
                    self._run_row_lost = True
                    loss.run = True
            elif isinstance(item, TaskResult):  # a start is not (its end is what counts)
                loss.tasks.append(item.task_id)
            elif isinstance(item, RunFinished):
                loss.finish = True
            elif isinstance(item, PlanExtended):
                loss.plan = True

    def _take_opened(self) -> sqlite3.Connection | None:
        opened, self._opened = self._opened, None
        return opened._detach() if opened is not None else None

    def _close_opened(self) -> None:
        opened, self._opened = self._opened, None
        if opened is not None:
            opened.close()
