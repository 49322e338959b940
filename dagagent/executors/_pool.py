"""Ready tasks run by as few workers as the work allows.

Spawning a task in an anyio task group costs several times what running a task that does not
block (a cached or pure-compute tool) costs. So the levels and dataflow executors do not spawn
one per plan task: a :class:`WorkerPool` keeps a queue of ready task ids and a few *workers*,
each spawned with the group's ``start_soon``, each running queued ids one after another.

The pool's owner *drives* it: whenever the owner gets the event loop while ids are still
queued, every worker is waiting on something (a tool that blocks), so it starts one worker per
queued id (one, when there is no worker at all). Tasks that never block therefore run back to
back in one worker; a task that blocks delays its queued siblings by one turn of the event
loop, then each of them has a worker of its own and they run side by side, as if each had been
spawned (and a Dask cluster gets them in one batch).

A worker yields to the event loop every :data:`YIELD_EVERY` ids, so that a long run of quick
tasks neither starves the loop nor outlives a cancellation (the owner knows such a pause from
a block), and takes no more ids once the group is cancelled.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Iterable

import anyio
import anyio.abc
from anyio.lowlevel import checkpoint, checkpoint_if_cancelled

__all__ = ["YIELD_EVERY", "WorkerPool"]

#: A worker yields to the event loop after this many tasks in a row.
YIELD_EVERY = 64


class WorkerPool:
    """Runs ``await run(task_id)`` for every id pushed, in the task group ``tg``, while
    :meth:`drive` (awaited by the task that owns ``tg``) runs.

    ``run`` may push more ids (a finished task making its dependents ready); it must not raise
    but for the cancellation of ``tg``. :meth:`drive` returns once the queue is empty and no
    worker is left, and, for an ``open`` pool, once :meth:`close` has been called; if the
    surrounding scope was cancelled by then, it raises the cancellation instead."""

    def __init__(self, tg: anyio.abc.TaskGroup, *, open: bool = False) -> None:
        self._tg = tg
        self._open = open
        self._queue: deque[str] = deque()
        self._workers = 0  # alive
        self._pausing = 0  # yielding to the loop between two ids: not blocked
        self._wake = anyio.Event()

    def push(self, task_id: str) -> None:
        self._queue.append(task_id)
        self._wake.set()

    def extend(self, task_ids: Iterable[str]) -> None:
        self._queue.extend(task_ids)
        self._wake.set()

    def close(self) -> None:
        """No more ids will come: :meth:`drive` returns once the queued ones are done."""
        self._open = False
        self._wake.set()

    async def drive(self, run: Callable[[str], Awaitable[object]]) -> None:
        """Start workers running ``run`` on the queued ids (see the module's docstring) until
        every id is done and no more can come."""
        queue, scope = self._queue, self._tg.cancel_scope
        while True:
            if queue and not scope.cancel_called:
                if not self._workers:
                    n = 1  # see whether one worker gets through the queue alone
                elif self._workers > self._pausing:
                    n = len(queue)  # the workers are blocked: one per queued id
                else:
                    n = 0  # they only yielded to the loop, and come back for more
                for _ in range(n):
                    self._workers += 1
                    self._tg.start_soon(self._worker, run)
                await checkpoint()
            elif self._workers or self._open:
                self._wake = anyio.Event()
                await self._wake.wait()  # a worker ended, or ids came
            else:
                # Every id is done, or its worker was cancelled. If the run was cancelled, say
                # so now: anyio cancels a task while it waits, not while it is being woken, so
                # the wait above may have returned normally, and the group ending next raises
                # nothing when no task is left in it. The owner would go on (the levels
                # executor to its next level, with a cancelled task's output missing).
                await checkpoint_if_cancelled()
                return

    async def _worker(self, run: Callable[[str], Awaitable[object]]) -> None:
        queue, scope = self._queue, self._tg.cancel_scope
        done = 0
        try:
            while queue and not scope.cancel_called:
                await run(queue.popleft())
                done += 1
                if done % YIELD_EVERY == 0:
                    self._pausing += 1
                    try:
                        await checkpoint()
                    finally:
                        self._pausing -= 1
        finally:
            self._workers -= 1
            self._wake.set()
