"""Provider fallback (``FallbackLLM``): a call moves on to the next model for a rate limit past
the retries, an outage, an unreachable server or a prompt too long for the context window,
and for nothing else (a bad request, a cancelled call); a stream moves on only before its
first event; the call's record names the model that answered and the models given up on.

Each model is a real client talking to its own loopback server in its provider's format."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import anyio
import pytest
from llm_server import ANTHROPIC, OPENAI, LLMTestServer, Reply, SSEReply, events_of
from structlog.testing import capture_logs

from dagagent.errors import (
    ConfigError,
    LLMAuthError,
    LLMBadRequestError,
    LLMConnectionError,
    LLMContextLengthError,
    LLMRateLimitError,
    LLMServerError,
)
from dagagent.llm import (
    AnthropicChat,
    FallbackLLM,
    HTTPRetryPolicy,
    LiveCall,
    MeteredLLM,
    ModelSettings,
    OpenAIChat,
    StreamEnd,
    TextDelta,
    UserMessage,
    fallback,
    from_env,
    from_spec,
    wire,
)
from dagagent.llm.router import fallback_reason

pytestmark = pytest.mark.anyio

ONE_RETRY = ModelSettings(retry=HTTPRetryPolicy(max_retries=1))
ASK = [UserMessage("Which city is warmer?")]
CONTEXT_OPENAI = (
    "This model's maximum context length is 128000 tokens. However, your messages resulted "
    "in 130512 tokens. Please reduce the length of the messages."
)
CONTEXT_ANTHROPIC = "prompt is too long: 210044 tokens > 200000 maximum"


@pytest.fixture
def second() -> Iterator[LLMTestServer]:
    """The server of the fallback model (Anthropic's format)."""
    with LLMTestServer() as srv:
        yield srv
        srv.check()


def pair(primary: LLMTestServer, secondary: LLMTestServer, **options: Any) -> FallbackLLM:
    first = OPENAI.client(primary, settings=ONE_RETRY)
    other = ANTHROPIC.client(secondary, settings=ONE_RETRY)
    return fallback(first, other, **options)


def rate_limited() -> Reply:
    return Reply(429, json=wire.openai_error("Rate limit reached", type="rate_limit_error"))


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- what moves a call on --------------------------------------------------------------------


async def test_a_rate_limit_past_the_retries_moves_the_call_to_the_next_model(
    server: LLMTestServer, second: LLMTestServer
) -> None:
    server.push(rate_limited(), rate_limited())  # the first try and its one retry
    second.push(Reply(json=wire.anthropic_text("Tokyo", model="claude-test")))
    with capture_logs() as logs:
        answer = await pair(server, second).complete(ASK)
    assert answer.content == "Tokyo" and answer.model == "claude-test"
    assert len(server.requests) == 2 and len(second.requests) == 1
    assert second.requests[0].path == "/v1/messages"  # asked in Anthropic's own format
    (moved,) = [e for e in logs if e["event"] == "llm.fallback"]
    assert moved["model"] == "openai:test-model" and moved["reason"] == "rate_limit"
    assert moved["next_model"] == "anthropic:test-model"


async def test_an_outage_moves_the_call_on(server: LLMTestServer, second: LLMTestServer) -> None:
    server.push(Reply(503, body="upstream down"), Reply(503, body="upstream down"))
    second.push(Reply(json=wire.anthropic_text("Tokyo")))
    assert (await pair(server, second).complete(ASK)).content == "Tokyo"


async def test_an_unreachable_server_moves_the_call_on(second: LLMTestServer) -> None:
    gone = OpenAIChat(
        "test-model",
        base_url=f"http://127.0.0.1:{closed_port()}/v1",
        settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=0)),
    )
    second.push(Reply(json=wire.anthropic_text("Tokyo")))
    llm = fallback(gone, ANTHROPIC.client(second))
    assert (await llm.complete(ASK)).content == "Tokyo"


async def test_a_prompt_too_long_for_the_context_moves_the_call_on(
    server: LLMTestServer, second: LLMTestServer
) -> None:
    body = wire.openai_error(CONTEXT_OPENAI)
    body["error"]["code"] = "context_length_exceeded"
    server.push(Reply(400, json=body))  # refused at once: a 400 is never retried
    second.push(Reply(json=wire.anthropic_text("Tokyo")))
    assert (await pair(server, second).complete(ASK)).content == "Tokyo"
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("flavor", "body"),
    [
        (OPENAI, wire.openai_error(CONTEXT_OPENAI)),
        (ANTHROPIC, wire.anthropic_error(CONTEXT_ANTHROPIC)),
    ],
    ids=["openai", "anthropic"],
)
async def test_each_provider_says_context_too_long_as_its_own_error(
    server: LLMTestServer, flavor: Any, body: dict[str, Any]
) -> None:
    server.push(Reply(400, json=body))
    with pytest.raises(LLMContextLengthError, match="longer than the context window"):
        await flavor.client(server).complete(ASK)


# -- what does not ---------------------------------------------------------------------------


async def test_a_bad_request_is_raised_without_asking_the_next_model(
    server: LLMTestServer, second: LLMTestServer
) -> None:
    server.push(Reply(400, json=wire.openai_error("messages[0].role: unknown role 'boss'")))
    with pytest.raises(LLMBadRequestError, match="unknown role") as caught:
        await pair(server, second).complete(ASK)
    assert not isinstance(caught.value, LLMContextLengthError)
    assert fallback_reason(caught.value) is None
    assert second.requests == []


async def test_a_refused_key_is_raised_unless_auth_is_named(
    server: LLMTestServer, second: LLMTestServer
) -> None:
    server.push(Reply(401, json=wire.openai_error("Incorrect API key")))
    with pytest.raises(LLMAuthError):
        await pair(server, second).complete(ASK)
    assert second.requests == []
    server.push(Reply(401, json=wire.openai_error("Incorrect API key")))
    second.push(Reply(json=wire.anthropic_text("Tokyo")))
    llm = pair(server, second, on=["auth", "rate_limit"])
    assert (await llm.complete(ASK)).content == "Tokyo"


async def test_a_cancelled_call_is_not_sent_to_the_next_model(second: LLMTestServer) -> None:
    arrived = threading.Event()

    def hold(request: Any) -> Reply:
        arrived.set()
        return Reply(json=wire.openai_text("late"), delay=30)  # cut short when the test ends

    with LLMTestServer(responder=hold) as slow:
        llm = pair(slow, second)
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(llm.complete, ASK)
                await anyio.to_thread.run_sync(arrived.wait)  # the request is at the server
                scope.cancel()
        assert scope.cancelled_caught
        assert len(slow.requests) == 1
    assert second.requests == []


async def test_when_every_model_fails_the_last_error_says_what_the_others_did(
    server: LLMTestServer, second: LLMTestServer
) -> None:
    server.push(rate_limited(), rate_limited())
    overloaded = wire.anthropic_error("Overloaded", type="overloaded_error")
    second.push(Reply(529, json=overloaded), Reply(529, json=overloaded))
    with pytest.raises(LLMServerError) as caught:
        await pair(server, second).complete(ASK)
    message = str(caught.value)
    assert "overloaded (HTTP 529)" in message
    assert "after falling back from openai:test-model: LLMRateLimitError" in message


# -- streams ---------------------------------------------------------------------------------


async def test_a_stream_moves_on_before_its_first_event(
    server: LLMTestServer, second: LLMTestServer
) -> None:
    server.push(rate_limited(), rate_limited())
    second.push(ANTHROPIC.sse(wire.anthropic_text("Tokyo is warmer")))
    events = await events_of(pair(server, second), ASK)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Tokyo is warmer"
    assert isinstance(events[-1], StreamEnd)
    assert events[-1].response.content == "Tokyo is warmer"


async def test_a_stream_that_failed_after_its_first_event_is_not_moved_on(
    server: LLMTestServer, second: LLMTestServer
) -> None:
    events = OPENAI.events(wire.openai_text("Tokyo is warmer than Paris"))
    outage = {"error": {"message": "upstream died", "code": 503}}
    server.push(SSEReply([*events[:2], (None, outage)]))
    got: list[Any] = []
    with pytest.raises(LLMServerError, match="upstream died"):
        async for event in pair(server, second).stream(ASK):
            got.append(event)
    assert any(isinstance(e, TextDelta) for e in got)
    assert second.requests == []


# -- which model answered ----------------------------------------------------------------------


class Ended:
    def __init__(self) -> None:
        self.calls: list[LiveCall] = []

    def started(self, call: LiveCall) -> None:
        pass

    def wrote(self, call: LiveCall) -> None:
        pass

    def ended(self, call: LiveCall) -> None:
        self.calls.append(call)

    def rejected(self, call: LiveCall, issues: Sequence[str]) -> None:
        pass


@pytest.mark.parametrize("streamed", [False, True], ids=["complete", "stream"])
async def test_the_call_names_the_model_that_answered_and_the_one_given_up_on(
    server: LLMTestServer, second: LLMTestServer, streamed: bool
) -> None:
    server.push(rate_limited(), rate_limited())
    body = wire.anthropic_text("Tokyo")
    second.push(ANTHROPIC.sse(body) if streamed else Reply(json=body))
    observer = Ended()
    llm = MeteredLLM(pair(server, second), observer=observer)
    if streamed:
        await events_of(llm, ASK)
    else:
        await llm.complete(ASK)
    (call,) = observer.calls
    assert call.outcome == "answered"
    assert (call.model, call.provider, call.server) == ("test-model", "anthropic", second.url)
    (gave_up,) = call.options["fallback"]
    assert gave_up["model"] == "openai:test-model" and gave_up["reason"] == "rate_limit"
    assert gave_up["error"].startswith("LLMRateLimitError: OpenAI-compatible server at")
    assert [f.model for f in call.fallbacks] == ["openai:test-model"]


async def test_a_call_that_did_not_move_on_has_no_fallback_note(server: LLMTestServer) -> None:
    server.push(Reply(json=wire.openai_text("Tokyo")))
    with LLMTestServer() as unused:
        observer = Ended()
        await MeteredLLM(pair(server, unused), observer=observer).complete(ASK)
    (call,) = observer.calls
    assert call.model == "test-model" and call.provider == "openai"
    assert "fallback" not in call.options and call.fallbacks == []


# -- building one ------------------------------------------------------------------------------


def test_a_fallback_needs_two_models_and_known_reasons() -> None:
    one = OpenAIChat("a")
    with pytest.raises(ConfigError, match="at least two models"):
        FallbackLLM([one])
    with pytest.raises(ConfigError, match="unknown fallback reason 'bad_request'"):
        fallback(one, AnthropicChat("b"), on=["rate_limit", "bad_request"])


def test_a_comma_list_of_specs_is_a_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DAGAGENT_MODEL", "DAGAGENT_BASE_URL", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    llm = from_spec("openai:gpt-4o, anthropic:claude-sonnet-4-5", base_url="http://a.test/v1")
    assert isinstance(llm, FallbackLLM)
    first, other = llm.models
    assert isinstance(first, OpenAIChat) and first.base_url == "http://a.test/v1"
    assert isinstance(other, AnthropicChat) and other.base_url == "https://api.anthropic.com"
    assert llm.model == "gpt-4o" and llm.base_url == "http://a.test/v1"
    monkeypatch.setenv("DAGAGENT_MODEL", "openai:llama3.1:8b,anthropic:claude-x")
    monkeypatch.setenv("DAGAGENT_BASE_URL", "http://localhost:11434/v1")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://b.test")
    env = from_env()
    assert isinstance(env, FallbackLLM)
    assert [getattr(m, "base_url", None) for m in env.models] == [
        "http://localhost:11434/v1",
        "http://b.test",
    ]
    with pytest.raises(ConfigError, match="empty entry"):
        from_spec("openai:gpt-4o,,anthropic:claude-x")
    with pytest.raises(ConfigError, match="unknown model spec 'mistral:large'"):
        from_spec("openai:gpt-4o,mistral:large")


async def test_async_with_opens_every_model_pool(
    server: LLMTestServer, second: LLMTestServer
) -> None:
    server.push(rate_limited(), rate_limited(), Reply(json=wire.openai_text("Paris")))
    second.push(Reply(json=wire.anthropic_text("Tokyo")))
    async with pair(server, second) as llm:
        assert (await llm.complete(ASK)).content == "Tokyo"
        assert (await llm.complete(ASK)).content == "Paris"
    assert server.requests[1].client_port == server.requests[2].client_port  # one pool


def test_an_error_class_says_whether_another_model_may_help() -> None:
    assert fallback_reason(LLMRateLimitError("x")) == "rate_limit"
    assert fallback_reason(LLMConnectionError("x")) == "connection"
    assert fallback_reason(LLMContextLengthError("x")) == "context_length"
    assert fallback_reason(LLMBadRequestError("x")) is None
    assert fallback_reason(ValueError("x")) is None
