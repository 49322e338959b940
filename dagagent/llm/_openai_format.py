"""The OpenAI chat completions wire format: typed messages as request JSON, and response
bodies and stream chunks read back as :class:`~dagagent.llm.LLMResponse` and stream events.
No I/O: :class:`~dagagent.llm.OpenAIChat` sends and receives.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field, field_validator

from dagagent.llm.types import (
    AssistantMessage,
    LLMResponse,
    Message,
    StreamEvent,
    SystemMessage,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResultMessage,
    UserMessage,
    parse_tool_arguments,
)
from dagagent.llm.usage import Usage

FINISH_REASONS = {"function_call": "tool_calls"}

# OpenAI's reasoning models (o1, o3, o4-mini, gpt-5...): they take max_completion_tokens,
# which counts their reasoning too, and refuse max_tokens. A provider prefix
# ("openai/o3-mini") is looked past.
_REASONING_RE = re.compile(r"^(?:o\d+|gpt-5)(?:$|[-._:])")
_RESPONSE_FORMAT_RE = re.compile(r"response[_ .]?format|json[_ ]?schema")


def is_reasoning_model(model: str) -> bool:
    """Whether ``model`` names one of OpenAI's reasoning families (o1, o3, o4, gpt-5...)."""
    return _REASONING_RE.match(model.rsplit("/", 1)[-1].strip().lower()) is not None


def refused_option(body: str) -> str | None:
    """The option a 400 error body says the server does not take: ``"max_tokens"`` (OpenAI's
    documented ``unsupported_parameter`` error: "Use 'max_completion_tokens' instead"),
    ``"response_format"`` (servers without ``json_schema``: vLLM, llama.cpp, LM Studio and
    older ones name ``response_format`` or the JSON schema), else ``None``."""
    words = [body]
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        words += [str(error.get(k) or "") for k in ("message", "param", "code", "type")]
    text = " ".join(words).lower()
    if "max_tokens" in text and (
        "max_completion_tokens" in text
        or (
            isinstance(error, dict)
            and error.get("param") == "max_tokens"
            and error.get("code") == "unsupported_parameter"
        )
    ):
        return "max_tokens"
    if _RESPONSE_FORMAT_RE.search(text):
        return "response_format"
    return None


def tool_choice_json(choice: str | None) -> str | dict[str, Any] | None:
    """A :data:`~dagagent.llm.types.ToolChoice` as ``tool_choice``: a mode, or the function
    to call."""
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


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


class Function(BaseModel):
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


class WireToolCall(BaseModel):
    index: int | None = None
    id: str | None = None
    function: Function | None = None


class WireMessage(BaseModel):
    content: str | list[Any] | None = None
    tool_calls: list[WireToolCall] | None = None
    refusal: str | None = None


class Choice(BaseModel):
    message: WireMessage
    finish_reason: str | None = None


class WireUsage(BaseModel):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    def to_usage(self) -> Usage:
        return Usage(
            input_tokens=self.prompt_tokens or 0, output_tokens=self.completion_tokens or 0
        )


class Completion(BaseModel):
    model: str | None = None
    choices: list[Choice]
    usage: WireUsage | None = None


class Delta(BaseModel):
    content: str | None = None
    tool_calls: list[WireToolCall] | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: Delta = Field(default_factory=Delta)
    finish_reason: str | None = None

    @field_validator("delta", mode="before")
    @classmethod
    def _null_delta(cls, value: Any) -> Any:
        return {} if value is None else value


class Chunk(BaseModel):
    model: str | None = None
    choices: list[ChunkChoice] = Field(default_factory=list)
    usage: WireUsage | None = None

    @field_validator("choices", mode="before")
    @classmethod
    def _null_choices(cls, value: Any) -> Any:
        return [] if value is None else value


def finish_reason(reason: str | None, calls: Sequence[ToolCall]) -> str | None:
    """The normalised finish reason. Ollama and others say ``"stop"`` after tool calls."""
    if not reason:
        return None
    reason = FINISH_REASONS.get(reason, reason)
    return "tool_calls" if reason == "stop" and calls else reason


def text_of(content: str | list[Any] | None) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
    return "".join(parts)


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:16]}"


class PartialCall:
    def __init__(self, id: str | None) -> None:
        self.id = id
        self.name: str | None = None
        self.arguments: list[str] = []


class StreamState:
    """Assembles chat.completion.chunk events into one response."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: list[PartialCall] = []
        self.by_index: dict[int, int] = {}
        self.by_id: dict[str, int] = {}
        self.finish_reason: str | None = None
        self.usage = Usage()
        self.model: str | None = None

    def _continues(self, slot: int, delta: WireToolCall) -> bool:
        """Whether ``delta`` (no id, or the same id) adds to the call in ``slot``.

        Not when it names a tool and that call already has a name and complete JSON
        arguments: servers that send each call whole in one delta (Ollama, llama.cpp) may
        give every call index 0, or no index and no id at all.
        """
        call = self.calls[slot]
        fn = delta.function or Function()
        if not fn.name or call.name is None or delta.id is not None:
            return True
        if fn.name == call.name and not fn.arguments:
            return True  # a server repeating the name on a later piece
        _, error = parse_tool_arguments("".join(call.arguments) or "{}")
        return error is not None

    def _slot(self, delta: WireToolCall) -> int:
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
        self.calls.append(PartialCall(delta.id))
        if delta.index is not None:
            self.by_index[delta.index] = slot
        if delta.id is not None:
            self.by_id[delta.id] = slot
        return slot

    def feed(self, chunk: Chunk) -> list[StreamEvent]:
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
                fn = delta.function or Function()
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
            ToolCall.from_raw(c.id or new_call_id(), c.name or "", "".join(c.arguments))
            for c in self.calls
        ]
        return LLMResponse(
            content="".join(self.text),
            tool_calls=calls,
            usage=self.usage,
            finish_reason=finish_reason(self.finish_reason, calls),
            model=self.model or model,
            raw=raw,
        )


def error_text(error: Any) -> str:
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error[:500]
    return json.dumps(error)[:500]


def error_status(error: Any) -> int | None:
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
