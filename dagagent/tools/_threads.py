"""The threads sync tools run in: at most :attr:`SyncThreads.limit` at once in a process,
abandoned ones included.

A sync tool runs in a worker thread, and Python cannot stop a thread. So when its task times
out or its run is stopped, the call is **abandoned**: the task is recorded at once (timed out,
cancelled) and the run goes on, while the thread runs the function to its end and its result
is dropped. An abandoned call keeps its place here until the function returns, so hung tools
cannot pile up threads without bound (with retries, every attempt would take another): once
``limit`` calls hold a place, the next sync call waits for one, and that wait counts against
its task's timeout. The places are shared by every run and event loop of the process, since
an abandoned thread outlives the run (and the loop) that started it.

The threads are anyio's (:func:`anyio.to_thread.run_sync` with ``abandon_on_cancel=True``), on
asyncio and trio alike; they run each call with a copy of the caller's context variables, so a
trace context or a request id reaches the tool. anyio bounds its threads per event loop; the
places here are the bound of the process, so each loop hands anyio a limiter without one.

A place is taken before the call goes to anyio and given back by whoever sees the call end
last: the caller, when the function returned while it still waited; the worker thread, when
the caller had given up (timed out, cancelled) while the function ran. A call abandoned before
its thread took it up never runs, and gives its place back at once. A place that comes free
goes to the call that has waited longest: woken directly when it waits on the event loop that
frees the place, and otherwise through that loop's token from a short-lived thread, so that
neither a worker thread nor an event loop ever blocks on another loop.

On asyncio, anyio's worker threads are not daemon threads: a Python program whose sync tool
ignored its timeout waits for the function to return when it ends (the ``dagagent`` command
does not: it leaves with :func:`os._exit` when :attr:`SyncThreads.running` says a call still
holds a thread). Under trio they are daemon threads.
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

__all__ = ["DEFAULT_LIMIT", "SyncThreads", "sync_threads"]

T = TypeVar("T")

DEFAULT_LIMIT = 40  # as anyio's own default for worker threads

# A call's states, each changed under the lock of its SyncThreads.
_WAITING = 0  # holds a place; its thread has not taken it up
_RUNNING = 1  # its function runs, and its caller waits for it
_RETURNED = 2  # its function returned; its caller gives the place back
_ABANDONED = 3  # its caller gave up while the function runs; the thread gives the place back
_DONE = 4  # its place is given back (or it never runs)


class SyncThreads:
    """At most ``limit`` threads running sync tool calls at once, counting each abandoned call
    until its function returns (see the module's docstring). One instance, ``sync_threads``,
    serves every run of the process; set ``sync_threads.limit`` to change the bound."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self._lock = threading.Lock()
        self._limit = _checked(limit)
        self._running = 0  # calls holding a place: waiting for their thread, running, abandoned
        self._abandoned = 0
        self._waiters: deque[_Waiter] = deque()  # calls waiting for a place, longest first
        _INSTANCES.add(self)

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

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread once a place is free, with the caller's context
        variables; a cancellation abandons it."""
        loop = _this_loop()
        with self._lock:
            placed = self._running < self._limit and not self._waiters
            if placed:
                self._running += 1
        if not placed:
            await self._wait_for_place(loop)
        call = _Call(self, fn, args)
        try:
            output = await anyio.to_thread.run_sync(
                call.work, abandon_on_cancel=True, limiter=loop.limiter
            )
        finally:
            call.settle()
        return cast(T, output)

    # -- places ------------------------------------------------------------------------------

    async def _wait_for_place(self, loop: _Loop) -> None:
        """Hold a place once one is free, after the calls that waited longer (first come,
        first served). A cancelled wait holds none."""
        with self._lock:
            if self._running < self._limit and not self._waiters:
                self._running += 1
                return
            waiter = _Waiter(self, loop.token)
            self._waiters.append(waiter)
        try:
            await waiter.event.wait()
        except BaseException:
            with self._lock:
                if waiter.state == _GRANTED:  # handed over just as this call was stopped
                    self._release_locked()
                elif waiter.state == _IN_LINE:
                    self._waiters.remove(waiter)
                waiter.state = _GONE
            raise
        with self._lock:
            waiter.state = _GONE  # the place is this call's now

    def _release_locked(self) -> None:
        """A place is free (the lock is held): hand it to the first waiter, unless the limit
        was lowered below the places held."""
        if self._running <= self._limit and self._hand_over():
            return
        self._running -= 1

    def _hand_over(self) -> bool:
        """Give a place (still counted in ``_running``) to the first waiter whose event loop
        still runs; whether there was one."""
        while self._waiters:
            if self._waiters.popleft().wake():
                return True
        return False

    def _forget(self) -> None:
        """In a child process after ``fork``: no thread or event loop of the parent's is
        there, so no call holds a place or waits for one."""
        self._lock = threading.Lock()
        self._running = self._abandoned = 0
        self._waiters.clear()


# A waiter's states, each changed under the lock of its SyncThreads.
_IN_LINE, _GRANTED, _GONE = range(3)


class _Waiter:
    """A call waiting for a place, woken from whichever thread frees one."""

    __slots__ = ("event", "owner", "state", "thread", "token")

    def __init__(self, owner: SyncThreads, token: anyio.lowlevel.EventLoopToken) -> None:
        self.owner = owner
        self.event = anyio.Event()
        self.token = token
        self.thread = threading.get_ident()  # the thread its event loop runs in
        self.state = _IN_LINE

    def wake(self) -> bool:
        """Hand a place over (the lock is held); ``False`` if the waiter's event loop has
        ended. Never blocks: from another thread than the loop's, the event is set from a
        thread of its own."""
        if threading.get_ident() == self.thread:
            try:
                self.event.set()
            except RuntimeError:  # its event loop is closed: the call is long gone
                self.state = _GONE
                return False
        else:
            threading.Thread(target=self._set_from_thread, daemon=True).start()
        self.state = _GRANTED
        return True

    def _set_from_thread(self) -> None:
        try:
            anyio.from_thread.run_sync(self.event.set, token=self.token)
        except RuntimeError:  # its event loop ended before the place reached the call
            owner = self.owner
            with owner._lock:
                if self.state == _GRANTED:
                    self.state = _GONE
                    owner._release_locked()


class _Call:
    """One sync call: it holds a place from before its thread takes it up until its function
    returns (or, abandoned before that, until its caller gives up)."""

    __slots__ = ("args", "fn", "owner", "state")

    def __init__(self, owner: SyncThreads, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.owner = owner
        self.fn = fn
        self.args = args
        self.state = _WAITING

    def work(self) -> Any:
        """In the worker thread: run the function, unless the caller already gave up."""
        owner = self.owner
        with owner._lock:
            if self.state == _DONE:  # abandoned before now: it never runs
                return None
            self.state = _RUNNING
        try:
            return self.fn(*self.args)
        finally:
            with owner._lock:
                if self.state == _ABANDONED:
                    self.state = _DONE
                    owner._abandoned -= 1
                    owner._release_locked()
                else:
                    self.state = _RETURNED

    def settle(self) -> None:
        """In the caller, once it stops waiting (the function returned, or the call was
        cancelled): give the place back, or leave that to the thread still running."""
        owner = self.owner
        with owner._lock:
            if self.state == _RUNNING:
                self.state = _ABANDONED
                owner._abandoned += 1
            elif self.state != _DONE:  # returned, or never taken up by its thread
                self.state = _DONE
                owner._release_locked()


def _checked(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"the limit of threads for sync tools must be an integer >= 1: {limit!r}")
    return limit


_INSTANCES: weakref.WeakSet[SyncThreads] = weakref.WeakSet()


def _forget_after_fork() -> None:
    for instance in list(_INSTANCES):
        instance._forget()


os.register_at_fork(after_in_child=_forget_after_fork)


class _Loop:
    """What the calls of one event loop share: anyio's limiter for the loop, without a bound
    (the places are the bound), and the loop's token, to wake a call waiting there."""

    __slots__ = ("limiter", "token")

    def __init__(self) -> None:
        self.limiter = anyio.CapacityLimiter(math.inf)
        self.token = anyio.lowlevel.current_token()


_LOOP: anyio.lowlevel.RunVar[_Loop] = anyio.lowlevel.RunVar("dagagent_sync_tool_loop")


def _this_loop() -> _Loop:
    try:
        return _LOOP.get()
    except LookupError:
        loop = _Loop()
        _LOOP.set(loop)
        return loop


#: The places of this process.
sync_threads = SyncThreads()
