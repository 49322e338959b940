"""The run store: opening a store file and reading runs back (:class:`RunStore`)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import StoreError
from ..plan import task_fingerprint
from ..results import RunStatus, TaskResult, TaskStatus
from ._approvals import ApprovalQueries
from ._codec import ELEMENT_KEYS, from_column, to_column
from ._effects import EffectQueries
from ._file import connect
from ._ids import check_run_id
from ._lease import effective_status
from ._location import StoreLocation, locate_store
from ._plans import plan_from_column
from ._rows import PLANNED_AT
from ._schema import MIGRATIONS, SCHEMA, Migration, migrate
from ._sessions import SessionQueries
from ._solves import SolveQueries
from .models import DamagedRun, RunRecord, RunSummary

if TYPE_CHECKING:
    from ._recorder import RunRecorder

__all__ = ["DEFAULT_FLUSH_INTERVAL_S", "RunStore", "default_store_path", "effective_status"]

DEFAULT_FLUSH_INTERVAL_S = 0.02

_RUNNING = TaskStatus.RUNNING.value  # a task's row as it starts, until its result replaces it


def default_store_path(path: str | Path | None = None) -> Path:
    """The store file: ``path`` if given, else ``$DAGAGENT_HOME/runs.db``, else ``runs.db`` in
    the nearest ``.dagagent/`` of the current directory or a parent, else the per-user store
    (:func:`~dagagent.store.locate_store` says which and why)."""
    return locate_store(path).path


def _writable(path: Path) -> bool:
    """Whether this process may write the store file (and, to keep its WAL files beside it,
    its directory). A file that does not exist yet is writable if its directory is, or will
    be once made."""
    if path.exists():
        return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return os.access(parent, os.W_OK | os.X_OK)


class RunStore(SolveQueries, SessionQueries, EffectQueries, ApprovalQueries):
    """A SQLite file of run records (and of solves: see :class:`SolveQueries`; of their model
    calls: see :class:`~dagagent.store._model_calls.ModelCallQueries`; of the approvals that
    wait for a person: see :class:`ApprovalQueries`; and of the calls with side effects: see
    :class:`~dagagent.store._effects.EffectQueries`).

    ``RunStore(path)`` opens (and creates, or migrates forward) the store; ``path=None`` uses
    :func:`default_store_path` (``.location`` says where it was found and why). With
    ``create=False`` a missing file is a :class:`StoreError` (for commands that only read; a
    store this process may not write, e.g. a read-only file or directory, is then opened as
    with ``read_only``, and with ``create=True`` it is a :class:`StoreError`).
    ``read_only=True`` opens an existing store so that nothing can be written to it (the
    viewer): it is neither created nor migrated, and a store of another schema version is a
    :class:`StoreError`. ``context`` (JSON-able values) is
    recorded with every run recorded through this object; never put secrets in it. Use it as
    a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        create: bool = True,
        migrations: Sequence[Sequence[Migration]] | None = None,
        context: Mapping[str, Any] | None = None,
        read_only: bool = False,
    ) -> None:
        self.location: StoreLocation = locate_store(path)
        self.path = self.location.path
        self.context: dict[str, Any] = dict(context or {})
        self.read_only = read_only
        self._conn: sqlite3.Connection | None = None
        if (read_only or not create) and not self.path.is_file():
            raise StoreError(
                f"no run store at {self.path} ({self.location.describe()}): nothing has been "
                "recorded there yet (runs are recorded by 'dagagent run'; see --store and "
                "DAGAGENT_HOME)"
            )
        if self.path.is_dir():
            raise StoreError(f"run store path {self.path} is a directory, not a file")
        if not read_only and not _writable(self.path):
            if create:  # to record runs: say so now, not after the run
                raise StoreError(
                    f"run store {self.path} cannot be written: it is read-only (the file or "
                    "its directory); commands that only read runs can still read it; or "
                    "choose another --store"
                )
            read_only = self.read_only = True  # only reading: no need to write it
        if read_only:
            self.schema_version = len(MIGRATIONS if migrations is None else migrations)
            self._conn = self._open_read_only(self.schema_version)
            self._lock = threading.Lock()
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the run store directory {self.path.parent}: {exc}"
            ) from None
        try:
            conn = connect(self.path)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open run store {self.path}: {exc}") from None
        try:
            if migrations is None:
                self.schema_version = migrate(conn, self.path, MIGRATIONS, SCHEMA)
            else:
                self.schema_version = migrate(conn, self.path, migrations)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._lock = threading.Lock()

    def _open_read_only(self, target: int) -> sqlite3.Connection:
        try:
            conn = connect(self.path, read_only=True)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open run store {self.path}: {exc}") from None
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version != target:
            conn.close()
            if version == 0:
                raise StoreError(f"{self.path} is not a dagagent run store")
            if version > target:
                raise StoreError(
                    f"{self.path} has run store schema version {version}; this dagagent reads "
                    f"up to version {target}: upgrade dagagent to use it"
                )
            raise StoreError(
                f"{self.path} has the older run store schema version {version}; open it once "
                f"with a command that may upgrade it (dagagent runs --store {self.path})"
            )
        return conn

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _detach(self) -> sqlite3.Connection | None:
        """Hand this store's connection over (to a recorder's writer, which closes it): the
        store is closed, the connection is not. ``None`` if it was closed already."""
        with self._lock:
            conn, self._conn = self._conn, None
        return conn

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunStore({str(self.path)!r})"

    def _query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            if self._conn is None:
                raise StoreError(f"run store {self.path} is closed")
            try:
                return self._conn.execute(sql, tuple(params)).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"cannot read run store {self.path}: {exc}") from None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that holds SQLite's write lock from its first statement
        (``BEGIN IMMEDIATE``): committed if the block ends normally, else rolled back."""
        with self._lock:
            conn = self._conn
            if conn is None:
                raise StoreError(f"run store {self.path} is closed")
            if self.read_only:
                raise StoreError(f"run store {self.path} is open read-only")
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot write to run store {self.path}: {exc}") from None
            try:
                yield conn
            except sqlite3.Error as exc:
                conn.execute("ROLLBACK")
                raise StoreError(f"cannot write to run store {self.path}: {exc}") from None
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise StoreError(f"cannot write to run store {self.path}: {exc}") from None

    # -- lookups ----------------------------------------------------------------------------

    def resolve(self, ref: str) -> str:
        """The full id of the run ``ref`` names (a full id or a unique prefix of ≥ 4 digits)."""
        ref = check_run_id(ref)
        if len(ref) == 12:
            if self._query("SELECT 1 FROM runs WHERE id = ?", (ref,)):
                return ref
            raise StoreError(f"no run {ref} in {self.path}")
        rows = self._query(
            "SELECT id FROM runs WHERE substr(id, 1, ?) = ? ORDER BY created DESC LIMIT 6",
            (len(ref), ref),
        )
        if not rows:
            raise StoreError(f"no run whose id starts with {ref} in {self.path}")
        if len(rows) > 1:
            ids = ", ".join(r[0] for r in rows[:5])
            raise StoreError(
                f"run id prefix {ref} is ambiguous (matches {ids}...); give more digits"
            )
        return str(rows[0][0])

    def exists(self, run_id: str) -> bool:
        run_id = check_run_id(run_id, prefix=False)
        return bool(self._query("SELECT 1 FROM runs WHERE id = ?", (run_id,)))

    def update_context(self, run: str, values: Mapping[str, Any]) -> None:
        """Add ``values`` (JSON-able; ``None`` takes a key out) to the context run ``run`` (an
        id or a unique prefix) is recorded with: what the command line loads again to resume
        or revise it (its tools, model, rules, planner of one's own), changed by a resume
        that was given other ones."""
        run_id = self.resolve(run)
        with self._transaction() as conn:
            row = conn.execute("SELECT context FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise StoreError(f"no run {run_id} in {self.path}")
            found = from_column(row[0]) if row[0] is not None else {}
            context = dict(found) if isinstance(found, dict) else {}
            for key, value in values.items():
                if value is None:
                    context.pop(key, None)
                else:
                    context[key] = value
            conn.execute(
                "UPDATE runs SET context = ? WHERE id = ?",
                (to_column(context) if context else None, run_id),
            )

    def last_run_id(self) -> str:
        rows = self._query("SELECT id FROM runs ORDER BY created DESC, rowid DESC LIMIT 1")
        if not rows:
            raise StoreError(f"no runs recorded in {self.path} yet")
        return str(rows[0][0])

    def list_runs(self, limit: int | None = 20) -> list[RunSummary]:
        """The most recent runs first, with their task counts by status (a run whose record
        cannot be read is left out: see :meth:`scan_runs`)."""
        return self.scan_runs(limit)[0]

    def scan_runs(self, limit: int | None = 20) -> tuple[list[RunSummary], list[DamagedRun]]:
        """The most recent runs first, with their task counts by status; and, apart, the runs
        among them whose record this version cannot read (an unknown status: a newer
        dagagent's, or a damaged file), each with what is wrong."""
        sql = (
            "SELECT id, parent_id, created, goal, status, executor, started_at, finished_at, "
            "n_tasks, pid, owner, lease_until FROM runs ORDER BY created DESC, rowid DESC"
        )
        params: tuple[Any, ...] = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (int(limit),)
        rows = self._query(sql, params)
        counts: dict[str, dict[str, int]] = {r[0]: {} for r in rows}
        if rows:
            ids = [r[0] for r in rows]
            marks = ",".join("?" * len(ids))
            for run_id, status, n in self._query(
                f"SELECT run_id, status, COUNT(*) FROM tasks WHERE run_id IN ({marks}) "
                "GROUP BY run_id, status",
                ids,
            ):
                counts[run_id][status] = int(n)
        doubts = self.in_doubt_counts([r[0] for r in rows]) if rows else {}
        summaries = []
        damaged: list[DamagedRun] = []
        for r in rows:
            try:
                status = _run_status(effective_status(r[4], r[9], r[10], r[11]))
            except ValueError as exc:
                damaged.append(DamagedRun(run_id=str(r[0]), problem=str(exc)))
                continue
            run_counts = counts[r[0]]
            if status is not RunStatus.RUNNING:
                run_counts.pop(_RUNNING, None)  # see get_run: unrecorded
            summaries.append(
                RunSummary(
                    run_id=r[0],
                    parent_id=r[1],
                    created=r[2],
                    goal=r[3],
                    status=status,
                    executor=r[5],
                    started_at=r[6],
                    finished_at=r[7],
                    n_tasks=r[8],
                    counts=run_counts,
                    in_doubt=0 if status is RunStatus.RUNNING else doubts.get(r[0], 0),
                )
            )
        return summaries, damaged

    def get_run(self, ref: str) -> RunRecord:
        """The full record of run ``ref`` (a run id or a unique prefix)."""
        run_id = self.resolve(ref)
        rows = self._query(
            "SELECT id, parent_id, created, goal, "
            "(SELECT p.plan FROM run_plans AS p WHERE p.run_id = runs.id), status, executor, "
            "started_at, finished_at, critical_path, critical_path_s, pid, context, owner, "
            "lease_until, settings FROM runs WHERE id = ?",
            (run_id,),
        )
        if not rows:  # pragma: no cover - resolve() just found it
            raise StoreError(f"no run {run_id} in {self.path}")
        r = rows[0]
        try:
            return self._record(run_id, r)
        except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
            raise StoreError(
                f"run {run_id} in {self.path} is damaged and cannot be read: "
                f"{_first_line(exc)} ('dagagent runs' lists the others)"
            ) from None

    def _record(self, run_id: str, r: Sequence[Any]) -> RunRecord:
        status = _run_status(effective_status(r[5], r[11], r[13], r[14]))
        plan = plan_from_column(r[4], run_id)
        task_rows = self._query(
            "SELECT task_id, status, output, error, error_type, attempts, started_at, "
            "finished_at, args, steps, decisions, traceback, worker, elements FROM tasks "
            "WHERE run_id = ?",
            (run_id,),
        )
        by_id: dict[str, TaskResult] = {}
        fingerprints: dict[str, str] = {}
        plan_tasks = {t.id: t for t in plan.tasks}
        for t in task_rows:
            if t[1] == _RUNNING and status is not RunStatus.RUNNING:
                # Started, and the run ended (or its process died) with no result of it on
                # record: unrecorded, as a task that never got a row.
                continue
            try:
                by_id[t[0]] = _result(t)
                if t[13] is not None:
                    by_id[t[0]].elements = [
                        _result(tuple(e.get(k) for k in ELEMENT_KEYS))
                        for e in from_column(t[13])
                        if isinstance(e, dict)
                    ]
            except ValueError as exc:
                raise ValueError(f"task {t[0]!r}: {_first_line(exc)}") from None
            task = plan_tasks.get(t[0])
            if t[8] is not None and task is not None and by_id[t[0]].redacted_args is None:
                fingerprints[t[0]] = task_fingerprint(task, by_id[t[0]].args)
        order = [t.id for t in plan.tasks]
        tasks = {k: by_id[k] for k in order if k in by_id}
        context = from_column(r[12]) or {}
        planned = context.pop(PLANNED_AT, None) if isinstance(context, dict) else None
        settings = from_column(r[15]) or {}
        return RunRecord(
            run_id=r[0],
            parent_id=r[1],
            created=r[2],
            goal=r[3],
            status=status,
            executor=r[6],
            started_at=r[7],
            finished_at=r[8],
            critical_path=from_column(r[9]) or [],
            critical_path_s=r[10],
            plan=plan,
            tasks=tasks,
            fingerprints=fingerprints,
            context=context,
            planned_at=planned if isinstance(planned, dict) else {},
            settings=settings,
        )

    def last_run(self) -> RunRecord:
        return self.get_run(self.last_run_id())

    # -- recording --------------------------------------------------------------------------

    def recorder(
        self, run_id: str, *, flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S
    ) -> RunRecorder:
        """A listener that records run ``run_id`` (see :class:`RunRecorder`)."""
        from ._recorder import RunRecorder

        return RunRecorder(self, run_id, flush_interval_s=flush_interval_s)


def _run_status(value: str) -> RunStatus:
    """A run's recorded status; a :class:`ValueError` that names it when it is none this
    version knows."""
    try:
        return RunStatus(value)
    except ValueError:
        known = ", ".join(s.value for s in RunStatus)
        raise ValueError(
            f"its status {value!r} is not one this version of dagagent knows ({known})"
        ) from None


def _first_line(exc: BaseException) -> str:
    """What went wrong, in one line: a pydantic error's message for each field, without its
    links and input dumps."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            found = errors()
        except Exception:  # not pydantic's after all
            found = None
        if isinstance(found, list) and found:
            return "; ".join(
                f"{'.'.join(str(p) for p in e.get('loc', ())) or 'value'}: {e.get('msg', '')}"
                + (f" (got {e['input']!r})" if isinstance(e.get("input"), (str, int)) else "")
                for e in found[:3]
            )
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _result(t: Sequence[Any]) -> TaskResult:
    """A task result from its columns (a task's row, or an element's object), checked as it
    comes out of the store."""
    return TaskResult.validate(
        {
            "task_id": t[0],
            "status": t[1],
            "output": from_column(t[2]),
            "error": t[3],
            "error_type": t[4],
            "attempts": t[5],
            "started_at": t[6],
            "finished_at": t[7],
            "args": from_column(t[8]),
            "steps": from_column(t[9]),
            "decisions": from_column(t[10]),
            "traceback": t[11],
            "worker": t[12],
        }
    )
