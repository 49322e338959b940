"""API keys that never show themselves, and scrubbing them out of text."""

from __future__ import annotations

import os
from typing import Any

from ..text import strip_url_credentials

__all__ = ["FRAGMENT", "Scrubber", "Secret", "StreamScrub", "resolve_api_key"]

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
        covered = bytearray(len(text))
        return _mask(text, covered) if self.cover(text, covered) else text

    def cover(self, text: str, covered: bytearray) -> bool:
        """Mark in ``covered`` (one byte per character of ``text``) where the key, or a piece
        of it at least :data:`FRAGMENT` characters long, is; whether any is."""
        key = self._value
        if len(key) < 3:
            return False
        found = False
        at = text.find(key)
        while at >= 0:
            covered[at : at + len(key)] = b"\x01" * len(key)
            found = True
            at = text.find(key, at + 1)
        if len(key) <= FRAGMENT:
            return found
        for i in range(len(key) - FRAGMENT + 1):
            piece = key[i : i + FRAGMENT]
            at = text.find(piece)
            while at >= 0:
                covered[at : at + FRAGMENT] = b"\x01" * FRAGMENT
                found = True
                at = text.find(piece, at + 1)
        return found

    @property
    def size(self) -> int:
        return len(self._value)

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

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def scrub(self, text: str) -> str:
        text = strip_url_credentials(text)
        covered = bytearray(len(text))
        found = False
        for secret in self._secrets:
            found = secret.cover(text, covered) or found
        return _mask(text, covered) if found else text

    def pieces(self) -> StreamScrub:
        """A scrubber of text that arrives in pieces (see :class:`StreamScrub`)."""
        return StreamScrub(self)

    @property
    def longest(self) -> int:
        return max((s.size for s in self._secrets), default=0)

    def _covered(self, text: str) -> bytearray:
        covered = bytearray(len(text))
        for secret in self._secrets:
            secret.cover(text, covered)
        return covered

    def __repr__(self) -> str:
        return f"Scrubber({len(self._secrets)} secrets)"

    def __reduce__(self) -> Any:
        raise TypeError("secrets are not pickled")


class StreamScrub:
    """Text that arrives in pieces (a streamed answer), given back without the secrets, even
    when one is split across pieces: the last characters that could still be the start of a
    secret are held back until the next piece, or the end, says what they are."""

    __slots__ = ("_held", "_scrubber")

    def __init__(self, scrubber: Scrubber) -> None:
        self._scrubber = scrubber
        self._held = ""

    def feed(self, text: str) -> str:
        """What of the text so far can be given back now, scrubbed."""
        held = self._held + text
        covered = self._scrubber._covered(held)
        cut = len(held) - max(self._scrubber.longest - 1, FRAGMENT - 1)
        while 0 < cut < len(held) and covered[cut - 1] and covered[cut]:
            cut -= 1  # never cut a secret in two: it stays held, whole
        if cut <= 0:
            self._held = held
            return ""
        self._held = held[cut:]
        return strip_url_credentials(_mask(held[:cut], covered[:cut]))

    def end(self) -> str:
        """What was held back, scrubbed (the stream ended)."""
        held, self._held = self._held, ""
        return self._scrubber.scrub(held) if held else ""


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
