"""One task at a time, in topological order: the baseline, and the easiest to debug.

A plan still arriving runs in the order its tasks arrive (each depends only on tasks before
it, so that order is topological); when the run has caught up with the plan, it waits for
the next task. The elements of a map task run one at a time too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from ..results import TaskStatus
from .base import BaseExecutor, FailurePolicy, Wakeup, block_descendants, skip_if_blocked

if TYPE_CHECKING:
    from ..graph import PlanGraph
    from ..runner import TaskRunner

__all__ = ["SerialExecutor"]


class SerialExecutor(BaseExecutor):
    name = "serial"

    async def run(self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy) -> None:
        runner.element_concurrency = 1
        if not graph.complete:
            await self._run_growing(graph, runner, on_failure)
            return
        results = runner.results
        for task_id in graph.order:
            if task_id in results:  # skipped because of an earlier failure
                continue
            status = await runner.run_task_status(task_id)
            if not status.ok:
                if on_failure == "cancel" and status is not TaskStatus.WAITING:
                    return
                block_descendants(graph, runner, task_id)

    async def _run_growing(
        self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy
    ) -> None:
        results = runner.results
        tasks = graph.plan.tasks
        cancel = on_failure == "cancel"
        wake = Wakeup()
        scope = anyio.CancelScope()

        def told(task_id: str | None) -> None:
            if task_id is None and graph.aborted and cancel:
                scope.cancel()
            wake.set()

        graph.watch(told)
        try:
            with scope:
                done = 0
                while True:
                    while done < len(tasks):
                        task_id = tasks[done].id
                        done += 1
                        if task_id in results or skip_if_blocked(graph, runner, task_id):
                            continue
                        status = await runner.run_task_status(task_id)
                        if not status.ok:
                            if cancel and status is not TaskStatus.WAITING:
                                return
                            block_descendants(graph, runner, task_id)
                    if graph.complete:
                        return
                    await wake.wait()
        finally:
            graph.unwatch(told)
