"""How values become the JSON text of a column, and back."""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import to_json

__all__ = ["ELEMENT_KEYS", "from_column", "to_column", "why"]

#: The ``elements`` column of a map task holds a JSON list with one object per element, whose
#: keys are these task columns and whose values are what that column would hold (JSON text
#: for outputs, arguments, steps and decisions): an element is written and read back by the
#: same code as a task row.
ELEMENT_KEYS = (
    "task_id",
    "status",
    "output",
    "error",
    "error_type",
    "attempts",
    "started_at",
    "finished_at",
    "args",
    "steps",
    "decisions",
    "traceback",
    "worker",
)


def to_column(value: Any) -> str | None:
    """``value`` as JSON text (``None`` stays NULL); a value that cannot be encoded becomes a
    placeholder string saying why."""
    if value is None:
        return None
    try:
        return to_json(value, fallback=str).decode()
    except Exception as exc:  # e.g. a value mutated by another task while being written
        return to_json(f"<not recordable: {why(exc)}>").decode()


def why(exc: Exception) -> str:
    """An exception as one bounded line."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]


def from_column(text: str | None) -> Any:
    """The value a column's JSON text holds (NULL: ``None``)."""
    return None if text is None else json.loads(text)
