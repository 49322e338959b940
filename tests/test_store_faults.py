"""The run store when it cannot do its job: locked by another connection (another process,
sqlite3 in a terminal), damaged, under a file size limit, read-only. A run never waits on it,
the command line never says "recorded" for a record that is not all there (it says what is
missing and exits 5), and a store that only needs reading is read."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from cli_shell import clean_environment, run_in_process

import dagagent
from dagagent.errors import StoreError
from dagagent.events import RunStarted, TaskFinished
from dagagent.results import TaskResult, TaskStatus
from dagagent.store import OUTPUT_NOT_RECORDED, RunRecorder, RunStore

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and limits")

TOOLS = '''
from dagagent import Registry

registry = Registry()


@registry.tool
def text(n: int) -> str:
    """n characters of text."""
    return "x" * n
'''

PLAN = {
    "goal": "write things down",
    "tasks": [
        {"id": "small", "tool": "text", "args": {"n": 10}},
        {"id": "huge", "tool": "text", "args": {"n": 3_000_000}},
        {"id": "after", "tool": "text", "args": {"n": 5}, "depends_on": ["huge"]},
    ],
}


def _registry() -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool
    def text(n: int) -> str:
        """n characters of text."""
        return "x" * n

    return reg


def _store_with_a_run(path: Path) -> str:
    return dagagent.execute_sync(
        {"goal": "first", "tasks": [{"id": "a", "tool": "text", "args": {"n": 1}}]},
        _registry(),
        store=path,
    ).run_id


class Lock:
    """The store's write lock, held the way another connection would hold it (another dagagent
    process, or sqlite3 in a terminal): BEGIN EXCLUSIVE, and with ``exclusive`` SQLite's
    exclusive locking mode, which keeps readers out as well; let go by :meth:`release` (or,
    should the test never get there, after :data:`HOLD_AT_MOST_S`: a hang, then a failure)."""

    HOLD_AT_MOST_S = 60.0

    def __init__(self, path: Path, mode: str) -> None:
        self.path, self.mode = path, mode
        self.held = threading.Event()
        self.held_too_long = False
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._hold, name="store-lock", daemon=True)

    def _hold(self) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            if self.mode == "exclusive":
                conn.execute("PRAGMA locking_mode=EXCLUSIVE")
            conn.execute("BEGIN EXCLUSIVE")
            conn.execute("UPDATE runs SET goal = goal")
            self.held.set()
            self.held_too_long = not self._release.wait(self.HOLD_AT_MOST_S)
            conn.execute("COMMIT")
        finally:
            conn.close()
            self.held.clear()

    def release(self) -> None:
        self._release.set()


@contextmanager
def _locked(path: Path, mode: str = "write") -> Iterator[Lock]:
    lock = Lock(path, mode)
    lock._thread.start()
    try:
        assert lock.held.wait(Lock.HOLD_AT_MOST_S), "the lock was never taken"
        yield lock
    finally:
        lock.release()
        lock._thread.join()
    assert not lock.held_too_long, "nothing let go of the lock: what should have, never ran"


def _cli(tmp_path: Path, *args: str, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    """``dagagent ARGS`` in a child process (with a file size limit of ``limit`` bytes)."""
    code = "import sys; from dagagent.cli import main; sys.argv[0] = 'dagagent'; main()"
    if limit is not None:
        code = (
            f"import resource; resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
            + code
        )
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


def _tools(tmp_path: Path) -> str:
    (tmp_path / "store_fault_tools.py").write_text(TOOLS)
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    return f"{tmp_path / 'store_fault_tools.py'}:registry"


# -- locked -------------------------------------------------------------------------------


def test_a_store_another_connection_holds_locked_does_not_hold_up_the_run_and_loses_nothing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    _store_with_a_run(db)
    finished_while_locked: list[bool] = []
    with _locked(db) as lock:

        def let_go_once_the_task_ended(event: object) -> None:
            if isinstance(event, TaskFinished):
                finished_while_locked.append(lock.held.is_set())
                lock.release()

        result = dagagent.execute_sync(
            {"goal": "while locked", "tasks": [{"id": "t", "tool": "text", "args": {"n": 3}}]},
            _registry(),
            store=db,
            listeners=[let_go_once_the_task_ended],
        )
    # The task ran while the store was still locked (it did not wait for the lock) ...
    assert finished_while_locked == [True]
    # ... and the record was written once the lock was free: all of it.
    assert result.record_loss is None
    with RunStore(db) as st:
        rec = st.get_run(result.run_id)
    assert rec.status == "succeeded" and rec.tasks["t"].output == "xxx"


def test_a_solve_writes_its_rows_without_stalling_the_event_loop(tmp_path: Path) -> None:
    """A solve records its start, rounds and answer while another connection holds the
    store's write lock: the event loop keeps running (its other tasks) while a row waits for
    the lock, and every row is written once the lock is free."""
    import anyio

    from dagagent.llm import ScriptedLLM, wire

    db = tmp_path / "runs.db"
    _store_with_a_run(db)
    plan = {"goal": "g", "tasks": [{"id": "t", "tool": "text", "args": {"n": 3}}]}
    answers = [json.dumps(plan), json.dumps({"action": "finish", "answer": "xxx", "cites": ["t"]})]
    writing = threading.Event()  # a row of the solve is being written (waits for the lock)

    async def main(lock: Lock) -> dagagent.Solution:
        async def tick() -> None:
            # Let go of the lock once the event loop has gone round many times while a row
            # waited for it: written straight from the event loop, a row would hold the loop
            # (no tick) until the lock is free, which nothing would then free.
            ticks = 0
            while True:
                await anyio.lowlevel.checkpoint()
                ticks += writing.is_set()
                if ticks == 20:
                    lock.release()

        with RunStore(db) as store:
            start_solve = store.start_solve

            def start_solve_noted(*args: Any, **kwargs: Any) -> Any:
                writing.set()
                return start_solve(*args, **kwargs)

            store.start_solve = start_solve_noted  # type: ignore[method-assign]
            async with anyio.create_task_group() as tg:
                tg.start_soon(tick)
                llm = ScriptedLLM.openai([wire.openai_text(a) for a in answers])
                async with llm:
                    solution = await dagagent.solve("g", _registry(), llm, store=store)
                tg.cancel_scope.cancel()
            return solution

    with _locked(db) as lock:
        solution = anyio.run(main, lock)
    assert solution.ok and solution.answer == "xxx" and not solution.not_recorded
    with RunStore(db) as st:
        rec = st.get_solve(solution.solve_id)
    assert rec.status == "answered" and [r.outcome for r in rec.rounds] == ["answered"]


def test_a_store_locked_for_longer_than_the_recorder_waits_says_the_run_was_not_recorded(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    _store_with_a_run(db)
    run_id = dagagent.new_run_id()
    with _locked(db):
        recorder = RunRecorder(db, run_id, write_timeout_s=0.5).start()
        result = dagagent.execute_sync(
            {"goal": "lost", "tasks": [{"id": "t", "tool": "text", "args": {"n": 3}}]},
            _registry(),
            listeners=[recorder],
            run_id=run_id,
        )
        recorder.close()
    assert result.ok
    loss = recorder.loss
    assert loss is not None and loss.run and loss.finish and loss.tasks == ["t"]
    assert "locked" in loss.error
    assert str(loss).startswith("not written: the whole run")
    with RunStore(db) as st:
        assert not st.exists(run_id)


def test_a_result_handed_to_the_recorder_and_not_written_is_accounted_for(
    tmp_path: Path,
) -> None:
    db = tmp_path / "runs.db"
    _store_with_a_run(db)
    run_id = dagagent.new_run_id()
    plan = dagagent.Plan.model_validate({"tasks": [{"id": "t", "tool": "text"}]})
    done = TaskResult(
        task_id="t",
        status=TaskStatus.SUCCEEDED,
        output="xxx",
        attempts=1,
        started_at=1.0,
        finished_at=2.0,
        args={"n": 3},
    )
    with _locked(db):
        recorder = RunRecorder(db, run_id, write_timeout_s=0.5).start()
        recorder(RunStarted(run_id, plan, "serial"))
        recorder.record(done)
        recorder.close()
    loss = recorder.loss
    assert loss is not None and loss.run and loss.tasks == ["t"]


def test_a_store_locked_against_readers_is_reported_as_locked_not_as_foreign(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "runs.db"
    _store_with_a_run(db)
    monkeypatch.setattr("dagagent.store._file.BUSY_TIMEOUT_S", 0.5)
    with (
        _locked(db, "exclusive"),
        pytest.raises(StoreError, match="is locked by another process") as info,
    ):
        RunStore(db, create=False)
    assert "not a dagagent run store" not in str(info.value)


# -- what cannot be written ---------------------------------------------------------------


@pytest.mark.slow
def test_under_a_file_size_limit_the_cli_says_which_output_was_not_recorded_and_exits_5(
    tmp_path: Path,
) -> None:
    tools = _tools(tmp_path)
    db = tmp_path / "runs.db"
    _store_with_a_run(db)
    # The store may grow by 1 MB: the 3 MB output cannot be written, the rest can.
    limit = db.stat().st_size + 1_000_000
    proc = _cli(tmp_path, "run", "plan.json", "--tools", tools, "--store", str(db), limit=limit)
    assert proc.returncode == 5, proc.stderr
    assert "recorded as run" not in proc.stderr
    assert "is incomplete: the output of task huge could not be written" in proc.stderr
    with RunStore(db) as st:
        rec = st.get_run(st.last_run_id())
    assert rec.status == "succeeded"  # the run did succeed; its record says what it lacks
    assert rec.tasks["small"].output == "x" * 10 and rec.tasks["after"].output == "xxxxx"
    huge = rec.tasks["huge"]
    assert huge.output is None and huge.error_type == OUTPUT_NOT_RECORDED
    assert huge.error is not None and "could not be written to the run store" in huge.error


@pytest.mark.slow
def test_json_output_carries_the_record_loss_with_exit_5(tmp_path: Path) -> None:
    tools = _tools(tmp_path)
    db = tmp_path / "runs.db"
    _store_with_a_run(db)
    limit = db.stat().st_size + 1_000_000
    args = ("run", "plan.json", "--tools", tools, "--store", str(db), "--json")
    proc = _cli(tmp_path, *args, limit=limit)
    assert proc.returncode == 5, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "succeeded"
    assert doc["record_loss"]["outputs"] == ["huge"] and not doc["record_loss"]["run"]


def _damage_the_task_table(db: Path) -> None:
    """The table a task's result goes to."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        roots = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'tasks'").fetchall()
    conn.close()
    assert len(roots) == 1
    with open(db, "r+b") as f:
        for (root,) in roots:
            f.seek((root - 1) * page)
            f.write(b"\xff" * page)


def test_a_partly_damaged_store_is_never_reported_as_recorded(tmp_path: Path) -> None:
    tools = _tools(tmp_path)
    db = tmp_path / "runs.db"
    _store_with_a_run(db)
    _damage_the_task_table(db)
    plan = tmp_path / "small.json"
    plan.write_text(json.dumps({"goal": "g", "tasks": [PLAN["tasks"][0]]}))
    args = ["run", str(plan), "--tools", tools, "--store", str(db)]
    proc = run_in_process(args, tmp_path, clean_environment(tmp_path / "home"))
    assert proc.returncode == 5, proc.stderr
    assert "recorded as run" not in proc.stderr
    assert "the result of task small could not be written" in proc.stderr
    assert "malformed" in proc.stderr  # why


# -- read-only ----------------------------------------------------------------------------


def _unprivileged(args: list[str]) -> list[str]:
    """``args`` run so that file permissions apply (root ignores them unless it drops the
    capabilities that let it)."""
    if os.geteuid() != 0:
        return args
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: file permissions cannot apply")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner", *args]


@pytest.fixture
def read_only_store(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "runs.db"
    run_id = _store_with_a_run(db)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    for extra in folder.glob("runs.db-*"):
        extra.unlink()
    db.chmod(0o444)
    folder.chmod(0o555)  # no room for the WAL's shared-memory file either
    yield db, run_id
    folder.chmod(0o755)


def _as_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from dagagent.cli import main; sys.argv[0] = 'dagagent'; main()"
    return subprocess.run(
        _unprivileged([sys.executable, "-c", code, *args]),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


@pytest.mark.slow
def test_a_read_only_store_can_be_read(tmp_path: Path, read_only_store: tuple[Path, str]) -> None:
    db, run_id = read_only_store
    proc = _as_cli(tmp_path, "runs", "--store", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["run_id"] for r in json.loads(proc.stdout)["runs"]] == [run_id]
    proc = _as_cli(tmp_path, "show", run_id, "--store", str(db))
    assert proc.returncode == 0, proc.stderr
    assert "first" in proc.stdout


@pytest.mark.slow
def test_recording_into_a_read_only_store_is_refused_before_anything_runs(
    tmp_path: Path, read_only_store: tuple[Path, str]
) -> None:
    db, _ = read_only_store
    tools = _tools(tmp_path)
    proc = _as_cli(tmp_path, "run", "plan.json", "--tools", tools, "--store", str(db))
    assert proc.returncode == 4, proc.stderr
    assert "cannot be written: it is read-only" in proc.stderr
    assert "not a dagagent run store" not in proc.stderr
    assert "succeeded" not in proc.stdout  # nothing ran
