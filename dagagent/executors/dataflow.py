"""Each task starts as soon as its own dependencies have succeeded (event-driven).

No level barrier and no polling: the tasks with nothing to wait for are queued at once in a
:class:`~dagagent.executors._pool.WorkerPool`; when a task succeeds, it counts down its
dependents and queues those whose last dependency it was. A failure under
``on_failure="cancel"`` cancels the task group (every running task, and those not started
yet); under ``"continue"`` only its descendants are skipped, and the other branches run to
their end.

A task that waits for a person's decision (``waiting``) never stops the run: its descendants
wait with it (marked skipped until the run resumes) and the other branches go on.

A plan still arriving: each task is considered when it arrives, and queued at once if its
dependencies have all succeeded by then; the run ends once the plan is complete and every
task queued has ended.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import anyio.abc

from ..results import FailurePolicy
from ._pool import WorkerPool
from .base import BaseExecutor, block_descendants, halts, skip_if_blocked

if TYPE_CHECKING:
    from ..graph import PlanGraph
    from ..runner import TaskRunner

__all__ = ["DataflowExecutor"]


class DataflowExecutor(BaseExecutor):
    name = "dataflow"

    async def run(self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy) -> None:
        async with anyio.create_task_group() as tg:
            flow = _Flow(graph, runner, tg, cancel=on_failure == "cancel")
            for task in list(graph.plan.tasks):
                flow.arrived(task.id)
            graph.watch(flow.arrived)  # a complete plan says so at once: the pool closes
            try:
                await flow.pool.drive(flow.run)
            finally:
                graph.unwatch(flow.arrived)


class _Flow:
    """One run's countdown: how many dependencies each task not queued yet waits for."""

    def __init__(
        self, graph: PlanGraph, runner: TaskRunner, tg: anyio.abc.TaskGroup, *, cancel: bool
    ) -> None:
        self.graph = graph
        self.runner = runner
        self.tg = tg
        self.cancel = cancel
        self.waiting: dict[str, int] = {}
        self.pool = WorkerPool(tg, open=True)

    def arrived(self, task_id: str | None) -> None:
        """A task is in the plan (``None``: the plan is complete): queue it if it can run."""
        graph, runner = self.graph, self.runner
        if task_id is None:
            if graph.aborted and self.cancel:
                self.tg.cancel_scope.cancel()
            self.pool.close()
            return
        if task_id in runner.results or skip_if_blocked(graph, runner, task_id):
            return
        deps, outputs = graph.dependencies[task_id], runner.outputs
        left = sum(1 for d in deps if d not in outputs) if outputs else len(deps)
        if left:
            self.waiting[task_id] = left
        else:
            self.pool.push(task_id)

    async def run(self, task_id: str) -> None:
        """Run one task, then queue the dependents it was the last dependency of."""
        r = await self.runner.run_task(task_id)
        if r.status.ok:
            waiting = self.waiting
            for child in self.graph.dependents[task_id]:
                left = waiting[child] - 1
                if left:
                    waiting[child] = left
                else:
                    del waiting[child]
                    self.pool.push(child)
        elif self.cancel and halts(r):
            self.tg.cancel_scope.cancel()
        else:  # failed under "continue", waiting, or skipped: the rest goes on without it
            block_descendants(self.graph, self.runner, task_id)
