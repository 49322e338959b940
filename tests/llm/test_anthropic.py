"""AnthropicChat against a real loopback server speaking the Messages API."""

from __future__ import annotations

import json
from typing import Any

import pytest
from llm_server import (
    ANTHROPIC,
    PLAN_SCHEMA,
    TOOLS,
    LLMTestServer,
    Reply,
    SSEReply,
    events_of,
    record_sleeps,
)

from dagagent.errors import LLMBadRequestError, LLMResponseError, LLMServerError
from dagagent.llm import (
    AnthropicChat,
    AssistantMessage,
    HTTPRetryPolicy,
    ModelSettings,
    ResponseFormat,
    StreamEnd,
    StreamEvent,
    SystemMessage,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResultMessage,
    UserMessage,
    collect_stream,
    wire,
)
from dagagent.llm.anthropic import anthropic_messages

pytestmark = pytest.mark.anyio


def client(server: LLMTestServer, **options: Any) -> AnthropicChat:
    llm = ANTHROPIC.client(server, **options)
    assert isinstance(llm, AnthropicChat)
    return llm


async def test_text_request_headers_and_body(server: LLMTestServer):
    body = wire.anthropic_text("Bonjour", model="claude-x", input_tokens=11, output_tokens=2)
    body["usage"]["cache_read_input_tokens"] = 100
    server.push(Reply(json=body))
    llm = client(server, api_key="sk-ant-secret-123")
    response = await llm.complete(
        [SystemMessage("Be brief."), SystemMessage("Speak French."), UserMessage("Hi")],
        stop="END",
        temperature=0.5,
    )
    assert response.content == "Bonjour"
    assert response.finish_reason == "stop"
    assert response.model == "claude-x"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (111, 2)
    sent = server.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == "sk-ant-secret-123"
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers
    assert sent.json == {
        "model": "test-model",
        "max_tokens": 4096,
        "system": "Be brief.\n\nSpeak French.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "stop_sequences": ["END"],
        "temperature": 0.5,
    }


async def test_base_url_with_v1_is_not_doubled(server: LLMTestServer):
    server.push(Reply(json=wire.anthropic_text("ok")))
    llm = AnthropicChat("m", base_url=server.url + "/v1/")
    await llm.complete("hi", max_tokens=10)
    assert server.requests[0].path == "/v1/messages"
    assert server.requests[0].json["max_tokens"] == 10


def test_message_conversion_merges_roles_and_tool_results() -> None:
    calls = [
        ToolCall(id="t1", name="get_weather", arguments={"city": "Oslo"}),
        ToolCall(id="t2", name="get_time", arguments={"tz": "UTC"}),
    ]
    messages = [
        SystemMessage("sys"),
        UserMessage("first"),
        UserMessage("second"),
        AssistantMessage("Checking.", calls),
        ToolResultMessage("t1", "rainy"),
        ToolResultMessage("t2", "clock broken", is_error=True),
        UserMessage("and tomorrow?"),
        AssistantMessage("Prefill "),
    ]
    assert anthropic_messages(messages) == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Oslo"}},
                {"type": "tool_use", "id": "t2", "name": "get_time", "input": {"tz": "UTC"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "rainy"},
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "content": "clock broken",
                    "is_error": True,
                },
                {"type": "text", "text": "and tomorrow?"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Prefill"}]},
    ]


def test_tool_results_go_before_text_in_a_user_turn() -> None:
    out = anthropic_messages(
        [
            AssistantMessage(tool_calls=[ToolCall(id="t", name="f")]),
            UserMessage("note"),
            ToolResultMessage("t", "r"),
        ]
    )
    assert [b["type"] for b in out[1]["content"]] == ["tool_result", "text"]


async def test_parallel_tool_use(server: LLMTestServer):
    server.push(
        Reply(
            json=wire.anthropic_tool_use(
                [("get_weather", {"city": "Oslo"}), ("get_time", {"tz": "CET"})],
                text="I'll look both up.",
            )
        )
    )
    response = await client(server).complete("Oslo?", tools=TOOLS)
    assert response.content == "I'll look both up."
    assert response.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("toolu_1", "get_weather", {"city": "Oslo"}),
        ("toolu_2", "get_time", {"tz": "CET"}),
    ]
    assert server.requests[0].json["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather for a city",
            "input_schema": TOOLS[0].parameters,
        },
        {"name": "get_time", "description": "Local time", "input_schema": TOOLS[1].parameters},
    ]
    assert "tool_choice" not in server.requests[0].json


async def test_stream_parallel_tool_use_with_pings(server: LLMTestServer):
    body = wire.anthropic_tool_use(
        [("get_weather", {"city": "Oslo"}), ("get_time", {"tz": "CET"})], text="Sure."
    )
    server.push(SSEReply(wire.anthropic_events(body, chunk_size=2)))
    events = await events_of(client(server), "x", tools=TOOLS)
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == "Sure."
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert deltas[0] == ToolCallDelta(0, "toolu_1", "get_weather", "")
    assert {d.index for d in deltas} == {0, 1}
    assert "".join(d.arguments for d in deltas if d.index == 1) == '{"tz": "CET"}'
    final = events[-1]
    assert isinstance(final, StreamEnd)
    assert final.response.tool_calls[1].arguments == {"tz": "CET"}
    assert final.response.finish_reason == "tool_calls"
    assert (final.response.usage.input_tokens, final.response.usage.output_tokens) == (10, 5)


async def test_stream_matches_complete(server: LLMTestServer):
    body = wire.anthropic_tool_use([("get_time", {})], text="One moment", stop_reason="tool_use")
    server.push(Reply(json=body), SSEReply(wire.anthropic_events(body)))
    llm = client(server)
    whole = await llm.complete("x", tools=TOOLS)
    streamed = await collect_stream(llm.stream("x", tools=TOOLS))
    assert whole.model_dump() == streamed.model_dump()
    assert llm.usage.calls == 2


async def test_stream_malformed_tool_json_is_kept(server: LLMTestServer):
    body = wire.anthropic_tool_use([("get_weather", '{"city": "Os')])
    server.push(SSEReply(wire.anthropic_events(body)))
    final = await collect_stream(client(server).stream("x", tools=TOOLS))
    call = final.tool_calls[0]
    assert call.arguments == {} and call.raw_arguments == '{"city": "Os'
    assert call.arguments_error and "not valid JSON" in call.arguments_error


async def test_response_format_is_a_forced_tool(server: LLMTestServer):
    server.push(Reply(json=wire.anthropic_tool_use([("plan", {"tasks": ["a", "b"]})])))
    response = await client(server).complete(
        "plan it", response_format=ResponseFormat("plan", PLAN_SCHEMA)
    )
    assert json.loads(response.content) == {"tasks": ["a", "b"]}
    assert response.tool_calls == []
    assert response.finish_reason == "stop"
    sent = server.requests[0].json
    assert sent["tool_choice"] == {"type": "tool", "name": "plan"}
    assert sent["tools"][0]["name"] == "plan" and sent["tools"][0]["input_schema"] == PLAN_SCHEMA


async def test_response_format_streams_json_as_text(server: LLMTestServer):
    body = wire.anthropic_tool_use([("plan", {"tasks": ["x"]})])
    server.push(SSEReply(wire.anthropic_events(body)))
    events = await events_of(
        client(server), "p", response_format=ResponseFormat("plan", PLAN_SCHEMA)
    )
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert json.loads(text) == {"tasks": ["x"]}
    final = events[-1]
    assert isinstance(final, StreamEnd) and json.loads(final.response.content) == {"tasks": ["x"]}
    assert not any(isinstance(e, ToolCallDelta) for e in events)


async def test_response_format_with_tools_lets_the_model_choose(server: LLMTestServer):
    server.push(
        Reply(json=wire.anthropic_tool_use([("get_time", {"tz": "UTC"})])),
        Reply(json=wire.anthropic_tool_use([("response", {"answer": 3})])),
    )
    llm = client(server)
    first = await llm.complete(
        "x", tools=TOOLS, response_format={"type": "object", "properties": {"answer": {}}}
    )
    assert first.tool_calls[0].name == "get_time" and first.content == ""
    assert server.requests[0].json["tool_choice"] == {"type": "any"}
    assert [t["name"] for t in server.requests[0].json["tools"]] == [
        *["get_time", "get_weather"][::-1],
        "response",
    ]
    second = await llm.complete(
        "x", tools=TOOLS, response_format={"type": "object", "properties": {"answer": {}}}
    )
    assert json.loads(second.content) == {"answer": 3} and second.finish_reason == "stop"


async def test_non_object_schema_is_wrapped_and_unwrapped(server: LLMTestServer):
    schema = {
        "type": "array",
        "items": {"$ref": "#/$defs/Item"},
        "$defs": {"Item": {"type": "string"}},
    }
    server.push(
        Reply(json=wire.anthropic_tool_use([("items", {"value": ["a", "b"]})])),
        SSEReply(wire.anthropic_events(wire.anthropic_tool_use([("items", {"value": ["c"]})]))),
    )
    llm = client(server)
    response = await llm.complete("x", response_format=ResponseFormat("items", schema))
    assert json.loads(response.content) == ["a", "b"]
    input_schema = server.requests[0].json["tools"][0]["input_schema"]
    assert input_schema == {
        "type": "object",
        "properties": {"value": {"type": "array", "items": {"$ref": "#/$defs/Item"}}},
        "required": ["value"],
        "$defs": {"Item": {"type": "string"}},
    }
    streamed = await collect_stream(
        llm.stream("x", response_format=ResponseFormat("items", schema))
    )
    assert json.loads(streamed.content) == ["c"]


async def test_stop_reason_mapping(server: LLMTestServer):
    server.push(
        Reply(json=wire.anthropic_text("trunc", stop_reason="max_tokens")),
        Reply(json=wire.anthropic_text("stopped", stop_reason="stop_sequence")),
    )
    llm = client(server)
    assert (await llm.complete("x")).finish_reason == "length"
    assert (await llm.complete("x")).finish_reason == "stop"


async def test_stream_cut_off_mid_way(server: LLMTestServer):
    events = wire.anthropic_events(wire.anthropic_text("a fairly long answer"), chunk_size=3)
    server.push(SSEReply(events, cut_after=6))
    llm = client(server)
    record_sleeps(llm)
    seen: list[StreamEvent] = []
    with pytest.raises(LLMResponseError, match="ended early"):
        async for event in llm.stream("x"):
            seen.append(event)
    assert any(isinstance(e, TextDelta) for e in seen)
    assert len(server.requests) == 1


async def test_stream_closed_cleanly_before_message_stop(server: LLMTestServer):
    events = wire.anthropic_events(wire.anthropic_text("abc"))[:-1]
    server.push(SSEReply(events, chunked=False))
    llm = client(server, settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=0)))
    with pytest.raises(LLMResponseError, match=r"ended early.*message_stop"):
        await collect_stream(llm.stream("x"))


async def test_overloaded_error_event_before_output_is_retried(server: LLMTestServer):
    error = ("error", wire.anthropic_error("Overloaded", type="overloaded_error"))
    start = wire.anthropic_events(wire.anthropic_text("x"))[:2]
    server.push(
        SSEReply([*start, error]), SSEReply(wire.anthropic_events(wire.anthropic_text("ok")))
    )
    llm = client(server)
    sleeps = record_sleeps(llm)
    assert (await collect_stream(llm.stream("x"))).content == "ok"
    assert len(sleeps.delays) == 1


async def test_error_event_after_output_is_raised(server: LLMTestServer):
    events = wire.anthropic_events(wire.anthropic_text("partial answer"))[:5]
    error = ("error", wire.anthropic_error("Overloaded", type="overloaded_error"))
    server.push(SSEReply([*events, error]))
    llm = client(server)
    record_sleeps(llm)
    with pytest.raises(LLMServerError, match=r"Overloaded.*not retried"):
        await collect_stream(llm.stream("x"))


async def test_invalid_request_error_event_is_not_retried(server: LLMTestServer):
    server.push(SSEReply([("error", wire.anthropic_error("prompt is too long"))]))
    with pytest.raises(LLMBadRequestError, match="prompt is too long"):
        await collect_stream(client(server).stream("x"))


async def test_malformed_stream_events(server: LLMTestServer):
    server.push(
        SSEReply(
            [
                (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": 3,
                        "delta": {"type": "text_delta", "text": "x"},
                    },
                )
            ]
        ),
        SSEReply([("message_start", "not json at all")]),
        SSEReply([("content_block_start", {"type": "content_block_start"})]),
    )
    llm = client(server)
    with pytest.raises(LLMResponseError, match="unknown block"):
        await collect_stream(llm.stream("x"))
    with pytest.raises(LLMResponseError, match="not JSON"):
        await collect_stream(llm.stream("x"))
    with pytest.raises(LLMResponseError, match="without index"):
        await collect_stream(llm.stream("x"))


async def test_overloaded_error_body_with_200_status_is_retried(server: LLMTestServer):
    server.push(
        Reply(json=wire.anthropic_error("Overloaded", type="overloaded_error")),
        Reply(json=wire.anthropic_error("Overloaded", type="overloaded_error")),
    )
    llm = client(server, settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=1)))
    sleeps = record_sleeps(llm)
    with pytest.raises(LLMServerError, match=r"Overloaded.*gave up after 2 attempts"):
        await llm.complete("x")
    assert len(sleeps.delays) == 1


async def test_error_body_with_200_status(server: LLMTestServer):
    server.push(Reply(json=wire.anthropic_error("bad things", type="invalid_request_error")))
    with pytest.raises(LLMBadRequestError, match="bad things"):
        await client(server).complete("x")


async def test_thinking_blocks_are_ignored(server: LLMTestServer):
    body = wire.anthropic_text("answer")
    body["content"].insert(0, {"type": "thinking", "thinking": "hmm", "signature": "sig"})
    server.push(Reply(json=body))
    assert (await client(server).complete("x")).content == "answer"


def test_repr_hides_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env-999")
    llm = AnthropicChat("claude-sonnet-4-5")
    assert llm.has_api_key
    assert (
        repr(llm)
        == "AnthropicChat(model='claude-sonnet-4-5', base_url='https://api.anthropic.com')"
    )
    assert "sk-ant-from-env-999" not in repr(vars(llm))
    assert llm.provider == "Anthropic"
