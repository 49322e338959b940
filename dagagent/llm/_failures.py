"""How an HTTP model client names itself and describes what went wrong.

Every HTTP status, transport failure, timeout and malformed answer becomes one of the
``LLM*Error`` classes of :mod:`dagagent.errors` (or a :class:`~._retry.Retryable` of one,
when another attempt may help), with a message that names the provider and the model and
never carries the API key.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar
from urllib.parse import urlsplit

import httpx
from pydantic import ValidationError

from dagagent.errors import (
    LLMAuthError,
    LLMBadRequestError,
    LLMConnectionError,
    LLMContextLengthError,
    LLMRateLimitError,
    LLMResponseError,
    LLMServerError,
    LLMTimeoutError,
    LLMUnsupportedOptionError,
)
from dagagent.llm._error_text import excerpt, html_text, is_html, provider_error_text
from dagagent.llm._json import loads_json
from dagagent.llm._retry import HTTPRetryPolicy, Retryable, parse_retry_after
from dagagent.llm._secret import Scrubber, Secret
from dagagent.llm._sse import StreamIdleTimeout

__all__ = ["HTTPFailures", "is_context_overflow"]

# What providers say when the prompt does not fit the context window: OpenAI's code
# ``context_length_exceeded`` and "maximum context length is N tokens" (vLLM says the same),
# Anthropic's "prompt is too long: N tokens > M maximum", Gemini's "The input token count (N)
# exceeds the maximum number of tokens allowed (M)", llama.cpp's "exceeds the available
# context size".
_CONTEXT_RE = re.compile(
    r"context_length_exceeded|maximum context length|prompt is too long"
    r"|input token count.{0,40}exceeds|exceeds the (?:available )?context (?:size|window)"
    r"|context window (?:is )?exceeded",
    re.IGNORECASE | re.DOTALL,
)


def is_context_overflow(text: str) -> bool:
    """Whether a provider's error ``text`` says the prompt is longer than the model's
    context window."""
    return _CONTEXT_RE.search(text) is not None


#: What a timeout's message says to raise: the time each call may wait for the server (the
#: client's, or the command line's), not the bound of a whole command.
_RAISE_TIMEOUT = (
    "; a slow model needs a longer wait per call: ModelSettings(timeout=...), --timeout on "
    "the command line"
)


class HTTPFailures:
    """Naming and failure mapping for :class:`~._http.HTTPChatClient` (a mixin: it reads
    the client's configuration, declared below, and holds no state of its own)."""

    provider_label: ClassVar[str] = "LLM"
    official_host: ClassVar[str] = ""
    api_key_env: ClassVar[str] = ""

    model: str
    base_url: str
    timeout: httpx.Timeout
    retry: HTTPRetryPolicy
    _key: Secret | None
    _scrubber: Scrubber

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
        """``text`` without the API key, the URL's password, secret headers, pieces of any of
        them, or URL credentials (before any cut, and again after it, so that a key cut short
        is not shown either)."""
        return self._scrubber.scrub(text)

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
        message += _RAISE_TIMEOUT
        if self.retry.retry_timeouts:
            return Retryable(LLMTimeoutError, message)
        return LLMTimeoutError(message)

    def _deadline_failure(self, seconds: float | None, *, what: str) -> Exception:
        message = (
            f"{self.provider} did not send the whole {what} within {seconds:g}s (it trickled "
            "it, or kept the connection open without finishing)" + _RAISE_TIMEOUT
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
            self._scrub(provider_error_text(self._scrub(response.text))),
            retry_after=parse_retry_after(response.headers),
            location=response.headers.get("location", "?"),
            body=response.text,
        )

    def rejected_option(self, body: str) -> str | None:
        """The option of the request that a 400 error ``body`` says the server does not take
        (``"response_format"``, ``"max_tokens"``), or ``None`` for any other error. The
        wire formats that can tell say so (:class:`~dagagent.llm.OpenAIChat`)."""
        return None

    def status_error(
        self,
        status: int,
        text: str,
        *,
        retry_after: float | None = None,
        location: str = "?",
        body: str | None = None,
    ) -> Exception:
        """The error (or :class:`Retryable`) for an HTTP ``status`` with the provider's
        ``text`` (and its whole error ``body``, when there is one); also used for errors a
        server reports inside a 200 answer."""
        if status in (400, 422):
            option = self.rejected_option(body if body is not None else text)
            if option is not None:
                return LLMUnsupportedOptionError(
                    f"{self.provider} does not support the request's {option} "
                    f"(HTTP {status}): {text}",
                    option,
                )
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
        if status in (400, 413, 422) and is_context_overflow(
            f"{text} {body if body is not None else ''}"
        ):
            return LLMContextLengthError(
                f"{self.provider} refused the request: the prompt is longer than the context "
                f"window of model {self.model!r} (HTTP {status}): {text}"
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
            f"body: {self._scrub(excerpt(self._scrub(body)))}"
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
            if is_html(text):
                raise self._response_error(
                    f"the body is an HTML page, not JSON (HTTP {response.status_code}); is "
                    f"{self.base_url!r} the API's base URL?",
                    html_text(text),
                ) from None
            raise self._response_error(
                f"the body is not JSON (HTTP {response.status_code}, {ctype})", text
            ) from None
