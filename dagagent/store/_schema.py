"""The store's SQLite file: opening it (WAL), refusing foreign databases, and the schema
migrations (``PRAGMA user_version`` is the schema version; see :data:`MIGRATIONS`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Union

from pydantic import ValidationError
from pydantic_core import to_json

from ..errors import StoreError
from ..plan import Plan

__all__ = [
    "BUSY_TIMEOUT_S",
    "MIGRATIONS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "TASK_COLUMNS",
    "Migration",
    "connect",
    "migrate",
]

Migration = Union[str, Callable[[sqlite3.Connection], None]]  # noqa: UP007 - runtime alias

#: The columns of a task's row (table ``tasks``).
TASK_COLUMNS = (
    "run_id, task_id, status, output, error, error_type, attempts, started_at, finished_at, "
    "args, steps, decisions, traceback, elements"
)


# The texts of the statements that MIGRATIONS and SCHEMA share (tables and indexes that did
# not change after the step that made them).
_RUNS_BY_CREATED = "CREATE INDEX runs_by_created ON runs (created)"
_RUNS_BY_PARENT = "CREATE INDEX runs_by_parent ON runs (parent_id)"
_SOLVE_ROUNDS = (
    """CREATE TABLE solve_rounds (
            solve_id TEXT NOT NULL REFERENCES solves (id) ON DELETE CASCADE,
            round INTEGER NOT NULL,
            run_id TEXT,
            outcome TEXT NOT NULL,
            reason TEXT,
            decision TEXT,
            feedback TEXT,
            at REAL NOT NULL,
            PRIMARY KEY (solve_id, round)
        ) WITHOUT ROWID""",
    "CREATE INDEX solve_rounds_by_run ON solve_rounds (run_id)",
)
_APPROVALS = (
    """CREATE TABLE approvals (
            run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
            task_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            tool TEXT NOT NULL,
            args TEXT,
            rule TEXT,
            source TEXT NOT NULL DEFAULT 'plan',
            asked_at REAL NOT NULL,
            state TEXT NOT NULL,
            decision TEXT,
            decided_by TEXT,
            decided_at REAL,
            reason TEXT,
            edit_args TEXT,
            used_at REAL,
            note TEXT,
            PRIMARY KEY (run_id, task_id, seq)
        ) WITHOUT ROWID""",
    "CREATE INDEX approvals_by_state ON approvals (state, run_id)",
)
_RUN_PLANS = """CREATE TABLE run_plans (
            run_id TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
            plan TEXT NOT NULL
        )"""


def _move_task_log(conn: sqlite3.Connection) -> None:
    """v9: the task rows of version 8's batch documents (table ``task_log``), as its view
    ``task_log_rows`` gives them, into the table of rows. The view is the store's own, as
    version 8 wrote it; a store that never was at version 8 has no documents."""
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'task_log'").fetchone()
    if found is None or conn.execute("SELECT 1 FROM task_log LIMIT 1").fetchone() is None:
        return
    # A task is in one document or in a row of its own, never both (version 8 saw to it).
    conn.execute(
        f"INSERT OR REPLACE INTO task_rows ({TASK_COLUMNS}) "
        f"SELECT {TASK_COLUMNS} FROM task_log_rows"
    )


def _plans_as_json(conn: sqlite3.Connection) -> None:
    """v9: each plan version 8 kept as ``[goal, [[id, tool, args, depends_on], ...]]`` as the
    plan's JSON, one plan at a time."""
    short = conn.execute("SELECT run_id FROM run_plans WHERE substr(plan, 1, 1) = '['").fetchall()
    for (run_id,) in short:
        (text,) = conn.execute("SELECT plan FROM run_plans WHERE run_id = ?", (run_id,)).fetchone()
        conn.execute(
            "UPDATE run_plans SET plan = ? WHERE run_id = ?", (_short_plan_as_json(text), run_id)
        )


def _short_plan_as_json(text: str) -> str:
    try:
        goal, rows = json.loads(text)
        data = {
            "goal": goal,
            "tasks": [{"id": i, "tool": t, "args": a, "depends_on": d} for i, t, a, d in rows],
        }
    except (TypeError, ValueError):
        return text  # not a plan: its readers say so
    try:
        return Plan.model_validate(data).to_json(indent=None)
    except ValidationError:
        return to_json(data).decode()  # its readers say what does not fit


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
        _RUNS_BY_CREATED,
        _RUNS_BY_PARENT,
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
    # v3: solves (dagagent.solve / dagagent ask): the answer, and each round's run and
    # joiner decision.
    (
        """CREATE TABLE solves (
            id TEXT PRIMARY KEY,
            goal TEXT NOT NULL,
            created REAL NOT NULL,
            status TEXT NOT NULL,
            reason TEXT,
            answer TEXT,
            cites TEXT,
            run_id TEXT,
            usage TEXT,
            finished_at REAL,
            pid INTEGER
        )""",
        *_SOLVE_ROUNDS,
    ),
    # v4: where a failing tool's own code failed (TaskResult.traceback, bounded).
    ("ALTER TABLE tasks ADD COLUMN traceback TEXT",),
    # v5: a map task's elements (a JSON list: one result per element, in order).
    ("ALTER TABLE tasks ADD COLUMN elements TEXT",),
    # v6: approvals that wait: one row per call an ``ask`` rule left for a person, its
    # decision, and whether a resume used it (see dagagent.store._approvals).
    _APPROVALS,
    # v7: the options a solve was started with (a JSON object), so that a paused solve
    # resumes with them (dagagent.workflows.resume_solve).
    ("ALTER TABLE solves ADD COLUMN options TEXT",),
    # v8: a run's plan in a table of its own, ``run_plans``: updating the run's row when it
    # ends then does not write the plan again (``runs.plan`` is '' for such a run). The table
    # of task rows became ``task_rows``. (v8 also wrote task results a batch at a time, as
    # JSON documents in a table ``task_log`` read through views ``task_log_rows`` and
    # ``tasks``: a store at version 8 has them, and v9 takes them out; a store that comes from
    # an older version gets neither.)
    (
        _RUN_PLANS,
        "ALTER TABLE tasks RENAME TO task_rows",
    ),
    # v9: one table of task rows, ``tasks``, and one form of a plan, its JSON. The rows of
    # version 8's batch documents move into the table of rows (as its view gave them), and
    # the documents and their views go. Every run's plan is in ``run_plans`` (``runs.plan`` is
    # '' for every run), as the plan's JSON (version 8 kept a plan of plain tool tasks as
    # ``[goal, [[id, tool, args, depends_on], ...]]``).
    (
        _move_task_log,
        "DROP VIEW IF EXISTS tasks",
        "DROP VIEW IF EXISTS task_log_rows",
        "DROP TABLE IF EXISTS task_log",
        "ALTER TABLE task_rows RENAME TO tasks",
        "INSERT OR IGNORE INTO run_plans (run_id, plan) SELECT id, plan FROM runs WHERE plan != ''",
        "UPDATE runs SET plan = '' WHERE plan != ''",
        _plans_as_json,
    ),
]

SCHEMA_VERSION = len(MIGRATIONS)

#: The schema a NEW store file gets, in one transaction, instead of replaying every step of
#: :data:`MIGRATIONS` (each ALTER TABLE rewrites and checks the whole schema). It is what the
#: steps leave behind, written as they leave it (ADD COLUMN appends to a table's text, RENAME
#: quotes the new name), so that ``sqlite_master`` is the same either way: the tests compare
#: them. A new step goes into :data:`MIGRATIONS` and here. (``runs.plan`` is '' for every run
#: since version 9: the plan is in ``run_plans``, and SQLite before 3.35 cannot drop a column.)
SCHEMA: tuple[str, ...] = (
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
        , context TEXT)""",
    _RUNS_BY_CREATED,
    _RUNS_BY_PARENT,
    """CREATE TABLE "tasks" (
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
            decisions TEXT, traceback TEXT, elements TEXT,
            PRIMARY KEY (run_id, task_id)
        ) WITHOUT ROWID""",
    """CREATE TABLE solves (
            id TEXT PRIMARY KEY,
            goal TEXT NOT NULL,
            created REAL NOT NULL,
            status TEXT NOT NULL,
            reason TEXT,
            answer TEXT,
            cites TEXT,
            run_id TEXT,
            usage TEXT,
            finished_at REAL,
            pid INTEGER
        , options TEXT)""",
    *_SOLVE_ROUNDS,
    *_APPROVALS,
    _RUN_PLANS,
)


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


def _failure(exc: sqlite3.Error) -> str:
    """What kind of failure ``exc`` is: ``busy`` (another process holds a lock), ``readonly``,
    ``cantopen``, or ``other`` (e.g. not a database, a damaged file)."""
    name = getattr(exc, "sqlite_errorname", "")  # Python 3.11+
    text = str(exc)
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or (not name and "locked" in text):
        return "busy"
    if name.startswith("SQLITE_READONLY") or (not name and "readonly" in text):
        return "readonly"
    if name.startswith("SQLITE_CANTOPEN") or (not name and "unable to open" in text):
        return "cantopen"
    return "other"


def _open_error(path: Path, exc: sqlite3.Error, doing: str = "open") -> StoreError:
    """The error of a store that cannot be opened, saying why: another process holds it
    locked, it cannot be written, it cannot be opened at all, or it is not a store."""
    kind = _failure(exc)
    if kind == "busy":
        return StoreError(
            f"run store {path} is locked by another process (waited {BUSY_TIMEOUT_S:g} s "
            f"to {doing} it): try again when that process is done"
        )
    if kind == "readonly":
        return StoreError(
            f"run store {path} cannot be written: it is read-only ({exc}); commands that "
            "only read runs can still read it; or choose another --store"
        )
    if kind == "cantopen":
        return StoreError(f"cannot {doing} run store {path}: {exc}")
    return StoreError(f"{path} is not a dagagent run store: {exc}")


#: How long a connection waits for another process's lock (SQLite's busy timeout).
BUSY_TIMEOUT_S = 10.0


def connect(path: Path, *, read_only: bool = False) -> sqlite3.Connection:
    """A connection to the store file (``read_only``: one that cannot write to it, and that
    also opens a store in a directory it cannot write to)."""
    if read_only:
        uri = path.resolve().as_uri()
        try:
            conn = _connect_ro(uri + "?mode=ro")
        except sqlite3.OperationalError as exc:
            # A WAL store whose directory is read-only: its shared-memory file cannot be
            # made. Nobody can write the store there, so it may be read as unchanging.
            if _failure(exc) not in ("cantopen", "readonly"):
                raise _open_error(path, exc, "read") from None
            try:
                conn = _connect_ro(uri + "?immutable=1")
            except sqlite3.Error as exc2:
                raise _open_error(path, exc2, "read") from None
        except sqlite3.Error as exc:
            raise _open_error(path, exc, "read") from None
        return conn
    conn = sqlite3.connect(
        str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )
    try:
        if int(conn.execute("PRAGMA user_version").fetchone()[0]) == 0:
            _refuse_foreign(conn, path)
        conn.execute("PRAGMA synchronous=NORMAL")  # first: the switch to WAL is then quicker
        # Switching to WAL writes to the file: only when it is not in WAL mode yet.
        if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
            # A new file (no page yet) has nothing a journal could restore: it is switched
            # without one (a rollback journal costs three waits for the disk, often more than
            # the rest of the store's opening). A process killed meanwhile leaves the empty
            # file, or the switched one: its first page is one write.
            new = int(conn.execute("PRAGMA page_count").fetchone()[0]) == 0
            if new:
                conn.execute("PRAGMA journal_mode=MEMORY")
            mode = str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
            if new and mode != "wal":  # WAL refused (e.g. no shared memory): the usual journal
                conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("PRAGMA foreign_keys=ON")
    except sqlite3.Error as exc:
        conn.close()
        raise _open_error(path, exc) from None
    except StoreError:
        conn.close()
        raise
    return conn


def _connect_ro(uri: str) -> sqlite3.Connection:
    conn = sqlite3.connect(
        uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute("PRAGMA user_version").fetchone()
    except BaseException:
        conn.close()
        raise
    return conn


def migrate(
    conn: sqlite3.Connection,
    path: Path,
    migrations: Sequence[Sequence[Migration]],
    schema: Sequence[str] | None = None,
) -> int:
    """Bring the store to version ``len(migrations)``, in one transaction; a new (version 0)
    store gets ``schema`` instead of every step, if given (:data:`SCHEMA`, the schema
    :data:`MIGRATIONS` leave)."""
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
        if version == 0 and schema is not None:
            for text in schema:
                conn.execute(text)
        else:
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
        if _failure(exc) != "other":
            raise _open_error(path, exc, "upgrade") from None
        raise StoreError(
            f"cannot bring run store {path} from schema version {version} to {target}: {exc} "
            "(is it a dagagent run store?)"
        ) from None
    return target
