"""SIGTERM and SIGHUP during a CLI run: stop the run the way Ctrl-C does (the run is cancelled
and its record flushed, then exit 130); a second signal ends the process at once."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import anyio

__all__ = ["stoppable"]

T = TypeVar("T")


def _stop_signals() -> list[signal.Signals]:
    """SIGTERM and SIGHUP, unless ignored (``nohup``) or not ours to handle (not the main
    thread, or no such signals)."""
    if os.name == "nt" or threading.current_thread() is not threading.main_thread():
        return []
    found: list[signal.Signals] = []
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
            found.append(sig)
    return found


async def stoppable(run: Coroutine[Any, Any, T]) -> T:
    """Run ``run``; SIGTERM or SIGHUP stop it the way Ctrl-C does: the run is cancelled
    (running tasks recorded as cancelled, the record flushed), then ``KeyboardInterrupt``
    (exit 130). A second signal, while the run winds down, ends the process at once."""
    signals = _stop_signals()
    if not signals:
        return await run
    result: T | None = None
    error: BaseException | None = None
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            with anyio.open_signal_receiver(*signals) as received:
                async for _ in received:
                    tg.cancel_scope.cancel()
                    return  # the default handlers are back: a second signal kills

        tg.start_soon(watch)
        try:
            result = await run
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as exc:  # raised below as itself, not in an exception group
            error = exc
        tg.cancel_scope.cancel()
    if error is not None:
        raise error
    if result is None:  # the run was cancelled by a signal (execute raises otherwise)
        raise KeyboardInterrupt
    return result
