"""End-to-end user journeys through the ``dagagent`` command line.

Each journey runs the CLI as a user would (``dagagent ...`` commands, run in process by
``cli_shell.Shell``, a run store under a temporary ``$DAGAGENT_HOME``; a real process where
Ctrl-C is the point), with a loopback OpenAI-compatible server playing the model, and the
counted tools of ``tests/journey_model.py``. Each asserts what the user would check: exit
codes, the recorded runs, which tools really ran, and that no command ever printed a
traceback.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_shell import TIMEOUT, Shell, tool_starts
from eventually import wait_until
from journey_model import plan_answer, text_answer, tool_call_answer
from llm_server import LLMTestServer, Reply

from dagagent.llm import wire

TOOLS = f"{Path(__file__).with_name('journey_model.py')}:registry"


class Journey(Shell):
    """One user's shell: a working directory, an environment, a fake model and a tool log."""

    def __init__(self, tmp_path: Path, server: LLMTestServer) -> None:
        self.log = tmp_path / "calls.log"
        self.slow_flag = tmp_path / "slow.flag"
        super().__init__(tmp_path, JOURNEY_LOG=str(self.log), JOURNEY_SLOW=str(self.slow_flag))
        self.server = server
        self.model = ["--model", "openai:fake", "--base-url", server.url + "/v1"]

    def calls(self) -> list[str]:
        """The tool calls made since the last ``reset_calls``: ``tool arg`` per start."""
        return tool_starts(self.log)

    def reset_calls(self) -> None:
        self.log.write_text("")


@pytest.fixture
def user(tmp_path: Path, server: LLMTestServer) -> Journey:
    return Journey(tmp_path, server)


def statuses(record: dict[str, Any]) -> dict[str, str]:
    return {tid: t["status"] for tid, t in record["tasks"].items()}


# -- 1. plan -> run -> fail -> replan -> succeed ---------------------------------------------

GOAL = "Mean temperature of Paris, Tokyo and Atlantis"


def weather_plan(third: str) -> dict[str, Any]:
    return {
        "goal": GOAL,
        "tasks": [
            {"id": "paris", "tool": "get_weather", "args": {"city": "Paris"}},
            {"id": "tokyo", "tool": "get_weather", "args": {"city": "Tokyo"}},
            {"id": "third", "tool": "get_weather", "args": {"city": third}},
            {
                "id": "avg",
                "tool": "mean",
                "args": {"values": ["${paris.temp_c}", "${tokyo.temp_c}", "${third.temp_c}"]},
            },
        ],
    }


def test_plan_run_fail_replan_succeed(user: Journey, server: LLMTestServer) -> None:
    server.push(Reply(json=plan_answer(weather_plan("Atlantis"))))
    user("plan", GOAL, *user.model, "--tools", TOOLS, "--out", "plan.json")
    assert json.loads((user.dir / "plan.json").read_text())["tasks"][2]["args"] == {
        "city": "Atlantis"
    }
    assert user.calls() == []  # planning runs nothing

    run = user("run", "plan.json", "--tools", TOOLS, "--on-failure", "continue", code=1)
    assert "third" in run.stdout + run.stderr and "Atlantis" in run.stdout + run.stderr
    assert user.calls() == [
        "get_weather Atlantis",
        "get_weather Paris",
        "get_weather Tokyo",
    ]

    first = user.json("show", "--last")
    assert first["status"] == "failed"
    assert statuses(first) == {
        "paris": "succeeded",
        "tokyo": "succeeded",
        "third": "failed",
        "avg": "skipped",
    }
    assert "no weather for 'Atlantis'" in first["tasks"]["third"]["error"]

    user.reset_calls()
    server.push(Reply(json=plan_answer(weather_plan("London"))))
    replan = user("replan", "--last", *user.model, "--execute")
    # the model saw what failed and why
    assert "no weather for 'Atlantis'" in json.dumps(server.requests[-1].json)
    assert "will reuse: paris, tokyo" in replan.stdout
    assert user.calls() == ["get_weather London", "mean"]  # paris and tokyo not called again

    second = user.json("show", "--last")
    assert second["status"] == "succeeded"
    assert statuses(second) == {
        "paris": "reused",
        "tokyo": "reused",
        "third": "succeeded",
        "avg": "succeeded",
    }
    assert second["tasks"]["avg"]["output"] == pytest.approx((18.0 + 24.5 + 14.0) / 3)
    assert second["tasks"]["paris"]["output"]["temp_c"] == 18.0

    runs = user.json("runs")["runs"]
    assert [r["run_id"] for r in runs] == [second["run_id"], first["run_id"]]
    assert runs[0]["parent_id"] == first["run_id"]
    assert runs[1]["parent_id"] is None

    graph = user("graph", "--last", "--format", "mermaid").stdout
    assert graph.lstrip().startswith(("graph", "flowchart"))
    reused_lines = [line for line in graph.splitlines() if "reused" in line]
    assert any("paris" in line for line in reused_lines), graph
    assert any("tokyo" in line for line in reused_lines), graph
    assert not any("avg" in line for line in reused_lines), graph


# -- 2. an agent node between two tool tasks --------------------------------------------------

AGENT_PLAN: dict[str, Any] = {
    "goal": "A weather note for Paris",
    "tasks": [
        {"id": "paris", "tool": "get_weather", "args": {"city": "Paris"}},
        {
            "id": "note",
            "instruction": "Compare ${paris.condition} Paris with Tokyo in one sentence",
            "tools": ["get_weather"],
        },
        {"id": "report", "tool": "format_report", "args": {"title": "${note}", "lines": []}},
    ],
}
NOTE = "Paris is cloudy and cooler than sunny Tokyo."


def test_agent_node_in_a_plan(user: Journey, server: LLMTestServer) -> None:
    server.push(
        Reply(json=tool_call_answer("get_weather", {"city": "Tokyo"})),
        Reply(json=text_answer(NOTE)),
    )
    plan = user.write_plan(AGENT_PLAN)
    user("run", plan, "--tools", TOOLS, *user.model)
    assert user.calls() == ["format_report " + NOTE, "get_weather Paris", "get_weather Tokyo"]

    first, second = (r.json for r in server.requests)
    prompt = json.dumps(first["messages"])
    assert "Compare cloudy Paris with Tokyo" in prompt  # the reference was resolved
    assert [t["function"]["name"] for t in first["tools"]] == ["get_weather"]  # its subset
    tool_msg = second["messages"][-1]
    assert tool_msg["role"] == "tool" and "sunny" in tool_msg["content"]

    record = user.json("show", "--last")
    assert statuses(record) == {"paris": "succeeded", "note": "succeeded", "report": "succeeded"}
    assert record["tasks"]["note"]["output"] == NOTE
    assert record["tasks"]["report"]["output"] == f"# {NOTE}"
    steps = record["tasks"]["note"]["steps"]
    assert steps, record["tasks"]["note"]
    (call,) = steps[0]["calls"]
    assert call["tool"] == "get_weather" and "sunny" in json.dumps(call["observation"])


def test_replan_reruns_a_failed_agent_task_with_the_environment_model(
    user: Journey, server: LLMTestServer
) -> None:
    # the model is set once in the environment, as the quickstart suggests; its first answer is
    # an error, so the agent task fails; replan --execute must run it again with that model
    user.env["DAGAGENT_MODEL"] = "openai:fake"
    user.env["DAGAGENT_BASE_URL"] = server.url + "/v1"
    server.push(Reply(400, json=wire.openai_error("model is warming up")))
    plan = user.write_plan(AGENT_PLAN)
    run = user("run", plan, "--tools", TOOLS, code=1)
    assert "model is warming up" in run.stdout + run.stderr
    first = user.json("show", "--last")
    assert statuses(first) == {"paris": "succeeded", "note": "failed", "report": "skipped"}

    user.reset_calls()
    server.push(Reply(json=text_answer(NOTE)))
    result = user.json("replan", "--last", "--execute")["result"]
    assert {tid: t["status"] for tid, t in result["tasks"].items()} == {
        "paris": "reused",
        "note": "succeeded",
        "report": "succeeded",
    }
    assert result["tasks"]["report"]["output"] == f"# {NOTE}"
    assert user.calls() == ["format_report " + NOTE]


# -- 3. approval: a policy denies the side effect, and --ask without a terminal --------------

MAIL_PLAN: dict[str, Any] = {
    "goal": "Mail the Paris weather",
    "tasks": [
        {"id": "paris", "tool": "get_weather", "args": {"city": "Paris"}},
        {
            "id": "note",
            "instruction": "Write a note about ${paris.condition} Paris and mail it to ann",
            "tools": ["send_email"],
        },
        {"id": "mail", "tool": "send_email", "args": {"to": "ann@example.com", "body": "${note}"}},
    ],
}
POLICY = {
    "default": "allow",
    "rules": [
        {"side_effects": True, "action": "deny", "reason": "no mail today", "name": "nomail"}
    ],
}


def _mail_model(server: LLMTestServer) -> None:
    server.push(
        Reply(json=tool_call_answer("send_email", {"to": "ann@example.com", "body": "cloudy"})),
        Reply(json=text_answer("Paris is cloudy.")),
    )


def test_policy_denies_side_effects_in_tasks_and_agents(
    user: Journey, server: LLMTestServer
) -> None:
    _mail_model(server)
    plan = user.write_plan(MAIL_PLAN)
    (user.dir / "policy.json").write_text(json.dumps(POLICY))
    run = user("run", plan, "--tools", TOOLS, *user.model, "--policy", "policy.json", code=1)
    assert "no mail today" in run.stdout + run.stderr
    assert user.calls() == ["get_weather Paris"]  # send_email never ran
    # the agent was told its call was denied
    assert "denied: no mail today" in json.dumps(server.requests[-1].json["messages"])

    record = user.json("show", "--last")
    assert statuses(record) == {"paris": "succeeded", "note": "succeeded", "mail": "denied"}
    (decision,) = record["tasks"]["mail"]["decisions"]
    assert decision["tool"] == "send_email" and decision["decision"] == "deny"
    assert decision["reason"] == "no mail today" and "nomail" in decision["rule"]
    (agent_decision,) = record["tasks"]["note"]["decisions"]
    assert agent_decision["decision"] == "deny" and agent_decision["tool"] == "send_email"


def test_ask_without_a_terminal_and_no_wait_denies_with_a_clear_message(
    user: Journey, server: LLMTestServer
) -> None:
    _mail_model(server)
    plan = user.write_plan(MAIL_PLAN)
    run = user(
        "run", plan, "--tools", TOOLS, *user.model, "--ask", "send_email", "--no-wait", code=1
    )
    message = "approval needed for tool 'send_email' but no terminal is attached"
    assert message in run.stdout + run.stderr
    assert message in json.dumps(server.requests[-1].json["messages"])
    assert user.calls() == ["get_weather Paris"]
    record = user.json("show", "--last")
    assert statuses(record) == {"paris": "succeeded", "note": "succeeded", "mail": "denied"}
    (decision,) = record["tasks"]["mail"]["decisions"]
    assert decision["decision"] == "deny" and message in decision["reason"]


# -- 4. every executor gives the same outputs -------------------------------------------------

FAN_PLAN: dict[str, Any] = {
    "goal": "Three cities and their mean",
    "tasks": [
        {"id": "paris", "tool": "get_weather", "args": {"city": "Paris"}},
        {"id": "tokyo", "tool": "get_weather", "args": {"city": "Tokyo"}},
        {"id": "london", "tool": "get_weather", "args": {"city": "London"}},
        {
            "id": "avg",
            "tool": "mean",
            "args": {"values": ["${paris.temp_c}", "${tokyo.temp_c}", "${london.temp_c}"]},
        },
        {
            "id": "report",
            "tool": "format_report",
            "args": {"title": "Mean ${avg}", "lines": ["${paris.condition}", "${london.city}"]},
        },
        {"id": "atlantis", "tool": "get_weather", "args": {"city": "Atlantis"}},
        {
            "id": "after",
            "tool": "format_report",
            "args": {"title": "${atlantis.city}", "lines": []},
        },
    ],
}


@pytest.mark.slow
def test_executors_agree(user: Journey) -> None:
    pytest.importorskip("distributed")
    plan = user.write_plan(FAN_PLAN)
    seen: dict[str, Any] = {}
    for executor in ("serial", "levels", "dataflow", "dask"):
        user.reset_calls()
        # one task fails (an unknown city): its error is an ordinary task failure on every
        # executor, never a worker's traceback on the terminal (checked by user())
        result = user.json(
            "run", plan, "--tools", TOOLS, "-e", executor, "--on-failure", "continue", code=1
        )
        seen[executor] = {
            tid: (t["status"], t["output"], t["error_type"], t["error"])
            for tid, t in result["tasks"].items()
        }
        assert len(user.calls()) == 6, (executor, user.calls())
    assert seen["serial"]["report"][:2] == (
        "succeeded",
        "# Mean 18.833333333333332\ncloudy\nLondon",
    )
    assert seen["serial"]["atlantis"][0::2] == ("failed", "LookupError")
    assert seen["serial"]["after"][0] == "skipped"
    for executor, tasks in seen.items():
        assert tasks == seen["serial"], executor
    runs = user.json("runs")["runs"]
    assert [r["executor"] for r in runs] == ["dask", "dataflow", "levels", "serial"]


# -- 5. Ctrl-C mid-way, then replan re-runs only what did not finish --------------------------

SLOW_PLAN: dict[str, Any] = {
    "goal": "interrupt me",
    "tasks": [
        {"id": "a", "tool": "slow", "args": {"name": "a"}},
        {"id": "b", "tool": "slow", "args": {"name": "slow-b"}},
        {"id": "c", "tool": "slow", "args": {"name": "${a}-${b}"}},
    ],
}


def _wait_for(user: Journey, proc: subprocess.Popen[str], *lines: str) -> None:
    def seen() -> list[str]:
        return user.log.read_text().splitlines() if user.log.exists() else []

    try:
        wait_until(
            lambda: all(x in seen() for x in lines),
            f"the tools logged {lines}",
            unless=lambda: None if proc.poll() is None else "the process ended",
        )
    except AssertionError as exc:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"{exc}: {seen()}\n{out}\n{err}") from None


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("executor", ["levels", "dataflow"])
def test_interrupt_and_resume(user: Journey, executor: str) -> None:
    plan = user.write_plan(SLOW_PLAN)
    user.slow_flag.write_text("x")
    proc = subprocess.Popen(
        user.argv("run", plan, "--tools", TOOLS, "-e", executor),
        cwd=user.dir,
        env=user.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(user, proc, "end slow a", "start slow slow-b")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err + out and "interrupted" in err

    record = user.json("show", "--last")
    assert record["status"] == "cancelled"
    assert statuses(record) == {"a": "succeeded", "b": "cancelled", "c": "cancelled"}

    user.slow_flag.unlink()
    user.reset_calls()
    result = user.json("replan", "--last", "--execute")["result"]
    assert result["status"] == "succeeded"
    assert {tid: t["status"] for tid, t in result["tasks"].items()} == {
        "a": "reused",
        "b": "succeeded",
        "c": "succeeded",
    }
    assert result["tasks"]["c"]["output"] == "A-SLOW-B"
    assert user.calls() == ["slow A-SLOW-B", "slow slow-b"]  # "a" did not run again
