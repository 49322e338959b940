"""How a solve calls its model: every call bounded (each role's own limit, or the one of
``model_settings``), a planner of one's own (prompt, examples), and a server without
json_schema. The model speaks the OpenAI wire format through the real client."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

import dagagent
from dagagent.limits import answer_tokens
from dagagent.llm import ModelSettings, ScriptedLLM
from dagagent.planners import LLMPlanner
from dagagent.results import SolveStatus

pytestmark = pytest.mark.anyio

GOAL = "How warm is it in Paris?"
PARIS = {"id": "paris", "tool": "get_weather", "args": {"city": "Paris"}}


@pytest.fixture
def weather() -> dagagent.Registry:
    registry = dagagent.Registry()

    @registry.tool
    def get_weather(city: str) -> dict[str, Any]:
        """Current temperature of a city."""
        return {"city": city, "temp_c": 20.0}

    return registry


def plan(*tasks: dict[str, Any]) -> str:
    return json.dumps({"goal": GOAL, "tasks": list(tasks)})


def finish(answer: str, cites: list[str]) -> str:
    return json.dumps({"action": "finish", "answer": answer, "cites": cites})


def replan(feedback: str) -> str:
    return json.dumps({"action": "replan", "feedback": feedback})


@pytest.mark.parametrize("stream", [True, False])
async def test_every_call_of_a_solve_is_bounded(weather: dagagent.Registry, stream: bool):
    llm = ScriptedLLM.openai([plan(PARIS), finish("20 C", ["paris"])])
    async with llm:
        solution = await dagagent.solve(GOAL, weather, llm, stream=stream)
    assert solution.status is SolveStatus.ANSWERED
    planned, joined = llm.wire_requests
    assert planned["max_tokens"] == LLMPlanner(llm, weather).output_limit()
    assert joined["max_tokens"] == answer_tokens()


async def test_model_settings_bound_every_role(weather: dagagent.Registry):
    agent_task = {"id": "note", "instruction": "Say how warm ${paris} is", "tools": []}
    llm = ScriptedLLM.openai(
        [plan(PARIS, agent_task), "It is 20 C.", finish("20 C", ["paris", "note"])]
    )
    settings = ModelSettings(max_tokens=321, temperature=0.0)
    async with llm:
        solution = await dagagent.solve(
            GOAL, weather, llm, model_settings=settings, agent_tasks=True
        )
    assert solution.status is SolveStatus.ANSWERED, solution.reason
    assert [(r["max_tokens"], r["temperature"]) for r in llm.wire_requests] == [(321, 0.0)] * 3
    assert solution.usage.agents.calls == 1


async def test_a_planner_of_ones_own(weather: dagagent.Registry):
    example = {"goal": "How warm is Rome?", "plan": {"tasks": [PARIS | {"id": "rome"}]}}
    example["plan"]["tasks"][0]["args"] = {"city": "Rome"}
    llm = ScriptedLLM.openai(
        [
            plan(PARIS),
            replan("and the feel of it"),
            plan(PARIS, {"id": "again", "tool": "get_weather", "args": {"city": "Paris!"}}),
            finish("20 C", ["paris"]),
        ]
    )
    own = LLMPlanner(
        llm,
        weather,
        system_prompt="Plan with these tools only:\n{tools}\nAnswer in JSON.",
        examples=[example],
        settings=ModelSettings(max_tokens=777),
    )
    async with llm:
        solution = await dagagent.solve(GOAL, weather, llm, planner=own, max_rounds=2)
    assert solution.status is SolveStatus.ANSWERED, solution.reason
    planned, joined, replanned, _ = llm.wire_requests
    system, shown_goal, shown_plan, asked = planned["messages"]
    assert system == {
        "role": "system",
        "content": "Plan with these tools only:\n- get_weather(city: string) -> dict[str, Any]\n"
        "    Current temperature of a city.\nAnswer in JSON.",
    }
    assert shown_goal["role"] == "user" and "Goal: How warm is Rome?" in shown_goal["content"]
    assert shown_plan["role"] == "assistant"
    assert json.loads(shown_plan["content"])["tasks"][0]["args"] == {"city": "Rome"}
    assert asked["role"] == "user" and GOAL in asked["content"]
    # The revision is made with the planner's settings; the joiner keeps its own limit.
    assert (planned["max_tokens"], replanned["max_tokens"]) == (777, 777)
    assert joined["max_tokens"] == answer_tokens()
    assert solution.usage.planner.calls == 2 and solution.usage.joiner.calls == 2
    assert own.last_result is None  # the user's planner is not changed by the solve


async def test_a_planner_that_does_not_fit_the_solve(weather: dagagent.Registry):
    other = dagagent.Registry()
    other.tool(lambda city: city, name="get_time")
    llm = ScriptedLLM()
    with pytest.raises(dagagent.ConfigError, match="other tools than the solve runs"):
        await dagagent.solve(GOAL, weather, llm, planner=LLMPlanner(llm, other))
    agents = LLMPlanner(llm, weather, agent_tasks=True)
    with pytest.raises(dagagent.ConfigError, match="plans agent tasks but"):
        await dagagent.solve(GOAL, weather, llm, planner=agents)
    with pytest.raises(dagagent.ConfigError, match="must be an LLMPlanner"):
        await dagagent.solve(GOAL, weather, llm, planner=object())  # type: ignore[arg-type]


_NO_JSON_SCHEMA = {
    "error": {
        "code": 400,
        "message": 'response_format type must be one of "text" or "json_object", but got: '
        "json_schema",
        "type": "invalid_request_error",
    }
}


@pytest.mark.parametrize("stream", [True, False])
async def test_a_server_without_json_schema_answers_all_the_same(
    weather: dagagent.Registry, stream: bool
):
    llm = ScriptedLLM.openai(
        [
            httpx.Response(400, json=_NO_JSON_SCHEMA),
            plan(PARIS),
            httpx.Response(400, json=_NO_JSON_SCHEMA),
            finish("20 C", ["paris"]),
        ]
    )
    async with llm:
        solution = await dagagent.solve(GOAL, weather, llm, stream=stream)
    assert solution.status is SolveStatus.ANSWERED, solution.reason
    (round_,) = solution.rounds
    assert round_.planning is not None
    assert [w.code for w in round_.planning.warnings] == ["no_response_format"]
    sent_format = ["response_format" in r for r in llm.wire_requests]
    assert sent_format == [True, False, True, False]
    # the refused request was sent, so it is a call (and a record) of its own
    assert solution.usage.planner.calls == 2 and solution.usage.joiner.calls == 2
