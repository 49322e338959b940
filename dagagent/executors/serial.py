"""One task at a time, in topological order: the baseline, and the easiest to debug.

A plan still arriving runs in the order its tasks arrive (each depends only on tasks before
it, so that order is topological); when the run has caught up with the plan, it waits for
the next task. The elements of a map task run one at a time too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from ..results import FailurePolicy
from .base import BaseExecutor, Wakeup, block_descendants, halts, skip_if_blocked

if TYPE_CHECKING:
    from ..graph import PlanGraph
    from ..runner import TaskRunner

__all__ = ["SerialExecutor"]


class SerialExecutor(BaseExecutor):
    name = "serial"
    element_concurrency: int | None = 1

    async def run(self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy) -> None:
        results = runner.results
        tasks = graph.plan.tasks
        cancel = on_failure == "cancel"
        wake = Wakeup()
        stopped = anyio.CancelScope()

        def told(task_id: str | None) -> None:
            if task_id is None and graph.aborted and cancel:
                stopped.cancel()
            wake.set()

        graph.watch(told)
        try:
            with stopped:
                # A complete plan in topological order; a plan still arriving in the order
                # its tasks arrive (each depends only on tasks before it).
                order = graph.order if graph.complete else None
                done = 0
                while True:
                    pending = order if order is not None else [t.id for t in tasks]
                    while done < len(pending):
                        task_id = pending[done]
                        done += 1
                        if task_id in results or skip_if_blocked(graph, runner, task_id):
                            continue
                        r = await runner.run_task(task_id)
                        if not r.status.ok:
                            if cancel and halts(r):
                                return
                            block_descendants(graph, runner, task_id)
                    if graph.complete and (order is not None or done == len(tasks)):
                        return
                    await wake.wait()
        finally:
            graph.unwatch(told)
