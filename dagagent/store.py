"""Durable run records: a SQLite run store (stdlib ``sqlite3``, WAL).

Every run the CLI starts (and every ``execute(..., store=...)``) is written here: the run
(id, parent id, when, goal, plan, executor, status, timings) and one row per task result
(status, output, error, attempts, start, end, resolved arguments, agent steps, approval
decisions). ``dagagent runs``, ``show``, ``graph`` and ``replan`` read it back.

**Fingerprints.** A task's reuse fingerprint (:func:`dagagent.runner.task_fingerprint` of the
task and its resolved arguments) is derived from the recorded plan and arguments when a record
is read (``RunRecord.fingerprints``), not computed on the write path: it would be the most
expensive part of a row, and deriving it with the current fingerprint function keeps old
records reusable if that function ever changes.

**Durability.** Recording is a listener (:class:`RunRecorder`). On the event loop it only
puts the event on a queue; a background writer thread serializes results to JSON and writes
them in batched transactions, at most ``flush_interval_s`` (default 0.05 s) after the first
unwritten event, plus the time one write takes. A committed transaction survives the process
being killed (WAL), so a SIGKILL loses only what finished within that delay. The recorder is
flushed and stopped when ``execute`` returns or raises (also on cancellation).

**Where.** :func:`default_store_path`: an explicit path, else ``$DAGAGENT_HOME/runs.db``,
else ``.dagagent/runs.db`` under the current directory.

**What is stored.** The plan, the resolved arguments, the outputs, errors, steps and
decisions, and the run's ``context`` (what the caller chose to record about where the run
came from; the CLI records its ``--tools`` spec so that ``replan`` can load the same tools),
and nothing else: no environment values, no model settings, no keys. A task whose arguments
a :func:`~dagagent.interceptors.redacting` interceptor rewrote is recorded with the redacted
arguments (what its tool received), not the resolved ones, so a secret it hid never reaches
the store; such a task has no fingerprint (its real arguments are not on record) and is not
reused.

**Schema versions.** ``PRAGMA user_version`` holds the schema version. :data:`MIGRATIONS`
is the list of forward steps; entry ``i`` moves a database from version ``i`` to ``i + 1``
(version 0 is an empty file). To change the schema, append a step: opening an older store
applies the missing steps in one transaction. A store newer than this dagagent is refused.

**Run ids** are 12 lowercase hex digits (:func:`dagagent.new_run_id`). Lookups accept a
unique prefix of at least 4 digits. Anything else is refused before it reaches SQL.
"""

from __future__ import annotations

import json
import os
import queue
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Union

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_json

from .errors import StoreError
from .events import RunFinished, RunStarted, TaskFinished, get_logger
from .interceptors import REDACT
from .plan import Plan
from .results import TaskResult, TaskStatus
from .runner import task_fingerprint

__all__ = [
    "DEFAULT_FLUSH_INTERVAL_S",
    "MIGRATIONS",
    "RUN_ID_RE",
    "SCHEMA_VERSION",
    "RunRecord",
    "RunRecorder",
    "RunStore",
    "RunSummary",
    "check_run_id",
    "default_store_path",
]

DEFAULT_FLUSH_INTERVAL_S = 0.05
RUN_ID_RE = re.compile(r"^[0-9a-f]{12}$")
_RUN_REF_RE = re.compile(r"^[0-9a-f]{4,12}$")

Migration = Union[str, Callable[[sqlite3.Connection], None]]  # noqa: UP007 - runtime alias

#: Forward schema steps: ``MIGRATIONS[i]`` takes a store from version ``i`` to ``i + 1``.
MIGRATIONS: list[Sequence[Migration]] = [
    # v1: runs and their task results.
    (
        """CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            parent_id TEXT,
            created REAL NOT NULL,
            goal TEXT NOT NULL DEFAULT '',
            plan TEXT NOT NULL,
            n_tasks INTEGER NOT NULL DEFAULT 0,
            status TEXT NOT NULL,
            executor TEXT NOT NULL DEFAULT '',
            started_at REAL,
            finished_at REAL,
            critical_path TEXT,
            critical_path_s REAL,
            pid INTEGER
        )""",
        "CREATE INDEX runs_by_created ON runs (created)",
        "CREATE INDEX runs_by_parent ON runs (parent_id)",
        """CREATE TABLE tasks (
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            task_id TEXT NOT NULL,
            status TEXT NOT NULL,
            output TEXT,
            error TEXT,
            error_type TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            started_at REAL,
            finished_at REAL,
            args TEXT,
            steps TEXT,
            decisions TEXT,
            PRIMARY KEY (run_id, task_id)
        ) WITHOUT ROWID""",
    ),
    # v2: the context a run was started in (e.g. the CLI's --tools spec), as a JSON object.
    ("ALTER TABLE runs ADD COLUMN context TEXT",),
]

SCHEMA_VERSION = len(MIGRATIONS)

RUNNING = "running"
INTERRUPTED = "interrupted"


def default_store_path(path: str | Path | None = None) -> Path:
    """The store file: ``path`` if given, else ``$DAGAGENT_HOME/runs.db``, else
    ``.dagagent/runs.db`` under the current directory."""
    if path is not None and str(path) != "":
        return Path(path)
    home = os.environ.get("DAGAGENT_HOME")
    if home:
        return Path(home) / "runs.db"
    return Path.cwd() / ".dagagent" / "runs.db"


def check_run_id(ref: str, *, prefix: bool = True) -> str:
    """Return ``ref`` normalised (lowercase) if it is a run id (or, with ``prefix``, a prefix of
    at least 4 hex digits); raise :class:`StoreError` otherwise. Nothing else reaches SQL."""
    norm = ref.strip().lower() if isinstance(ref, str) else ""
    if (_RUN_REF_RE if prefix else RUN_ID_RE).match(norm):
        return norm
    shown = ref if isinstance(ref, str) and len(ref) <= 40 else f"{str(ref)[:37]}..."
    hint = " (or a unique prefix of at least 4)" if prefix else ""
    raise StoreError(f"{shown!r} is not a run id: run ids are 12 hex digits{hint}")


def _json(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return to_json(value, fallback=str).decode()
    except Exception as exc:  # e.g. a value mutated by another task while being written
        return to_json(f"<not recordable: {_why(exc)}>").decode()


def _why(exc: Exception) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


#: ``error_type`` of a succeeded task whose output could not be written (e.g. bytes that are
#: not UTF-8, a circular structure): its ``error`` says why, its output is not recorded, and
#: it is never reused (there is nothing faithful to reuse).
OUTPUT_NOT_RECORDED = "OutputNotRecorded"


def _unjson(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _pid_alive(pid: int | None) -> bool:
    if pid is None or os.name == "nt":  # no cheap, safe liveness check on Windows
        return True
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but belongs to someone else
        return True
    return True


# ---------------------------------------------------------------------------------------------
# Records


class RunSummary(BaseModel):
    """One line of ``dagagent runs``."""

    model_config = ConfigDict(frozen=True)

    id: str
    parent_id: str | None
    created: float
    goal: str
    status: str = Field(
        description="running, succeeded, failed, cancelled, or interrupted "
        "(the process that ran it is gone without finishing it)"
    )
    executor: str
    started_at: float | None
    finished_at: float | None
    n_tasks: int
    counts: dict[str, int]

    @property
    def unrecorded(self) -> int:
        """Tasks of the plan without a recorded result (the run did not get to finish)."""
        return max(0, self.n_tasks - sum(self.counts.values()))


class RunRecord(BaseModel):
    """A recorded run: its plan and every recorded task result (in plan order)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str
    parent_id: str | None
    created: float
    goal: str
    status: str
    executor: str
    started_at: float | None
    finished_at: float | None
    critical_path: list[str]
    critical_path_s: float | None
    plan: Plan
    tasks: dict[str, TaskResult]
    fingerprints: dict[str, str] = Field(
        default_factory=dict,
        description="task_fingerprint(task, args) of every task with recorded arguments "
        "(not redacted ones)",
    )
    context: dict[str, Any] = Field(default_factory=dict)

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.tasks.values():
            out[r.status.value] = out.get(r.status.value, 0) + 1
        return out

    @property
    def unrecorded(self) -> list[str]:
        """Plan tasks without a result: the run was killed before they finished."""
        return [t.id for t in self.plan.tasks if t.id not in self.tasks]

    @property
    def wall_time_s(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.id,
            "parent_id": self.parent_id,
            "created": self.created,
            "status": self.status,
            "goal": self.goal,
            "executor": self.executor,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "wall_time_s": self.wall_time_s,
            "critical_path": self.critical_path,
            "critical_path_s": self.critical_path_s,
            "counts": self.counts,
            "unrecorded": self.unrecorded,
            "context": self.context,
            "plan": self.plan.model_dump(mode="json", exclude_defaults=True),
            "tasks": {
                k: {**r.to_json_dict(), "fingerprint": self.fingerprints.get(k)}
                for k, r in self.tasks.items()
            },
        }


# ---------------------------------------------------------------------------------------------
# The store


def _refuse_foreign(conn: sqlite3.Connection, path: Path) -> None:
    """A store at schema version 0 is a new, empty file: never add our tables to (or switch
    the journal of) another application's database, e.g. a --store pointed at the wrong file."""
    foreign = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' LIMIT 6"
        )
    ]
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise StoreError(
            f"{path} is not a dagagent run store: it is a SQLite database of something else "
            f"(it has {shown}); choose another --store file"
        )


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=10.0, isolation_level=None, check_same_thread=False)
    try:
        if int(conn.execute("PRAGMA user_version").fetchone()[0]) == 0:
            _refuse_foreign(conn, path)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StoreError(f"{path} is not a dagagent run store: {exc}") from None
    except StoreError:
        conn.close()
        raise
    return conn


def _migrate(
    conn: sqlite3.Connection, path: Path, migrations: Sequence[Sequence[Migration]]
) -> int:
    target = len(migrations)
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version == target:
        return version
    if version > target:
        raise StoreError(
            f"{path} has run store schema version {version}; this dagagent reads up to "
            f"version {target}: upgrade dagagent to use it"
        )
    try:
        conn.execute("BEGIN IMMEDIATE")
        # Another process may have migrated while we waited for the write lock.
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version == 0:
            try:
                _refuse_foreign(conn, path)
            except StoreError:
                conn.execute("ROLLBACK")
                raise
        for step in migrations[version:]:
            for stmt in step:
                if isinstance(stmt, str):
                    conn.execute(stmt)
                else:
                    stmt(conn)
        conn.execute(f"PRAGMA user_version = {target:d}")
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise StoreError(
            f"cannot bring run store {path} from schema version {version} to {target}: {exc} "
            "(is it a dagagent run store?)"
        ) from None
    return target


class RunStore:
    """A SQLite file of run records.

    ``RunStore(path)`` opens (and creates, or migrates forward) the store; ``path=None`` uses
    :func:`default_store_path`. With ``create=False`` a missing file is a :class:`StoreError`
    (for commands that only read). ``context`` (JSON-able values) is recorded with every run
    recorded through this object; never put secrets in it. Use it as a context manager or
    call :meth:`close`.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        create: bool = True,
        migrations: Sequence[Sequence[Migration]] | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = default_store_path(path)
        self.context: dict[str, Any] = dict(context or {})
        if not create and not self.path.is_file():
            raise StoreError(
                f"no run store at {self.path}: nothing has been recorded there yet "
                "(runs are recorded by 'dagagent run'; see --store and DAGAGENT_HOME)"
            )
        if self.path.is_dir():
            raise StoreError(f"run store path {self.path} is a directory, not a file")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the run store directory {self.path.parent}: {exc}"
            ) from None
        try:
            conn = _connect(self.path)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open run store {self.path}: {exc}") from None
        try:
            self.schema_version = _migrate(
                conn, self.path, MIGRATIONS if migrations is None else migrations
            )
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn
        self._lock = threading.Lock()

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

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

    def last_run_id(self) -> str:
        rows = self._query("SELECT id FROM runs ORDER BY created DESC, rowid DESC LIMIT 1")
        if not rows:
            raise StoreError(f"no runs recorded in {self.path} yet")
        return str(rows[0][0])

    def list_runs(self, limit: int | None = 20) -> list[RunSummary]:
        """The most recent runs first, with their task counts by status."""
        sql = (
            "SELECT id, parent_id, created, goal, status, executor, started_at, finished_at, "
            "n_tasks, pid FROM runs ORDER BY created DESC, rowid DESC"
        )
        params: tuple[Any, ...] = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (int(limit),)
        rows = self._query(sql, params)
        counts: dict[str, dict[str, int]] = {r[0]: {} for r in rows}
        if rows:
            marks = ",".join("?" * len(rows))
            for run_id, status, n in self._query(
                f"SELECT run_id, status, COUNT(*) FROM tasks WHERE run_id IN ({marks}) "
                "GROUP BY run_id, status",
                [r[0] for r in rows],
            ):
                counts[run_id][status] = int(n)
        return [
            RunSummary(
                id=r[0],
                parent_id=r[1],
                created=r[2],
                goal=r[3],
                status=_effective_status(r[4], r[9]),
                executor=r[5],
                started_at=r[6],
                finished_at=r[7],
                n_tasks=r[8],
                counts=counts[r[0]],
            )
            for r in rows
        ]

    def get_run(self, ref: str) -> RunRecord:
        """The full record of run ``ref`` (a run id or a unique prefix)."""
        run_id = self.resolve(ref)
        rows = self._query(
            "SELECT id, parent_id, created, goal, plan, status, executor, started_at, "
            "finished_at, critical_path, critical_path_s, pid, context FROM runs WHERE id = ?",
            (run_id,),
        )
        if not rows:  # pragma: no cover - resolve() just found it
            raise StoreError(f"no run {run_id} in {self.path}")
        r = rows[0]
        try:
            plan = Plan.model_validate_json(r[4])
        except ValueError as exc:
            raise StoreError(f"run {run_id}: the recorded plan cannot be read: {exc}") from None
        task_rows = self._query(
            "SELECT task_id, status, output, error, error_type, attempts, started_at, "
            "finished_at, args, steps, decisions FROM tasks WHERE run_id = ?",
            (run_id,),
        )
        by_id: dict[str, TaskResult] = {}
        fingerprints: dict[str, str] = {}
        plan_tasks = {t.id: t for t in plan.tasks}
        for t in task_rows:
            by_id[t[0]] = TaskResult.model_construct(
                task_id=t[0],
                status=TaskStatus(t[1]),
                output=_unjson(t[2]),
                error=t[3],
                error_type=t[4],
                attempts=t[5],
                started_at=t[6],
                finished_at=t[7],
                args=_unjson(t[8]),
                steps=_unjson(t[9]),
                decisions=_unjson(t[10]),
            )
            task = plan_tasks.get(t[0])
            if (
                t[8] is not None
                and task is not None
                and _redacted_args(by_id[t[0]].decisions) is None
            ):
                fingerprints[t[0]] = task_fingerprint(task, by_id[t[0]].args)
        order = [t.id for t in plan.tasks]
        tasks = {k: by_id[k] for k in order if k in by_id}
        return RunRecord(
            id=r[0],
            parent_id=r[1],
            created=r[2],
            goal=r[3],
            status=_effective_status(r[5], r[11]),
            executor=r[6],
            started_at=r[7],
            finished_at=r[8],
            critical_path=_unjson(r[9]) or [],
            critical_path_s=r[10],
            plan=plan,
            tasks=tasks,
            fingerprints=fingerprints,
            context=_unjson(r[12]) or {},
        )

    def last_run(self) -> RunRecord:
        return self.get_run(self.last_run_id())

    # -- recording --------------------------------------------------------------------------

    def recorder(
        self, run_id: str, *, flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S
    ) -> RunRecorder:
        """A listener that records run ``run_id`` (see :class:`RunRecorder`)."""
        return RunRecorder(self, run_id, flush_interval_s=flush_interval_s)


def _effective_status(status: str, pid: int | None) -> str:
    if status == RUNNING and not _pid_alive(pid):
        return INTERRUPTED
    return status


# ---------------------------------------------------------------------------------------------
# The recorder: a listener feeding a writer thread

_STOP = object()


def _redacted_args(decisions: Sequence[Mapping[str, Any]] | None) -> Any:
    """The arguments of a plan task's call as the ``redacting`` interceptor left them (the
    last rewrite), or ``None`` if nothing was redacted."""
    found = None
    for d in decisions or ():
        if d.get("decision") == REDACT and d.get("source", "plan") == "plan":
            found = d.get("args")
    return found


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
_RECORDED = frozenset((RunStarted, TaskFinished, RunFinished))


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
        self._context = _json(context) if context else None
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
                    conn = _connect(self.path)
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
                        RUNNING,
                        ev.executor,
                        os.getpid(),
                        self._context,
                    )
                )
            elif type(ev) is RunFinished:
                res = ev.result
                finishes.append(
                    (
                        res.status.value,
                        res.started_at,
                        res.finished_at,
                        _json(res.critical_path),
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
                error = f"the output could not be recorded: {_why(exc)}"
                error_type = OUTPUT_NOT_RECORDED
        args = r.args
        if decisions:
            redacted = _redacted_args(decisions)
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
            _json(args),
            None if steps is None else _json(steps),
            None if decisions is None else _json(decisions),
        )
