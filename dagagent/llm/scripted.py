"""A model that answers from a script, for tests and examples.

Plain mode answers with typed values::

    with ScriptedLLM(["first answer", LLMResponse(tool_calls=[...]), lambda req: "..."]) as llm:
        ...  # code under test calls llm.complete(...) / llm.stream(...)
    # leaving the block fails if the script was not used up

Wire mode scripts provider JSON bodies and runs the real :class:`OpenAIChat` /
:class:`AnthropicChat` code (request building, parsing, SSE assembly, retries) over an
``httpx.MockTransport``; it finds the client by its wire format
(:meth:`HTTPChatClient.for_wire_format`), so this module does not import the clients::

    llm = ScriptedLLM.openai([wire.openai_tool_calls([("search", {"q": "x"})]), "done"])
    llm = ScriptedLLM.anthropic([httpx.Response(529), wire.anthropic_text("ok")])
    llm = ScriptedLLM.gemini([wire.gemini_function_calls([("search", {"q": "x"})]), "done"])

In wire mode every script item answers one HTTP request (so a 529 followed by a body is
one ``complete`` call with one retry) and ``wire_requests`` holds the JSON bodies sent.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import (
    AsyncGenerator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
)
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import anyio
import httpx

from dagagent.errors import ScriptError
from dagagent.llm import wire
from dagagent.llm._http import HTTPChatClient
from dagagent.llm._retry import HTTPRetryPolicy
from dagagent.llm.protocol import RequestLLM
from dagagent.llm.settings import ModelSettings
from dagagent.llm.types import (
    LLMRequest,
    LLMResponse,
    StreamEnd,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from dagagent.llm.usage import UsageTracker

if TYPE_CHECKING:
    from dagagent.llm.protocol import LLM

__all__ = ["ScriptError", "ScriptItem", "ScriptedLLM", "WireItem"]

# Each wire format's bodies and events (see dagagent.llm.wire).
_FROM_RESPONSE: dict[str, Callable[..., dict[str, Any]]] = {
    "openai": wire.openai_from_response,
    "anthropic": wire.anthropic_from_response,
    "gemini": wire.gemini_from_response,
}
_TEXT: dict[str, Callable[..., dict[str, Any]]] = {
    "openai": wire.openai_text,
    "anthropic": wire.anthropic_text,
    "gemini": wire.gemini_text,
}
_EVENTS: dict[str, Callable[..., list[Any]]] = {
    "openai": wire.openai_events,
    "anthropic": wire.anthropic_events,
    "gemini": wire.gemini_events,
}

_Answer: TypeAlias = LLMResponse | str

#: The settings of a wire-mode client: retries without a delay between them.
_NO_DELAY = ModelSettings(retry=HTTPRetryPolicy(base_delay_s=0.0))
ScriptItem: TypeAlias = (
    LLMResponse | str | BaseException | Callable[[LLMRequest], _Answer | Awaitable[_Answer]]
)
"""A plain-mode answer: a response, its content as a str, an exception to raise, or a
callable ``(LLMRequest) -> LLMResponse | str`` (sync or async)."""

_WireAnswer: TypeAlias = Mapping[str, Any] | str | LLMResponse | httpx.Response
WireItem: TypeAlias = (
    _WireAnswer | BaseException | Callable[[dict[str, Any]], _WireAnswer | Awaitable[_WireAnswer]]
)
"""A wire-mode answer to one HTTP request: a JSON body (sent with status 200, or as SSE
when the request streams), an ``httpx.Response`` (sent as is: any status, headers,
body), a str or LLMResponse (converted to the provider's body), an exception (raised by
the transport: ``httpx.ConnectError(...)`` acts like a dead server), or a callable
``(request_json) -> any of those``."""


class ScriptedLLM(RequestLLM):
    """An :class:`~dagagent.llm.LLM` that answers from a script, in order.

    Every call is recorded in ``requests`` (typed :class:`LLMRequest`). Calling more
    often than scripted raises :class:`ScriptError` (an ``AssertionError``) naming the
    call; ``assert_exhausted()`` — or leaving ``with ScriptedLLM(...) as llm:`` — fails
    if calls were missing or in excess. ``stream`` cuts the content into ``chunk_size``
    pieces. ``chunk_delay_s`` (plain mode) plays a model writing at that pace: ``stream``
    waits that long before each piece, ``complete`` as long as streaming the whole answer
    would take.
    """

    def __init__(
        self,
        script: Iterable[ScriptItem] = (),
        *,
        model: str = "scripted",
        chunk_size: int = 8,
        chunk_delay_s: float = 0.0,
    ) -> None:
        self.model = model
        self.chunk_size = chunk_size
        self.chunk_delay_s = chunk_delay_s
        self.requests: list[LLMRequest] = []
        self.wire_requests: list[dict[str, Any]] = []
        self.usage = UsageTracker()
        self.backend: HTTPChatClient | None = None
        self._script: list[Any] = list(script)
        self._pos = 0
        self._failures: list[str] = []
        self._wire: Literal["openai", "anthropic", "gemini"] | None = None
        self._http: httpx.AsyncClient | None = None

    # -- wire mode -----------------------------------------------------------------

    @classmethod
    def openai(
        cls,
        script: Iterable[WireItem] = (),
        *,
        model: str = "gpt-test",
        chunk_size: int = 8,
        **client_options: Any,
    ) -> ScriptedLLM:
        """Script ``chat.completion`` bodies answered through a real :class:`OpenAIChat`.

        ``client_options`` go to ``OpenAIChat`` (its ``settings`` default here to retries
        without a delay between them).
        """
        self = cls(model=model, chunk_size=chunk_size)
        self._script = list(script)
        self._wire = "openai"
        self.provider_name = "openai"
        self._http = httpx.AsyncClient(transport=httpx.MockTransport(self._handle))
        options: dict[str, Any] = {"base_url": "http://scripted.invalid/v1", "settings": _NO_DELAY}
        options.update(client_options)
        client_class = HTTPChatClient.for_wire_format("openai")
        self.backend = client_class(model, client=self._http, usage=self.usage, **options)
        return self

    @classmethod
    def anthropic(
        cls,
        script: Iterable[WireItem] = (),
        *,
        model: str = "claude-test",
        chunk_size: int = 8,
        **client_options: Any,
    ) -> ScriptedLLM:
        """Script Messages API bodies answered through a real :class:`AnthropicChat`."""
        self = cls(model=model, chunk_size=chunk_size)
        self._script = list(script)
        self._wire = "anthropic"
        self.provider_name = "anthropic"
        self._http = httpx.AsyncClient(transport=httpx.MockTransport(self._handle))
        options: dict[str, Any] = {"base_url": "http://scripted.invalid", "settings": _NO_DELAY}
        options.update(client_options)
        client_class = HTTPChatClient.for_wire_format("anthropic")
        self.backend = client_class(model, client=self._http, usage=self.usage, **options)
        return self

    @classmethod
    def gemini(
        cls,
        script: Iterable[WireItem] = (),
        *,
        model: str = "gemini-test",
        chunk_size: int = 8,
        **client_options: Any,
    ) -> ScriptedLLM:
        """Script ``generateContent`` bodies answered through a real :class:`GeminiChat`
        (streamed as ``streamGenerateContent?alt=sse`` chunks when the call streams)."""
        self = cls(model=model, chunk_size=chunk_size)
        self._script = list(script)
        self._wire = "gemini"
        self.provider_name = "gcp.gemini"
        self._http = httpx.AsyncClient(transport=httpx.MockTransport(self._handle))
        options: dict[str, Any] = {
            "base_url": "http://scripted.invalid/v1beta",
            "settings": _NO_DELAY,
        }
        options.update(client_options)
        client_class = HTTPChatClient.for_wire_format("gemini")
        self.backend = client_class(model, client=self._http, usage=self.usage, **options)
        return self

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        try:
            body = json.loads(request.content)
        except ValueError:
            body = {}
        self.wire_requests.append(body)
        item = self._next(f"HTTP request #{len(self.wire_requests)}", self._describe_wire(body))
        if isinstance(item, BaseException):
            raise item
        if callable(item):
            item = item(body)
            if inspect.isawaitable(item):
                item = await item
        stream = bool(body.get("stream")) or ":streamGenerateContent" in request.url.path
        return self._wire_response(item, stream)

    def _wire_response(self, item: Any, stream: bool) -> httpx.Response:
        if isinstance(item, httpx.Response):
            return item
        fmt = self._wire or "openai"
        if isinstance(item, LLMResponse):
            data = _FROM_RESPONSE[fmt](item, model=self.model)
        elif isinstance(item, str):
            data = _TEXT[fmt](item, model=self.model)
        else:
            data = dict(item)
        if stream:
            try:
                events = _EVENTS[fmt](data, chunk_size=self.chunk_size)
            except (KeyError, IndexError, TypeError, AttributeError):
                return httpx.Response(200, json=data)  # not a body we can stream: send as is
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=wire.encode_sse(events)
            )
        return httpx.Response(200, json=data)

    @staticmethod
    def _describe_wire(body: dict[str, Any]) -> str:
        messages = body.get("messages") or body.get("contents") or []
        return f"last message: {json.dumps(messages[-1])[:200]}" if messages else "no messages"

    # -- script bookkeeping --------------------------------------------------------

    def push(self, *items: ScriptItem | WireItem) -> None:
        """Append answers to the script."""
        self._script.extend(items)

    @property
    def base_url(self) -> str | None:
        """The server of the real client behind a wire-mode script (``None`` in plain mode)."""
        return self.backend.base_url if self.backend is not None else None

    @property
    def calls(self) -> int:
        """How many times ``complete`` / ``stream`` were called."""
        return len(self.requests)

    @property
    def remaining(self) -> int:
        """Script items not used yet."""
        return len(self._script) - self._pos

    @property
    def last_request(self) -> LLMRequest:
        if not self.requests:
            raise ScriptError("ScriptedLLM was never called")
        return self.requests[-1]

    def _next(self, what: str, context: str) -> Any:
        if self._pos >= len(self._script):
            n = len(self._script)
            message = (
                f"ScriptedLLM: {what} was not scripted (the script has {n} "
                f"item{'s' if n != 1 else ''}); {context}"
            )
            self._failures.append(message)
            raise ScriptError(message)
        item = self._script[self._pos]
        self._pos += 1
        return item

    def assert_exhausted(self) -> None:
        """Fail unless every script item was used, and no call went past the script."""
        if self._failures:
            raise ScriptError(self._failures[0])
        if self.remaining:
            unit = "HTTP answer" if self._wire else "answer"
            raise ScriptError(
                f"ScriptedLLM: {self.remaining} of {len(self._script)} scripted "
                f"{unit}{'s' if len(self._script) != 1 else ''} never used "
                f"(the model was called {self.calls} time{'s' if self.calls != 1 else ''})"
            )

    def __enter__(self) -> ScriptedLLM:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            self.assert_exhausted()

    async def __aenter__(self) -> ScriptedLLM:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        await self.aclose()
        if exc_type is None:
            self.assert_exhausted()

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    def __repr__(self) -> str:
        mode = f", wire={self._wire!r}" if self._wire else ""
        counts = f"calls={self.calls}, remaining={self.remaining}"
        return f"ScriptedLLM(model={self.model!r}{mode}, {counts})"

    # -- answering -----------------------------------------------------------------

    async def _answer(self, request: LLMRequest) -> LLMResponse:
        last = request.last_message
        context = f"last message: {last!r}"[:300] if last is not None else "no messages"
        item = self._next(f"call #{self.calls}", context)
        if isinstance(item, BaseException):
            raise item
        if callable(item) and not isinstance(item, LLMResponse):
            item = item(request)
            if inspect.isawaitable(item):
                item = await item
        if isinstance(item, str):
            response = LLMResponse(content=item, finish_reason="stop", model=self.model)
        elif isinstance(item, LLMResponse):
            response = item if item.model else item.model_copy(update={"model": self.model})
        else:
            raise ScriptError(
                f"ScriptedLLM: call #{self.calls} got {type(item).__name__}; script items "
                "must be LLMResponse, str, an exception or a callable returning LLMResponse/str"
            )
        self.usage.record(response.usage)
        return response

    async def _complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        if self.backend is not None:
            return await self.backend.complete(
                request.messages,
                tools=request.tools,
                response_format=request.response_format,
                stop=request.stop,
                max_tokens=request.max_tokens,
                temperature=request.temperature,
                tool_choice=request.tool_choice,
                parallel_tool_calls=request.parallel_tool_calls,
            )
        response = await self._answer(request)
        if self.chunk_delay_s:
            pieces = -(-len(response.content) // max(1, self.chunk_size))
            await anyio.sleep(self.chunk_delay_s * pieces)
        return response

    async def _stream(self, request: LLMRequest) -> AsyncGenerator[StreamEvent, None]:
        self.requests.append(request)
        if self.backend is not None:
            events = self.backend.stream(
                request.messages,
                tools=request.tools,
                response_format=request.response_format,
                stop=request.stop,
                max_tokens=request.max_tokens,
                temperature=request.temperature,
                tool_choice=request.tool_choice,
                parallel_tool_calls=request.parallel_tool_calls,
            )
            async with aclosing(events) as stream:
                async for event in stream:
                    yield event
            return
        response = await self._answer(request)
        size = max(1, self.chunk_size)
        for start in range(0, len(response.content), size):
            if self.chunk_delay_s:
                await anyio.sleep(self.chunk_delay_s)
            yield TextDelta(response.content[start : start + size])
        for i, call in enumerate(response.tool_calls):
            yield ToolCallDelta(i, call.id, call.name, call.arguments_json())
        yield StreamEnd(response)


if TYPE_CHECKING:

    def _implements_protocol(llm: ScriptedLLM) -> LLM:
        return llm
