"""The SQLite run store: what execute(store=...) records, durability, run ids, migrations."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from eventually import until, wait_until

import dagagent
from dagagent.errors import StoreError
from dagagent.events import RunStarted
from dagagent.plan import Plan
from dagagent.results import TaskResult, TaskStatus
from dagagent.review import predict_reuse, reuse_map, review_run
from dagagent.runner import task_fingerprint
from dagagent.settings import RunSettings
from dagagent.store import (
    MIGRATIONS,
    OUTPUT_NOT_RECORDED,
    SCHEMA_VERSION,
    RunRecorder,
    RunStore,
    StoreLocation,
    StoreSource,
    _rows as rows,
    _writer as writer,
    check_run_id,
    default_store_path,
    locate_store,
    user_data_dir,
)

pytestmark = pytest.mark.anyio

#: The id of a process that has died: above the largest id Linux (2**22) or macOS (99,999) gives
#: a process, so no process has it, and the store finds nothing alive there.
NEVER_A_PID = 2**22 + 1


def w(id: str, seconds: float = 0.0, deps: tuple[str, ...] = (), **args: Any) -> dict[str, Any]:
    return {
        "id": id,
        "tool": "work",
        "args": {"name": id, "seconds": seconds, **args},
        "depends_on": list(deps),
    }


def user_version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


# ---------------------------------------------------------------------------------------------
# What is recorded


async def test_execute_records_the_run_and_every_task(
    tmp_path: Path, registry: dagagent.Registry
) -> None:
    plan = {
        "goal": "sum and fail",
        "tasks": [
            w("a", value=2),
            w("b", value={"n": 3, "tags": ["x", "y"]}),
            {"id": "s", "tool": "add", "args": {"a": "${a}", "b": "${b.n}"}},
            w("boom", 0.01, fail=True),
            {"id": "after", "tool": "echo", "args": {"value": "${boom}"}},
        ],
    }
    db = tmp_path / "runs.db"
    result = await dagagent.execute(
        plan, registry, store=db, settings=RunSettings(executor="dataflow", on_failure="continue")
    )
    with RunStore(db, create=False) as st:
        rec = st.get_run(result.run_id)
    assert rec.run_id == result.run_id and rec.parent_id is None
    assert rec.status == "failed" and rec.goal == "sum and fail" and rec.executor == "dataflow"
    assert rec.plan == Plan.model_validate(plan)
    assert list(rec.tasks) == ["a", "b", "s", "boom", "after"]  # plan order
    assert {k: r.status.value for k, r in rec.tasks.items()} == {
        "a": "succeeded",
        "b": "succeeded",
        "s": "succeeded",
        "boom": "failed",
        "after": "skipped",
    }
    assert rec.tasks["b"].output == {"n": 3, "tags": ["x", "y"]}
    assert rec.tasks["s"].output == 5
    assert rec.tasks["s"].args == {"a": 2, "b": 3}  # resolved arguments
    assert rec.tasks["boom"].error == "RuntimeError: boom failed on purpose"
    assert rec.tasks["boom"].error_type == "RuntimeError" and rec.tasks["boom"].attempts == 1
    assert rec.tasks["boom"].output is None
    # where the tool's own code raised, as the run had it
    assert rec.tasks["boom"].traceback == result.tasks["boom"].traceback
    assert "RuntimeError: boom failed on purpose" in (rec.tasks["boom"].traceback or "")
    assert rec.tasks["a"].traceback is None and rec.tasks["after"].traceback is None
    assert "boom" in (rec.tasks["after"].error or "")
    for tid in ("a", "b", "s", "boom"):
        r, live = rec.tasks[tid], result.tasks[tid]
        assert r.started_at == pytest.approx(live.started_at)
        assert r.finished_at == pytest.approx(live.finished_at)
    tasks = {t.id: t for t in rec.plan.tasks}
    for tid in ("a", "b", "s"):
        assert rec.fingerprints[tid] == task_fingerprint(tasks[tid], result.tasks[tid].args)
    assert "after" not in rec.fingerprints  # never resolved
    assert rec.started_at == pytest.approx(result.started_at)
    assert rec.finished_at == pytest.approx(result.finished_at)
    assert rec.critical_path == result.critical_path
    assert rec.counts == result.counts


async def test_store_accepts_a_runstore_and_records_parent_and_decisions(
    tmp_path: Path, registry: dagagent.Registry
) -> None:
    async def note(call: dagagent.ToolInvocation, call_next: Any) -> Any:
        call.decide("allow", "test-rule", "fine")
        return await call_next(call)

    with RunStore(tmp_path / "r.db") as st:
        first = await dagagent.execute({"tasks": [w("a")]}, registry, store=st)
        second = await dagagent.execute(
            {"tasks": [w("a")]}, registry, store=st, parent_id=first.run_id, interceptors=[note]
        )
        rec = st.get_run(second.run_id)
        assert [r.run_id for r in st.list_runs()] == [second.run_id, first.run_id]
    assert rec.parent_id == first.run_id
    (decision,) = rec.tasks["a"].decisions or []
    assert decision.decision == "allow" and decision.decided_by == "test-rule"


async def test_outputs_that_are_not_json_are_stored_as_text(tmp_path: Path) -> None:
    reg = dagagent.Registry()

    class Thing:
        def __str__(self) -> str:
            return "a thing"

    @reg.tool
    def make() -> Any:
        """Return an object JSON cannot hold."""
        return {"thing": Thing(), "pair": (1, 2)}

    result = await dagagent.execute(
        {"tasks": [{"id": "m", "tool": "make"}]}, reg, store=tmp_path / "r.db"
    )
    with RunStore(tmp_path / "r.db") as st:
        assert st.get_run(result.run_id).tasks["m"].output == {"thing": "a thing", "pair": [1, 2]}


async def test_an_output_that_cannot_be_written_does_not_stop_the_record(tmp_path: Path) -> None:
    reg = dagagent.Registry()

    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no text for you")

    @reg.tool
    def odd() -> Any:
        """Return an object that cannot even become text."""
        return Unprintable()

    @reg.tool
    def fine() -> int:
        """Return 1."""
        return 1

    plan = {"tasks": [{"id": "odd", "tool": "odd"}, {"id": "fine", "tool": "fine"}]}
    result = await dagagent.execute(plan, reg, store=tmp_path / "r.db")
    with RunStore(tmp_path / "r.db") as st:
        rec = st.get_run(result.run_id)
    assert rec.status == "succeeded" and rec.tasks["fine"].output == 1
    odd_task = rec.tasks["odd"]
    assert odd_task.status.value == "succeeded" and odd_task.output is None
    assert odd_task.error is not None and "no text for you" in odd_task.error


def test_no_secrets_enter_the_store(
    tmp_path: Path, registry: dagagent.Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-test-0123456789abcdef-secret"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("DAGAGENT_SOME_TOKEN", secret)
    db = tmp_path / "r.db"
    dagagent.execute_sync({"goal": "g", "tasks": [w("a", value="visible")]}, registry, store=db)
    blob = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("r.db"))
    assert b"visible" in blob
    assert secret.encode() not in blob


# ---------------------------------------------------------------------------------------------
# Durability


async def test_a_finished_task_is_durable_while_the_run_goes_on(
    tmp_path: Path, registry: dagagent.Registry
) -> None:
    db = tmp_path / "r.db"
    run_id = dagagent.new_run_id()
    seen = anyio.Event()

    @registry.tool
    async def until_seen() -> str:
        """Run until a reader of the store has found task "fast" on record."""
        await seen.wait()
        return "done"

    def fast_on_record() -> bool:
        if not db.exists():
            return False
        # a separate connection, as another process would read it
        with sqlite3.connect(db) as conn:
            try:
                row = conn.execute(
                    "SELECT finished_at FROM tasks WHERE run_id = ? AND task_id = 'fast'",
                    (run_id,),
                ).fetchone()
            except sqlite3.OperationalError:
                return False
        return row is not None

    async def watch() -> None:
        await until(fast_on_record, "task fast is on record while the run goes on")
        seen.set()

    plan = {"tasks": [w("fast", 0.0), {"id": "slow", "tool": "until_seen"}]}
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        result = await dagagent.execute(
            plan, registry, store=db, run_id=run_id, settings=RunSettings(executor="dataflow")
        )
    # "slow" could only end once "fast" was on record: it was, while the run went on
    assert result.ok and seen.is_set()
    fast, slow = result.tasks["fast"].finished_at, result.tasks["slow"].finished_at
    assert fast is not None and slow is not None and fast < slow


async def test_cancelling_the_run_flushes_what_finished(
    tmp_path: Path, registry: dagagent.Registry
) -> None:
    db = tmp_path / "r.db"
    run_id = dagagent.new_run_id()
    with anyio.CancelScope() as caller:

        def cancel_once_fast_ended(event: Any) -> None:
            if event.kind == "task.finished" and event.result.task_id == "fast":
                caller.cancel()  # slow has started (dataflow starts both at once)

        await dagagent.execute(
            {"tasks": [w("fast"), w("slow", 30.0)]},
            registry,
            store=db,
            run_id=run_id,
            settings=RunSettings(executor="dataflow"),
            listeners=[cancel_once_fast_ended],
        )
    with RunStore(db) as st:
        rec = st.get_run(run_id)
    assert rec.status == "cancelled"
    assert rec.tasks["fast"].status.value == "succeeded"
    assert rec.tasks["slow"].status.value == "cancelled"


async def test_a_locked_database_delays_writes_but_loses_nothing(
    tmp_path: Path, registry: dagagent.Registry
) -> None:
    db = tmp_path / "r.db"
    RunStore(db).close()
    run_id = dagagent.new_run_id()
    locked, release = threading.Event(), threading.Event()
    finished: list[str] = []

    def hold_the_write_lock() -> None:  # as another process writing for a while would
        blocker = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        blocker.execute("BEGIN IMMEDIATE")
        locked.set()
        release.wait(60)
        blocker.execute("COMMIT")
        blocker.close()

    def let_go_after_the_last_task(event: Any) -> None:
        if event.kind == "task.finished":
            finished.append(event.result.task_id)
            if len(finished) == 6:  # every result waited for the lock meanwhile
                release.set()

    holder = threading.Thread(target=hold_the_write_lock)
    holder.start()
    locked.wait()
    result = await dagagent.execute(
        {"tasks": [w(f"t{i}", 0.0) for i in range(6)]},
        registry,
        store=db,
        run_id=run_id,
        settings=RunSettings(executor="dataflow"),
        listeners=[let_go_after_the_last_task],
    )
    release.set()
    holder.join()
    with RunStore(db) as st:
        rec = st.get_run(run_id)
    assert rec.status == "succeeded" and len(rec.tasks) == 6
    assert rec.counts == result.counts


def test_a_killed_run_is_shown_as_interrupted(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    RunStore(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO runs (id, created, plan, n_tasks, status, pid) VALUES (?, ?, '', 1, ?, ?)",
            ("0123456789ab", time.time(), "running", NEVER_A_PID),
        )
        conn.execute(
            "INSERT INTO run_plans (run_id, plan) VALUES (?, ?)",
            ("0123456789ab", '{"tasks": [{"id": "a", "tool": "x"}]}'),
        )
    with RunStore(db) as st:
        (summary,) = st.list_runs()
        rec = st.get_run("0123")
    assert summary.status == "interrupted" and summary.unrecorded == 1
    assert rec.status == "interrupted" and rec.unrecorded == ["a"]


# A live run must not be claimed twice: whether its process still runs is told by its pid only
# from the same machine and PID namespace; from anywhere else, by the lease it renews.

ELSEWHERE = "6f1c0d2e-0000-4000-8000-0123456789ab/pid:[4026532999]"  # another container


def _dead_pid() -> int:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    return dead.pid


def _running_row(db: Path, run_id: str, **columns: Any) -> None:
    """A run recorded as running, with a task that waits: a resume would run it."""
    RunStore(db).close()
    with sqlite3.connect(db) as conn:
        names = ", ".join(columns)
        marks = ", ".join("?" * len(columns))
        conn.execute(
            f"INSERT INTO runs (id, created, plan, n_tasks, status, {names}) "
            f"VALUES (?, ?, '', 1, 'running', {marks})",
            (run_id, time.time(), *columns.values()),
        )
        conn.execute(
            "INSERT INTO run_plans (run_id, plan) VALUES (?, ?)",
            (run_id, '{"tasks": [{"id": "pay", "tool": "x"}]}'),
        )


@pytest.mark.slow  # starts a process to have a pid that is gone
def test_a_run_held_from_another_pid_namespace_is_running_until_its_lease_lapses(
    tmp_path: Path,
) -> None:
    """Its pid means nothing here (no such process in this namespace): it is running, and no
    resume may claim it, as long as its lease is renewed; once the lease lapses, it is
    interrupted and may be resumed."""
    from dagagent.errors import DecisionError

    db = tmp_path / "r.db"
    run_id = "5eed0fa11ed0"
    _running_row(db, run_id, pid=_dead_pid(), owner=ELSEWHERE, lease_until=time.time() + 600)
    with RunStore(db) as st:
        assert st.get_run(run_id).status == "running"
        assert st.list_runs()[0].status == "running"
        with pytest.raises(DecisionError, match=r"is running .*another container.*lease"):
            st.claim_resume(run_id)
    with sqlite3.connect(db) as conn:  # the holder stopped renewing it a while ago
        conn.execute("UPDATE runs SET lease_until = ? WHERE id = ?", (time.time() - 1, run_id))
    with RunStore(db) as st:
        assert st.get_run(run_id).status == "interrupted"
        claimed, _ = st.claim_resume(run_id)
        assert claimed == run_id and st.get_run(run_id).status == "running"


@pytest.mark.slow  # starts a process to have a pid that is gone
def test_a_dead_process_of_this_namespace_is_interrupted_at_once(tmp_path: Path) -> None:
    """Here its pid tells: a run killed in this namespace need not wait for its lease."""
    from dagagent.store._lease import here

    db = tmp_path / "r.db"
    _running_row(db, "de4d0fa11ed0", pid=_dead_pid(), owner=here(), lease_until=time.time() + 600)
    with RunStore(db) as st:
        assert st.get_run("de4d0fa11ed0").status == "interrupted"


def test_a_running_run_renews_its_lease_until_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record's writer renews the lease every heartbeat while the run lasts (a beat of
    0.05 s here, to see two renewals in a moment), with where its process runs."""
    from dagagent.store import _lease

    monkeypatch.setattr(_lease, "HEARTBEAT_S", 0.05)
    db = tmp_path / "r.db"
    seen: list[float] = []
    reg = dagagent.Registry()

    @reg.tool
    async def hold() -> int:
        """Wait until the lease was renewed twice (the state, read from the store)."""
        with anyio.fail_after(30):  # generous: only a stuck writer would take that long
            while len(set(seen)) < 3:
                with sqlite3.connect(db) as conn:
                    row = conn.execute("SELECT owner, lease_until FROM runs").fetchone()
                if row is not None and row[1] is not None:
                    assert row[0] == _lease.here()
                    seen.append(row[1])
                await anyio.sleep(0.01)
        return len(seen)

    result = dagagent.execute_sync({"tasks": [{"id": "h", "tool": "hold"}]}, reg, store=db)
    assert result.ok
    assert sorted(set(seen)) == list(dict.fromkeys(seen))  # renewed forward, never back
    with RunStore(db) as st:
        assert st.get_run(result.run_id).status == "succeeded"


def test_the_writer_goes_on_after_the_run_has_ended(tmp_path: Path) -> None:
    """Once a run's end is on record its lease is no longer renewed; the writer then sleeps
    until something comes (it once asked its queue to wait forever in seconds, an
    OverflowError that ended the thread, and what came later was lost)."""
    from dagagent.events import RunFinished

    db, run_id = tmp_path / "r.db", "0123456789ab"
    plan = Plan.model_validate({"tasks": [{"id": "a", "tool": "t"}]})
    ended = dagagent.execute_sync({"tasks": [{"id": "a", "tool": "echo", "args": {"text": "x"}}]},
                                  _echo_registry())  # fmt: skip
    rec = RunRecorder(db, run_id, flush_interval_s=0).start()
    rec(RunStarted(run_id, plan, "dataflow"))
    rec(RunFinished(run_id, ended))

    def finished() -> bool:
        with sqlite3.connect(db) as conn:
            row = conn.execute("SELECT finished_at FROM runs").fetchone()
        return row is not None and row[0] is not None

    wait_until(finished, "the run's end on record")
    rec.record(_plain("a", output=1))  # comes after the end: still written
    rec.close()
    assert rec.loss is None
    assert _task_rows(db, run_id) == [("a", "succeeded", "1")]


def _echo_registry() -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool
    def echo(text: str) -> str:
        """Say it back."""
        return text

    return reg


@pytest.mark.slow  # starts a process to have a pid that is gone
def test_a_run_recorded_before_leases_is_told_by_its_pid(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    _running_row(db, "01d0fa11ed00", pid=_dead_pid())
    with RunStore(db) as st:
        assert st.get_run("01d0fa11ed00").status == "interrupted"


# ---------------------------------------------------------------------------------------------
# Run ids


@pytest.mark.parametrize(
    "bad", ["", "abc", "xyz123456789", "0123456789abc", "'; DROP TABLE runs; --", "01 23", "../x"]
)
def test_bad_run_ids_are_refused_before_any_sql(bad: str) -> None:
    with pytest.raises(StoreError, match="is not a run id"):
        check_run_id(bad)


def test_run_ids_and_prefixes(tmp_path: Path) -> None:
    assert check_run_id("ABCDEF") == "abcdef"
    with pytest.raises(StoreError):
        check_run_id("abcdef", prefix=False)
    db = tmp_path / "r.db"
    with RunStore(db) as st:
        for rid in ("aaaa11112222", "aaaa33334444", "bbbb11112222"):
            st._conn.execute(  # type: ignore[union-attr]
                "INSERT INTO runs (id, created, plan, status) VALUES (?, ?, '{}', 'succeeded')",
                (rid, time.time()),
            )
        assert st.resolve("bbbb") == "bbbb11112222"
        assert st.resolve("AAAA1111") == "aaaa11112222"
        with pytest.raises(StoreError, match="ambiguous"):
            st.resolve("aaaa")
        with pytest.raises(StoreError, match="no run whose id starts with cccc"):
            st.resolve("cccc")
        with pytest.raises(StoreError, match="no run cccc11112222"):
            st.get_run("cccc11112222")
        assert st.last_run_id() == "bbbb11112222"


async def test_execute_refuses_a_bad_or_duplicate_run_id_before_running(
    tmp_path: Path, registry: dagagent.Registry, recorder: Any
) -> None:
    db = tmp_path / "r.db"
    with pytest.raises(StoreError, match="is not a run id"):
        await dagagent.execute({"tasks": [w("a")]}, registry, store=db, run_id="my-run")
    first = await dagagent.execute({"tasks": [w("a")]}, registry, store=db)
    with pytest.raises(StoreError, match="already recorded"):
        await dagagent.execute({"tasks": [w("a")]}, registry, store=db, run_id=first.run_id)
    assert recorder.calls == {"a": 1}


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home directory of our own (never the real one) and no $DAGAGENT_HOME."""
    if any((parent / ".dagagent").is_dir() for parent in tmp_path.parents):
        pytest.skip("a .dagagent/ directory above the temporary directory would be found first")
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.delenv("DAGAGENT_HOME", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))
    return home


def test_default_store_path(
    tmp_path: Path, user_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    # outside any project: the per-user store, and nothing is created in the directory
    assert default_store_path() == user_home / ".local" / "share" / "dagagent" / "runs.db"
    assert not (work / ".dagagent").exists()
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_store_path() == tmp_path / "xdg" / "dagagent" / "runs.db"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/data")  # invalid by the spec: ignored
    assert default_store_path() == user_home / ".local" / "share" / "dagagent" / "runs.db"
    monkeypatch.setenv("DAGAGENT_HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / "runs.db"
    assert default_store_path(tmp_path / "x.db") == tmp_path / "x.db"
    with RunStore() as st:
        assert st.path == tmp_path / "home" / "runs.db" and st.path.is_file()


def test_the_nearest_dagagent_directory_is_the_store_as_git_finds_its_repository(
    tmp_path: Path, user_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    deep = project / "src" / "pkg"
    deep.mkdir(parents=True)
    (project / ".dagagent").mkdir()
    for here in (project, project / "src", deep):
        monkeypatch.chdir(here)
        found = locate_store()
        assert found == StoreLocation(project / ".dagagent" / "runs.db", StoreSource.project)
        assert "nearest .dagagent/" in found.describe()
    # a nearer one wins; a file named .dagagent is not a store directory
    (deep / ".dagagent").mkdir()
    assert locate_store(cwd=deep).path == deep / ".dagagent" / "runs.db"
    (project / "src" / ".dagagent").write_text("not a directory")
    assert locate_store(cwd=project / "src").path == project / ".dagagent" / "runs.db"
    # outside the project: the user's store, which says how to start a project's own
    elsewhere = locate_store(cwd=tmp_path)
    assert elsewhere.source is StoreSource.user
    assert elsewhere.path == user_home / ".local" / "share" / "dagagent" / "runs.db"
    assert "mkdir .dagagent" in elsewhere.describe()
    # $DAGAGENT_HOME wins over the project's store, --store over both
    monkeypatch.setenv("DAGAGENT_HOME", str(tmp_path / "home"))
    assert locate_store(cwd=deep) == StoreLocation(tmp_path / "home" / "runs.db", StoreSource.env)
    given = locate_store(tmp_path / "x.db", cwd=deep)
    assert given == StoreLocation(tmp_path / "x.db", StoreSource.given)
    with RunStore(cwd_db := tmp_path / "y.db") as st:
        assert st.location == StoreLocation(cwd_db, StoreSource.given)


@pytest.mark.parametrize(
    ("platform", "environ", "expected"),
    [
        ("linux", {}, "/h/.local/share/dagagent"),
        ("linux", {"XDG_DATA_HOME": "/data"}, "/data/dagagent"),
        ("freebsd13", {}, "/h/.local/share/dagagent"),
        ("darwin", {"XDG_DATA_HOME": "/data"}, "/h/Library/Application Support/dagagent"),
        ("win32", {"LOCALAPPDATA": "/appdata/local"}, "/appdata/local/dagagent"),
        ("win32", {}, "/h/AppData/Local/dagagent"),
    ],
)
def test_the_per_user_store_is_where_each_platform_keeps_application_data(
    platform: str, environ: dict[str, str], expected: str
) -> None:
    assert user_data_dir(platform=platform, environ=environ, home=Path("/h")) == Path(expected)


def test_missing_or_unusable_store_files(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no run store at"):
        RunStore(tmp_path / "missing.db", create=False)
    assert not (tmp_path / "missing.db").exists()
    junk = tmp_path / "junk.db"
    junk.write_text("this is not a database, just text " * 100)
    with pytest.raises(StoreError, match="not a dagagent run store"):
        RunStore(junk)
    with pytest.raises(StoreError, match="is a directory"):
        RunStore(tmp_path)
    with RunStore(tmp_path / "empty.db") as st:
        with pytest.raises(StoreError, match="no runs recorded"):
            st.last_run_id()
        assert st.list_runs() == []
    st.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        st.list_runs()


# ---------------------------------------------------------------------------------------------
# Schema versions and migrations


def _v1_db(path: Path) -> None:
    """A store as schema version 1 wrote it, with one run in it."""
    conn = sqlite3.connect(path, isolation_level=None)
    for stmt in MIGRATIONS[0]:
        assert isinstance(stmt, str)
        conn.execute(stmt)
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO runs (id, created, goal, plan, n_tasks, status, executor) "
        "VALUES ('00000000abcd', 1.0, 'old', ?, 1, 'succeeded', 'levels')",
        ('{"goal": "old", "tasks": [{"id": "a", "tool": "echo", "args": {"value": 1}}]}',),
    )
    conn.execute(
        "INSERT INTO tasks (run_id, task_id, status, output, attempts, started_at, finished_at, "
        "args) VALUES ('00000000abcd', 'a', 'succeeded', '1', 1, 1.0, 2.0, '{\"value\": 1}')"
    )
    conn.close()


def test_a_new_file_and_an_empty_v0_database_get_the_current_schema(tmp_path: Path) -> None:
    with RunStore(tmp_path / "new.db") as st:
        assert st.schema_version == SCHEMA_VERSION
    assert user_version(tmp_path / "new.db") == SCHEMA_VERSION
    v0 = tmp_path / "v0.db"
    sqlite3.connect(v0).close()  # an existing, empty database: version 0
    assert user_version(v0) == 0
    with RunStore(v0) as st:
        assert st.list_runs() == []
    assert user_version(v0) == SCHEMA_VERSION
    with sqlite3.connect(v0) as conn:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_a_v1_database_migrates_to_the_current_schema_and_reads(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    _v1_db(db)
    with RunStore(db, create=False) as st:
        assert st.schema_version == SCHEMA_VERSION >= 6
        rec = st.get_run("00000000abcd")
        assert rec.goal == "old" and rec.tasks["a"].output == 1
        assert rec.fingerprints == {"a": task_fingerprint(rec.plan.tasks[0], {"value": 1})}
        assert rec.context == {}  # v2 added the run context column
        assert st.solve_of_run(rec.run_id) is None  # v3 added the solve records
        assert rec.tasks["a"].traceback is None  # v4 added the traceback column
        assert rec.tasks["a"].elements is None  # v5 added the elements of map tasks
        assert st.approvals(rec.run_id) == []  # v6 added the approvals that wait
        # v9: one table of task rows; every plan in run_plans, as its JSON
        assert st.list_runs()[0].counts == {"succeeded": 1}
    assert user_version(db) == SCHEMA_VERSION
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT task_id, output FROM tasks").fetchall() == [("a", "1")]
        assert conn.execute("SELECT plan FROM runs").fetchall() == [("",)]
        (plan,) = conn.execute("SELECT plan FROM run_plans").fetchone()
    assert json.loads(plan)["tasks"] == [{"id": "a", "tool": "echo", "args": {"value": 1}}]


DATA = Path(__file__).parent / "data"


def _v8_db(path: Path) -> None:
    """A store as schema version 8 wrote it (made by the code of that version, dumped as SQL):
    runs whose task results are batch documents of ``task_log`` (both layouts), rows of
    ``task_rows`` (decisions, map elements, NaN), plans in the short form and as JSON, and a
    run from version 1 whose plan is in ``runs.plan``."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript((DATA / "store_v8.sql").read_text())
    conn.execute("PRAGMA user_version = 8")
    conn.close()


def test_a_v8_store_migrates_and_reads_as_it_did(tmp_path: Path) -> None:
    """Every run, task and count that version 8 read from its store reads the same after the
    migration to one table of task rows and one form of a plan."""
    db = tmp_path / "v8.db"
    _v8_db(db)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM task_log").fetchone()[0] == 5
    expected = json.loads((DATA / "store_v8.json").read_text())
    with RunStore(db, create=False) as st:
        assert st.schema_version == SCHEMA_VERSION
        assert [
            s.model_dump(mode="json", exclude={"in_doubt"}) for s in st.list_runs(limit=None)
        ] == expected["runs"]
        for run_id, record in expected["records"].items():
            assert json.loads(json.dumps(st.get_run(run_id).to_json_dict())) == record, run_id
    with sqlite3.connect(db) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        plans = conn.execute("SELECT run_id, plan FROM run_plans").fetchall()
        assert conn.execute("SELECT COUNT(*) FROM runs WHERE plan != ''").fetchone()[0] == 0
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert {"task_log", "task_log_rows", "task_rows"}.isdisjoint(names) and "tasks" in names
    assert len(plans) == len(expected["records"])
    for run_id, text in plans:  # the short ones rewritten as the recorder writes a plan now
        plan = Plan.model_validate_json(text)
        assert text == plan.to_json(indent=None) or run_id == "00000000abcd", run_id
    RunStore(tmp_path / "fresh.db").close()
    assert _schema_of(db) == _schema_of(tmp_path / "fresh.db")


def test_a_v17_store_keeps_the_failure_policy_its_runs_context_held_as_their_settings(
    tmp_path: Path,
) -> None:
    """Version 17 kept the failure policy of a run started with approval rules in the run's
    context (for ``dagagent resume``); version 18 keeps a run's settings in a column of their
    own: the policy moves there, the rest of the context stays, and what is not a policy
    stays where it was."""
    from dagagent.store import MIGRATIONS
    from dagagent.workflows import recorded_settings

    db = tmp_path / "v17.db"
    RunStore(db, migrations=MIGRATIONS[:17]).close()
    approval = {"rules": [{"tool": "send", "action": "ask"}], "source": "--ask send"}
    contexts = {
        "0123456789a1": json.dumps({"tools": "t.py:registry", "approval": approval,
                                    "on_failure": "continue"}),
        "0123456789a2": json.dumps({"approval": approval, "on_failure": "cancel"}),
        "0123456789a3": json.dumps({"tools": "t.py:registry"}),
        "0123456789a4": None,
        "0123456789a5": json.dumps({"on_failure": "maybe"}),  # not a policy: left alone
        "0123456789a6": json.dumps(["on_failure"]),  # not an object: left alone
    }  # fmt: skip
    plan = Plan.model_validate({"goal": "g", "tasks": [{"id": "a", "tool": "t"}]}).to_json()
    with sqlite3.connect(db) as conn:
        for run_id, context in contexts.items():
            conn.execute(
                "INSERT INTO runs (id, created, goal, plan, status, executor, context) "
                "VALUES (?, 1, 'g', '', 'paused', 'serial', ?)",
                (run_id, context),
            )
            conn.execute("INSERT INTO run_plans (run_id, plan) VALUES (?, ?)", (run_id, plan))
    with RunStore(db) as st:
        assert st.schema_version == SCHEMA_VERSION
        first, second = st.get_run("0123456789a1"), st.get_run("0123456789a2")
        assert first.settings == {"on_failure": "continue"}
        assert first.context == {"tools": "t.py:registry", "approval": approval}
        assert second.settings == {"on_failure": "cancel"} and second.context == {
            "approval": approval
        }
        assert recorded_settings(first) == RunSettings(executor="serial", on_failure="continue")
        for run_id in ("0123456789a3", "0123456789a4"):
            record = st.get_run(run_id)
            assert record.settings == {} and "settings" not in record.to_json_dict()
            assert recorded_settings(record) == RunSettings(executor="serial")
    with sqlite3.connect(db) as conn:
        left = dict(conn.execute("SELECT id, context FROM runs WHERE settings IS NULL"))
    assert left == {k: v for k, v in contexts.items() if k[-1] in "3456"}  # unchanged
    RunStore(tmp_path / "fresh.db").close()
    assert _schema_of(db) == _schema_of(tmp_path / "fresh.db")


def _schema_of(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        ).fetchall()


def test_a_new_store_gets_in_one_go_the_schema_the_migrations_leave(tmp_path: Path) -> None:
    """A new file gets SCHEMA, not every step: its schema must be the one a store that went
    through every step has, text for text, and the two must read a run the same."""
    fresh, stepped, old = tmp_path / "fresh.db", tmp_path / "stepped.db", tmp_path / "v1.db"
    RunStore(fresh).close()
    RunStore(stepped, migrations=MIGRATIONS).close()  # given the steps: replays them
    _v1_db(old)
    RunStore(old).close()
    assert _schema_of(fresh) == _schema_of(stepped) == _schema_of(old)
    assert len(_schema_of(fresh)) >= 13
    for db in (fresh, stepped, old):
        assert user_version(db) == SCHEMA_VERSION
        with sqlite3.connect(db) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    run_id = "0123456789ab"
    plan = Plan.model_validate({"goal": "g", "tasks": [{"id": t, "tool": "t"} for t in "abcd"]})
    results = [
        _plain("a", output={"n": [1, 2.5, "x"]}, args={"k": "v"}),
        _plain("b", "failed", error="no", error_type="ToolError", traceback="tb"),
        _plain("c", output="three", decisions=[]),
        _plain("d", "skipped"),
    ]
    records = []
    for db in (fresh, stepped, old):
        rec = RunRecorder(db, run_id).start()
        rec(RunStarted(run_id, plan, "dataflow"))
        for r in results:
            rec.record(r)
        rec.close()
        assert rec.loss is None
        with RunStore(db, create=False) as st:
            got = st.get_run(run_id)
            counts = {s.run_id: s.counts for s in st.list_runs()}[run_id]
        records.append((got.model_dump(exclude={"created"}), counts))
    assert records[0] == records[1] == records[2]
    tasks = records[0][0]["tasks"]
    assert tasks["a"]["output"] == {"n": [1, 2.5, "x"]} and tasks["b"]["traceback"] == "tb"
    assert records[0][1] == {"succeeded": 2, "failed": 1, "skipped": 1}


def test_the_schema_needs_no_json_functions(tmp_path: Path) -> None:
    """Columns hold JSON text that Python reads back: nothing in the schema asks SQLite to
    read JSON, so any SQLite reads the file (``->`` is 3.38+; some builds have no JSON)."""
    with RunStore(tmp_path / "r.db"):
        pass
    with sqlite3.connect(tmp_path / "r.db") as conn:
        schema = [r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE sql NOT NULL")]
    assert schema and not any("json" in sql.lower() or "->" in sql for sql in schema)


def _plain(task_id: str, status: str = "succeeded", **kw: Any) -> TaskResult:
    return TaskResult(
        task_id=task_id,
        status=TaskStatus(status),
        attempts=1,
        started_at=1.5,
        finished_at=2.5,
        **kw,
    )


def _task_rows(db: Path, run_id: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT task_id, status, output FROM tasks WHERE run_id = ? ORDER BY task_id",
            (run_id,),
        ).fetchall()


def test_a_task_recorded_again_has_one_row_the_last(tmp_path: Path) -> None:
    """A task recorded again (in a later batch, in the same batch) has one row, the last
    written, and the counts by status count it once: as a task recorded when it starts and
    again when it ends would."""
    db, run_id = tmp_path / "r.db", "0123456789ab"
    plan = Plan.model_validate({"tasks": [{"id": t, "tool": "t"} for t in "abcde"]})
    rec = RunRecorder(db, run_id, flush_interval_s=0).start()
    rec(RunStarted(run_id, plan, "dataflow"))
    rec.record(_plain("a", output=1))
    rec.record(_plain("b", "failed", error="no"))
    rec.record(_plain("c", output=3, decisions=[]))  # a row of its own
    wait_until(lambda: len(_task_rows(db, run_id)) >= 3, "on record before the next ones come")
    rec.record(_plain("a", output=10))
    rec.record(_plain("b", output=20))
    rec.record(_plain("c", "skipped"))
    rec.record(_plain("d", output=4))
    rec.record(_plain("d", "cancelled", error="stopped"))
    rec.record(_plain("e", output=5))
    rec.close()
    assert rec.loss is None
    assert _task_rows(db, run_id) == [
        ("a", "succeeded", "10"),
        ("b", "succeeded", "20"),
        ("c", "skipped", None),
        ("d", "cancelled", None),
        ("e", "succeeded", "5"),
    ]
    with RunStore(db) as st:
        assert st.list_runs()[0].counts == {"succeeded": 3, "skipped": 1, "cancelled": 1}
        got = st.get_run(run_id)
    assert {t: r.output for t, r in got.tasks.items()} == {
        "a": 10,
        "b": 20,
        "c": None,
        "d": None,
        "e": 5,
    }


def test_the_log_is_copied_into_the_file_while_the_run_goes_on(tmp_path: Path) -> None:
    """A checkpoint when about 256 KiB went to the write-ahead log, not all of it when the
    last connection closes at the end of the run (which the caller of execute waits for)."""
    db, run_id = tmp_path / "r.db", "0123456789ab"
    tasks = [{"id": f"t{i}", "tool": "t", "args": {"text": "x" * 100}} for i in range(4000)]
    plan = Plan.model_validate({"tasks": tasks})  # about 550 KB of JSON
    rec = RunRecorder(db, run_id, flush_interval_s=0).start()
    try:
        # Measured before the plan is given: the writer's thread may write it and checkpoint
        # before this thread looks again.
        small = db.stat().st_size if db.exists() else 0
        rec(RunStarted(run_id, plan, "dataflow"))
        rec.record(_plain("t0", output=0))  # the next batch: the checkpoint follows it
        wait_until(
            lambda: db.stat().st_size >= small + 500_000, "the plan reaches the database file"
        )
    finally:
        rec.close()
    with RunStore(db) as st:
        assert len(st.get_run(run_id).plan.tasks) == 4000


def test_a_recorder_writes_through_the_connection_it_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[Path] = []
    real = writer.connect

    def spy(path: Path, **kw: Any) -> sqlite3.Connection:
        opened.append(path)
        return real(path, **kw)

    monkeypatch.setattr(writer, "connect", spy)
    with RunRecorder(tmp_path / "r.db", "0123456789ab") as rec:
        rec(RunStarted("0123456789ab", Plan.model_validate({"tasks": []}), "serial"))
        rec.record(_plain("a", output=1))
    assert opened == [] and rec.loss is None
    with RunStore(tmp_path / "r.db") as st:  # a store of its own: the writer connects
        with RunRecorder(st, "0123456789ac") as rec:
            rec(RunStarted("0123456789ac", Plan.model_validate({"tasks": []}), "serial"))
        assert opened == [tmp_path / "r.db"]
        assert [r.run_id for r in st.list_runs()] == ["0123456789ac", "0123456789ab"]


def test_a_plan_is_kept_as_its_json_and_checked_when_read(tmp_path: Path) -> None:
    plain = Plan.model_validate(
        {
            "goal": "g",
            "tasks": [
                {"id": "a", "tool": "t"},
                {"id": "b", "tool": "t", "args": {"x": "${a}", "n": [1, 2.5]}, "depends_on": ["a"]},
            ],
        }
    )
    other = Plan.model_validate(
        {
            "tasks": [
                {"id": "a", "tool": "t", "retries": 2},
                {"id": "b", "instruction": "think", "tools": ["t"]},
            ]
        }
    )
    db = tmp_path / "r.db"
    for run_id, plan in (("0123456789ab", plain), ("0123456789ac", other)):
        with RunRecorder(db, run_id) as rec:
            rec(RunStarted(run_id, plan, "serial"))
        with RunStore(db) as st:
            assert st.get_run(run_id).plan.model_dump() == plan.model_dump()
        with sqlite3.connect(db) as conn:
            (text,) = conn.execute(
                "SELECT plan FROM run_plans WHERE run_id = ?", (run_id,)
            ).fetchone()
        assert text == plan.to_json(indent=None)
    with sqlite3.connect(db) as conn:  # a plan that is not one any more
        conn.execute(
            "UPDATE run_plans SET plan = ? WHERE run_id = '0123456789ab'",
            ('{"tasks": [{"id": "a", "tool": 3}]}',),
        )
    with RunStore(db) as st, pytest.raises(StoreError) as info:
        st.get_run("0123456789ab")
    assert "run 0123456789ab: the recorded plan cannot be read" in str(info.value)


def test_a_resumed_run_replaces_the_results_it_runs_again(tmp_path: Path) -> None:
    db, run_id = tmp_path / "r.db", "0123456789ab"
    plan = Plan.model_validate({"tasks": [{"id": t, "tool": "t"} for t in "abc"]})
    with RunRecorder(db, run_id) as rec:
        rec(RunStarted(run_id, plan, "dataflow"))
        for t in "abc":
            rec.record(_plain(t, "failed" if t == "b" else "succeeded", output=t))
    with RunRecorder(db, run_id, resumed=True) as rec:
        rec(RunStarted(run_id, plan, "dataflow"))
        rec.record(_plain("a", output="a"))  # kept
        rec.record(_plain("b", output="b again"))
    assert rec.loss is None
    assert _task_rows(db, run_id) == [
        ("a", "succeeded", '"a"'),
        ("b", "succeeded", '"b again"'),
        ("c", "succeeded", '"c"'),
    ]
    with RunStore(db) as st:
        assert st.list_runs()[0].counts == {"succeeded": 3}


async def test_the_run_context_is_recorded(tmp_path: Path, registry: dagagent.Registry) -> None:
    with RunStore(tmp_path / "r.db", context={"tools": "my.module:registry"}) as st:
        result = await dagagent.execute({"tasks": [w("a")]}, registry, store=st)
        assert st.get_run(result.run_id).context == {"tools": "my.module:registry"}


def test_an_added_migration_step_runs_once(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    _v1_db(db)
    more = [
        *MIGRATIONS,
        ("ALTER TABLE runs ADD COLUMN note TEXT", "UPDATE runs SET note = 'migrated'"),
    ]
    with RunStore(db, migrations=more) as st:
        assert st.schema_version == len(more)
        assert st.get_run("00000000abcd").tasks["a"].output == 1
    assert user_version(db) == len(more)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT note FROM runs").fetchall() == [("migrated",)]
    # Opening it again does not run the step again (ADD COLUMN twice would fail).
    with RunStore(db, migrations=more) as st:
        assert st.schema_version == len(more)


def test_a_failing_migration_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "v1.db"
    _v1_db(db)
    broken = [*MIGRATIONS, ("ALTER TABLE runs ADD COLUMN note TEXT", "SELECT nonsense FROM x")]
    with pytest.raises(StoreError, match=f"from schema version 1 to {len(broken)}"):
        RunStore(db, migrations=broken)
    assert user_version(db) == 1
    with sqlite3.connect(db) as conn:
        cols = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    assert "note" not in cols and "context" not in cols  # the v2 step was rolled back too


def test_a_newer_store_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "future.db"
    with sqlite3.connect(db) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    with pytest.raises(StoreError, match="upgrade dagagent"):
        RunStore(db)


def test_a_foreign_database_is_not_taken_over(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE runs (x INTEGER)")
    with pytest.raises(StoreError, match=r"not a dagagent run store.*it has runs"):
        RunStore(db)
    assert user_version(db) == 0


# ---------------------------------------------------------------------------------------------
# The recorder on its own


def test_recorder_listener_only_enqueues_and_close_is_idempotent(tmp_path: Path) -> None:
    rec = RunRecorder(tmp_path / "r.db", dagagent.new_run_id())
    rec(object())  # not an event it records: ignored
    assert rec._writer._queue.empty()
    rec.close()  # never started: nothing to do
    rec.close()
    with pytest.raises(StoreError, match="flush_interval_s"):
        RunRecorder(tmp_path / "r.db", dagagent.new_run_id(), flush_interval_s=-1)


def test_env_var_home_is_created_on_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "deep" / "home"
    monkeypatch.setenv("DAGAGENT_HOME", str(home))
    RunStore().close()
    assert (home / "runs.db").is_file()
    assert os.access(home, os.W_OK)


async def test_an_event_that_cannot_be_written_is_dropped_not_the_whole_record(
    tmp_path: Path, registry: dagagent.Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = rows.task_row

    def poisoned(run_id: str, r: TaskResult, *rest: Any) -> Any:
        if r.task_id == "b":
            raise RuntimeError("cannot write b")
        return real(run_id, r, *rest)

    monkeypatch.setattr(rows, "task_row", poisoned)
    db = tmp_path / "r.db"
    result = await dagagent.execute(
        {"tasks": [w("a"), w("b"), w("c", 0.2)]},
        registry,
        store=db,
        settings=RunSettings(executor="dataflow"),
    )
    assert result.ok
    assert result.record_loss is not None and result.record_loss.tasks == ["b"]
    assert "cannot write b" in result.record_loss.error
    with RunStore(db) as st:
        rec = st.get_run(result.run_id)
    assert rec.status == "succeeded"  # the run row and its finish were written
    assert set(rec.tasks) == {"a", "c"}


# ----------------------------------------------------------------------------------------------
# Run records under abuse: a process that dies at once, outputs the store cannot write,
# a --store pointed at another application's database.
# ----------------------------------------------------------------------------------------------


async def test_the_run_row_is_committed_before_any_task_starts(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    seen: list[bool] = []
    reg = dagagent.Registry()

    @reg.tool
    def look(run_id: str) -> bool:
        """Look for this run's record from another connection, as a second process would."""
        with RunStore(db, create=False) as st:
            seen.append(st.exists(run_id))
        return True

    run_id = dagagent.new_run_id()
    plan = {"tasks": [{"id": "look", "tool": "look", "args": {"run_id": run_id}}]}
    await dagagent.execute(plan, reg, store=db, run_id=run_id)
    assert seen == [True]


@pytest.mark.slow
def test_a_process_that_dies_in_its_first_task_leaves_an_interrupted_record(
    tmp_path: Path,
) -> None:
    db = tmp_path / "r.db"
    log = tmp_path / "calls.log"
    script = textwrap.dedent(
        f"""
        import os
        import dagagent

        reg = dagagent.Registry()

        @reg.tool
        def die() -> None:
            '''Write one line, then kill the process without any cleanup.'''
            with open({str(log)!r}, "a") as f:
                f.write("die\\n")
            os._exit(7)

        dagagent.execute_sync({{"goal": "dies", "tasks": [{{"id": "d", "tool": "die"}}]}},
                              reg, store={str(db)!r})
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert proc.returncode == 7, proc.stderr
    assert log.read_text() == "die\n"  # the tool ran...
    with RunStore(db, create=False) as st:  # ...so the run is on record
        rec = st.last_run()
    assert rec.goal == "dies" and rec.status == "interrupted"
    assert rec.unrecorded == ["d"]


def _registry(calls: list[str]) -> dagagent.Registry:
    reg = dagagent.Registry()

    class Loop:
        pass

    @reg.tool
    def raw(kind: str) -> Any:
        """Return something JSON cannot hold faithfully."""
        calls.append(kind)
        if kind == "bytes":
            return b"\xff\xfe binary"
        if kind == "loop":
            x: list[Any] = []
            x.append(x)
            return x
        return {"kind": kind}

    @reg.tool
    def use(value: Any) -> str:
        """Use an upstream output."""
        calls.append(f"use {value!r}"[:40])
        return "used"

    return reg


@pytest.mark.parametrize("kind", ["bytes", "loop"])
async def test_an_output_the_store_cannot_write_is_never_reused(tmp_path: Path, kind: str) -> None:
    calls: list[str] = []
    reg = _registry(calls)
    db = tmp_path / "r.db"
    plan = {
        "goal": "raw",
        "tasks": [
            {"id": "r", "tool": "raw", "args": {"kind": kind}},
            {"id": "ok", "tool": "raw", "args": {"kind": "fine"}},
            {"id": "u", "tool": "use", "args": {"value": "${ok}"}, "depends_on": ["r"]},
        ],
    }
    first = await dagagent.execute(plan, reg, store=db)
    assert first.ok
    with RunStore(db) as st:
        rec = st.get_run(first.run_id)
    r = rec.tasks["r"]
    assert r.status.value == "succeeded"  # the task did succeed
    assert r.output is None and r.error_type == OUTPUT_NOT_RECORDED
    assert r.error is not None and "could not be recorded" in r.error
    # Reusing a placeholder would feed it downstream as if it were the output.
    assert set(reuse_map(rec)) == {"ok", "u"}
    assert predict_reuse(rec, rec.plan)["r"].action == "run"
    assert "output not recorded" in predict_reuse(rec, rec.plan)["r"].reason
    (shown,) = [o for o in review_run(rec).succeeded if o.task_id == "r"]
    assert shown.output is not None and "could not be recorded" in shown.output

    calls.clear()
    again = await dagagent.execute(
        plan,
        reg,
        store=db,
        reuse=reuse_map(rec),
        parent_id=rec.run_id,
        settings=RunSettings(executor="serial"),
    )
    assert again.tasks["r"].status.value == "succeeded"  # ran again
    assert again.tasks["ok"].status.value == "reused"
    # u depends on r, whose earlier output is unknown: it runs again too
    assert again.tasks["u"].status.value == "succeeded"
    assert calls == [kind, "use {'kind': 'fine'}"]


def test_a_foreign_sqlite_database_is_refused_and_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE customers (name TEXT)")
        conn.execute("INSERT INTO customers VALUES ('ann')")
    before = db.read_bytes()
    for create in (True, False):
        with pytest.raises(StoreError, match=r"not a dagagent run store.*customers"):
            RunStore(db, create=create)
    assert db.read_bytes() == before
    with sqlite3.connect(db) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master")]
    assert names == ["customers"]


def test_cli_on_a_foreign_database_exits_4_without_touching_it(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from dagagent.cli import app

    db = tmp_path / "app.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE notes (t TEXT)")
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps({"tasks": [{"id": "a", "tool": "calculate", "args": {}}]}))
    for args in (["runs", "--store", str(db)], ["show", "--last", "--store", str(db)]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 4, res.output
        assert "not a dagagent run store" in res.output
    with sqlite3.connect(db) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["notes"]


def test_a_redacted_secret_never_reaches_the_store(tmp_path: Path) -> None:
    from dagagent.interceptors import redacting

    secret = "hunter2-0123456789-very-secret"
    seen: list[str] = []
    reg = dagagent.Registry()

    @reg.tool
    def vault(name: str) -> dict[str, str]:
        """Hand out a password."""
        return {"password": secret}

    @reg.tool
    def login(user: str, password: str) -> str:
        """Log in."""
        seen.append(password)
        return f"hello {user}"

    plan = {
        "goal": "log in",
        "tasks": [
            {"id": "v", "tool": "vault", "args": {"name": "db"}},
            {"id": "in", "tool": "login", "args": {"user": "ann", "password": "${v.password}"}},
        ],
    }
    db = tmp_path / "r.db"
    result = dagagent.execute_sync(plan, reg, store=db, interceptors=[redacting()])
    assert result.ok and seen == ["[redacted]"]
    with RunStore(db) as st:
        rec = st.get_run(result.run_id)
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT * FROM runs").fetchall()
        rows += conn.execute("SELECT * FROM run_plans").fetchall()
        rows += conn.execute("SELECT * FROM tasks WHERE task_id != 'v'").fetchall()
    assert rows and not any(secret in str(col) for row in rows for col in row)
    # The vault's own output holds it (outputs are recorded as they are)...
    assert rec.tasks["v"].output == {"password": secret}
    # ...but not the redacted call: its arguments are recorded as the tool received them.
    assert rec.tasks["in"].args == {"user": "ann", "password": "[redacted]"}
    (note,) = rec.tasks["in"].decisions or []
    assert note.decision == "redact" and note.reason == "redacted: password"
    # Not reusable: the real arguments are not on record to compare.
    assert "in" not in rec.fingerprints and set(reuse_map(rec)) == {"v"}
    assert predict_reuse(rec, rec.plan)["in"].reason == "succeeded before, arguments redacted"
    seen.clear()
    again = dagagent.execute_sync(
        plan, reg, reuse=reuse_map(rec), parent_id=rec.run_id, interceptors=[redacting()]
    )
    assert again.tasks["v"].status.value == "reused" and seen == ["[redacted]"]


def test_an_agents_calls_are_recorded_redacted_even_when_they_never_reached_the_tool(
    tmp_path: Path,
) -> None:
    """The secrets a model writes into its calls never reach the store: not those of a call
    that ran (the redacting interceptor rewrote it), nor those of a call whose arguments did
    not fit the tool or whose tool does not exist (it never reached the interceptor)."""
    from dagagent.interceptors import redacting
    from dagagent.llm import LLMResponse, ScriptedLLM, ToolCall

    secret = "hunter2-0123456789-very-secret"
    seen: list[str] = []
    events: list[object] = []
    reg = dagagent.Registry()

    @reg.tool
    def login(user: str, password: str, tries: int = 1) -> str:
        """Log in."""
        seen.append(password)
        return f"hello {user}"

    turn = LLMResponse(
        content="",
        tool_calls=[
            ToolCall(id="ok", name="login", arguments={"user": "ann", "password": secret}),
            ToolCall(
                id="bad",
                name="login",
                arguments={"user": "ann", "password": secret, "tries": "many"},
            ),
            ToolCall(id="unknown", name="logon", arguments={"api_token": secret}),
        ],
    )
    plan = {"tasks": [{"id": "ag", "instruction": "log in", "tools": ["login"]}]}
    db = tmp_path / "r.db"
    with ScriptedLLM([turn, LLMResponse(content="done")]) as llm:
        result = dagagent.execute_sync(
            plan, reg, llm=llm, store=db, interceptors=[redacting()], listeners=[events.append]
        )
    assert result.ok and seen == ["[redacted]"]
    # nor what listeners (the CLI's progress lines) are shown of the calls
    shown = [e.args for e in events if getattr(e, "action", None) == "tool_call"]
    assert len(shown) == 3 and secret not in str(shown)
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT * FROM tasks").fetchall()
    assert rows and not any(secret in str(col) for row in rows for col in row)
    with RunStore(db) as st:
        (step, _answer) = st.get_run(result.run_id).tasks["ag"].steps or []
    by_id = {c.id: c for c in step.calls}
    assert by_id["ok"].args == {"user": "ann", "password": "[redacted]"}
    assert by_id["bad"].args == {"user": "ann", "password": "[redacted]", "tries": "many"}
    assert by_id["bad"].is_error and "tries" in (by_id["bad"].observation or "")
    assert by_id["unknown"].args == {"api_token": "[redacted]"}
    # what the caller gets back is as the store has it
    assert secret not in str(result.tasks["ag"].steps)


def _store_bytes(db: Path) -> bytes:
    """Every byte of a store on disk (the database, its write-ahead log, its index)."""
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))


def test_secrets_a_plan_writes_out_never_reach_the_store_through_the_plan(tmp_path: Path) -> None:
    """A plan that spells out secrets (a key under a secret name, passwords in a literal map
    list, an address a pattern hides, a secret-named argument that is a reference) is stored
    as the redacting interceptors pass its arguments on to the tools, whatever the order of
    the interceptors: nothing of it in the store, hence none in ``show --json``, ``report``
    or the viewer's "arguments as planned", which read it. The stored graph keeps its edges,
    and running the stored plan again gives the tools the same arguments."""
    from typer.testing import CliRunner

    from dagagent.cli import app
    from dagagent.interceptors import redacting

    key = "pk_live_7Qv2LmX9aa1Zr"
    passwords = ["Tr0ub4dor&3-kestrel", "correct-horse-glacier-9"]
    mail = "zoe.quist@kestrel.example"
    got: list[Any] = []
    reg = dagagent.Registry()

    @reg.tool
    def account(owner: str) -> dict[str, str]:
        """An owner's account."""
        return {"iban": "NL91ABNA0417164300", "token": "tok-from-the-bank"}

    @reg.tool
    def wire(iban: str, amount: int, api_key: str, memo: str, session_token: str = "") -> str:
        """Wire money."""
        got.append(("wire", api_key, memo, session_token))
        return "wired"

    @reg.tool
    def connect(cfg: dict[str, str]) -> str:
        """Open a database."""
        got.append(("connect", cfg))
        return cfg["host"]

    plan = {
        "goal": "pay and check",
        "tasks": [
            {"id": "acct", "tool": "account", "args": {"owner": "Zoë Quist"}},
            {
                "id": "pay",
                "tool": "wire",
                "args": {
                    "iban": "NL91ABNA0417164300",
                    "amount": 15,
                    "api_key": key,
                    "memo": f"receipt to {mail} please",
                    "session_token": "${acct.token}",
                },
            },
            {
                "id": "dbs",
                "tool": "connect",
                "for_each": [
                    {"host": "db1", "password": passwords[0]},
                    {"host": "db2", "password": passwords[1]},
                ],
                "args": {"cfg": "${@item}"},
            },
        ],
    }
    allow = dagagent.Policy([dagagent.Rule(tool="*", action="allow", name="all")])
    db = tmp_path / "r.db"
    hide = redacting(patterns=[r"[\w.]+@[\w.]+"])
    for order in ([hide, allow], [allow, hide]):  # outside and inside the policy
        got.clear()
        result = dagagent.execute_sync(plan, reg, store=db, interceptors=order)
        assert result.ok, result.tasks
        secrets = [key, mail, *passwords]
        assert not any(s in str(got) for s in secrets)  # the tools never saw them
        assert not any(s.encode() in _store_bytes(db) for s in secrets), order
        with RunStore(db) as st:
            rec = st.get_run(result.run_id)
        (pay, dbs) = (rec.plan.tasks[1], rec.plan.tasks[2])
        assert pay.args["api_key"] == "[redacted]" and mail not in pay.args["memo"]
        assert pay.args["iban"] == "NL91ABNA0417164300"  # only what the redaction hides
        assert pay.depends_on == ["acct"]  # the hidden ${acct.token} was an edge: kept
        assert list(dagagent.validate(rec.plan).dependencies["pay"]) == ["acct"]
        assert dbs.for_each == [
            {"host": "db1", "password": "[redacted]"},
            {"host": "db2", "password": "[redacted]"},
        ]
        page = tmp_path / "report.html"
        res = CliRunner().invoke(app, ["show", result.run_id, "--json", "--store", str(db)])
        shown = CliRunner().invoke(
            app, ["report", result.run_id, "-o", str(page), "--store", str(db)]
        )
        assert res.exit_code == 0 and shown.exit_code == 0, (res.output, shown.output)
        for text in (res.stdout, page.read_text()):
            assert "[redacted]" in text and not any(s in text for s in secrets)
        # the stored plan, run again, gives the tools what the first run gave them
        first = sorted(map(str, got))  # the map's elements run at once, in any order
        got.clear()
        assert dagagent.execute_sync(rec.plan, reg, interceptors=order).ok
        assert sorted(map(str, got)) == first


def test_a_secret_given_as_a_bare_map_element_never_reaches_the_store(tmp_path: Path) -> None:
    """A map task whose literal list holds the secrets themselves (``"for_each": ["sk-...",
    ...]``, each passed on as ``{"api_key": "${@item}"}``, or a part of an element put into a
    secret-named argument) is stored with those elements hidden, in the plan and in the map
    task's record alike, whatever the order of the interceptors. A part of an element also read
    where nothing hides it (another argument, the task's ``when``) is kept: the tool and the
    condition get it as it is. The stored plan, run again, gives the tools what the run did."""
    from typer.testing import CliRunner

    from dagagent.cli import app
    from dagagent.interceptors import redacting

    keys = ["sk-live-Kx81Qa", "sk-live-Pz27Wn"]
    tokens = ["tok-Hq55Vr0", "tok-Lm39Dc2"]
    got: list[Any] = []
    reg = dagagent.Registry()

    @reg.tool(side_effects=True)
    def charge(api_key: str, n: int) -> str:
        """Charge with a key."""
        got.append(("charge", api_key, n))
        return f"charged {n}"

    @reg.tool
    def fetch(user: str, bearer_token: str) -> str:
        """Fetch as a user."""
        got.append(("fetch", user, bearer_token))
        return user

    plan = {
        "goal": "charge and fetch",
        "tasks": [
            {
                "id": "pay",
                "tool": "charge",
                "for_each": keys,
                "args": {"api_key": "${@item}", "n": "${@index}"},
            },
            {
                "id": "get",
                "tool": "fetch",
                "for_each": [{"who": "ann", "tok": tokens[0]}, {"who": "bo", "tok": tokens[1]}],
                "args": {"user": "${@item.who}", "bearer_token": "Bearer ${@item.tok}"},
                "when": "${@item.who} != 'nobody'",
            },
        ],
    }
    allow = dagagent.Policy([dagagent.Rule(tool="*", action="allow", name="all")])
    db = tmp_path / "r.db"
    for order in ([redacting()], [allow, redacting()]):
        got.clear()
        result = dagagent.execute_sync(plan, reg, store=db, interceptors=order)
        assert result.ok, result.tasks
        assert sorted(map(str, got)) == sorted(
            map(
                str,
                [
                    ("charge", "[redacted]", 0),
                    ("charge", "[redacted]", 1),
                    ("fetch", "ann", "[redacted]"),
                    ("fetch", "bo", "[redacted]"),
                ],
            )
        )
        stored = _store_bytes(db)
        assert not [s for s in (*keys, *tokens) if s.encode() in stored], order
        with RunStore(db) as st:
            rec = st.get_run(result.run_id)
        pay, get = rec.plan.tasks
        assert pay.for_each == ["[redacted]", "[redacted]"]
        assert get.for_each == [
            {"who": "ann", "tok": "[redacted]"},  # "who" is read as it is: kept
            {"who": "bo", "tok": "[redacted]"},
        ]
        assert rec.tasks["pay"].args == ["[redacted]", "[redacted]"]  # the map task's record
        assert rec.tasks["get"].args == get.for_each
        shown = CliRunner().invoke(app, ["show", result.run_id, "--json", "--store", str(db)])
        assert shown.exit_code == 0, shown.output
        assert "[redacted]" in shown.stdout
        assert not [s for s in (*keys, *tokens) if s in shown.stdout]
        first = sorted(map(str, got))
        got.clear()
        assert dagagent.execute_sync(rec.plan, reg, interceptors=order).ok
        assert sorted(map(str, got)) == first


def test_a_map_task_error_does_not_quote_a_bare_secret_element(tmp_path: Path) -> None:
    """A map task's error names its failed elements by their value; one that only goes where
    the redacting interceptors hide it is not quoted, in the result nor in the store."""
    from dagagent.interceptors import redacting

    reg = dagagent.Registry()

    @reg.tool
    def unlock(pin_secret: int) -> str:
        """Unlock with a number (given a word: its arguments do not fit)."""
        return "open"

    plan = {
        "tasks": [
            {
                "id": "open",
                "tool": "unlock",
                "for_each": ["word-Qz71Kd"],
                "args": {"pin_secret": "${@item}"},
            }
        ]
    }
    db = tmp_path / "r.db"
    result = dagagent.execute_sync(plan, reg, store=db, interceptors=[redacting()])
    error = result.tasks["open"].error or ""
    assert "element 0 ([redacted]) failed" in error and "Qz71Kd" not in error
    assert b"Qz71Kd" not in _store_bytes(db)


# ---------------------------------------------------------------------------------------------
# Map tasks


def _map_registry(failing: set[str]) -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool
    def names() -> Any:
        return ["ann", "bob", "cy"]

    @reg.tool
    def greet(name: str, token: str = "") -> Any:
        if name in failing:
            raise RuntimeError(f"cannot greet {name}")
        return {"hello": name, "bytes": b"\xff"} if name == "cy" else f"hello {name}"

    return reg


async def test_every_element_of_a_map_task_is_recorded(tmp_path: Path) -> None:
    plan = {
        "tasks": [
            {"id": "who", "tool": "names"},
            {"id": "hi", "tool": "greet", "for_each": "${who}", "args": {"name": "${@item}"}},
        ]
    }
    db = tmp_path / "r.db"
    reg = _map_registry({"bob"})
    result = await dagagent.execute(
        plan, reg, store=db, settings=RunSettings(on_failure="continue")
    )
    with RunStore(db) as st:
        rec = st.get_run(result.run_id)
    hi = rec.tasks["hi"]
    assert hi.status.value == "failed" and hi.args == ["ann", "bob", "cy"]
    assert [e.task_id for e in hi.elements or ()] == ["hi[0]", "hi[1]", "hi[2]"]
    ann, bob, cy = hi.elements or []
    live = result.tasks["hi"].elements or []
    assert (ann.status.value, ann.output, ann.args) == ("succeeded", "hello ann", {"name": "ann"})
    assert (ann.started_at, ann.finished_at) == (live[0].started_at, live[0].finished_at)
    assert (bob.status.value, bob.error, bob.error_type) == (
        "failed",
        "RuntimeError: cannot greet bob",
        "RuntimeError",
    )
    # an element output the store cannot write is left out and said so, as a task's is
    assert (cy.status.value, cy.output, cy.error_type) == ("succeeded", None, OUTPUT_NOT_RECORDED)
    doc = rec.to_json_dict()
    assert [e["status"] for e in doc["tasks"]["hi"]["elements"]] == [
        "succeeded",
        "failed",
        "succeeded",
    ]
    # the elements that succeeded are reusable, each by its own input (not one whose output
    # could not be written)
    reusable = reuse_map(rec)
    fp = task_fingerprint(rec.plan.tasks[1], {"name": "ann"})
    assert {k: v for k, v in reusable.items() if k.startswith("hi@")} == {
        f"hi@{fp}": (fp, "hello ann")
    }
    assert predict_reuse(rec, rec.plan)["hi"].reason == (
        "failed before; the 2 of 3 elements that succeeded are reused if their input is unchanged"
    )


async def test_a_redacted_element_is_not_reused(tmp_path: Path) -> None:
    from dagagent.interceptors import redacting

    plan = {
        "tasks": [
            {"id": "who", "tool": "names"},
            {
                "id": "hi",
                "tool": "greet",
                "for_each": "${who}",
                "args": {"name": "${@item}", "token": "secret-${@index}-0123456789"},
            },
        ]
    }
    db = tmp_path / "r.db"
    result = await dagagent.execute(
        plan, _map_registry(set()), store=db, interceptors=[redacting()]
    )
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT elements FROM tasks WHERE task_id = 'hi'").fetchall()
    assert rows and "secret-" not in str(rows) and "[redacted]" in str(rows)
    with RunStore(db) as st:
        rec = st.get_run(result.run_id)
    assert not [k for k in reuse_map(rec) if k.startswith("hi@")]


# ---------------------------------------------------------------------------------------------
# A task is on record from its start: running, then its result


async def test_a_task_is_on_record_as_running_from_its_start_to_its_end(
    tmp_path: Path, registry: dagagent.Registry
) -> None:
    db, run_id = tmp_path / "r.db", dagagent.new_run_id()
    seen: list[TaskResult] = []
    on_record = anyio.Event()

    @registry.tool
    async def held() -> str:
        """Runs until the test has seen it on record."""
        await on_record.wait()
        return "held"

    plan = {"tasks": [w("fast"), {"id": "slow", "tool": "held"}]}

    def slow_on_record() -> TaskResult | None:
        try:
            with RunStore(db, read_only=True) as st:
                rec = st.get_run(run_id)
        except StoreError:
            return None
        slow = rec.tasks.get("slow")
        if slow is not None:
            assert rec.status == "running"
        return slow

    async def watch() -> None:
        # the store's writer is a thread: its rows are for a poll to see
        seen.append(await until(slow_on_record, "the held task is on record"))
        on_record.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch)
        result = await dagagent.execute(plan, registry, store=db, run_id=run_id)
    (slow,) = seen
    assert slow.status is TaskStatus.RUNNING and slow.finished_at is None
    assert slow.started_at == result.tasks["slow"].started_at  # the start it really had
    assert slow.args is None and slow.attempts == 0  # its arguments come with its result
    with RunStore(db) as st:
        rec = st.get_run(run_id)
        (summary,) = st.list_runs()
    assert rec.tasks["slow"].status is TaskStatus.SUCCEEDED  # the result replaced it
    assert summary.counts == {"succeeded": 2}


def test_a_task_that_was_running_when_its_process_died_is_unrecorded(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    RunStore(db).close()
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO runs (id, created, plan, n_tasks, status, pid) VALUES (?, ?, '', 2, ?, ?)",
            ("0123456789ab", time.time(), "running", NEVER_A_PID),
        )
        conn.execute(
            "INSERT INTO run_plans (run_id, plan) VALUES (?, ?)",
            ("0123456789ab", '{"tasks": [{"id": "a", "tool": "x"}, {"id": "b", "tool": "x"}]}'),
        )
        conn.execute(
            "INSERT INTO tasks (run_id, task_id, status, started_at) VALUES (?, ?, ?, ?)",
            ("0123456789ab", "a", "running", time.time()),
        )
    with RunStore(db) as st:
        (summary,) = st.list_runs()
        rec = st.get_run("0123")
    assert summary.status == "interrupted" and summary.counts == {} and summary.unrecorded == 2
    assert rec.status == "interrupted" and rec.tasks == {} and rec.unrecorded == ["a", "b"]


def test_a_batch_writes_the_last_row_of_each_task() -> None:
    started = ("a", 1.0)  # what a task's start hands the writer
    b = _plain("b")
    done = _plain("a")
    assert writer._latest([started, b, done]) == [done, b]
    assert writer._latest([started, b]) == [started, b]


def test_a_start_that_cannot_be_written_is_not_a_lost_result(tmp_path: Path) -> None:
    w_ = writer.Writer(
        tmp_path / "r.db",
        "0123456789ab",
        context=None,
        resumed=False,
        flush_interval_s=0,
        write_timeout_s=0,
        opened=None,
    )
    w_._lose([("a", 1.0), _plain("b")])
    assert w_.loss is not None and w_.loss.tasks == ["b"]


async def test_a_streamed_plan_records_when_each_task_joined_it(
    tmp_path: Path, registry: dagagent.Registry
) -> None:
    from dagagent.graph import GrowingGraph, PlanChecker
    from dagagent.plan import ToolTask

    db, run_id = tmp_path / "r.db", dagagent.new_run_id()
    graph = GrowingGraph("grow")
    checker = PlanChecker(registry)
    joined: dict[str, float] = {}

    async def write_the_plan() -> None:
        for task in (w("a"), w("b", deps=("a",))):
            await anyio.wait_all_tasks_blocked()  # the run waits for the plan to grow
            joined[task["id"]] = time.time()
            graph.add(checker.check(ToolTask.model_validate(task)))
        graph.close()

    async with anyio.create_task_group() as tg:
        tg.start_soon(write_the_plan)
        result = await dagagent.execute(graph, registry, store=db, run_id=run_id)
    assert result.ok
    with RunStore(db) as st:
        rec = st.get_run(run_id)
    assert list(rec.planned_at) == ["a", "b"]
    for tid, at in joined.items():
        assert at <= rec.planned_at[tid] <= rec.tasks[tid].started_at  # type: ignore[operator]
    assert "planned_at" not in rec.context  # the store's own, not the caller's
    assert rec.to_json_dict()["planned_at"] == rec.planned_at


def test_person_waits_run_from_each_question_to_the_resume_that_used_its_answer() -> None:
    from dagagent.store import ApprovalRecord, person_wait_s, person_waits

    def asked(task: str, at: float, state: str, used: float | None = None) -> ApprovalRecord:
        return ApprovalRecord(
            run_id="0123456789ab",
            task_id=task,
            seq=1,
            tool="t",
            asked_at=at,
            state=state,  # type: ignore[arg-type]
            used_at=used,
        )

    history = [
        asked("a", 10.0, "used", 40.0),
        asked("b", 20.0, "used", 40.0),  # two questions at once count once
        asked("c", 30.0, "closed"),  # asked again by the resume at 40
        asked("d", 50.0, "waiting"),  # still open: until the run paused (or now)
    ]
    waits = person_waits(history, until=60.0)
    assert waits == {
        "a": [(10.0, 40.0)],
        "b": [(20.0, 40.0)],
        "c": [(30.0, 40.0)],
        "d": [(50.0, 60.0)],
    }
    assert person_wait_s(waits, 0.0, 100.0) == 30.0 + 10.0
    assert person_wait_s(waits, 15.0, 55.0) == 25.0 + 5.0
    assert person_waits(history) == {k: v for k, v in waits.items() if k != "d"}
