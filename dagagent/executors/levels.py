"""One topological level at a time, each in an anyio task group.

A level starts when the previous one has finished (the *level barrier*). Within a level,
a failure under ``on_failure="cancel"`` cancels the running siblings at once. The tasks of a
level run in a :class:`~dagagent.executors._pool.WorkerPool`: all of them concurrently, without
a spawned task each for those that never block.
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

__all__ = ["LevelsExecutor"]

SUCCEEDED = TaskStatus.SUCCEEDED
REUSED = TaskStatus.REUSED


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
                    status = (await run_task(task_id)).status
                    if status is not SUCCEEDED and status is not REUSED:
                        failed.append(task_id)
                        if cancel:
                            scope.cancel()

                pool = WorkerPool(tg, one)
                pool.extend(t for t in level if t not in results)
                await pool.drive()
            if failed:
                if cancel:
                    return
                for task_id in failed:
                    block_descendants(graph, runner, task_id)
                failed.clear()
