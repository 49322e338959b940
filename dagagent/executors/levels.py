"""One topological level at a time, in an anyio task group.

A level starts when the previous one has finished (the *level barrier*). Within a level,
every task is queued at once in a :class:`~dagagent.executors._pool.WorkerPool` of the level's
task group; a failure under ``on_failure="cancel"`` cancels the running siblings at once, and
the run stops there.

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

from collections.abc import Iterable
from typing import TYPE_CHECKING

import anyio

from ..results import FailurePolicy
from ._pool import WorkerPool
from .base import BaseExecutor, Wakeup, block_descendants, halts, skip_if_blocked

if TYPE_CHECKING:
    from ..graph import PlanGraph
    from ..runner import TaskRunner

__all__ = ["LevelsExecutor"]


class LevelsExecutor(BaseExecutor):
    name = "levels"

    async def run(self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy) -> None:
        if not graph.complete:
            await self._run_growing(graph, runner, on_failure)
            return
        results = runner.results
        for level in graph.levels:
            todo = [t for t in level if t not in results]  # not skipped already
            if todo and not await _run_level(todo, graph, runner, on_failure):
                return

    async def _run_growing(
        self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy
    ) -> None:
        results, outputs = runner.results, runner.outputs
        tasks = graph.plan.tasks
        wake = Wakeup()
        stopped = anyio.CancelScope()

        def told(task_id: str | None) -> None:
            if task_id is None and graph.aborted and on_failure == "cancel":
                stopped.cancel()
            wake.set()

        graph.watch(told)
        try:
            with stopped:
                waiting: list[str] = []
                seen = 0
                while True:
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
                    if wave:
                        if not await _run_level(wave, graph, runner, on_failure):
                            return
                    elif graph.complete:
                        return
                    else:
                        await wake.wait()
        finally:
            graph.unwatch(told)


async def _run_level(
    level: Iterable[str], graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy
) -> bool:
    """Run the tasks of one level together; ``False`` when a failure stops the run (a task
    waiting for a person's decision, or skipped by a condition, does not: its descendants
    wait or are skipped with it)."""
    cancel = on_failure == "cancel"
    ended_badly: list[str] = []
    async with anyio.create_task_group() as tg:

        async def run_one(task_id: str) -> None:
            r = await runner.run_task(task_id)
            if not r.status.ok:
                ended_badly.append(task_id)
                if cancel and halts(r):
                    tg.cancel_scope.cancel()

        pool = WorkerPool(tg)
        pool.extend(level)
        await pool.drive(run_one)
    if cancel and any(halts(runner.results[t]) for t in ended_badly):
        return False
    for task_id in ended_badly:
        block_descendants(graph, runner, task_id)
    return True
