"""Each task starts as soon as its own dependencies have succeeded (event-driven).

No level barrier and no polling: when a task finishes, it counts down its dependents and
queues those whose last dependency it was in a :class:`~dagagent.executors._pool.WorkerPool`,
which starts them at once in the same task group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from ..results import TaskStatus
from ._pool import WorkerPool
from .base import BaseExecutor, FailurePolicy, block_descendants

if TYPE_CHECKING:
    from ..graph import PlanGraph
    from ..runner import TaskRunner

__all__ = ["DataflowExecutor"]

SUCCEEDED = TaskStatus.SUCCEEDED
REUSED = TaskStatus.REUSED


class DataflowExecutor(BaseExecutor):
    name = "dataflow"

    async def run(self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy) -> None:
        dependents = graph.dependents
        waiting = {n: len(d) for n, d in graph.dependencies.items()}
        run_task = runner.run_task
        cancel = on_failure == "cancel"

        async with anyio.create_task_group() as tg:
            pool: WorkerPool

            async def one(task_id: str) -> None:
                status = (await run_task(task_id)).status
                if status is SUCCEEDED or status is REUSED:
                    for child in dependents[task_id]:
                        left = waiting[child] - 1
                        waiting[child] = left
                        if left == 0:
                            push(child)
                elif cancel:
                    tg.cancel_scope.cancel()
                else:
                    block_descendants(graph, runner, task_id)

            pool = WorkerPool(tg, one)
            push = pool.push
            pool.extend(graph.levels[0] if graph.levels else ())
            await pool.drive()
