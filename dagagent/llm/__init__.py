"""Talking to language models.

One protocol, :class:`LLM` (``complete`` and ``stream``), implemented by
:class:`OpenAIChat` (chat completions: OpenAI, vLLM, Ollama, llama.cpp, LM Studio),
:class:`AnthropicChat` (Messages API) and :class:`ScriptedLLM` (tests and examples).
Build a client with :func:`from_spec` (``"openai:gpt-4o-mini"``) or :func:`from_env`.
Failures raise the ``LLM*Error`` classes of :mod:`dagagent.errors`.
"""

import warnings
from typing import Any

from dagagent.llm._http import HTTPChatClient
from dagagent.llm._retry import HTTPRetryPolicy
from dagagent.llm.anthropic import AnthropicChat
from dagagent.llm.metered import MeteredLLM
from dagagent.llm.openai import OpenAIChat
from dagagent.llm.protocol import LLM
from dagagent.llm.scripted import ScriptedLLM, ScriptError, ScriptItem, WireItem
from dagagent.llm.settings import ModelOptions, ModelSettings
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
    ToolResultMessage,
    ToolSpec,
    UserMessage,
    collect_stream,
    normalize_messages,
    parse_tool_arguments,
)
from dagagent.llm.usage import Usage, UsageTracker

__all__ = [
    "LLM",
    "AnthropicChat",
    "AssistantMessage",
    "HTTPChatClient",
    "HTTPRetryPolicy",
    "LLMRequest",
    "LLMResponse",
    "Message",
    "MessagesInput",
    "MeteredLLM",
    "ModelOptions",
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
    "ToolResultMessage",
    "ToolSpec",
    "Usage",
    "UsageTracker",
    "UserMessage",
    "WireItem",
    "collect_stream",
    "from_env",
    "from_spec",
    "normalize_messages",
    "parse_tool_arguments",
]

_RENAMED = {"RetryPolicy": "HTTPRetryPolicy"}


def __getattr__(name: str) -> Any:
    """Old names, kept for one release with a DeprecationWarning (see CHANGELOG.md)."""
    new = _RENAMED.get(name)
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"dagagent.llm.{name} is deprecated; use dagagent.llm.{new}",
        DeprecationWarning,
        stacklevel=2,
    )
    return globals()[new]
