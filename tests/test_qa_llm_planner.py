"""Planner answers a small model really gives: values JSON has no words for, text that is
not Unicode, plans delivered as a tool call."""

from __future__ import annotations

import json

import pytest

import dagagent
from dagagent.llm import LLMResponse, ScriptedLLM, ToolCall
from dagagent.planners import LLMPlanner
from dagagent.planners.heal import parse_plan_answer
from dagagent.toolkits.demo import registry as demo

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


GOOD = {"tasks": [{"id": "p", "tool": "get_weather", "args": {"city": "Paris"}}]}


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        ('{"tasks":[{"id":"c","tool":"compare","args":{"a":NaN,"b":1}}]}', "NaN"),
        ('{"tasks":[{"id":"c","tool":"compare","args":{"a":Infinity,"b":1}}]}', "Infinity"),
        ('{"tasks":[{"id":"p","tool":"sleep","args":{"seconds":-Infinity}}]}', "-Infinity"),
        ('{"tasks":[{"id":"p","tool":"get_weather","args":{"city":"\\ud800"}}]}', "U+D800"),
        ('{"tasks":[{"id":"p","tool":"get_weather","args":{"\\udfff":"x"}}]}', "U+DFFF"),
        ('{"tasks":[{"id":"p","tool":"get_weather","args":{"city":"\ud800"}}]}', "U+D800"),
    ],
)
def test_values_a_plan_cannot_carry_are_sent_back(answer: str, says: str):
    graph, issues = parse_plan_answer(answer, demo, goal="g")
    assert graph is None
    assert [i.code for i in issues] == ["not_json"]
    assert says in issues[0].message


def test_a_surrogate_pair_is_one_character_and_fine():
    answer = '{"tasks":[{"id":"p","tool":"get_weather","args":{"city":"\\ud83d\\ude00"}}]}'
    graph, issues = parse_plan_answer(answer, demo, goal="g")
    assert issues == [] and graph is not None
    assert json.loads(graph.plan.to_json())["tasks"][0]["args"]["city"] == "\U0001f600"


async def test_the_accepted_plan_always_serializes():
    bad = '{"tasks":[{"id":"p","tool":"get_weather","args":{"city":"\\udc00"}}]}'
    llm = ScriptedLLM([bad, json.dumps(GOOD)])
    report = await LLMPlanner(llm, demo).plan_with_report("weather")
    assert [a.ok for a in report.attempts] == [False, True]
    assert "U+DC00" in llm.requests[1].messages[-1].content  # the feedback names it
    report.plan.to_json()


async def test_a_plan_delivered_as_a_tool_call_is_read():
    call = ToolCall.from_raw("call_1", "dagagent_plan", json.dumps(GOOD))
    llm = ScriptedLLM([LLMResponse(tool_calls=[call], finish_reason="tool_calls")])
    report = await LLMPlanner(llm, demo).plan_with_report("weather in Paris")
    assert [t.id for t in report.plan.tasks] == ["p"]


async def test_a_broken_tool_call_goes_back_as_text_not_as_a_dangling_call():
    call = ToolCall.from_raw("call_1", "json", '{"tasks": [')
    llm = ScriptedLLM([LLMResponse(tool_calls=[call]), json.dumps(GOOD)])
    report = await LLMPlanner(llm, demo).plan_with_report("weather in Paris")
    assert [i.code for i in report.attempts[0].issues] == ["truncated"]
    echoed = llm.requests[1].messages[-2]
    assert echoed.role == "assistant" and echoed.content == '{"tasks": ['
    assert not echoed.tool_calls  # a call without a result would be refused by the server


def test_null_for_an_optional_argument_that_cannot_be_null_means_the_default():
    answer = {
        "tasks": [
            {"id": "a", "tool": "compare", "args": {"a": 1, "b": 2, "label_a": None}},
            {"id": "s", "tool": "sleep", "args": {"seconds": 0, "value": None}},
        ]
    }
    graph, issues = parse_plan_answer(json.dumps(answer), demo, goal="g")
    assert issues == [] and graph is not None
    assert graph.plan.tasks[0].args == {"a": 1, "b": 2}
    assert graph.plan.tasks[1].args == {"seconds": 0, "value": None}  # null is a value here


def test_null_for_a_required_argument_is_still_reported():
    answer = {"tasks": [{"id": "a", "tool": "compare", "args": {"a": None, "b": 2}}]}
    graph, issues = parse_plan_answer(json.dumps(answer), demo, goal="g")
    assert graph is None and [(i.code, i.task_id) for i in issues] == [("bad_arguments", "a")]


def test_nullable_optional_keeps_its_null():
    reg = dagagent.Registry()

    @reg.tool
    def pick(x: int, unit: str | None = "C", n: int | None = None) -> int:
        """Pick."""
        return x

    answer = {"tasks": [{"id": "p", "tool": "pick", "args": {"x": 1, "unit": None, "n": None}}]}
    graph, issues = parse_plan_answer(json.dumps(answer), reg, goal="g")
    assert issues == [] and graph is not None
    assert graph.plan.tasks[0].args == {"x": 1, "unit": None, "n": None}
