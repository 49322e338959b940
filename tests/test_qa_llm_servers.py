"""OpenAIChat against emulations of real OpenAI-compatible servers (Ollama, vLLM, the
llama.cpp server, proxies) and of misbehaving ones, byte for byte on a loopback socket."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from llm_server import LLMTestServer, RawReply, record_sleeps

from dagagent.errors import (
    LLMBadRequestError,
    LLMResponseError,
    LLMServerError,
    LLMTimeoutError,
)
from dagagent.llm import OpenAIChat, ToolResultMessage, ToolSpec, UserMessage, collect_stream
from dagagent.llm.types import loads_json

pytestmark = pytest.mark.anyio

TOOLS = [ToolSpec("get_weather"), ToolSpec("get_time")]
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
DONE = b"data: [DONE]\n\n"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server() -> Iterator[LLMTestServer]:
    with LLMTestServer() as srv:
        yield srv
        srv.check()


def client(server: LLMTestServer, **options: Any) -> OpenAIChat:
    options.setdefault("retry_base_delay_s", 0.001)
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
    final = await collect_stream(client(server).stream("x"))
    assert (final.content, final.finish_reason, final.usage.output_tokens) == ("hi", "stop", 2)


async def test_cut_mid_chunk_after_finish_is_still_the_whole_answer(server: LLMTestServer):
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    body = chunk({"content": "hi"}) + chunk({}, "stop")
    server.push(RawReply([head, b"%x\r\n%s\r\n" % (len(body), body), b"40\r\ndata: {"]))
    final = await collect_stream(client(server).stream("x"))
    assert (final.content, final.finish_reason) == ("hi", "stop")


async def test_held_open_after_finish_is_not_waited_for(server: LLMTestServer):
    server.push(RawReply([SSE_HEAD, chunk({"content": "hi"}), chunk({}, "stop"), 5.0]))
    started = time.monotonic()
    final = await collect_stream(client(server, timeout=0.5).stream("x"))
    assert final.content == "hi"
    assert time.monotonic() - started < 3


async def test_cut_before_finish_is_still_an_error(server: LLMTestServer):
    server.push(RawReply([SSE_HEAD, chunk({"content": "half an ans"})]))
    with pytest.raises(LLMResponseError, match="ended early"):
        await collect_stream(client(server, max_retries=0).stream("x"))


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
    final = await collect_stream(client(server).stream("x", tools=TOOLS))
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
    final = await collect_stream(client(server).stream("x", tools=TOOLS))
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
    final = await collect_stream(client(server).stream("x", tools=TOOLS))
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
    response = await client(server).complete("x", tools=TOOLS)
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
    final = await collect_stream(client(server).stream("x"))
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
        await collect_stream(client(server).stream("x"))
    assert len(server.requests) == 1


async def test_server_failure_reported_in_the_stream_is_retried(server: LLMTestServer):
    error = {"code": 503, "message": "loading model", "type": "unavailable_error"}
    server.push(
        RawReply([SSE_HEAD, event({"error": error})]),
        RawReply([SSE_HEAD, chunk({"content": "ok"}, "stop"), DONE]),
    )
    llm = client(server)
    record_sleeps(llm)
    assert (await collect_stream(llm.stream("x"))).content == "ok"


async def test_named_error_event(server: LLMTestServer):
    server.push(RawReply([SSE_HEAD, b'event: error\ndata: {"message": "boom"}\n\n']))
    with pytest.raises(LLMServerError, match="boom"):
        await collect_stream(client(server, max_retries=0).stream("x"))


async def test_error_object_in_a_200_body_keeps_its_status(server: LLMTestServer):
    body = json.dumps(
        {"error": {"code": 400, "message": "bad grammar", "type": "invalid_request_error"}}
    )
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
    server.push(RawReply([head, body.encode()]))
    with pytest.raises(LLMBadRequestError, match="bad grammar"):
        await client(server).complete("x")


async def test_html_error_page_is_quoted_as_text(server: LLMTestServer):
    page = (
        b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
        b"<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n"
        b"</body>\r\n</html>\r\n"
    )
    head = b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n"
    server.push(RawReply([head % len(page), page]))
    with pytest.raises(LLMServerError) as info:
        await client(server, max_retries=0).complete("x")
    assert str(info.value).endswith("(HTTP 502): 502 Bad Gateway nginx (gave up after 1 attempt)")


async def test_html_page_with_200_says_to_check_the_base_url(server: LLMTestServer):
    page = b"<!doctype html><html><head><title>Open WebUI</title></head><body></body></html>"
    server.push(RawReply([b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n", page]))
    with pytest.raises(LLMResponseError, match=r"HTML page, not JSON.*base URL.*Open WebUI"):
        await client(server).complete("x")


# ---------------------------------------------------------------------------- slow servers


async def test_slow_loris_stream_of_keep_alives(server: LLMTestServer):
    server.push(RawReply([SSE_HEAD, *[p for _ in range(100) for p in (b": ping\n\n", 0.05)]]))
    started = time.monotonic()
    with pytest.raises(LLMTimeoutError, match=r"stalled: no complete event for 0\.3s"):
        await collect_stream(client(server, timeout=0.3).stream("x"))
    assert time.monotonic() - started < 3


async def test_slow_loris_stream_trickling_one_event(server: LLMTestServer):
    data = chunk({"content": "x" * 200})
    server.push(RawReply([SSE_HEAD, *[p for b in data for p in (bytes([b]), 0.02)]]))
    with pytest.raises(LLMTimeoutError, match="stalled"):
        await collect_stream(client(server, timeout=0.3).stream("x"))


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_slow_loris_headers(server: LLMTestServer, stream: bool):
    head = b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 100 + b"\r\n\r\n"
    server.push(RawReply([p for b in head for p in (bytes([b]), 0.02)]))
    llm = client(server, timeout=0.2)
    started = time.monotonic()
    with pytest.raises(LLMTimeoutError, match=r"did not send the whole .* within 0\.6s"):
        if stream:
            await collect_stream(llm.stream("x"))
        else:
            await llm.complete("x")
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream-ignored"])
async def test_slow_loris_json_body(server: LLMTestServer, stream: bool):
    body = json.dumps({"choices": [{"message": {"content": "y" * 200}, "finish_reason": "stop"}]})
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n"
    server.push(RawReply([head, *[p for b in body.encode() for p in (bytes([b]), 0.02)]]))
    llm = client(server, timeout=0.2)
    with pytest.raises(LLMTimeoutError, match=r"did not send the whole answer within 0\.6s"):
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
    llm = client(server)
    response = await llm.complete("x", tools=TOOLS)
    assert response.content == "a\ufffdb"
    assert response.tool_calls[0].arguments == {"tz": "\ufffd"}
    # the answer goes back in the history (and to a store) without an encoding error
    history = [UserMessage("x"), response.to_message(), ToolResultMessage("c", "out\udcff")]
    final = await collect_stream(llm.stream(history, tools=TOOLS))
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
