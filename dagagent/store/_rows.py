"""Task results as rows of the ``tasks`` table, a batch at a time.

**Hot path**: one row per task of every run that has a store, written by the recorder's thread
while the event loop runs the tasks. The two share the interpreter lock, so what counts is the
Python work per row, not SQLite's. The usual way (:func:`insert_json`) hands SQLite the whole
batch as one JSON document, made by ``pydantic_core.to_json`` from the results themselves (no
Python loop over the fields), and SQLite takes it apart into rows with ``json_each`` in one
statement, during which the lock is released. A batch that way cannot carry (a text with a
NUL character, which SQLite's ``->>`` would cut; a float that is not finite; a value that
does not encode) goes row by row (:func:`insert_tuples`), as every batch does before SQLite
3.38 (no ``->``/``->>``). Both write the same rows: column values are JSON text for outputs,
arguments, steps and decisions, as :func:`~dagagent.store._codec.to_column` makes them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from pydantic_core import to_json

from ..results import TaskResult, TaskStatus

__all__ = ["JSON_ROWS", "TASK_COLUMNS", "insert_json", "insert_tuples", "plain"]

TASK_COLUMNS = (
    "run_id, task_id, status, output, error, error_type, attempts, started_at, finished_at, "
    "args, steps, decisions, traceback, elements"
)
_N_COLUMNS = 14

#: Whether this SQLite has the ``->`` and ``->>`` JSON operators (3.38+) the batch insert uses.
JSON_ROWS = sqlite3.sqlite_version_info >= (3, 38)

# A batch is one or two statements, each over a JSON document of rows (arrays: SQLite reads
# them several times faster than objects). ``j -> i`` is the JSON text of a value (what
# to_column makes; JSON null becomes NULL), ``j ->> i`` a plain value. Most rows are plain
# successes (no error, traceback or steps), which need only six values each: every value
# SQLite takes out of a row costs about as much as the rest of its insert. The rest carry
# eleven. Results with decisions or elements (whose arguments may be redacted) take the
# row-by-row way.
_FROM_DOC = "FROM (SELECT value AS j FROM json_each(CAST(?2 AS TEXT)))"
_INSERT_SUCCESSES = (  # [task_id, output, attempts, started_at, finished_at, args]
    f"INSERT OR REPLACE INTO tasks ({TASK_COLUMNS}) SELECT ?1, j ->> 0, "
    f"'{TaskStatus.SUCCEEDED.value}', nullif(j -> 1, 'null'), NULL, NULL, j ->> 2, j ->> 3, "
    f"j ->> 4, nullif(j -> 5, 'null'), NULL, NULL, NULL, NULL {_FROM_DOC}"
)
_INSERT_OTHERS = (  # [task_id, status, output, error, error_type, attempts, started_at,
    #                  finished_at, args, steps, traceback]
    f"INSERT OR REPLACE INTO tasks ({TASK_COLUMNS}) SELECT ?1, j ->> 0, j ->> 1, "
    "nullif(j -> 2, 'null'), j ->> 3, j ->> 4, j ->> 5, j ->> 6, j ->> 7, "
    f"nullif(j -> 8, 'null'), nullif(j -> 9, 'null'), NULL, j ->> 10, NULL {_FROM_DOC}"
)
_SUCCEEDED = TaskStatus.SUCCEEDED
_HAS_OUTPUT = frozenset(s for s in TaskStatus if s.ok)


def plain(r: TaskResult) -> bool:
    """Whether ``r`` may go in a batch document (no decisions, no elements)."""
    return r.decisions is None and r.elements is None


def insert_json(conn: sqlite3.Connection, run_id: str, results: Sequence[TaskResult]) -> bool:
    """Insert ``results`` (each :func:`plain`) as rows of run ``run_id``, in one statement per
    kind of row; ``False`` if the batch cannot go this way, so that the caller writes it row by
    row (over what this wrote: the same rows). SQLite errors other than about the document
    itself (a locked store, a full disk) are raised."""
    successes: list[tuple[Any, ...]] = []
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
    if successes and others and len({r.task_id for r in results}) < len(results):
        return False  # a task twice in one batch: the row by row way keeps their order
    for sql, batch in ((_INSERT_OTHERS, others), (_INSERT_SUCCESSES, successes)):
        if batch and not _insert_doc(conn, sql, run_id, batch):
            return False
    return True


def _insert_doc(
    conn: sqlite3.Connection, sql: str, run_id: str, batch: list[tuple[Any, ...]]
) -> bool:
    try:
        doc = to_json(batch, fallback=str)
    except Exception:  # e.g. text that is not UTF-8, a circular structure: row by row
        return False
    if b"\\u0000" in doc:  # ->> would end the text at its NUL character
        return False
    try:
        conn.execute(sql, (run_id, doc))
    except sqlite3.OperationalError as exc:
        # What SQLite's JSON reader refuses (NaN, Infinity, nesting deeper than it reads)
        # fails the statement alone, before any row: the transaction goes on.
        if "JSON" in str(exc) and conn.in_transaction:
            return False
        raise
    except sqlite3.DataError:  # too big for one value: row by row
        if conn.in_transaction:
            return False
        raise
    return True


_insert_sql: dict[int, str] = {}
# Rows per INSERT on the row-by-row path: several rows per statement means one release of the
# interpreter lock per statement rather than per row. SQLite before 3.32 allows at most 999
# parameters in a statement.
_ROWS_PER_INSERT = min(
    200, (32766 if sqlite3.sqlite_version_info >= (3, 32) else 999) // _N_COLUMNS
)


def insert_tuples(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    """Insert ``rows`` (tuples of :data:`TASK_COLUMNS`' values), up to 200 per statement."""
    step = _ROWS_PER_INSERT
    for start in range(0, len(rows), step):
        part = rows[start : start + step]
        n = len(part)
        sql = _insert_sql.get(n)
        if sql is None:
            one = "(" + ",".join("?" * _N_COLUMNS) + ")"
            sql = f"INSERT OR REPLACE INTO tasks ({TASK_COLUMNS}) VALUES " + ",".join([one] * n)
            _insert_sql[n] = sql
        conn.execute(sql, [v for row in part for v in row])
