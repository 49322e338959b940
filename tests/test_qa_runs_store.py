"""Run records under abuse: a process that dies at once, outputs the store cannot write,
a --store pointed at another application's database."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import dagagent
from dagagent.errors import StoreError
from dagagent.review import predict_reuse, reuse_map, review_run
from dagagent.store import OUTPUT_NOT_RECORDED, RunStore

pytestmark = pytest.mark.anyio


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
        plan, reg, store=db, reuse=reuse_map(rec), parent_id=rec.id, executor="serial"
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
        rows += conn.execute("SELECT * FROM tasks WHERE task_id != 'v'").fetchall()
    assert rows and not any(secret in str(col) for row in rows for col in row)
    # The vault's own output holds it (outputs are recorded as they are)...
    assert rec.tasks["v"].output == {"password": secret}
    # ...but not the redacted call: its arguments are recorded as the tool received them.
    assert rec.tasks["in"].args == {"user": "ann", "password": "[redacted]"}
    (note,) = rec.tasks["in"].decisions or []
    assert note["decision"] == "redact" and note["reason"] == "redacted: password"
    # Not reusable: the real arguments are not on record to compare.
    assert "in" not in rec.fingerprints and set(reuse_map(rec)) == {"v"}
    assert predict_reuse(rec, rec.plan)["in"].reason == "succeeded before, arguments redacted"
    seen.clear()
    again = dagagent.execute_sync(
        plan, reg, reuse=reuse_map(rec), parent_id=rec.id, interceptors=[redacting()]
    )
    assert again.tasks["v"].status.value == "reused" and seen == ["[redacted]"]
