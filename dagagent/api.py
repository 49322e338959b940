"""``execute`` and ``execute_sync``: validate a plan, run it, return a :class:`RunResult`."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from .errors import ConfigError
from .events import (
    Emitter,
    Listener,
    PlanExtended,
    RunFinished,
    RunStarted,
    enabled_for,
    get_logger,
)
from .executors import Executor, finish_unstarted, get_executor
from .graph import PlanGraph, critical_path, validate
from .plan import AgentTask, Plan, ToolTask
from .results import ApprovalAnswer, RunResult, RunStatus, TaskResult, TaskStatus
from .runner import (
    DEFAULT_MAX_ELEMENTS,
    AgentTaskRunner,
    Interceptor,
    RunTelemetry,
    TaskRetryPolicy,
    TaskRunner,
)
from .tools import connected

if TYPE_CHECKING:
    from .store import RunStore
    from .tools import Registry, Tool

__all__ = ["Resuming", "execute", "execute_sync", "new_run_id"]


def new_run_id() -> str:
    """A new run id: 12 lowercase hex digits."""
    return uuid.uuid4().hex[:12]


async def execute(
    plan: Plan | PlanGraph | Mapping[str, Any] | str | Path,
    registry: Registry | None = None,
    *,
    executor: str | Executor = "dataflow",
    on_failure: str = "cancel",
    max_concurrency: int | None = None,
    max_elements: int = DEFAULT_MAX_ELEMENTS,
    retry: TaskRetryPolicy | None = None,
    interceptors: Sequence[Interceptor] = (),
    listeners: Sequence[Listener] = (),
    llm: Any = None,
    agent_runner: AgentTaskRunner | None = None,
    reuse: Mapping[str, tuple[str, Any]] | None = None,
    run_id: str | None = None,
    parent_id: str | None = None,
    store: RunStore | str | Path | None = None,
    resuming: Resuming | None = None,
) -> RunResult:
    """Validate ``plan`` against ``registry`` and run it.

    - ``executor``: ``"dataflow"`` (default; each task as soon as its own dependencies are
      done), ``"levels"`` (one topological level at a time), ``"serial"``, ``"dask"``, or an
      executor object.
    - ``on_failure``: ``"cancel"`` (default; cancel running tasks, mark the rest) or
      ``"continue"`` (independent branches run on; descendants of a failure are skipped).
    - ``max_concurrency``: at most this many tasks run at once across the run (a task takes
      its slot before it starts and holds it until it finishes, retries included; each
      element of a map task takes one).
    - ``max_elements``: the longest list a map task (``for_each``) may expand (default
      10,000); a longer one fails that task with :class:`~dagagent.errors.MapError`.
    - ``interceptors``: middleware around every tool call (see
      :class:`~dagagent.runner.ToolInvocation`).
    - ``listeners``: callables receiving every run event (see :mod:`dagagent.events`).
    - ``llm``: the model that agent tasks (``instruction``) use; what they used (``calls``,
      ``input_tokens``, ``output_tokens``, ``total_tokens``) is ``RunResult.usage``.
    - ``reuse``: ``{task_id: (fingerprint, output)}`` from an earlier run; a task whose
      fingerprint is unchanged is not run again and gets status ``reused``.
    - ``store``: record the run (plan and every task result, durable as each task finishes)
      in this :class:`~dagagent.store.RunStore` or SQLite file (see :mod:`dagagent.store`);
      what the store could not write is ``RunResult.record_loss``.

    ``resuming`` is how :func:`dagagent.resume` continues a paused run (its id, the results
    recorded before the pause, the decisions a person took); call that instead.

    ``plan`` may also be a :class:`~dagagent.growing.GrowingGraph` that is still being
    written (a streamed plan): tasks start as they are added and the run ends once the graph
    is closed and its tasks are done; the run's record follows the plan as it grows.

    Raises :class:`~dagagent.errors.PlanValidationError` before anything runs if the plan is
    invalid. Task failures do not raise: inspect the result or call ``raise_for_status()``.
    Nothing is left running when this returns or raises; cancelling the caller cancels the run.
    """
    if on_failure not in ("cancel", "continue"):
        raise ConfigError(f"on_failure must be 'cancel' or 'continue', not {on_failure!r}")
    if max_concurrency is not None and max_concurrency < 1:
        raise ConfigError(f"max_concurrency must be at least 1, not {max_concurrency}")
    if max_elements < 0:
        raise ConfigError(f"max_elements must be at least 0, not {max_elements}")
    graph = plan if isinstance(plan, PlanGraph) else validate(plan, registry)
    exe = get_executor(executor)
    run_id = run_id or new_run_id()
    log = get_logger(run_id=run_id)
    meter = None
    growing = not graph.complete  # a streamed plan: tasks arrive while it runs
    if llm is not None and (
        growing or (not graph.plain and any(isinstance(t, AgentTask) for t in graph.plan.tasks))
    ):
        if agent_runner is None:
            agent_runner = _default_agent_runner()
        from .llm import MeteredLLM, UsageTracker

        meter = UsageTracker()
        llm = MeteredLLM(llm, meter)  # RunResult.usage: what the agent tasks used
    listeners = tuple(listeners)
    recorder = None
    if store is not None:
        from .store import RunRecorder

        # checks the run id; starts nothing yet
        recorder = RunRecorder(store, run_id, resumed=resuming is not None)

    # The recorder hears the run's own events after the listeners, and takes each task's
    # result straight from the runner (no event is made for it when nobody else listens).
    run_listeners: tuple[Listener, ...] = listeners if recorder is None else (*listeners, recorder)
    emit = Emitter(run_listeners, log) if run_listeners else None
    # Tools bound to a connection (MCP sessions) get it for the run; one that cannot be
    # opened is a configuration error before anything is recorded.
    async with connected(_used_tools(graph, registry)), exe.session():
        runner = TaskRunner(
            graph,
            registry,
            run_id=run_id,
            retry=retry,
            max_concurrency=max_concurrency,
            interceptors=interceptors,
            listeners=listeners,
            invoker=exe.invoker,
            llm=llm,
            agent_runner=agent_runner,
            reuse=reuse,
            prior=resuming.prior if resuming is not None else None,
            answers=resuming.answers if resuming is not None else None,
            logger=log,
            on_failure=on_failure,
            max_elements=max_elements,
            record=recorder.record if recorder is not None else None,
            record_success=recorder.record_success if recorder is not None else None,
        )
        prepare = getattr(exe, "prepare", None)
        if prepare is not None:  # e.g. ship the tools to workers; fails before any record
            await prepare(graph, runner)
        if recorder is not None:
            recorder.start()
        if emit is not None:
            plan_now = _snapshot(graph.plan) if growing else graph.plan
            emit(RunStarted(run_id, plan_now, exe.name, parent_id))
        extended = None
        if emit is not None and growing:
            on_extended = emit

            def extended(task_id: str | None) -> None:
                if task_id is not None:  # before the task can start: its record needs it
                    on_extended(PlanExtended(run_id, _snapshot(graph.plan)))

            graph.watch(extended)
        log.info("run.started", tasks=len(graph), executor=exe.name)
        # OpenTelemetry, when the application set it up (None otherwise: nothing to do).
        runner.telemetry = otel = RunTelemetry.start(graph, run_id, exe.name, parent_id)
        if otel is not None:
            otel.scrub = runner.scrub
        started = time.time()
        interrupted = False
        failure: BaseException | None = None
        try:
            with otel.current() if otel is not None else nullcontext():
                await exe.run(graph, runner, on_failure)  # type: ignore[arg-type]
        except BaseException as exc:
            interrupted, failure = True, exc
            raise
        finally:
            if extended is not None:
                graph.unwatch(extended)
            ended: RunResult | None = None
            try:
                finish_unstarted(graph, runner)
                result = _result(graph, runner, exe.name, started, interrupted, parent_id)
                ended = result
                if meter is not None and meter.calls:
                    result.usage = meter.as_dict()
                if emit is not None:
                    emit(RunFinished(run_id, result))
            finally:
                if recorder is not None:
                    recorder.close()  # flush: every result so far is durable
                if otel is not None:
                    otel.end(ended, failure)
            if recorder is not None and recorder.loss is not None:
                result.record_loss = recorder.loss  # never claim a record that is not there
            if enabled_for(log, logging.INFO):  # counting 10,000 results costs 5 ms
                log.info("run.finished", status=result.status.value, **result.counts)
    return result


def _snapshot(plan: Plan) -> Plan:
    """The plan as it is now, for a record written later (a growing plan keeps changing)."""
    return Plan.model_construct(goal=plan.goal, tasks=list(plan.tasks))


def _used_tools(graph: PlanGraph, registry: Registry | None) -> list[Tool]:
    """The tools the plan's tasks can call (an agent task without a subset, or a plan still
    being written: all)."""
    if registry is None:
        return []
    if not graph.complete:
        return list(registry)  # a plan still arriving may call any of them
    if graph.tool_names is not None:  # listed by validation
        return [registry.get(n) for n in graph.tool_names if n in registry]
    names: dict[str, None] = {}
    for task in graph.plan.tasks:
        if type(task) is ToolTask:  # most tasks: one tool
            names[task.tool] = None
            continue
        used = task.tool_names
        if used is None:
            return list(registry)
        names.update(dict.fromkeys(used))
    return [registry.get(n) for n in names if n in registry]


_STOPPED = (TaskStatus.FAILED, TaskStatus.DENIED)


@dataclass(frozen=True)
class Resuming:
    """What :func:`dagagent.resume` hands :func:`execute` to continue a paused run: the
    results recorded before the pause (successes stand; an agent task that waited continues
    from its steps) and the decisions a person took, by task."""

    prior: Mapping[str, TaskResult]
    answers: Mapping[str, Sequence[ApprovalAnswer]]


def _result(
    graph: PlanGraph,
    runner: TaskRunner,
    executor: str,
    started: float,
    interrupted: bool,
    parent_id: str | None,
) -> RunResult:
    # In plan order, as they are held: a plain success's result is built when read.
    tasks = runner.results.ordered(graph.tasks)
    # Only the runner's own tables here: reading 10,000 results again from memory costs
    # about a microsecond each. A task has an output exactly when it succeeded or was reused.
    if interrupted:
        status = RunStatus.CANCELLED
    elif len(runner.outputs) == len(tasks):
        status = RunStatus.SUCCEEDED
    else:
        statuses = [s for _, s in tasks.statuses()]
        if TaskStatus.WAITING in statuses and not any(s in _STOPPED for s in statuses):
            status = RunStatus.PAUSED  # nothing else could run: the rest waits for a person
        else:
            status = RunStatus.FAILED
    took = runner.took  # what finished_critical_path would find in the results
    order = graph.order
    if len(took) != len(order):  # only the tasks that finished
        order = [t for t in order if t in took]
    cp_len, cp = critical_path(order, graph.dependencies, took)
    return RunResult.model_construct(
        run_id=runner.run_id,
        status=status,
        goal=graph.plan.goal,
        executor=executor,
        tasks=tasks,
        started_at=started,
        finished_at=time.time(),
        critical_path=cp,
        critical_path_s=cp_len,
        parent_id=parent_id,
        usage=None,
    )


def _default_agent_runner() -> AgentTaskRunner | None:
    try:
        from .agent.node import run_agent_node
    except ImportError:  # the agent package is optional at this layer
        return None
    return run_agent_node


def execute_sync(
    plan: Plan | PlanGraph | Mapping[str, Any] | str | Path,
    registry: Registry | None = None,
    **options: Any,
) -> RunResult:
    """:func:`execute` for scripts: runs its own event loop (do not call it from async code)."""

    async def main() -> RunResult:
        return await execute(plan, registry, **options)

    return anyio.run(main)
