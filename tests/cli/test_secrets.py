"""Keys never reach what the command line prints, logs or records: a `dagagent -v run`
of an agent task against a model server that echoes back, whole and in pieces, the API key,
the password of the base URL and the Basic header that carries it."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from cli_shell import run_in_process
from llm_server import OPENAI, LLMTestServer, Recorded, Reply

KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 10
PASSWORD = "hunter2pass"


def _echo(request: Recorded) -> Reply:
    auth = request.headers.get("authorization", "")
    said = f"bad key {KEY[:150]} ... {KEY[100:]}; header {auth}; url ann:{PASSWORD}"
    return Reply(400, json=OPENAI.error(said))


def test_no_key_or_password_reaches_the_output_the_logs_or_the_store(tmp_path: Path) -> None:
    plan = {
        "goal": "say hi",
        "tasks": [
            {"id": "agent", "instruction": "say hi"},
            {"id": "sum", "tool": "calculate", "args": {"expression": "1+1"}},
        ],
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    with LLMTestServer(_echo) as server:
        host = server.url.removeprefix("http://")
        url = f"http://ann:{PASSWORD}@{host}/v1"
        args = ["run", "plan.json", "--model", "openai:m", "--base-url", url, "--store", "runs.db"]
        proc = run_in_process(
            ["-v", *args, "--on-failure", "continue"],
            tmp_path,
            {**os.environ, "OPENAI_API_KEY": KEY},
        )
    assert proc.returncode == 1, proc.stderr  # the agent task failed: the model refused
    assert "rejected the request (HTTP 400)" in proc.stderr
    conn = sqlite3.connect(tmp_path / "runs.db")
    stored = "\n".join(conn.iterdump())
    conn.close()
    assert "rejected the request" in stored  # the error is recorded, scrubbed
    basic = "YW5uOmh1bnRlcjJwYXNz"  # base64 of ann:hunter2pass
    for where, text in (("output", proc.stdout + proc.stderr), ("store", stored)):
        assert PASSWORD not in text and basic not in text, where
        pieces = [KEY[i : i + 10] for i in range(len(KEY) - 10)]
        assert not [p for p in pieces if p in text], where
