"""Waiting for something another process or thread does: :func:`wait_until` polls a condition
until it holds, and fails the test, saying what never happened, if it does not within
``timeout`` seconds (a bound for a hang, never a margin the test's claim depends on).

For a test that can be told when something happens (an event, a queue, a line on a pipe),
waiting on that is better; this is for state only a poll can see: a file another process
writes, a row in a store, a port that starts listening.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

T = TypeVar("T")

#: How long a condition may take to come true before the test fails: a hang, not slowness.
TIMEOUT = 60.0
#: How often it is checked: often enough not to lengthen a test, rarely enough to cost no CPU.
INTERVAL = 0.01


def wait_until(
    condition: Callable[[], T],
    what: str,
    *,
    timeout: float = TIMEOUT,
    unless: Callable[[], str | None] | None = None,
) -> T:
    """The first true value of ``condition()``. Fails with ``what`` (what never happened)
    after ``timeout`` seconds, or as soon as ``unless()`` names a reason to stop waiting (a
    process that exited, say)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        reason = unless() if unless is not None else None
        if reason is not None:
            raise AssertionError(f"{what}: never happened ({reason})")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: never happened in {timeout:g} s")
        time.sleep(INTERVAL)


async def until(
    condition: Callable[[], T | Awaitable[T]], what: str, *, timeout: float = TIMEOUT
) -> T:
    """:func:`wait_until` in async code, on the event loop's clock: for a condition that
    must be awaited (asked of a server, say), or that another thread makes true."""
    deadline = anyio.current_time() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if anyio.current_time() > deadline:
            raise AssertionError(f"{what}: never happened in {timeout:g} s")
        await anyio.sleep(INTERVAL)
