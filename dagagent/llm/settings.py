"""How to call a model, in one object: :class:`ModelSettings`.

The model clients (:class:`~dagagent.llm.OpenAIChat`, :class:`~dagagent.llm.AnthropicChat`)
take ``settings=ModelSettings(...)``; so do the planners, the joiner, the ReAct agent and
:func:`dagagent.solve` (``model_settings=``), which send its request options (``max_tokens``,
``temperature``, ``tool_choice``, ``parallel_tool_calls``) with each of their calls (the
connection settings, ``timeout``, ``retry``, ``max_response_bytes`` and ``max_stream_s``,
belong to the client that makes the call). It is the one way to configure them::

    settings = ModelSettings(temperature=0.0, timeout=120, retry=HTTPRetryPolicy(max_retries=5))
    llm = OpenAIChat("gpt-4o-mini", settings=settings)
    planner = LLMPlanner(llm, registry, settings=ModelSettings(max_tokens=2000))

**Output limits.** Every call a planner, the joiner or the agent makes is bounded: with the
``max_tokens`` of the settings given to it, else with a limit of its own derived from what it
writes (see :mod:`dagagent.limits`). A client's ``max_tokens`` applies to the calls that
give none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from dagagent.errors import ConfigError
from dagagent.limits import DEFAULT_STREAM_S
from dagagent.llm._retry import HTTPRetryPolicy

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_REASONING_TOKENS",
    "DEFAULT_STREAM_S",
    "ModelSettings",
]

DEFAULT_MAX_RESPONSE_BYTES = 32 * 1024 * 1024

#: The tokens a reasoning model may think for on top of its answer's ``max_tokens``.
DEFAULT_REASONING_TOKENS = 16_000


@dataclass(frozen=True)
class ModelSettings:
    """What each call asks for and how a client waits and retries.

    Asked for with each call (``None`` leaves it to the call, the client or the provider):

    - ``max_tokens``: the most tokens of the answer.
    - ``temperature``.
    - ``tool_choice``: when tools are offered, ``"auto"``, ``"none"``, ``"required"`` or a
      tool's name (:data:`~dagagent.llm.types.ToolChoice`); ``parallel_tool_calls``:
      ``False`` asks for at most one tool call per answer.
    - ``reasoning_tokens``: how many tokens a reasoning model may think for on top of
      ``max_tokens`` (OpenAI's ``max_completion_tokens`` counts both; default 16,000).
    - ``extra_body``: merged into every request body (e.g. ``{"seed": 1}``).

    How a client waits and retries: ``timeout`` in seconds or an ``httpx.Timeout``,
    ``retry``, ``max_response_bytes`` (a longer answer is an error), ``max_stream_s`` (a
    streamed answer lasting longer is an error; ``None``: no limit)."""

    max_tokens: int | None = None
    temperature: float | None = None
    timeout: float | httpx.Timeout = 60.0
    retry: HTTPRetryPolicy = field(default_factory=HTTPRetryPolicy)
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    max_stream_s: float | None = DEFAULT_STREAM_S
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    tool_choice: str | None = None
    parallel_tool_calls: bool | None = None
    reasoning_tokens: int = DEFAULT_REASONING_TOKENS

    def __post_init__(self) -> None:
        if self.max_tokens is not None and (
            isinstance(self.max_tokens, bool)
            or not isinstance(self.max_tokens, int)
            or self.max_tokens < 1
        ):
            raise ConfigError(
                f"max_tokens must be a positive number of tokens, not {self.max_tokens!r}"
            )
        if isinstance(self.reasoning_tokens, bool) or self.reasoning_tokens < 0:
            raise ConfigError(f"reasoning_tokens must be 0 or more, not {self.reasoning_tokens!r}")
        if self.tool_choice is not None and not isinstance(self.tool_choice, str):
            raise ConfigError(
                "tool_choice must be 'auto', 'none', 'required' or a tool's name, not "
                f"{type(self.tool_choice).__name__}"
            )

    @property
    def http_timeout(self) -> httpx.Timeout:
        """``timeout`` as an ``httpx.Timeout``."""
        t = self.timeout
        return t if isinstance(t, httpx.Timeout) else httpx.Timeout(t)

    def but(self, **changes: Any) -> ModelSettings:
        """A copy of these settings with ``changes``."""
        return dataclasses.replace(self, **changes)
