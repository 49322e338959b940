"""ScriptedLLM in plain mode (typed answers) and wire mode (provider JSON through the real
clients)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from dagagent.errors import LLMBadRequestError, LLMServerError, LLMTimeoutError
from dagagent.llm import (
    LLM,
    AnthropicChat,
    GeminiChat,
    HTTPChatClient,
    HTTPRetryPolicy,
    LLMRequest,
    LLMResponse,
    ModelSettings,
    OpenAIChat,
    ResponseFormat,
    ScriptedLLM,
    ScriptError,
    StreamEnd,
    SystemMessage,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolSpec,
    Usage,
    UserMessage,
    collect_stream,
    wire,
)

pytestmark = pytest.mark.anyio


TOOL = ToolSpec(
    "search", "Search the web", {"type": "object", "properties": {"q": {"type": "string"}}}
)
CALL = ToolCall(id="c1", name="search", arguments={"q": "dagagent"})


# ---------------------------------------------------------------------------- plain mode


async def test_answers_in_order_and_records_requests():
    seen: list[LLMRequest] = []

    def echo_last(request: LLMRequest) -> str:
        seen.append(request)
        last = request.last_message
        assert isinstance(last, UserMessage)
        return f"you said {last.content}"

    async def later(request: LLMRequest) -> LLMResponse:
        return LLMResponse(content="async", usage=Usage(input_tokens=1, output_tokens=1))

    with ScriptedLLM(
        [
            "plain",
            LLMResponse(tool_calls=[CALL], usage=Usage(input_tokens=3, output_tokens=4)),
            echo_last,
            later,
        ],
        model="fake",
    ) as llm:
        first = await llm.complete([SystemMessage("sys"), UserMessage("a")], temperature=0.1)
        second = await llm.complete("b", tools=[TOOL], stop="X", max_tokens=9)
        third = await llm.complete("c", response_format={"type": "object"})
        fourth = await llm.complete("d")

    assert (first.content, first.model, first.finish_reason) == ("plain", "fake", "stop")
    assert second.tool_calls == [CALL] and second.model == "fake"
    assert third.content == "you said c" and seen[0] is llm.requests[2]
    assert fourth.content == "async"
    assert llm.calls == 4
    r0, r1, r2, _ = llm.requests
    assert r0.messages == [SystemMessage("sys"), UserMessage("a")] and r0.temperature == 0.1
    assert r0.system == "sys"
    assert r1.tools == [TOOL] and r1.stop == ["X"] and r1.max_tokens == 9 and not r1.stream
    assert r2.response_format == ResponseFormat("response", {"type": "object"}, strict=False)
    assert (llm.usage.calls, llm.usage.input_tokens, llm.usage.output_tokens) == (4, 4, 5)


async def test_scripted_exception_is_raised():
    llm = ScriptedLLM([LLMServerError("down"), "ok"])
    with pytest.raises(LLMServerError, match="down"):
        await llm.complete("x")
    assert (await llm.complete("x")).content == "ok"
    llm.assert_exhausted()


async def test_calling_too_often_fails_loudly_and_is_remembered():
    llm = ScriptedLLM(["one"])
    await llm.complete("first")
    with pytest.raises(
        ScriptError, match=r"call #2 was not scripted \(the script has 1 item\)"
    ) as info:
        await llm.complete("second question")
    assert isinstance(info.value, AssertionError)
    assert "second question" in str(info.value)
    # even if the code under test swallowed the error, the check at the end catches it
    with pytest.raises(ScriptError, match="call #2"):
        llm.assert_exhausted()


async def test_calling_too_rarely_fails_at_exit():
    with (
        pytest.raises(
            ScriptError, match=r"2 of 3 scripted answers never used \(the model was called 1 time\)"
        ),
        ScriptedLLM(["a", "b", "c"]) as llm,
    ):
        await llm.complete("x")


async def test_exit_does_not_hide_the_real_error():
    with pytest.raises(KeyError), ScriptedLLM(["a", "b"]):
        raise KeyError("real problem")


async def test_push_extends_the_script():
    llm = ScriptedLLM()
    llm.push("late")
    assert llm.remaining == 1
    assert (await llm.complete("x")).content == "late"
    assert llm.remaining == 0 and llm.last_request.messages == [UserMessage("x")]


async def test_bad_script_item_is_reported():
    llm = ScriptedLLM([lambda request: 42])  # type: ignore[list-item,arg-type,return-value]
    with pytest.raises(ScriptError, match="got int"):
        await llm.complete("x")


async def test_stream_chunks_content_and_tool_calls():
    response = LLMResponse(content="Hello scripted world", tool_calls=[CALL])
    async with ScriptedLLM([response], chunk_size=5) as llm:
        events = [event async for event in llm.stream("hi", tools=[TOOL])]
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert texts == ["Hello", " scri", "pted ", "world"]
    assert ToolCallDelta(0, "c1", "search", '{"q": "dagagent"}') in events
    assert (
        isinstance(events[-1], StreamEnd) and events[-1].response.content == "Hello scripted world"
    )
    assert llm.requests[0].stream is True


async def test_stream_raises_scripted_exception():
    llm = ScriptedLLM([LLMTimeoutError("slow")])
    with pytest.raises(LLMTimeoutError):
        await collect_stream(llm.stream("x"))


def test_satisfies_the_protocol():
    assert isinstance(ScriptedLLM(), LLM)
    assert "remaining=0" in repr(ScriptedLLM())


# ---------------------------------------------------------------------------- wire mode


async def test_openai_wire_mode_runs_the_real_client():
    llm = ScriptedLLM.openai(
        [
            wire.openai_tool_calls([("search", {"q": "a"}), ("search", "{broken")]),
            httpx.Response(500, json=wire.openai_error("hiccup", type="server_error")),
            "final answer",
        ]
    )
    async with llm:
        first = await llm.complete("find", tools=[TOOL])
        assert [c.arguments for c in first.tool_calls] == [{"q": "a"}, {}]
        assert first.tool_calls[1].arguments_error is not None
        final = await collect_stream(llm.stream([UserMessage("find"), first.to_message()]))
    assert final.content == "final answer"
    assert llm.calls == 2 and len(llm.wire_requests) == 3  # one retry after the 500
    assert llm.wire_requests[0]["tools"][0]["function"]["name"] == "search"
    assert llm.wire_requests[2]["stream"] is True
    assert llm.usage.calls == 2


async def test_openai_wire_mode_streams_tool_calls_and_history():
    llm = ScriptedLLM.openai([wire.openai_tool_calls([("search", {"q": "x" * 40})]), "done"])
    async with llm:
        events = [e async for e in llm.stream("go", tools=[TOOL])]
        deltas = [e for e in events if isinstance(e, ToolCallDelta)]
        assert len(deltas) >= 2  # arguments arrived in pieces
        response = events[-1]
        assert isinstance(response, StreamEnd)
        await llm.complete([UserMessage("go"), response.response.to_message()])
    history = llm.wire_requests[1]["messages"]
    assert history[1]["tool_calls"][0]["function"]["arguments"] == json.dumps({"q": "x" * 40})


async def test_anthropic_wire_mode_runs_the_real_client():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    llm = ScriptedLLM.anthropic(
        [
            httpx.Response(529, json=wire.anthropic_error("Overloaded", type="overloaded_error")),
            wire.anthropic_tool_use([("answer", {"n": 7})]),
            LLMResponse(content="streamed", usage=Usage(input_tokens=2, output_tokens=3)),
            wire.anthropic_error("nope"),
        ]
    )
    async with llm:
        structured = await llm.complete("n?", response_format=ResponseFormat("answer", schema))
        streamed = await collect_stream(llm.stream("more"))
        with pytest.raises(LLMBadRequestError, match="nope"):
            await llm.complete("again")
    assert json.loads(structured.content) == {"n": 7}
    assert streamed.content == "streamed" and streamed.usage.output_tokens == 3
    assert llm.wire_requests[0]["tool_choice"] == {"type": "tool", "name": "answer"}
    assert llm.wire_requests[2]["stream"] is True


async def test_wire_mode_callable_and_exception_items():
    def answer(body: dict[str, Any]) -> dict[str, Any]:
        return wire.openai_text(f"{len(body['messages'])} messages")

    llm = ScriptedLLM.openai([httpx.ConnectError("refused"), answer])
    async with llm:
        response = await llm.complete([UserMessage("a"), UserMessage("b")])
    assert response.content == "2 messages"


async def test_wire_mode_over_and_under_calls():
    llm = ScriptedLLM.openai(["only one"])
    await llm.complete("x")
    with pytest.raises(ScriptError, match=r"HTTP request #2 was not scripted"):
        await llm.complete("y")
    await llm.aclose()

    with pytest.raises(ScriptError, match="1 of 2 scripted HTTP answers never used"):
        async with ScriptedLLM.anthropic(["a", "b"]) as under:
            await under.complete("x")


async def test_wire_mode_passes_client_options():
    llm = ScriptedLLM.openai(
        [httpx.Response(503), httpx.Response(503)],
        settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=1)),
    )
    async with llm:
        with pytest.raises(LLMServerError, match="gave up after 2 attempts"):
            await llm.complete("x")
    assert llm.backend is not None and llm.backend.retry.max_retries == 1


def test_wire_mode_finds_the_client_by_its_wire_format() -> None:
    class MyOpenAI(OpenAIChat):  # inherits wire_format: does not replace OpenAIChat
        pass

    assert HTTPChatClient.for_wire_format("openai") is OpenAIChat
    assert HTTPChatClient.for_wire_format("anthropic") is AnthropicChat
    assert isinstance(ScriptedLLM.anthropic(["ok"]).backend, AnthropicChat)
    assert MyOpenAI.wire_format == "openai"
    assert HTTPChatClient.for_wire_format("gemini") is GeminiChat
    assert isinstance(ScriptedLLM.gemini(["ok"]).backend, GeminiChat)
    with pytest.raises(LookupError, match="no client speaks 'bedrock'"):
        HTTPChatClient.for_wire_format("bedrock")
