"""The ReAct agent against scripted models that repeat themselves, name tools in the wrong
case or send arguments no one can store, in both modes and both wire formats."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dagagent import Registry
from dagagent.agent import AgentState, Budget, ReActAgent
from dagagent.llm import LLMResponse, ScriptedLLM, ToolCall, ToolResultMessage, wire

pytestmark = pytest.mark.anyio


@pytest.fixture
def made() -> list[tuple[str, Any]]:
    return []


@pytest.fixture
def tools(made: list[tuple[str, Any]]) -> Registry:
    reg = Registry()

    @reg.tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        made.append(("add", (a, b)))
        return a + b

    @reg.tool
    async def weather(city: str, unit: str = "C") -> str:
        """Weather in a city."""
        made.append(("weather", city))
        return f"20 {unit} in {city}"

    @reg.tool
    def echo(x: Any) -> str:
        """Echo anything."""
        made.append(("echo", None))
        return "echoed"

    return reg


def turn(*calls: tuple[str, dict[str, Any]]) -> LLMResponse:
    return LLMResponse(
        tool_calls=[ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls)]
    )


# ---------------------------------------------------------------------------- loops


async def test_trivially_different_arguments_are_the_same_call(
    tools: Registry, made: list[tuple[str, Any]]
) -> None:
    # 1, 1.0 and "1" are all the int 1 for the tool: the third such call is a loop
    script = [
        turn(("add", {"a": 1, "b": 2})),
        turn(("add", {"b": 2, "a": 1.0})),
        turn(("add", {"a": "1", "b": "2"})),
    ]
    with ScriptedLLM(script) as llm:
        result = await ReActAgent(llm, tools).run("add")
    assert result.stop_reason == "loop" and len(result.steps) == 3
    assert made == [("add", (1, 2))] * 2  # the third was not made


async def test_bare_and_object_inputs_are_the_same_call_in_text_mode(
    tools: Registry, made: list[tuple[str, Any]]
) -> None:
    script = [
        "Action: weather\nAction Input: Paris",
        'Action: weather\nAction Input: {"city": "Paris", "unit": "C"}',
        "Action: weather[Paris]",
    ]
    with ScriptedLLM(script) as llm:
        result = await ReActAgent(llm, tools, mode="text").run("weather")
    assert result.stop_reason == "loop" and made == [("weather", "Paris")] * 2


async def test_alternating_calls_are_caught(tools: Registry) -> None:
    a, b = ("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2})
    with ScriptedLLM([turn(a), turn(b), turn(a), turn(b), turn(a)]) as llm:
        result = await ReActAgent(llm, tools, budget=Budget(max_steps=20)).run("loop")
    assert result.stop_reason == "loop" and len(result.steps) == 5
    assert result.detail == 'stuck: asked for add({"a": 1, "b": 1}) 3 times'


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_twenty_identical_calls_in_one_turn_are_not_a_loop(
    provider: str, tools: Registry, made: list[tuple[str, Any]]
) -> None:
    calls = [("weather", {"city": "Paris"})] * 20
    if provider == "openai":
        script = [wire.openai_tool_calls(calls), wire.openai_text("20 C")]
        llm = ScriptedLLM.openai(script)
    else:
        script = [wire.anthropic_tool_use(calls), wire.anthropic_text("20 C")]
        llm = ScriptedLLM.anthropic(script)
    async with llm:
        result = await ReActAgent(llm, tools).run("weather")
    assert (result.stop_reason, result.answer) == ("answer", "20 C")
    assert len(made) == 20
    assert [c.observation for c in result.steps[0].calls] == ["20 C in Paris"] * 20


async def test_a_call_repeated_over_turns_is_still_a_loop_when_duplicated_in_a_turn(
    tools: Registry,
) -> None:
    paris = ("weather", {"city": "Paris"})
    with ScriptedLLM([turn(paris, paris), turn(paris), turn(paris, paris)]) as llm:
        result = await ReActAgent(llm, tools).run("weather")
    assert result.stop_reason == "loop" and len(result.steps) == 3


# ---------------------------------------------------------------------------- names


async def test_tool_named_in_another_case(tools: Registry) -> None:
    script = ['Action: Add\nAction Input: {"a": 1, "b": 2}', "Final Answer: 3"]
    with ScriptedLLM(script) as llm:
        result = await ReActAgent(llm, tools, mode="text").run("add")
    assert result.steps[0].calls[0].observation == "3"
    with ScriptedLLM([turn(("WEATHER", {"city": "Oslo"})), "ok"]) as llm:
        result = await ReActAgent(llm, tools).run("weather")
    assert result.steps[0].calls[0].observation == "20 C in Oslo"


async def test_case_is_not_folded_when_two_tools_differ_only_by_case() -> None:
    reg = Registry()

    @reg.tool(name="Find")
    def find_a(q: str) -> str:
        """One."""
        return "A"

    @reg.tool(name="find")
    def find_b(q: str) -> str:
        """Two."""
        return "B"

    script = [turn(("FIND", {"q": "x"}), ("find", {"q": "x"})), "done"]
    with ScriptedLLM(script) as llm:
        result = await ReActAgent(llm, reg).run("find")
    first, second = result.steps[0].calls
    assert first.is_error and "unknown tool 'FIND'" in (first.observation or "")
    assert second.observation == "B"


# ---------------------------------------------------------------------------- deep arguments

DEEP = "[" * 500 + "]" * 500


@pytest.mark.parametrize("provider", ["openai", "anthropic", "text"])
async def test_arguments_nested_too_deeply_are_an_observation(
    provider: str, tools: Registry, made: list[tuple[str, Any]]
) -> None:
    raw = '{"x": ' + DEEP + "}"
    if provider == "openai":
        llm = ScriptedLLM.openai([wire.openai_tool_calls([("echo", raw)]), wire.openai_text("ok")])
    elif provider == "anthropic":
        llm = ScriptedLLM.anthropic(
            [wire.anthropic_tool_use([("echo", raw)]), wire.anthropic_text("ok")]
        )
    else:
        llm = ScriptedLLM([f"Action: echo\nAction Input: {raw}", "Final Answer: ok"])
    agent = ReActAgent(llm, tools, mode="text" if provider == "text" else "tools")
    async with llm:
        result = await agent.run("echo")
    assert result.answer == "ok" and made == []
    (record,) = result.steps[0].calls
    assert record.is_error and "nested more than 64 levels deep" in (record.observation or "")
    json.dumps(result.steps_json())  # what a plan node keeps, and the store records
    saved = agent.state.model_dump_json() if agent.state else ""
    assert AgentState.model_validate_json(saved).finished  # the checkpoint still works
    if provider == "openai":  # the history sent back holds no deep arguments either
        sent = llm.wire_requests[1]["messages"][-2]["tool_calls"][0]["function"]
        assert sent["arguments"] == "{}"


async def test_shallow_arguments_are_kept_as_written(tools: Registry) -> None:
    nested = json.loads("[" * 60 + "]" * 60)
    with ScriptedLLM([turn(("echo", {"x": nested})), "ok"]) as llm:
        result = await ReActAgent(llm, tools).run("echo")
    assert result.steps[0].calls[0].args == {"x": nested}
    assert result.steps[0].calls[0].observation == "echoed"
    (msg,) = [m for m in llm.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert not msg.is_error


# ---------------------------------------------------------------------------- call ids


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_call_ids_reused_across_turns_are_made_unique(provider: str, tools: Registry) -> None:
    # Servers that number each reply's calls from the start again ("call_1" every turn):
    # the Messages API refuses a history whose tool_use ids repeat (HTTP 400).
    one, two = ("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2})
    if provider == "openai":
        script = [wire.openai_tool_calls([one]), wire.openai_tool_calls([two])]
        llm = ScriptedLLM.openai([*script, wire.openai_text("done")])
    else:
        script = [wire.anthropic_tool_use([one]), wire.anthropic_tool_use([two])]
        llm = ScriptedLLM.anthropic([*script, wire.anthropic_text("done")])
    async with llm:
        result = await ReActAgent(llm, tools).run("add twice")
    assert result.answer == "done"
    ids = [c.id for s in result.steps for c in s.calls]
    assert len(set(ids)) == 2 and ids[0] == ("call_1" if provider == "openai" else "toolu_1")
    history = llm.wire_requests[-1]["messages"]
    if provider == "openai":
        asked = [c["id"] for m in history for c in m.get("tool_calls") or []]
        answered = [m["tool_call_id"] for m in history if m["role"] == "tool"]
    else:
        blocks = [b for m in history if isinstance(m["content"], list) for b in m["content"]]
        asked = [b["id"] for b in blocks if b["type"] == "tool_use"]
        answered = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
    assert asked == answered == ids
