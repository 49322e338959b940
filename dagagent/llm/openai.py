"""Client for the OpenAI chat completions wire format.

Works with OpenAI and with every server speaking the same format (vLLM, Ollama, the
llama.cpp server, LM Studio, ...): point ``base_url`` at the server's ``/v1``. Local
servers usually need no key; without one no ``Authorization`` header is sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import ValidationError

from dagagent.errors import LLMResponseError, LLMServerError
from dagagent.llm._http import HTTPChatClient
from dagagent.llm._json import loads_json
from dagagent.llm._openai_format import (
    Chunk,
    Completion,
    Function,
    StreamState,
    error_status,
    error_text,
    events_for,
    finish_reason,
    new_call_id,
    openai_messages,
    text_of,
)
from dagagent.llm._retry import Retryable
from dagagent.llm._sse import is_event_stream, iter_sse
from dagagent.llm.settings import ModelSettings
from dagagent.llm.types import (
    LLMRequest,
    LLMResponse,
    StreamEnd,
    StreamEvent,
    ToolCall,
    closing_stream,
    wire_name,
)
from dagagent.llm.usage import Usage, UsageTracker

if TYPE_CHECKING:
    from dagagent.llm.protocol import LLM

__all__ = ["OpenAIChat", "openai_messages"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"

_AFTER_FINISH_S = 2.0  # wait for the usage chunk and [DONE] once finish_reason has come


class OpenAIChat(HTTPChatClient):
    """A model behind the chat completions API (``POST {base_url}/chat/completions``).

    ``settings`` (a :class:`~dagagent.llm.ModelSettings`, or its keyword arguments such as
    ``timeout=``, ``max_retries=``, ``temperature=``) says how to call: ``max_tokens`` /
    ``temperature`` are defaults for every call, ``extra_body`` is merged into every request
    body (e.g. ``{"seed": 1}``).
    ``max_tokens_field`` names the length limit in the body (``"max_completion_tokens"``
    for OpenAI reasoning models). ``stream_usage=False`` drops ``stream_options`` for
    servers that reject it.
    """

    provider_name = "openai"

    provider_label = "OpenAI"
    wire_format = "openai"
    official_host = "api.openai.com"
    api_key_env = "OPENAI_API_KEY"

    def __init__(
        self,
        model: str,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        settings: ModelSettings | None = None,
        client: httpx.AsyncClient | None = None,
        headers: Mapping[str, str] | None = None,
        usage: UsageTracker | None = None,
        max_tokens_field: str = "max_tokens",
        stream_usage: bool = True,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            settings=settings,
            client=client,
            headers=headers,
            usage=usage,
        )
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
        text = self._scrub(error_text(error))
        status = error_status(error)
        if status is None:
            return Retryable(
                LLMServerError, f"{self.provider} reported an error mid-stream: {text}"
            )
        return self.status_error(status, f"{text} (reported mid-stream)")

    def parse_response(self, data: Any) -> LLMResponse:
        """An :class:`LLMResponse` from a ``chat.completion`` JSON body."""
        if isinstance(data, dict) and data.get("error") and "choices" not in data:
            # An error inside a 200 answer: its own status (if any) decides what it is.
            status = error_status(data["error"])
            if status is not None:
                raise self.status_error(status, self._scrub(error_text(data["error"])))
            raise self._response_error("the body is an error, not a completion", json.dumps(data))
        try:
            completion = Completion.model_validate(data)
        except ValidationError as exc:
            raise self._shape_error(exc, data) from None
        if not completion.choices:
            raise self._response_error("no choices in the completion", json.dumps(data))
        choice = completion.choices[0]
        calls = []
        for tc in choice.message.tool_calls or []:
            fn = tc.function or Function()
            calls.append(ToolCall.from_raw(tc.id or new_call_id(), fn.name or "", fn.arguments))
        return LLMResponse(
            content=text_of(choice.message.content),
            tool_calls=calls,
            usage=completion.usage.to_usage() if completion.usage else Usage(),
            finish_reason=finish_reason(choice.finish_reason, calls),
            model=completion.model or self.model,
            raw=data,
        )

    async def _consume(self, response: httpx.Response) -> AsyncGenerator[StreamEvent, None]:
        if not is_event_stream(response):
            # The server ignored ``stream: true`` and answered in one piece.
            await self._read_whole(response)
            result = self.parse_response(self._json_body(response))
            self.usage.record(result.usage)
            for event in events_for(result):
                yield event
            return
        state = StreamState()
        raw: list[Any] = []
        done = False

        def idle() -> float | None:
            # Once the answer is finished, only the usage chunk and [DONE] may follow: a
            # server that then holds the connection open is not waited for long.
            read = self.timeout.read
            if state.finish_reason is None:
                return read
            return _AFTER_FINISH_S if read is None else min(read, _AFTER_FINISH_S)

        events = iter_sse(self._sse_lines(response), idle=idle)
        try:
            async with closing_stream(events):
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
                        chunk = Chunk.model_validate(data)
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


if TYPE_CHECKING:

    def _implements_protocol(client: OpenAIChat) -> LLM:
        return client
