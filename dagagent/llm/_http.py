"""The HTTP model client: configuration, the connection pool, and one request with its
retry loop (a stream is retried only while nothing has been yielded to the caller yet).

Its parts live next to it, one concern each: :mod:`._secret` (the API key),
:mod:`._retry` (whether and when to try again), :mod:`._failures` (HTTP and transport
failures as ``LLM*Error``), :mod:`._error_text` (what a failed server said) and
:mod:`._sse` (reading event streams).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import importlib
import re
import ssl
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Mapping,
)
from contextlib import aclosing, asynccontextmanager
from typing import Any, ClassVar, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import anyio
import httpx
import structlog

from dagagent.errors import (
    LLMBadRequestError,
    LLMError,
    LLMResponseError,
    LLMUnsupportedOptionError,
)
from dagagent.llm._decoding import (
    ACCEPT_ENCODING,
    BodyTooLarge,
    UnsupportedEncoding,
    decoded_bytes,
    decoded_text,
)
from dagagent.llm._failures import HTTPFailures
from dagagent.llm._json import dumps_json, loads_json
from dagagent.llm._retry import Retryable
from dagagent.llm._secret import Scrubber, Secret, resolve_api_key
from dagagent.llm._sse import SSEEvent, StreamLimitExceeded, bounded_lines
from dagagent.llm.protocol import RequestLLM
from dagagent.llm.settings import ModelSettings
from dagagent.llm.types import (
    LLMResponse,
    StreamEnd,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    closing_stream,
)
from dagagent.llm.usage import UsageTracker
from dagagent.text import is_secret_name, strip_url_credentials

__all__ = ["HTTPChatClient"]


def _sent_secrets(key: Secret | None, url: str, headers: Mapping[str, str]) -> list[Secret]:
    """What a client sends that must never be shown: the API key, the password of its URL
    (as written, as ``user:password``, and as the Basic header that carries it; a server may
    echo any of them) and the values of secret headers (``Authorization``, ``X-Api-Key``)."""
    found = [key] if key is not None else []
    parts = urlsplit(url)
    if parts.password:
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password)}"
        basic = base64.b64encode(pair.encode()).decode()
        found += [Secret(v) for v in (pair, unquote(parts.password), parts.password, basic)]
    for name, value in headers.items():
        if is_secret_name(name) and value.strip():
            found.append(Secret(value.strip()))
            scheme, _, token = value.strip().partition(" ")
            if token.strip() and scheme.isalpha():  # "Bearer abc": abc alone too
                found.append(Secret(token.strip()))
    return found


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

#: The wire formats of the built-in clients, each spoken by the module of its name.
_BUILT_IN = frozenset({"openai", "anthropic", "gemini"})
_Client = TypeVar("_Client", bound="HTTPChatClient")

# What servers say when the output limit does not fit: vLLM's "maximum context length",
# OpenAI's "max_tokens is too large", Anthropic's "maximum allowed number of output tokens".
_LIMIT_RE = re.compile(
    r"context (?:length|window)|max(?:imum)?[ _]?(?:completion[ _])?tokens?\b.*too large"
    r"|too large.*max_(?:completion_)?tokens|allowed number of output tokens",
    re.IGNORECASE | re.DOTALL,
)


def _scrub_values(value: Any, scrub: Callable[[str], str]) -> Any:
    """``value`` (a call's arguments) with ``scrub`` applied to every string in it."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: _scrub_values(v, scrub) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_values(v, scrub) for v in value]
    return value


def _with_limit_hint(exc: LLMError, body: Any) -> LLMError:
    """``exc`` saying which output limit the request asked for and how to lower it, when the
    server refused the request for a limit or a context that is too large."""
    if not isinstance(exc, LLMBadRequestError) or isinstance(exc, LLMUnsupportedOptionError):
        return exc
    limit = None
    if isinstance(body, Mapping):
        limit = body.get("max_tokens", body.get("max_completion_tokens"))
    if not isinstance(limit, int) or not _LIMIT_RE.search(str(exc)):
        return exc
    hinted = type(exc)(
        f"{exc} (the request asked for at most {limit:,} output tokens: a smaller limit may "
        "fit, ModelSettings(max_tokens=...) in Python, --max-tokens on the command line)"
    )
    hinted.__dict__.update(exc.__dict__)
    return hinted


#: How a user raises each bound of a call: in Python, and on the command line when it has
#: an option for it.
_SETTING_HINTS = {
    "max_stream_s": "--stream-timeout SECONDS on the command line, "
    "ModelSettings(max_stream_s=...) in Python",
    "max_response_bytes": "ModelSettings(max_response_bytes=...) in Python",
}


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Building a context loads the CA bundle (~25 ms); one per process is enough.
    return httpx.create_ssl_context()


def _new_client(timeout: httpx.Timeout) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=timeout, verify=_ssl_context())


# ---------------------------------------------------------------------------- client base


class HTTPChatClient(HTTPFailures, RequestLLM):
    """Base of the HTTP model clients: configuration, the connection pool, retries.

    A client may be used as ``async with client:`` to keep one connection pool for all
    calls inside the block; outside such a block every call opens (and closes) its own
    pool, so a client works from any event loop and never leaks sockets. Pass ``client=``
    to use your own ``httpx.AsyncClient`` (it is never closed by dagagent).

    A client class that defines ``wire_format`` (``"openai"``, ``"anthropic"``) is the one
    :meth:`for_wire_format` returns for that format, so code that scripts a provider's
    bodies (:meth:`~dagagent.llm.ScriptedLLM.openai`) runs the real client without
    importing it. Subclasses that inherit the attribute do not replace it.
    """

    wire_format: ClassVar[str] = ""
    #: Where the provider serves its API: the ``base_url`` when none is given.
    default_base_url: ClassVar[str] = ""
    #: The output limit when the settings give none (a provider that requires one sets it).
    default_max_tokens: ClassVar[int | None] = None
    #: A second environment variable for the API key, read when ``api_key_env`` is unset.
    fallback_api_key_env: ClassVar[str] = ""
    _by_wire_format: ClassVar[dict[str, type[HTTPChatClient]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fmt = cls.__dict__.get("wire_format")
        if isinstance(fmt, str) and fmt:
            HTTPChatClient._by_wire_format.setdefault(fmt, cls)

    @classmethod
    def for_wire_format(cls, wire_format: str) -> type[HTTPChatClient]:
        """The client class that speaks ``wire_format`` (the built-in clients' modules,
        ``dagagent.llm.openai`` / ``.anthropic`` / ``.gemini``, are imported on demand)."""
        if wire_format not in HTTPChatClient._by_wire_format and wire_format in _BUILT_IN:
            importlib.import_module(f"dagagent.llm.{wire_format}")
        try:
            return HTTPChatClient._by_wire_format[wire_format]
        except KeyError:
            known = ", ".join(sorted(HTTPChatClient._by_wire_format)) or "none"
            raise LookupError(f"no client speaks {wire_format!r} (known: {known})") from None

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        settings: ModelSettings | None = None,
        client: httpx.AsyncClient | None = None,
        headers: Mapping[str, str] | None = None,
        usage: UsageTracker | None = None,
    ) -> None:
        if base_url is None:
            if not self.default_base_url:
                raise TypeError(f"{type(self).__name__} needs base_url (it has no default)")
            base_url = self.default_base_url
        self.model = self._model_id(model)
        self.settings = settings or ModelSettings()
        self.max_response_bytes = self.settings.max_response_bytes
        self.max_stream_s = self.settings.max_stream_s
        # Credentials in the URL (http://user:pass@host) are sent, never shown: base_url,
        # messages, logs and records see the URL without them, and so does httpx (whose log
        # names each request's URL): they go as the Basic authentication they stand for.
        given = base_url.rstrip("/")
        parts = urlsplit(given)
        self._basic: httpx.BasicAuth | None = None
        if parts.username is not None or parts.password is not None:
            user, password = unquote(parts.username or ""), unquote(parts.password or "")
            self._basic = httpx.BasicAuth(user, password)
            given = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        self._request_base = given
        self.base_url = strip_url_credentials(given)
        self._key = resolve_api_key(api_key, self.api_key_env)
        if self._key is None and api_key is None and self.fallback_api_key_env:
            self._key = resolve_api_key(None, self.fallback_api_key_env)
        self.timeout = self.settings.http_timeout
        self.retry = self.settings.retry
        self.max_tokens = (
            self.settings.max_tokens
            if self.settings.max_tokens is not None
            else self.default_max_tokens
        )
        self.temperature = self.settings.temperature
        self.tool_choice = self.settings.tool_choice
        self.parallel_tool_calls = self.settings.parallel_tool_calls
        self.extra_body = dict(self.settings.extra_body)
        self.usage = usage if usage is not None else UsageTracker()
        self._client = client
        self._session: httpx.AsyncClient | None = None
        self._extra_headers = dict(headers or {})
        self._scrubber = Scrubber(_sent_secrets(self._key, base_url, self._extra_headers))

    # -- presentation ---------------------------------------------------------------

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    def _model_id(self, model: str) -> str:
        """The model's name as the provider's URLs and bodies take it."""
        return model

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
            "accept-encoding": ACCEPT_ENCODING,  # what is decoded with a bound
            "content-type": "application/json",
        }
        headers.update(self._extra_headers)
        headers.update(self._auth_headers())
        return headers

    def _auth(self) -> Any:
        """The Basic authentication of a URL's ``user:password@``, else httpx's default."""
        return self._basic if self._basic is not None else httpx.USE_CLIENT_DEFAULT

    def _url(self, path: str) -> str:
        return self._request_base + path

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

    # -- retries and errors ------------------------------------------------------------

    def _retry_delay(self, failure: Retryable, retry_number: int, waited: float) -> float:
        """Seconds to wait before the next attempt (logged), or raise the final error."""
        delay = self.retry.next_delay(failure, retry_number, waited)
        _log(
            "llm.retry",
            provider=self.provider,
            model=self.model,
            attempt=retry_number + 1,
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
        replacement.__dict__.update(exc.__dict__)  # what the error carries (option, ...)
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
            raise self._safe_error(_with_limit_hint(exc, body)) from exc.__cause__
        self.usage.record(result.usage)
        return self._scrubbed(result)

    def _scrubbed(self, response: LLMResponse) -> LLMResponse:
        """``response`` without what the client sends and must never show (its key, its URL's
        password, a secret header), should the server echo it in an answer: what the model
        writes is shown in messages, records and prompts."""
        if not self._scrubber:
            return response
        scrub = self._scrubber.scrub
        calls = [
            c.model_copy(
                update={
                    "arguments": _scrub_values(c.arguments, scrub),
                    "arguments_error": scrub(c.arguments_error) if c.arguments_error else None,
                    "raw_arguments": scrub(c.raw_arguments) if c.raw_arguments else None,
                }
            )
            for c in response.tool_calls
        ]
        return response.model_copy(update={"content": scrub(response.content), "tool_calls": calls})

    async def _scrubbed_stream(
        self, events: AsyncGenerator[StreamEvent, None]
    ) -> AsyncGenerator[StreamEvent, None]:
        """A stream's events without the client's secrets (see :meth:`_scrubbed`), a secret
        split across pieces included: the text and each call's arguments are held back
        while they could still be the start of one."""
        text = self._scrubber.pieces()
        args: dict[int, Any] = {}
        async with aclosing(events) as it:
            async for event in it:
                if isinstance(event, TextDelta):
                    shown = text.feed(event.text)
                    if shown:
                        yield TextDelta(shown)
                elif isinstance(event, ToolCallDelta):
                    pieces = args.setdefault(event.index, self._scrubber.pieces())
                    yield dataclasses.replace(event, arguments=pieces.feed(event.arguments))
                elif isinstance(event, StreamEnd):
                    rest = text.end()
                    if rest:
                        yield TextDelta(rest)
                    for index, pieces in args.items():
                        rest = pieces.end()
                        if rest:
                            yield ToolCallDelta(index, arguments=rest)
                    yield StreamEnd(self._scrubbed(event.response))
                else:
                    yield event

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
                await self._read_capped(response)
        except TimeoutError:
            raise self._deadline_failure(deadline, what="answer") from None

    async def _answered_whole(
        self, response: httpx.Response, parse: Callable[[Any], LLMResponse]
    ) -> list[StreamEvent]:
        """The events of a stream the server answered in one piece (it ignored ``stream``):
        the text, each call whole, then the end, with the usage of ``parse``'s answer
        counted."""
        await self._read_whole(response)
        result = parse(self._json_body(response))
        events: list[StreamEvent] = []
        if result.content:
            events.append(TextDelta(result.content))
        for i, call in enumerate(result.tool_calls):
            events.append(ToolCallDelta(i, call.id, call.name, call.arguments_json()))
        events.append(self._stream_end(result))
        return events

    def _event_json(self, sse: SSEEvent) -> Any:
        """The JSON of one stream event's data."""
        try:
            return loads_json(sse.data)
        except ValueError:
            raise self._response_error("a stream event is not JSON", sse.data) from None

    def _ended_early(self, before: str) -> Retryable:
        """The failure of a stream closed ``before`` (say, "before message_stop") its end
        came: another attempt may get the whole answer."""
        return Retryable(
            LLMResponseError,
            f"the stream from {self.provider} ended early: the connection closed {before}",
        )

    def _stream_end(self, result: LLMResponse) -> StreamEnd:
        """The last event of a stream, its usage counted."""
        self.usage.record(result.usage)
        return StreamEnd(result)

    async def _read_capped(self, response: httpx.Response) -> None:
        """Read a streamed body, decoded, into ``response`` (so ``.content``, ``.text`` and
        ``.json()`` work), failing with :class:`LLMResponseError` as soon as it grows past
        ``max_response_bytes``: a hostile or broken server cannot make the client hold
        more than that in memory."""
        limit = self.max_response_bytes
        chunks: list[bytes] = []
        try:
            async with closing_stream(decoded_bytes(response, limit)) as body:
                async for chunk in body:
                    chunks.append(chunk)
        except BodyTooLarge:
            await response.aclose()
            raise LLMResponseError(
                f"the answer from {self.provider} is larger than {limit:,} bytes "
                f"(HTTP {response.status_code}, decoded); if that is expected, raise "
                f"{_SETTING_HINTS['max_response_bytes']}"
            ) from None
        except UnsupportedEncoding as exc:
            await response.aclose()
            raise LLMResponseError(f"the answer from {self.provider}: {exc}") from None
        # httpx keeps a read body here; aread() would read it again without a bound
        response._content = b"".join(chunks)

    def _sse_lines(self, response: httpx.Response) -> AsyncIterator[str]:
        """The lines of an event stream, at most ``max_response_bytes`` of them in all and for
        at most ``max_stream_s``: a server that streams without end, or sends one gigantic
        event, ends the call with an :class:`LLMResponseError` (see :meth:`_stream_once`)."""
        return bounded_lines(
            decoded_text(response, self.max_response_bytes),
            max_chars=self.max_response_bytes,
            max_seconds=self.max_stream_s,
        )

    async def _post_json(self, client: httpx.AsyncClient, path: str, body: Any) -> Any:
        """One POST; the decoded JSON of a 2xx answer, else an error or :class:`Retryable`."""
        deadline = self.answer_deadline_s()
        try:
            with anyio.fail_after(deadline):
                request = client.build_request(
                    "POST",
                    self._url(path),
                    content=self._encode_body(body),
                    headers=self._headers(stream=False),
                    timeout=self.timeout,
                )
                response = await client.send(request, stream=True, auth=self._auth())
                try:
                    await self._read_capped(response)
                finally:
                    await response.aclose()
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
                    response = await client.send(request, stream=True, auth=self._auth())
            except TimeoutError:
                raise self._deadline_failure(deadline, what="stream's headers") from None
            try:
                got_response = True
                if not 200 <= response.status_code < 300:
                    try:
                        with anyio.fail_after(deadline):
                            await self._read_capped(response)
                    except TimeoutError:
                        raise self._deadline_failure(deadline, what="error body") from None
                    self._check_status(response)
                async with aclosing(consume(response)) as items:
                    async for item in items:
                        yield item
            finally:
                await response.aclose()
        except BodyTooLarge:
            raise LLMResponseError(
                f"the stream from {self.provider} is larger than "
                f"{self.max_response_bytes:,} bytes (decoded): cut off (if that is expected, raise "
                f"{_SETTING_HINTS['max_response_bytes']})"
            ) from None
        except UnsupportedEncoding as exc:
            raise LLMResponseError(f"the stream from {self.provider}: {exc}") from None
        except StreamLimitExceeded as exc:
            raise LLMResponseError(
                f"the stream from {self.provider} {exc}: cut off (if that is expected, raise "
                f"{_SETTING_HINTS.get(exc.setting, exc.setting)})"
            ) from None
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
        consume: Callable[[httpx.Response], AsyncGenerator[StreamEvent, None]],
    ) -> AsyncGenerator[StreamEvent, None]:
        """A streaming call with retries while nothing has been yielded yet."""
        try:
            async with self._client_scope() as client:
                retry_number = 0
                waited = 0.0
                while True:
                    yielded = False
                    try:
                        once = self._stream_once(client, path, body, consume)
                        if self._scrubber:
                            once = self._scrubbed_stream(once)
                        async with aclosing(once) as it:
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
            raise self._safe_error(_with_limit_hint(exc, body)) from exc.__cause__
