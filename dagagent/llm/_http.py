"""HTTP plumbing shared by the provider clients.

What lives here: keeping the API key secret, retries with exponential backoff and
jitter (honouring ``Retry-After``), mapping HTTP and transport failures onto the
``LLM*Error`` tree, reading server-sent events, and usage accounting.

Retry rules: connection failures, 408, 429 and every 5xx (including Anthropic's 529
"overloaded") are retried, at most ``max_retries`` times and for at most
``max_retry_wait_s`` seconds of waiting in total. A stream is retried only while nothing
has been yielded to the caller yet. 401/403 and other 4xx are never retried.
"""

from __future__ import annotations

import contextlib
import email.utils
import functools
import html
import json
import os
import random
import re
import ssl
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
)
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, ClassVar, TypeVar
from urllib.parse import urlsplit

import anyio
import httpx
import structlog
from pydantic import ValidationError

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
from dagagent.llm.types import (
    LLMResponse,
    RequestLLM,
    UsageTracker,
    dumps_json,
    loads_json,
)

__all__ = [
    "HTTPChatClient",
    "RetryPolicy",
    "SSEEvent",
    "Secret",
    "StreamIdleTimeout",
    "excerpt",
    "iter_sse",
    "parse_retry_after",
    "provider_error_text",
]


def _log(event: str, **fields: Any) -> None:
    """A warning on the ``dagagent.llm`` logger (retries and errors only).

    The logger is looked up per event so a structlog configuration made later by the
    application applies, and a broken logging setup (say, a closed stream) never turns
    a model call into a crash: like the standard library's handlers, logging failures
    are swallowed.
    """
    with contextlib.suppress(Exception):
        structlog.get_logger("dagagent.llm").warning(event, **fields)


T = TypeVar("T")
_Client = TypeVar("_Client", bound="HTTPChatClient")

# ---------------------------------------------------------------------------- secrets


class Secret:
    """An API key that does not show itself: ``repr``/``str`` give ``'***'``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def scrub(self, text: str) -> str:
        """``text`` with every occurrence of the key replaced by ``***``."""
        if len(self._value) >= 3 and self._value in text:
            return text.replace(self._value, "***")
        return text

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("API keys are not pickled")


def resolve_api_key(explicit: str | None, env_var: str) -> Secret | None:
    """The key from the argument, else from ``env_var``; ``None`` when neither is set."""
    value = explicit if explicit is not None else os.environ.get(env_var)
    value = (value or "").strip()
    return Secret(value) if value else None


# ---------------------------------------------------------------------------- helpers


def excerpt(text: str, limit: int = 200) -> str:
    """A one-line, length-capped quote of ``text`` for error messages."""
    one_line = " ".join(text.split())
    if not one_line:
        return "(empty body)"
    return one_line if len(one_line) <= limit else one_line[:limit] + "…"


def provider_error_text(body: str) -> str:
    """The provider's own error message from an error body, or a quote of the body.

    Understands ``{"error": {"message": ...}}`` (OpenAI, Anthropic, vLLM), ``{"error":
    "..."}`` (Ollama, llama.cpp), ``{"detail": ...}`` (FastAPI servers) and
    ``{"message": ...}``.
    """
    try:
        data = json.loads(body)
    except ValueError:
        if _HTML_RE.match(body):
            return excerpt(_html_text(body), 500)
        return excerpt(body, 500)
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            message = error.get("message")
            if isinstance(message, str) and message:
                kind = error.get("type") or error.get("code")
                return f"{message} [{kind}]" if isinstance(kind, str) and kind else message
            return excerpt(json.dumps(error), 500)
        if isinstance(error, str) and error:
            return error
        for key in ("detail", "message"):
            value = data.get(key)
            if isinstance(value, str) and value:
                return value
            if value:
                return excerpt(json.dumps(value), 500)
    return excerpt(body, 500)


_HTML_RE = re.compile(r"\s*(<!doctype html|<html|<head|<body|<\?xml|<center|<h1)", re.IGNORECASE)
_HTML_DROP_RE = re.compile(r"<(script|style)\b.*?</\1\s*>|<!--.*?-->", re.IGNORECASE | re.DOTALL)
_HTML_TAG_RE = re.compile(r"<[^>]*>")


def _html_text(body: str) -> str:
    """The words of an HTML error page (a proxy's "502 Bad Gateway"), without its markup;
    a title repeated as the heading is said once."""
    text = html.unescape(_HTML_TAG_RE.sub(" ", _HTML_DROP_RE.sub(" ", body)))
    words: list[str] = []
    for line in text.splitlines():
        line = " ".join(line.split())
        if line and line not in words:
            words.append(line)
    return " ".join(words)


def parse_retry_after(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """Seconds to wait from ``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms``."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    now = now or datetime.now(timezone.utc)
    return max(0.0, (when - now).total_seconds())


@dataclass(frozen=True)
class RetryPolicy:
    """How failed requests are retried.

    The n-th retry waits ``min(max_delay_s, base_delay_s * 2**n)`` scaled by a random
    factor in [0.5, 1] (jitter), or exactly what ``Retry-After`` says. Giving up happens
    after ``max_retries`` retries or when the next wait would take the total waiting past
    ``max_retry_wait_s``. Read timeouts are retried only with ``retry_timeouts=True``
    (a slow model would otherwise block for ``(max_retries + 1) * timeout``); connect
    timeouts always are. ``sleep`` is the function used to wait (tests replace it).
    """

    max_retries: int = 3
    base_delay_s: float = 0.5
    max_delay_s: float = 20.0
    max_retry_wait_s: float = 60.0
    retry_timeouts: bool = False
    sleep: Callable[[float], Awaitable[None]] = field(
        default=anyio.sleep, repr=False, compare=False
    )

    def backoff(self, retry_number: int) -> float:
        delay = min(self.max_delay_s, self.base_delay_s * (2.0**retry_number))
        return delay * random.uniform(0.5, 1.0)


class Retryable(Exception):
    """Internal: a failure worth another attempt. ``kind`` is raised on giving up."""

    def __init__(self, kind: type[LLMError], message: str, retry_after: float | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after = retry_after

    def final(self, note: str) -> LLMError:
        return self.kind(f"{self.message} ({note})")


# ---------------------------------------------------------------------------- SSE


@dataclass(frozen=True)
class SSEEvent:
    """One server-sent event; ``event`` is ``"message"`` when the server named none."""

    event: str
    data: str
    id: str | None = None

    def json(self) -> Any:
        return loads_json(self.data)


class StreamIdleTimeout(httpx.ReadTimeout):
    """No complete event arrived in time, though bytes may have (keep-alive comments, or
    a server trickling its answer byte by byte, which a read timeout alone never catches
    because every byte restarts it)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no complete event for {seconds:g}s")
        self.seconds = seconds


IdleLimit = float | Callable[[], float | None] | None
"""Seconds each server-sent event may take to arrive, a function giving them (asked before
each event), or None for no limit."""


async def iter_sse(lines: AsyncIterator[str], *, idle: IdleLimit = None) -> AsyncIterator[SSEEvent]:
    """Parse ``text/event-stream`` lines into events (an unterminated last event is dropped,
    as the SSE spec says).

    With ``idle``, each event (counted from the previous one, or from the start) must be
    complete within that many seconds, else :class:`StreamIdleTimeout` is raised; comment
    lines and bytes that do not complete an event do not count.
    """
    event = ""
    data: list[str] = []
    last_id: str | None = None
    iterator = aiter(lines)
    limit = idle() if callable(idle) else idle
    deadline = None if limit is None else anyio.current_time() + limit
    while True:
        try:
            if deadline is None:
                raw = await anext(iterator)
            else:
                with anyio.move_on_after(deadline - anyio.current_time()) as scope:
                    raw = await anext(iterator)
                if scope.cancelled_caught:
                    raise StreamIdleTimeout(limit or 0.0)
        except StopAsyncIteration:
            return
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield SSEEvent(event=event or "message", data="\n".join(data), id=last_id)
                limit = idle() if callable(idle) else idle
                deadline = None if limit is None else anyio.current_time() + limit
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
        elif name == "id":
            last_id = value


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Building a context loads the CA bundle (~25 ms); one per process is enough.
    return httpx.create_ssl_context()


def _new_client(timeout: httpx.Timeout) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=timeout, verify=_ssl_context())


def is_event_stream(response: httpx.Response) -> bool:
    return "text/event-stream" in response.headers.get("content-type", "")


# ---------------------------------------------------------------------------- client base


class HTTPChatClient(RequestLLM):
    """Base of the HTTP model clients: configuration, secrets, retries, error mapping.

    A client may be used as ``async with client:`` to keep one connection pool for all
    calls inside the block; outside such a block every call opens (and closes) its own
    pool, so a client works from any event loop and never leaks sockets. Pass ``client=``
    to use your own ``httpx.AsyncClient`` (it is never closed by dagagent).
    """

    provider_label: ClassVar[str] = "LLM"
    official_host: ClassVar[str] = ""
    api_key_env: ClassVar[str] = ""

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None = None,
        timeout: float | httpx.Timeout = 60.0,
        max_retries: int = 3,
        retry_base_delay_s: float = 0.5,
        max_retry_wait_s: float = 60.0,
        client: httpx.AsyncClient | None = None,
        headers: Mapping[str, str] | None = None,
        usage: UsageTracker | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self._key = resolve_api_key(api_key, self.api_key_env)
        self.timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self.retry = RetryPolicy(
            max_retries=max_retries,
            base_delay_s=retry_base_delay_s,
            max_retry_wait_s=max_retry_wait_s,
        )
        self.usage = usage if usage is not None else UsageTracker()
        self._client = client
        self._session: httpx.AsyncClient | None = None
        self._extra_headers = dict(headers or {})

    # -- presentation ---------------------------------------------------------------

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def provider(self) -> str:
        """Who we talk to, for messages: the provider, or the compatible server's URL."""
        host = urlsplit(self.base_url).hostname or ""
        if host == self.official_host:
            return self.provider_label
        return f"{self.provider_label}-compatible server at {self.base_url}"

    @property
    def has_api_key(self) -> bool:
        return self._key is not None

    def _scrub(self, text: str) -> str:
        return self._key.scrub(text) if self._key is not None else text

    def _auth_headers(self) -> dict[str, str]:
        raise NotImplementedError

    def _encode_body(self, body: Any) -> bytes:
        """The request as UTF-8 JSON. Text that is not Unicode (a lone surrogate, from a
        tool's output say) is sent with U+FFFD in its place rather than failing the call."""
        try:
            return dumps_json(body)
        except ValueError as exc:
            raise LLMBadRequestError(f"the request to {self.provider} is not JSON: {exc}") from None

    def _headers(self, *, stream: bool) -> dict[str, str]:
        headers = {
            "accept": "text/event-stream" if stream else "application/json",
            "content-type": "application/json",
        }
        headers.update(self._extra_headers)
        headers.update(self._auth_headers())
        return headers

    def _url(self, path: str) -> str:
        return self.base_url + path

    # -- connection pool -------------------------------------------------------------

    async def __aenter__(self: _Client) -> _Client:
        if self._client is None and self._session is None:
            self._session = _new_client(self.timeout)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the pool opened by ``async with`` (a ``client=`` you passed stays open)."""
        session, self._session = self._session, None
        if session is not None:
            await session.aclose()

    @asynccontextmanager
    async def _client_scope(self) -> AsyncIterator[httpx.AsyncClient]:
        if self._client is not None:
            yield self._client
        elif self._session is not None:
            yield self._session
        else:
            async with _new_client(self.timeout) as client:
                yield client

    # -- failures --------------------------------------------------------------------

    def _timeout_failure(self, exc: httpx.TimeoutException, *, mid_stream: bool) -> Exception:
        if isinstance(exc, httpx.ConnectTimeout):
            seconds = self.timeout.connect
            return Retryable(
                LLMTimeoutError,
                f"could not connect to {self.provider} within {seconds}s",
            )
        if isinstance(exc, httpx.PoolTimeout):
            return LLMTimeoutError(
                f"no free connection to {self.provider} within {self.timeout.pool}s"
            )
        if isinstance(exc, StreamIdleTimeout):
            message = (
                f"the stream from {self.provider} stalled: no complete event for {exc.seconds:g}s"
            )
        elif mid_stream:
            message = f"the stream from {self.provider} stalled: no data for {self.timeout.read}s"
        else:
            message = f"{self.provider} did not answer within {self.timeout.read}s (timeout)"
        if self.retry.retry_timeouts:
            return Retryable(LLMTimeoutError, message)
        return LLMTimeoutError(message)

    def _deadline_failure(self, seconds: float | None, *, what: str) -> Exception:
        message = (
            f"{self.provider} did not send the whole {what} within {seconds:g}s (it trickled "
            "it, or kept the connection open without finishing)"
        )
        if self.retry.retry_timeouts:
            return Retryable(LLMTimeoutError, message)
        return LLMTimeoutError(message)

    def _transport_failure(self, exc: httpx.TransportError) -> Exception:
        detail = self._scrub(str(exc) or type(exc).__name__)
        if isinstance(exc, httpx.UnsupportedProtocol | httpx.LocalProtocolError | httpx.ProxyError):
            return LLMConnectionError(f"cannot send to {self.base_url!r}: {detail}")
        if isinstance(exc, httpx.ConnectError):
            return Retryable(LLMConnectionError, f"could not connect to {self.provider}: {detail}")
        return Retryable(LLMConnectionError, f"connection to {self.provider} failed: {detail}")

    def _auth_message(self, status: int, text: str) -> str:
        env = self.api_key_env
        if self._key is None:
            return (
                f"{self.provider} refused the request (HTTP {status}): the API key is missing. "
                f"Set {env} or pass api_key=... Provider said: {text}"
            )
        return (
            f"{self.provider} refused the API key (HTTP {status}): the key is wrong, expired "
            f"or lacks access to model {self.model!r}. Check {env} or the api_key argument. "
            f"Provider said: {text}"
        )

    def _check_status(self, response: httpx.Response) -> None:
        """Raise the right error (or a :class:`Retryable`) for a non-2xx response."""
        status = response.status_code
        if 200 <= status < 300:
            return
        raise self.status_error(
            status,
            self._scrub(provider_error_text(response.text)),
            retry_after=parse_retry_after(response.headers),
            location=response.headers.get("location", "?"),
        )

    def status_error(
        self,
        status: int,
        text: str,
        *,
        retry_after: float | None = None,
        location: str = "?",
    ) -> Exception:
        """The error (or :class:`Retryable`) for an HTTP ``status`` with the provider's
        ``text``; also used for errors a server reports inside a 200 answer."""
        if status in (401, 403):
            return LLMAuthError(self._auth_message(status, text))
        if status == 429:
            return Retryable(
                LLMRateLimitError,
                f"{self.provider} is rate limiting (HTTP 429): {text}",
                retry_after,
            )
        if status == 408:
            return Retryable(LLMTimeoutError, f"{self.provider} timed out (HTTP 408): {text}")
        if status >= 500:
            what = "is overloaded" if status == 529 else "had a server error"
            return Retryable(
                LLMServerError, f"{self.provider} {what} (HTTP {status}): {text}", retry_after
            )
        if 300 <= status < 400:
            return LLMBadRequestError(
                f"{self.provider} redirected to {location} (HTTP {status}); check base_url"
            )
        hint = ""
        if status == 404:
            hint = f" (check the model name {self.model!r} and base_url {self.base_url!r})"
        return LLMBadRequestError(
            f"{self.provider} rejected the request (HTTP {status}): {text}{hint}"
        )

    def _response_error(self, problem: str, body: str) -> LLMResponseError:
        return LLMResponseError(
            f"{self.provider} sent an unexpected response: {problem}; "
            f"body: {self._scrub(excerpt(body))}"
        )

    def _shape_error(self, exc: ValidationError, data: Any) -> LLMResponseError:
        """A wire-format validation failure, described in one line."""
        problems = []
        for err in exc.errors()[:3]:
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            problems.append(f"{where}: {err['msg']}")
        try:
            body = json.dumps(data, ensure_ascii=False)
        except (TypeError, ValueError):
            body = repr(data)
        return self._response_error("; ".join(problems), body)

    def _json_body(self, response: httpx.Response) -> Any:
        try:
            return loads_json(response.content)
        except ValueError:
            ctype = response.headers.get("content-type", "no content-type")
            text = response.text
            if _HTML_RE.match(text):
                raise self._response_error(
                    f"the body is an HTML page, not JSON (HTTP {response.status_code}); is "
                    f"{self.base_url!r} the API's base URL?",
                    _html_text(text),
                ) from None
            raise self._response_error(
                f"the body is not JSON (HTTP {response.status_code}, {ctype})", text
            ) from None

    def _retry_delay(self, failure: Retryable, retry_number: int, waited: float) -> float:
        """Seconds to wait before the next attempt, or raise the final error."""
        policy = self.retry
        attempts = retry_number + 1
        plural = "s" if attempts != 1 else ""
        if retry_number >= policy.max_retries:
            raise failure.final(f"gave up after {attempts} attempt{plural}") from failure.__cause__
        if failure.retry_after is not None:
            delay = failure.retry_after
            if waited + delay > policy.max_retry_wait_s:
                raise failure.final(
                    f"the server asked to retry after {delay:.1f}s, past the retry budget "
                    f"of {policy.max_retry_wait_s}s; gave up after {attempts} attempt{plural}"
                ) from failure.__cause__
        else:
            delay = policy.backoff(retry_number)
            if waited + delay > policy.max_retry_wait_s:
                raise failure.final(
                    f"gave up after {attempts} attempt{plural}: retry budget of "
                    f"{policy.max_retry_wait_s}s used up"
                ) from failure.__cause__
        _log(
            "llm.retry",
            provider=self.provider,
            model=self.model,
            attempt=attempts,
            delay_s=round(delay, 3),
            reason=failure.message,
        )
        return delay

    def _safe_error(self, exc: LLMError) -> LLMError:
        """Log an error, and make sure its text cannot carry the API key."""
        text = str(exc)
        clean = self._scrub(text)
        _log(
            "llm.error",
            provider=self.provider,
            model=self.model,
            error=type(exc).__name__,
            message=clean,
        )
        if clean == text:
            return exc
        replacement = type(exc)(clean)
        replacement.__cause__ = exc.__cause__
        return replacement

    # -- requests --------------------------------------------------------------------

    async def _call(self, path: str, body: Any, parse: Callable[[Any], LLMResponse]) -> LLMResponse:
        """One non-streaming call with retries: send, ``parse`` the JSON answer, count usage.

        ``parse`` may raise :class:`Retryable` (an "overloaded" error inside a 200 body).
        """
        try:
            async with self._client_scope() as client:
                retry_number = 0
                waited = 0.0
                while True:
                    try:
                        result = parse(await self._post_json(client, path, body))
                        break
                    except Retryable as failure:
                        delay = self._retry_delay(failure, retry_number, waited)
                        retry_number += 1
                        waited += delay
                        await self.retry.sleep(delay)
        except LLMError as exc:
            raise self._safe_error(exc) from exc.__cause__
        self.usage.record(result.usage)
        return result

    def answer_deadline_s(self) -> float | None:
        """Seconds one attempt may take from sending the request to the last byte of a whole
        answer (or, for a stream, to its headers): the sum of the connect, write and read
        timeouts. httpx's timeouts bound each wait for bytes, so a server that trickles its
        answer a byte at a time would otherwise hold the call forever. None when reads may
        wait forever."""
        t = self.timeout
        if t.read is None:
            return None
        return t.read + (t.connect or 0.0) + (t.write or 0.0)

    async def _read_whole(self, response: httpx.Response) -> None:
        """Read a whole body (a stream request answered in one piece) within the deadline."""
        deadline = self.answer_deadline_s()
        try:
            with anyio.fail_after(deadline):
                await response.aread()
        except TimeoutError:
            raise self._deadline_failure(deadline, what="answer") from None

    async def _post_json(self, client: httpx.AsyncClient, path: str, body: Any) -> Any:
        """One POST; the decoded JSON of a 2xx answer, else an error or :class:`Retryable`."""
        deadline = self.answer_deadline_s()
        try:
            with anyio.fail_after(deadline):
                response = await client.post(
                    self._url(path),
                    content=self._encode_body(body),
                    headers=self._headers(stream=False),
                    timeout=self.timeout,
                )
        except TimeoutError:
            raise self._deadline_failure(deadline, what="answer") from None
        except httpx.TimeoutException as exc:
            raise self._timeout_failure(exc, mid_stream=False) from exc
        except httpx.TransportError as exc:
            raise self._transport_failure(exc) from exc
        self._check_status(response)
        return self._json_body(response)

    async def _stream_once(
        self,
        client: httpx.AsyncClient,
        path: str,
        body: Any,
        consume: Callable[[httpx.Response], AsyncGenerator[T, None]],
    ) -> AsyncGenerator[T, None]:
        got_response = False
        request = client.build_request(
            "POST",
            self._url(path),
            content=self._encode_body(body),
            headers=self._headers(stream=True),
            timeout=self.timeout,
        )
        deadline = self.answer_deadline_s()
        try:
            try:
                with anyio.fail_after(deadline):
                    response = await client.send(request, stream=True)
            except TimeoutError:
                raise self._deadline_failure(deadline, what="stream's headers") from None
            try:
                got_response = True
                if not 200 <= response.status_code < 300:
                    try:
                        with anyio.fail_after(deadline):
                            await response.aread()
                    except TimeoutError:
                        raise self._deadline_failure(deadline, what="error body") from None
                    self._check_status(response)
                async with aclosing(consume(response)) as items:
                    async for item in items:
                        yield item
            finally:
                await response.aclose()
        except httpx.TimeoutException as exc:
            raise self._timeout_failure(exc, mid_stream=got_response) from exc
        except httpx.TransportError as exc:
            if got_response:
                detail = self._scrub(str(exc) or type(exc).__name__)
                raise Retryable(
                    LLMResponseError,
                    f"the stream from {self.provider} ended early: the connection closed "
                    f"mid-stream ({detail})",
                ) from exc
            raise self._transport_failure(exc) from exc

    async def _call_stream(
        self,
        path: str,
        body: Any,
        consume: Callable[[httpx.Response], AsyncGenerator[T, None]],
    ) -> AsyncGenerator[T, None]:
        """A streaming call with retries while nothing has been yielded yet."""
        try:
            async with self._client_scope() as client:
                retry_number = 0
                waited = 0.0
                while True:
                    yielded = False
                    try:
                        async with aclosing(self._stream_once(client, path, body, consume)) as it:
                            async for item in it:
                                yielded = True
                                yield item
                        return
                    except Retryable as failure:
                        if yielded:
                            raise failure.final(
                                "part of the answer was already streamed, so it was not retried"
                            ) from failure.__cause__
                        delay = self._retry_delay(failure, retry_number, waited)
                        retry_number += 1
                        waited += delay
                        await self.retry.sleep(delay)
        except LLMError as exc:
            raise self._safe_error(exc) from exc.__cause__
