"""Each task starts as soon as its own dependencies have succeeded (event-driven).

No level barrier and no polling: when a task finishes, it counts down its dependents and
starts those whose last dependency it was, in the same task group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from .base import BaseExecutor, FailurePolicy, block_descendants

if TYPE_CHECKING:
    from ..graph import PlanGraph
    from ..runner import TaskRunner

__all__ = ["DataflowExecutor"]


class DataflowExecutor(BaseExecutor):
    name = "dataflow"

    async def run(self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy) -> None:
        dependents = graph.dependents
        waiting = {n: len(d) for n, d in graph.dependencies.items()}
        run_task = runner.run_task
        cancel = on_failure == "cancel"

        async with anyio.create_task_group() as tg:
            start = tg.start_soon

            async def one(task_id: str) -> None:
                r = await run_task(task_id)
                if r.status.ok:
                    for child in dependents[task_id]:
                        left = waiting[child] - 1
                        waiting[child] = left
                        if left == 0:
                            start(one, child)
                elif cancel:
                    tg.cancel_scope.cancel()
                else:
                    block_descendants(graph, runner, task_id)

            for task_id in graph.levels[0] if graph.levels else ():
                start(one, task_id)
