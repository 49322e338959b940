"""How the run store writes task rows, and what survives a SIGKILL.

Results go to SQLite a batch at a time, one row per task: every shape of result must read back
as it was, however the results were batched. And a task that finished more than the
durability window (flush interval plus a write) before the process was killed must be in the
record.
"""

from __future__ import annotations

import datetime
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from eventually import wait_until

import dagagent
from dagagent.events import RunStarted, TaskFinished
from dagagent.plan import Plan
from dagagent.results import AgentStep, CallDecision, TaskResult, TaskStatus
from dagagent.store import RunRecorder, RunStore, _recorder as recorder
from dagagent.store._schema import TASK_COLUMNS

T0 = 1_796_000_000.123456789


class Opaque:
    def __str__(self) -> str:
        return "<opaque thing>"


def _result(task_id: str, status: str = "succeeded", output: Any = None, **kw: Any) -> TaskResult:
    fields: dict[str, Any] = {
        "task_id": task_id,
        "status": TaskStatus(status),
        "output": output,
        "attempts": 1,
        "started_at": T0 + len(task_id) / 7,
        "finished_at": T0 + len(task_id) / 3,
        "args": {"q": task_id},
    }
    fields.update(kw)
    return TaskResult(**fields)


def _results() -> list[TaskResult]:
    """Results of every shape a row can have."""
    redacted = CallDecision(
        tool="t", decision="redact", decided_by="redacting", args={"key": "***"}, at=T0
    )
    element = _result("m[0]", output={"x": 1})
    return [
        _result("text", output='é \u2028 ☃ 𝄞 "quoted" back\\slash \x01 tab\t'),
        _result("nested", output={"a": [1, 2.5, None, True, {"b": "c"}], "": {}}),
        _result("numbers", output=[2**70, -0.0, 1e300, 0.1, 1796105097.2395256, -7]),
        _result("scalar-null-string", output="null"),
        _result("none-output", output=None),
        _result("empty", output=""),
        _result("when", output=datetime.datetime(2026, 12, 1, 6, 0, tzinfo=datetime.timezone.utc)),
        _result("opaque", output=Opaque()),  # JSON cannot hold it: written as its text
        _result(
            "boom",
            "failed",
            error="RuntimeError: it broke",
            error_type="RuntimeError",
            traceback='Traceback (most recent call last):\n  File "x.py"\nRuntimeError: it broke',
            attempts=3,
        ),
        _result("cancelled-with-output", "cancelled", output={"late": True}, error="stopped"),
        _result("skipped", "skipped", started_at=None, finished_at=None, args=None, attempts=0),
        _result(
            "agent",
            output="answer",
            steps=[AgentStep(step=1, thought="think", answer="answer")],
            args="do the thing",
        ),
        _result("secret", output="ok", decisions=[redacted], args={"key": "hunter2"}),
        _result("m", output=[{"x": 1}], elements=[element], args=None),
        _result("nan", output=float("nan")),  # not JSON: Python's reader takes it back
        _result("after-nan", output={"fine": 1}),
        _result("nul", "failed", error="a NUL \x00 inside", error_type="X"),
        _result("last", output=[1, "two"]),
    ]


def _record(
    path: Path,
    results: list[TaskResult],
    *,
    flush_interval_s: float = 10.0,  # one batch: at close
    resumed: bool = False,
) -> list[tuple[Any, ...]]:
    """Record ``results`` as a run, and read its task rows back."""
    run_id = "0123456789ab"
    plan = Plan.model_validate(
        {
            "tasks": [
                {"id": r.task_id.replace("[", "").replace("]", ""), "tool": "t"} for r in results
            ]
        }
    )
    if resumed:
        with RunRecorder(path, run_id) as first:
            first(RunStarted(run_id, plan, "dataflow"))
    rec = RunRecorder(path, run_id, flush_interval_s=flush_interval_s, resumed=resumed).start()
    rec(RunStarted(run_id, plan, "dataflow"))
    for r in results:
        rec.record(r)
    rec.close()
    assert rec.loss is None
    with sqlite3.connect(path) as conn:
        return conn.execute(f"SELECT {TASK_COLUMNS} FROM tasks ORDER BY task_id").fetchall()


def test_every_shape_of_result_reads_back_as_it_was(tmp_path: Path) -> None:
    results = _results()
    rows = _record(tmp_path / "r.db", results)
    assert len(rows) == len(results)
    by_id = {row[1]: row for row in rows}
    assert by_id["cancelled-with-output"][3] is None  # only a success keeps an output
    assert by_id["none-output"][3] is None and by_id["scalar-null-string"][3] == '"null"'
    assert by_id["nul"][4] == "a NUL \x00 inside"  # not cut at the NUL
    assert "hunter2" not in repr(by_id["secret"])  # the redacted arguments, not the real ones
    assert by_id["opaque"][3] == '"<opaque thing>"'
    with RunStore(tmp_path / "r.db") as st:
        got = st.get_run("0123456789ab").tasks
    for r in results:
        back = got[r.task_id]
        assert (back.status, back.error, back.error_type, back.traceback, back.attempts) == (
            r.status,
            r.error,
            r.error_type,
            r.traceback,
            r.attempts,
        ), r.task_id
        assert (back.started_at, back.finished_at) == (r.started_at, r.finished_at)
    assert got["text"].output == 'é \u2028 ☃ 𝄞 "quoted" back\\slash \x01 tab\t'
    assert got["numbers"].output == [2**70, -0.0, 1e300, 0.1, 1796105097.2395256, -7]
    assert got["nested"].output == {"a": [1, 2.5, None, True, {"b": "c"}], "": {}}
    assert got["when"].output == "2026-12-01T06:00:00Z"
    given = {r.task_id: r for r in results}
    assert got["agent"].steps == given["agent"].steps and got["agent"].args == "do the thing"
    assert got["secret"].args == {"key": "***"} and got["secret"].decisions is not None
    (element,) = got["m"].elements or []
    assert element.task_id == "m[0]" and element.output == {"x": 1}
    assert got["nan"].output != got["nan"].output  # NaN, as it was
    assert got["last"].output == [1, "two"]


@pytest.mark.parametrize("flush_interval_s", [0.02, 0.0])  # batches as they come; each at once
def test_the_rows_do_not_depend_on_how_the_results_were_batched(
    tmp_path: Path, flush_interval_s: float
) -> None:
    """In one batch at close, in batches as they come, one by one, or over the rows of a
    resumed run: the same rows."""
    every = _results()
    want = _record(tmp_path / "one-batch.db", every)
    assert _record(tmp_path / "batches.db", every, flush_interval_s=flush_interval_s) == want
    assert _record(tmp_path / "resumed.db", every, resumed=True) == want


def test_a_task_handed_over_twice_keeps_the_result_given_last(tmp_path: Path) -> None:
    """A result given after a result of the same task is on record (in a later batch, or in
    the same one) replaces it."""
    db, run_id = tmp_path / "r.db", "0123456789ab"
    plan = Plan.model_validate({"tasks": [{"id": t, "tool": "t"} for t in "ab"]})
    rec = RunRecorder(db, run_id, flush_interval_s=60.0).start()
    try:
        rec(RunStarted(run_id, plan, "dataflow"))
        rec.record(_result("a", "failed", error="no", error_type="X"))
        rec.record(_result("b", output="first"))
        assert rec.flush(30.0)
        rec.record(_result("a", output="again", attempts=2))
        rec.record(_result("b", output="second"))
        rec.record(_result("b", "failed", error="later", error_type="X"))
    finally:
        rec.close()
    assert rec.loss is None
    with RunStore(db) as st:
        got = st.get_run(run_id).tasks
    assert (got["a"].status, got["a"].output, got["a"].attempts) == (
        TaskStatus.SUCCEEDED,
        "again",
        2,
    )
    assert (got["b"].status, got["b"].output, got["b"].error) == (TaskStatus.FAILED, None, "later")


def test_the_recorder_takes_results_and_task_finished_events_alike(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    run_id = "0123456789ab"
    plan = Plan.model_validate({"tasks": [{"id": "a", "tool": "t"}, {"id": "b", "tool": "t"}]})
    rec = RunRecorder(db, run_id).start()
    rec(RunStarted(run_id, plan, "serial"))
    rec.record(_result("a", output=1))
    rec(TaskFinished(run_id, _result("b", output=2)))
    rec.close()
    with RunStore(db) as st:
        got = st.get_run(run_id)
    assert {t: r.output for t, r in got.tasks.items()} == {"a": 1, "b": 2}


def _committed(db: Path, run_id: str) -> dict[str, Any]:
    """What another connection finds on record (not the recorder's own)."""
    with RunStore(db) as st:
        return {t: r.output for t, r in st.get_run(run_id).tasks.items()}


def test_flush_commits_at_once_what_would_wait_for_its_batch(tmp_path: Path) -> None:
    db, run_id = tmp_path / "r.db", "0123456789ab"
    plan = Plan.model_validate({"tasks": [{"id": "a", "tool": "t"}, {"id": "b", "tool": "t"}]})
    rec = RunRecorder(db, run_id, flush_interval_s=60.0).start()
    try:
        rec(RunStarted(run_id, plan, "serial"))  # written at once: the tasks wait for it
        rec.record(_result("a", output=1))  # its batch would wait a minute
        time.sleep(0.2)  # wall-clock time: long enough for a writer that did not wait to write
        assert _committed(db, run_id) == {}
        assert rec.flush(30.0) is True
        assert _committed(db, run_id) == {"a": 1}
        # The writer goes back to batching: b waits for its interval again, until flushed.
        rec.record(_result("b", output=2))
        time.sleep(0.2)  # as above: nothing to wait on for something that must not happen
        assert _committed(db, run_id) == {"a": 1}
        assert recorder.flush_recorders(30.0) is True  # every live recorder of the process
        assert _committed(db, run_id) == {"a": 1, "b": 2}
    finally:
        rec.close()
    assert rec not in recorder._LIVE
    assert rec.flush(0.0) is True  # closed: nothing left to wait for


def test_flush_of_a_store_another_process_holds_locked_gives_up_at_its_timeout(
    tmp_path: Path,
) -> None:
    db, run_id = tmp_path / "r.db", "0123456789ab"
    plan = Plan.model_validate({"tasks": [{"id": "a", "tool": "t"}]})
    rec = RunRecorder(db, run_id, flush_interval_s=60.0).start()
    rec(RunStarted(run_id, plan, "serial"))
    rec.record(_result("a", output=1))
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the write lock, as another process would hold it
        started = time.monotonic()
        assert rec.flush(0.5) is False
        assert time.monotonic() - started < 20  # bounded by its timeout, not the store's
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    rec.close()  # the lock is gone: the close writes it
    assert _committed(db, run_id) == {"a": 1}
    assert rec.loss is None


# ---------------------------------------------------------------------------------------------
# SIGKILL in the middle of a run

RUNNER = """
import sys
import anyio
import dagagent

log, db, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
reg = dagagent.Registry()


@reg.tool
async def step(i: int) -> dict:
    '''Take a moment (the run lasts until it is killed), say so in the log, return.'''
    await anyio.sleep(0.005)
    with open(log, "a") as f:
        f.write(f"t{i}\\n")
    return {"i": i, "text": "é ☃ \\u2028"}


plan = {
    "goal": "killed half-way",
    "tasks": [
        {"id": f"t{i}", "tool": "step", "args": {"i": i}, "depends_on": [f"t{i - 4}"][: i // 4]}
        for i in range(n)
    ],
}
dagagent.execute_sync(plan, reg, store=db)
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_every_task_that_finished_before_a_sigkill_is_in_the_record(tmp_path: Path) -> None:
    """Results are committed while the run goes on, batch by batch, and what was committed
    survives a SIGKILL. (How soon after a task ends its batch is written is the store's
    flush interval, a number for benchmarks/, not for a test on a busy machine.)"""
    log, db, n = tmp_path / "finished.log", tmp_path / "runs.db", 20_000
    log.touch()
    err = tmp_path / "stderr.txt"
    with err.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(RUNNER), str(log), str(db), str(n)],
            stderr=stderr,
        )

    def running() -> str | None:
        return None if proc.poll() is None else f"the run ended: {err.read_text()}"

    try:
        wait_until(lambda: len(log.read_text().split()) >= 300, "300 tasks ran", unless=running)
        finished = log.read_text().split()
        wait_until(lambda: _all_on_record(db, finished), "they are on record", unless=running)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert len(log.read_text().split()) < n  # killed mid-way, with tasks still to run
    with RunStore(db, create=False) as st:
        rec = st.last_run()
    assert rec.goal == "killed half-way" and rec.status == "interrupted"
    missing = [t for t in finished if t not in rec.tasks]
    assert not missing, f"{len(missing)} finished tasks not on record, e.g. {missing[:5]}"
    for t in finished:
        assert rec.tasks[t].status is TaskStatus.SUCCEEDED
        assert rec.tasks[t].output == {"i": int(t[1:]), "text": "é ☃ \u2028"}


def _all_on_record(db: Path, tasks: list[str]) -> bool:
    """Whether another connection finds every one of ``tasks`` in the last run's record."""
    with RunStore(db, create=False) as st:
        recorded = st.last_run().tasks
    return all(t in recorded for t in tasks)


def test_results_reach_the_recorder_without_task_events(tmp_path: Path) -> None:
    """A store alone listens to nothing per task: the runner hands it each result."""
    reg = dagagent.Registry()

    @reg.tool
    def one() -> int:
        """One."""
        return 1

    seen: list[str] = []
    result = dagagent.execute_sync(
        {"tasks": [{"id": "a", "tool": "one"}]}, reg, store=tmp_path / "r.db"
    )
    with RunStore(tmp_path / "r.db") as st:
        assert st.get_run(result.run_id).tasks["a"].output == 1
    result = dagagent.execute_sync(
        {"tasks": [{"id": "a", "tool": "one"}]},
        reg,
        store=tmp_path / "r.db",
        listeners=[lambda ev: seen.append(ev.kind)],
    )
    assert seen == ["run.started", "task.started", "task.finished", "run.finished"]
    with RunStore(tmp_path / "r.db") as st:
        assert st.get_run(result.run_id).tasks["a"].output == 1
