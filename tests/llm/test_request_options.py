"""The request options that control the model, on both wire formats, against the loopback
server: ``tool_choice``, ``parallel_tool_calls``, the output limit (``max_tokens`` or
``max_completion_tokens``), and the 400s of servers that do not take an option."""

from __future__ import annotations

from typing import Any

import pytest
from llm_server import (
    ANTHROPIC,
    OPENAI,
    PLAN_SCHEMA,
    TOOLS,
    LLMTestServer,
    Reply,
    events_of,
    quick_retries,
)

from dagagent.errors import ConfigError, LLMBadRequestError, LLMUnsupportedOptionError
from dagagent.llm import (
    AnthropicChat,
    ModelSettings,
    OpenAIChat,
    ResponseFormat,
    StreamEnd,
    collect_stream,
    wire,
)
from dagagent.llm.settings import DEFAULT_REASONING_TOKENS

pytestmark = pytest.mark.anyio


def openai(
    server: LLMTestServer, model: str = "test-model", settings: ModelSettings | None = None
) -> OpenAIChat:
    return OpenAIChat(model, base_url=server.url + "/v1", settings=quick_retries(settings))


def anthropic(server: LLMTestServer, **options: Any) -> AnthropicChat:
    llm = ANTHROPIC.client(server, **options)
    assert isinstance(llm, AnthropicChat)
    return llm


# ---------------------------------------------------------------------------- tool_choice


@pytest.mark.parametrize(
    ("choice", "openai_json", "anthropic_json"),
    [
        ("auto", "auto", {"type": "auto"}),
        ("none", "none", {"type": "none"}),
        ("required", "required", {"type": "any"}),
        (
            "get_time",
            {"type": "function", "function": {"name": "get_time"}},
            {"type": "tool", "name": "get_time"},
        ),
    ],
)
async def test_tool_choice_on_both_wires(
    server: LLMTestServer, choice: str, openai_json: Any, anthropic_json: Any
):
    server.push(Reply(json=wire.openai_text("ok")), Reply(json=wire.anthropic_text("ok")))
    await openai(server).complete("hi", tools=TOOLS, tool_choice=choice)
    await anthropic(server).complete("hi", tools=TOOLS, tool_choice=choice)
    sent_openai, sent_anthropic = (r.json for r in server.requests)
    assert sent_openai["tool_choice"] == openai_json
    assert "parallel_tool_calls" not in sent_openai
    assert sent_anthropic["tool_choice"] == anthropic_json


async def test_one_call_at_a_time_on_both_wires(server: LLMTestServer):
    server.push(
        Reply(json=wire.openai_text("ok")),
        Reply(json=wire.anthropic_text("ok")),
        Reply(json=wire.anthropic_text("ok")),
        Reply(json=wire.anthropic_text("ok")),
    )
    await openai(server).complete("hi", tools=TOOLS, parallel_tool_calls=False)
    llm = anthropic(server)
    await llm.complete("hi", tools=TOOLS, parallel_tool_calls=False)
    await llm.complete("hi", tools=TOOLS, tool_choice="get_time", parallel_tool_calls=False)
    await llm.complete("hi", tools=TOOLS, tool_choice="none", parallel_tool_calls=False)
    sent = [r.json for r in server.requests]
    assert sent[0]["parallel_tool_calls"] is False and "tool_choice" not in sent[0]
    assert sent[1]["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert sent[2]["tool_choice"] == {
        "type": "tool",
        "name": "get_time",
        "disable_parallel_tool_use": True,
    }
    assert sent[3]["tool_choice"] == {"type": "none"}  # no tool at all: nothing to disable


async def test_without_tools_there_is_no_choice_to_send(server: LLMTestServer):
    settings = ModelSettings(tool_choice="required", parallel_tool_calls=False)
    server.push(Reply(json=wire.openai_text("ok")), Reply(json=wire.anthropic_text("ok")))
    await openai(server, settings=settings).complete("hi")
    await anthropic(server, settings=settings).complete("hi")
    for request in server.requests:
        assert "tool_choice" not in request.json and "parallel_tool_calls" not in request.json


async def test_the_settings_choose_for_every_call_that_does_not(server: LLMTestServer):
    settings = ModelSettings(tool_choice="required", parallel_tool_calls=False)
    server.push(*(Reply(json=wire.openai_text("ok")) for _ in range(2)))
    llm = openai(server, settings=settings)
    await llm.complete("hi", tools=TOOLS)
    await llm.complete("hi", tools=TOOLS, tool_choice="auto", parallel_tool_calls=True)
    first, second = (r.json for r in server.requests)
    assert (first["tool_choice"], first["parallel_tool_calls"]) == ("required", False)
    assert (second["tool_choice"], second["parallel_tool_calls"]) == ("auto", True)


async def test_a_structured_answer_on_anthropic_keeps_its_forced_tool(server: LLMTestServer):
    server.push(Reply(json=wire.anthropic_tool_use([("response", {"tasks": []})])))
    llm = anthropic(server)
    fmt = ResponseFormat("response", PLAN_SCHEMA)
    await llm.complete("hi", tools=TOOLS, response_format=fmt, parallel_tool_calls=False)
    assert server.requests[0].json["tool_choice"] == {
        "type": "any",
        "disable_parallel_tool_use": True,
    }


@pytest.mark.parametrize("flavor", ["openai", "anthropic"])
async def test_a_tool_choice_naming_no_offered_tool_is_refused_before_sending(
    server: LLMTestServer, flavor: str
):
    llm = openai(server) if flavor == "openai" else anthropic(server)
    with pytest.raises(ConfigError, match=r"tool_choice 'get_wether' .* \(offered: 'get_weather'"):
        await llm.complete("hi", tools=TOOLS, tool_choice="get_wether")
    with pytest.raises(ConfigError, match="names no tool offered"):
        await collect_stream(llm.stream("hi", tool_choice="get_time"))
    assert server.requests == []


# ---------------------------------------------------------------------------- output limit


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ("gpt-4o-mini", "max_tokens"),
        ("gpt-4.1", "max_tokens"),
        ("llama3.1", "max_tokens"),
        ("omni-moderation", "max_tokens"),
        ("o1", "max_completion_tokens"),
        ("o1-mini", "max_completion_tokens"),
        ("o3-mini-2025-01-31", "max_completion_tokens"),
        ("o4-mini", "max_completion_tokens"),
        ("gpt-5", "max_completion_tokens"),
        ("gpt-5-mini", "max_completion_tokens"),
        ("gpt-5.1", "max_completion_tokens"),
        ("openai/o3", "max_completion_tokens"),
    ],
)
async def test_the_output_limit_goes_by_model_family(server: LLMTestServer, model: str, field: str):
    server.push(Reply(json=wire.openai_text("ok")))
    await openai(server, model).complete("hi", max_tokens=300)
    sent = server.requests[0].json
    other = {"max_tokens", "max_completion_tokens"} - {field}
    assert not other & sent.keys()
    expected = 300 if field == "max_tokens" else 300 + DEFAULT_REASONING_TOKENS
    assert sent[field] == expected


async def test_a_reasoning_model_thinks_within_reasoning_tokens(server: LLMTestServer):
    server.push(Reply(json=wire.openai_text("ok")))
    llm = openai(server, "o3-mini", settings=ModelSettings(reasoning_tokens=2_000))
    await llm.complete("hi", max_tokens=300)
    assert server.requests[0].json["max_completion_tokens"] == 2_300


_REFUSED_MAX_TOKENS = {
    "error": {
        "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead.",
        "type": "invalid_request_error",
        "param": "max_tokens",
        "code": "unsupported_parameter",
    }
}


async def test_a_refused_max_tokens_is_asked_again_as_max_completion_tokens(
    server: LLMTestServer,
):
    server.push(
        Reply(400, json=_REFUSED_MAX_TOKENS),
        Reply(json=wire.openai_text("first")),
        Reply(json=wire.openai_text("second")),
    )
    llm = openai(server, "my-deployment", settings=ModelSettings(reasoning_tokens=1_000))
    assert (await llm.complete("hi", max_tokens=50)).content == "first"
    assert (await llm.complete("hi", max_tokens=60)).content == "second"
    refused, again, later = (r.json for r in server.requests)
    assert refused["max_tokens"] == 50
    assert "max_tokens" not in again and again["max_completion_tokens"] == 1_050
    assert "max_tokens" not in later and later["max_completion_tokens"] == 1_060
    assert llm.max_tokens_field == "max_completion_tokens"


async def test_a_refused_max_tokens_is_asked_again_when_streaming(server: LLMTestServer):
    server.push(Reply(400, json=_REFUSED_MAX_TOKENS), OPENAI.sse(wire.openai_text("streamed")))
    llm = openai(server, "my-deployment")
    events = await events_of(llm, "hi", max_tokens=50)
    assert isinstance(events[-1], StreamEnd) and events[-1].response.content == "streamed"
    refused, again = (r.json for r in server.requests)
    assert "max_tokens" in refused and again["max_completion_tokens"] > 50
    assert again["stream"] is True


async def test_the_switch_is_tried_once(server: LLMTestServer):
    server.push(Reply(400, json=_REFUSED_MAX_TOKENS), Reply(400, json=_REFUSED_MAX_TOKENS))
    with pytest.raises(LLMUnsupportedOptionError, match="max_tokens") as caught:
        await openai(server, "odd-server").complete("hi", max_tokens=50)
    assert caught.value.option == "max_tokens"
    assert len(server.requests) == 2


async def test_a_limit_too_large_is_another_error(server: LLMTestServer):
    too_large = {
        "error": {
            "message": "max_tokens is too large: 100000. This model supports at most 16384 "
            "completion tokens, whereas you provided 100000.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "invalid_value",
        }
    }
    server.push(Reply(400, json=too_large))
    with pytest.raises(LLMBadRequestError, match="too large") as caught:
        await openai(server).complete("hi", max_tokens=100_000)
    assert not isinstance(caught.value, LLMUnsupportedOptionError)
    assert len(server.requests) == 1


# ---------------------------------------------------------------------------- json_schema


@pytest.mark.parametrize(
    "body",
    [
        # vLLM before structured outputs
        {
            "object": "error",
            "message": "1 validation error for ChatCompletionRequest\nresponse_format.type\n"
            "  Input should be 'text' or 'json_object'",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        # llama.cpp's server
        {
            "error": {
                "code": 400,
                "message": 'response_format type must be one of "text" or "json_object", '
                "but got: json_schema",
                "type": "invalid_request_error",
            }
        },
        # a schema the server cannot turn into a grammar
        {"error": "JSON schema conversion failed: Unrecognized schema: {}"},
    ],
)
@pytest.mark.parametrize("streaming", [False, True])
async def test_a_server_without_json_schema_says_which_option(
    server: LLMTestServer, body: dict[str, Any], streaming: bool
):
    server.push(Reply(400, json=body))
    llm = openai(server)
    fmt = ResponseFormat("plan", PLAN_SCHEMA)
    with pytest.raises(LLMUnsupportedOptionError) as caught:
        if streaming:
            await collect_stream(llm.stream("hi", response_format=fmt))
        else:
            await llm.complete("hi", response_format=fmt)
    assert caught.value.option == "response_format"
    assert "does not support the request's response_format (HTTP 400)" in str(caught.value)
    assert len(server.requests) == 1  # the client does not decide what the caller wants


def test_settings_refuse_a_limit_that_is_not_one():
    for bad in (0, -5, True, 2.5):
        with pytest.raises(ConfigError, match="max_tokens must be a positive"):
            ModelSettings(max_tokens=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="reasoning_tokens"):
        ModelSettings(reasoning_tokens=-1)
    with pytest.raises(ConfigError, match="tool_choice"):
        ModelSettings(tool_choice=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="max_tokens_field"):
        OpenAIChat("gpt-4o", max_tokens_field="max_output_tokens")


@pytest.mark.parametrize(
    ("flavor", "body"),
    [
        (  # vLLM, the prompt and the limit together longer than the model's context
            "openai",
            {
                "object": "error",
                "message": "This model's maximum context length is 4096 tokens. However, you "
                "requested 6200 tokens (1500 in the messages, 4700 in the completion). Please "
                "reduce the length of the messages or completion.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
        ),
        (
            "anthropic",
            wire.anthropic_error(
                "max_tokens: 64000 > 32000, which is the maximum allowed number of output "
                "tokens for claude-test"
            ),
        ),
    ],
)
@pytest.mark.parametrize("streaming", [False, True])
async def test_a_limit_that_does_not_fit_says_how_to_lower_it(
    server: LLMTestServer, flavor: str, body: dict[str, Any], streaming: bool
):
    server.push(Reply(400, json=body))
    llm = openai(server) if flavor == "openai" else anthropic(server)
    with pytest.raises(LLMBadRequestError) as caught:
        if streaming:
            await collect_stream(llm.stream("hi", max_tokens=4700))
        else:
            await llm.complete("hi", max_tokens=4700)
    message = str(caught.value)
    assert message.endswith(
        "(the request asked for at most 4,700 output tokens: a smaller limit may fit, "
        "ModelSettings(max_tokens=...) in Python, --max-tokens on the command line)"
    )
    assert ("maximum context length" if flavor == "openai" else "maximum allowed") in message
