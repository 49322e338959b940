"""Every body shape our clients send passes unchanged through the official SDKs' request types.

The bodies are captured as the clients send them, through the suite's fake servers (the real
``OpenAIChat`` / ``AnthropicChat`` over ``ScriptedLLM``'s in-memory transport), from the
model layer's calls and from the planner, the joiner and the agent. Each is validated with
pydantic against the SDK's ``CompletionCreateParams(Non)Streaming`` /
``MessageCreateParams(Non)Streaming`` TypedDict, and what comes out must equal what went
in: pydantic drops keys a TypedDict does not declare and converts values it can, so an
unknown key, a misplaced one or a value of another type shows as a difference.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, get_type_hints

import httpx
import pytest
from pydantic import TypeAdapter, ValidationError

import dagagent
from dagagent.agent import ReActAgent
from dagagent.llm import (
    AssistantMessage,
    ModelSettings,
    ResponseFormat,
    ScriptedLLM,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
    collect_stream,
    wire,
)
from dagagent.planners import Joiner, LLMPlanner
from dagagent.results import TaskResult, TaskStatus
from dagagent.toolkits.demo import registry as demo

openai_params = pytest.importorskip("openai.types.chat.completion_create_params")
anthropic_params = pytest.importorskip("anthropic.types.message_create_params")

pytestmark = pytest.mark.anyio

OPENAI = {
    False: TypeAdapter(openai_params.CompletionCreateParamsNonStreaming),
    True: TypeAdapter(openai_params.CompletionCreateParamsStreaming),
}
ANTHROPIC = {
    False: TypeAdapter(anthropic_params.MessageCreateParamsNonStreaming),
    True: TypeAdapter(anthropic_params.MessageCreateParamsStreaming),
}
# The Anthropic SDK 2.x speaks API version 2026-10-21, which has no sampling parameters
# (temperature, top_p, top_k: a 400 there). dagagent speaks 2023-06-01, which takes a
# temperature (on the models that still have one): the one key of ours the newer request
# type does not declare. Anything else unknown fails.
_DECLARED = get_type_hints(anthropic_params.MessageCreateParamsBase)
ANTHROPIC_WITHOUT = frozenset() if "temperature" in _DECLARED else frozenset({"temperature"})


def settled(value: Any) -> Any:
    """``value`` with every lazily validated iterable (the SDKs type lists as ``Iterable``)
    read into a list, so that all of it is validated and can be compared."""
    if isinstance(value, Mapping):
        return {k: settled(v) for k, v in value.items()}
    if isinstance(value, (str, bytes)):
        return value
    if isinstance(value, Iterable):
        return [settled(v) for v in value]
    return value


def assert_sdk_takes(
    body: dict[str, Any],
    adapters: dict[bool, TypeAdapter[Any]],
    *,
    undeclared: frozenset[str] = frozenset(),
) -> None:
    """``body`` validates and comes out unchanged (but for the top-level keys ``undeclared``:
    known differences of API versions, see ``ANTHROPIC_WITHOUT``)."""
    try:
        validated = settled(adapters[bool(body.get("stream"))].validate_python(body))
    except ValidationError as exc:
        raise AssertionError(f"the SDK refuses the body: {exc}\n{json.dumps(body)[:2000]}") from exc
    expected = {k: v for k, v in body.items() if k not in undeclared}
    assert validated == expected, "the SDK's request type changes the body (an unknown key?)"


def check_all(llm: ScriptedLLM, adapters: dict[bool, TypeAdapter[Any]]) -> None:
    assert llm.wire_requests
    undeclared = ANTHROPIC_WITHOUT if adapters is ANTHROPIC else frozenset()
    for body in llm.wire_requests:
        assert_sdk_takes(body, adapters, undeclared=undeclared)


TOOLS = [
    ToolSpec("get_weather", "Weather of a city", {"type": "object", "properties": {"city": {}}}),
    ToolSpec("get_time", "Local time", {"type": "object", "properties": {"tz": {}}}),
]
HISTORY = [
    SystemMessage("Be brief."),
    UserMessage("Weather and time in Paris?"),
    AssistantMessage(
        "Looking.",
        [
            ToolCall(id="c1", name="get_weather", arguments={"city": "Paris"}),
            ToolCall.from_raw("c2", "get_time", "{not json"),
        ],
    ),
    ToolResultMessage("c1", '{"temp_c": 18}'),
    ToolResultMessage("c2", "arguments are not JSON", is_error=True),
]
STRICT = ResponseFormat(
    "answer",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
)
LOOSE = ResponseFormat("answer", {"type": "array", "items": {"type": "string"}}, strict=False)

# One call of the model layer per body shape: (name, options of complete/stream).
SHAPES: list[tuple[str, dict[str, Any]]] = [
    ("text", {"stop": ["END"], "temperature": 0.2, "max_tokens": 50}),
    ("tools", {"tools": TOOLS}),
    ("tool_choice auto", {"tools": TOOLS, "tool_choice": "auto"}),
    ("tool_choice none", {"tools": TOOLS, "tool_choice": "none"}),
    ("tool_choice required", {"tools": TOOLS, "tool_choice": "required"}),
    ("tool_choice named", {"tools": TOOLS, "tool_choice": "get_time"}),
    ("one call at a time", {"tools": TOOLS, "parallel_tool_calls": False}),
    ("calls in parallel", {"tools": TOOLS, "parallel_tool_calls": True}),
    ("named, one call", {"tools": TOOLS, "tool_choice": "get_time", "parallel_tool_calls": False}),
    ("strict format", {"response_format": STRICT}),
    ("non-strict format", {"response_format": LOOSE}),
    ("format and tools", {"response_format": STRICT, "tools": TOOLS}),
]


def _answer(shape: str, wire_format: str) -> dict[str, Any]:
    if "format" in shape and wire_format == "anthropic":
        return wire.anthropic_tool_use([("answer", {"city": "Paris"})])
    if wire_format == "anthropic":
        return wire.anthropic_text('{"city": "Paris"}')
    return wire.openai_text('{"city": "Paris"}')


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(("shape", "options"), SHAPES, ids=[s for s, _ in SHAPES])
@pytest.mark.parametrize("wire_format", ["openai", "anthropic"])
async def test_each_body_shape(
    wire_format: str, shape: str, options: dict[str, Any], stream: bool
) -> None:
    make = ScriptedLLM.openai if wire_format == "openai" else ScriptedLLM.anthropic
    async with make([_answer(shape, wire_format)]) as llm:
        if stream:
            await collect_stream(llm.stream(HISTORY, **options))
        else:
            await llm.complete(HISTORY, **options)
    body = llm.wire_requests[0]
    if stream and wire_format == "openai":
        assert body["stream_options"] == {"include_usage": True}
    check_all(llm, OPENAI if wire_format == "openai" else ANTHROPIC)


@pytest.mark.parametrize("model", ["gpt-4o-mini", "o3-mini", "gpt-5"])
async def test_max_tokens_and_max_completion_tokens(model: str) -> None:
    async with ScriptedLLM.openai([wire.openai_text("ok")], model=model) as llm:
        await llm.complete("hi", max_tokens=100)
    field = "max_tokens" if model == "gpt-4o-mini" else "max_completion_tokens"
    assert field in llm.wire_requests[0]
    check_all(llm, OPENAI)


async def test_the_body_asked_again_with_max_completion_tokens() -> None:
    refused = {
        "error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "unsupported_parameter",
        }
    }
    script = [httpx.Response(400, json=refused), wire.openai_text("ok")]
    async with ScriptedLLM.openai(script, model="my-deployment") as llm:
        await llm.complete("hi", max_tokens=100)
    assert "max_completion_tokens" in llm.wire_requests[1]
    check_all(llm, OPENAI)


# ---------------------------------------------------------------------------- the roles

Role = Callable[[ScriptedLLM], Awaitable[Any]]


async def _planner(llm: ScriptedLLM) -> Any:
    return await LLMPlanner(llm, demo, examples=[EXAMPLE]).plan("Weather in Paris?")


async def _streamed_planner(llm: ScriptedLLM) -> Any:
    from dagagent.planners.streaming import plan_and_execute_streamed

    return await plan_and_execute_streamed(LLMPlanner(llm, demo), "Weather in Paris?", demo)


async def _joiner(llm: ScriptedLLM) -> Any:
    results = {"p": TaskResult(task_id="p", status=TaskStatus.SUCCEEDED, output={"temp_c": 18})}
    return await Joiner(llm).join("Weather in Paris?", PLAN, results)


async def _agent(llm: ScriptedLLM) -> Any:
    settings = ModelSettings(tool_choice="required", parallel_tool_calls=False)
    return await ReActAgent(llm, demo, settings=settings).run("Weather in Paris?", {"x": 1})


PLAN = dagagent.Plan.model_validate(
    {"goal": "Weather in Paris?", "tasks": [{"id": "p", "tool": "get_weather", "args": {}}]}
)
EXAMPLE = {
    "goal": "Weather in Oslo?",
    "plan": [{"id": "o", "tool": "get_weather", "args": {"city": "Oslo"}}],
}
PLAN_TEXT = json.dumps({"tasks": [{"id": "p", "tool": "get_weather", "args": {"city": "Paris"}}]})
DECISION = {"action": "finish", "answer": "18 C", "cites": ["p"]}


def _role_script(role: str, wire_format: str) -> list[Any]:
    openai = wire_format == "openai"
    if role in ("planner", "streamed planner"):
        if openai:
            return [wire.openai_text(PLAN_TEXT)]
        return [wire.anthropic_tool_use([("dagagent_plan", json.loads(PLAN_TEXT))])]
    if role == "joiner":
        if openai:
            return [wire.openai_text(json.dumps(DECISION))]
        return [wire.anthropic_tool_use([("join_decision", DECISION)])]
    call = ("get_weather", {"city": "Paris"})
    if openai:
        return [wire.openai_tool_calls([call]), wire.openai_text("18 C")]
    return [wire.anthropic_tool_use([call]), wire.anthropic_text("18 C")]


ROLES: dict[str, Role] = {
    "planner": _planner,
    "streamed planner": _streamed_planner,
    "joiner": _joiner,
    "agent": _agent,
}


@pytest.mark.parametrize("role", list(ROLES))
@pytest.mark.parametrize("wire_format", ["openai", "anthropic"])
async def test_what_the_roles_send(wire_format: str, role: str) -> None:
    make = ScriptedLLM.openai if wire_format == "openai" else ScriptedLLM.anthropic
    async with make(_role_script(role, wire_format)) as llm:
        await ROLES[role](llm)
    check_all(llm, OPENAI if wire_format == "openai" else ANTHROPIC)


async def test_a_difference_is_caught() -> None:
    # The check itself: an unknown key, or a value the SDK would convert, fails.
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert_sdk_takes(body, OPENAI)
    with pytest.raises(AssertionError, match="changes the body"):
        assert_sdk_takes({**body, "max_tokenz": 5}, OPENAI)
    with pytest.raises(AssertionError, match="changes the body"):
        assert_sdk_takes({**body, "messages": [{"role": "user", "content": "hi", "x": 1}]}, OPENAI)
    with pytest.raises(AssertionError, match="refuses"):
        assert_sdk_takes({**body, "tool_choice": {"type": "any"}}, OPENAI)
    anthropic_body = {"model": "m", "max_tokens": 5, "messages": body["messages"]}
    assert_sdk_takes(anthropic_body, ANTHROPIC)
    with pytest.raises(AssertionError):
        assert_sdk_takes({**anthropic_body, "parallel_tool_calls": False}, ANTHROPIC)
    with pytest.raises(AssertionError):  # only the known difference is let through
        assert_sdk_takes({**anthropic_body, "top_k": 5}, ANTHROPIC, undeclared=ANTHROPIC_WITHOUT)
