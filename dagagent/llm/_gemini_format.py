"""The Gemini API wire format (``generateContent`` / ``streamGenerateContent``): typed
messages as ``contents`` of ``parts``, JSON Schemas in the schema dialect Gemini takes, and
response bodies (and stream chunks, each a whole ``GenerateContentResponse``) read back. No
I/O: :class:`~dagagent.llm.GeminiChat` sends and receives.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dagagent.llm.types import (
    AssistantMessage,
    LLMResponse,
    Message,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    ToolResultMessage,
    UserMessage,
)
from dagagent.llm.usage import Usage

#: Gemini's finish reasons, as the neutral ones (others pass through in lower case).
FINISH_REASONS = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
}

#: The prefix of the ids dagagent gives function calls that came without one (Gemini's
#: ``functionCall.id`` is optional); such ids are never sent back.
LOCAL_ID_PREFIX = "gemini-call-"

# The keywords of Gemini's schema dialect (an OpenAPI 3.0 subset); the rest of a JSON Schema
# (additionalProperties, $ref, const, oneOf...) is rewritten or left out.
_SCHEMA_KEYS = frozenset(
    {
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "items",
        "minItems",
        "maxItems",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "minimum",
        "maximum",
        "anyOf",
        "propertyOrdering",
    }
)


def new_call_id() -> str:
    return f"{LOCAL_ID_PREFIX}{uuid.uuid4().hex[:16]}"


# ---------------------------------------------------------------------------- requests


def gemini_contents(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Typed messages as ``contents`` (system messages are left out: they go as
    ``systemInstruction``). Consecutive turns of one role are merged into one content, so
    the results of one turn's calls are one ``user`` content of ``functionResponse`` parts."""
    names: dict[str, str] = {}  # a call's id -> its function's name (a response names it)
    out: list[dict[str, Any]] = []
    for m in messages:
        role: str
        parts: list[dict[str, Any]] = []
        if isinstance(m, UserMessage):
            role = "user"
            if m.content:
                parts.append({"text": m.content})
        elif isinstance(m, AssistantMessage):
            role = "model"
            if m.content:
                parts.append({"text": m.content})
            for call in m.tool_calls:
                names[call.id] = call.name
                fn: dict[str, Any] = {"name": call.name, "args": _call_args(call)}
                if not call.id.startswith(LOCAL_ID_PREFIX):
                    fn["id"] = call.id
                part: dict[str, Any] = {"functionCall": fn}
                if call.signature:
                    part["thoughtSignature"] = call.signature
                parts.append(part)
        elif isinstance(m, ToolResultMessage):
            role = "user"
            key = "error" if m.is_error else "output"
            response: dict[str, Any] = {
                "name": names.get(m.tool_call_id, m.tool_call_id),
                "response": {key: m.content},
            }
            if not m.tool_call_id.startswith(LOCAL_ID_PREFIX):
                response["id"] = m.tool_call_id
            parts.append({"functionResponse": response})
        else:  # system messages: the system instruction
            continue
        if not parts:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["parts"].extend(parts)
        else:
            out.append({"role": role, "parts": parts})
    return out


def _call_args(call: ToolCall) -> dict[str, Any]:
    """A call's arguments as the object Gemini wants back (arguments that did not parse go
    back as the text the model wrote, so it sees it)."""
    if call.arguments_error is not None and call.raw_arguments is not None:
        return {"_unparsed_arguments": call.raw_arguments}
    return dict(call.arguments)


def tool_config(choice: str | None) -> dict[str, Any] | None:
    """``toolConfig`` for a neutral tool choice (``None``: Gemini's default, AUTO)."""
    if choice is None:
        return None
    modes = {"auto": "AUTO", "none": "NONE", "required": "ANY"}
    if choice in modes:
        return {"functionCallingConfig": {"mode": modes[choice]}}
    return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [choice]}}


def gemini_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON Schema in Gemini's schema dialect: ``$ref`` inlined from ``$defs``,
    ``const`` as a one-value ``enum``, ``oneOf`` as ``anyOf``, ``"type": [T, "null"]`` as
    ``nullable``, and keywords the dialect lacks left out (``additionalProperties``,
    ``exclusiveMinimum``, ``default``...). What is left out loosens the schema; the
    answer is still checked against the whole schema by whoever reads it."""
    defs = dict(schema.get("$defs") or schema.get("definitions") or {})
    return _convert(schema, defs, 0)


def _convert(node: Any, defs: Mapping[str, Any], depth: int) -> dict[str, Any]:
    if not isinstance(node, Mapping) or depth > 32:
        return {}
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref.rsplit("/", 1)[-1])
        merged = {**(target if isinstance(target, Mapping) else {}), **node}
        merged.pop("$ref", None)
        return _convert(merged, defs, depth + 1)
    out: dict[str, Any] = {}
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) < len(kind):
            out["nullable"] = True
        kind = kinds[0] if len(kinds) == 1 else None
        if len(kinds) > 1:
            out["anyOf"] = [{"type": k} for k in kinds]
    if isinstance(kind, str):
        out["type"] = kind
    if "const" in node:
        node = {**node, "enum": [node["const"]]}
    for key, value in node.items():
        if key not in _SCHEMA_KEYS or key in out or key == "type":
            continue
        if key == "properties" and isinstance(value, Mapping):
            out[key] = {name: _convert(sub, defs, depth + 1) for name, sub in value.items()}
        elif key == "items":
            out[key] = _convert(value, defs, depth + 1)
        elif key == "anyOf" and isinstance(value, list):
            out[key] = [_convert(sub, defs, depth + 1) for sub in value]
        elif key == "enum":
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                out[key] = list(value)  # Gemini's enums are of strings only
        else:
            out[key] = value
    one_of = node.get("oneOf")
    if isinstance(one_of, list) and "anyOf" not in out:
        out["anyOf"] = [_convert(sub, defs, depth + 1) for sub in one_of]
    if out.get("type") == "array" and "items" not in out:
        out["items"] = {}
    if out.get("type") == "object" and not out.get("properties"):
        out.pop("properties", None)
        out.pop("required", None)
    return out


def function_declaration(
    name: str, description: str, parameters: Mapping[str, Any]
) -> dict[str, Any]:
    """A ``functionDeclarations`` entry (a function without parameters has none: Gemini
    refuses an object schema without properties)."""
    decl: dict[str, Any] = {"name": name, "description": description}
    params = gemini_schema(parameters)
    if params.get("properties"):
        decl["parameters"] = params
    return decl


# ---------------------------------------------------------------------------- responses


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class WireFunctionCall(_Model):
    name: str | None = None
    args: Any = None
    id: str | None = None


class WirePart(_Model):
    text: str | None = None
    thought: bool | None = None
    thought_signature: str | None = Field(default=None, alias="thoughtSignature")
    function_call: WireFunctionCall | None = Field(default=None, alias="functionCall")


class WireContent(_Model):
    role: str | None = None
    parts: list[WirePart] = Field(default_factory=list)


class WireCandidate(_Model):
    content: WireContent | None = None
    finish_reason: str | None = Field(default=None, alias="finishReason")
    index: int | None = None


class WireUsage(_Model):
    prompt_tokens: int | None = Field(default=None, alias="promptTokenCount")
    candidates_tokens: int | None = Field(default=None, alias="candidatesTokenCount")
    thoughts_tokens: int | None = Field(default=None, alias="thoughtsTokenCount")
    total_tokens: int | None = Field(default=None, alias="totalTokenCount")

    def to_usage(self) -> Usage:
        # Thinking is written by the model and billed as output.
        output = (self.candidates_tokens or 0) + (self.thoughts_tokens or 0)
        return Usage(input_tokens=self.prompt_tokens or 0, output_tokens=output)


class WirePromptFeedback(_Model):
    block_reason: str | None = Field(default=None, alias="blockReason")


class WireResponse(_Model):
    """One ``GenerateContentResponse``: a whole answer, or one chunk of a stream."""

    candidates: list[WireCandidate] = Field(default_factory=list)
    usage_metadata: WireUsage | None = Field(default=None, alias="usageMetadata")
    model_version: str | None = Field(default=None, alias="modelVersion")
    prompt_feedback: WirePromptFeedback | None = Field(default=None, alias="promptFeedback")


def finish_reason(reason: str | None, has_calls: bool) -> str | None:
    if reason is None:
        return None
    if reason == "STOP" and has_calls:
        return "tool_calls"
    return FINISH_REASONS.get(reason, reason.lower())


class StreamState:
    """Assembles ``GenerateContentResponse`` chunks (or one whole answer) into one
    response, saying what each chunk adds as stream events."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.calls: list[ToolCall] = []
        self.finish: str | None = None
        self.blocked: str | None = None
        self.usage: WireUsage | None = None
        self.model: str | None = None

    @property
    def finished(self) -> bool:
        return self.finish is not None or self.blocked is not None

    def feed(self, chunk: WireResponse) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        self.model = chunk.model_version or self.model
        if chunk.usage_metadata is not None:  # each chunk's counts are the totals so far
            self.usage = chunk.usage_metadata
        if chunk.prompt_feedback is not None and chunk.prompt_feedback.block_reason:
            self.blocked = chunk.prompt_feedback.block_reason
        if not chunk.candidates:
            return events
        candidate = chunk.candidates[0]
        for part in candidate.content.parts if candidate.content is not None else []:
            if part.function_call is not None:
                call = self._call(part)
                events.append(
                    ToolCallDelta(len(self.calls), call.id, call.name, call.arguments_json())
                )
                self.calls.append(call)
            elif part.text and not part.thought:  # a thought summary is not the answer
                self.texts.append(part.text)
                events.append(TextDelta(part.text))
        if candidate.finish_reason:
            self.finish = candidate.finish_reason
        return events

    @staticmethod
    def _call(part: WirePart) -> ToolCall:
        fn = part.function_call
        assert fn is not None
        args = fn.args
        if args is not None and not isinstance(args, dict | str):
            args = json.dumps(args)
        call = ToolCall.from_raw(fn.id or new_call_id(), fn.name or "", args)
        if part.thought_signature:
            call = call.model_copy(update={"signature": part.thought_signature})
        return call

    def result(self, model: str, raw: Any) -> LLMResponse:
        if self.blocked is not None and self.finish is None:
            reason: str | None = "content_filter"
        else:
            reason = finish_reason(self.finish, bool(self.calls))
        return LLMResponse(
            content="".join(self.texts),
            tool_calls=list(self.calls),
            usage=self.usage.to_usage() if self.usage is not None else Usage(),
            finish_reason=reason,
            model=self.model or model,
            raw=raw,
        )


def error_status(error: Any) -> int | None:
    """The HTTP status an ``{"error": {...}}`` object carries (Gemini's ``code``)."""
    if isinstance(error, dict):
        code = error.get("code")
        if isinstance(code, int) and not isinstance(code, bool) and 100 <= code < 600:
            return code
    return None


def error_text(error: Any) -> str:
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        status = error.get("status")
        message = str(error["message"])
        return f"{message} [{status}]" if isinstance(status, str) and status else message
    return json.dumps(error)[:500]
