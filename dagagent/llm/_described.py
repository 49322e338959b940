"""A model as workers build it: a spec without a secret (a solve's, or a run's agent tasks').

The driver sends ``{"spec": "openai:gpt-4o-mini", "base_url": ..., "settings": {...}}``
(:func:`model_of`); each worker builds the client from it (``from_spec``), with the API key
of its own environment (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY``), so
no key is in the workflow's input or history.
"""

from __future__ import annotations

from typing import Any

import httpx

from ..errors import ConfigError
from ._retry import HTTPRetryPolicy
from .anthropic import AnthropicChat
from .gemini import GeminiChat
from .metered import MeteredLLM
from .openai import OpenAIChat
from .settings import ModelSettings

__all__ = ["model_of", "settings_of"]

_PROVIDERS = {OpenAIChat: "openai", AnthropicChat: "anthropic", GeminiChat: "gemini"}
# The request and connection settings that travel (the retry policy's numbers too).
_FIELDS = (
    "max_tokens",
    "temperature",
    "max_response_bytes",
    "max_stream_s",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning_tokens",
)
_RETRY = ("max_retries", "base_delay_s", "max_delay_s", "max_retry_wait_s", "retry_timeouts")


def model_of(
    llm: object, settings: ModelSettings | None, *, what: str = "a solve"
) -> dict[str, Any]:
    """The spec of ``llm`` (an OpenAI, Anthropic or Gemini client) for the workers, with
    ``settings`` (else the client's own); a :class:`ConfigError` for any other model
    (``what`` runs on the workers: ``"a solve"``, ``"a run with agent tasks"``)."""
    while isinstance(llm, MeteredLLM):
        llm = llm.llm
    provider = next((name for cls, name in _PROVIDERS.items() if type(llm) is cls), None)
    if provider is None:
        raise ConfigError(
            f"{what} on the temporal executor needs a model its workers can build from a "
            f"spec (OpenAIChat, AnthropicChat or GeminiChat, as --model makes), not "
            f"{type(llm).__name__}: the workers make the model calls"
        )
    own = getattr(llm, "settings", None)
    chosen = settings if settings is not None else own
    return {
        "spec": f"{provider}:{llm.model}",  # type: ignore[attr-defined]
        "base_url": llm.base_url,  # type: ignore[attr-defined]  # credentials stripped
        "settings": _settings_json(chosen) if isinstance(chosen, ModelSettings) else {},
    }


def _settings_json(settings: ModelSettings) -> dict[str, Any]:
    doc: dict[str, Any] = {f: getattr(settings, f) for f in _FIELDS}
    timeout = settings.timeout
    doc["timeout"] = timeout if not isinstance(timeout, httpx.Timeout) else timeout.read
    doc["extra_body"] = dict(settings.extra_body)
    doc["retry"] = {f: getattr(settings.retry, f) for f in _RETRY}
    return doc


def settings_of(model: dict[str, Any]) -> ModelSettings | None:
    """The :class:`ModelSettings` a spec from :func:`model_of` carries (``None``: none)."""
    doc = dict(model.get("settings") or {})
    if not doc:
        return None
    retry = HTTPRetryPolicy(**doc.pop("retry", {}))
    if doc.get("timeout") is None:
        doc.pop("timeout", None)
    return ModelSettings(retry=retry, **doc)
