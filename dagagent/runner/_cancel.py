"""Telling a real cancellation from a tool that raised a cancellation exception of its own.

The one place the runner looks below anyio: a task cancelled by asyncio itself (``Task.cancel``,
as ``asyncio.run`` does on Ctrl-C) leaves no trace in anyio's cancel scopes, so the asyncio
task's ``cancelling()`` counter is asked (Python 3.11+). On trio, user code cannot raise trio's
``Cancelled``, so a cancellation there is always real.
"""

from __future__ import annotations

import asyncio
import math

import anyio

__all__ = ["really_cancelled"]


def really_cancelled() -> bool:
    """Whether the current task is being cancelled (and not merely handed a cancellation
    exception raised by the code it ran)."""
    if anyio.current_effective_deadline() == -math.inf:
        return True  # an enclosing anyio cancel scope was cancelled
    try:
        task = asyncio.current_task()
    except RuntimeError:  # not on asyncio: trio's Cancelled cannot be raised by user code
        return True
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+
    return task is None or cancelling is None or cancelling() > 0
