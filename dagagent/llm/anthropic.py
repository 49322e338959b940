"""Client for the Anthropic Messages API (``POST {base_url}/v1/messages``).

How dagagent's provider-neutral requests map onto it:

* system messages are joined and sent apart, as ``system``;
* consecutive messages of one role are merged into one message, so all tool results of
  a turn become ONE user message of ``tool_result`` blocks (placed before any text);
* ``max_tokens`` is required by Anthropic, so it defaults to 4096;
* ``stop`` becomes ``stop_sequences``;
* ``tool_choice`` becomes ``{"type": "auto" | "none" | "any" (required) | "tool" (a name)}``
  and ``parallel_tool_calls=False`` its ``disable_parallel_tool_use: true``, when tools are
  offered;
* ``response_format`` has no Anthropic equivalent and is emulated with a forced tool
  whose ``input_schema`` is the schema (``tool_choice: {"type": "tool"}``, or ``"any"``
  when other tools are offered too, whatever ``tool_choice`` says). The tool's input comes
  back as JSON text in ``LLMResponse.content`` (not as a tool call) and ``finish_reason`` is
  ``"stop"``.
  Schemas whose top level is not an object are wrapped in ``{"value": ...}`` on the way
  out and unwrapped on the way back.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import ValidationError

from dagagent.errors import (
    LLMServerError,
)
from dagagent.llm._anthropic_format import (
    ERROR_TYPES,
    Event,
    FormatTool,
    PartialBlock,
    StreamState,
    WireMessage,
    WireUsage,
    anthropic_messages,
    finish_reason,
    tool_choice_json,
)
from dagagent.llm._http import HTTPChatClient
from dagagent.llm._retry import Retryable
from dagagent.llm._sse import is_event_stream, iter_sse
from dagagent.llm.types import (
    LLMRequest,
    LLMResponse,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    check_tool_choice,
    closing_stream,
)
from dagagent.llm.usage import Usage

if TYPE_CHECKING:
    from dagagent.llm.protocol import LLM

__all__ = ["ANTHROPIC_VERSION", "AnthropicChat", "anthropic_messages"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096


class AnthropicChat(HTTPChatClient):
    """A Claude model behind the Messages API (``https://api.anthropic.com``, or a server
    speaking its format at ``base_url``).

    Sends ``x-api-key`` (from ``api_key`` or ``ANTHROPIC_API_KEY``) and
    ``anthropic-version: 2023-06-01``. ``settings`` (a :class:`~dagagent.llm.ModelSettings`,
    or its keyword arguments such as ``timeout=``, ``max_retries=``, ``temperature=``) says
    how to call: ``max_tokens`` (default 4096) and ``temperature`` are defaults for every
    call; ``extra_body`` is merged into every body.
    See the module docstring for how ``response_format`` is emulated.
    """

    provider_name = "anthropic"

    provider_label = "Anthropic"
    wire_format = "anthropic"
    official_host = "api.anthropic.com"
    api_key_env = "ANTHROPIC_API_KEY"
    default_base_url = DEFAULT_BASE_URL
    default_max_tokens = DEFAULT_MAX_TOKENS  # Anthropic requires a limit

    @property
    def path(self) -> str:
        """``/v1/messages``, or ``/messages`` when ``base_url`` already ends in ``/v1``."""
        return "/messages" if self.base_url.endswith("/v1") else "/v1/messages"

    def _auth_headers(self) -> dict[str, str]:
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if self._key is not None:
            headers["x-api-key"] = self._key.reveal()
        return headers

    def build_body(self, request: LLMRequest) -> tuple[dict[str, Any], FormatTool | None]:
        """The JSON body for ``request`` and the format tool emulating its response_format."""
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens if request.max_tokens is not None else self.max_tokens,
            "messages": anthropic_messages(request.messages),
        }
        if request.system:
            body["system"] = request.system
        tools: list[dict[str, Any]] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
        choice: dict[str, Any] | None = None
        parallel: bool | None = None
        if request.tools:
            named = request.tool_choice or self.tool_choice
            check_tool_choice(named, request.tools)
            choice = tool_choice_json(named)
            parallel = request.parallel_tool_calls
            if parallel is None:
                parallel = self.parallel_tool_calls
        fmt: FormatTool | None = None
        if request.response_format is not None:  # the format tool must be called
            fmt, spec = FormatTool.for_format(request.response_format)
            tools.append(spec)
            choice = {"type": "any"} if request.tools else {"type": "tool", "name": fmt.name}
        if parallel is False and (choice is None or choice["type"] != "none"):
            choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
        if choice is not None:
            body["tool_choice"] = choice
        if tools:
            body["tools"] = tools
        if request.stop:
            body["stop_sequences"] = list(request.stop)
        temperature = request.temperature if request.temperature is not None else self.temperature
        if temperature is not None:
            body["temperature"] = temperature
        if request.stream:
            body["stream"] = True
        body.update(self.extra_body)
        return body, fmt

    # -- parsing -------------------------------------------------------------------

    def _error_event(self, error: Any, where: str) -> Exception:
        kind_name = error.get("type") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        text = self._scrub(str(message) if message else json.dumps(error)[:500])
        kind, retry = ERROR_TYPES.get(str(kind_name), (LLMServerError, True))
        full = f"{self.provider} reported an error {where}: {text} [{kind_name}]"
        return Retryable(kind, full) if retry else kind(full)

    def parse_response(self, data: Any, fmt: FormatTool | None = None) -> LLMResponse:
        """An :class:`LLMResponse` from a Messages API JSON body."""
        if isinstance(data, dict) and data.get("type") == "error":
            raise self._error_event(data.get("error"), "in a 200 response")
        try:
            message = WireMessage.model_validate(data)
        except ValidationError as exc:
            raise self._shape_error(exc, data) from None
        texts: list[str] = []
        calls: list[ToolCall] = []
        structured: str | None = None
        for block in message.content:
            if block.type == "text":
                texts.append(block.text or "")
            elif block.type == "tool_use":
                if fmt is not None and block.name == fmt.name:
                    structured = fmt.content_from_input(block.input)
                    continue
                raw_input = block.input
                if not isinstance(raw_input, dict | str) and raw_input is not None:
                    raw_input = json.dumps(raw_input)
                calls.append(ToolCall.from_raw(block.id or "", block.name or "", raw_input))
        usage = message.usage or WireUsage()
        return LLMResponse(
            content=structured if structured is not None else "".join(texts),
            tool_calls=calls,
            usage=Usage(input_tokens=usage.input_total(), output_tokens=usage.output_tokens or 0),
            finish_reason=finish_reason(message.stop_reason, structured is not None, bool(calls)),
            model=message.model or self.model,
            raw=data,
        )

    async def _consume(
        self, response: httpx.Response, fmt: FormatTool | None
    ) -> AsyncGenerator[StreamEvent, None]:
        if not is_event_stream(response):
            for whole in await self._answered_whole(
                response, lambda data: self.parse_response(data, fmt)
            ):
                yield whole
            return
        state = StreamState(fmt)
        raw: list[Any] = []
        done = False
        events = iter_sse(self._sse_lines(response), idle=self.timeout.read)
        async with closing_stream(events):
            async for sse in events:
                data = self._event_json(sse)
                raw.append(data)
                if not isinstance(data, dict):
                    raise self._response_error("a stream event is not an object", sse.data)
                data.setdefault("type", sse.event)
                try:
                    event = Event.model_validate(data)
                except ValidationError as exc:
                    raise self._shape_error(exc, data) from None
                for item in self._apply(state, event, sse.data):
                    yield item
                if event.type == "message_stop":
                    done = True
                    break
        if not done:
            raise self._ended_early("before message_stop")
        yield self._stream_end(state.finish(self.model, raw))

    def _apply(self, state: StreamState, event: Event, text: str) -> list[StreamEvent]:
        """Update ``state`` with one stream event; return what to yield for it."""
        kind = event.type
        if kind == "error":
            raise self._error_event(event.error, "mid-stream")
        if kind == "message_start":
            if event.message is not None:
                state.model = event.message.model or state.model
                if event.message.usage is not None:
                    state.input_tokens = event.message.usage.input_total()
                    state.output_tokens = event.message.usage.output_tokens or 0
            return []
        if kind == "message_delta":
            if event.delta is not None and isinstance(event.delta.get("stop_reason"), str):
                state.stop_reason = event.delta["stop_reason"]
            if event.usage is not None:
                if event.usage.output_tokens is not None:
                    state.output_tokens = event.usage.output_tokens
                if event.usage.input_total():
                    state.input_tokens = event.usage.input_total()
            return []
        if kind == "content_block_start":
            if event.index is None or event.content_block is None:
                raise self._response_error("content_block_start without index or block", text)
            block = event.content_block
            tool_index = None
            partial = PartialBlock(block, None)
            if block.type == "tool_use" and not state.is_format(partial):
                tool_index = partial.tool_index = state.tool_count
                state.tool_count += 1
            state.blocks[event.index] = partial
            state.order.append(event.index)
            if tool_index is not None:
                return [ToolCallDelta(tool_index, block.id, block.name, "")]
            if block.type == "text" and block.text:
                return [TextDelta(block.text)]
            return []
        if kind == "content_block_delta":
            if event.index is None or event.delta is None or event.index not in state.blocks:
                raise self._response_error("content_block_delta for an unknown block", text)
            partial = state.blocks[event.index]
            delta_type = event.delta.get("type")
            if delta_type == "text_delta":
                piece = event.delta.get("text")
                if not isinstance(piece, str):
                    raise self._response_error("text_delta without text", text)
                partial.parts.append(piece)
                return [TextDelta(piece)] if piece else []
            if delta_type == "input_json_delta":
                piece = event.delta.get("partial_json")
                if not isinstance(piece, str):
                    raise self._response_error("input_json_delta without partial_json", text)
                partial.parts.append(piece)
                if not piece:
                    return []
                if partial.tool_index is not None:
                    return [ToolCallDelta(partial.tool_index, arguments=piece)]
                if state.fmt is not None and not state.fmt.wrapped:
                    return [TextDelta(piece)]
            return []  # thinking, signatures and future delta types
        return []  # ping, content_block_stop and unknown events

    # -- the LLM protocol (complete / stream come from HTTPChatClient) ----------------

    async def _complete(self, request: LLMRequest) -> LLMResponse:
        body, fmt = self.build_body(request)
        return await self._call(self.path, body, lambda data: self.parse_response(data, fmt))

    def _stream(self, request: LLMRequest) -> AsyncGenerator[StreamEvent, None]:
        body, fmt = self.build_body(request)
        return self._call_stream(self.path, body, lambda response: self._consume(response, fmt))


if TYPE_CHECKING:

    def _implements_protocol(client: AnthropicChat) -> LLM:
        return client
