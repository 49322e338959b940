"""API keys that never show themselves, and scrubbing them out of text."""

from __future__ import annotations

import os
from typing import Any

from ..text import strip_url_credentials

__all__ = ["FRAGMENT", "Scrubber", "Secret", "resolve_api_key"]

#: The shortest piece of a key that is scrubbed on its own (a server that echoes part of the
#: key, or a key cut by an excerpt): any run of at least this many of its characters.
FRAGMENT = 8


class Secret:
    """An API key that does not show itself: ``repr``/``str`` give ``'***'``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def scrub(self, text: str) -> str:
        """``text`` with the key replaced by ``***``: every occurrence of the whole key, every
        piece of it at least :data:`FRAGMENT` characters long (an echo of part of the key, or
        a key cut short), and any ``user:password@`` in a URL."""
        text = strip_url_credentials(text)
        key = self._value
        if len(key) < 3:
            return text
        if key in text:
            text = text.replace(key, "***")
        if len(key) <= FRAGMENT:
            return text
        covered = bytearray(len(text))
        found = False
        for i in range(len(key) - FRAGMENT + 1):
            piece = key[i : i + FRAGMENT]
            at = text.find(piece)
            while at >= 0:
                covered[at : at + FRAGMENT] = b"\x01" * FRAGMENT
                found = True
                at = text.find(piece, at + 1)
        return _mask(text, covered) if found else text

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("API keys are not pickled")


class Scrubber:
    """Every secret a client sends (its API key, the password of its URL, a secret header):
    :meth:`scrub` takes each of them, and pieces of them, out of text."""

    __slots__ = ("_secrets",)

    def __init__(self, secrets: list[Secret]) -> None:
        self._secrets = secrets

    def scrub(self, text: str) -> str:
        text = strip_url_credentials(text)
        for secret in self._secrets:
            text = secret.scrub(text)
        return text

    def __repr__(self) -> str:
        return f"Scrubber({len(self._secrets)} secrets)"

    def __reduce__(self) -> Any:
        raise TypeError("secrets are not pickled")


def resolve_api_key(explicit: str | None, env_var: str) -> Secret | None:
    """The key from the argument, else from ``env_var``; ``None`` when neither is set."""
    value = explicit if explicit is not None else os.environ.get(env_var)
    value = (value or "").strip()
    return Secret(value) if value else None


def _mask(text: str, covered: bytearray) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        if covered[i]:
            while i < len(text) and covered[i]:
                i += 1
            out.append("***")
        else:
            out.append(text[i])
            i += 1
    return "".join(out)
