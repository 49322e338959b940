"""One topological level at a time, each in an anyio task group.

A level starts when the previous one has finished (the *level barrier*). Within a level,
a failure under ``on_failure="cancel"`` cancels the running siblings at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio

from .base import BaseExecutor, FailurePolicy, block_descendants

if TYPE_CHECKING:
    from ..graph import PlanGraph
    from ..runner import TaskRunner

__all__ = ["LevelsExecutor"]


class LevelsExecutor(BaseExecutor):
    name = "levels"

    async def run(self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy) -> None:
        results = runner.results
        run_task = runner.run_task
        cancel = on_failure == "cancel"
        failed: list[str] = []

        for level in graph.levels:
            async with anyio.create_task_group() as tg:
                scope = tg.cancel_scope

                async def one(task_id: str, scope: anyio.CancelScope = scope) -> None:
                    r = await run_task(task_id)
                    if not r.status.ok:
                        failed.append(task_id)
                        if cancel:
                            scope.cancel()

                for task_id in level:
                    if task_id not in results:
                        tg.start_soon(one, task_id)
            if failed:
                if cancel:
                    return
                for task_id in failed:
                    block_descendants(graph, runner, task_id)
                failed.clear()
