"""A task's ``when``, as the runner decides it: once for a task, or for each element of a map
whose condition reads its element."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..conditions import Condition

__all__ = ["condition_false", "element_condition"]


def element_condition(condition: Condition) -> bool:
    """Whether a map task's ``when`` reads its element (``${@item}``, ``${@index}``): then it
    is decided for each element, else once for the whole task before its list expands."""
    return any(ref.element for ref in condition.refs)


def condition_false(condition: Condition, outputs: Mapping[str, Any]) -> str:
    """Why a condition skipped its task (or element): the condition and what it read."""
    read = condition.explain(outputs)
    return f"condition {condition.text!r} is false" + (f": {read}" if read else "")
