"""What the store records for a call that a redacting interceptor rewrote."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..interceptors import REDACT
from ..results import CallDecision

__all__ = ["redacted_args"]


def redacted_args(decisions: Sequence[CallDecision] | None) -> Any:
    """The arguments of a plan task's call as the ``redacting`` interceptor left them (the
    last rewrite), or ``None`` if nothing was redacted."""
    found = None
    for d in decisions or ():
        if d.decision == REDACT and d.source == "plan":
            found = d.args
    return found
