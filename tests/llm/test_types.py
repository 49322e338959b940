"""Provider-neutral types and the pure helpers of the HTTP layer."""

from __future__ import annotations

import pickle
from collections.abc import AsyncIterator
from datetime import datetime, timezone

import pydantic
import pytest

from dagagent.errors import LLMResponseError
from dagagent.llm import (
    LLM,
    AnthropicChat,
    AssistantMessage,
    LLMRequest,
    LLMResponse,
    OpenAIChat,
    ResponseFormat,
    StreamEnd,
    StreamEvent,
    SystemMessage,
    TextDelta,
    ToolCall,
    ToolResultMessage,
    Usage,
    UsageTracker,
    UserMessage,
    collect_stream,
    normalize_messages,
    parse_tool_arguments,
)
from dagagent.llm._error_text import provider_error_text
from dagagent.llm._retry import HTTPRetryPolicy, parse_retry_after
from dagagent.llm._secret import Secret
from dagagent.llm._sse import iter_sse

pytestmark = pytest.mark.anyio


def test_usage_adds_up() -> None:
    a = Usage(input_tokens=3, output_tokens=1)
    b = Usage(input_tokens=4, output_tokens=2)
    assert a + b == Usage(input_tokens=7, output_tokens=3)
    assert sum([a, b]) == a + b
    assert (a + b).total_tokens == 10
    with pytest.raises(TypeError):
        a + 1  # type: ignore[operator]


def test_usage_tracker() -> None:
    tracker = UsageTracker()
    tracker.record(Usage(input_tokens=5, output_tokens=1))
    tracker.record(Usage(input_tokens=2, output_tokens=2))
    assert (tracker.calls, tracker.input_tokens, tracker.output_tokens) == (2, 7, 3)
    assert tracker.total == Usage(input_tokens=7, output_tokens=3, calls=2)
    assert tracker.total_tokens == 10
    assert repr(tracker) == "UsageTracker(calls=2, input_tokens=7, output_tokens=3)"
    tracker.reset()
    assert tracker.total == Usage() and tracker.calls == 0


@pytest.mark.parametrize(
    ("raw", "arguments", "error_part"),
    [
        ('{"a": 1}', {"a": 1}, None),
        ({"a": 1}, {"a": 1}, None),
        ("", {}, None),
        ("  ", {}, None),
        (None, {}, None),
        ('{"a": ', {}, "not valid JSON"),
        ("[1]", {}, "must be a JSON object, got list"),
        ('"text"', {}, "got str"),
    ],
)
def test_parse_tool_arguments(
    raw: object, arguments: dict[str, object], error_part: str | None
) -> None:
    got, error = parse_tool_arguments(raw)  # type: ignore[arg-type]
    assert got == arguments
    if error_part is None:
        assert error is None
    else:
        assert error is not None and error_part in error and str(raw) in error


def test_tool_call_keeps_bad_arguments_for_the_model() -> None:
    bad = ToolCall.from_raw("c1", "f", '{"x": tru')
    assert bad.arguments == {} and bad.raw_arguments == '{"x": tru'
    assert bad.arguments_json() == '{"x": tru'
    good = ToolCall.from_raw("c2", "f", '{"x": true}')
    assert good.raw_arguments is None and good.arguments_json() == '{"x": true}'


def test_messages_positional_frozen_and_from_dicts() -> None:
    messages = normalize_messages(
        [
            SystemMessage("s"),
            {"role": "user", "content": "u"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "1", "name": "f", "arguments": {}}],
            },
            {"role": "tool", "tool_call_id": "1", "content": "r", "is_error": True},
        ]
    )
    assert messages == [
        SystemMessage("s"),
        UserMessage("u"),
        AssistantMessage("", [ToolCall(id="1", name="f")]),
        ToolResultMessage("1", "r", is_error=True),
    ]
    assert normalize_messages("hello") == [UserMessage("hello")]
    with pytest.raises(pydantic.ValidationError):
        messages[1].content = "changed"  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        normalize_messages([{"role": "wizard", "content": "x"}])
    with pytest.raises(pydantic.ValidationError):
        UserMessage("x", extra_field=1)


def test_response_repr_and_dump_leave_raw_out() -> None:
    response = LLMResponse(content="hi", raw={"secret_blob": "x" * 100})
    assert "secret_blob" not in repr(response)
    assert "raw" not in response.model_dump()
    assert response.raw["secret_blob"]
    assert response.to_message() == AssistantMessage("hi")


def test_response_format_coercion() -> None:
    fmt = ResponseFormat("plan", {"type": "object"})
    assert fmt.strict is True
    assert ResponseFormat.coerce(fmt) is fmt
    assert ResponseFormat.coerce({"type": "array"}) == ResponseFormat(
        "response", {"type": "array"}, strict=False
    )
    assert ResponseFormat.coerce(None) is None

    class Plan(pydantic.BaseModel):
        tasks: list[str]

    from_model = ResponseFormat.from_model(Plan)
    assert from_model.name == "Plan" and from_model.schema["properties"]["tasks"]["type"] == "array"


def test_request_build_normalises() -> None:
    request = LLMRequest.build("hi", stop="END", stream=True)
    assert request.messages == [UserMessage("hi")]
    assert request.stop == ["END"] and request.tools == [] and request.stream


async def test_collect_stream() -> None:
    async def events(final: bool) -> AsyncIterator[StreamEvent]:
        yield TextDelta("a")
        if final:
            yield StreamEnd(LLMResponse(content="a"))

    assert (await collect_stream(events(True))).content == "a"
    with pytest.raises(LLMResponseError, match="without a final response"):
        await collect_stream(events(False))


def test_clients_implement_the_protocol() -> None:
    assert isinstance(OpenAIChat("m"), LLM)
    assert isinstance(AnthropicChat("m"), LLM)
    assert not isinstance(object(), LLM)


# ---------------------------------------------------------------------------- HTTP helpers


async def test_sse_parser() -> None:
    async def lines() -> AsyncIterator[str]:
        for line in [
            ": comment",
            "event: first",
            "data: line one",
            "data:line two",
            "id: 7",
            "",
            "",
            "data: {}",
            "\r",
            "event: ignored-without-data",
            "",
            "data: unterminated",
        ]:
            yield line

    events = [e async for e in iter_sse(lines())]
    assert [(e.event, e.data, e.id) for e in events] == [
        ("first", "line one\nline two", "7"),
        ("message", "{}", "7"),
    ]


def test_retry_after_parsing() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after": "-4"}) == 0.0
    assert parse_retry_after({"retry-after": "Wed, 01 Jan 2025 12:00:10 GMT"}, now) == 10.0
    assert parse_retry_after({"retry-after": "Wed, 01 Jan 2025 11:00:00 GMT"}, now) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after-ms": "120", "retry-after": "9"}) == 0.12
    assert parse_retry_after({}) is None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            '{"error": {"message": "bad model", "type": "invalid_request_error"}}',
            "bad model [invalid_request_error]",
        ),
        (
            '{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}',
            "Overloaded [overloaded_error]",
        ),
        ('{"error": "model \\"x\\" not found"}', 'model "x" not found'),
        ('{"detail": "Not Found"}', "Not Found"),
        ('{"message": "nope"}', "nope"),
        ("<html>502 Bad Gateway</html>", "502 Bad Gateway"),
        ("", "(empty body)"),
    ],
)
def test_provider_error_text(body: str, expected: str) -> None:
    assert provider_error_text(body) == expected


def test_backoff_is_exponential_with_jitter_and_capped() -> None:
    policy = HTTPRetryPolicy(base_delay_s=1.0, max_delay_s=5.0)
    for n in range(6):
        delay = policy.backoff(n)
        cap = min(5.0, 2.0**n)
        assert cap / 2 <= delay <= cap
    assert len({policy.backoff(3) for _ in range(20)}) > 1  # jittered


def test_secret_hides_itself() -> None:
    secret = Secret("sk-live-abcdef")
    assert repr(secret) == str(secret) == "Secret('***')"
    assert secret.reveal() == "sk-live-abcdef"
    assert secret.scrub("key sk-live-abcdef!") == "key ***!"
    with pytest.raises(TypeError):
        pickle.dumps(secret)
