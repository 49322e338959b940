"""One topological level at a time, in an anyio task group.

A level starts when the previous one has finished (the *level barrier*). Within a level,
a failure under ``on_failure="cancel"`` cancels the running siblings at once, and the run
stops there. The tasks of a level run in a :class:`~dagagent.executors._pool.WorkerPool`: all
of them concurrently, without a spawned task each for those that never block. One task group
and one pool serve every level: the pool asks for the next level once every task of the one
before has ended, and its workers wait for it rather than end (a level of tasks that block
costs a worker's wake-up each, not a spawned task each).

A task waiting for a person's decision (``waiting``) does not stop the run: its descendants
wait with it (marked skipped until the run resumes).

**A plan still arriving.** A task's level is the depth it will have in the whole plan, but no
level of a plan that is still being written is ever known to be full: a task that depends on
nothing may come last. So while the plan arrives, a level is a *wave*: every task known whose
dependencies have all succeeded starts together, and the next wave starts when the whole
wave has finished. A task that arrives while a wave runs waits for the next one: no task can
join a wave once it has started, and the barrier between waves holds as it does between
levels. For a plan that is complete when the run starts, the waves are exactly the levels.
"""

from __future__ import annotations

from functools import partial
from itertools import accumulate
from typing import TYPE_CHECKING

import anyio

from ..results import TaskStatus
from ._pool import WorkerPool
from .base import BaseExecutor, FailurePolicy, Wakeup, block_descendants, skip_if_blocked

if TYPE_CHECKING:
    from ..graph import PlanGraph
    from ..runner import TaskRunner

__all__ = ["LevelsExecutor"]

SUCCEEDED = TaskStatus.SUCCEEDED
REUSED = TaskStatus.REUSED
WAITING = TaskStatus.WAITING


class LevelsExecutor(BaseExecutor):
    name = "levels"

    async def run(self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy) -> None:
        if not graph.complete:
            await self._run_growing(graph, runner, on_failure)
            return
        results = runner.results
        cancel = on_failure == "cancel"
        failed: list[str] = []
        blocked = False  # whether a task of a later level may have a result already
        levels = iter(graph.levels)
        # The most workers the levels still to come could use (the most tasks of any of
        # them) is widest[-1], for the levels not handed out yet (one off per level): a
        # worker out of tasks ends rather than park when that many are parked already.
        widest = [0, *accumulate(map(len, reversed(graph.levels)), max)]
        handed_out = widest.pop

        def next_level() -> list[str] | None:
            """The next level's tasks still to run, once the one before has ended (the
            barrier); ``None`` when the run is over."""
            nonlocal blocked
            if failed:
                if cancel and _stops(runner, failed):
                    return None
                for task_id in failed:
                    block_descendants(graph, runner, task_id)
                failed.clear()
                blocked = True
            for level in levels:
                handed_out()
                if not blocked:
                    return level  # the pool copies it
                todo = [t for t in level if t not in results]
                if todo:
                    return todo
            return None

        # One task group and one pool for every level: a failure that stops the run cancels
        # the level running (what is left of the run), and the workers of a level wait for
        # the next one rather than end (see WorkerPool.drive's refill).
        async with anyio.create_task_group() as tg:
            scope = tg.cancel_scope

            def ended(task_id: str, status: TaskStatus) -> None:
                if status is not SUCCEEDED and status is not REUSED:
                    failed.append(task_id)
                    if cancel and status is not WAITING:
                        scope.cancel()

            pool = WorkerPool(tg, runner.run_task_status, ended)
            await pool.drive(next_level, partial(widest.__getitem__, -1))

    async def _run_growing(
        self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy
    ) -> None:
        results, outputs = runner.results, runner.outputs
        run_task = runner.run_task_status
        cancel = on_failure == "cancel"
        tasks = graph.plan.tasks
        wake = Wakeup()
        running: list[anyio.CancelScope] = []
        stopped = False
        failed: list[str] = []

        def told(task_id: str | None) -> None:
            nonlocal stopped
            if task_id is None and graph.aborted and cancel:
                stopped = True
                for scope in running:
                    scope.cancel()
            wake.set()

        graph.watch(told)
        try:
            waiting: list[str] = []
            seen = 0
            while not stopped:
                waiting.extend(t.id for t in tasks[seen:])
                seen = len(tasks)
                wave: list[str] = []
                later: list[str] = []
                for task_id in waiting:
                    if task_id in results or skip_if_blocked(graph, runner, task_id):
                        continue
                    if all(d in outputs for d in graph.dependencies[task_id]):
                        wave.append(task_id)
                    else:
                        later.append(task_id)
                waiting = later
                if not wave:
                    if graph.complete:
                        return
                    await wake.wait()
                    continue
                async with anyio.create_task_group() as tg:
                    scope = tg.cancel_scope
                    running.append(scope)

                    def ended(
                        task_id: str, status: TaskStatus, scope: anyio.CancelScope = scope
                    ) -> None:
                        if status is not SUCCEEDED and status is not REUSED:
                            failed.append(task_id)
                            if cancel and status is not WAITING:
                                scope.cancel()

                    pool = WorkerPool(tg, run_task, ended)
                    pool.extend(wave)
                    await pool.drive()
                running.clear()
                if failed:
                    if cancel and _stops(runner, failed):
                        return
                    for task_id in failed:
                        block_descendants(graph, runner, task_id)
                    failed.clear()
        finally:
            graph.unwatch(told)


def _stops(runner: TaskRunner, ended: list[str]) -> bool:
    """Whether a level's unsuccessful tasks stop the run: a failure does, a task waiting for
    a person's decision does not (its descendants wait with it)."""
    return any(runner.results.status(t) is not WAITING for t in ended)
