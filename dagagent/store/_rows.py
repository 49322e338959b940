"""Task results into the store, a batch at a time.

**Hot path**: every task of every run that has a store, written by the recorder's thread while
the event loop runs the tasks. The two share the interpreter lock, so what counts is the
Python work per result and whatever SQLite does while holding the lock, not SQLite's work
alone. The usual way (:func:`insert_json`) is one row of the ``task_log`` table per batch: a
JSON document made by ``pydantic_core.to_json`` from a tuple per result (no Python loop over
the values), stored as it is. A plain success comes as that tuple already (a
:data:`SuccessRow`, made by the runner from the values it has at hand), so the usual batch is
encoded as it was given. Nothing is taken apart on the write path: the ``tasks`` view expands
each document into one row per task when it is read (its layouts are in :mod:`._schema`). A
batch that way cannot carry (a text with a NUL character, which SQLite's
JSON functions would cut; a float that is not finite; a value that does not encode; a
document SQLite's JSON reader refuses, e.g. nested too deep) goes row by row into
``task_rows`` (:func:`insert_tuples`), as do results with decisions or elements and every
result of a resumed run. Both give the same rows: column values are JSON text for outputs,
arguments and steps, as :func:`~dagagent.store._codec.to_column` makes them.

A task is in ``task_rows`` or in one log row, never both: a result for a task already written
moves the run's log into ``task_rows`` first (:func:`materialize`), then replaces the row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from pydantic_core import to_json

from ..results import TaskResult, TaskStatus
from ._schema import TASK_COLUMNS

__all__ = [
    "JSON_ROWS",
    "TASK_COLUMNS",
    "SuccessRow",
    "all_plain",
    "as_result",
    "insert_json",
    "insert_tuples",
    "materialize",
    "plain",
    "success_rows",
]

_N_COLUMNS = 14


def _has_json() -> bool:
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("SELECT json_valid('[]')")
    except sqlite3.Error:
        return False
    finally:
        conn.close()
    return True


#: Whether this SQLite has the JSON functions (built in since 3.38, and in almost every build
#: before) that the ``tasks`` view reads batches with; without them, every row is a row.
JSON_ROWS = _has_json()

_SUCCESS, _OTHER = 0, 1  # task_log.kind: the layout of a document's rows (see _schema)
_INSERT_DOC = "INSERT INTO task_log (run_id, kind, n, doc) VALUES (?, ?, ?, CAST(? AS TEXT))"
_SUCCEEDED = TaskStatus.SUCCEEDED
_HAS_OUTPUT = frozenset(s for s in TaskStatus if s.ok)


# The per-result work below is done by C code where it can (attrgetter, itemgetter,
# list.count, which compares by identity first): a batch of a thousand plain successes takes
# no Python loop. Their fields are read from each result's ``__dict__`` (where a pydantic
# model keeps them: one attribute lookup per result, then dict lookups, rather than an
# attribute lookup per field through the model's class), in two passes: one for what kind of
# result it is, one for its row. Results come from the event loop's thread, so each look at
# one is a cache miss on this thread's core: every further pass over a batch costs about as
# much as the first.
_KIND = attrgetter("status", "error", "error_type", "traceback", "steps", "decisions", "elements")
_PLAIN_SUCCESS = (_SUCCEEDED, None, None, None, None, None, None)
_SUCCESS_ROW = attrgetter("task_id", "output", "attempts", "started_at", "finished_at", "args")
_CALLS = tuple(map(attrgetter, ("decisions", "elements")))


#: A task that succeeded with nothing more to say (no error, steps, decisions, elements or
#: traceback), as the runner hands it to the recorder: ``(task_id, output, attempts,
#: started_at, finished_at, args)``, the row of a document of successes.
SuccessRow = tuple[str, Any, int, "float | None", "float | None", Any]


def as_result(r: TaskResult | SuccessRow) -> TaskResult:
    """``r`` as a :class:`TaskResult` (a :data:`SuccessRow` made one: the same row)."""
    if not isinstance(r, tuple):
        return r
    task_id, output, attempts, started_at, finished_at, args = r
    return TaskResult(
        task_id=task_id,
        status=_SUCCEEDED,
        output=output,
        attempts=attempts,
        started_at=started_at,
        finished_at=finished_at,
        args=args,
    )


def plain(r: TaskResult) -> bool:
    """Whether ``r`` may go in a batch document (no decisions, no elements)."""
    return r.decisions is None and r.elements is None


def all_plain(results: Sequence[TaskResult]) -> bool:
    """Whether every one of ``results`` is :func:`plain`."""
    n = len(results)
    return all(list(map(get, results)).count(None) == n for get in _CALLS)


def success_rows(results: Sequence[TaskResult]) -> list[tuple[Any, ...]] | None:
    """The rows of ``results`` in a document of successes if every one is a plain success
    (no error, steps, decisions or elements: the usual batch; the first value of a row is
    its task's id), else ``None``."""
    if list(map(_KIND, results)).count(_PLAIN_SUCCESS) == len(results):
        return list(map(_SUCCESS_ROW, results))
    return None


def insert_json(
    conn: sqlite3.Connection,
    run_id: str,
    results: Sequence[TaskResult],
    successes: list[tuple[Any, ...]] | None = None,
) -> bool:
    """Insert ``results`` (each :func:`plain`, no task twice, none of them on record yet) as
    log rows of run ``run_id``: one per layout; ``False``, with nothing written, if the batch
    cannot go this way, so that the caller writes it row by row. SQLite errors other than
    about the document itself (a locked store, a full disk) are raised. ``successes``: their
    :func:`success_rows`, when the caller has them (then ``results`` is not looked at)."""
    if successes is None:
        successes = success_rows(results)
    if successes is not None:
        results = ()
    else:
        successes = []
    others: list[tuple[Any, ...]] = []
    has_output = _HAS_OUTPUT
    for r in results:
        status = r.status
        if (
            status is _SUCCEEDED
            and r.error is None
            and r.traceback is None
            and r.steps is None
            and r.error_type is None
        ):
            successes.append((r.task_id, r.output, r.attempts, r.started_at, r.finished_at, r.args))
        else:
            others.append(
                (
                    r.task_id,
                    status.value,
                    r.output if status in has_output else None,
                    r.error,
                    r.error_type,
                    r.attempts,
                    r.started_at,
                    r.finished_at,
                    r.args,
                    r.steps,
                    r.traceback,
                )
            )
    docs: list[tuple[int, int, bytes]] = []
    for kind, batch in ((_OTHER, others), (_SUCCESS, successes)):
        if batch:
            doc = _document(batch)
            if doc is None:
                return False
            docs.append((kind, len(batch), doc))
    written: list[int] = []
    try:
        for kind, n, doc in docs:
            written.append(conn.execute(_INSERT_DOC, (run_id, kind, n, doc)).lastrowid or 0)
    except (sqlite3.IntegrityError, sqlite3.DataError):
        # What SQLite's JSON reader refuses (nesting deeper than it reads: the table's
        # CHECK) or a document too big for one value fails its statement alone, before any
        # row: take back the other document, and the batch goes row by row.
        if not conn.in_transaction:
            raise
        for rowid in written:
            conn.execute("DELETE FROM task_log WHERE id = ?", (rowid,))
        return False
    return True


def _document(batch: Sequence[tuple[Any, ...]]) -> bytes | None:
    """The batch as one JSON document, or ``None`` if SQLite could not read it back as it
    was written."""
    try:
        doc = to_json(batch, fallback=str)
    except Exception:  # e.g. text that is not UTF-8, a circular structure: row by row
        return None
    if b"\\u0000" in doc:  # SQLite's JSON functions end a text at its NUL character
        return None
    if b"NaN" in doc or b"Infinity" in doc:  # not JSON (or a text saying so: row by row too)
        return None
    return doc


def materialize(conn: sqlite3.Connection, run_id: str) -> None:
    """Move run ``run_id``'s log rows into ``task_rows`` (one row per task, as the view shows
    them), so that a row of ``task_rows`` may replace any task's result."""
    conn.execute(
        f"INSERT OR REPLACE INTO task_rows ({TASK_COLUMNS}) SELECT {TASK_COLUMNS} "
        "FROM task_log_rows WHERE run_id = ?",
        (run_id,),
    )
    conn.execute("DELETE FROM task_log WHERE run_id = ?", (run_id,))


_insert_sql: dict[int, str] = {}
# Rows per INSERT on the row-by-row path: several rows per statement means one release of the
# interpreter lock per statement rather than per row. SQLite before 3.32 allows at most 999
# parameters in a statement.
_ROWS_PER_INSERT = min(
    200, (32766 if sqlite3.sqlite_version_info >= (3, 32) else 999) // _N_COLUMNS
)


def insert_tuples(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    """Insert ``rows`` (tuples of :data:`TASK_COLUMNS`' values) into ``task_rows``, up to 200
    per statement; a later row of a task replaces an earlier one."""
    step = _ROWS_PER_INSERT
    for start in range(0, len(rows), step):
        part = rows[start : start + step]
        n = len(part)
        sql = _insert_sql.get(n)
        if sql is None:
            one = "(" + ",".join("?" * _N_COLUMNS) + ")"
            sql = f"INSERT OR REPLACE INTO task_rows ({TASK_COLUMNS}) VALUES " + ",".join([one] * n)
            _insert_sql[n] = sql
        conn.execute(sql, [v for row in part for v in row])
