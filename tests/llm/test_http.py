"""Retries, error mapping and secret handling, against a real loopback server, for both
providers."""

from __future__ import annotations

import email.utils
import json
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import anyio
import pytest
from llm_server import (
    FLAVORS,
    OPENAI,
    Flavor,
    Hangup,
    LLMTestServer,
    RawReply,
    Reply,
    SSEReply,
    record_sleeps,
)
from structlog.testing import capture_logs

from dagagent.errors import (
    LLMAuthError,
    LLMBadRequestError,
    LLMConnectionError,
    LLMError,
    LLMRateLimitError,
    LLMResponseError,
    LLMServerError,
    LLMTimeoutError,
)
from dagagent.llm import (
    HTTPRetryPolicy,
    ModelSettings,
    Usage,
    UsageTracker,
    UserMessage,
    collect_stream,
)
from dagagent.llm._sse import bounded_lines
from dagagent.llm.wire import encode_sse

pytestmark = pytest.mark.anyio

NO_RETRY = ModelSettings(retry=HTTPRetryPolicy(max_retries=0))

KEY = "sk-test-SECRET-0123456789abcdef"


@pytest.fixture(params=FLAVORS, ids=lambda f: f.name)
def flavor(request: pytest.FixtureRequest) -> Flavor:
    return request.param  # type: ignore[no-any-return]


MESSAGES = [UserMessage("hi")]


# ---------------------------------------------------------------------------- retries


async def test_429_with_retry_after_seconds_then_success(server: LLMTestServer, flavor: Flavor):
    server.push(
        Reply(
            429,
            json=flavor.error("slow down", type="rate_limit_error"),
            headers={"Retry-After": "7"},
        ),
        Reply(json=flavor.text("ok")),
    )
    llm = flavor.client(server, api_key=KEY)
    sleeps = record_sleeps(llm)
    response = await llm.complete(MESSAGES)
    assert response.content == "ok"
    assert sleeps.delays == [7.0]
    assert len(server.requests) == 2


async def test_429_with_retry_after_http_date(server: LLMTestServer, flavor: Flavor):
    when = datetime.now(timezone.utc) + timedelta(seconds=30)
    server.push(
        Reply(
            429,
            json=flavor.error("slow down"),
            headers={"Retry-After": email.utils.format_datetime(when, usegmt=True)},
        ),
        Reply(json=flavor.text("ok")),
    )
    llm = flavor.client(server)
    sleeps = record_sleeps(llm)
    assert (await llm.complete(MESSAGES)).content == "ok"
    assert len(sleeps.delays) == 1
    assert 28.0 <= sleeps.delays[0] <= 30.0


async def test_retry_after_ms_header(server: LLMTestServer, flavor: Flavor):
    server.push(
        Reply(429, json=flavor.error("slow"), headers={"retry-after-ms": "250"}),
        Reply(json=flavor.text("ok")),
    )
    llm = flavor.client(server)
    sleeps = record_sleeps(llm)
    await llm.complete(MESSAGES)
    assert sleeps.delays == [0.25]


async def test_500_then_success_really_sleeps(server: LLMTestServer, flavor: Flavor):
    server.push(
        Reply(500, json=flavor.error("boom", type="api_error")), Reply(json=flavor.text("ok"))
    )
    llm = flavor.client(server, settings=ModelSettings(retry=HTTPRetryPolicy(base_delay_s=0.01)))
    with capture_logs() as logs:
        assert (await llm.complete(MESSAGES)).content == "ok"
    assert len(server.requests) == 2
    retries = [entry for entry in logs if entry["event"] == "llm.retry"]
    assert len(retries) == 1
    assert "HTTP 500" in retries[0]["reason"] and "boom" in retries[0]["reason"]


@pytest.mark.parametrize("status", [502, 503, 504, 529, 408])
async def test_other_transient_statuses_are_retried(
    server: LLMTestServer, flavor: Flavor, status: int
):
    server.push(Reply(status, body="upstream trouble"), Reply(json=flavor.text("ok")))
    llm = flavor.client(server)
    record_sleeps(llm)
    assert (await llm.complete(MESSAGES)).content == "ok"


async def test_server_errors_exhaust_retries(server: LLMTestServer, flavor: Flavor):
    server.push(*[Reply(503, json=flavor.error("overloaded", type="overloaded_error"))] * 3)
    llm = flavor.client(server, settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=2)))
    sleeps = record_sleeps(llm)
    with pytest.raises(LLMServerError) as info:
        await llm.complete(MESSAGES)
    assert len(server.requests) == 3
    assert len(sleeps.delays) == 2
    assert "HTTP 503" in str(info.value)
    assert "overloaded" in str(info.value)
    assert "gave up after 3 attempts" in str(info.value)


async def test_rate_limit_exhausts_retries(server: LLMTestServer, flavor: Flavor):
    server.push(*[Reply(429, json=flavor.error("quota"), headers={"Retry-After": "1"})] * 2)
    llm = flavor.client(server, settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=1)))
    record_sleeps(llm)
    with pytest.raises(LLMRateLimitError, match="quota"):
        await llm.complete(MESSAGES)


async def test_retry_after_past_the_budget_gives_up_at_once(server: LLMTestServer, flavor: Flavor):
    server.push(Reply(429, json=flavor.error("later"), headers={"Retry-After": "3600"}))
    llm = flavor.client(server, settings=ModelSettings(retry=HTTPRetryPolicy(max_retry_wait_s=10)))
    sleeps = record_sleeps(llm)
    with pytest.raises(LLMRateLimitError, match="retry budget"):
        await llm.complete(MESSAGES)
    assert sleeps.delays == []
    assert len(server.requests) == 1


async def test_backoff_grows_and_respects_the_wait_budget(server: LLMTestServer, flavor: Flavor):
    server.push(*[Reply(500, body="x")] * 4)
    llm = flavor.client(
        server,
        settings=ModelSettings(
            retry=HTTPRetryPolicy(max_retries=10, base_delay_s=1.0, max_retry_wait_s=8.0)
        ),
    )
    sleeps = record_sleeps(llm)
    with pytest.raises(LLMServerError, match=r"retry budget of 8\.0s used up"):
        await llm.complete(MESSAGES)
    # jittered exponential backoff: base * 2**n scaled into [0.5, 1]
    for n, delay in enumerate(sleeps.delays):
        assert 0.5 * 2**n <= delay <= 2**n
    assert sum(sleeps.delays) <= 8.0
    assert len(server.requests) == len(sleeps.delays) + 1


async def test_max_retries_zero_means_one_attempt(server: LLMTestServer, flavor: Flavor):
    server.push(Reply(500, body="x"))
    llm = flavor.client(server, settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=0)))
    with pytest.raises(LLMServerError, match="gave up after 1 attempt\\)"):
        await llm.complete(MESSAGES)


async def test_connection_refused_is_retried_then_raised(flavor: Flavor):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}" + ("/v1" if flavor.name == "openai" else "")
    llm = flavor.client_cls(
        "m", base_url=base, settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=2))
    )
    sleeps = record_sleeps(llm)
    with pytest.raises(LLMConnectionError, match="could not connect") as info:
        await llm.complete(MESSAGES)
    assert len(sleeps.delays) == 2
    assert "gave up after 3 attempts" in str(info.value)


async def test_hangup_without_answer_is_retried(server: LLMTestServer, flavor: Flavor):
    server.push(Hangup(), Reply(json=flavor.text("ok")))
    llm = flavor.client(server)
    record_sleeps(llm)
    assert (await llm.complete(MESSAGES)).content == "ok"


# ---------------------------------------------------------------------------- timeouts
# Real sockets and the client's real deadlines: these tests wait out a timeout (about 1 s)
# on the wall clock by design; the server thread cannot run on a test clock.


# Timeouts here are 1 s against a server 5 s late: a busy machine may take a few hundred
# milliseconds just to connect, which a shorter timeout would report as a connect failure.


async def test_read_timeout_raises_timeout_error_without_retry(
    server: LLMTestServer, flavor: Flavor
):
    server.push(Reply(json=flavor.text("late"), delay=5))
    llm = flavor.client(server, settings=ModelSettings(timeout=1.0))
    sleeps = record_sleeps(llm)
    with pytest.raises(LLMTimeoutError, match=r"did not answer within 1(\.0)?s"):
        await llm.complete(MESSAGES)
    assert sleeps.delays == []


async def test_read_timeout_retried_when_asked(server: LLMTestServer, flavor: Flavor):
    server.push(Reply(json=flavor.text("late"), delay=5), Reply(json=flavor.text("ok")))
    llm = flavor.client(server, settings=ModelSettings(timeout=1.0))
    sleeps = record_sleeps(llm)
    llm.retry = replace(llm.retry, retry_timeouts=True)
    assert (await llm.complete(MESSAGES)).content == "ok"
    assert len(sleeps.delays) == 1


async def test_stream_timeout(server: LLMTestServer, flavor: Flavor):
    server.push(Reply(json=flavor.text("late"), delay=5))
    llm = flavor.client(server, settings=ModelSettings(timeout=1.0))
    with pytest.raises(LLMTimeoutError):
        await collect_stream(llm.stream(MESSAGES))


async def test_stream_that_stalls_mid_way(server: LLMTestServer, flavor: Flavor):
    events = flavor.events(flavor.text("abcdefghijklmnop"))
    # stalls after some text, before the answer finished (an OpenAI stream that stalls
    # after its finish_reason is a finished answer)
    # (a Gemini stream's last chunk has its finishReason: it stalls before that one)
    pause_from = {"openai": 3, "anthropic": 4, "gemini": len(events) - 1}[flavor.name]
    server.push(SSEReply(events, pause=5, pause_from=pause_from))
    llm = flavor.client(server, settings=ModelSettings(timeout=1.0))
    sleeps = record_sleeps(llm)
    received: list[object] = []
    with pytest.raises(LLMTimeoutError, match=r"stalled: no (data|complete event) for 1(\.0)?s"):
        async for event in llm.stream(MESSAGES):
            received.append(event)
    assert received and sleeps.delays == []


# ---------------------------------------------------------------------------- 4xx


async def test_401_without_key_says_the_key_is_missing(
    server: LLMTestServer, flavor: Flavor, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv(flavor.key_env, raising=False)
    server.push(Reply(401, json=flavor.error("no auth header", type="authentication_error")))
    llm = flavor.client(server)
    with pytest.raises(LLMAuthError) as info:
        await llm.complete(MESSAGES)
    text = str(info.value)
    assert "missing" in text and flavor.key_env in text and "no auth header" in text
    assert len(server.requests) == 1  # never retried


@pytest.mark.parametrize("status", [401, 403])
async def test_bad_key_says_so_and_never_leaks(server: LLMTestServer, flavor: Flavor, status: int):
    server.push(
        Reply(
            status,
            json=flavor.error(f"Incorrect API key provided: {KEY}.", type="authentication_error"),
        )
    )
    llm = flavor.client(server, api_key=KEY)
    with pytest.raises(LLMAuthError) as info:
        await llm.complete(MESSAGES)
    text = str(info.value)
    assert "wrong" in text and flavor.key_env in text and f"HTTP {status}" in text
    assert KEY not in text and KEY not in repr(info.value)
    assert len(server.requests) == 1


async def test_400_shows_the_providers_error_text(server: LLMTestServer, flavor: Flavor):
    server.push(Reply(400, json=flavor.error("messages.0.content: must not be empty")))
    llm = flavor.client(server)
    with pytest.raises(LLMBadRequestError, match=r"messages\.0\.content: must not be empty"):
        await llm.complete(MESSAGES)
    assert len(server.requests) == 1


async def test_404_hints_at_model_and_base_url(server: LLMTestServer, flavor: Flavor):
    server.push(Reply(404, json=flavor.error("model not found", type="not_found_error")))
    llm = flavor.client(server)
    with pytest.raises(LLMBadRequestError) as info:
        await llm.complete(MESSAGES)
    assert "model not found" in str(info.value) and "'test-model'" in str(info.value)


async def test_422_detail_from_fastapi_style_servers(server: LLMTestServer, flavor: Flavor):
    server.push(
        Reply(422, json={"detail": [{"loc": ["body", "messages"], "msg": "field required"}]})
    )
    llm = flavor.client(server)
    with pytest.raises(LLMBadRequestError, match="field required"):
        await llm.complete(MESSAGES)


async def test_streaming_request_errors_are_mapped_too(server: LLMTestServer, flavor: Flavor):
    server.push(
        Reply(429, json=flavor.error("slow"), headers={"Retry-After": "0"}),
        flavor.sse(flavor.text("ok")),
    )
    server.push(Reply(400, json=flavor.error("bad stop sequence")))
    llm = flavor.client(server)
    assert (await collect_stream(llm.stream(MESSAGES))).content == "ok"
    with pytest.raises(LLMBadRequestError, match="bad stop sequence"):
        await collect_stream(llm.stream(MESSAGES))


# ---------------------------------------------------------------------------- malformed bodies


async def test_non_json_body_is_a_response_error_with_an_excerpt(
    server: LLMTestServer, flavor: Flavor
):
    server.push(
        Reply(
            200,
            body="<html><body>Gateway says hello</body></html>",
            headers={"Content-Type": "text/html"},
        )
    )
    llm = flavor.client(server)
    with pytest.raises(LLMResponseError) as info:
        await llm.complete(MESSAGES)
    assert "not JSON" in str(info.value) and "Gateway says hello" in str(info.value)


@pytest.mark.parametrize(
    "body",
    [
        {"id": "x"},
        {"choices": "nope", "content": "nope"},
        {"choices": [{"message": None}], "content": [{"text": "no type"}]},
        [1, 2, 3],
        "just a string",
        None,
    ],
)
async def test_json_of_the_wrong_shape_is_a_response_error(
    server: LLMTestServer, flavor: Flavor, body: object
):
    server.push(Reply(200, body=json.dumps(body), headers={"Content-Type": "application/json"}))
    llm = flavor.client(server)
    with pytest.raises(LLMResponseError, match="unexpected response"):
        await llm.complete(MESSAGES)


async def test_empty_choices_is_a_response_error(server: LLMTestServer):
    server.push(Reply(json={"id": "x", "choices": [], "model": "m"}))
    with pytest.raises(LLMResponseError, match="no choices"):
        await OPENAI.client(server).complete(MESSAGES)


# ---------------------------------------------------------------------------- secrets


async def test_key_never_leaks_into_errors_logs_or_repr(
    server: LLMTestServer, flavor: Flavor, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv(flavor.key_env, KEY)
    llm = flavor.client(server)  # key from the environment
    assert llm.has_api_key
    assert KEY not in repr(llm) and KEY not in str(vars(llm))
    echo = f"we saw key {KEY} here"
    server.push(
        Reply(500, json=flavor.error(echo)),
        Reply(500, json=flavor.error(echo)),
        Reply(400, json=flavor.error(echo)),
        Reply(200, body=echo),
        Reply(429, json=flavor.error(echo)),
        Reply(429, json=flavor.error(echo)),
        Reply(401, json=flavor.error(echo)),
    )
    record_sleeps(llm)
    llm.retry = replace(llm.retry, max_retries=1)
    errors: list[LLMError] = []
    with capture_logs() as logs:
        for _ in range(5):
            with pytest.raises(LLMError) as info:
                await llm.complete(MESSAGES)
            errors.append(info.value)
    assert [type(e) for e in errors] == [
        LLMServerError,
        LLMBadRequestError,
        LLMResponseError,
        LLMRateLimitError,
        LLMAuthError,
    ]
    for error in errors:
        assert KEY not in str(error) and KEY not in repr(error)
        assert "***" in str(error)
    assert logs, "retries and errors are logged"
    assert KEY not in repr(logs)
    # the key did reach the server, in the right header
    sent = server.requests[0].headers
    assert KEY in "".join(sent.get(h, "") for h in ("authorization", "x-api-key", "x-goog-api-key"))


async def test_no_key_means_no_auth_header(
    server: LLMTestServer, flavor: Flavor, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv(flavor.key_env, raising=False)
    server.push(Reply(json=flavor.text("ok")))
    llm = flavor.client(server)
    assert not llm.has_api_key
    await llm.complete(MESSAGES)
    headers = server.requests[0].headers
    assert "authorization" not in headers and "x-api-key" not in headers


# ---------------------------------------------------------------------------- usage


async def test_usage_is_summed_over_calls_and_can_be_shared(server: LLMTestServer, flavor: Flavor):
    tracker = UsageTracker()
    server.push(
        Reply(json=flavor.text("a", input_tokens=10, output_tokens=1)),
        flavor.sse(flavor.text("b", input_tokens=20, output_tokens=2)),
        Reply(json=flavor.text("c", input_tokens=30, output_tokens=3)),
    )
    llm = flavor.client(server, usage=tracker)
    other = flavor.client(server, usage=tracker)
    first = await llm.complete(MESSAGES)
    second = await collect_stream(llm.stream(MESSAGES))
    await other.complete(MESSAGES)
    assert first.usage.input_tokens == 10 and second.usage.output_tokens == 2
    assert (tracker.calls, tracker.input_tokens, tracker.output_tokens) == (3, 60, 6)
    third = Usage(input_tokens=30, output_tokens=3)
    assert tracker.total == (first.usage + second.usage + third).model_copy(update={"calls": 3})
    assert llm.usage is tracker


async def test_failed_calls_do_not_count_usage(server: LLMTestServer, flavor: Flavor):
    server.push(Reply(400, json=flavor.error("no")))
    llm = flavor.client(server)
    with pytest.raises(LLMBadRequestError):
        await llm.complete(MESSAGES)
    assert llm.usage.calls == 0


# ---------------------------------------------------------------------------- pooling


async def test_async_with_keeps_one_connection_pool(server: LLMTestServer, flavor: Flavor):
    server.push(*[Reply(json=flavor.text("ok"))] * 4)
    llm = flavor.client(server)
    async with llm:
        await llm.complete(MESSAGES)
        await llm.complete(MESSAGES)
    await llm.complete(MESSAGES)
    await llm.complete(MESSAGES)
    ports = [r.client_port for r in server.requests]
    assert ports[0] == ports[1]  # reused inside the block
    assert ports[2] != ports[3]  # a fresh pool per call outside it


# ---------------------------------------------------------------- keys in partial echoes

LONG_KEY = "sk-proj-" + "".join(f"{i:02x}Q" for i in range(66))  # 206 characters


@pytest.mark.parametrize("before", [0, 420, 495])
async def test_a_key_cut_by_the_error_excerpt_or_echoed_in_part_is_not_shown(
    server: LLMTestServer, flavor: Flavor, before: int
) -> None:
    # the key straddles the 500-character cut, and the server echoes a middle piece of it
    body = "x" * before + "bad key " + LONG_KEY + " piece: " + LONG_KEY[50:120]
    server.push(Reply(401, body=body))
    llm = flavor.client(
        server, api_key=LONG_KEY, settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=0))
    )
    with capture_logs() as logs, pytest.raises(LLMAuthError) as caught:
        await llm.complete(MESSAGES)
    shown = str(caught.value) + json.dumps(logs, default=str)
    for i in range(len(LONG_KEY) - 8 + 1):
        assert LONG_KEY[i : i + 8] not in shown, (i, shown)


async def test_credentials_in_the_base_url_are_sent_but_never_shown(flavor: Flavor) -> None:
    with LLMTestServer() as server:
        server.push(Reply(500, body="boom"))
        llm = flavor.client(server, settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=0)))
        host = server.url.removeprefix("http://")
        llm = type(llm)(
            "m", base_url=llm.base_url.replace(host, f"ann:hunter2pw@{host}"), settings=NO_RETRY
        )
        assert "hunter2pw" not in repr(llm) and "hunter2pw" not in llm.base_url
        with capture_logs() as logs, pytest.raises(LLMServerError) as caught:
            await llm.complete(MESSAGES)
        assert server.requests[0].headers.get("authorization", "").startswith("Basic ")
    # a server that went away: the connection error names the URL, without its password
    with pytest.raises(LLMConnectionError) as gone:
        await type(llm)("m", base_url=f"http://ann:hunter2pw@{host}", settings=NO_RETRY).complete(
            MESSAGES
        )
    shown = str(caught.value) + str(gone.value) + json.dumps(logs, default=str)
    assert "hunter2pw" not in shown and "ann:" not in shown


# ---------------------------------------------------------------- answers too large to hold


@pytest.mark.parametrize("status", [200, 500])
async def test_an_answer_larger_than_the_cap_fails_clearly_without_retrying(
    server: LLMTestServer, flavor: Flavor, status: int
) -> None:
    huge = b'{"a": "' + b"x" * (3 * 1024 * 1024) + b'"}'
    server.push(Reply(status, body=huge, headers={"content-type": "application/json"}))
    llm = flavor.client(server, settings=ModelSettings(max_response_bytes=1024 * 1024))
    with pytest.raises(LLMResponseError, match="larger than 1,048,576 bytes"):
        await llm.complete(MESSAGES)
    assert len(server.requests) == 1  # not read again on a retry


async def test_a_stream_answered_in_one_huge_piece_is_capped(
    server: LLMTestServer, flavor: Flavor
) -> None:
    huge = b'{"a": "' + b"x" * (3 * 1024 * 1024) + b'"}'
    server.push(Reply(200, body=huge, headers={"content-type": "application/json"}))
    llm = flavor.client(server, settings=ModelSettings(max_response_bytes=1024 * 1024))
    with pytest.raises(LLMResponseError, match="larger than"):
        await collect_stream(llm.stream(MESSAGES))


async def test_an_answer_under_the_cap_is_read(server: LLMTestServer, flavor: Flavor) -> None:
    server.push(Reply(json=flavor.text("y" * 5000)))
    llm = flavor.client(server, settings=ModelSettings(max_response_bytes=64 * 1024))
    assert (await llm.complete(MESSAGES)).content == "y" * 5000


# ------------------------------------------------- event streams that never end, or grow too big

_SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"


def _prelude_and_delta(flavor: Flavor) -> tuple[bytes, bytes]:
    """The events of a streamed answer up to its first piece of text, and that piece."""
    events = flavor.events(flavor.text("abc"))
    first = next(i for i, (_, data) in enumerate(events) if "abc" in json.dumps(data))
    return encode_sse(events[:first]), encode_sse([events[first]])


def _endless(flavor: Flavor, *, pause: float = 0.0, upto: int = 20 * 1024 * 1024) -> RawReply:
    """A stream of text deltas that never ends: as fast as it can (until ``upto`` bytes, so
    that a client without a cap is not fed without end either, then it stalls), or one every
    ``pause`` seconds."""
    prelude, delta = _prelude_and_delta(flavor)

    def parts() -> Iterator[bytes | float]:
        yield _SSE_HEAD + prelude
        sent = 0
        while sent < upto:
            yield delta
            sent += len(delta)
            if pause:
                yield pause
        yield 60.0

    return RawReply(parts())  # type: ignore[arg-type]  # any iterable of parts does


async def test_a_stream_that_never_ends_is_cut_off_at_the_size_cap(
    server: LLMTestServer, flavor: Flavor
) -> None:
    server.push(_endless(flavor))
    llm = flavor.client(server, settings=ModelSettings(max_response_bytes=256 * 1024, timeout=5.0))
    with anyio.fail_after(30), pytest.raises(LLMResponseError, match="larger than 262,144"):
        await collect_stream(llm.stream(MESSAGES))
    assert len(server.requests) == 1  # not asked again


async def test_one_gigantic_event_is_cut_off_at_the_size_cap(
    server: LLMTestServer, flavor: Flavor
) -> None:
    prelude, _ = _prelude_and_delta(flavor)
    # one data line that never ends (8 MB of it, then the server stalls)
    line = [b"data: {" + b'"x": "'] + [b"x" * 65536] * 128 + [60.0]
    server.push(RawReply([_SSE_HEAD + prelude, *line]))
    llm = flavor.client(server, settings=ModelSettings(max_response_bytes=256 * 1024, timeout=5.0))
    with anyio.fail_after(30), pytest.raises(LLMResponseError, match="larger than 262,144"):
        await collect_stream(llm.stream(MESSAGES))


async def test_a_stream_trickling_without_end_is_cut_off_at_the_time_cap(
    server: LLMTestServer, flavor: Flavor
) -> None:
    server.push(_endless(flavor, pause=0.1))
    llm = flavor.client(server, settings=ModelSettings(max_stream_s=1.5, timeout=5.0))
    started = anyio.current_time()
    with anyio.fail_after(30), pytest.raises(LLMResponseError, match=r"lasted longer than 1.5 s"):
        await collect_stream(llm.stream(MESSAGES))
    assert anyio.current_time() - started < 10


async def test_bounded_lines_splits_every_line_end_across_chunks() -> None:
    async def chunks() -> AsyncIterator[str]:
        for c in ["a\r", "\nb\rc", "\n", "d", "e\r\n\r\n", "tail"]:
            yield c

    assert [line async for line in bounded_lines(chunks())] == ["a", "b", "c", "de", "", "tail"]


async def test_a_server_echoing_the_url_password_or_a_secret_header_shows_neither(
    flavor: Flavor,
) -> None:
    """Whatever the client sends that is secret (the URL's password, as written or inside
    the Basic header that carries it; an Authorization or X-Api-Key header of the caller's)
    is scrubbed from what a server echoes back, whole or in part."""
    token = "tok-9f8e7d6c5b4a39281706"

    def echo(request: Any) -> Reply:
        said = " | ".join(f"{k}={v}" for k, v in request.headers.items())
        return Reply(400, json=flavor.error(f"you sent {said}; password hunter2pw; {token[3:17]}"))

    with LLMTestServer(echo) as server:
        host = server.url.removeprefix("http://")
        base = flavor.client(server).base_url.replace(host, f"ann:hunter2pw@{host}")
        llm = type(flavor.client(server))(
            "m", base_url=base, settings=NO_RETRY, headers={"X-Api-Key": token}
        )
        with capture_logs() as logs, pytest.raises(LLMBadRequestError) as caught:
            await llm.complete(MESSAGES)
    shown = str(caught.value) + json.dumps(logs, default=str)
    basic = "YW5uOmh1bnRlcjJwdw"  # base64 of ann:hunter2pw (its first 18 characters)
    for secret in ("hunter2pw", basic, token, token[3:17]):
        assert secret not in shown, secret
    assert "you sent" in shown  # the rest of the message is kept
