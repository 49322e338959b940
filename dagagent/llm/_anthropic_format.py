"""The Anthropic Messages API wire format: typed messages as request JSON, the structured-output
emulation with a forced tool, and response bodies and stream events read back. No I/O:
:class:`~dagagent.llm.AnthropicChat` sends and receives.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from dagagent.errors import (
    LLMAuthError,
    LLMBadRequestError,
    LLMError,
    LLMRateLimitError,
    LLMServerError,
)
from dagagent.llm._json import loads_json
from dagagent.llm.types import (
    AssistantMessage,
    LLMResponse,
    Message,
    ResponseFormat,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    wire_name,
)
from dagagent.llm.usage import Usage

FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


ERROR_TYPES: dict[str, tuple[type[LLMError], bool]] = {
    "overloaded_error": (LLMServerError, True),
    "api_error": (LLMServerError, True),
    "rate_limit_error": (LLMRateLimitError, True),
    "authentication_error": (LLMAuthError, False),
    "permission_error": (LLMAuthError, False),
    "invalid_request_error": (LLMBadRequestError, False),
    "not_found_error": (LLMBadRequestError, False),
    "request_too_large": (LLMBadRequestError, False),
}


def anthropic_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Typed messages as Messages API ``messages`` (system messages are left out)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        blocks: list[dict[str, Any]] = []
        if isinstance(m, UserMessage):
            role = "user"
            if m.content:
                blocks.append({"type": "text", "text": m.content})
        elif isinstance(m, AssistantMessage):
            role = "assistant"
            if m.content:
                blocks.append({"type": "text", "text": m.content})
            for call in m.tool_calls:
                blocks.append(
                    {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
                )
        elif isinstance(m, ToolResultMessage):
            role = "user"
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": m.tool_call_id,
                "content": m.content,
            }
            if m.is_error:
                block["is_error"] = True
            blocks.append(block)
        else:  # system messages travel apart
            continue
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    for message in out:
        if message["role"] == "user":
            # Anthropic wants tool results before anything else in a user turn.
            message["content"].sort(key=lambda b: b["type"] != "tool_result")
    if out and out[-1]["role"] == "assistant":
        # A trailing assistant turn is a prefill, which may not end in whitespace.
        last = out[-1]["content"][-1]
        if last["type"] == "text":
            last["text"] = last["text"].rstrip()
    return out


def tool_choice_json(choice: str | None) -> dict[str, Any] | None:
    """A :data:`~dagagent.llm.types.ToolChoice` as the Messages API's ``tool_choice``."""
    if choice is None:
        return None
    if choice == "required":
        return {"type": "any"}
    if choice in ("auto", "none"):
        return {"type": choice}
    return {"type": "tool", "name": choice}


@dataclass(frozen=True)
class FormatTool:
    """The forced tool that emulates ``response_format``."""

    name: str
    wrapped: bool

    @classmethod
    def for_format(cls, fmt: ResponseFormat) -> tuple[FormatTool, dict[str, Any]]:
        schema = dict(fmt.schema)
        is_object = schema.get("type") == "object" or (
            "type" not in schema and "properties" in schema
        )
        name = wire_name(fmt.name)
        if is_object:
            input_schema = schema
        else:
            defs = schema.pop("$defs", None)
            input_schema = {
                "type": "object",
                "properties": {"value": schema},
                "required": ["value"],
            }
            if defs is not None:
                input_schema["$defs"] = defs
        spec = {
            "name": name,
            "description": (
                "Give your final answer by calling this tool exactly once; its input is "
                "the answer, as JSON matching the schema."
            ),
            "input_schema": input_schema,
        }
        return cls(name=name, wrapped=not is_object), spec

    def content_from_input(self, value: Any) -> str:
        if self.wrapped and isinstance(value, dict):
            value = value.get("value")
        return json.dumps(value, ensure_ascii=False)

    def content_from_text(self, text: str) -> str:
        if not self.wrapped:
            return text
        try:
            return self.content_from_input(loads_json(text))
        except ValueError:
            return text


class Block(BaseModel):
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: Any = None


class WireUsage(BaseModel):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None

    def input_total(self) -> int:
        return (
            (self.input_tokens or 0)
            + (self.cache_creation_input_tokens or 0)
            + (self.cache_read_input_tokens or 0)
        )


class WireMessage(BaseModel):
    model: str | None = None
    content: list[Block]
    stop_reason: str | None = None
    usage: WireUsage | None = None


class StartMessage(BaseModel):
    model: str | None = None
    usage: WireUsage | None = None


class Event(BaseModel):
    type: str
    index: int | None = None
    message: StartMessage | None = None
    content_block: Block | None = None
    delta: dict[str, Any] | None = None
    usage: WireUsage | None = None
    error: Any = None


def finish_reason(stop_reason: str | None, structured: bool, other_calls: bool) -> str | None:
    if stop_reason is None:
        return None
    if structured and stop_reason == "tool_use" and not other_calls:
        return "stop"
    return FINISH_REASONS.get(stop_reason, stop_reason)


class PartialBlock:
    def __init__(self, block: Block, tool_index: int | None) -> None:
        self.type = block.type
        self.id = block.id
        self.name = block.name
        self.tool_index = tool_index
        self.parts: list[str] = [block.text] if block.text else []
        self.initial_input = block.input


class StreamState:
    def __init__(self, fmt: FormatTool | None) -> None:
        self.fmt = fmt
        self.blocks: dict[int, PartialBlock] = {}
        self.order: list[int] = []
        self.tool_count = 0
        self.model: str | None = None
        self.input_tokens = 0
        self.output_tokens = 0
        self.stop_reason: str | None = None

    def is_format(self, block: PartialBlock) -> bool:
        return self.fmt is not None and block.type == "tool_use" and block.name == self.fmt.name

    def finish(self, model: str, raw: Any) -> LLMResponse:
        texts: list[str] = []
        calls: list[ToolCall] = []
        structured: str | None = None
        for i in self.order:
            block = self.blocks[i]
            if block.type == "text":
                texts.append("".join(block.parts))
            elif block.type == "tool_use":
                text = "".join(block.parts)
                if self.is_format(block):
                    assert self.fmt is not None
                    if text:
                        structured = self.fmt.content_from_text(text)
                    else:
                        structured = self.fmt.content_from_input(block.initial_input or {})
                else:
                    source: str | Mapping[str, Any] | None = text
                    if not text and isinstance(block.initial_input, dict):
                        source = block.initial_input
                    calls.append(ToolCall.from_raw(block.id or "", block.name or "", source))
        return LLMResponse(
            content=structured if structured is not None else "".join(texts),
            tool_calls=calls,
            usage=Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens),
            finish_reason=finish_reason(self.stop_reason, structured is not None, bool(calls)),
            model=self.model or model,
            raw=raw,
        )
