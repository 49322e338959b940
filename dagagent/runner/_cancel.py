"""Telling a real cancellation from a tool that raised a cancellation exception of its own, and
a task that finished normally from one whose tool caught its cancellation and went on.

A task cancelled by asyncio itself (``Task.cancel``, as ``asyncio.run`` does on Ctrl-C) leaves
no trace in anyio's cancel scopes, so on asyncio the task's public ``cancelling()`` counter is
asked too (Python 3.11+). On trio, user code cannot raise trio's ``Cancelled``, so a
cancellation there is always real; a tool that catches it is cancelled again at its next
checkpoint.
"""

from __future__ import annotations

import asyncio
import math

import anyio

__all__ = ["IGNORED_CANCEL", "cancel_ignored", "really_cancelled"]

#: The error of a task whose tool caught the run's cancellation and returned anyway.
IGNORED_CANCEL = (
    "cancelled while running (the task caught the cancellation and returned later; "
    "its output is discarded)"
)


def _cancelling() -> int | None:
    """The current asyncio task's ``cancelling()`` count (``None``: not on asyncio, or a
    Python without it)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # not on asyncio
        return None
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+
    return None if cancelling is None else int(cancelling())


def really_cancelled() -> bool:
    """Whether the current task is being cancelled (and not merely handed a cancellation
    exception raised by the code it ran)."""
    if anyio.current_effective_deadline() == -math.inf:
        return True  # an enclosing anyio cancel scope was cancelled
    cancelling = _cancelling()
    return cancelling is None or cancelling > 0


def cancel_ignored() -> bool:
    """Whether the current task, returning normally, was cancelled on the way: the tool it ran
    caught the cancellation and went on."""
    cancelling = _cancelling()
    if cancelling is not None:
        return cancelling > 0
    return anyio.current_effective_deadline() == -math.inf
