"""What dagagent needs from a model client: the :class:`LLM` protocol, and :class:`RequestLLM`,
the base that turns its keyword arguments into one :class:`~dagagent.llm.LLMRequest`."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from typing_extensions import Unpack

from ._telemetry import call_span
from .types import (
    LLMRequest,
    LLMResponse,
    Message,
    MessagesInput,
    RequestOptions,
    ResponseFormat,
    StreamEvent,
    ToolChoice,
    ToolSpec,
)

__all__ = ["LLM", "RequestLLM"]


class RequestLLM:
    """Implements the :class:`LLM` protocol's ``complete`` / ``stream`` by normalising the
    arguments into one :class:`LLMRequest`; subclasses answer it in ``_complete`` /
    ``_stream`` (the HTTP clients send it, :class:`~dagagent.llm.ScriptedLLM` scripts it).

    With OpenTelemetry on, each call is a ``chat MODEL`` span (see :mod:`._telemetry`);
    ``provider_name`` is its ``gen_ai.provider.name``."""

    provider_name = "_OTHER"

    async def complete(
        self, messages: MessagesInput, **options: Unpack[RequestOptions]
    ) -> LLMResponse:
        request = LLMRequest.build(messages, **options)
        call = call_span(self, request)  # OpenTelemetry, when the application has it
        if call is None:
            return await self._complete(request)
        return await call.complete(self._complete(request))

    def stream(
        self, messages: MessagesInput, **options: Unpack[RequestOptions]
    ) -> AsyncGenerator[StreamEvent, None]:
        request = LLMRequest.build(messages, stream=True, **options)
        call = call_span(self, request)
        if call is None:
            return self._stream(request)
        return call.stream(self._stream(request))

    async def _complete(self, request: LLMRequest) -> LLMResponse:
        raise NotImplementedError(f"{type(self).__name__} does not implement _complete")

    def _stream(self, request: LLMRequest) -> AsyncGenerator[StreamEvent, None]:
        raise NotImplementedError(f"{type(self).__name__} does not implement _stream")


@runtime_checkable
class LLM(Protocol):
    """What dagagent needs from a model client.

    ``complete`` returns the whole answer; ``stream`` yields :class:`TextDelta` and
    :class:`ToolCallDelta` events and always ends with a :class:`StreamEnd` carrying the
    same :class:`LLMResponse` ``complete`` would have returned. dagagent passes
    ``tool_choice`` and ``parallel_tool_calls`` only when they are set, so a client of
    one's own written before them keeps working with the planners and the joiner.
    """

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] | None = None,
        response_format: ResponseFormat | Mapping[str, Any] | None = None,
        stop: str | Sequence[str] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        tool_choice: ToolChoice | None = None,
        parallel_tool_calls: bool | None = None,
    ) -> LLMResponse: ...

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolSpec] | None = None,
        response_format: ResponseFormat | Mapping[str, Any] | None = None,
        stop: str | Sequence[str] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        tool_choice: ToolChoice | None = None,
        parallel_tool_calls: bool | None = None,
    ) -> AsyncIterator[StreamEvent]: ...
