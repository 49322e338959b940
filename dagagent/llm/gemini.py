"""Client for the Gemini API in its own wire format (``models/MODEL:generateContent``, and
``:streamGenerateContent?alt=sse`` for streams).

How dagagent's provider-neutral requests map onto it:

* system messages are joined and sent as ``systemInstruction``; the rest are ``contents``
  with role ``user`` or ``model``, consecutive turns of one role merged into one content;
* tools are one ``{"functionDeclarations": [...]}`` entry of ``tools``; a tool call is a
  ``functionCall`` part and its result a ``functionResponse`` part naming the function,
  with ``{"output": ...}`` (or ``{"error": ...}`` for a failed call) as its ``response``.
  A call's ``thoughtSignature`` goes back with it, as Gemini's thinking models require;
* ``tool_choice`` becomes ``toolConfig.functionCallingConfig``: ``AUTO``, ``NONE``, ``ANY``
  (required) or ``ANY`` with ``allowedFunctionNames`` (a tool's name).
  ``parallel_tool_calls`` has no Gemini equivalent and is not sent;
* ``response_format`` becomes ``generationConfig.responseMimeType: application/json`` with
  ``responseSchema``, the JSON Schema in Gemini's schema dialect (see
  :func:`~dagagent.llm._gemini_format.gemini_schema`); ``max_tokens`` is
  ``maxOutputTokens``, ``stop`` is ``stopSequences``;
* usage is ``usageMetadata``: ``promptTokenCount`` in, ``candidatesTokenCount`` plus
  ``thoughtsTokenCount`` out.

Errors map as for the other clients, by HTTP status (429 ``RESOURCE_EXHAUSTED`` is a rate
limit, 500/503 retried, "The input token count ... exceeds" is
:class:`~dagagent.errors.LLMContextLengthError`); Gemini answers a wrong key with a 400
``API_KEY_INVALID``, which is :class:`~dagagent.errors.LLMAuthError` here.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx
from pydantic import ValidationError

from dagagent.errors import LLMAuthError, LLMServerError
from dagagent.llm._gemini_format import (
    StreamState,
    WireResponse,
    error_status,
    error_text,
    function_declaration,
    gemini_contents,
    gemini_schema,
    tool_config,
)
from dagagent.llm._http import HTTPChatClient
from dagagent.llm._retry import Retryable
from dagagent.llm._sse import is_event_stream, iter_sse
from dagagent.llm.types import (
    LLMRequest,
    LLMResponse,
    StreamEvent,
    check_tool_choice,
    closing_stream,
)

if TYPE_CHECKING:
    from dagagent.llm.protocol import LLM

__all__ = ["GeminiChat"]

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"

# A 400 that refuses the structured output asked for: the schema, or JSON output together
# with function calling (which models before Gemini 3 do not take).
_RESPONSE_FORMAT_RE = re.compile(
    r"response_?schema|response_?mime_?type|responseSchema|responseMimeType", re.IGNORECASE
)
_BAD_KEY_RE = re.compile(r"API_KEY_INVALID|API key not valid|API key expired", re.IGNORECASE)


class GeminiChat(HTTPChatClient):
    """A Gemini model behind the Gemini API (Google AI Studio's
    ``https://generativelanguage.googleapis.com/v1beta``, or a server speaking its format at
    ``base_url``).

    Sends ``x-goog-api-key`` (from ``api_key``, ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``).
    ``settings`` (a :class:`~dagagent.llm.ModelSettings`) says how to call, as for the other
    clients; ``extra_body`` is merged into every body (e.g. ``{"safetySettings": [...]}``).
    See the module docstring for how requests map onto the format.
    """

    provider_name = "gcp.gemini"  # OpenTelemetry's gen_ai.provider.name for the Gemini API
    spec_provider = "gemini"  # as model specs name it

    provider_label = "Gemini"
    wire_format = "gemini"
    official_host = "generativelanguage.googleapis.com"
    api_key_env = "GEMINI_API_KEY"
    fallback_api_key_env = "GOOGLE_API_KEY"
    default_base_url = DEFAULT_BASE_URL

    def _model_id(self, model: str) -> str:
        return model.removeprefix("models/")

    def _auth_headers(self) -> dict[str, str]:
        if self._key is None:
            return {}
        return {"x-goog-api-key": self._key.reveal()}

    def path(self, *, stream: bool) -> str:
        """``/models/MODEL:generateContent``, or ``:streamGenerateContent?alt=sse``."""
        name = quote(self.model, safe="-._~")
        if stream:
            return f"/models/{name}:streamGenerateContent?alt=sse"
        return f"/models/{name}:generateContent"

    def build_body(self, request: LLMRequest) -> dict[str, Any]:
        """The JSON body for ``request``."""
        body: dict[str, Any] = {"contents": gemini_contents(request.messages)}
        if request.system:
            body["systemInstruction"] = {"parts": [{"text": request.system}]}
        if request.tools:
            body["tools"] = [
                {
                    "functionDeclarations": [
                        function_declaration(t.name, t.description, t.parameters)
                        for t in request.tools
                    ]
                }
            ]
            choice = request.tool_choice or self.tool_choice
            check_tool_choice(choice, request.tools)
            config = tool_config(choice)
            if config is not None:
                body["toolConfig"] = config
        generation: dict[str, Any] = {}
        max_tokens = request.max_tokens if request.max_tokens is not None else self.max_tokens
        if max_tokens is not None:
            generation["maxOutputTokens"] = max_tokens
        temperature = request.temperature if request.temperature is not None else self.temperature
        if temperature is not None:
            generation["temperature"] = temperature
        if request.stop:
            generation["stopSequences"] = list(request.stop)
        fmt = request.response_format
        if fmt is not None:
            generation["responseMimeType"] = "application/json"
            generation["responseSchema"] = gemini_schema(fmt.schema)
        if generation:
            body["generationConfig"] = generation
        body.update(self.extra_body)
        return body

    # -- errors ----------------------------------------------------------------------

    def rejected_option(self, body: str) -> str | None:
        return "response_format" if _RESPONSE_FORMAT_RE.search(body) else None

    def status_error(
        self,
        status: int,
        text: str,
        *,
        retry_after: float | None = None,
        location: str = "?",
        body: str | None = None,
    ) -> Exception:
        if status == 400 and _BAD_KEY_RE.search(f"{text} {body or ''}"):
            return LLMAuthError(self._auth_message(status, text))
        return super().status_error(
            status, text, retry_after=retry_after, location=location, body=body
        )

    def _error_in_body(self, error: Any, where: str) -> Exception:
        """The error for an ``{"error": ...}`` object in a 200 answer or a stream."""
        text = self._scrub(error_text(error))
        status = error_status(error)
        if status is None:
            return Retryable(LLMServerError, f"{self.provider} reported an error {where}: {text}")
        return self.status_error(status, f"{text} (reported {where})")

    # -- parsing -------------------------------------------------------------------

    def _chunk(self, data: Any, where: str) -> WireResponse:
        if isinstance(data, dict) and data.get("error"):
            raise self._error_in_body(data["error"], where)
        try:
            return WireResponse.model_validate(data)
        except ValidationError as exc:
            raise self._shape_error(exc, data) from None

    def parse_response(self, data: Any) -> LLMResponse:
        """An :class:`LLMResponse` from a ``generateContent`` JSON body (or the JSON array of
        chunks ``streamGenerateContent`` sends without ``alt=sse``)."""
        chunks = data if isinstance(data, list) else [data]
        state = StreamState()
        for chunk in chunks:
            state.feed(self._chunk(chunk, "in a 200 response"))
        if not state.finished:
            raise self._response_error(
                "no candidate with a finishReason, and no promptFeedback.blockReason",
                json.dumps(data)[:2000],
            )
        return state.result(self.model, data)

    async def _consume(self, response: httpx.Response) -> AsyncGenerator[StreamEvent, None]:
        if not is_event_stream(response):  # answered in one piece (or as a JSON array)
            for event in await self._answered_whole(response, self.parse_response):
                yield event
            return
        state = StreamState()
        raw: list[Any] = []
        events = iter_sse(self._sse_lines(response), idle=self.timeout.read)
        try:
            async with closing_stream(events):
                async for sse in events:
                    if not sse.data.strip():
                        continue
                    data = self._event_json(sse)
                    raw.append(data)
                    for event in state.feed(self._chunk(data, "mid-stream")):
                        yield event
        except httpx.TransportError:
            # Gemini ends a stream by closing it; once the finishReason came, that is all.
            if not state.finished:
                raise
        if not state.finished:
            raise self._ended_early("before a chunk with a finishReason")
        yield self._stream_end(state.result(self.model, raw))

    # -- the LLM protocol (complete / stream come from HTTPChatClient) ----------------

    async def _complete(self, request: LLMRequest) -> LLMResponse:
        body = self.build_body(request)
        return await self._call(self.path(stream=False), body, self.parse_response)

    def _stream(self, request: LLMRequest) -> AsyncGenerator[StreamEvent, None]:
        body = self.build_body(request)
        return self._call_stream(self.path(stream=True), body, self._consume)


if TYPE_CHECKING:

    def _implements_protocol(client: GeminiChat) -> LLM:
        return client
