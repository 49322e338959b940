"""Stop signals in the CLI (Ctrl-C, SIGTERM, SIGHUP): the first stops what the command is
doing (a run is cancelled and its record flushed, a model call or an MCP listing abandoned),
then exit 130 with a message; a second one ends the process at once. Every command's async
work goes through :func:`run_stoppable`, and :func:`stop_signals_interrupt` makes SIGTERM and
SIGHUP interrupt the rest as Ctrl-C does, instead of killing the process without a word.

Why not Python's own Ctrl-C: asyncio's runner turns a second Ctrl-C into a
``KeyboardInterrupt`` raised wherever the main thread happens to be (in the event loop's
bookkeeping, in the middle of a task's step), then shuts down by cancelling every task still
there and waiting for all of them, without a bound. A task that does not end when cancelled (a
tool that catches ``CancelledError``, a task whose wake-up the interrupt tore out of the loop)
then keeps the process alive, at 100 % CPU while anyio delivers the cancellation again on every
turn of the loop. So a stop signal here never raises into the event loop: the first one is
handed to the loop (``call_soon_threadsafe``), and the second calls ``os._exit`` from the
signal handler, which Python runs on the main thread as soon as it runs Python code or waits in
a call that signals interrupt (``select``, ``sleep``, a lock, a thread join). After the first
signal, every later one ends the process at once, also while the record is flushed or the
result is printed. "At once" leaves the run store's writers up to :data:`EXIT_FLUSH_S` to
commit the results of tasks that had finished (milliseconds, with the main thread waiting for
them rather than spinning in a run that a tool holds up); a third signal does not wait for
that.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:  # the entry point installs a handler from here: nothing heavy at import
    import asyncio

    import anyio

__all__ = [
    "interrupted_document",
    "json_owed",
    "json_written",
    "run_stoppable",
    "stop_signals_interrupt",
    "stoppable",
]

T = TypeVar("T")

_EXIT_INTERRUPTED = 130  # as dagagent.cli._app.EXIT_INTERRUPTED (that module imports this one)
#: At most this long, on a second stop signal, for the run store to commit the results it has.
EXIT_FLUSH_S = 2.0
_exiting = False
#: Whether stdout still owes its one JSON object (a ``--json`` command that has not printed
#: it yet): a second signal then prints an error object before it ends the process.
_json_owed = False


def interrupted_document(message: str) -> dict[str, Any]:
    """What ``--json`` prints for a command stopped by a signal with nothing else to show: an
    error object, exit code 130."""
    return {
        "ok": False,
        "error": {
            "code": "Interrupted",
            "message": message,
            "issues": [],
            "exit_code": _EXIT_INTERRUPTED,
        },
    }


def json_owed() -> None:
    """A ``--json`` command started: until :func:`json_written`, stdout owes its object."""
    global _json_owed
    _json_owed = True


def json_written() -> None:
    """The command's JSON object is being printed: a second signal adds none."""
    global _json_owed
    _json_owed = False


def _stop_signals() -> list[signal.Signals]:
    """SIGINT, SIGTERM and SIGHUP, unless ignored (``nohup``, a background job) or not ours to
    handle (not the main thread, or no such signals)."""
    if os.name == "nt" or threading.current_thread() is not threading.main_thread():
        return []
    found: list[signal.Signals] = []
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
            found.append(sig)
    return found


def exit_now(signum: int, frame: FrameType | None = None) -> None:
    """A second stop signal: say so, give a terminal its cursor back (a live display hides
    it), let the run store commit the results it was given (up to :data:`EXIT_FLUSH_S`), and
    end the process without waiting for anything else. A signal during that wait ends it then.
    """
    del frame
    global _exiting
    if _exiting:
        os._exit(_EXIT_INTERRUPTED)
    _exiting = True
    for fd in (2, 1):
        try:
            if os.isatty(fd):
                os.write(fd, b"\x1b[?25h")
        except OSError:
            pass
    said = f"{_signal_name(signum)} again: exiting at once"
    with contextlib.suppress(OSError, ValueError):
        os.write(2, f"\n{said}\n".encode())
    recording = sys.modules.get("dagagent.store._recorder")  # imported if a run is recorded
    if recording is not None:
        with contextlib.suppress(Exception):
            recording.flush_recorders(EXIT_FLUSH_S)
    if _json_owed:  # --json: stdout carries one JSON object whatever happens
        import json

        document = interrupted_document(
            f"{said}: what had finished is recorded, what ran was stopped without a result"
        )
        with contextlib.suppress(OSError):
            sys.stdout.flush()
            os.write(1, (json.dumps(document, indent=2) + "\n").encode())
    os._exit(_EXIT_INTERRUPTED)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class _Stop:
    """The handler of the stop signals while a run lasts."""

    def __init__(self, scope: anyio.CancelScope, loop: asyncio.AbstractEventLoop) -> None:
        self._cancel = scope.cancel
        self._call_soon = loop.call_soon_threadsafe
        self.received: int | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.received is not None:
            exit_now(signum, frame)
        self.received = signum
        with contextlib.suppress(RuntimeError):  # the event loop is closed: the run is over
            self._call_soon(self._cancel)


async def stoppable(run: Coroutine[Any, Any, T]) -> T:
    """Run ``run``; Ctrl-C, SIGTERM or SIGHUP stop it: the run is cancelled (running tasks
    recorded as cancelled, the record flushed), then ``KeyboardInterrupt`` (exit 130). A second
    signal, while the run winds down or afterwards, ends the process at once (exit 130)."""
    import asyncio

    import anyio

    signals = _stop_signals()
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not on asyncio
        signals = []
    if not signals:
        return await run
    result: T | None = None
    before = {sig: signal.getsignal(sig) for sig in signals}
    with anyio.CancelScope() as scope:
        stop = _Stop(scope, loop)
        for sig in signals:
            signal.signal(sig, stop)
        try:
            result = await run
        finally:
            for sig in signals:  # after a stop signal, the next one ends the process
                previous = before[sig]
                signal.signal(
                    sig,
                    exit_now
                    if stop.received is not None
                    else signal.SIG_DFL
                    if previous is None
                    else previous,
                )
    if scope.cancelled_caught:  # stopped by a signal (a run that ends anyway is returned)
        raise KeyboardInterrupt
    return cast(T, result)  # the run returned


def run_stoppable(func: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    """``anyio.run(func, *args)`` under :func:`stoppable`: a stop signal cancels it and raises
    ``KeyboardInterrupt``, which :func:`~dagagent.cli._app.guard` turns into its message and
    exit 130."""
    from ..tools._loop import run_own_loop

    async def main() -> T:
        return await stoppable(func(*args))

    return run_own_loop(main)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    del signum, frame
    raise KeyboardInterrupt


def stop_signals_interrupt() -> None:
    """Outside :func:`stoppable`, SIGTERM and SIGHUP raise ``KeyboardInterrupt`` as Ctrl-C
    does (unless ignored, as under ``nohup``): the command then ends with its message and
    exit 130, as the command-line reference says, not killed without a word. For the
    process's entry point only: a library leaves the signals alone."""
    for sig in _stop_signals():
        if sig is not signal.SIGINT:
            signal.signal(sig, _interrupt)
