"""Talking to language models.

One protocol, :class:`LLM` (``complete`` and ``stream``), implemented by
:class:`OpenAIChat` (chat completions: OpenAI, vLLM, Ollama, llama.cpp, LM Studio),
:class:`AnthropicChat` (Messages API), :class:`GeminiChat` (the Gemini API) and
:class:`ScriptedLLM` (tests and examples);
:func:`fallback` (a :class:`FallbackLLM`) sends a call on to the next model when one fails.
Build a client with :func:`from_spec` (``"openai:gpt-4o-mini"``) or :func:`from_env`.
Failures raise the ``LLM*Error`` classes of :mod:`dagagent.errors`.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagagent.llm._http import HTTPChatClient
    from dagagent.llm._retry import HTTPRetryPolicy
    from dagagent.llm.anthropic import AnthropicChat
    from dagagent.llm.gemini import GeminiChat
    from dagagent.llm.metered import MeteredLLM
    from dagagent.llm.observe import (
        CallObserver,
        CallOutcome,
        LiveCall,
        ask_streamed,
        estimate_tokens,
        last_call,
        reject_last_call,
    )
    from dagagent.llm.openai import OpenAIChat
    from dagagent.llm.protocol import LLM
    from dagagent.llm.router import Fallback, FallbackLLM, fallback
    from dagagent.llm.scripted import ScriptedLLM, ScriptError, ScriptItem, WireItem
    from dagagent.llm.settings import ModelSettings
    from dagagent.llm.spec import from_env, from_spec
    from dagagent.llm.types import (
        AssistantMessage,
        LLMRequest,
        LLMResponse,
        Message,
        MessagesInput,
        ResponseFormat,
        StreamEnd,
        StreamEvent,
        SystemMessage,
        TextDelta,
        ToolCall,
        ToolCallDelta,
        ToolChoice,
        ToolResultMessage,
        ToolSpec,
        UserMessage,
        closing_stream,
        collect_stream,
        normalize_messages,
        parse_tool_arguments,
    )
    from dagagent.llm.usage import Usage, UsageTracker

__all__ = [
    "LLM",
    "AnthropicChat",
    "AssistantMessage",
    "CallObserver",
    "CallOutcome",
    "Fallback",
    "FallbackLLM",
    "GeminiChat",
    "HTTPChatClient",
    "HTTPRetryPolicy",
    "LLMRequest",
    "LLMResponse",
    "LiveCall",
    "Message",
    "MessagesInput",
    "MeteredLLM",
    "ModelSettings",
    "OpenAIChat",
    "ResponseFormat",
    "ScriptError",
    "ScriptItem",
    "ScriptedLLM",
    "StreamEnd",
    "StreamEvent",
    "SystemMessage",
    "TextDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolChoice",
    "ToolResultMessage",
    "ToolSpec",
    "Usage",
    "UsageTracker",
    "UserMessage",
    "WireItem",
    "ask_streamed",
    "closing_stream",
    "collect_stream",
    "estimate_tokens",
    "fallback",
    "from_env",
    "from_spec",
    "last_call",
    "normalize_messages",
    "parse_tool_arguments",
    "reject_last_call",
]

# Each public name with its module, imported on first use (PEP 562): the model clients need
# httpx, which the rest of dagagent (and most commands) can do without.
_LAZY: dict[str, str] = {
    "HTTPChatClient": "_http",
    "HTTPRetryPolicy": "_retry",
    "AnthropicChat": "anthropic",
    "GeminiChat": "gemini",
    "Fallback": "router",
    "FallbackLLM": "router",
    "fallback": "router",
    "MeteredLLM": "metered",
    "CallObserver": "observe",
    "CallOutcome": "observe",
    "LiveCall": "observe",
    "ask_streamed": "observe",
    "estimate_tokens": "observe",
    "last_call": "observe",
    "reject_last_call": "observe",
    "OpenAIChat": "openai",
    "LLM": "protocol",
    "ScriptedLLM": "scripted",
    "ScriptError": "scripted",
    "ScriptItem": "scripted",
    "WireItem": "scripted",
    "ModelSettings": "settings",
    "from_env": "spec",
    "from_spec": "spec",
    "AssistantMessage": "types",
    "LLMRequest": "types",
    "LLMResponse": "types",
    "Message": "types",
    "MessagesInput": "types",
    "ResponseFormat": "types",
    "StreamEnd": "types",
    "StreamEvent": "types",
    "SystemMessage": "types",
    "TextDelta": "types",
    "ToolCall": "types",
    "ToolCallDelta": "types",
    "ToolChoice": "types",
    "ToolResultMessage": "types",
    "ToolSpec": "types",
    "UserMessage": "types",
    "closing_stream": "types",
    "collect_stream": "types",
    "normalize_messages": "types",
    "parse_tool_arguments": "types",
    "Usage": "usage",
    "UsageTracker": "usage",
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
