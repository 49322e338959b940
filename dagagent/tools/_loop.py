"""The event loop dagagent runs of its own (``execute_sync``, every command of the CLI), which
never waits, when it closes, for a thread a timed-out tool left running.

An async tool that hands blocking work to asyncio's default executor (``asyncio.to_thread``,
``loop.run_in_executor(None, ...)``) can be cancelled: its task times out on time, while the
thread runs the function to its end. But when the loop closes, asyncio shuts that executor
down and waits for every thread still running: ``dagagent run`` of a task with a 0.5 s
timeout whose tool slept 45 s in ``asyncio.to_thread`` recorded the task as timed out after
0.5 s and then held the command for 45 s. The loops made here have a default executor whose
shutdown lets its idle threads go and leaves the busy ones to finish on their own: the run
ends; the thread lingers until its function returns (Python cannot stop a thread). A program
that ends while one still runs waits for it at interpreter exit, as for any non-daemon thread;
the ``dagagent`` command does not (it leaves with ``os._exit`` when a thread named
:data:`THREAD_PREFIX` still runs).

A loop that someone else runs (``await dagagent.execute(...)`` in an application) keeps its
own default executor: dagagent never changes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import anyio

__all__ = ["THREAD_PREFIX", "run_own_loop"]

T = TypeVar("T")

#: The name of the default executor's threads in the loops made here.
THREAD_PREFIX = "dagagent-executor"


class _LeavingExecutor(ThreadPoolExecutor):
    """A default executor whose shutdown never waits for a call still running (see the
    module's docstring)."""

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        del wait  # the loop's shutdown asks to wait; a call nobody awaits is left to finish
        super().shutdown(wait=False, cancel_futures=cancel_futures)


def _new_loop() -> asyncio.AbstractEventLoop:
    loop = asyncio.new_event_loop()
    loop.set_default_executor(_LeavingExecutor(thread_name_prefix=THREAD_PREFIX))
    return loop


def run_own_loop(func: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """``anyio.run(func)`` on an asyncio loop of its own whose closing does not wait for the
    threads timed-out tools left running in its default executor."""
    return anyio.run(func, backend="asyncio", backend_options={"loop_factory": _new_loop})
