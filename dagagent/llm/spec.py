"""Build a model client from a short spec string or from the environment.

Accepted specs: ``openai:MODEL`` (OpenAI, or any OpenAI-compatible server when
``base_url`` is given: vLLM, Ollama, llama.cpp, LM Studio) and ``anthropic:MODEL``.
Everything after the first colon is the model name, so ``openai:llama3.1:8b`` works.
"""

from __future__ import annotations

import os
from typing import Any

from dagagent.errors import ConfigError
from dagagent.llm.anthropic import AnthropicChat
from dagagent.llm.openai import OpenAIChat

__all__ = ["PROVIDERS", "from_env", "from_spec"]

PROVIDERS: dict[str, type[OpenAIChat] | type[AnthropicChat]] = {
    "openai": OpenAIChat,
    "anthropic": AnthropicChat,
}

_FORMS = (
    "'openai:MODEL' (OpenAI or any OpenAI-compatible server via base_url, "
    "e.g. openai:gpt-4o-mini) or 'anthropic:MODEL' (e.g. anthropic:claude-sonnet-4-5)"
)


def from_spec(
    spec: str,
    base_url: str | None = None,
    api_key: str | None = None,
    **options: Any,
) -> OpenAIChat | AnthropicChat:
    """A client for ``spec`` (see the module docstring); ``options`` go to the client.

    Raises :class:`~dagagent.errors.ConfigError` for a spec it does not understand.
    """
    provider, sep, model = spec.strip().partition(":")
    provider = provider.strip().lower()
    model = model.strip()
    if not sep or provider not in PROVIDERS:
        raise ConfigError(f"unknown model spec {spec!r}: expected {_FORMS}")
    if not model:
        raise ConfigError(f"model spec {spec!r} names no model: expected {_FORMS}")
    cls = PROVIDERS[provider]
    if base_url:
        options["base_url"] = base_url
    return cls(model, api_key=api_key, **options)


def from_env(
    model: str | None = None, base_url: str | None = None, **options: Any
) -> OpenAIChat | AnthropicChat:
    """A client configured by arguments, falling back to environment variables.

    The spec comes from ``model`` or ``DAGAGENT_MODEL``; the base URL from ``base_url``,
    ``DAGAGENT_BASE_URL``, then ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` for the
    matching provider. Keys come from ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``.
    """
    spec = model or os.environ.get("DAGAGENT_MODEL", "").strip()
    if not spec:
        raise ConfigError(
            f"no model given: pass one (e.g. --model) or set DAGAGENT_MODEL to {_FORMS}"
        )
    provider = spec.partition(":")[0].strip().lower()
    url = base_url or os.environ.get("DAGAGENT_BASE_URL", "").strip()
    if not url and provider in PROVIDERS:
        url = os.environ.get(f"{provider.upper()}_BASE_URL", "").strip()
    return from_spec(spec, base_url=url or None, **options)
