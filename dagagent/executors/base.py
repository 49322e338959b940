"""What every executor shares: the protocol, how unstarted tasks are finally marked, and
following a plan that is still arriving.

**A growing graph.** When a plan streams from a model, ``run`` gets a graph that is not
complete yet (``graph.complete`` is false; see :class:`~dagagent.graph.GrowingGraph`).
Executors ``watch`` it: each added task is considered as soon as it arrives, and ``run``
returns only once the graph is complete and its tasks are done. No executor polls. When the
graph is closed as ``aborted`` (a later task of the plan was invalid), the run stops like a
failure would stop it: under ``on_failure="cancel"`` running tasks are cancelled, under
``"continue"`` the tasks already added run to their end. A task that arrives after one of its
dependencies failed is skipped at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import anyio

from ..results import CONDITION_FALSE, FailurePolicy, TaskResult, TaskStatus

if TYPE_CHECKING:
    from ..graph import PlanGraph
    from ..runner import Invoker, TaskRunner

__all__ = [
    "Executor",
    "FailurePolicy",
    "Wakeup",
    "block_descendants",
    "finish_unstarted",
    "halts",
    "skip_if_blocked",
]


@runtime_checkable
class Executor(Protocol):
    """Decides *when* each task starts; :class:`~dagagent.runner.TaskRunner` does the rest.

    ``run`` calls ``runner.run_task(id)`` for tasks whose dependencies all succeeded, and
    ``runner.mark(id, status, reason)`` for tasks it decides never to start. Under
    ``on_failure="cancel"`` a failure stops the run: running tasks are cancelled. Under
    ``"continue"`` independent branches run to the end and only descendants of a failure
    are skipped. Whatever is left unmarked when ``run`` returns is marked by
    :func:`finish_unstarted`.
    """

    name: str
    #: At most this many elements of one map task at once (``None``: no bound of its own).
    element_concurrency: int | None

    @property
    def invoker(self) -> Invoker | None: ...

    def session(self) -> contextlib.AbstractAsyncContextManager[None]: ...

    async def prepare(self, graph: PlanGraph, runner: TaskRunner) -> None:
        """Called inside ``session()`` before the run starts (and before anything is
        recorded): refuse a plan this executor cannot run, with a clear error, or get ready
        for it (the Dask executor ships :meth:`TaskRunner.tools_in_use` to its workers)."""
        ...

    async def run(
        self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy
    ) -> None: ...


class BaseExecutor:
    """Defaults for executors that run tools in-process and need no setup."""

    name = "base"
    element_concurrency: int | None = None

    @property
    def invoker(self) -> Invoker | None:
        return None

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        yield

    async def prepare(self, graph: PlanGraph, runner: TaskRunner) -> None:
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def halts(result: TaskResult) -> bool:
    """Whether ``result`` stops the run under ``on_failure="cancel"``: the task ended without
    its output, and not because it waits for a person or a condition skipped it."""
    status = result.status
    return not status.ok and status is not TaskStatus.WAITING and not result.skipped_by_condition


def _blocker(graph: PlanGraph, runner: TaskRunner, task_id: str) -> str | None:
    """The dependency that keeps ``task_id`` from running: one that failed, was denied or
    skipped for a failure if there is one, else one a condition skipped, else one that was
    cancelled, else one that has not finished."""
    outputs = runner.outputs
    results = runner.results
    by_condition = cancelled = pending = None
    for d in graph.dependencies[task_id]:
        if d in outputs:
            continue
        r = results.get(d)
        if r is None:
            pending = pending or d
        elif r.status is TaskStatus.CANCELLED:
            cancelled = cancelled or d
        elif r.skipped_by_condition:
            by_condition = by_condition or d
        else:
            return d
    return by_condition or cancelled or pending


def _skip(runner: TaskRunner, task_id: str, upstream: str) -> None:
    """Mark ``task_id`` skipped because of task ``upstream`` (skipped by a condition when
    ``upstream`` was)."""
    r = runner.results.get(upstream)
    if r is None:
        runner.mark(
            task_id, TaskStatus.SKIPPED, f"not run: upstream task {upstream!r} did not finish"
        )
    elif r.skipped_by_condition:
        runner.mark(
            task_id,
            TaskStatus.SKIPPED,
            f"not run: upstream task {upstream!r} was skipped by a condition",
            CONDITION_FALSE,
        )
    else:
        runner.mark(
            task_id, TaskStatus.SKIPPED, f"not run: upstream task {upstream!r} {r.status.value}"
        )


def block_descendants(graph: PlanGraph, runner: TaskRunner, failed: str) -> None:
    """Mark every not-yet-started descendant of ``failed`` as skipped, right away."""
    results = runner.results
    stack = list(graph.dependents[failed])
    while stack:
        n = stack.pop()
        if n in results:
            continue
        _skip(runner, n, _blocker(graph, runner, n) or failed)
        stack.extend(graph.dependents[n])


def skip_if_blocked(graph: PlanGraph, runner: TaskRunner, task_id: str) -> bool:
    """For a task that arrived after the run began: mark it skipped (and say ``True``) when
    one of its dependencies has already finished without succeeding."""
    outputs, results = runner.outputs, runner.results
    if not any(d not in outputs and d in results for d in graph.dependencies[task_id]):
        return False
    blocker = _blocker(graph, runner, task_id)
    assert blocker is not None
    _skip(runner, task_id, blocker)
    return True


class Wakeup:
    """A flag an executor waits on while a growing graph has nothing for it to do: ``set``
    (from a graph watcher) wakes the waiter, or makes its next ``wait`` return at once."""

    __slots__ = ("_event", "_flag")

    def __init__(self) -> None:
        self._event = anyio.Event()
        self._flag = False

    def set(self) -> None:
        self._flag = True
        self._event.set()

    async def wait(self) -> None:
        if not self._flag:
            await self._event.wait()
        self._flag = False
        self._event = anyio.Event()


def finish_unstarted(graph: PlanGraph, runner: TaskRunner) -> None:
    """Give every task without a result its final status, in topological order: ``skipped``
    when a dependency did not succeed, else ``cancelled`` (the run stopped first)."""
    results = runner.results
    if len(results) == len(graph.tasks):
        return
    stopped = None
    for n in graph.order:
        if n in results:
            continue
        # A dependency that failed, was denied or skipped means the task could never have run:
        # skipped, whichever executor stopped first and whatever else it waited for.
        d = _blocker(graph, runner, n)
        if d is not None and d in results and results[d].status is not TaskStatus.CANCELLED:
            _skip(runner, n, d)
        else:
            stopped = stopped or f"not run: {runner.stop_cause()}"
            runner.mark(n, TaskStatus.CANCELLED, stopped)
