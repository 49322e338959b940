"""The threads sync tools run in: at most :attr:`SyncThreads.limit` at once in a process,
abandoned ones included.

A sync tool runs in a worker thread, and Python cannot stop a thread. So when its task times
out or its run is stopped, the call is **abandoned**: the task is recorded at once (timed out,
cancelled) and the run goes on, while the thread runs the function to its end and its result
is dropped. An abandoned call keeps its place here until the function returns, so hung tools
cannot pile up threads without bound (with retries, every attempt would take another): once
``limit`` calls hold a thread, the next sync call waits for one, and that wait counts against
its task's timeout. The places are shared by every run and event loop of the process, since
an abandoned thread outlives the run (and the loop) that started it.

The threads are anyio's worker threads, so a tool may still use ``anyio.from_thread``.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

__all__ = ["DEFAULT_LIMIT", "SyncThreads", "sync_threads"]

T = TypeVar("T")

DEFAULT_LIMIT = 40  # as anyio's own default for worker threads

# A call's states. A call abandoned before its thread took it up never runs.
_WAITING, _RUNNING, _ABANDONED_WAITING, _ABANDONED_RUNNING, _DONE = range(5)


class SyncThreads:
    """At most ``limit`` threads running sync tool calls at once, counting each abandoned call
    until its function returns (see the module's docstring). One instance, ``sync_threads``,
    serves every run of the process; set ``sync_threads.limit`` to change the bound."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self._lock = threading.Lock()
        self._limit = _checked(limit)
        self._running = 0  # calls holding a place: running, or abandoned and still running
        self._abandoned = 0
        self._waiters: deque[_Waiter] = deque()

    @property
    def limit(self) -> int:
        """How many sync tool calls may hold a thread at once (abandoned ones included)."""
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        with self._lock:
            self._limit = _checked(value)
            while self._running < self._limit and self._hand_over():
                self._running += 1

    @property
    def running(self) -> int:
        """Calls holding a thread now, abandoned ones included."""
        return self._running

    @property
    def abandoned(self) -> int:
        """Calls whose task stopped waiting for them while their function still runs."""
        return self._abandoned

    async def run(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` in a worker thread once a place is free; a cancellation abandons it."""
        await self._acquire()
        call = _Call(self, fn)
        try:
            output = await anyio.to_thread.run_sync(
                call.work, abandon_on_cancel=True, limiter=_unbounded()
            )
            return cast(T, output)  # None only for a call abandoned before it started
        finally:
            call.abandon()  # a no-op once the function has returned

    # -- places ------------------------------------------------------------------------------

    async def _acquire(self) -> None:
        with self._lock:
            if self._running < self._limit and not self._waiters:
                self._running += 1
                return
            waiter = _Waiter()
            self._waiters.append(waiter)
        try:
            await waiter.event.wait()
        except BaseException:
            with self._lock:
                if waiter.granted:  # a place was handed over just as this call was stopped
                    self._release_locked()
                else:
                    self._waiters.remove(waiter)
            raise

    def _release_locked(self) -> None:
        """A place is free (the lock is held): hand it to the first waiter still there."""
        if self._running <= self._limit and self._hand_over():
            return
        self._running -= 1

    def _hand_over(self) -> bool:
        """Give a place (counted in ``_running``) to the first waiter whose loop still runs."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if waiter.wake():
                return True
        return False


class _Waiter:
    """A call waiting for a place, woken from whichever thread frees one."""

    __slots__ = ("event", "granted", "wake_in_loop")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.granted = False
        try:
            self.wake_in_loop: Callable[[], object] = _asyncio_waker(self.event)
        except RuntimeError:  # not on asyncio
            self.wake_in_loop = _other_waker(self.event)

    def wake(self) -> bool:
        try:
            self.wake_in_loop()
        except RuntimeError:  # its event loop is closed: the call is long gone
            return False
        self.granted = True
        return True


def _asyncio_waker(event: anyio.Event) -> Callable[[], object]:
    loop = asyncio.get_running_loop()
    return lambda: loop.call_soon_threadsafe(event.set)


def _other_waker(event: anyio.Event) -> Callable[[], object]:
    token = anyio.lowlevel.current_token()

    def wake() -> None:  # never blocks the thread that frees the place
        threading.Thread(
            target=anyio.from_thread.run_sync, args=(event.set,), kwargs={"token": token}
        ).start()

    return wake


class _Call(Generic[T]):
    """One sync call: it holds a place from before its thread takes it up until its function
    returns, or until it is abandoned before that thread took it up."""

    __slots__ = ("fn", "owner", "state")

    def __init__(self, owner: SyncThreads, fn: Callable[[], T]) -> None:
        self.owner = owner
        self.fn = fn
        self.state = _WAITING

    def work(self) -> T | None:
        owner = self.owner
        with owner._lock:
            if self.state == _ABANDONED_WAITING:
                return None  # its task stopped waiting before a thread took it up
            self.state = _RUNNING
        try:
            return self.fn()
        finally:
            with owner._lock:
                if self.state == _ABANDONED_RUNNING:
                    owner._abandoned -= 1
                self.state = _DONE
                owner._release_locked()

    def abandon(self) -> None:
        owner = self.owner
        with owner._lock:
            if self.state == _WAITING:
                self.state = _ABANDONED_WAITING
                owner._release_locked()
            elif self.state == _RUNNING:
                self.state = _ABANDONED_RUNNING
                owner._abandoned += 1


def _checked(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"the limit of threads for sync tools must be an integer >= 1: {limit!r}")
    return limit


_LIMITER: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar(
    "dagagent_sync_tool_limiter"
)


def _unbounded() -> anyio.CapacityLimiter:
    """anyio's own bound for this event loop: none (the places above are the bound)."""
    try:
        return _LIMITER.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(math.inf)
        _LIMITER.set(limiter)
        return limiter


#: The places of this process.
sync_threads = SyncThreads()
