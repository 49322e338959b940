"""``dagagent plan`` against a real loopback server speaking the OpenAI (and Anthropic) wire
format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from llm_server import LLMTestServer, Reply
from typer.testing import CliRunner

import dagagent
from dagagent.cli import app
from dagagent.llm import wire
from dagagent.planners import PLAN_FORMAT_NAME, plan_json_schema
from dagagent.toolkits.demo import registry as demo

runner = CliRunner()

PLAN = {
    "goal": "-",
    "tasks": [
        {"id": "paris", "tool": "get_weather", "args": {"city": "Paris"}},
        {"id": "tokyo", "tool": "get_weather", "args": {"city": "Tokyo"}},
        {
            "id": "cmp",
            "tool": "compare",
            "args": {
                "a": "${paris.temp_c}",
                "b": "${tokyo.temp_c}",
                "label_a": "Paris",
                "label_b": "Tokyo",
            },
        },
    ],
}
GOAL = "Which is warmer, Paris or Tokyo?"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        "DAGAGENT_MODEL",
        "DAGAGENT_BASE_URL",
        "OPENAI_BASE_URL",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "DAGAGENT_TOOLS",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DAGAGENT_HOME", str(tmp_path / "home"))


def answer(plan: Any) -> Reply:
    # 80 output tokens: what a plan this long takes (a count no answer of its length could
    # have, such as 5, would not be believed: see dagagent.llm.observe)
    text = plan if isinstance(plan, str) else json.dumps(plan)
    return Reply(json=wire.openai_text(text, output_tokens=80))


def plan_cli(server: LLMTestServer, *args: str) -> Any:
    return runner.invoke(
        app,
        ["plan", GOAL, "--model", "openai:test-model", "--base-url", server.url + "/v1", *args],
        catch_exceptions=False,
    )


def test_plan_shows_table_dag_and_usage(server: LLMTestServer):
    server.push(answer(PLAN))
    r = plan_cli(server)
    assert r.exit_code == 0, r.output
    text = r.stdout
    for tid in ("paris", "tokyo", "cmp"):
        assert tid in text
    assert "level 0" in text and "level 1" in text
    assert "<- paris, tokyo" in text
    assert "3 tasks in 2 levels; planned with test-model: 1 attempt, 1 call, " in text
    assert "10 input + 80 output tokens" in text
    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    body = request.json
    fmt = body["response_format"]["json_schema"]
    assert fmt["name"] == PLAN_FORMAT_NAME
    assert fmt["schema"] == plan_json_schema(demo)
    tools = [
        v["properties"]["tool"]["enum"][0]
        for v in fmt["schema"]["properties"]["tasks"]["items"]["anyOf"]
    ]
    assert tools == demo.names
    assert GOAL in body["messages"][-1]["content"]


def test_json_output(server: LLMTestServer):
    server.push(answer("```json\n" + json.dumps(PLAN) + "\n```"))
    r = plan_cli(server, "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["goal"] == GOAL
    assert [t["id"] for t in data["plan"]["tasks"]] == ["paris", "tokyo", "cmp"]
    assert data["levels"] == [["paris", "tokyo"], ["cmp"]]
    assert data["usage"] == {
        "attempts": 1,
        "calls": 1,
        "input_tokens": 10,
        "output_tokens": 80,
        "total_tokens": 90,
    }


def test_plan_reads_an_llmcompiler_answer_and_json_a_model_wrote_by_hand(
    server: LLMTestServer,
) -> None:
    server.push(
        answer(
            "Thought: look both up, then compare.\n"
            '1. get_weather("Paris")\n'
            '2. get_weather("Tokyo")\n'
            '3. compare("${1.temp_c}", "${2.temp_c}", label_a="Paris", label_b="Tokyo")\n'
            "4. join()<END_OF_PLAN>"
        )
    )
    r = plan_cli(server, "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [t["id"] for t in data["plan"]["tasks"]] == ["1", "2", "3"]
    assert data["levels"] == [["1", "2"], ["3"]] and data["usage"]["attempts"] == 1
    cut = "```json\n// the plan\n" + json.dumps(PLAN)[:-2] + ",],}\n```"  # trailing commas
    server.push(answer(cut))
    r = plan_cli(server, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["levels"] == [["paris", "tokyo"], ["cmp"]]


def test_out_writes_a_plan_that_validates(server: LLMTestServer, tmp_path: Path):
    server.push(answer(PLAN))
    target = tmp_path / "plan.json"
    r = plan_cli(server, "--out", str(target))
    assert r.exit_code == 0, r.output
    assert f"plan written to {target}" in r.stderr
    plan = dagagent.load_plan(target)
    assert plan.goal == GOAL
    assert dagagent.validate(plan, demo).levels == [["paris", "tokyo"], ["cmp"]]
    r = runner.invoke(app, ["validate", str(target)], catch_exceptions=False)
    assert r.exit_code == 0, r.output


def test_without_out_says_how_to_keep_the_plan(server: LLMTestServer):
    server.push(answer(PLAN))
    r = plan_cli(server)
    assert r.exit_code == 0, r.output
    assert "add --out FILE to keep it" in r.stderr


def test_out_to_an_unwritable_place_is_exit_2(server: LLMTestServer, tmp_path: Path):
    server.push(answer(PLAN))
    r = plan_cli(server, "--out", str(tmp_path / "missing-dir" / "plan.json"))
    assert r.exit_code == 2
    assert "cannot write the plan to" in r.stderr and "Traceback" not in r.output


def test_execute_runs_the_plan_like_run(server: LLMTestServer, tmp_path: Path):
    server.push(answer(PLAN))
    r = plan_cli(
        server,
        "--execute",
        "--json",
        "--store",
        str(tmp_path / "runs.db"),
        "--executor",
        "dataflow",
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["status"] == "succeeded"
    assert data["executor"] == "dataflow"
    assert data["goal"] == GOAL
    assert data["tasks"]["cmp"]["output"]["larger"] == "Tokyo"
    assert "planned with test-model: 1 attempt" in r.stderr
    assert (tmp_path / "runs.db").exists()


def test_execute_failed_run_is_exit_1(server: LLMTestServer, tmp_path: Path):
    failing = {"tasks": [{"id": "boom", "tool": "fail", "args": {"message": "kaboom"}}]}
    server.push(answer(failing))
    r = plan_cli(server, "--execute", "--store", str(tmp_path / "runs.db"))
    assert r.exit_code == 1, r.output
    assert "kaboom" in r.stdout


def test_repair_then_success(server: LLMTestServer):
    bad = {"tasks": [{"id": "t", "tool": "teleport", "args": {}}]}
    server.push(answer(bad), answer(PLAN))
    r = plan_cli(server, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["usage"]["attempts"] == 2
    feedback = server.requests[1].json["messages"][-1]["content"]
    assert "[unknown_tool] task 't'" in feedback


def test_exhausted_attempts_exit_3_listing_every_attempt(server: LLMTestServer):
    bad = {"tasks": [{"id": "t", "tool": "teleport", "args": {}}]}
    server.push(answer("I cannot plan this."), answer(bad))
    r = plan_cli(server, "--max-attempts", "2")
    assert r.exit_code == 3, r.output
    err = r.stderr
    assert "error: no valid plan after 2 attempts" in err
    assert "attempt 1:" in err and "[not_json]" in err
    assert "attempt 2:" in err and "[unknown_tool] task 't'" in err
    assert "Traceback" not in r.output
    assert r.stdout == ""


def test_model_and_base_url_from_the_environment(
    server: LLMTestServer, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("DAGAGENT_MODEL", "openai:env-model")
    monkeypatch.setenv("DAGAGENT_BASE_URL", server.url + "/v1")
    server.push(answer(PLAN))
    r = runner.invoke(app, ["plan", GOAL, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert server.requests[0].json["model"] == "env-model"


def test_no_model_is_exit_2_saying_how_to_set_one():
    r = runner.invoke(app, ["plan", GOAL], catch_exceptions=False)
    assert r.exit_code == 2
    assert "no model configured" in r.stderr
    assert "--model" in r.stderr and "DAGAGENT_MODEL" in r.stderr


def test_bad_model_spec_is_exit_2():
    r = runner.invoke(app, ["plan", GOAL, "--model", "gpt-4o"], catch_exceptions=False)
    assert r.exit_code == 2
    assert "unknown model spec 'gpt-4o'" in r.stderr


def test_refused_key_is_one_line_exit_2(server: LLMTestServer):
    server.push(Reply(401, json=wire.openai_error("Incorrect API key provided")))
    r = plan_cli(server)
    assert r.exit_code == 2
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1
    assert lines[0].startswith("error: the model could not be used:")
    assert "Incorrect API key provided" in lines[0]
    assert "Traceback" not in r.output


def test_anthropic_model(server: LLMTestServer):
    server.push(Reply(json=wire.anthropic_tool_use([(PLAN_FORMAT_NAME, PLAN)])))
    r = runner.invoke(
        app,
        ["plan", GOAL, "--model", "anthropic:claude-test", "--base-url", server.url, "--json"],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["levels"] == [["paris", "tokyo"], ["cmp"]]
    (request,) = server.requests
    assert request.path == "/v1/messages"
    assert request.json["tools"][0]["input_schema"] == plan_json_schema(demo)


def test_timeout_bounds_a_slow_model(server: LLMTestServer):
    server.push(Reply(json=wire.openai_text(json.dumps(PLAN)), delay=6))
    r = plan_cli(server, "--timeout", "1.5")
    assert r.exit_code == 2
    [line] = [x for x in r.stderr.splitlines() if x.startswith("error:")]
    assert "did not answer within 1.5s" in line


def test_every_plan_call_is_bounded(server: LLMTestServer):
    from dagagent.llm import ScriptedLLM
    from dagagent.planners import LLMPlanner

    server.push(answer(PLAN), answer(PLAN))
    assert plan_cli(server).exit_code == 0
    r = plan_cli(server, "--max-tokens", "900")
    assert r.exit_code == 0, r.output
    derived, given = (request.json for request in server.requests)
    assert derived["max_tokens"] == LLMPlanner(ScriptedLLM(), demo).output_limit()
    assert given["max_tokens"] == 900
    assert plan_cli(server, "--max-tokens", "0").exit_code == 2


def test_a_planner_prompt_and_examples_of_ones_own(server: LLMTestServer, tmp_path: Path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Plan for the weather desk. Tools:\n{tools}\nJSON only.", encoding="utf-8")
    examples = tmp_path / "examples.json"
    example = {"goal": "Weather in Oslo?", "plan": [PLAN["tasks"][0] | {"id": "oslo"}]}
    examples.write_text(json.dumps([example]), encoding="utf-8")
    server.push(answer(PLAN))
    r = plan_cli(server, "--planner-prompt", str(prompt), "--examples", str(examples))
    assert r.exit_code == 0, r.output
    system, shown_goal, shown_plan, asked = server.requests[0].json["messages"]
    assert system["content"].startswith("Plan for the weather desk. Tools:\n- get_weather(")
    assert system["content"].endswith("\nJSON only.")
    assert "Weather in Oslo?" in shown_goal["content"]
    assert json.loads(shown_plan["content"])["tasks"][0]["id"] == "oslo"
    assert GOAL in asked["content"]


def test_a_bad_prompt_or_examples_file_is_exit_2_before_any_call(
    server: LLMTestServer, tmp_path: Path
):
    bad = tmp_path / "examples.json"
    bad.write_text('[{"goal": "Fly", "plan": [{"id": "f", "tool": "fly", "args": {}}]}]')
    r = plan_cli(server, "--examples", str(bad))
    assert r.exit_code == 2
    assert "example 1 ('Fly') is not a valid plan for these tools: [unknown_tool]" in r.output
    r = plan_cli(server, "--planner-prompt", str(tmp_path / "missing.txt"))
    assert r.exit_code == 2 and "cannot read the planner prompt file" in r.output
    empty = tmp_path / "empty.txt"
    empty.write_text(" \n")
    r = plan_cli(server, "--planner-prompt", str(empty))
    assert r.exit_code == 2 and "is empty" in r.output
    assert server.requests == []


def test_a_server_without_json_schema_still_plans_and_says_so(server: LLMTestServer):
    refusal = {
        "error": {
            "code": 400,
            "message": 'response_format type must be one of "text" or "json_object", but got: '
            "json_schema",
            "type": "invalid_request_error",
        }
    }
    server.push(Reply(400, json=refusal), answer(PLAN))
    r = plan_cli(server, "--json")
    assert r.exit_code == 0, r.output
    warnings = json.loads(r.stdout)["warnings"]
    assert [w[0] for w in warnings] == ["no_response_format"]
    assert "no_response_format" in r.stderr
    assert "response_format" not in server.requests[1].json


def test_a_model_list_falls_back_and_says_which_model_planned(
    server: LLMTestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    limited = Reply(429, json=wire.openai_error("slow down"), headers={"retry-after": "0"})
    server.push(*[limited] * 4)  # the first try and its three retries
    with LLMTestServer() as second:
        second.push(Reply(json=wire.anthropic_text(json.dumps(PLAN), output_tokens=80)))
        monkeypatch.setenv("ANTHROPIC_BASE_URL", second.url)
        r = runner.invoke(
            app,
            [
                "plan",
                GOAL,
                "--model",
                "openai:test-model,anthropic:claude-test",
                "--base-url",
                server.url + "/v1",
            ],
            catch_exceptions=False,
        )
        second.check()
    assert r.exit_code == 0, r.output
    assert (
        "planned with claude-test, falling back from openai:test-model (rate limit): " in r.stdout
    )
    assert len(server.requests) == 4 and second.requests[0].path == "/v1/messages"


def test_plan_with_a_gemini_model(server: LLMTestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "AIzaSy-cli-test-key-0123456789")
    server.push(Reply(json=wire.gemini_text(json.dumps(PLAN), output_tokens=80)))
    r = runner.invoke(
        app,
        ["plan", GOAL, "--model", "gemini:test-model", "--base-url", server.url + "/v1beta"],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    assert "3 tasks in 2 levels; planned with test-model: 1 attempt, 1 call" in r.stdout
    (request,) = server.requests
    assert request.path == "/v1beta/models/test-model:streamGenerateContent?alt=sse"
    assert request.headers["x-goog-api-key"] == "AIzaSy-cli-test-key-0123456789"
    body = request.json
    assert GOAL in json.dumps(body["contents"]) and body["systemInstruction"]["parts"]
    assert body["generationConfig"]["responseMimeType"] == "application/json"
