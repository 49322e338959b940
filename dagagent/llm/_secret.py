"""API keys that never show themselves, and scrubbing them out of text."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["Secret", "resolve_api_key"]


class Secret:
    """An API key that does not show itself: ``repr``/``str`` give ``'***'``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def scrub(self, text: str) -> str:
        """``text`` with every occurrence of the key replaced by ``***``."""
        if len(self._value) >= 3 and self._value in text:
            return text.replace(self._value, "***")
        return text

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("API keys are not pickled")


def resolve_api_key(explicit: str | None, env_var: str) -> Secret | None:
    """The key from the argument, else from ``env_var``; ``None`` when neither is set."""
    value = explicit if explicit is not None else os.environ.get(env_var)
    value = (value or "").strip()
    return Secret(value) if value else None
