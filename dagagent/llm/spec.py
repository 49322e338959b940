"""Build a client from a short spec string or from the environment.

Accepted specs: ``openai:MODEL`` (OpenAI, or any OpenAI-compatible server when
``base_url`` is given: vLLM, Ollama, llama.cpp, LM Studio), ``anthropic:MODEL`` and
``gemini:MODEL`` (the Gemini API in its own format).
Everything after the first colon is the model name, so ``openai:llama3.1:8b`` works.

A comma-separated list of specs (``openai:gpt-4o,anthropic:claude-sonnet-4-5``) is a
:class:`~dagagent.llm.FallbackLLM`: a call goes to the first model, and to the next when one
is rate limited past its retries, down, unreachable, or given a prompt longer than its
context window. ``base_url`` and ``api_key`` are the first model's; each other model takes
its provider's own (``OPENAI_BASE_URL``..., the provider's API, and its key variable).
"""

from __future__ import annotations

import os
from typing import Any

from dagagent.errors import ConfigError
from dagagent.llm.anthropic import AnthropicChat
from dagagent.llm.gemini import GeminiChat
from dagagent.llm.openai import OpenAIChat
from dagagent.llm.router import FallbackLLM

__all__ = ["PROVIDERS", "from_env", "from_spec"]

PROVIDERS: dict[str, type[OpenAIChat] | type[AnthropicChat] | type[GeminiChat]] = {
    "openai": OpenAIChat,
    "anthropic": AnthropicChat,
    "gemini": GeminiChat,
}

_FORMS = (
    "'openai:MODEL' (OpenAI or any OpenAI-compatible server via base_url, "
    "e.g. openai:gpt-4o-mini), 'anthropic:MODEL' (e.g. anthropic:claude-sonnet-4-5) or "
    "'gemini:MODEL' (e.g. gemini:gemini-2.5-flash), "
    "or several of them separated by commas (the later ones are fallbacks)"
)

Client = OpenAIChat | AnthropicChat | GeminiChat


def _split(spec: str) -> list[str]:
    parts = [p.strip() for p in spec.split(",")]
    if len(parts) > 1 and not all(parts):
        raise ConfigError(f"model spec {spec!r} has an empty entry in its list: expected {_FORMS}")
    return parts


def _one(spec: str, base_url: str | None, api_key: str | None, options: dict[str, Any]) -> Client:
    provider, sep, model = spec.strip().partition(":")
    provider = provider.strip().lower()
    model = model.strip()
    if not sep or provider not in PROVIDERS:
        raise ConfigError(f"unknown model spec {spec!r}: expected {_FORMS}")
    if not model:
        raise ConfigError(f"model spec {spec!r} names no model: expected {_FORMS}")
    cls = PROVIDERS[provider]
    kwargs = dict(options)
    if base_url:
        kwargs["base_url"] = base_url
    return cls(model, api_key=api_key, **kwargs)


def from_spec(
    spec: str,
    base_url: str | None = None,
    api_key: str | None = None,
    **options: Any,
) -> Client | FallbackLLM:
    """A client for ``spec`` (see the module docstring); ``options`` go to every client.

    Raises :class:`~dagagent.errors.ConfigError` for a spec it does not understand.
    """
    parts = _split(spec)
    first = _one(parts[0], base_url, api_key, options)
    if len(parts) == 1:
        return first
    return FallbackLLM([first, *(_one(p, None, None, options) for p in parts[1:])])


def _provider_url(spec: str) -> str | None:
    provider = spec.partition(":")[0].strip().lower()
    if provider not in PROVIDERS:
        return None
    return os.environ.get(f"{provider.upper()}_BASE_URL", "").strip() or None


def from_env(
    model: str | None = None, base_url: str | None = None, **options: Any
) -> Client | FallbackLLM:
    """A client configured by arguments, falling back to environment variables.

    The spec comes from ``model`` or ``DAGAGENT_MODEL``; the base URL from ``base_url``,
    ``DAGAGENT_BASE_URL``, then ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` /
    ``GEMINI_BASE_URL`` for the matching provider. Keys come from ``OPENAI_API_KEY`` /
    ``ANTHROPIC_API_KEY`` / ``GEMINI_API_KEY`` (or ``GOOGLE_API_KEY``). In a list
    of specs, ``base_url`` and ``DAGAGENT_BASE_URL`` are the first model's; the others take
    their provider's variable.
    """
    spec = model or os.environ.get("DAGAGENT_MODEL", "").strip()
    if not spec:
        raise ConfigError(
            f"no model given: pass one (e.g. --model) or set DAGAGENT_MODEL to {_FORMS}"
        )
    parts = _split(spec)
    url = base_url or os.environ.get("DAGAGENT_BASE_URL", "").strip() or _provider_url(parts[0])
    first = _one(parts[0], url, None, options)
    if len(parts) == 1:
        return first
    rest = [_one(p, _provider_url(p), None, options) for p in parts[1:]]
    return FallbackLLM([first, *rest])
