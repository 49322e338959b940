"""A slot of the run's ``max_concurrency``, held while a task or a map's element runs."""

from __future__ import annotations

import anyio
import anyio.lowlevel

__all__ = ["Slot", "take_slot"]


async def take_slot(slots: anyio.CapacityLimiter) -> None:
    """Wait for a slot of the run's ``max_concurrency``. The run may have been stopped while the
    task waited: a slot handed over just before the cancellation does not let the task start
    after it."""
    await slots.acquire()
    try:
        await anyio.lowlevel.checkpoint_if_cancelled()
    except BaseException:
        slots.release()
        raise


class Slot:
    """A slot (if the run has a bound) held while a map's element runs."""

    __slots__ = ("_slots",)

    def __init__(self, slots: anyio.CapacityLimiter | None) -> None:
        self._slots = slots

    async def __aenter__(self) -> None:
        if self._slots is not None:
            await take_slot(self._slots)

    async def __aexit__(self, *exc: object) -> None:
        if self._slots is not None:
            self._slots.release()
