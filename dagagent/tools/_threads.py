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

On asyncio (the hot path) a call is handed to threads of dagagent's own: the caller's event
loop gets a future, the call goes on a queue an idle thread takes it from (a thread is started
only when none is idle, so there are never more than ``limit`` of them), and the thread sets
the future through the loop's ``call_soon_threadsafe``. A call that finds every place taken
waits in line, and the call that frees a place puts the next one in line on the queue from its
own thread, with no turn of the event loop in between. That is all a call costs: less than
``asyncio.to_thread`` (no ``concurrent.futures`` future to chain) and about a third of
``anyio.to_thread.run_sync``, whose per-call bookkeeping costs more than most sync tools take
to run. The threads are daemon threads: one still running an abandoned call does not keep the
process alive once the program ends. Other event loops (trio) use anyio's worker threads,
within the same places.

Each call runs with a copy of the caller's context variables (as ``asyncio.to_thread`` and
anyio do), so a trace context or a request id reaches the tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import os
import queue
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

__all__ = ["DEFAULT_LIMIT", "THREAD_NAME", "SyncThreads", "sync_threads"]

T = TypeVar("T")

DEFAULT_LIMIT = 40  # as anyio's own default for worker threads

#: The name of each of dagagent's worker threads (followed by its number).
THREAD_NAME = "dagagent tool thread"

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
        # Calls in line for a place (asyncio), and coroutines waiting for one (other loops).
        self._waiters: deque[_Waiter | _Call] = deque()
        self._jobs: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._idle = 0  # threads that will take the next job without one being started
        self._started = 0  # threads started, for their names
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
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio
            return await self._run_elsewhere(fn, args)
        call = _Call(self, fn, args)
        future = call.future = loop.create_future()
        call.loop = loop
        with self._lock:
            if self._running < self._limit and not self._waiters:
                self._running += 1
                number = self._take_thread()
            else:  # in line for a place: the call that frees one hands it over, no loop turn
                call.queued = True
                self._waiters.append(call)
                number = 0
        if not call.queued:
            self._jobs.put(call)
            if number:
                self._start_thread(number)
        try:
            return cast(T, await future)
        finally:
            if call.state != _DONE:  # a no-op once the function has returned
                call.abandon()

    async def _run_elsewhere(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        """Another event loop than asyncio's: anyio's worker threads, within the places."""
        with self._lock:
            placed = self._running < self._limit and not self._waiters
            if placed:
                self._running += 1
        if not placed:
            await self._wait_for_place()
        call = _Call(self, fn, args)
        try:
            output = await anyio.to_thread.run_sync(
                call.work, abandon_on_cancel=True, limiter=_unbounded()
            )
            return cast(T, output)  # None only for a call abandoned before it started
        finally:
            if call.state != _DONE:
                call.abandon()

    def _take_thread(self) -> int:
        """A thread for a call handed to the queue (the lock is held): an idle one (0), or the
        number of one to start."""
        if self._idle:
            self._idle -= 1
            return 0
        self._started += 1
        return self._started

    def _start_thread(self, number: int) -> None:
        threading.Thread(target=self._serve, name=f"{THREAD_NAME} {number}", daemon=True).start()

    # -- dagagent's threads ------------------------------------------------------------------

    def _serve(self) -> None:
        """A worker thread: take calls from the queue for as long as the process lives."""
        jobs = self._jobs
        while True:
            call = jobs.get()
            try:
                output = call.work()
            except BaseException as exc:  # handed to the caller, whatever it is
                call.deliver(_set_exception, exc)
            else:
                call.deliver(_set_result, output)

    def _forget_threads(self) -> None:
        """In a child process after ``fork``: no thread of the parent's is there."""
        self._lock = threading.Lock()
        self._jobs = queue.SimpleQueue()
        self._idle = self._running = self._abandoned = 0
        self._waiters.clear()

    # -- places ------------------------------------------------------------------------------

    async def _wait_for_place(self) -> None:
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
        """Give a place (counted in ``_running``) to the first waiter whose loop still runs: a
        call in line goes on the queue at once, a waiting coroutine is woken."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if isinstance(waiter, _Call):
                waiter.queued = False
                self._jobs.put(waiter)
                number = self._take_thread()
                if number:
                    self._start_thread(number)
                return True
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


class _Call:
    """One sync call: it holds a place from before its thread takes it up until its function
    returns (or, abandoned before that, until its thread finds it abandoned)."""

    __slots__ = ("args", "context", "fn", "future", "loop", "owner", "queued", "state")

    def __init__(self, owner: SyncThreads, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.owner = owner
        self.queued = False  # in line for a place (it holds none yet)
        self.fn = fn
        self.args = args
        self.context = contextvars.copy_context()
        self.state = _WAITING
        self.future: asyncio.Future[Any] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    def work(self) -> Any:
        owner = self.owner
        with owner._lock:
            if self.state == _ABANDONED_WAITING:  # its task stopped waiting before now
                if self.loop is not None:  # one of ours: its place was kept until now
                    self.state = _DONE
                    owner._idle += 1
                    owner._release_locked()
                return None
            self.state = _RUNNING
        try:
            return self.context.run(self.fn, *self.args)
        finally:
            with owner._lock:
                if self.state == _ABANDONED_RUNNING:
                    owner._abandoned -= 1
                self.state = _DONE
                if self.loop is not None:
                    owner._idle += 1  # this thread takes the next job
                owner._release_locked()

    def deliver(self, setter: Callable[[asyncio.Future[Any], Any], None], value: Any) -> None:
        """Hand the outcome to the waiting coroutine, in its event loop."""
        if self.loop is None or self.future is None:
            return
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for it
            self.loop.call_soon_threadsafe(setter, self.future, value)

    def abandon(self) -> None:
        owner = self.owner
        with owner._lock:
            if self.queued:  # still in line for a place: it never runs
                owner._waiters.remove(self)
                self.queued = False
                self.state = _DONE
            elif self.state == _WAITING:
                self.state = _ABANDONED_WAITING
                if self.loop is None:  # anyio's thread may never take it up: free it now
                    owner._release_locked()
                # else a thread of ours takes it up at once and frees its place then, so
                # there are never more threads than places
            elif self.state == _RUNNING:
                self.state = _ABANDONED_RUNNING
                owner._abandoned += 1


def _set_result(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():  # not cancelled meanwhile
        future.set_result(value)


def _set_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        if isinstance(exc, StopIteration):  # a future refuses it: it would end a generator
            stop = exc
            exc = RuntimeError(f"the function raised StopIteration: {stop}")
            exc.__cause__ = stop
        future.set_exception(exc)


def _checked(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"the limit of threads for sync tools must be an integer >= 1: {limit!r}")
    return limit


_INSTANCES: weakref.WeakSet[SyncThreads] = weakref.WeakSet()


def _forget_threads_after_fork() -> None:
    for instance in list(_INSTANCES):
        instance._forget_threads()


os.register_at_fork(after_in_child=_forget_threads_after_fork)

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
