"""What a provider said when it failed, as one line fit for an error message.

Error bodies come as JSON in several dialects, as plain text, or as the HTML page of a
proxy in front of the server ("502 Bad Gateway"); each is reduced to its words here.
"""

from __future__ import annotations

import html
import json
import re

from ..text import shorten

__all__ = ["excerpt", "html_text", "is_html", "provider_error_text"]


def excerpt(text: str, limit: int = 200) -> str:
    """A one-line, length-capped quote of ``text`` for error messages."""
    return shorten(text, limit, fit=False) or "(empty body)"


def provider_error_text(body: str) -> str:
    """The provider's own error message from an error body, or a quote of the body.

    Understands ``{"error": {"message": ...}}`` (OpenAI, Anthropic, vLLM), ``{"error":
    "..."}`` (Ollama, llama.cpp), ``{"detail": ...}`` (FastAPI servers) and
    ``{"message": ...}``.
    """
    try:
        data = json.loads(body)
    except ValueError:
        if is_html(body):
            return excerpt(html_text(body), 500)
        return excerpt(body, 500)
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            message = error.get("message")
            if isinstance(message, str) and message:
                kinds = (error.get(k) for k in ("type", "status", "code"))  # Gemini: status
                kind = next((k for k in kinds if isinstance(k, str) and k), None)
                return f"{message} [{kind}]" if isinstance(kind, str) and kind else message
            return excerpt(json.dumps(error), 500)
        if isinstance(error, str) and error:
            return error
        for key in ("detail", "message"):
            value = data.get(key)
            if isinstance(value, str) and value:
                return value
            if value:
                return excerpt(json.dumps(value), 500)
    return excerpt(body, 500)


_HTML_RE = re.compile(r"\s*(<!doctype html|<html|<head|<body|<\?xml|<center|<h1)", re.IGNORECASE)
_HTML_DROP_RE = re.compile(r"<(script|style)\b.*?</\1\s*>|<!--.*?-->", re.IGNORECASE | re.DOTALL)
_HTML_TAG_RE = re.compile(r"<[^>]*>")


def is_html(body: str) -> bool:
    """Whether ``body`` looks like an HTML (or XML) page rather than an API's answer."""
    return _HTML_RE.match(body) is not None


def html_text(body: str) -> str:
    """The words of an HTML error page (a proxy's "502 Bad Gateway"), without its markup;
    a title repeated as the heading is said once."""
    text = html.unescape(_HTML_TAG_RE.sub(" ", _HTML_DROP_RE.sub(" ", body)))
    words: list[str] = []
    for line in text.splitlines():
        line = " ".join(line.split())
        if line and line not in words:
            words.append(line)
    return " ".join(words)
