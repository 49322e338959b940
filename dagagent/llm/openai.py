"""Client for the OpenAI chat completions wire format.

Works with OpenAI and with every server speaking the same format (vLLM, Ollama, the
llama.cpp server, LM Studio, ...): point ``base_url`` at the server's ``/v1``. Local
servers usually need no key; without one no ``Authorization`` header is sent.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import Any

import httpx
from pydantic import BaseModel, Field, ValidationError, field_validator

from dagagent.errors import LLMResponseError, LLMServerError
from dagagent.llm._http import HTTPChatClient
from dagagent.llm._retry import Retryable
from dagagent.llm._sse import is_event_stream, iter_sse
from dagagent.llm.types import (
    AssistantMessage,
    LLMRequest,
    LLMResponse,
    Message,
    StreamEnd,
    StreamEvent,
    SystemMessage,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResultMessage,
    Usage,
    UsageTracker,
    UserMessage,
    loads_json,
    parse_tool_arguments,
    wire_name,
)

__all__ = ["OpenAIChat", "openai_messages"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"

_FINISH_REASONS = {"function_call": "tool_calls"}
_AFTER_FINISH_S = 2.0  # wait for the usage chunk and [DONE] once finish_reason has come


def openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Typed messages in the chat completions format."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, SystemMessage | UserMessage):
            out.append({"role": m.role, "content": m.content})
        elif isinstance(m, AssistantMessage):
            item: dict[str, Any] = {"role": "assistant", "content": m.content}
            if m.tool_calls:
                item["content"] = m.content or None
                item["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments_json()},
                    }
                    for call in m.tool_calls
                ]
            out.append(item)
        elif isinstance(m, ToolResultMessage):
            content = m.content
            if m.is_error and not content.lower().startswith("error"):
                content = f"Error: {content}"
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": content})
    return out


# ---------------------------------------------------------------------------- wire shapes


class _Function(BaseModel):
    name: str | None = None
    # A JSON string per the spec; Ollama sends an object; anything else is kept as text so
    # the call fails on its own (arguments_error) instead of failing the whole answer.
    arguments: str | dict[str, Any] | None = None

    @field_validator("arguments", mode="before")
    @classmethod
    def _odd_arguments(cls, value: Any) -> Any:
        if value is None or isinstance(value, str | dict):
            return value
        return json.dumps(value)


class _ToolCall(BaseModel):
    index: int | None = None
    id: str | None = None
    function: _Function | None = None


class _Message(BaseModel):
    content: str | list[Any] | None = None
    tool_calls: list[_ToolCall] | None = None
    refusal: str | None = None


class _Choice(BaseModel):
    message: _Message
    finish_reason: str | None = None


class _Usage(BaseModel):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    def to_usage(self) -> Usage:
        return Usage(
            input_tokens=self.prompt_tokens or 0, output_tokens=self.completion_tokens or 0
        )


class _Completion(BaseModel):
    model: str | None = None
    choices: list[_Choice]
    usage: _Usage | None = None


class _Delta(BaseModel):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _ChunkChoice(BaseModel):
    index: int = 0
    delta: _Delta = Field(default_factory=_Delta)
    finish_reason: str | None = None

    @field_validator("delta", mode="before")
    @classmethod
    def _null_delta(cls, value: Any) -> Any:
        return {} if value is None else value


class _Chunk(BaseModel):
    model: str | None = None
    choices: list[_ChunkChoice] = Field(default_factory=list)
    usage: _Usage | None = None

    @field_validator("choices", mode="before")
    @classmethod
    def _null_choices(cls, value: Any) -> Any:
        return [] if value is None else value


def _finish_reason(reason: str | None, calls: Sequence[ToolCall]) -> str | None:
    """The normalised finish reason. Ollama and others say ``"stop"`` after tool calls."""
    if not reason:
        return None
    reason = _FINISH_REASONS.get(reason, reason)
    return "tool_calls" if reason == "stop" and calls else reason


def _text_of(content: str | list[Any] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
    return "".join(parts)


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:16]}"


class _PartialCall:
    def __init__(self, id: str | None) -> None:
        self.id = id
        self.name: str | None = None
        self.arguments: list[str] = []


class _StreamState:
    """Assembles chat.completion.chunk events into one response."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: list[_PartialCall] = []
        self.by_index: dict[int, int] = {}
        self.by_id: dict[str, int] = {}
        self.finish_reason: str | None = None
        self.usage = Usage()
        self.model: str | None = None

    def _continues(self, slot: int, delta: _ToolCall) -> bool:
        """Whether ``delta`` (no id, or the same id) adds to the call in ``slot``.

        Not when it names a tool and that call already has a name and complete JSON
        arguments: servers that send each call whole in one delta (Ollama, llama.cpp) may
        give every call index 0, or no index and no id at all.
        """
        call = self.calls[slot]
        fn = delta.function or _Function()
        if not fn.name or call.name is None or delta.id is not None:
            return True
        if fn.name == call.name and not fn.arguments:
            return True  # a server repeating the name on a later piece
        _, error = parse_tool_arguments("".join(call.arguments) or "{}")
        return error is not None

    def _slot(self, delta: _ToolCall) -> int:
        if delta.index is not None and delta.index in self.by_index:
            slot = self.by_index[delta.index]
            known = self.calls[slot].id
            if (delta.id is None or known is None or delta.id == known) and self._continues(
                slot, delta
            ):
                return slot
        elif delta.index is None:
            if delta.id is not None and delta.id in self.by_id:
                return self.by_id[delta.id]
            if delta.id is None and self.calls and self._continues(len(self.calls) - 1, delta):
                return len(self.calls) - 1
        slot = len(self.calls)
        self.calls.append(_PartialCall(delta.id))
        if delta.index is not None:
            self.by_index[delta.index] = slot
        if delta.id is not None:
            self.by_id[delta.id] = slot
        return slot

    def feed(self, chunk: _Chunk) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        self.model = chunk.model or self.model
        if chunk.usage is not None:
            self.usage = chunk.usage.to_usage()
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
            if choice.delta.content:
                self.text.append(choice.delta.content)
                events.append(TextDelta(choice.delta.content))
            for delta in choice.delta.tool_calls or []:
                slot = self._slot(delta)
                call = self.calls[slot]
                if call.id is None and delta.id is not None:
                    call.id = delta.id
                    self.by_id[delta.id] = slot
                fn = delta.function or _Function()
                new_name = None
                if fn.name and call.name is None:
                    call.name = new_name = fn.name
                args = fn.arguments
                piece = json.dumps(args) if isinstance(args, dict) else (args or "")
                call.arguments.append(piece)
                if new_name is not None or piece or delta.id is not None:
                    events.append(
                        ToolCallDelta(index=slot, id=delta.id, name=new_name, arguments=piece)
                    )
        return events

    def finish(self, model: str, raw: Any) -> LLMResponse:
        calls = [
            ToolCall.from_raw(c.id or _new_call_id(), c.name or "", "".join(c.arguments))
            for c in self.calls
        ]
        return LLMResponse(
            content="".join(self.text),
            tool_calls=calls,
            usage=self.usage,
            finish_reason=_finish_reason(self.finish_reason, calls),
            model=self.model or model,
            raw=raw,
        )


def _events_for(response: LLMResponse) -> list[StreamEvent]:
    """Stream events equivalent to a complete response (for servers that ignore stream)."""
    events: list[StreamEvent] = []
    if response.content:
        events.append(TextDelta(response.content))
    for i, call in enumerate(response.tool_calls):
        events.append(ToolCallDelta(i, call.id, call.name, call.arguments_json()))
    events.append(StreamEnd(response))
    return events


# ---------------------------------------------------------------------------- client


class OpenAIChat(HTTPChatClient):
    """A model behind the chat completions API (``POST {base_url}/chat/completions``).

    ``max_tokens`` / ``temperature`` given here are defaults for every call.
    ``extra_body`` is merged into every request body (e.g. ``{"seed": 1}``).
    ``max_tokens_field`` names the length limit in the body (``"max_completion_tokens"``
    for OpenAI reasoning models). ``stream_usage=False`` drops ``stream_options`` for
    servers that reject it.
    """

    provider_label = "OpenAI"
    official_host = "api.openai.com"
    api_key_env = "OPENAI_API_KEY"

    def __init__(
        self,
        model: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        timeout: float | httpx.Timeout = 60.0,
        max_retries: int = 3,
        retry_base_delay_s: float = 0.5,
        max_retry_wait_s: float = 60.0,
        max_response_bytes: int = 32 * 1024 * 1024,
        client: httpx.AsyncClient | None = None,
        headers: Mapping[str, str] | None = None,
        usage: UsageTracker | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        extra_body: Mapping[str, Any] | None = None,
        max_tokens_field: str = "max_tokens",
        stream_usage: bool = True,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            timeout=timeout,
            max_retries=max_retries,
            retry_base_delay_s=retry_base_delay_s,
            max_retry_wait_s=max_retry_wait_s,
            max_response_bytes=max_response_bytes,
            client=client,
            headers=headers,
            usage=usage,
        )
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.extra_body = dict(extra_body or {})
        self.max_tokens_field = max_tokens_field
        self.stream_usage = stream_usage

    def _auth_headers(self) -> dict[str, str]:
        if self._key is None:
            return {}
        return {"authorization": f"Bearer {self._key.reveal()}"}

    def build_body(self, request: LLMRequest) -> dict[str, Any]:
        """The JSON body for ``request``."""
        body: dict[str, Any] = {"model": self.model, "messages": openai_messages(request.messages)}
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ]
        fmt = request.response_format
        if fmt is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": wire_name(fmt.name),
                    "schema": fmt.schema,
                    "strict": fmt.strict,
                },
            }
        if request.stop:
            body["stop"] = list(request.stop)
        max_tokens = request.max_tokens if request.max_tokens is not None else self.max_tokens
        if max_tokens is not None:
            body[self.max_tokens_field] = max_tokens
        temperature = request.temperature if request.temperature is not None else self.temperature
        if temperature is not None:
            body["temperature"] = temperature
        if request.stream:
            body["stream"] = True
            if self.stream_usage:
                body["stream_options"] = {"include_usage": True}
        body.update(self.extra_body)
        return body

    # -- parsing -------------------------------------------------------------------

    def _stream_error(self, error: Any) -> Exception:
        """The error for an ``{"error": ...}`` event in a 200 stream (vLLM, llama.cpp, TGI).

        The status in the error object decides, as it would for an HTTP error: a refused
        request (400, say "context too long") is not retried; a server failure is.
        """
        text = self._scrub(_error_text(error))
        status = _error_status(error)
        if status is None:
            return Retryable(
                LLMServerError, f"{self.provider} reported an error mid-stream: {text}"
            )
        return self.status_error(status, f"{text} (reported mid-stream)")

    def parse_response(self, data: Any) -> LLMResponse:
        """An :class:`LLMResponse` from a ``chat.completion`` JSON body."""
        if isinstance(data, dict) and data.get("error") and "choices" not in data:
            # An error inside a 200 answer: its own status (if any) decides what it is.
            status = _error_status(data["error"])
            if status is not None:
                raise self.status_error(status, self._scrub(_error_text(data["error"])))
            raise self._response_error("the body is an error, not a completion", json.dumps(data))
        try:
            completion = _Completion.model_validate(data)
        except ValidationError as exc:
            raise self._shape_error(exc, data) from None
        if not completion.choices:
            raise self._response_error("no choices in the completion", json.dumps(data))
        choice = completion.choices[0]
        calls = []
        for tc in choice.message.tool_calls or []:
            fn = tc.function or _Function()
            calls.append(ToolCall.from_raw(tc.id or _new_call_id(), fn.name or "", fn.arguments))
        return LLMResponse(
            content=_text_of(choice.message.content),
            tool_calls=calls,
            usage=completion.usage.to_usage() if completion.usage else Usage(),
            finish_reason=_finish_reason(choice.finish_reason, calls),
            model=completion.model or self.model,
            raw=data,
        )

    async def _consume(self, response: httpx.Response) -> AsyncGenerator[StreamEvent, None]:
        if not is_event_stream(response):
            # The server ignored ``stream: true`` and answered in one piece.
            await self._read_whole(response)
            result = self.parse_response(self._json_body(response))
            self.usage.record(result.usage)
            for event in _events_for(result):
                yield event
            return
        state = _StreamState()
        raw: list[Any] = []
        done = False

        def idle() -> float | None:
            # Once the answer is finished, only the usage chunk and [DONE] may follow: a
            # server that then holds the connection open is not waited for long.
            read = self.timeout.read
            if state.finish_reason is None:
                return read
            return _AFTER_FINISH_S if read is None else min(read, _AFTER_FINISH_S)

        events = iter_sse(response.aiter_lines(), idle=idle)
        try:
            async for sse in events:
                if sse.data.strip() == "[DONE]":
                    done = True
                    break
                try:
                    data = loads_json(sse.data)
                except ValueError:
                    raise self._response_error("a stream event is not JSON", sse.data) from None
                raw.append(data)
                if isinstance(data, dict) and data.get("error"):
                    raise self._stream_error(data["error"])
                if sse.event == "error":
                    raise self._stream_error(data)
                try:
                    chunk = _Chunk.model_validate(data)
                except ValidationError as exc:
                    raise self._shape_error(exc, data) from None
                for event in state.feed(chunk):
                    yield event
        except httpx.TransportError:
            # Closed, cut or held open after the answer was finished: many servers end a
            # stream that way instead of sending [DONE]; what arrived is the whole answer.
            if state.finish_reason is None:
                raise
        if not done and state.finish_reason is None:
            raise Retryable(
                LLMResponseError,
                f"the stream from {self.provider} ended early: the connection closed before "
                "the answer finished (no finish_reason, no [DONE])",
            )
        result = state.finish(self.model, raw)
        self.usage.record(result.usage)
        yield StreamEnd(result)

    # -- the LLM protocol (complete / stream come from HTTPChatClient) ----------------

    async def _complete(self, request: LLMRequest) -> LLMResponse:
        return await self._call("/chat/completions", self.build_body(request), self.parse_response)

    def _stream(self, request: LLMRequest) -> AsyncGenerator[StreamEvent, None]:
        return self._call_stream("/chat/completions", self.build_body(request), self._consume)


def _error_text(error: Any) -> str:
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error[:500]
    return json.dumps(error)[:500]


def _error_status(error: Any) -> int | None:
    """The HTTP status an error object carries (vLLM and llama.cpp put it in ``code``)."""
    if not isinstance(error, dict):
        return None
    for key in ("code", "status", "status_code"):
        value = error.get(key)
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, int) and 400 <= value <= 599:
            return value
    return None
