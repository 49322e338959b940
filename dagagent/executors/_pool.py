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

**Batches, one after another** (the levels executor: one level, then the next). Given
``refill``, :meth:`WorkerPool.drive` asks it for the next batch of ids whenever every id so far
is done, and returns once it gives none. Workers out of ids then *park* (on asyncio) rather than
exit, and the next batch wakes them instead of spawning new ones: a level of tasks that all
block then costs a wake-up each, not a spawned task each. They are woken as spawned ones are
started: one first, to see whether it gets through the batch alone, then one per id still
queued. Two things keep that cheap at both ends of a batch. The last worker busy, out of ids,
takes the next batch itself rather than park and be woken for it (a chain: a batch of one
task after another, each with no turn of the event loop in between). And only as many workers
park as the batches still to come could keep busy (``wanted``): at the end of a wide level
that only a few tasks follow, the rest end at once rather than wait, alive, to be ended.

Workers stop taking ids once the task group is cancelled, and yield to the event loop every
:data:`YIELD_EVERY` tasks, so a long run of non-blocking tasks neither starves the loop nor
outlives a cancellation.

**How a worker is spawned (the hot path of tasks that block).** ``TaskGroup.start_soon`` gives
each task a cancel scope, an event and a wrapper coroutine of its own, and costs about four
times the asyncio task under it — with tools that all block (every task of a level at once),
more than everything else a task costs. A worker needs none of that: it never raises (a
task's failure is its result) and nobody waits for it alone. So on asyncio, a worker is an
asyncio task made *a member of the task group's cancel scope*, the way anyio makes the tasks
it spawns (:func:`_asyncio_spawner`): anyio's cancellation reaches it exactly as it reaches
them — at once when the group is cancelled (a failure, or any scope around it), again at every
await if the tool swallows it, and not inside a shielded scope — and the pool's owner waits
for every worker before the task group ends, also when it is cancelled. What anyio does in a
spawned task's done callback (it leaves the scope and the table of task states), a worker does
as its own last step: a callback would cost a scheduled handle and a turn of it per worker, and
in a level that blocks, every task has a worker of its own. This reads internals of anyio's
asyncio backend (its table of task states, a standard ``WeakKeyDictionary`` whose entries are
made and dropped directly, and a cancel scope's set of tasks); where they are not as expected
(another anyio or Python, trio, a loop with a task factory) the pool spawns with
``start_soon``.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from functools import partial
from typing import Any, Generic, TypeVar

import anyio
import anyio.abc
from anyio.lowlevel import checkpoint

from .._gc import MANY, bulk

__all__ = ["YIELD_EVERY", "WorkerPool"]

YIELD_EVERY = 64

R = TypeVar("R")

#: Starts ``n`` workers running the given coroutine function.
Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]], int], object]


class WorkerPool(Generic[R]):
    """Runs ``after(task_id, await run(task_id))`` for every pushed id, inside ``tg``.

    ``push`` may be called by ``after`` (a finished task making its dependents ready).
    :meth:`drive` must be awaited by the task that owns ``tg``; it returns when the queue is
    empty and no worker is left (and, for an ``open`` pool, once it has been closed).
    ``run`` must not raise, but for the cancellation of ``tg``.
    """

    __slots__ = (
        "_after",
        "_current",
        "_error",
        "_leave",
        "_on_block",
        "_open",
        "_parked",
        "_pausing",
        "_queue",
        "_refill",
        "_run",
        "_scope",
        "_tg",
        "_waiting",
        "_wake",
        "_wanted",
        "_workers",
    )

    def __init__(
        self,
        tg: anyio.abc.TaskGroup,
        run: Callable[[str], Awaitable[R]],
        after: Callable[[str, R], object],
        *,
        open: bool = False,
        on_block: Callable[[], object] | None = None,
    ) -> None:
        """``on_block``: called once, the first time the owner finds ids queued while a
        worker is blocked, before it starts workers for them (it may change the queue)."""
        self._tg = tg
        self._on_block = on_block
        self._open = open
        self._scope = tg.cancel_scope
        self._run = run
        self._after = after
        self._queue: deque[str] = deque()
        self._workers = 0
        self._pausing = 0  # workers yielding to the loop between tasks, not blocked
        #: Workers out of ids, waiting for the next batch (each on a future of its own:
        #: ``True`` takes more ids, ``False`` ends it). ``None``: workers exit instead.
        self._parked: list[asyncio.Future[bool]] | None = None
        #: How many parked workers the ids still to come could use at most (see drive).
        self._wanted: Callable[[], int] | None = None
        #: The next batch (see drive), while there may be one.
        self._refill: Callable[[], Iterable[str] | None] | None = None
        self._waiting = False
        self._wake = anyio.Event()
        self._error: BaseException | None = None  # a worker's, raised by drive()
        #: Set by the asyncio spawner (see :func:`_asyncio_spawner`): the current task, and
        #: what a worker does as its last step in place of anyio's done callback.
        self._current: Callable[[], asyncio.Task[Any] | None] | None = None
        self._leave: Callable[[asyncio.Task[Any], BaseException | None], None] = _no_leave

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

    def take_queued(self) -> list[str]:
        """The ids queued and not taken yet, in order, taken off the queue."""
        queued = list(self._queue)
        self._queue.clear()
        return queued

    def close(self) -> None:
        """No more ids will come: ``drive`` returns once the queued ones are done."""
        self._open = False
        if self._waiting:
            self._waiting = False
            self._wake.set()

    async def _worker(self) -> None:
        # Spawned on asyncio, a worker leaves its task group as its own last step (``_leave``;
        # see the module's docstring). That needs its first step to run: anyio cancels a task
        # only once it has started, and a worker is no one else's to cancel.
        current = self._current
        me = current() if current is not None else None  # this worker's task (first step)
        error: BaseException | None = None
        try:
            queue = self._queue
            run, after = self._run, self._after
            scope = self._scope
            parked = self._parked
            wanted = self._wanted
            done = 0
            while True:
                while queue and not scope.cancel_called:
                    task_id = queue.popleft()
                    after(task_id, await run(task_id))
                    done += 1
                    if done % YIELD_EVERY == 0:
                        self._pausing += 1
                        try:
                            await checkpoint()
                        finally:
                            self._pausing -= 1
                if parked is None or scope.cancel_called:
                    return
                refill = self._refill
                if refill is not None and self._workers - len(parked) == 1:
                    # The only worker not parked, out of ids: every id so far is done, and the
                    # next batch is this worker's to start, without parking and being woken (a
                    # chain of tasks: a batch of one each). The owner sees to a batch of more.
                    more = refill()
                    if more is None:
                        self._refill = None
                    else:
                        queue.extend(more)
                        if queue:
                            if self._waiting and len(queue) > 1:
                                self._waiting = False
                                self._wake.set()
                            continue
                if wanted is not None and len(parked) >= wanted():
                    return  # the ids still to come could not use one more parked worker
                # Out of ids: wait for the next batch (the owner wakes us, or ends us).
                wake: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
                parked.append(wake)
                if self._waiting and len(parked) == self._workers:  # the batch is done
                    self._waiting = False
                    self._wake.set()
                if not await wake:
                    return
        except GeneratorExit:
            me = None  # closed unfinished with its event loop: nobody is left to tell
            raise
        except Exception as exc:
            if me is None:
                raise  # spawned with start_soon: anyio sees to it
            error = exc  # a bug: drive() raises it (cancellations go through, as for a task)
        finally:
            if me is not None:
                self._leave(me, error)

    async def _spawned_worker(self) -> None:
        """A worker spawned with ``start_soon``: it counts itself out."""
        try:
            await self._worker()
        finally:
            self._ended()

    def _ended(self, error: BaseException | None = None) -> None:
        """A worker is gone (``error``: what it raised, cancellation aside)."""
        self._workers -= 1
        if error is not None and self._error is None:
            self._error = error
            self._scope.cancel()
        if self._waiting and (
            error is not None
            or (not self._open and self._workers == (len(self._parked) if self._parked else 0))
        ):
            self._waiting = False
            self._wake.set()

    async def drive(
        self,
        refill: Callable[[], Iterable[str] | None] | None = None,
        wanted: Callable[[], int] | None = None,
    ) -> None:
        """Run the queued ids (and those pushed meanwhile); with ``refill``, then the batch it
        gives, for as long as it gives one (called when every id so far is done).

        ``wanted``: at most how many workers the ids not yet queued could keep busy at once
        (asked when a worker runs out of ids): a worker parks only while fewer are parked,
        else it ends. Without it, every worker out of ids parks until the run is over: at
        the end of a wide batch, thousands of workers that nothing will wake but to end."""
        spawn = _asyncio_spawner(self)
        if refill is not None and spawn is not None:
            self._parked = []
            self._wanted = wanted
        self._refill = refill
        spawn = spawn or _group_spawner(self)
        try:
            await self._drive(spawn)
        except BaseException:
            # Cancelled (or failed): the task group must not end before its workers do.
            self._scope.cancel()
            self._unpark(False)
            if self._workers:
                with anyio.CancelScope(shield=True):
                    await self._wait_for(lambda: not self._workers)
            if self._error is not None:  # what cancelled the group (a worker's error)
                raise self._error from None
            raise
        finally:
            # Every worker is gone: nothing runs a task again. An ``after`` that pushes
            # holds the pool, which holds it: dropping both ends that cycle, which would
            # keep the run's graph and runner alive until a full collection.
            self._run, self._after = _stopped_run, _stopped_after
            self._on_block = self._wanted = self._refill = None
            self._leave = _no_leave  # (it holds the pool, through _ended)
        if self._error is not None:
            raise self._error

    def _unpark(self, more: bool, n: int | None = None) -> int:
        """Wake ``n`` parked workers (all of them: ``None``) to take more ids (``more``) or
        to end; returns how many were woken."""
        parked = self._parked
        if not parked:
            return 0
        woken = len(parked) if n is None else min(n, len(parked))
        for _ in range(woken):
            wake = parked.pop()
            if not wake.done():  # a cancelled worker's future is cancelled
                wake.set_result(more)
        return woken

    async def _drive(self, spawn: Spawn) -> None:
        queue = self._queue
        worker = self._worker
        parked = self._parked if self._parked is not None else ()
        while True:
            if self._error is not None:
                await self._wait_for(lambda: not self._workers)
                return
            if queue and not self._scope.cancel_called:
                active = self._workers - len(parked)
                if not active:
                    # Start one worker and see whether it gets through the queue alone.
                    n = 1
                elif self._pausing == active:
                    # Every worker only yielded to the loop and will come back for more.
                    n = 0
                elif self._on_block is not None:
                    on_block, self._on_block = self._on_block, None
                    on_block()
                    continue  # the queue may have changed
                else:
                    # Some worker is blocked: one new worker per queued id.
                    n = len(queue)
                if n:
                    n -= self._unpark(True, n)  # parked workers first
                if n:
                    self._workers += n
                    spawn(worker, n)
                await checkpoint()
                continue
            if self._workers == len(parked) and not self._open:
                # Every id so far is done: the next batch, if there is one.
                refill = self._refill
                if refill is not None and not self._scope.cancel_called:
                    more = refill()
                    if more is not None:
                        queue.extend(more)
                        continue
                    self._refill = None
                if not self._workers:
                    return
                self._unpark(False)  # no more batches: parked workers end
            await self._wait()

    async def _wait(self) -> None:
        self._wake = anyio.Event()
        self._waiting = True
        await self._wake.wait()

    async def _wait_for(self, done: Callable[[], bool]) -> None:
        while not done():
            await self._wait()


async def _stopped_run(task_id: str) -> Any:
    raise RuntimeError(f"task {task_id!r} pushed to a pool that has stopped")


def _no_leave(task: asyncio.Task[Any], error: BaseException | None) -> None:
    return None


def _stopped_after(task_id: str, result: object) -> None:
    raise RuntimeError(f"task {task_id!r} ended in a pool that has stopped")


def _group_spawner(pool: WorkerPool[Any]) -> Spawn:
    start = pool._tg.start_soon
    worker = pool._spawned_worker

    def spawn(_worker: Callable[[], Coroutine[Any, Any, None]], n: int) -> None:
        for _ in range(n):
            start(worker)

    return spawn


def _asyncio_spawner(pool: WorkerPool[Any]) -> Spawn | None:
    """Spawn workers as asyncio tasks that anyio counts in the task group's cancel scope (see
    the module's docstring), or ``None`` where that cannot be done as anyio does it."""
    try:
        loop = asyncio.get_running_loop()
        host = asyncio.current_task()
    except RuntimeError:  # not on asyncio
        return None
    if host is None or loop.get_task_factory() is not None or _backend is None:
        return None
    states, task_state = _backend
    scope = pool._scope
    tasks = getattr(scope, "_tasks", None)
    state = states.get(host)
    if (
        not isinstance(tasks, set)
        or host not in tasks
        or state is None
        or getattr(state, "cancel_scope", None) is not scope
    ):
        return None  # not the owner of the group, inside its scope, as anyio keeps it
    parent_id = id(host)
    ended = pool._ended
    Task = asyncio.Task
    # The table of task states is a WeakKeyDictionary (checked in _find_backend): its
    # entries are made and dropped here as its own methods would, without their calls.
    data, remove, ref = states.data, states._remove, weakref.ref

    def leave(task: asyncio.Task[Any], error: BaseException | None) -> None:
        tasks.discard(task)  # a finished task has left every scope it entered
        states._dirty_len = True  # what WeakKeyDictionary.pop() does
        data.pop(ref(task), None)
        ended(error)

    pool._current = _current_task_getter(loop, host)
    pool._leave = leave

    def start(worker: Callable[[], Coroutine[Any, Any, None]], n: int) -> None:
        for _ in range(n):
            task = Task(worker(), loop=loop)
            data[ref(task, remove)] = task_state(parent_id, scope)
            tasks.add(task)

    def spawn(worker: Callable[[], Coroutine[Any, Any, None]], n: int) -> None:
        if n < MANY:
            start(worker, n)
            return
        # A burst (a wide level that blocks): thousands of workers, each alive until its
        # task ends, that the collector would walk again and again for nothing. Nothing but
        # this loop runs meanwhile (no task factory here, and no task starts eagerly).
        with bulk(n):
            start(worker, n)

    return spawn


def _current_task_getter(
    loop: asyncio.AbstractEventLoop, host: asyncio.Task[Any]
) -> Callable[[], asyncio.Task[Any] | None]:
    """``asyncio.current_task`` for ``loop``: a lookup in asyncio's table of current tasks
    where there is one (the function costs several times that before Python 3.12)."""
    by_loop = getattr(asyncio.tasks, "_current_tasks", None)
    if isinstance(by_loop, dict) and by_loop.get(loop) is host:
        return partial(by_loop.get, loop)
    return asyncio.current_task


def _find_backend() -> tuple[Any, Any] | None:
    """anyio's asyncio backend internals the spawner needs: its table of task states (a
    ``WeakKeyDictionary`` as the standard library makes it), and the class of a state
    (``TaskState(parent_id, cancel_scope)``)."""
    try:
        from anyio._backends import _asyncio as backend

        states, task_state = backend._task_states, backend.TaskState
        probe = task_state(None, None)
        if probe.cancel_scope is not None or probe.parent_id is not None:
            return None
        if (
            type(states) is not weakref.WeakKeyDictionary
            or type(getattr(states, "data", None)) is not dict
            or not callable(getattr(states, "_remove", None))
            or not isinstance(getattr(states, "_dirty_len", None), bool)
        ):
            return None
    except Exception:  # another anyio, or another Python: spawn as anyio does
        return None
    return states, task_state


_backend = _find_backend()
