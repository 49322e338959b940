"""The Gemini client in Gemini's own wire format, against a loopback server speaking it:
what goes out (contents and parts, systemInstruction, functionDeclarations, toolConfig,
generationConfig with the response schema in Gemini's dialect, the key header, the stream
URL), what comes back (function calls with their thought signatures, usage with thinking,
finish reasons, blocked prompts, answers as SSE chunks or a JSON array), and the errors
Gemini reports its own way. (The retries and error mapping every client shares run against
Gemini too, in test_http.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
from llm_server import GEMINI, PLAN_SCHEMA, TOOLS, LLMTestServer, Reply, SSEReply, events_of

import dagagent
from dagagent.errors import (
    LLMAuthError,
    LLMContextLengthError,
    LLMRateLimitError,
    LLMResponseError,
    LLMUnsupportedOptionError,
)
from dagagent.llm import (
    AssistantMessage,
    GeminiChat,
    HTTPRetryPolicy,
    ModelSettings,
    ResponseFormat,
    ScriptedLLM,
    StreamEnd,
    SystemMessage,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResultMessage,
    UserMessage,
    from_env,
    from_spec,
    wire,
)
from dagagent.llm._gemini_format import gemini_schema
from dagagent.planners import plan_json_schema
from dagagent.toolkits.demo import registry as demo

pytestmark = pytest.mark.anyio

KEY = "AIzaSy-test-0123456789abcdefghijkl"
NO_RETRY = ModelSettings(retry=HTTPRetryPolicy(max_retries=0))
ASK = [SystemMessage("Be brief."), UserMessage("Weather in Paris?")]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GEMINI_BASE_URL", "DAGAGENT_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def client(server: LLMTestServer, **options: Any) -> GeminiChat:
    llm = GEMINI.client(server, **options)
    assert isinstance(llm, GeminiChat)
    return llm


# -- what goes out -----------------------------------------------------------------------------


async def test_a_request_in_gemini_format(server: LLMTestServer) -> None:
    server.push(Reply(json=wire.gemini_text("Sunny.")))
    llm = client(server, api_key=KEY, settings=ModelSettings(temperature=0.2))
    answer = await llm.complete(ASK, tools=TOOLS, tool_choice="get_time", max_tokens=300, stop="##")
    assert answer.content == "Sunny." and answer.finish_reason == "stop"
    (request,) = server.requests
    assert request.path == "/v1beta/models/test-model:generateContent"
    assert request.headers["x-goog-api-key"] == KEY and "authorization" not in request.headers
    body = request.json
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Weather in Paris?"}]}]
    (tools,) = body["tools"]
    assert [d["name"] for d in tools["functionDeclarations"]] == ["get_weather", "get_time"]
    assert tools["functionDeclarations"][0]["parameters"] == {
        "type": "object",
        "properties": {"city": {"type": "string"}},
    }
    assert body["toolConfig"] == {
        "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_time"]}
    }
    assert body["generationConfig"] == {
        "maxOutputTokens": 300,
        "temperature": 0.2,
        "stopSequences": ["##"],
    }


@pytest.mark.parametrize(
    ("choice", "mode"), [("auto", "AUTO"), ("none", "NONE"), ("required", "ANY")]
)
async def test_tool_choice_modes(server: LLMTestServer, choice: str, mode: str) -> None:
    server.push(Reply(json=wire.gemini_text("ok")))
    await client(server).complete(ASK, tools=TOOLS, tool_choice=choice)
    assert server.requests[0].json["toolConfig"] == {"functionCallingConfig": {"mode": mode}}


async def test_a_response_format_is_json_output_with_a_schema_gemini_takes(
    server: LLMTestServer,
) -> None:
    server.push(Reply(json=wire.gemini_text('{"tasks": ["a"]}')))
    answer = await client(server).complete(ASK, response_format=ResponseFormat("plan", PLAN_SCHEMA))
    assert json.loads(answer.content) == {"tasks": ["a"]}
    config = server.requests[0].json["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseSchema"] == {
        "type": "object",
        "properties": {"tasks": {"type": "array", "items": {"type": "string"}}},
        "required": ["tasks"],
    }


def test_the_planners_schema_is_rewritten_into_gemini_s_dialect() -> None:
    converted = json.dumps(gemini_schema(plan_json_schema(demo)))
    for word in ("additionalProperties", "exclusiveMinimum", "$ref", "$defs", "const", "oneOf"):
        assert f'"{word}"' not in converted
    assert '"anyOf"' in converted and '"enum": ["get_weather"]' in converted
    schema = {
        "$defs": {"City": {"type": "object", "properties": {"name": {"const": "Paris"}}}},
        "type": "object",
        "properties": {
            "city": {"$ref": "#/$defs/City"},
            "note": {"type": ["string", "null"], "default": None},
            "tags": {"type": "array"},
            "n": {"type": "integer", "enum": [1, 2]},
        },
    }
    assert gemini_schema(schema) == {
        "type": "object",
        "properties": {
            "city": {"type": "object", "properties": {"name": {"enum": ["Paris"]}}},
            "note": {"type": "string", "nullable": True},
            "tags": {"type": "array", "items": {}},
            "n": {"type": "integer"},  # Gemini's enums are of strings
        },
    }


async def test_a_tool_loop_history_goes_back_as_function_parts(server: LLMTestServer) -> None:
    server.push(Reply(json=wire.gemini_text("18 C in Paris, 24.5 C in Tokyo.")))
    given = ToolCall(id="srv-1", name="get_weather", arguments={"city": "Paris"}, signature="c2ln")
    local = ToolCall(id="gemini-call-abc", name="get_weather", arguments={"city": "Tokyo"})
    history = [
        *ASK,
        AssistantMessage("Looking both up.", [given, local]),
        ToolResultMessage("srv-1", '{"temp_c": 18}'),
        ToolResultMessage("gemini-call-abc", "no such city", is_error=True),
        UserMessage("And?"),
    ]
    await client(server).complete(history, tools=TOOLS)
    contents = server.requests[0].json["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert contents[1]["parts"] == [
        {"text": "Looking both up."},
        {
            "functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "srv-1"},
            "thoughtSignature": "c2ln",  # sent back with its call, as thinking models need
        },
        {"functionCall": {"name": "get_weather", "args": {"city": "Tokyo"}}},  # no made-up id
    ]
    assert contents[2]["parts"] == [
        {
            "functionResponse": {
                "name": "get_weather",
                "response": {"output": '{"temp_c": 18}'},
                "id": "srv-1",
            }
        },
        {"functionResponse": {"name": "get_weather", "response": {"error": "no such city"}}},
        {"text": "And?"},
    ]


async def test_a_model_named_with_its_resource_prefix_and_odd_characters(
    server: LLMTestServer,
) -> None:
    server.push(Reply(json=wire.gemini_text("ok")))
    llm = GeminiChat("models/tuned/x y", base_url=server.url + "/v1beta")
    await llm.complete(ASK)
    assert server.requests[0].path == "/v1beta/models/tuned%2Fx%20y:generateContent"


# -- what comes back ---------------------------------------------------------------------------


async def test_function_calls_with_ids_signatures_usage_and_thinking(
    server: LLMTestServer,
) -> None:
    body = wire.gemini_function_calls(
        [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})],
        text="Checking.",
        ids=True,
        signature="c2lnbmF0dXJl",
        input_tokens=120,
        output_tokens=30,
    )
    body["usageMetadata"]["thoughtsTokenCount"] = 50
    body["candidates"][0]["content"]["parts"].insert(0, {"text": "I think...", "thought": True})
    server.push(Reply(json=body))
    answer = await client(server).complete(ASK, tools=TOOLS)
    assert answer.content == "Checking."  # the thought summary is not the answer
    assert answer.finish_reason == "tool_calls"
    first, second = answer.tool_calls
    assert (first.id, first.name, first.arguments) == (
        "gemini_call_1",
        "get_weather",
        {"city": "Paris"},
    )
    assert first.signature == "c2lnbmF0dXJl" and second.signature is None
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (120, 80)
    assert answer.model == "gemini-test"


async def test_calls_without_ids_get_local_ones(server: LLMTestServer) -> None:
    server.push(Reply(json=wire.gemini_function_calls([("get_weather", {"city": "Paris"})])))
    (call,) = (await client(server).complete(ASK, tools=TOOLS)).tool_calls
    assert call.id.startswith("gemini-call-") and call.arguments == {"city": "Paris"}


async def test_a_stream_is_sse_chunks_of_whole_responses(server: LLMTestServer) -> None:
    body = wire.gemini_function_calls(
        [("get_weather", {"city": "Paris"})], text="Let me check the weather.", signature="s1"
    )
    server.push(GEMINI.sse(body))
    events = await events_of(client(server), ASK, tools=TOOLS)
    request = server.requests[0]
    assert request.path == "/v1beta/models/test-model:streamGenerateContent?alt=sse"
    assert request.headers["accept"] == "text/event-stream"
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(texts) > 1 and "".join(texts) == "Let me check the weather."
    (delta,) = [e for e in events if isinstance(e, ToolCallDelta)]
    assert delta.name == "get_weather" and json.loads(delta.arguments or "") == {"city": "Paris"}
    end = events[-1]
    assert isinstance(end, StreamEnd)
    assert end.response.tool_calls[0].signature == "s1"
    assert end.response.finish_reason == "tool_calls"
    assert (end.response.usage.input_tokens, end.response.usage.output_tokens) == (10, 5)


async def test_a_stream_request_answered_as_a_json_array(server: LLMTestServer) -> None:
    chunks = [data for _, data in wire.gemini_events(wire.gemini_text("Sunny and warm."))]
    server.push(Reply(json=chunks))
    events = await events_of(client(server), ASK)
    assert isinstance(events[-1], StreamEnd) and events[-1].response.content == "Sunny and warm."


async def test_a_stream_closed_before_its_finish_reason(server: LLMTestServer) -> None:
    events = wire.gemini_events(wire.gemini_text("Sunny and warm today."))
    # closed before any chunk: asked again; closed after one: the piece was read, so it fails
    server.push(SSEReply(events, cut_after=0), GEMINI.sse(wire.gemini_text("Sunny.")))
    server.push(SSEReply(events, cut_after=1))
    llm = client(server)
    answer = await events_of(llm, ASK)
    assert isinstance(answer[-1], StreamEnd) and answer[-1].response.content == "Sunny."
    got: list[Any] = []
    with pytest.raises(LLMResponseError, match=r"ended early.*not retried"):
        async for event in llm.stream(ASK):
            got.append(event)
    assert [e.text for e in got if isinstance(e, TextDelta)] == ["Sunny an"]
    assert len(server.requests) == 3


async def test_finish_reasons_and_a_blocked_prompt(server: LLMTestServer) -> None:
    server.push(
        Reply(json=wire.gemini_text("Sunny and", finish_reason="MAX_TOKENS")),
        Reply(json=wire.gemini_text("", finish_reason="SAFETY")),
        Reply(json={"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": {}}),
    )
    llm = client(server)
    assert (await llm.complete(ASK)).finish_reason == "length"
    assert (await llm.complete(ASK)).finish_reason == "content_filter"
    blocked = await llm.complete(ASK)
    assert blocked.finish_reason == "content_filter" and blocked.content == ""


async def test_an_answer_without_a_finish_reason_is_an_error(server: LLMTestServer) -> None:
    body = wire.gemini_text("half")
    del body["candidates"][0]["finishReason"]
    server.push(Reply(json=body))
    with pytest.raises(LLMResponseError, match="finishReason"):
        await client(server, settings=NO_RETRY).complete(ASK)


# -- errors Gemini's way -------------------------------------------------------------------------


async def test_a_wrong_key_is_a_400_that_is_an_auth_error(server: LLMTestServer) -> None:
    server.push(
        Reply(400, json=wire.gemini_error("API key not valid. Please pass a valid API key."))
    )
    with pytest.raises(LLMAuthError, match="refused the API key") as caught:
        await client(server, api_key=KEY).complete(ASK)
    assert KEY not in str(caught.value) and len(server.requests) == 1


async def test_input_too_long_is_a_context_length_error(server: LLMTestServer) -> None:
    message = (
        "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
    )
    server.push(Reply(400, json=wire.gemini_error(message)))
    with pytest.raises(LLMContextLengthError, match="input token count"):
        await client(server).complete(ASK)


async def test_a_refused_schema_is_an_unsupported_response_format(server: LLMTestServer) -> None:
    message = (
        'Invalid JSON payload received. Unknown name "foo" at '
        "'generation_config.response_schema.properties[0].value': Cannot find field."
    )
    server.push(Reply(400, json=wire.gemini_error(message)))
    with pytest.raises(LLMUnsupportedOptionError) as caught:
        await client(server).complete(ASK, response_format=ResponseFormat("p", PLAN_SCHEMA))
    assert caught.value.option == "response_format"


async def test_resource_exhausted_is_retried_then_a_rate_limit(server: LLMTestServer) -> None:
    quota = wire.gemini_error("Quota exceeded", code=429, status="RESOURCE_EXHAUSTED")
    server.push(Reply(429, json=quota), Reply(429, json=quota))
    llm = client(server, settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=1)))
    with pytest.raises(LLMRateLimitError, match=r"Quota exceeded \[RESOURCE_EXHAUSTED\]"):
        await llm.complete(ASK)
    assert len(server.requests) == 2


async def test_an_error_chunk_mid_stream(server: LLMTestServer) -> None:
    events = wire.gemini_events(wire.gemini_text("Sunny and warm today."))
    unavailable = wire.gemini_error("The model is overloaded.", code=503, status="UNAVAILABLE")
    server.push(SSEReply([events[0], (None, unavailable)]))
    got: list[Any] = []
    with pytest.raises(Exception, match="overloaded") as caught:
        async for event in client(server).stream(ASK):
            got.append(event)
    assert type(caught.value).__name__ == "LLMServerError" and got  # a piece had come


# -- naming it -------------------------------------------------------------------------------


def test_gemini_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    llm = from_spec("gemini:gemini-2.5-flash")
    assert isinstance(llm, GeminiChat)
    assert llm.base_url == "https://generativelanguage.googleapis.com/v1beta"
    assert llm.provider == "Gemini" and not llm.has_api_key
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    monkeypatch.setenv("GEMINI_BASE_URL", "http://gemini.test/v1beta")
    env = from_env("gemini:gemini-2.5-pro")
    assert isinstance(env, GeminiChat)
    assert env.has_api_key and env.base_url == "http://gemini.test/v1beta"


async def test_a_solve_with_an_agent_task_in_gemini_format() -> None:
    registry = dagagent.Registry()

    @registry.tool
    def get_weather(city: str) -> dict[str, Any]:
        """Weather of a city.

        Args:
            city: The city.
        """
        return {"city": city, "temp_c": 18.0}

    task = {"id": "note", "instruction": "How warm is Paris?", "tools": ["get_weather"]}
    finish = {"action": "finish", "answer": "18 C", "cites": ["note"]}
    llm = ScriptedLLM.gemini(
        [
            wire.gemini_text(json.dumps({"tasks": [task]})),
            wire.gemini_function_calls([("get_weather", {"city": "Paris"})], signature="sig"),
            wire.gemini_text("It is 18 C in Paris."),
            wire.gemini_text(json.dumps(finish)),
        ]
    )
    async with llm:
        solution = await dagagent.solve("How warm is Paris?", registry, llm, agent_tasks=True)
    assert solution.ok and solution.answer == "18 C"
    followup = llm.wire_requests[2]["contents"]
    call_part = followup[-2]["parts"][-1]
    assert call_part["functionCall"]["name"] == "get_weather"
    assert call_part["thoughtSignature"] == "sig"
    (result,) = followup[-1]["parts"]
    assert result["functionResponse"]["name"] == "get_weather"
    assert "18.0" in json.dumps(result["functionResponse"]["response"])
    assert [c.provider for c in solution.calls] == ["gcp.gemini"] * 4
