"""Every call of the planners and the joiner is bounded, and a server that refuses the
json_schema response format gets the prompt-described format instead, once, on the record."""

from __future__ import annotations

import json

import httpx
import pytest
from structlog.testing import capture_logs

import dagagent
from dagagent.limits import answer_tokens, call_tokens, plan_tokens
from dagagent.llm import ModelSettings, ScriptedLLM
from dagagent.planners import Joiner, LLMPlanner, LLMReplanner
from dagagent.planners.streaming import plan_and_execute_streamed
from dagagent.results import TaskResult, TaskStatus

pytestmark = pytest.mark.anyio


def plan_text(*ids: str) -> str:
    tasks = [{"id": i, "tool": "work", "args": {"name": i}} for i in ids]
    return json.dumps({"goal": "g", "tasks": tasks})


def expected_limit(registry: dagagent.Registry, max_tasks: int = 50) -> int:
    return plan_tokens(
        [call_tokens(t.name, t.parameters_schema) for t in registry], max_tasks=max_tasks
    )


# A vLLM without structured outputs, in its own words.
_NO_JSON_SCHEMA = httpx.Response(
    400,
    json={
        "object": "error",
        "message": "1 validation error for ChatCompletionRequest\nresponse_format.type\n"
        "  Input should be 'text' or 'json_object'",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
)


async def test_every_planning_call_is_bounded(registry: dagagent.Registry) -> None:
    answer = plan_text("a", "b")
    llm = ScriptedLLM([answer, answer, answer])
    planner = LLMPlanner(llm, registry)
    await planner.plan("go")
    await plan_and_execute_streamed(planner, "go", registry, max_tasks=5)
    plan = dagagent.Plan.model_validate(json.loads(answer))
    result = await dagagent.execute(plan, registry)
    await LLMReplanner(llm, registry).replan("go", plan, result.tasks)
    planned, streamed, replanned = llm.requests
    assert planned.max_tokens == planner.output_limit() == expected_limit(registry)
    assert streamed.max_tokens == planner.output_limit(5) == expected_limit(registry, 5)
    assert replanned.max_tokens == expected_limit(registry)


async def test_the_settings_limit_wins(registry: dagagent.Registry) -> None:
    answer = plan_text("a")
    llm = ScriptedLLM([answer, answer])
    planner = LLMPlanner(llm, registry, settings=ModelSettings(max_tokens=700), max_tasks=3)
    await planner.plan("go")
    await plan_and_execute_streamed(planner, "go", registry, max_tasks=9)
    assert [r.max_tokens for r in llm.requests] == [700, 700]


async def test_agent_tasks_are_given_room(registry: dagagent.Registry) -> None:
    tools_only = LLMPlanner(ScriptedLLM(), registry).output_limit()
    with_agents = LLMPlanner(ScriptedLLM(), registry, agent_tasks=True).output_limit()
    assert with_agents != tools_only


async def test_a_plan_longer_than_max_tasks_goes_back_to_the_model(
    registry: dagagent.Registry,
) -> None:
    llm = ScriptedLLM([plan_text("a", "b", "c"), plan_text("a", "b")])
    report = await LLMPlanner(llm, registry, max_tasks=2).plan_with_report("go")
    assert [t.id for t in report.plan.tasks] == ["a", "b"]
    (issue,) = report.attempts[0].issues
    assert issue.code == "too_many_tasks" and "3 tasks, more than 2" in issue.message
    assert "too_many_tasks" in llm.requests[1].messages[-1].content


async def test_bad_max_tasks_is_a_config_error(registry: dagagent.Registry) -> None:
    with pytest.raises(dagagent.ConfigError, match="max_tasks must be at least 1"):
        LLMPlanner(ScriptedLLM(), registry, max_tasks=0)


async def test_a_server_without_json_schema_gets_the_prompt_format(
    registry: dagagent.Registry,
) -> None:
    answer = plan_text("a")
    llm = ScriptedLLM.openai([_NO_JSON_SCHEMA, answer, answer])
    planner = LLMPlanner(llm, registry)
    with capture_logs() as logs:
        first = await planner.plan_with_report("go")
    second = await planner.plan_with_report("go again")
    refused, again, later = llm.wire_requests
    assert refused["response_format"]["type"] == "json_schema"
    assert "response_format" not in again and "response_format" not in later
    assert again["messages"] == refused["messages"]  # the same question, asked once more
    assert len(first.attempts) == 1  # the refusal is no attempt of the model's
    for report in (first, second):
        (warning,) = report.warnings
        assert warning.code == "no_response_format"
        assert "described in the prompt alone" in warning.message
        assert "response_format.type" in warning.message  # the server's own words
    assert [e["event"] for e in logs if e["log_level"] == "warning"].count(
        "planner.no_response_format"
    ) == 1


async def test_a_streamed_plan_falls_back_too(registry: dagagent.Registry) -> None:
    llm = ScriptedLLM.openai([_NO_JSON_SCHEMA, plan_text("a", "b")])
    planner = LLMPlanner(llm, registry)
    round_ = await plan_and_execute_streamed(planner, "go", registry)
    assert round_.result.status is dagagent.RunStatus.SUCCEEDED
    assert [w.code for w in round_.planning.warnings] == ["no_response_format"]
    assert len(round_.runs) == 1 and len(round_.planning.attempts) == 1
    assert "response_format" not in llm.wire_requests[1]
    assert planner.response_format is None


async def test_a_refused_response_format_on_a_server_that_has_none_is_an_error(
    registry: dagagent.Registry,
) -> None:
    # Without a format to drop, the 400 is the model's error, as any other.
    llm = ScriptedLLM.openai([_NO_JSON_SCHEMA])
    with pytest.raises(dagagent.LLMUnsupportedOptionError):
        await LLMPlanner(llm, registry, structured=False).plan("go")


async def test_the_joiner_is_bounded_and_falls_back(registry: dagagent.Registry) -> None:
    plan = dagagent.Plan.model_validate(json.loads(plan_text("a")))
    results = {"a": TaskResult(task_id="a", status=TaskStatus.SUCCEEDED, output=1)}
    decision = json.dumps({"action": "finish", "answer": "one", "cites": ["a"]})
    llm = ScriptedLLM.openai([_NO_JSON_SCHEMA, decision, decision])
    joiner = Joiner(llm)
    report = await joiner.join("g", plan, results)
    await joiner.join("g", plan, results)
    assert report.decision.answer == "one" and len(report.attempts) == 1
    refused, again, later = llm.wire_requests
    assert "response_format" in refused
    assert "response_format" not in again and "response_format" not in later
    assert {r["max_tokens"] for r in llm.wire_requests} == {answer_tokens()}
    short = Joiner(ScriptedLLM(), answer_chars=600)
    assert short.max_tokens == answer_tokens(600)
    assert Joiner(ScriptedLLM(), settings=ModelSettings(max_tokens=99)).max_tokens == 99
