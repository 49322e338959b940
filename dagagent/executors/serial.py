"""One task at a time, in topological order: the baseline, and the easiest to debug."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import BaseExecutor, FailurePolicy, block_descendants

if TYPE_CHECKING:
    from ..graph import PlanGraph
    from ..runner import TaskRunner

__all__ = ["SerialExecutor"]


class SerialExecutor(BaseExecutor):
    name = "serial"

    async def run(self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy) -> None:
        results = runner.results
        for task_id in graph.order:
            if task_id in results:  # skipped because of an earlier failure
                continue
            r = await runner.run_task(task_id)
            if not r.status.ok:
                if on_failure == "cancel":
                    return
                block_descendants(graph, runner, task_id)
