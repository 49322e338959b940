"""A queue of ready tasks drained by as few spawned workers as the work allows.

Spawning a task in an anyio task group costs far more than running a task that does not
block (a cached or pure-compute tool): tens of microseconds against a few. So instead of one
spawned task per plan task, a :class:`WorkerPool` keeps a queue of ready task ids and a few
*workers* in the task group; a worker runs queued ids one after another and exits when the
queue is empty. The owner of the task group *drives* the pool: whenever it gets the event
loop and ids are still queued, every worker is waiting on something (I/O, a timer, a
limiter), so it spawns one new worker per queued id. Tasks that do not block therefore run
back to back in one worker, and a task that blocks delays its queued siblings by about one
turn of the event loop — then each of them has a worker of its own and they run
concurrently, exactly as if each had been spawned.

A pool made with ``open=True`` (a plan still arriving) keeps driving, waiting for more ids,
until :meth:`WorkerPool.close` is called.

Workers stop taking ids once the task group is cancelled, and yield to the event loop every
:data:`YIELD_EVERY` tasks, so a long run of non-blocking tasks neither starves the loop nor
outlives a cancellation.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Iterable

import anyio
import anyio.abc
from anyio.lowlevel import checkpoint

__all__ = ["YIELD_EVERY", "WorkerPool"]

YIELD_EVERY = 64


class WorkerPool:
    """Runs ``handle(task_id)`` for every pushed id, inside ``tg``.

    ``push`` may be called by ``handle`` itself (a finished task making its dependents ready).
    :meth:`drive` must be awaited by the task that owns ``tg``; it returns when the queue is
    empty and no worker is left (and, for an ``open`` pool, once it has been closed).
    """

    __slots__ = (
        "_handle",
        "_open",
        "_pausing",
        "_queue",
        "_scope",
        "_tg",
        "_waiting",
        "_wake",
        "_workers",
    )

    def __init__(
        self,
        tg: anyio.abc.TaskGroup,
        handle: Callable[[str], Awaitable[object]],
        *,
        open: bool = False,
    ) -> None:
        self._tg = tg
        self._open = open
        self._scope = tg.cancel_scope
        self._handle = handle
        self._queue: deque[str] = deque()
        self._workers = 0
        self._pausing = 0  # workers yielding to the loop between tasks, not blocked
        self._waiting = False
        self._wake = anyio.Event()

    def push(self, task_id: str) -> None:
        self._queue.append(task_id)
        if self._waiting:
            self._waiting = False
            self._wake.set()

    def extend(self, task_ids: Iterable[str]) -> None:
        self._queue.extend(task_ids)
        if self._waiting and self._queue:
            self._waiting = False
            self._wake.set()

    def close(self) -> None:
        """No more ids will come: ``drive`` returns once the queued ones are done."""
        self._open = False
        if self._waiting:
            self._waiting = False
            self._wake.set()

    async def _worker(self) -> None:
        queue = self._queue
        handle = self._handle
        scope = self._scope
        done = 0
        try:
            while queue and not scope.cancel_called:
                await handle(queue.popleft())
                done += 1
                if done % YIELD_EVERY == 0:
                    self._pausing += 1
                    try:
                        await checkpoint()
                    finally:
                        self._pausing -= 1
        finally:
            self._workers -= 1
            if self._waiting and not self._workers and not self._open:
                self._waiting = False
                self._wake.set()

    async def drive(self) -> None:
        queue = self._queue
        start = self._tg.start_soon
        while True:
            if queue and not self._scope.cancel_called:
                workers = self._workers
                if not workers:
                    # Start one worker and see whether it gets through the queue alone.
                    n = 1
                elif self._pausing == workers:
                    # Every worker only yielded to the loop and will come back for more.
                    n = 0
                else:
                    # Some worker is blocked: one new worker per queued id.
                    n = len(queue)
                self._workers = workers + n
                for _ in range(n):
                    start(self._worker)
                await checkpoint()
                continue
            if not self._workers and not self._open:
                return
            self._wake = anyio.Event()
            self._waiting = True
            await self._wake.wait()
