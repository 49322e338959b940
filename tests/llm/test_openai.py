"""OpenAIChat against a real loopback server speaking the chat completions format."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from llm_server import (
    OPENAI,
    PLAN_SCHEMA,
    TOOLS,
    Hangup,
    LLMTestServer,
    RawReply,
    Reply,
    SSEReply,
    events_of,
    quick_retries,
    record_sleeps,
)

from dagagent.errors import (
    LLMBadRequestError,
    LLMResponseError,
    LLMServerError,
    LLMTimeoutError,
)
from dagagent.llm import (
    AssistantMessage,
    HTTPRetryPolicy,
    ModelSettings,
    OpenAIChat,
    ResponseFormat,
    StreamEnd,
    SystemMessage,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
    collect_stream,
    wire,
)
from dagagent.llm._json import loads_json

pytestmark = pytest.mark.anyio


def client(server: LLMTestServer, **options: Any) -> OpenAIChat:
    llm = OPENAI.client(server, **options)
    assert isinstance(llm, OpenAIChat)
    return llm


async def test_text_completion_request_and_response(server: LLMTestServer):
    server.push(
        Reply(
            json=wire.openai_text("Hello!", model="gpt-4o-2024", input_tokens=12, output_tokens=3)
        )
    )
    llm = client(server, api_key="sk-abc-123456")
    response = await llm.complete(
        [SystemMessage("Be brief."), UserMessage("Hi")],
        stop=["\n\n", "END"],
        max_tokens=50,
        temperature=0.2,
    )
    assert response.content == "Hello!"
    assert response.tool_calls == []
    assert response.finish_reason == "stop"
    assert response.model == "gpt-4o-2024"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 3)
    assert response.raw["id"] == "chatcmpl-test"
    sent = server.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-abc-123456"
    assert sent.json == {
        "model": "test-model",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "stop": ["\n\n", "END"],
        "max_tokens": 50,
        "temperature": 0.2,
    }


async def test_defaults_extra_body_and_max_tokens_field(server: LLMTestServer):
    server.push(Reply(json=wire.openai_text("x")), Reply(json=wire.openai_text("y")))
    llm = client(
        server,
        max_tokens_field="max_completion_tokens",
        settings=ModelSettings(
            max_tokens=100, temperature=0.0, extra_body={"seed": 7}, reasoning_tokens=0
        ),
    )
    await llm.complete("hi", stop="STOP")
    await llm.complete("hi", max_tokens=5, temperature=1.0)
    first, second = (r.json for r in server.requests)
    assert first["max_completion_tokens"] == 100 and "max_tokens" not in first
    assert first["temperature"] == 0.0 and first["seed"] == 7 and first["stop"] == ["STOP"]
    assert first["messages"] == [{"role": "user", "content": "hi"}]
    assert second["max_completion_tokens"] == 5 and second["temperature"] == 1.0


async def test_parallel_tool_calls_and_the_history_that_follows(server: LLMTestServer):
    server.push(
        Reply(
            json=wire.openai_tool_calls(
                [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "Europe/Paris"})],
                content="Let me check.",
            )
        ),
        Reply(json=wire.openai_text("Sunny, 14:00")),
    )
    llm = client(server)
    messages: list[Any] = [UserMessage("Weather and time in Paris?")]
    first = await llm.complete(messages, tools=TOOLS)
    assert first.finish_reason == "tool_calls"
    assert first.content == "Let me check."
    assert [(c.id, c.name, c.arguments) for c in first.tool_calls] == [
        ("call_1", "get_weather", {"city": "Paris"}),
        ("call_2", "get_time", {"tz": "Europe/Paris"}),
    ]
    assert all(c.arguments_error is None for c in first.tool_calls)
    messages += [
        first.to_message(),
        ToolResultMessage("call_1", "sunny"),
        ToolResultMessage("call_2", "no clock", is_error=True),
    ]
    final = await llm.complete(messages, tools=TOOLS)
    assert final.content == "Sunny, 14:00"

    body = server.requests[0].json
    assert body["tools"][0] == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": TOOLS[0].parameters,
        },
    }
    history = server.requests[1].json["messages"]
    assert history[1] == {
        "role": "assistant",
        "content": "Let me check.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "get_time", "arguments": '{"tz": "Europe/Paris"}'},
            },
        ],
    }
    assert history[2] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
    assert history[3] == {"role": "tool", "tool_call_id": "call_2", "content": "Error: no clock"}


async def test_assistant_tool_call_without_text_sends_null_content(server: LLMTestServer):
    server.push(Reply(json=wire.openai_text("ok")))
    call = ToolCall(id="c1", name="get_time", arguments={})
    await client(server).complete(
        [UserMessage("t?"), AssistantMessage(tool_calls=[call]), ToolResultMessage("c1", "noon")]
    )
    assert server.requests[0].json["messages"][1]["content"] is None


async def test_invalid_tool_arguments_are_kept_not_fatal(server: LLMTestServer):
    server.push(
        Reply(
            json=wire.openai_tool_calls(
                [("get_weather", '{"city": "Par'), ("get_time", "[1, 2]"), ("get_time", "")]
            )
        ),
        Reply(json=wire.openai_text("ok")),
    )
    llm = client(server)
    response = await llm.complete("x", tools=TOOLS)
    broken, not_object, empty = response.tool_calls
    assert broken.arguments == {} and broken.raw_arguments == '{"city": "Par'
    assert broken.arguments_error is not None and '{"city": "Par' in broken.arguments_error
    assert not_object.arguments == {} and "JSON object" in (not_object.arguments_error or "")
    assert empty.arguments == {} and empty.arguments_error is None
    # sent back verbatim, so the model sees its own mistake
    await llm.complete([UserMessage("x"), response.to_message()])
    sent = server.requests[1].json["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert sent == '{"city": "Par'


async def test_json_schema_response_format(server: LLMTestServer):
    server.push(
        Reply(json=wire.openai_text('{"tasks": ["a", "b"]}')), Reply(json=wire.openai_text("{}"))
    )
    llm = client(server)
    response = await llm.complete("plan", response_format=ResponseFormat("plan", PLAN_SCHEMA))
    assert json.loads(response.content) == {"tasks": ["a", "b"]}
    assert server.requests[0].json["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "plan", "schema": PLAN_SCHEMA, "strict": True},
    }
    await llm.complete("plan", response_format={"type": "object"})
    assert server.requests[1].json["response_format"]["json_schema"] == {
        "name": "response",
        "schema": {"type": "object"},
        "strict": False,
    }


async def test_stream_text_with_usage(server: LLMTestServer):
    body = wire.openai_text("The quick brown fox jumps", input_tokens=9, output_tokens=6)
    server.push(SSEReply(wire.openai_events(body, chunk_size=5)))
    llm = client(server)
    events = await events_of(llm, "hi", stop=["x"])
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 3 and "".join(deltas) == "The quick brown fox jumps"
    assert isinstance(events[-1], StreamEnd)
    final = events[-1].response
    assert final.content == "The quick brown fox jumps"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (9, 6)
    assert final.finish_reason == "stop"
    sent = server.requests[0]
    assert sent.json["stream"] is True and sent.json["stream_options"] == {"include_usage": True}
    assert sent.headers["accept"] == "text/event-stream"
    assert llm.usage.calls == 1 and llm.usage.input_tokens == 9


async def test_stream_parallel_tool_calls_assembled_by_index(server: LLMTestServer):
    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
        return (
            None,
            {"model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]},
        )

    def tc(index: int, **fields: Any) -> dict[str, Any]:
        return {"tool_calls": [{"index": index, **fields}]}

    events = [
        chunk({"role": "assistant", "content": None}),
        chunk(
            tc(0, id="call_a", type="function", function={"name": "get_weather", "arguments": ""})
        ),
        chunk(
            tc(1, id="call_b", type="function", function={"name": "get_time", "arguments": '{"tz"'})
        ),
        chunk(tc(0, function={"arguments": '{"city": '})),
        chunk(tc(1, function={"arguments": ': "UTC"}'})),
        chunk(tc(0, function={"arguments": '"Oslo"}'})),
        chunk({}, "tool_calls"),
        (
            None,
            {"model": "m", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7}},
        ),
        (None, "[DONE]"),
    ]
    server.push(SSEReply(events))
    out = await events_of(client(server), "x", tools=TOOLS)
    deltas = [e for e in out if isinstance(e, ToolCallDelta)]
    assert deltas[0] == ToolCallDelta(0, "call_a", "get_weather", "")
    assert deltas[1] == ToolCallDelta(1, "call_b", "get_time", '{"tz"')
    assert "".join(d.arguments for d in deltas if d.index == 0) == '{"city": "Oslo"}'
    final = out[-1]
    assert isinstance(final, StreamEnd)
    calls = final.response.tool_calls
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("call_a", "get_weather", {"city": "Oslo"}),
        ("call_b", "get_time", {"tz": "UTC"}),
    ]
    assert final.response.finish_reason == "tool_calls"
    assert final.response.usage.output_tokens == 7


async def test_stream_tool_calls_without_index_from_lenient_servers(server: LLMTestServer):
    def chunk(delta: dict[str, Any]) -> tuple[None, dict[str, Any]]:
        return (None, {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})

    events = [
        chunk(
            {
                "tool_calls": [
                    {"id": "c1", "function": {"name": "get_time", "arguments": '{"tz": "UTC"}'}}
                ]
            }
        ),
        chunk(
            {
                "tool_calls": [
                    {
                        "id": "c2",
                        "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
                    }
                ]
            }
        ),
        (None, "[DONE]"),
    ]
    server.push(SSEReply(events))
    final = await collect_stream(client(server).stream("x", tools=TOOLS))
    assert [(c.id, c.arguments) for c in final.tool_calls] == [
        ("c1", {"tz": "UTC"}),
        ("c2", {"city": "Rome"}),
    ]
    assert final.usage.input_tokens == 0  # no usage chunk: zero, not a crash


async def test_stream_matches_complete(server: LLMTestServer):
    body = wire.openai_tool_calls(
        [("get_weather", {"city": "Lima"}), ("get_time", '{"tz": ')], content="hm"
    )
    server.push(Reply(json=body), SSEReply(wire.openai_events(body)))
    llm = client(server)
    whole = await llm.complete("x", tools=TOOLS)
    streamed = await collect_stream(llm.stream("x", tools=TOOLS))
    assert whole.model_dump() == streamed.model_dump()
    assert streamed.tool_calls[1].arguments_error is not None


async def test_stream_cut_off_mid_way(server: LLMTestServer):
    body = wire.openai_text("a long answer that never finishes")
    server.push(SSEReply(wire.openai_events(body, chunk_size=4), cut_after=4))
    llm = client(server)
    record_sleeps(llm)
    received: list[str] = []
    with pytest.raises(LLMResponseError, match="ended early") as info:
        async for event in llm.stream("x"):
            if isinstance(event, TextDelta):
                received.append(event.text)
    assert received  # part of the answer arrived before the cut
    assert "not retried" in str(info.value)
    assert len(server.requests) == 1


async def test_stream_closed_cleanly_without_done(server: LLMTestServer):
    # Before the answer finished: an error. After finish_reason: the answer is whole.
    events = wire.openai_events(wire.openai_text("abc", output_tokens=3), done=False)
    server.push(SSEReply(events[:-2], chunked=False), SSEReply(events, chunked=False))
    llm = client(server, settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=0)))
    with pytest.raises(LLMResponseError, match=r"ended early.*no finish_reason, no \[DONE\]"):
        await collect_stream(llm.stream("x"))
    final = await collect_stream(llm.stream("x"))
    assert (final.content, final.finish_reason, final.usage.output_tokens) == ("abc", "stop", 3)


async def test_stream_cut_before_any_event_is_retried(server: LLMTestServer):
    events = wire.openai_events(wire.openai_text("fine"))
    server.push(SSEReply(events, cut_after=0), Hangup(), SSEReply(events))
    llm = client(server)
    sleeps = record_sleeps(llm)
    assert (await collect_stream(llm.stream("x"))).content == "fine"
    assert len(sleeps.delays) == 2


async def test_stream_error_chunk(server: LLMTestServer):
    server.push(
        SSEReply([(None, {"error": {"message": "model crashed", "type": "server_error"}})]),
        SSEReply([(None, {"error": {"message": "model crashed", "type": "server_error"}})]),
    )
    llm = client(server, settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=1)))
    record_sleeps(llm)
    with pytest.raises(LLMServerError, match="model crashed"):
        await collect_stream(llm.stream("x"))


async def test_stream_event_that_is_not_json(server: LLMTestServer):
    server.push(SSEReply([(None, "{not json")]))
    with pytest.raises(LLMResponseError, match="not JSON"):
        await collect_stream(client(server).stream("x"))


async def test_server_that_ignores_stream_true(server: LLMTestServer):
    server.push(
        Reply(json=wire.openai_tool_calls([("get_time", {"tz": "UTC"})], content="one sec"))
    )
    events = await events_of(client(server), "x", tools=TOOLS)
    assert events[0] == TextDelta("one sec")
    assert events[1] == ToolCallDelta(0, "call_1", "get_time", '{"tz": "UTC"}')
    assert (
        isinstance(events[-1], StreamEnd) and events[-1].response.tool_calls[0].name == "get_time"
    )


async def test_breaking_out_of_a_stream_closes_it(server: LLMTestServer):
    body = wire.openai_text("x" * 200)
    server.push(
        SSEReply(wire.openai_events(body, chunk_size=10)), Reply(json=wire.openai_text("next"))
    )
    llm = client(server)
    async with llm:
        stream = llm.stream("x")
        async for event in stream:
            assert isinstance(event, TextDelta)
            break
        await stream.aclose()  # type: ignore[attr-defined]
        assert (await llm.complete("again")).content == "next"


async def test_stream_usage_can_be_turned_off(server: LLMTestServer):
    server.push(SSEReply(wire.openai_events(wire.openai_text("a"))))
    await collect_stream(client(server, stream_usage=False).stream("x"))
    assert "stream_options" not in server.requests[0].json


async def test_content_as_list_of_parts_and_missing_usage(server: LLMTestServer):
    body = {
        "choices": [
            {"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}
        ]
    }
    server.push(Reply(json=body))
    response = await client(server).complete("x")
    assert response.content == "ab"
    assert response.usage.total_tokens == 0
    assert response.model == "test-model"
    assert response.finish_reason is None


def test_repr_and_provider_label() -> None:
    official = OpenAIChat("gpt-4o", api_key="sk-very-secret-key")
    assert repr(official) == "OpenAIChat(model='gpt-4o', base_url='https://api.openai.com/v1')"
    assert official.provider == "OpenAI"
    local = OpenAIChat("llama3", base_url="http://localhost:11434/v1/")
    assert local.base_url == "http://localhost:11434/v1"
    assert local.provider == "OpenAI-compatible server at http://localhost:11434/v1"


# ----------------------------------------------------------------------------------------------
# OpenAIChat against emulations of real OpenAI-compatible servers (Ollama, vLLM, the
# llama.cpp server, proxies) and of misbehaving ones, byte for byte on a loopback socket.
# ----------------------------------------------------------------------------------------------


SERVER_TOOLS = [ToolSpec("get_weather"), ToolSpec("get_time")]
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
DONE = b"data: [DONE]\n\n"


def server_client(server: LLMTestServer, **options: Any) -> OpenAIChat:
    options["settings"] = quick_retries(options.get("settings"))
    return OpenAIChat("m", base_url=server.url + "/v1", **options)


def event(data: Any, *, sep: bytes = b"data: ", nl: bytes = b"\n") -> bytes:
    return sep + json.dumps(data).encode() + nl + nl


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return event({"object": "chat.completion.chunk", "choices": [choice], **extra})


USAGE = event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}})


# ---------------------------------------------------------------------------- stream ends


async def test_closed_after_finish_and_usage_without_done(server: LLMTestServer):
    server.push(RawReply([SSE_HEAD, chunk({"content": "hi"}), chunk({}, "stop"), USAGE]))
    final = await collect_stream(server_client(server).stream("x"))
    assert (final.content, final.finish_reason, final.usage.output_tokens) == ("hi", "stop", 2)


async def test_cut_mid_chunk_after_finish_is_still_the_whole_answer(server: LLMTestServer):
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    body = chunk({"content": "hi"}) + chunk({}, "stop")
    server.push(RawReply([head, b"%x\r\n%s\r\n" % (len(body), body), b"40\r\ndata: {"]))
    final = await collect_stream(server_client(server).stream("x"))
    assert (final.content, final.finish_reason) == ("hi", "stop")


async def test_held_open_after_finish_is_not_waited_for(server: LLMTestServer):
    server.push(RawReply([SSE_HEAD, chunk({"content": "hi"}), chunk({}, "stop"), 5.0]))
    started = time.monotonic()
    final = await collect_stream(
        server_client(server, settings=ModelSettings(timeout=0.5)).stream("x")
    )
    assert final.content == "hi"
    assert time.monotonic() - started < 3


async def test_cut_before_finish_is_still_an_error(server: LLMTestServer):
    server.push(RawReply([SSE_HEAD, chunk({"content": "half an ans"})]))
    with pytest.raises(LLMResponseError, match="ended early"):
        await collect_stream(
            server_client(
                server, settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=0))
            ).stream("x")
        )


# ---------------------------------------------------------------------------- tool calls


async def test_llama_cpp_style_stream(server: LLMTestServer):
    """CRLF, ``data:`` without a space, comments, ``timings``, calls without ids."""
    call = {"index": 0, "type": "function", "function": {"name": "get_time"}}
    server.push(
        RawReply(
            [
                SSE_HEAD,
                b": keep-alive\r\n\r\n",
                event({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}, sep=b"data:"),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"tz":'}}]}),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"UTC"}'}}]}),
                event(
                    {
                        "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
                        "timings": {"predicted_ms": 12.5},
                    },
                    sep=b"data:",
                    nl=b"\r\n",
                ),
                b"data:[DONE]\r\n\r\n",
            ]
        )
    )
    final = await collect_stream(server_client(server).stream("x", tools=SERVER_TOOLS))
    [c] = final.tool_calls
    assert (c.name, c.arguments, c.arguments_error) == ("get_time", {"tz": "UTC"}, None)
    assert c.id  # made up when the server sent none


@pytest.mark.parametrize("with_index", [True, False], ids=["index-0-each", "no-index"])
async def test_whole_calls_without_ids_are_not_merged(server: LLMTestServer, with_index: bool):
    def whole(name: str, args: str) -> bytes:
        call: dict[str, Any] = {"function": {"name": name, "arguments": args}}
        if with_index:
            call["index"] = 0
        return chunk({"tool_calls": [call]})

    server.push(
        RawReply(
            [
                SSE_HEAD,
                whole("get_weather", '{"city": "Oslo"}'),
                whole("get_time", '{"tz": "UTC"}'),
                chunk({}, "tool_calls"),
                DONE,
            ]
        )
    )
    final = await collect_stream(server_client(server).stream("x", tools=SERVER_TOOLS))
    assert [(c.name, c.arguments) for c in final.tool_calls] == [
        ("get_weather", {"city": "Oslo"}),
        ("get_time", {"tz": "UTC"}),
    ]
    assert len({c.id for c in final.tool_calls}) == 2


async def test_ollama_style_calls_objects_and_finish_reason_stop(server: LLMTestServer):
    def whole(i: str, name: str, args: dict[str, Any]) -> bytes:
        call = {
            "id": i,
            "index": 0,
            "type": "function",
            "function": {"name": name, "arguments": args},
        }
        return chunk({"role": "assistant", "content": "", "tool_calls": [call]})

    server.push(
        RawReply(
            [
                SSE_HEAD,
                whole("c1", "get_weather", {"city": "Oslo"}),
                whole("c2", "get_time", {"tz": "UTC"}),
                chunk({"content": None}, "stop"),
                DONE,
            ]
        )
    )
    final = await collect_stream(server_client(server).stream("x", tools=SERVER_TOOLS))
    assert [(c.id, c.arguments) for c in final.tool_calls] == [
        ("c1", {"city": "Oslo"}),
        ("c2", {"tz": "UTC"}),
    ]
    assert final.finish_reason == "tool_calls"


async def test_arguments_of_the_wrong_type_fail_only_that_call(server: LLMTestServer):
    call = {"id": "c", "type": "function", "function": {"name": "get_time", "arguments": [1]}}
    body = {"choices": [{"message": {"tool_calls": [call]}, "finish_reason": "stop"}]}
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
    server.push(RawReply([head, json.dumps(body).encode()]))
    response = await server_client(server).complete("x", tools=SERVER_TOOLS)
    [c] = response.tool_calls
    assert c.arguments == {} and "must be a JSON object" in (c.arguments_error or "")
    assert response.finish_reason == "tool_calls"


async def test_null_delta_and_null_choices(server: LLMTestServer):
    server.push(
        RawReply(
            [
                SSE_HEAD,
                event({"choices": [{"index": 0, "delta": None, "finish_reason": None}]}),
                chunk({"content": "ok", "reasoning_content": "hmm"}),
                chunk({}, "stop"),
                event({"choices": None, "usage": {"prompt_tokens": 1, "completion_tokens": 1}}),
                DONE,
            ]
        )
    )
    final = await collect_stream(server_client(server).stream("x"))
    assert (final.content, final.usage.total_tokens) == ("ok", 2)


# ---------------------------------------------------------------------------- errors in a 200


async def test_refused_request_reported_in_the_stream_is_not_retried(server: LLMTestServer):
    error = {
        "object": "error",
        "message": "context too long",
        "type": "BadRequestError",
        "code": 400,
    }
    server.push(RawReply([SSE_HEAD, event({"error": error})]))
    with pytest.raises(LLMBadRequestError, match="context too long"):
        await collect_stream(server_client(server).stream("x"))
    assert len(server.requests) == 1


async def test_server_failure_reported_in_the_stream_is_retried(server: LLMTestServer):
    error = {"code": 503, "message": "loading model", "type": "unavailable_error"}
    server.push(
        RawReply([SSE_HEAD, event({"error": error})]),
        RawReply([SSE_HEAD, chunk({"content": "ok"}, "stop"), DONE]),
    )
    llm = server_client(server)
    record_sleeps(llm)
    assert (await collect_stream(llm.stream("x"))).content == "ok"


async def test_named_error_event(server: LLMTestServer):
    server.push(RawReply([SSE_HEAD, b'event: error\ndata: {"message": "boom"}\n\n']))
    with pytest.raises(LLMServerError, match="boom"):
        await collect_stream(
            server_client(
                server, settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=0))
            ).stream("x")
        )


async def test_error_object_in_a_200_body_keeps_its_status(server: LLMTestServer):
    body = json.dumps(
        {"error": {"code": 400, "message": "bad grammar", "type": "invalid_request_error"}}
    )
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
    server.push(RawReply([head, body.encode()]))
    with pytest.raises(LLMBadRequestError, match="bad grammar"):
        await server_client(server).complete("x")


async def test_html_error_page_is_quoted_as_text(server: LLMTestServer):
    page = (
        b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
        b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n"
        b"</body>\r\n</html>\r\n"
    )
    head = b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n"
    server.push(RawReply([head % len(page), page]))
    with pytest.raises(LLMServerError) as info:
        await server_client(
            server, settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=0))
        ).complete("x")
    assert str(info.value).endswith("(HTTP 502): 502 Bad Gateway nginx (gave up after 1 attempt)")


async def test_html_page_with_200_says_to_check_the_base_url(server: LLMTestServer):
    page = b"<!doctype html><html><head><title>Open WebUI</title></head><body></body></html>"
    server.push(RawReply([b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n", page]))
    with pytest.raises(LLMResponseError, match=r"HTML page, not JSON.*base URL.*Open WebUI"):
        await server_client(server).complete("x")


# ---------------------------------------------------------------------------- slow servers
# Real sockets and the client's real deadlines: each test waits out its deadline (1-3 s) on
# the wall clock by design; the trickling server thread cannot run on a test clock.


async def test_slow_loris_stream_of_keep_alives(server: LLMTestServer):
    server.push(RawReply([SSE_HEAD, *[p for _ in range(200) for p in (b": ping\n\n", 0.05)]]))
    started = time.monotonic()
    with pytest.raises(LLMTimeoutError, match=r"stalled: no complete event for 1s"):
        await collect_stream(server_client(server, settings=ModelSettings(timeout=1.0)).stream("x"))
    assert time.monotonic() - started < 8  # the pings alone would last 10 s


async def test_slow_loris_stream_trickling_one_event(server: LLMTestServer):
    data = chunk({"content": "x" * 400})
    server.push(RawReply([SSE_HEAD, *[p for b in data for p in (bytes([b]), 0.02)]]))
    with pytest.raises(LLMTimeoutError, match="stalled"):
        await collect_stream(server_client(server, settings=ModelSettings(timeout=1.0)).stream("x"))


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_slow_loris_headers(server: LLMTestServer, stream: bool):
    head = b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 400 + b"\r\n\r\n"
    server.push(RawReply([p for b in head for p in (bytes([b]), 0.02)]))
    llm = server_client(server, settings=ModelSettings(timeout=1.0))
    started = time.monotonic()
    with pytest.raises(LLMTimeoutError, match=r"did not send the whole .* within 3s"):
        if stream:
            await collect_stream(llm.stream("x"))
        else:
            await llm.complete("x")
    assert time.monotonic() - started < 7  # the headers alone would take 8 s


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream-ignored"])
async def test_slow_loris_json_body(server: LLMTestServer, stream: bool):
    body = json.dumps({"choices": [{"message": {"content": "y" * 400}, "finish_reason": "stop"}]})
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
    server.push(RawReply([head, *[p for b in body.encode() for p in (bytes([b]), 0.02)]]))
    llm = server_client(server, settings=ModelSettings(timeout=1.0))
    with pytest.raises(LLMTimeoutError, match=r"did not send the whole answer within 3s"):
        if stream:
            await collect_stream(llm.stream("x"))
        else:
            await llm.complete("x")


# ---------------------------------------------------------------------------- text


async def test_lone_surrogate_escapes_become_replacement_characters(server: LLMTestServer):
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "get_time", "arguments": '{"tz": "\\udc00"}'},
    }
    body = {"choices": [{"message": {"content": "a\\ud800b", "tool_calls": [call]}}]}
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
    # json.dumps would escape the backslashes: write the escapes as the server does
    raw = json.dumps(body).replace("\\\\ud800", "\\ud800").replace("\\\\\\\\udc00", "\\\\udc00")
    server.push(
        RawReply([head, raw.encode()]),
        RawReply(
            [
                SSE_HEAD,
                b'data: {"choices": [{"index": 0, "delta": {"content": "\\udfff"}}]}\n\n',
                chunk({}, "stop"),
                DONE,
            ]
        ),
    )
    llm = server_client(server)
    response = await llm.complete("x", tools=SERVER_TOOLS)
    assert response.content == "a\ufffdb"
    assert response.tool_calls[0].arguments == {"tz": "\ufffd"}
    # the answer goes back in the history (and to a store) without an encoding error
    history = [UserMessage("x"), response.to_message(), ToolResultMessage("c", "out\udcff")]
    final = await collect_stream(llm.stream(history, tools=SERVER_TOOLS))
    assert final.content == "\ufffd"
    sent = server.requests[1].json["messages"]
    assert sent[1]["content"] == "a\ufffdb" and sent[2]["content"] == "out\ufffd"


def test_surrogate_repair_keeps_escaped_backslashes_and_any_depth():
    assert loads_json(
        '["\\\\ud800", "\\\\\\ud800", "\\ud83d\\ude00", "\\udc00\\udc00\\udc00"]'
    ) == [
        "\\ud800",
        "\\\ufffd",
        "\U0001f600",
        "\ufffd\ufffd\ufffd",
    ]
    deep = '{"a": ' * 600 + '"\\ud800"' + "}" * 600
    value = loads_json(deep)
    for _ in range(600):
        value = value["a"]
    assert value == "\ufffd"
    assert loads_json(b'"\xed\xa0\x80"') == "\ufffd" * 3  # surrogate bytes, not UTF-8
