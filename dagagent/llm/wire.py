"""Build provider wire-format bodies and event streams, for tests and examples.

``openai_text("hi")`` is a ``chat.completion`` JSON body, ``anthropic_tool_use([...])``
a Messages API body, ``gemini_function_calls([...])`` a ``generateContent`` body, and so
on. ``openai_events(body)`` / ``anthropic_events(body)`` / ``gemini_events(body)`` turn a
complete body into the server-sent events a streaming server would send for it, and
``encode_sse`` turns events into bytes. ``ScriptedLLM.openai`` / ``.anthropic`` /
``.gemini`` use these to answer real clients through ``httpx.MockTransport``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias, TypedDict

from dagagent.llm.types import LLMResponse, ToolCall

__all__ = [
    "ToolCallLike",
    "anthropic_error",
    "anthropic_events",
    "anthropic_from_response",
    "anthropic_text",
    "anthropic_tool_use",
    "encode_sse",
    "gemini_error",
    "gemini_events",
    "gemini_from_response",
    "gemini_function_calls",
    "gemini_text",
    "openai_error",
    "openai_events",
    "openai_from_response",
    "openai_text",
    "openai_tool_calls",
]

ToolCallLike: TypeAlias = ToolCall | tuple[str, Mapping[str, Any] | str]
"""A tool call to put in a body: a :class:`ToolCall`, or ``(name, arguments)`` where
arguments are a dict or raw (possibly invalid) JSON text."""

SSEItem: TypeAlias = tuple[str | None, Any]
"""``(event name or None, data)``; data that is not a str is JSON-encoded."""


def _chunks(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _calls(calls: Sequence[ToolCallLike], prefix: str) -> list[tuple[str, str, Any]]:
    """``(id, name, arguments)`` triples; arguments stay a str when given as a str."""
    out: list[tuple[str, str, Any]] = []
    for i, call in enumerate(calls):
        if isinstance(call, ToolCall):
            args: Any = call.raw_arguments if call.arguments_error else call.arguments
            out.append((call.id, call.name, args))
        else:
            name, args = call
            out.append((f"{prefix}{i + 1}", name, args if isinstance(args, str) else dict(args)))
    return out


class _Sizes(TypedDict):
    """What every builder takes from a response besides its text and calls."""

    model: str
    input_tokens: int
    output_tokens: int


def _sizes(response: LLMResponse, model: str) -> _Sizes:
    """The model (the response's, else ``model``) and token counts of ``response``."""
    usage = response.usage
    return {
        "model": response.model or model,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
    }


def encode_sse(events: Iterable[SSEItem]) -> bytes:
    """Server-sent-events bytes for ``events``."""
    parts: list[str] = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        lines = "".join(f"data: {line}\n" for line in text.split("\n"))
        parts.append((f"event: {name}\n" if name else "") + lines + "\n")
    return "".join(parts).encode()


# ---------------------------------------------------------------------------- OpenAI


def openai_text(
    content: str,
    *,
    model: str = "gpt-test",
    finish_reason: str = "stop",
    input_tokens: int = 10,
    output_tokens: int = 5,
) -> dict[str, Any]:
    """A ``chat.completion`` body answering ``content``."""
    return _openai_body(
        {"role": "assistant", "content": content}, model, finish_reason, input_tokens, output_tokens
    )


def openai_tool_calls(
    calls: Sequence[ToolCallLike],
    *,
    content: str | None = None,
    model: str = "gpt-test",
    finish_reason: str = "tool_calls",
    input_tokens: int = 10,
    output_tokens: int = 5,
) -> dict[str, Any]:
    """A ``chat.completion`` body with one or more tool calls (ids ``call_1``, ...)."""
    message = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": id,
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for id, name, args in _calls(calls, "call_")
        ],
    }
    return _openai_body(message, model, finish_reason, input_tokens, output_tokens)


def openai_error(message: str, *, type: str = "invalid_request_error") -> dict[str, Any]:
    """An OpenAI error body."""
    return {"error": {"message": message, "type": type, "param": None, "code": None}}


def _openai_body(
    message: dict[str, Any], model: str, finish_reason: str, input_tokens: int, output_tokens: int
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": input_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        },
    }


def openai_from_response(response: LLMResponse, *, model: str = "gpt-test") -> dict[str, Any]:
    """The ``chat.completion`` body a server would send for ``response``."""
    sizes, reason = _sizes(response, model), response.finish_reason
    if response.tool_calls:
        return openai_tool_calls(
            response.tool_calls,
            content=response.content or None,
            finish_reason=reason or "tool_calls",
            **sizes,
        )
    return openai_text(response.content, finish_reason=reason or "stop", **sizes)


def openai_events(
    body: Mapping[str, Any], *, chunk_size: int = 8, done: bool = True
) -> list[SSEItem]:
    """The ``chat.completion.chunk`` events (then ``[DONE]``) streaming ``body``.

    Content is cut into ``chunk_size`` pieces and each tool call's arguments into two,
    so a client has to assemble them.
    """
    model = body.get("model", "gpt-test")
    choice = body["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> SSEItem:
        return (
            None,
            {
                "id": body.get("id", "chatcmpl-test"),
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            },
        )

    events = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        events += [chunk({"content": piece}) for piece in _chunks(message["content"], chunk_size)]
    for i, call in enumerate(message.get("tool_calls") or []):
        args = call["function"]["arguments"]
        half = len(args) // 2
        first = {
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }
        events.append(chunk({"tool_calls": [{"index": i, **first}]}))
        for piece in (args[:half], args[half:]):
            if piece:
                events.append(
                    chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                )
    events.append(chunk({}, choice.get("finish_reason") or "stop"))
    if body.get("usage"):
        events.append(
            (
                None,
                {
                    "id": body.get("id", "chatcmpl-test"),
                    "object": "chat.completion.chunk",
                    "model": model,
                    "choices": [],
                    "usage": body["usage"],
                },
            )
        )
    if done:
        events.append((None, "[DONE]"))
    return events


# ---------------------------------------------------------------------------- Anthropic


def anthropic_text(
    text: str,
    *,
    model: str = "claude-test",
    stop_reason: str = "end_turn",
    input_tokens: int = 10,
    output_tokens: int = 5,
) -> dict[str, Any]:
    """A Messages API body answering ``text``."""
    return _anthropic_body(
        [{"type": "text", "text": text}], model, stop_reason, input_tokens, output_tokens
    )


def anthropic_tool_use(
    calls: Sequence[ToolCallLike],
    *,
    text: str | None = None,
    model: str = "claude-test",
    stop_reason: str = "tool_use",
    input_tokens: int = 10,
    output_tokens: int = 5,
) -> dict[str, Any]:
    """A Messages API body with ``tool_use`` blocks (ids ``toolu_1``, ...).

    Arguments given as a str are parsed; text that is not JSON stays a str (not
    something Anthropic sends whole, but a stream can carry it: useful to script a
    malformed call).
    """
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for id, name, args in _calls(calls, "toolu_"):
        value: Any = args
        if isinstance(args, str):
            try:
                value = json.loads(args)
            except ValueError:
                value = args  # kept as text: a malformed call, streamed verbatim
        blocks.append({"type": "tool_use", "id": id, "name": name, "input": value})
    return _anthropic_body(blocks, model, stop_reason, input_tokens, output_tokens)


def anthropic_error(message: str, *, type: str = "invalid_request_error") -> dict[str, Any]:
    """An Anthropic error body (also the data of a stream ``error`` event)."""
    return {"type": "error", "error": {"type": type, "message": message}}


def _anthropic_body(
    blocks: list[dict[str, Any]],
    model: str,
    stop_reason: str,
    input_tokens: int,
    output_tokens: int,
) -> dict[str, Any]:
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def anthropic_from_response(response: LLMResponse, *, model: str = "claude-test") -> dict[str, Any]:
    """The Messages API body a server would send for ``response``."""
    reasons = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
    reason = reasons.get(response.finish_reason or "", response.finish_reason or "end_turn")
    sizes = _sizes(response, model)
    if response.tool_calls:
        return anthropic_tool_use(
            response.tool_calls, text=response.content or None, stop_reason=reason, **sizes
        )
    return anthropic_text(response.content, stop_reason=reason, **sizes)


def anthropic_events(body: Mapping[str, Any], *, chunk_size: int = 8) -> list[SSEItem]:
    """The Messages API stream events for ``body``, with ``ping`` s and split deltas."""
    usage = dict(body.get("usage") or {})
    start = {k: v for k, v in body.items() if k not in ("content", "stop_reason", "usage")}
    start.update(
        content=[],
        stop_reason=None,
        usage={"input_tokens": usage.get("input_tokens", 0), "output_tokens": 1},
    )
    events: list[SSEItem] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(body.get("content") or []):
        if block["type"] == "text":
            events.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            for piece in _chunks(block["text"], chunk_size):
                events.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "text_delta", "text": piece},
                        },
                    )
                )
        elif block["type"] == "tool_use":
            events.append(
                (
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {
                            "type": "tool_use",
                            "id": block["id"],
                            "name": block["name"],
                            "input": {},
                        },
                    },
                )
            )
            text = block["input"] if isinstance(block["input"], str) else json.dumps(block["input"])
            half = len(text) // 2
            for piece in ("", text[:half], text[half:]):
                events.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": piece},
                        },
                    )
                )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": body.get("stop_reason"), "stop_sequence": None},
                "usage": {"output_tokens": usage.get("output_tokens", 0)},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


# ---------------------------------------------------------------------------- Gemini


def _gemini_usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "promptTokenCount": input_tokens,
        "candidatesTokenCount": output_tokens,
        "totalTokenCount": input_tokens + output_tokens,
    }


def _gemini_body(
    parts: list[dict[str, Any]],
    model: str,
    finish_reason: str,
    input_tokens: int,
    output_tokens: int,
) -> dict[str, Any]:
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": parts},
                "finishReason": finish_reason,
                "index": 0,
            }
        ],
        "usageMetadata": _gemini_usage(input_tokens, output_tokens),
        "modelVersion": model,
        "responseId": "gemini-test-response",
    }


def gemini_text(
    content: str,
    *,
    model: str = "gemini-test",
    finish_reason: str = "STOP",
    input_tokens: int = 10,
    output_tokens: int = 5,
) -> dict[str, Any]:
    """A ``generateContent`` body answering ``content``."""
    return _gemini_body([{"text": content}], model, finish_reason, input_tokens, output_tokens)


def gemini_function_calls(
    calls: Sequence[ToolCallLike],
    *,
    text: str | None = None,
    model: str = "gemini-test",
    finish_reason: str = "STOP",
    input_tokens: int = 10,
    output_tokens: int = 5,
    ids: bool = False,
    signature: str | None = None,
) -> dict[str, Any]:
    """A ``generateContent`` body whose answer calls functions: ``functionCall`` parts (with
    ``id`` only when ``ids``: Gemini's ids are optional; the first call with a
    ``thoughtSignature`` when ``signature`` is given, as thinking models send it)."""
    parts: list[dict[str, Any]] = [{"text": text}] if text else []
    for i, (call_id, name, args) in enumerate(_calls(calls, "gemini_call_")):
        fn: dict[str, Any] = {"name": name, "args": args}
        if ids:
            fn["id"] = call_id
        part: dict[str, Any] = {"functionCall": fn}
        if signature is not None and i == 0:
            part["thoughtSignature"] = signature
        parts.append(part)
    return _gemini_body(parts, model, finish_reason, input_tokens, output_tokens)


def gemini_error(
    message: str, *, code: int = 400, status: str = "INVALID_ARGUMENT"
) -> dict[str, Any]:
    """A Gemini API error body (``google.rpc.Status`` as JSON)."""
    return {"error": {"code": code, "message": message, "status": status}}


def gemini_from_response(response: LLMResponse, *, model: str = "gemini-test") -> dict[str, Any]:
    """The ``generateContent`` body a server would send for ``response``."""
    reasons = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP"}
    reason = reasons.get(response.finish_reason or "", (response.finish_reason or "STOP").upper())
    sizes = _sizes(response, model)
    if response.tool_calls:
        return gemini_function_calls(
            response.tool_calls, text=response.content or None, finish_reason=reason, **sizes
        )
    return gemini_text(response.content, finish_reason=reason, **sizes)


def gemini_events(body: Mapping[str, Any], *, chunk_size: int = 8) -> list[SSEItem]:
    """The ``streamGenerateContent?alt=sse`` events for ``body``: each a whole
    ``GenerateContentResponse`` carrying the next piece (text cut into ``chunk_size``
    pieces, each function call whole, as Gemini sends them), the usage so far and the model;
    the last one has the ``finishReason``. No end marker: the server closes the stream."""
    candidate = body["candidates"][0]
    usage = dict(body.get("usageMetadata") or {})
    model = body.get("modelVersion", "gemini-test")
    pieces: list[dict[str, Any]] = []
    for part in candidate["content"]["parts"]:
        if "text" in part and "functionCall" not in part:
            pieces += [{**part, "text": t} for t in _chunks(part["text"], chunk_size)]
        else:
            pieces.append(dict(part))
    events: list[SSEItem] = []
    for i, part in enumerate(pieces):
        last = i == len(pieces) - 1
        chunk_candidate: dict[str, Any] = {
            "content": {"role": "model", "parts": [part]},
            "index": 0,
        }
        chunk_usage = {"promptTokenCount": usage.get("promptTokenCount", 0)}
        if last:
            chunk_candidate["finishReason"] = candidate.get("finishReason", "STOP")
            chunk_usage = usage
        events.append(
            (
                None,
                {
                    "candidates": [chunk_candidate],
                    "usageMetadata": chunk_usage,
                    "modelVersion": model,
                    "responseId": body.get("responseId", "gemini-test-response"),
                },
            )
        )
    return events
