"""How to call a model, in one object: :class:`ModelSettings`.

The model clients (:class:`~dagagent.llm.OpenAIChat`, :class:`~dagagent.llm.AnthropicChat`)
take ``settings=ModelSettings(...)``; so do the planners and the joiner, which send its
``max_tokens`` and ``temperature`` with each of their calls (the connection settings,
``timeout``, ``retry`` and ``max_response_bytes``, belong to the client that makes the
call). The keyword arguments the clients have always taken (``timeout=``,
``max_retries=``, ``temperature=``, ...) still work: they are :class:`ModelOptions`, read
into the settings once, and win over ``settings`` where both are given::

    settings = ModelSettings(temperature=0.0, timeout=120, retry=HTTPRetryPolicy(max_retries=5))
    llm = OpenAIChat("gpt-4o-mini", settings=settings)
    planner = LLMPlanner(llm, registry, settings=ModelSettings(max_tokens=2000))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

import httpx

from dagagent.errors import ConfigError
from dagagent.llm._retry import HTTPRetryPolicy

__all__ = ["DEFAULT_MAX_RESPONSE_BYTES", "ModelOptions", "ModelSettings"]

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

    def with_options(self, **options: Any) -> ModelSettings:
        """These settings with the :class:`ModelOptions` given (``None`` for ``max_tokens``,
        ``temperature`` or ``extra_body`` means "not given": it changes nothing)."""
        unknown = set(options) - set(ModelOptions.__annotations__)
        if unknown:
            raise ConfigError(f"unknown model option(s): {', '.join(sorted(unknown))}")
        retry = {
            name: options.pop(option)
            for option, name in _RETRY_OPTIONS.items()
            if option in options
        }
        changes = {
            k: v for k, v in options.items() if v is not None or k in ("timeout", "max_stream_s")
        }
        if retry:
            changes["retry"] = dataclasses.replace(self.retry, **retry)
        return dataclasses.replace(self, **changes) if changes else self

    @classmethod
    def of(cls, settings: ModelSettings | None, options: Mapping[str, Any]) -> ModelSettings:
        """``settings`` (or the defaults) with the keyword ``options`` applied."""
        return (settings or cls()).with_options(**options)


class ModelOptions(TypedDict, total=False):
    """The keyword arguments a client takes besides ``settings`` (see :class:`ModelSettings`;
    the three ``retry`` ones build its :class:`~dagagent.llm.HTTPRetryPolicy`)."""

    max_tokens: int | None
    temperature: float | None
    timeout: float | httpx.Timeout
    max_retries: int
    retry_base_delay_s: float
    max_retry_wait_s: float
    max_response_bytes: int
    max_stream_s: float | None
    extra_body: Mapping[str, Any] | None


_RETRY_OPTIONS = {
    "max_retries": "max_retries",
    "retry_base_delay_s": "base_delay_s",
    "max_retry_wait_s": "max_retry_wait_s",
}
