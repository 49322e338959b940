"""The run store's model calls (schema version 10): written by their writer thread, a call
replaced when its issues come, read back with the solve in the order they started, summed
into the list of solves; a store of version 9 gains the table and keeps its solves."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from dagagent.results import ModelCall
from dagagent.store import SCHEMA_VERSION, ModelCallWriter, RunStore
from dagagent.store._schema import MIGRATIONS

SOLVE = "0123456789ab"


def call(seq: int, **changes: object) -> ModelCall:
    values: dict[str, object] = {
        "call_id": f"c{seq}",
        "solve_id": SOLVE,
        "round": 1,
        "run_id": "aaaaaaaaaaaa",
        "role": "planner",
        "seq": seq,
        "model": "gpt-4o-mini",
        "provider": "openai",
        "server": "https://api.openai.com/v1",
        "options": {"max_tokens": 100, "stream": True},
        "status": "answered",
        "started_at": time.time() + seq,
        "first_token_s": 0.25,
        "duration_s": 1.5,
        "finish_reason": "stop",
        "input_tokens": 100,
        "output_tokens": 20,
        "cost_usd": 0.0001,
        "text": f'{{"tasks": []}} #{seq}',
        "text_chars": 16,
    }
    values.update(changes)
    return ModelCall.model_validate(values)


def test_calls_are_written_by_their_thread_and_read_back_with_the_solve(tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.db") as st:
        st.start_solve(SOLVE, "a goal")
        writer = ModelCallWriter(st)
        first = call(1)
        writer.put(first)
        writer.put(call(2, role="joiner", cost_usd=None, estimated=True))
        rejected = first.model_copy(update={"issues": ["[not_json] plan: no JSON"]})
        writer.put(rejected)  # the same call again: replaced, not added
        writer.close()
        assert writer.lost == 0 and writer.error is None
        record = st.get_solve(SOLVE)
        assert [c.call_id for c in record.calls] == ["c1", "c2"]
        assert record.calls[0] == rejected and record.calls[1].estimated
        assert record.spent.calls == 2 and record.spent.cost_usd is None  # one price unknown
        assert st.model_calls(run_id="aaaaaaaaaaaa") == record.calls
        (summary,) = st.list_solves()
        assert summary.spent.input_tokens == 200 and summary.models == ["gpt-4o-mini"]
        assert summary.spent.estimated and summary.spent.cost_usd is None


def test_a_solve_id_or_a_unique_prefix_opens_the_solve(tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.db") as st:
        st.start_solve(SOLVE, "a goal")
        st.start_solve("0123ffffffff", "another goal")
        assert st.resolve_solve(SOLVE) == SOLVE
        assert st.resolve_solve("0123456") == SOLVE
        assert st.resolve_solve("ffff") is None
        with pytest.raises(Exception, match="ambiguous"):
            st.resolve_solve("0123")


def test_a_version_9_store_gains_the_model_calls_table(tmp_path: Path) -> None:
    path = tmp_path / "v9.db"
    with sqlite3.connect(path) as conn:
        for step in MIGRATIONS[:9]:
            for stmt in step:
                if isinstance(stmt, str):
                    conn.execute(stmt)
                else:
                    stmt(conn)
        conn.execute("PRAGMA user_version = 9")
        conn.execute(
            "INSERT INTO solves (id, goal, created, status) VALUES (?, 'old', ?, 'answered')",
            (SOLVE, time.time()),
        )
    with RunStore(path) as st:
        assert st.schema_version == SCHEMA_VERSION >= 10
        record = st.get_solve(SOLVE)
        assert record.goal == "old" and record.calls == []
        st.record_model_calls([call(1)])
        assert [c.call_id for c in st.get_solve(SOLVE).calls] == ["c1"]


def test_a_store_read_only_reads_the_calls(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with RunStore(path) as st:
        st.start_solve(SOLVE, "a goal")
        st.record_model_calls([call(1), call(2)])
    with RunStore(path, read_only=True) as st:
        assert len(st.get_solve(SOLVE).calls) == 2
