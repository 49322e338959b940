"""Client for the OpenAI chat completions wire format.

Works with OpenAI and with every server speaking the same format (vLLM, Ollama, the
llama.cpp server, LM Studio, ...): point ``base_url`` at the server's ``/v1``. Local
servers usually need no key; without one no ``Authorization`` header is sent.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import ValidationError

from dagagent.errors import (
    ConfigError,
    LLMServerError,
    LLMUnsupportedOptionError,
)
from dagagent.llm._http import HTTPChatClient, _log
from dagagent.llm._openai_format import (
    Chunk,
    Completion,
    Function,
    StreamState,
    error_status,
    error_text,
    finish_reason,
    is_reasoning_model,
    new_call_id,
    openai_messages,
    refused_option,
    text_of,
    tool_choice_json,
)
from dagagent.llm._retry import Retryable
from dagagent.llm._sse import is_event_stream, iter_sse
from dagagent.llm.settings import ModelSettings
from dagagent.llm.types import (
    LLMRequest,
    LLMResponse,
    StreamEvent,
    ToolCall,
    check_tool_choice,
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

    ``settings`` (a :class:`~dagagent.llm.ModelSettings`) says how to call: ``max_tokens``,
    ``temperature``, ``tool_choice`` and ``parallel_tool_calls`` are defaults for every call,
    ``extra_body`` is merged into every request body (e.g. ``{"seed": 1}``).

    **The output limit.** ``max_tokens`` goes as ``max_tokens``, except to OpenAI's
    reasoning models (o1, o3, o4, gpt-5...: by the model's name), which take
    ``max_completion_tokens`` and refuse ``max_tokens``: they get ``max_completion_tokens``,
    the answer's ``max_tokens`` plus ``settings.reasoning_tokens`` for their reasoning, which
    it counts too. A server that answers ``max_tokens`` with OpenAI's documented 400 ("Use
    'max_completion_tokens' instead", as a deployment of another name may) is asked once
    more that way, and so is every later call of this client. ``max_tokens_field`` names the
    field outright (``"max_tokens"`` or ``"max_completion_tokens"``). ``stream_usage=False``
    drops ``stream_options`` for servers that reject it.

    **Tools.** ``tool_choice`` (``"auto"``, ``"none"``, ``"required"`` or a tool's name) and
    ``parallel_tool_calls`` go as the API's fields of those names, only when tools are
    offered. A server that rejects ``json_schema`` response formats (a 400 naming
    ``response_format`` or the JSON schema) raises
    :class:`~dagagent.errors.LLMUnsupportedOptionError` (``option="response_format"``): the
    planners then describe the format in the prompt alone.
    """

    provider_name = "openai"

    provider_label = "OpenAI"
    default_base_url = DEFAULT_BASE_URL
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
        max_tokens_field: str | None = None,
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
        if max_tokens_field not in (None, "max_tokens", "max_completion_tokens"):
            raise ConfigError(
                "max_tokens_field must be 'max_tokens' or 'max_completion_tokens', not "
                f"{max_tokens_field!r}"
            )
        self.max_tokens_field = max_tokens_field or (
            "max_completion_tokens" if is_reasoning_model(model) else "max_tokens"
        )
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
            choice = request.tool_choice or self.tool_choice
            check_tool_choice(choice, request.tools)
            if choice is not None:
                body["tool_choice"] = tool_choice_json(choice)
            parallel = request.parallel_tool_calls
            if parallel is None:
                parallel = self.parallel_tool_calls
            if parallel is not None:
                body["parallel_tool_calls"] = parallel
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
            if self.max_tokens_field == "max_completion_tokens":
                body["max_completion_tokens"] = max_tokens + self.settings.reasoning_tokens
            else:
                body["max_tokens"] = max_tokens
        temperature = request.temperature if request.temperature is not None else self.temperature
        if temperature is not None:
            body["temperature"] = temperature
        if request.stream:
            body["stream"] = True
            if self.stream_usage:
                body["stream_options"] = {"include_usage": True}
        body.update(self.extra_body)
        return body

    def rejected_option(self, body: str) -> str | None:
        return refused_option(body)

    def _with_completion_tokens(
        self, body: dict[str, Any], error: LLMUnsupportedOptionError
    ) -> dict[str, Any] | None:
        """``body`` with ``max_completion_tokens`` in place of the ``max_tokens`` the server
        refused (and this client's later calls too), or ``None`` when that is not the fix."""
        if error.option != "max_tokens" or "max_tokens" not in body:
            return None
        self.max_tokens_field = "max_completion_tokens"
        _log(
            "llm.max_completion_tokens",
            provider=self.provider,
            model=self.model,
            reason="the server refused max_tokens; asking again with max_completion_tokens",
        )
        again = {k: v for k, v in body.items() if k != "max_tokens"}
        limit = body["max_tokens"]
        if isinstance(limit, int):
            limit += self.settings.reasoning_tokens
        again["max_completion_tokens"] = limit
        return again

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
            for event in await self._answered_whole(response, self.parse_response):
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
                    data = self._event_json(sse)
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
            raise self._ended_early("before the answer finished (no finish_reason, no [DONE])")
        yield self._stream_end(state.finish(self.model, raw))

    # -- the LLM protocol (complete / stream come from HTTPChatClient) ----------------

    async def _complete(self, request: LLMRequest) -> LLMResponse:
        body = self.build_body(request)
        try:
            return await self._call("/chat/completions", body, self.parse_response)
        except LLMUnsupportedOptionError as exc:
            again = self._with_completion_tokens(body, exc)
            if again is None:
                raise
        return await self._call("/chat/completions", again, self.parse_response)

    async def _stream(self, request: LLMRequest) -> AsyncGenerator[StreamEvent, None]:
        body = self.build_body(request)
        started = False
        try:
            async with aclosing(self._call_stream("/chat/completions", body, self._consume)) as it:
                async for event in it:
                    started = True
                    yield event
            return
        except LLMUnsupportedOptionError as exc:
            again = None if started else self._with_completion_tokens(body, exc)
            if again is None:
                raise
        async with aclosing(self._call_stream("/chat/completions", again, self._consume)) as it:
            async for event in it:
                yield event


if TYPE_CHECKING:

    def _implements_protocol(client: OpenAIChat) -> LLM:
        return client
