"""Each task starts as soon as its own dependencies have succeeded (event-driven).

No level barrier and no polling: when a task finishes, it counts down its dependents and
queues those whose last dependency it was in a :class:`~dagagent.executors._pool.WorkerPool`,
which starts them at once in the same task group (a worker with nothing left to run waits
for more while other tasks still run, rather than end).

Until a task blocks, there is nothing to count: every task is queued in topological order
and one worker runs them one after another, each after all of its dependencies (a plan of
tools that never block, cached or pure-compute ones, runs so to the end). The first time a
task blocks with others queued, or one does not succeed, the countdown takes over for the
tasks not started yet: those whose dependencies have all succeeded stay queued (and start at
once, beside the blocked one), the others wait for theirs.

A task that waits for a person's decision (``waiting``) never stops the run: its descendants
wait with it (marked skipped until the run resumes) and the other branches go on.

A plan still arriving: each task is considered when it arrives, and queued at once if its
dependencies have all succeeded by then; the pool stays open until the plan is complete.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from ..results import TaskStatus
from ._pool import WorkerPool
from .base import BaseExecutor, FailurePolicy, block_descendants, skip_if_blocked

if TYPE_CHECKING:
    from ..graph import PlanGraph
    from ..runner import TaskRunner

__all__ = ["DataflowExecutor"]

SUCCEEDED = TaskStatus.SUCCEEDED
REUSED = TaskStatus.REUSED
WAITING = TaskStatus.WAITING


def _counting_pool(
    tg: anyio.abc.TaskGroup,
    graph: PlanGraph,
    runner: TaskRunner,
    waiting: dict[str, int],
    *,
    cancel: bool,
    open: bool = False,
    in_order: bool = False,
) -> WorkerPool[TaskStatus]:
    """A pool that runs each task pushed to it, then counts down its dependents' ``waiting``
    and pushes those that reach 0; a task that did not succeed cancels the run (``cancel``)
    or blocks its descendants (always, when it waits for a decision). The hot path of the
    executor: one closure per run.

    ``in_order``: every task is queued at once, in topological order, and nothing is counted
    while one worker runs them one after another (each task's dependencies have then all
    succeeded before it starts). The countdown starts the first time a task blocks with
    others queued, or does not succeed: ``waiting`` is then filled in for the tasks still
    queued, and only those with nothing left to wait for stay in the queue."""
    dependents: Mapping[str, Sequence[str]] = {} if in_order else graph.dependents
    counting = not in_order

    def count() -> None:
        nonlocal counting, dependents
        if counting:
            return
        counting = True
        dependents = graph.dependents
        dependencies, outputs, results = graph.dependencies, runner.outputs, runner.results
        ready = []
        for task_id in pool.take_queued():
            left = 0
            for d in dependencies[task_id]:
                if d not in outputs:
                    left += 1
            if left:
                waiting[task_id] = left
            elif task_id not in results:  # (a task skipped already is not run)
                ready.append(task_id)
        pool.extend(ready)

    def ended(task_id: str, status: TaskStatus) -> None:
        if status is SUCCEEDED or status is REUSED:
            if counting:
                for child in dependents[task_id]:
                    left = waiting[child] - 1
                    if left:
                        waiting[child] = left
                    else:
                        del waiting[child]  # what is left in ``waiting`` is still to come
                        push(child)
        elif cancel and status is not WAITING:
            tg.cancel_scope.cancel()
        else:  # failed under "continue", or waiting: the rest goes on without it
            block_descendants(graph, runner, task_id)
            count()

    pool = WorkerPool(
        tg, runner.run_task_status, ended, open=open, on_block=count if in_order else None
    )
    push = pool.push
    return pool


def _no_more() -> None:
    """No batch after the first: given as ``refill``, so that a worker out of ready tasks
    parks until one of the running tasks makes more ready, rather than end."""
    return None


class DataflowExecutor(BaseExecutor):
    name = "dataflow"

    async def run(self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy) -> None:
        if not graph.complete:
            await self._run_growing(graph, runner, on_failure)
            return
        waiting: dict[str, int] = {}  # filled in when the countdown starts
        async with anyio.create_task_group() as tg:
            pool = _counting_pool(
                tg, graph, runner, waiting, cancel=on_failure == "cancel", in_order=True
            )
            pool.extend(graph.order)
            # A worker out of tasks parks only while fewer are parked than tasks still to
            # come (those not yet ready): at the end of a wide level, the rest end at once.
            await pool.drive(_no_more, waiting.__len__)

    async def _run_growing(
        self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy
    ) -> None:
        dependencies = graph.dependencies
        outputs, results = runner.outputs, runner.results
        waiting: dict[str, int] = {}
        cancel = on_failure == "cancel"

        async with anyio.create_task_group() as tg:
            pool = _counting_pool(tg, graph, runner, waiting, cancel=cancel, open=True)

            def told(task_id: str | None) -> None:
                if task_id is None:
                    if graph.aborted and cancel:
                        tg.cancel_scope.cancel()
                    pool.close()
                    return
                if task_id in results or skip_if_blocked(graph, runner, task_id):
                    waiting[task_id] = -1  # never counts down to 0
                    return
                left = sum(1 for d in dependencies[task_id] if d not in outputs)
                waiting[task_id] = left
                if left == 0:
                    pool.push(task_id)

            for task in list(graph.plan.tasks):
                told(task.id)
            graph.watch(told)
            try:
                await pool.drive()
            finally:
                graph.unwatch(told)
