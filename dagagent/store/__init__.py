"""Durable run records: a SQLite run store (stdlib ``sqlite3``, WAL).

Every run the CLI starts (and every ``execute(..., store=...)``) is written here: the run
(id, parent id, when, goal, plan, executor, status, timings) and one row per task result
(status, output, error, attempts, start, end, resolved arguments, agent steps, approval
decisions; ``running`` from the moment the task starts until its result replaces it).
``dagagent runs``, ``show``, ``graph`` and ``replan`` read it back.

**Fingerprints.** A task's reuse fingerprint (:func:`dagagent.runner.task_fingerprint` of the
task and its resolved arguments) is derived from the recorded plan and arguments when a record
is read (``RunRecord.fingerprints``), not computed on the write path: it would be the most
expensive part of a row, and deriving it with the current fingerprint function keeps old
records reusable if that function ever changes.

**Durability.** Recording is a listener (:class:`RunRecorder`); ``execute`` hands it each
task's result directly. On the event loop it only puts the result on a queue; a background
writer thread writes them in batched transactions (at most one per ``flush_interval_s``,
default 0.02 s), so a result is committed at most ``flush_interval_s`` after its task
finished plus the time of one or two writes (see :class:`RunRecorder`). A committed
transaction survives the process being killed (WAL), so a SIGKILL loses only what finished
within that window. The recorder is flushed and stopped when ``execute`` returns or raises
(also on cancellation).

**Where** (:func:`locate_store`, in :mod:`._location`): an explicit path, else
``$DAGAGENT_HOME/runs.db``, else ``runs.db`` in the nearest ``.dagagent/`` directory of the
current directory or a parent (as git finds its repository), else the per-user store
(:func:`user_data_dir`: ``$XDG_DATA_HOME/dagagent`` or ``~/.local/share/dagagent`` on Linux,
``~/Library/Application Support/dagagent`` on macOS, ``%LOCALAPPDATA%\\dagagent`` on Windows).

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
applies the missing steps in one transaction. A new file gets the schema they leave in one
script instead (``_schema.SCHEMA``: change it with every step; a test compares the two). A
store newer than this dagagent is refused.

**Run ids** are 12 lowercase hex digits (:func:`dagagent.new_run_id`). Lookups accept a
unique prefix of at least 4 digits. Anything else is refused before it reaches SQL.

**Where each part lives.** :mod:`._file` opens the file; :mod:`._schema` is the schema and
its versions, and migrates a store; :mod:`.models` holds the records read back; :mod:`._store`
is :class:`RunStore` (the queries); :mod:`._recorder` is :class:`RunRecorder`, what a run
hands its events and results to; :mod:`._writer` is the recorder's writer thread (batches,
commits, a locked store, what could not be written); :mod:`._rows` is what a batch writes (the
run's row and plan, one row per task result); :mod:`._plans` is how a plan is kept;
:mod:`._solves` records solves (answers, rounds, joiner decisions); :mod:`._model_calls` their
model calls; :mod:`._approvals` the
calls that wait for a person; :mod:`._ids` checks run ids; :mod:`._location` finds the store
file; :mod:`._codec` turns values into column text and back.
"""

from __future__ import annotations

from ._approvals import DECISIONS, person_wait_s, person_waits
from ._ids import RUN_ID_RE, check_run_id
from ._location import StoreLocation, StoreSource, locate_store, user_data_dir
from ._model_calls import ModelCallWriter, UnrunPlan
from ._recorder import RunRecorder
from ._rows import OUTPUT_NOT_RECORDED
from ._schema import MIGRATIONS, SCHEMA_VERSION, Migration
from ._sessions import SESSION_NAME_RE, check_session_name
from ._store import DEFAULT_FLUSH_INTERVAL_S, RunStore, default_store_path
from .models import (
    ApprovalRecord,
    ChildSolve,
    DamagedRun,
    EffectRecord,
    RoundRecord,
    RunRecord,
    RunSummary,
    SessionRecord,
    SessionSummary,
    SessionTurnRecord,
    SolveLink,
    SolveRecord,
    SolveSummary,
)

__all__ = [
    "DECISIONS",
    "DEFAULT_FLUSH_INTERVAL_S",
    "MIGRATIONS",
    "OUTPUT_NOT_RECORDED",
    "RUN_ID_RE",
    "SCHEMA_VERSION",
    "SESSION_NAME_RE",
    "ApprovalRecord",
    "ChildSolve",
    "DamagedRun",
    "EffectRecord",
    "Migration",
    "ModelCallWriter",
    "RoundRecord",
    "RunRecord",
    "RunRecorder",
    "RunStore",
    "RunSummary",
    "SessionRecord",
    "SessionSummary",
    "SessionTurnRecord",
    "SolveLink",
    "SolveRecord",
    "SolveSummary",
    "StoreLocation",
    "StoreSource",
    "UnrunPlan",
    "check_run_id",
    "check_session_name",
    "default_store_path",
    "locate_store",
    "person_wait_s",
    "person_waits",
    "user_data_dir",
]
