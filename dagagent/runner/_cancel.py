"""Telling a real cancellation from a tool that raised a cancellation exception of its own, and
a task that finished normally from one whose tool caught its cancellation and went on.

The one place the runner looks below anyio: a task cancelled by asyncio itself (``Task.cancel``,
as ``asyncio.run`` does on Ctrl-C) leaves no trace in anyio's cancel scopes, so the asyncio
task's ``cancelling()`` counter is asked (Python 3.11+). On trio, user code cannot raise trio's
``Cancelled``, so a cancellation there is always real.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import anyio

__all__ = ["IGNORED_CANCEL", "cancellation_check", "really_cancelled"]

#: The error of a task whose tool caught the run's cancellation and returned anyway.
IGNORED_CANCEL = (
    "cancelled while running (the task caught the cancellation and returned later; "
    "its output is discarded)"
)


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


def cancellation_check() -> Callable[[], bool]:
    """A check, made for the running event loop, of whether the current task (returning
    normally) was cancelled on the way: the tool it ran caught the cancellation and went on.

    On asyncio a cancellation that reached a task and was caught by no cancel scope leaves its
    ``cancelling()`` count above zero. The check is asked once per task, so it looks the task
    up in asyncio's table of current tasks by this loop (a dict lookup) rather than through
    ``asyncio.current_task()``, which costs ~0.7 µs a call before Python 3.12."""
    try:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
    except RuntimeError:  # no asyncio loop here (trio, or not in a loop yet)
        return _slow_check
    tasks_by_loop = getattr(asyncio.tasks, "_current_tasks", None)
    if (
        task is None
        or getattr(task, "cancelling", None) is None  # Python 3.10
        or not isinstance(tasks_by_loop, dict)
        or tasks_by_loop.get(loop) is not task
    ):
        return _slow_check
    current = tasks_by_loop.get

    def check() -> bool:
        task = current(loop)
        return task is not None and task.cancelling() > 0

    return check


def _slow_check() -> bool:
    try:
        task = asyncio.current_task()
    except RuntimeError:  # not on asyncio: trio cancels again at its next checkpoint
        task = None
    cancelling = getattr(task, "cancelling", None)
    if cancelling is not None:
        return bool(cancelling() > 0)
    return anyio.current_effective_deadline() == -math.inf
