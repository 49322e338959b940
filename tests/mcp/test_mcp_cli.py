"""``dagagent run/validate/replan --mcp`` and ``dagagent tools`` (run in process, see
tests/cli_shell.py) against the servers of mcp_servers.py."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_shell import run_in_process
from mcp_helpers import SERVERS, HTTPServers

pytestmark = pytest.mark.slow

KIT = f"kit={sys.executable} {SERVERS} kit stdio"


@pytest.fixture(autouse=True)
def _in_a_directory_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def dagagent(*args: str) -> subprocess.CompletedProcess[str]:
    """``dagagent ARGS`` in the test's directory, with its store (``$DAGAGENT_HOME``)."""
    return run_in_process(args, Path.cwd(), dict(os.environ))


def write_plan(tmp_path: Path, *tasks: dict[str, Any]) -> str:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"goal": "use the kit", "tasks": list(tasks)}))
    return str(path)


def test_run_with_mcp_end_to_end_then_replan_reconnects_and_reuses(tmp_path: Path) -> None:
    plan = write_plan(
        tmp_path,
        {"id": "w", "tool": "kit.weather", "args": {"city": "Oslo"}},
        {"id": "s", "tool": "kit.shout", "args": {"text": "${w.city}"}},
        {"id": "r", "tool": "kit.refuse", "args": {"reason": "the vault is locked"}},
        {"id": "p", "tool": "kit.pid", "args": {}},
    )
    proc = dagagent("run", plan, "--mcp", KIT, "--on-failure", "continue", "--json")
    assert proc.returncode == 1, proc.stderr  # one task failed, by the server's own word
    assert "Traceback" not in proc.stderr
    tasks = json.loads(proc.stdout)["tasks"]
    assert tasks["w"]["output"] == {"city": "Oslo", "days": 1, "temp_c": 21.5}
    assert tasks["s"]["output"] == "OSLO"
    assert tasks["r"]["status"] == "failed"
    assert "the vault is locked" in tasks["r"]["error"]
    pid = tasks["p"]["output"]["result"]
    # the session closed with the run: the server process is gone
    from test_mcp_tools import gone

    assert gone(pid)
    # replan finds the server the run used, starts it again, and reuses what succeeded
    proc = dagagent("replan", "--last", "--execute", "--on-failure", "continue", "--json")
    assert proc.returncode == 1, proc.stderr
    again = json.loads(proc.stdout)["result"]["tasks"]
    assert again["w"]["status"] == "reused" and again["s"]["status"] == "reused"
    assert again["r"]["status"] == "failed"


def test_tools_lists_module_and_mcp_tools_with_their_arguments(mcp_http: HTTPServers) -> None:
    kit, paged = f"kit={mcp_http.url('kit')}", f"paged={mcp_http.url('paged')}"
    proc = dagagent(
        "tools", "--tools", "dagagent.toolkits.demo:registry", "--mcp", kit, "--mcp", paged
    )
    assert proc.returncode == 0, proc.stderr
    listed = dagagent("tools", "--mcp", kit, "--mcp", paged, "--json")
    text = proc.stdout
    assert "kit.weather(city: string, days: integer = 1) -> object\n" in text
    assert "    Weather forecast for a city.\n    from MCP server kit; no side effects\n" in text
    assert "paged.tool_6(x: integer)\n" in text
    assert text.startswith("get_weather(")  # a demo tool, from --tools, listed first
    tools = {t["name"]: t for t in json.loads(listed.stdout)["tools"]}
    assert "get_weather" not in tools  # --mcp without --tools: no demo tools
    assert len([n for n in tools if n.startswith("paged.")]) == 7
    assert tools["kit.weather"]["parameters"]["required"] == ["city"]
    assert tools["kit.weather"]["side_effects"] is False
    assert tools["kit.delete_file"]["side_effects"] is True
    assert tools["kit.shout"]["retryable"] is False
    # the servers' tools joined the command's registry, not the module's
    from dagagent.toolkits.demo import registry as demo

    assert not [t.name for t in demo if "." in t.name]


def test_validate_checks_mcp_arguments_and_a_dead_server_is_a_usage_error(
    tmp_path: Path, mcp_http: HTTPServers
) -> None:
    plan = write_plan(tmp_path, {"id": "w", "tool": "kit.weather", "args": {"days": "two"}})
    proc = dagagent("validate", plan, "--mcp", f"kit={mcp_http.url('kit')}")
    assert proc.returncode == 2
    assert "city: required argument is missing" in proc.stderr
    assert "days: 'two' is not of type 'integer'" in proc.stderr
    proc = dagagent("run", plan, "--mcp", f"kit={sys.executable} {SERVERS} no-such-kind stdio")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: cannot connect to MCP server 'kit'")
    assert "Traceback" not in proc.stderr.split("stderr ends with")[0]
    proc = dagagent("run", plan, "--mcp", "kit")
    assert proc.returncode == 2 and "NAME=COMMAND" in proc.stderr


def test_secrets_in_an_mcp_command_or_url_are_not_recorded_and_replan_asks_for_them(
    tmp_path: Path, mcp_http: HTTPServers
) -> None:
    """A token in the server's environment assignment, in its options or in the URL's query
    runs the server but never reaches the store; replan, which would start the server with
    '***' for it, asks for the --mcp again instead."""
    secrets = ["env-tok-1234567", "flag-key-7654321", "next-tok-1122334", "query-tok-9988776"]
    kit = (
        f"kit=env API_TOKEN={secrets[0]} {sys.executable} {SERVERS} kit stdio "
        f"--api-key={secrets[1]} --token {secrets[2]}"
    )
    plan = write_plan(tmp_path, {"id": "s", "tool": "kit.shout", "args": {"text": "hi"}})
    store = str(tmp_path / "runs.db")
    url = mcp_http.url("paged")
    paged = f"paged={url}?access_token={secrets[3]}&page=1"
    proc = dagagent("run", plan, "--mcp", kit, "--mcp", paged, "--store", store, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["tasks"]["s"]["output"] == "HI"
    conn = sqlite3.connect(store)
    stored = "\n".join(conn.iterdump())
    conn.close()
    assert not [s for s in secrets if s in stored]
    shown = dagagent("show", "--last", "--store", store, "--json")
    recorded = json.loads(shown.stdout)["context"]["mcp"]
    assert recorded == [
        f"kit=env API_TOKEN=*** {sys.executable} {SERVERS} kit stdio --api-key=*** --token ***",
        f"paged={url}?access_token=***&page=1",
    ]
    proc = dagagent("replan", "--last", "--store", store)
    assert proc.returncode == 2, proc.stderr
    assert "used --mcp kit and paged: a secret in the command or URL is not kept" in proc.stderr
