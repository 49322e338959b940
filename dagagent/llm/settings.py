"""How to call a model, in one object: :class:`ModelSettings`.

The model clients (:class:`~dagagent.llm.OpenAIChat`, :class:`~dagagent.llm.AnthropicChat`)
take ``settings=ModelSettings(...)``; so do the planners and the joiner, which send its
``max_tokens`` and ``temperature`` with each of their calls (the connection settings,
``timeout``, ``retry`` and ``max_response_bytes``, belong to the client that makes the
call). It is the one way to configure them::

    settings = ModelSettings(temperature=0.0, timeout=120, retry=HTTPRetryPolicy(max_retries=5))
    llm = OpenAIChat("gpt-4o-mini", settings=settings)
    planner = LLMPlanner(llm, registry, settings=ModelSettings(max_tokens=2000))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from dagagent.llm._retry import HTTPRetryPolicy

__all__ = ["DEFAULT_MAX_RESPONSE_BYTES", "ModelSettings"]

DEFAULT_MAX_RESPONSE_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class ModelSettings:
    """What each call asks for (``max_tokens``, ``temperature``, ``extra_body`` merged into
    every request body) and how a client waits and retries (``timeout`` in seconds or an
    ``httpx.Timeout``, ``retry``, ``max_response_bytes``: a longer answer is an error,
    ``max_stream_s``: a streamed answer lasting longer is an error; ``None``: no limit).
    ``None`` leaves a value to the call, the client or the provider."""

    max_tokens: int | None = None
    temperature: float | None = None
    timeout: float | httpx.Timeout = 60.0
    retry: HTTPRetryPolicy = field(default_factory=HTTPRetryPolicy)
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    max_stream_s: float | None = 900.0
    extra_body: Mapping[str, Any] = field(default_factory=dict)

    @property
    def http_timeout(self) -> httpx.Timeout:
        """``timeout`` as an ``httpx.Timeout``."""
        t = self.timeout
        return t if isinstance(t, httpx.Timeout) else httpx.Timeout(t)

    def but(self, **changes: Any) -> ModelSettings:
        """A copy of these settings with ``changes``."""
        return dataclasses.replace(self, **changes)
