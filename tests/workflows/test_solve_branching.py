"""A solve with conditional tasks and guardrails: the joiner sees what a condition skipped and
why, apart from failures; a tool's ``max_calls`` holds across the solve's rounds."""

from __future__ import annotations

import json
from typing import Any

import pytest

import dagagent
from dagagent.llm import ScriptedLLM, wire
from dagagent.results import SolveStatus, TaskStatus

pytestmark = pytest.mark.anyio

GOAL = "Should I take an umbrella in Paris?"


def registry(calls: list[str]) -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool(max_calls=2)
    def get_weather(city: str) -> dict[str, Any]:
        """Current weather of a city.

        Args:
            city: City name.
        """
        calls.append(city)
        if city == "Atlantis":
            raise LookupError("no weather for 'Atlantis'")
        return {"city": city, "condition": "cloudy"}

    @reg.tool
    def advise(text: str) -> str:
        """Say something."""
        return text

    return reg


def openai(*answers: str) -> ScriptedLLM:
    return ScriptedLLM.openai([wire.openai_text(a) for a in answers])


def plan(*tasks: dict[str, Any]) -> str:
    return json.dumps({"tasks": list(tasks)})


def finish(answer: str, cites: list[str]) -> str:
    return json.dumps({"action": "finish", "answer": answer, "cites": cites})


@pytest.mark.parametrize("stream", [False, True])
async def test_the_joiner_sees_what_a_condition_skipped_and_why(stream: bool) -> None:
    calls: list[str] = []
    umbrella = {
        "id": "umbrella",
        "tool": "advise",
        "args": {"text": "take an umbrella"},
        "when": "${paris.condition} == 'rain'",
    }
    llm = openai(
        plan({"id": "paris", "tool": "get_weather", "args": {"city": "Paris"}}, umbrella),
        finish("No umbrella: it is cloudy.", ["paris"]),
    )
    async with llm:
        solution = await dagagent.solve(GOAL, registry(calls), llm, stream=stream)
    assert solution.status is SolveStatus.ANSWERED, solution
    (rnd,) = solution.rounds
    assert rnd.result is not None and rnd.result.ok
    assert rnd.result.tasks["umbrella"].skipped_by_condition
    join_prompt = llm.wire_requests[1]["messages"][-1]["content"]
    assert (
        "These tasks were skipped because their condition ('when') was false, as the plan "
        "said:\n- umbrella: <error>condition \"${paris.condition} == 'rain'\" is false: "
        '${paris.condition} = "cloudy"</error>'
    ) in join_prompt
    assert "did not finish" not in join_prompt and "failed" not in join_prompt
    # the planner was told about 'when'
    assert '"when"' in llm.wire_requests[0]["messages"][0]["content"]


async def test_max_calls_holds_across_the_rounds_of_a_solve() -> None:
    calls: list[str] = []
    llm = openai(
        plan(
            {"id": "paris", "tool": "get_weather", "args": {"city": "Paris"}},
            {"id": "there", "tool": "get_weather", "args": {"city": "Atlantis"}},
        ),
        json.dumps({"action": "replan", "feedback": "Atlantis is not a city: try Tokyo"}),
        plan(
            {"id": "paris", "tool": "get_weather", "args": {"city": "Paris"}},
            {"id": "tokyo", "tool": "get_weather", "args": {"city": "Tokyo"}},
        ),
    )
    async with llm:
        solution = await dagagent.solve(GOAL, registry(calls), llm, stream=False, max_rounds=2)
    # round 2 made no new success (its new task was refused): the solve gives up
    assert solution.status is SolveStatus.GAVE_UP
    _, second = solution.rounds
    assert second.result is not None
    assert second.result.tasks["paris"].status is TaskStatus.REUSED  # reused: no call
    tokyo = second.result.tasks["tokyo"]
    assert tokyo.status is TaskStatus.FAILED and tokyo.error_type == "ToolLimitError"
    assert tokyo.error == (
        "tool 'get_weather' may be called at most 2 times in a solve (max_calls=2) and was "
        "called 2 times"
    )
    assert sorted(calls) == ["Atlantis", "Paris"]  # the two ran side by side, in any order
