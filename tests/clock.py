"""Skipping time in async tests, as Temporal's test environment does: a test marked
``@pytest.mark.skip_time`` runs on an event loop whose clock jumps to the next timer whenever
nothing else is ready, so a five-second ``anyio.sleep``, a task's ``timeout_s`` or
``fail_after(30)`` take no wall-clock time, and fire in the order they would have.

Only for tests whose waiting all happens on the event loop (async tools, timers, events). A
test that waits for a thread (a sync tool, the run store's writer) or another process while a
timer is pending would see the timer fire while that work is still under way: such a test keeps
the real clock.

On asyncio the loop is a ``SelectorEventLoop`` whose ``time()`` runs ahead by the time
skipped, over a selector that, when no file descriptor is ready, skips the wait the loop asked
for instead of sleeping it; on trio, ``trio.testing.MockClock`` with ``autojump_threshold=0``
does the same.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any

__all__ = ["TimeSkippingLoop", "backend"]


class _SkippingSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """A selector that reports what is ready now; with nothing ready it moves ``loop``'s clock
    forward by the timeout it was given instead of waiting (with no timeout it waits: nothing
    is scheduled, so only a file descriptor can wake the loop)."""

    def __init__(self, loop: TimeSkippingLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[Any, int]]:
        ready: list[tuple[Any, int]] = super().select(0)
        if ready or timeout is None or timeout <= 0:
            return ready if ready or timeout is not None else super().select(None)
        self._loop.skipped += timeout
        return ready


class TimeSkippingLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock skips the waits nothing else fills."""

    def __init__(self) -> None:
        self.skipped = 0.0
        super().__init__(_SkippingSelector(self))

    def time(self) -> float:
        return super().time() + self.skipped


def backend(name: str, *, skip_time: bool) -> str | tuple[str, dict[str, Any]]:
    """What the ``anyio_backend`` fixture returns for backend ``name``: with ``skip_time``,
    the backend with a clock that skips time."""
    if not skip_time:
        return name
    if name == "asyncio":
        return name, {"loop_factory": TimeSkippingLoop}
    if name == "trio":
        from trio.testing import MockClock

        return name, {"clock": MockClock(autojump_threshold=0)}
    raise ValueError(f"no time-skipping clock for the {name} backend")
