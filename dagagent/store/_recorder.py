"""Recording a run: :class:`RunRecorder`, the listener a run hands its events and task results
to, and :func:`flush_recorders` for a process about to end."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import StoreError
from ..events import PlanExtended, RunFinished, RunStarted, TaskFinished, get_logger
from ..results import RecordLoss, TaskResult
from ._codec import to_column
from ._ids import check_run_id
from ._rows import PlanRedaction
from ._store import DEFAULT_FLUSH_INTERVAL_S, RunStore
from ._writer import Writer

__all__ = ["RunRecorder", "flush_recorders"]

#: The recorders of this process whose writer thread runs, for :func:`flush_recorders`.
_LIVE: set[RunRecorder] = set()

#: At most this long for the run's first row before its tasks start (it normally takes a few
#: milliseconds); a store that another process holds locked does not hold up the run's tasks.
_RUN_START_WAIT_S = 5.0
# What a recorder takes from the run's events (a task's result it also takes without one).
_RECORDED = (RunStarted, RunFinished, PlanExtended)


def flush_recorders(timeout_s: float) -> bool:
    """Commit what every recorder of this process has been given so far, waiting at most
    ``timeout_s`` in all; True if all of it is on record. For a process about to end without
    closing them (the CLI's second stop signal calls this before ``os._exit``): the writers do
    not wait for their batches to fill, and a main thread blocked here no longer competes with
    them for the interpreter lock (a tool that ignores cancellation keeps it spinning)."""
    deadline = time.monotonic() + timeout_s
    done = True
    for recorder in list(_LIVE):
        done = recorder.flush(max(0.0, deadline - time.monotonic())) and done
    return done


class RunRecorder:
    """Records one run into a :class:`RunStore`; pass it as a listener.

    ``RunRecorder(store, run_id)`` checks the run id (12 hex digits, not yet recorded) and
    nothing else; :meth:`start` starts its writer thread, :meth:`close` writes the rest and
    stops it. ``execute(..., store=...)`` does all of this. With ``resumed=True`` the run is
    already recorded (:func:`dagagent.resume` continues it): its row is claimed, not
    inserted, and the results of the tasks that run again replace theirs. With
    ``side_effects=True`` (a run whose tools may have side effects) each task's row takes its
    output over from the record of the call that made it, in the same transaction: stored
    once (see :mod:`dagagent.store._effects`). ``settings`` (JSON-able; ``execute`` gives
    ``RunSettings.to_record()`` without the executor) are recorded with the run, and a
    resumed run's replace those it was recorded with (without them, those stay):
    :attr:`~dagagent.store.RunRecord.settings`.

    Calling the recorder with a run event (the listener), or :attr:`record` with a task's
    result (what ``execute`` does, without making an event), only puts it on the writer's
    queue; making rows and SQL happen in the writer thread (:mod:`._writer`), which commits
    at most one transaction per ``flush_interval_s`` (default 0.02 s; with 0, each write
    follows the one before at once). :meth:`flush` commits what it was given without waiting
    for the batch to fill (the CLI's second stop signal does, before it ends the process).

    What is durable when: the run's first row is committed before its first task starts,
    unless another process holds the store's write lock at that moment (then the tasks start
    anyway, and the row is written as soon as the lock is free). A task's result is committed
    at most ``flush_interval_s`` after it finished, plus the time of the write in progress
    then and of its own batch, or as soon as a lock another process holds is free. The writer
    shares the interpreter lock with the event loop: an event loop that never waits
    (thousands of tasks that return at once) can keep it from the writer until the run ends;
    tools that wait for anything leave it the lock. A committed transaction survives the
    process being killed (WAL), so a SIGKILL loses only the results of that window
    (``tests/test_store_durability.py`` kills a run mid-way and finds every task that finished
    2 s before on record). A store locked by another process is retried, never given up on
    while the run lasts, and for up to ``write_timeout_s`` after it (in :meth:`close`). A
    write that fails for another reason (a full disk, a file size limit, a damaged file) is
    retried item by item, a task's row without its output if only that fails. What could not
    be written is in :attr:`loss` (a :class:`~dagagent.results.RecordLoss`) and ``execute``
    puts it in ``RunResult.record_loss``; :attr:`error` holds the last error.
    """

    def __init__(
        self,
        store: RunStore | str | Path | None,
        run_id: str,
        *,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        write_timeout_s: float = 60.0,
        resumed: bool = False,
        side_effects: bool = False,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        run_id = check_run_id(run_id, prefix=False)
        if flush_interval_s < 0:
            raise StoreError(f"flush_interval_s must be >= 0, not {flush_interval_s}")
        if write_timeout_s < 0:
            raise StoreError(f"write_timeout_s must be >= 0, not {write_timeout_s}")
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
        self.path = path
        self.run_id = run_id
        self.resumed = resumed
        self.flush_interval_s = flush_interval_s
        self.write_timeout_s = write_timeout_s
        # The store opened here: its connection becomes the writer's (closing the last
        # connection of a store checkpoints it, on disk).
        self._writer = Writer(
            path,
            run_id,
            context=to_column(context) if context else None,
            resumed=resumed,
            side_effects=side_effects,
            settings=to_column(dict(settings)) if settings is not None else None,
            flush_interval_s=flush_interval_s,
            write_timeout_s=write_timeout_s,
            opened=opened,
        )
        #: Takes a task's final result for the record (what a ``TaskFinished`` event
        #: carries), without the event: ``execute`` hands results to the recorder this way.
        #: A result given again for the same task replaces the one before.
        self.record: Callable[[TaskResult], None] = self._writer.put
        #: Takes a task's id and start as it starts: on record as ``running`` until its
        #: result replaces it.
        self.started: Callable[[str, float], None] = self._writer.started
        self._started = False
        self._closed = False

    def redact_plans(self, redact: PlanRedaction) -> None:
        """Record the run's plan as ``redact`` gives it back (``execute`` gives the redaction
        of its redacting interceptors), so that a secret they hide from the tools never
        reaches the stored plan either. Before :meth:`start`; the redaction runs in the
        writer thread."""
        if self._started:
            raise StoreError("redact_plans() must be called before the recorder starts")
        self._writer.redact_plan(redact)

    @property
    def loss(self) -> RecordLoss | None:
        """What could not be written (after :meth:`close`), or ``None``: all of it was."""
        return self._writer.loss

    @property
    def error(self) -> str | None:
        """The store's last error, if the last write failed."""
        return self._writer.error

    def __call__(self, event: Any) -> None:
        if isinstance(event, TaskFinished):
            self.record(event.result)
        elif isinstance(event, _RECORDED):
            self._writer.put(event)
            if isinstance(event, RunStarted) and self._started:
                # The run row is committed before any task starts: a process killed at any
                # moment after this leaves a record (shown as interrupted), never a run whose
                # tools ran with no trace of it. One short wait per run; none if the store is
                # locked by another process (the writer then keeps trying).
                self._writer.run_written.wait(_RUN_START_WAIT_S)

    def start(self) -> RunRecorder:
        if not self._started and not self._closed:
            self._started = True
            _LIVE.add(self)
            self._writer.start()
        return self

    def close(self) -> None:
        """Write everything given so far (waiting up to ``write_timeout_s`` for a store another
        process holds locked), then stop the writer thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._writer.close()
        _LIVE.discard(self)
        if self._writer.loss is not None:
            get_logger(run_id=self.run_id).warning(
                "store.record_incomplete", path=str(self.path), lost=str(self._writer.loss)
            )

    def flush(self, timeout_s: float) -> bool:
        """Commit what this recorder has been given so far now, without waiting for the batch
        to fill, and wait for it up to ``timeout_s``; True if it is on record (or there is no
        writer to wait for). For a process about to end without :meth:`close` (see
        :func:`flush_recorders`); a store another process holds locked is waited for, within
        ``timeout_s``."""
        return self._writer.flush(timeout_s)

    def __enter__(self) -> RunRecorder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_new(store: RunStore, run_id: str, resumed: bool) -> None:
    """A new run must not be recorded yet; a resumed one must be."""
    if store.exists(run_id) != resumed:
        if resumed:
            raise StoreError(f"no run {run_id} in {store.path} to resume")
        raise StoreError(f"run {run_id} is already recorded in {store.path}")
