"""The store's schema and its versions: :data:`MIGRATIONS`, the steps from each version to the
next (``PRAGMA user_version`` is the schema version), :data:`SCHEMA`, what they leave, for a
new file, and :func:`migrate`, which brings a store to the current version."""

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
from ._codec import to_column
from ._file import failure, open_error, refuse_foreign

__all__ = ["MIGRATIONS", "SCHEMA", "SCHEMA_VERSION", "TASK_COLUMNS", "Migration", "migrate"]

Migration = Union[str, Callable[[sqlite3.Connection], None]]  # noqa: UP007 - runtime alias

#: The columns of a task's row (table ``tasks``).
TASK_COLUMNS = (
    "run_id, task_id, status, output, error, error_type, attempts, started_at, finished_at, "
    "args, steps, decisions, traceback, worker, elements"
)
# The columns a task row had at version 9 (its migration moves rows of those columns).
_V9_TASK_COLUMNS = (
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
_SOLVE_LINKS = (
    "ALTER TABLE solves ADD COLUMN parent_solve_id TEXT",
    "ALTER TABLE solves ADD COLUMN parent_run_id TEXT",
    "ALTER TABLE solves ADD COLUMN parent_task_id TEXT",
    "ALTER TABLE solves ADD COLUMN parent_element INTEGER",
    "ALTER TABLE solves ADD COLUMN depth INTEGER NOT NULL DEFAULT 0",
    "CREATE INDEX solves_by_parent ON solves (parent_solve_id, parent_run_id, parent_task_id)",
)
_RUN_PLANS = """CREATE TABLE run_plans (
            run_id TEXT PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
            plan TEXT NOT NULL
        )"""
_MODEL_CALLS = (
    """CREATE TABLE model_calls (
            call_id TEXT PRIMARY KEY,
            solve_id TEXT REFERENCES solves (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL DEFAULT 0,
            round INTEGER,
            run_id TEXT,
            role TEXT NOT NULL,
            task_id TEXT,
            model TEXT NOT NULL DEFAULT '',
            provider TEXT NOT NULL DEFAULT '',
            server TEXT,
            response_model TEXT NOT NULL DEFAULT '',
            options TEXT,
            status TEXT NOT NULL,
            error TEXT,
            started_at REAL NOT NULL,
            first_token_s REAL,
            duration_s REAL,
            finish_reason TEXT,
            input_tokens INTEGER NOT NULL DEFAULT 0,
            output_tokens INTEGER NOT NULL DEFAULT 0,
            estimated INTEGER NOT NULL DEFAULT 0,
            cost_usd REAL,
            text TEXT NOT NULL DEFAULT '',
            text_chars INTEGER NOT NULL DEFAULT 0,
            issues TEXT
        )""",
    "CREATE INDEX model_calls_by_solve ON model_calls (solve_id, seq)",
    "CREATE INDEX model_calls_by_run ON model_calls (run_id)",
)

#: Side effects (see dagagent.store._effects): one row per call of a tool with side effects,
#: keyed by its run and idempotency key. No foreign key on the run: an intent is committed by
#: a connection of its own, and may come before the run's first row (a store another process
#: held locked when the run started).
_EFFECTS = (
    """CREATE TABLE effects (
            run_id TEXT NOT NULL,
            key TEXT NOT NULL,
            task_id TEXT NOT NULL,
            element INTEGER,
            occurrence INTEGER NOT NULL DEFAULT 1,
            tool TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            source TEXT NOT NULL DEFAULT 'plan',
            args TEXT,
            attempt INTEGER NOT NULL DEFAULT 1,
            state TEXT NOT NULL,
            output TEXT,
            error TEXT,
            started_at REAL NOT NULL,
            ended_at REAL,
            pid INTEGER,
            resolution TEXT,
            resolved_by TEXT,
            resolved_at REAL,
            reason TEXT,
            PRIMARY KEY (run_id, key)
        ) WITHOUT ROWID""",
    "CREATE INDEX effects_by_state ON effects (state, run_id)",
)
#: v15: the calls of a task (the store finds them when it writes the task's row).
_EFFECTS_BY_TASK = "CREATE INDEX effects_by_task ON effects (run_id, task_id, element)"


def _outputs_once(conn: sqlite3.Connection) -> None:
    """v15: an output kept on a call's row and, the same text, on the row of the task that
    made it (or of its element, in the map task's row) is kept there only: the call's row
    says where (``output_in = 'task'``; see :mod:`dagagent.store._effects`)."""
    conn.execute(
        "UPDATE effects SET output = NULL, output_in = 'task' WHERE state = 'succeeded' "
        "AND source = 'plan' AND element IS NULL AND output IS NOT NULL AND output = "
        "(SELECT t.output FROM tasks AS t WHERE t.run_id = effects.run_id "
        "AND t.task_id = effects.task_id AND t.status IN ('succeeded', 'reused'))"
    )
    rows = conn.execute(
        "SELECT e.run_id, e.task_id, e.key, e.element, e.output, t.elements FROM effects AS e "
        "JOIN tasks AS t ON t.run_id = e.run_id AND t.task_id = e.task_id "
        "WHERE e.state = 'succeeded' AND e.source = 'plan' AND e.element IS NOT NULL "
        "AND e.output IS NOT NULL AND t.status IN ('succeeded', 'reused') "
        "AND t.elements IS NOT NULL ORDER BY e.run_id, e.task_id"
    ).fetchall()
    parsed: dict[tuple[str, str], object] = {}
    moved = []
    for run_id, task_id, key, element, output, elements in rows:
        listed = parsed.get((run_id, task_id))
        if listed is None:
            try:
                listed = parsed[(run_id, task_id)] = json.loads(elements)
            except ValueError:
                listed = parsed[(run_id, task_id)] = []
        if (
            isinstance(listed, list)
            and 0 <= element < len(listed)
            and isinstance(listed[element], dict)
            and listed[element].get("output") == output
        ):
            moved.append((run_id, key))
    conn.executemany(
        "UPDATE effects SET output = NULL, output_in = 'task' WHERE run_id = ? AND key = ?",
        moved,
    )


#: Sessions (dagagent.Session, ``dagagent chat``): a named conversation, and its turns, each
#: a solve. A turn's row is written before its solve starts (it claims the turn's number), so
#: no foreign key on the solve; ``summary`` / ``summarized``: the summary of turns
#: 1..summarized its models saw instead of those turns' questions and answers (see
#: dagagent.planners.conversation), recorded before it planned.
_SESSIONS = (
    """CREATE TABLE sessions (
            name TEXT PRIMARY KEY,
            created REAL NOT NULL,
            options TEXT
        )""",
    """CREATE TABLE session_turns (
            session TEXT NOT NULL REFERENCES sessions (name) ON DELETE CASCADE,
            turn INTEGER NOT NULL,
            solve_id TEXT NOT NULL UNIQUE,
            question TEXT NOT NULL,
            created REAL NOT NULL,
            summary TEXT,
            summarized INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (session, turn)
        ) WITHOUT ROWID""",
)


def _settings_from_context(conn: sqlite3.Connection) -> None:
    """v18: the failure policy ``dagagent run`` kept in a run's context (``on_failure``, with
    its approval rules, for ``resume``) becomes the run's recorded settings; the context
    keeps the rest. A context that is not a JSON object is left as it is (its readers say
    what is wrong with it)."""
    rows = conn.execute(
        "SELECT id, context FROM runs WHERE instr(context, '\"on_failure\"') > 0"
    ).fetchall()
    for run_id, text in rows:
        try:
            context = json.loads(text)
        except ValueError:
            continue
        if not isinstance(context, dict) or context.get("on_failure") not in _FAILURE_POLICIES:
            continue
        settings = {"on_failure": context.pop("on_failure")}
        conn.execute(
            "UPDATE runs SET settings = ?, context = ? WHERE id = ?",
            (to_column(settings), to_column(context) if context else None, run_id),
        )


#: The failure policies a run's context could name (see dagagent.results.FailurePolicy).
_FAILURE_POLICIES = ("cancel", "continue")


def _move_task_log(conn: sqlite3.Connection) -> None:
    """v9: the task rows of version 8's batch documents (table ``task_log``), as its view
    ``task_log_rows`` gives them, into the table of rows. The view is the store's own, as
    version 8 wrote it; a store that never was at version 8 has no documents."""
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'task_log'").fetchone()
    if found is None or conn.execute("SELECT 1 FROM task_log LIMIT 1").fetchone() is None:
        return
    # A task is in one document or in a row of its own, never both (version 8 saw to it).
    conn.execute(
        f"INSERT OR REPLACE INTO task_rows ({_V9_TASK_COLUMNS}) "
        f"SELECT {_V9_TASK_COLUMNS} FROM task_log_rows"
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
    # v10: every model call of a solve (planner, replanner, joiner, agent tasks), one row
    # each: where it belongs (solve, round, run, role, task), what was asked (model, server,
    # options), what the model wrote (bounded), how it ended, when, its tokens and its cost
    # (see dagagent.store._model_calls).
    _MODEL_CALLS,
    # v11: who holds a running run beyond its pid, which another PID namespace (a container
    # sharing the store) cannot see: where its process runs (``owner``: the machine's boot and
    # PID namespace) and a lease it renews while it runs (``lease_until``, Unix seconds); see
    # dagagent.store._lease.
    (
        "ALTER TABLE runs ADD COLUMN owner TEXT",
        "ALTER TABLE runs ADD COLUMN lease_until REAL",
    ),
    # v12: side effects: the intent of every call of a tool with side effects, committed
    # before it starts, and its outcome after it, keyed by run and idempotency key; how a call
    # left in doubt by a crash was resolved (see dagagent.store._effects).
    _EFFECTS,
    # v13 (numbered by the order the steps were merged in): the run whose plan a replanner's
    # call outside a solve revised (``dagagent replan RUN --model``): a plan not run names it.
    ("ALTER TABLE model_calls ADD COLUMN replan_of TEXT",),
    # v14: sessions, and their turns, each a solve (see dagagent.store._sessions).
    _SESSIONS,
    # v15: each output stored once: a call's output that its task's row (or its element's
    # object there) holds as well is dropped from the call's row, which says where it is
    # (``output_in``); an index finds the calls of a task when its row is written.
    ("ALTER TABLE effects ADD COLUMN output_in TEXT", _EFFECTS_BY_TASK, _outputs_once),
    # v16 (the sub-solves step; numbered by the order the steps were merged in): a sub-solve
    # (a task with "solve": true) is a solve of its own, linked to the task of the solve that
    # started it: the parent solve, its round's run, the task and the map element (NULL for a
    # task that is not a map's), and how deep it is (0 for a solve no task started).
    _SOLVE_LINKS,
    # v17 (the Temporal plan runs' step; numbered by the order the steps were merged in):
    # where a task ran when not in the run's process: the worker (``pid@host``) of a
    # run on Temporal (TaskResult.worker).
    ("ALTER TABLE tasks ADD COLUMN worker TEXT",),
    # v18: the settings a run was started with (or, once resumed, last went on with), as a
    # JSON object (RunSettings.to_record() without the executor, which ``runs.executor``
    # names), so that a resume keeps them. The failure policy that ``dagagent run`` kept in
    # the run's context moves there.
    ("ALTER TABLE runs ADD COLUMN settings TEXT", _settings_from_context),
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
        , context TEXT, owner TEXT, lease_until REAL, settings TEXT)""",
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
            decisions TEXT, traceback TEXT, elements TEXT, worker TEXT,
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
        , options TEXT, parent_solve_id TEXT, parent_run_id TEXT, parent_task_id TEXT, """
    """parent_element INTEGER, depth INTEGER NOT NULL DEFAULT 0)""",
    *_SOLVE_ROUNDS,
    *_APPROVALS,
    _RUN_PLANS,
    _MODEL_CALLS[0].removesuffix(")") + ", replan_of TEXT)",
    *_MODEL_CALLS[1:],
    _EFFECTS[0].replace("reason TEXT,", "reason TEXT, output_in TEXT,"),
    *_EFFECTS[1:],
    *_SESSIONS,
    _EFFECTS_BY_TASK,
    _SOLVE_LINKS[-1],
)


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
                refuse_foreign(conn, path)
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
        if failure(exc) != "other":
            raise open_error(path, exc, "upgrade") from None
        raise StoreError(
            f"cannot bring run store {path} from schema version {version} to {target}: {exc} "
            "(is it a dagagent run store?)"
        ) from None
    return target
