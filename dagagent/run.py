"""``execute`` and ``execute_sync``: validate a plan, run it, return a :class:`RunResult`.

A run is assembled in one place (:class:`_Run`): the task runner with its tool-call seam,
the run store's recorder, OpenTelemetry, the listeners and the redaction of what leaves the
runner, each given to the others when they are made.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from .errors import DriverLostError
from .events import Emitter, Listener, PlanExtended, RunFinished, RunStarted, get_logger
from .executors import Executor, finish_unstarted, get_executor
from .graph import PlanGraph, finished_critical_path, validate
from .plan import AgentTask, Plan
from .results import FAILURES, ApprovalAnswer, RunResult, RunStatus, TaskResult, TaskStatus
from .runner import (
    AgentTaskRunner,
    CallLedger,
    Interceptor,
    Redaction,
    RunTelemetry,
    TaskRunner,
    ToolCalls,
)
from .settings import RunSettings
from .tools import connected

if TYPE_CHECKING:
    from .llm import LLM, UsageTracker
    from .store import EffectRecord, RunRecorder, RunStore
    from .store._effects import EffectJournal
    from .tools import Registry, Tool

__all__ = ["Resuming", "execute", "execute_sync", "new_run_id"]


def new_run_id() -> str:
    """A new run id: 12 lowercase hex digits."""
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class Resuming:
    """What :func:`dagagent.resume` hands :func:`execute` to continue a paused or interrupted
    run: the results recorded before (successes stand; an agent task that waited continues
    from its steps), the decisions a person took, by task, and the record of its calls with
    side effects (a call that took effect is not made again; one in doubt is resolved)."""

    prior: Mapping[str, TaskResult]
    answers: Mapping[str, Sequence[ApprovalAnswer]]
    effects: Sequence[EffectRecord] = ()


async def execute(
    plan: Plan | PlanGraph | Mapping[str, Any] | str | Path,
    registry: Registry | None = None,
    *,
    settings: RunSettings | None = None,
    interceptors: Sequence[Interceptor] = (),
    listeners: Sequence[Listener] = (),
    llm: LLM | None = None,
    agent_runner: AgentTaskRunner | None = None,
    reuse: Mapping[str, tuple[str, Any]] | None = None,
    run_id: str | None = None,
    parent_id: str | None = None,
    store: RunStore | str | Path | None = None,
    resuming: Resuming | None = None,
    ledger: CallLedger | None = None,
) -> RunResult:
    """Validate ``plan`` against ``registry`` and run it.

    - ``settings``: how to run it (executor, failure policy, concurrency, map size, retry
      spacing): see :class:`~dagagent.RunSettings`.
    - ``interceptors``: middleware around every tool call (see
      :class:`~dagagent.runner.ToolInvocation`).
    - ``listeners``: callables receiving every run event (see :mod:`dagagent.events`).
    - ``llm``: the model that agent tasks (``instruction``) use; what they used is
      ``RunResult.usage``. ``agent_runner`` fills an agent task (default: the ReAct agent).
    - ``reuse``: ``{task_id: (fingerprint, output)}`` from an earlier run; a task whose
      fingerprint is unchanged is not run again and gets status ``reused``.
    - ``store``: record the run (plan, settings and every task result, durable as each task
      finishes) in this :class:`~dagagent.store.RunStore` or SQLite file (see
      :mod:`dagagent.store`); what the store could not write is ``RunResult.record_loss``.
      :func:`dagagent.resume` goes on with the settings recorded. Each call of a tool with
      side effects has its intent committed before it starts and its outcome after it ends
      (see ``docs/exactly-once.md``).

    - ``ledger``: the calls the tools' guardrails (``max_calls``, ``cooldown_s``) and the
      policies' limits count (see :class:`~dagagent.runner.CallLedger`): a new one for the
      run unless given one (``solve`` gives each round the solve's).

    ``resuming`` is how :func:`dagagent.resume` continues a paused run; call that instead.

    ``plan`` may also be a :class:`~dagagent.graph.GrowingGraph` that is still being written
    (a streamed plan): tasks start as they are added and the run ends once the graph is
    closed and its tasks are done; the run's record follows the plan as it grows.

    Raises :class:`~dagagent.errors.PlanValidationError` before anything runs if the plan is
    invalid. Task failures do not raise: inspect the result or call ``raise_for_status()``.
    Nothing is left running when this returns or raises; cancelling the caller cancels the run.
    """
    settings = settings or RunSettings()
    graph = plan if isinstance(plan, PlanGraph) else validate(plan, registry)
    run = _Run(
        graph,
        registry,
        settings,
        run_id=run_id or new_run_id(),
        parent_id=parent_id,
        listeners=tuple(listeners),
        store=store,
        resumed=resuming is not None,
    )
    async with AsyncExitStack() as stack:
        # Tools bound to a connection (MCP sessions) get it for the run; one that cannot be
        # opened is a configuration error before anything is recorded.
        await stack.enter_async_context(connected(_used_tools(graph, registry)))
        await stack.enter_async_context(run.executor.session())
        runner = run.runner(
            interceptors=interceptors,
            llm=llm,
            agent_runner=agent_runner,
            reuse=reuse,
            resuming=resuming,
            ledger=ledger,
        )
        # e.g. ship the tools to Dask workers; fails before anything is recorded
        await run.executor.prepare(graph, runner)
        return await run.go(runner)
    raise AssertionError("unreachable")  # pragma: no cover - the stack does not swallow


class _Run:
    """One run being assembled and run: its executor, runner, recorder, telemetry, events."""

    def __init__(
        self,
        graph: PlanGraph,
        registry: Registry | None,
        settings: RunSettings,
        *,
        run_id: str,
        parent_id: str | None,
        listeners: tuple[Listener, ...],
        store: RunStore | str | Path | None,
        resumed: bool,
    ) -> None:
        self.graph = graph
        self.registry = registry
        self.settings = settings
        self.executor: Executor = get_executor(settings.executor)
        self.run_id = run_id
        self.parent_id = parent_id
        self.log = get_logger(run_id=run_id)
        self.recorder: RunRecorder | None = None
        self.journal: EffectJournal | None = None
        if store is not None:
            from .store import RunRecorder

            # (an executor that follows calls made elsewhere, without the tools, says whether
            # they may come back in doubt, to be recorded here: ``reports_effects``)
            side_effects = (registry is not None and any(t.side_effects for t in registry)) or (
                getattr(self.executor, "reports_effects", False) is True
            )
            # checks the run id; starts nothing yet. The settings are kept for a resume (the
            # executor is the run's row's own column).
            kept = {k: v for k, v in settings.to_record().items() if k != "executor"}
            self.recorder = RunRecorder(
                store, run_id, resumed=resumed, side_effects=side_effects, settings=kept
            )
            if side_effects:
                from .store._effects import EffectJournal

                self.journal = EffectJournal(self.recorder.path)  # its thread starts on use
        # The listeners hear the run's events; the recorder hears them after the listeners
        # and takes each task's result from the runner (no event is made for it when nobody
        # else listens).
        everyone: tuple[Listener, ...] = (
            listeners if self.recorder is None else (*listeners, self.recorder)
        )
        self.emit = Emitter(everyone, self.log) if everyone else None
        self.task_events = Emitter(listeners, self.log) if listeners else None
        self.meter: UsageTracker | None = None
        #: A plan written while it runs: when each task joined it (for the record).
        self.planned_at: dict[str, float] = {}

    def runner(
        self,
        *,
        interceptors: Sequence[Interceptor],
        llm: LLM | None,
        agent_runner: AgentTaskRunner | None,
        reuse: Mapping[str, tuple[str, Any]] | None,
        resuming: Resuming | None,
        ledger: CallLedger | None = None,
    ) -> TaskRunner:
        """The run's task runner, with everything it works with."""
        graph, registry, settings = self.graph, self.registry, self.settings
        model: object = None
        if llm is not None and (
            not graph.complete or any(isinstance(t, AgentTask) for t in graph.plan.tasks)
        ):
            from .llm import MeteredLLM, UsageTracker

            self.meter = UsageTracker()
            model = MeteredLLM(llm, self.meter)  # RunResult.usage: what the agent tasks used
            if agent_runner is None:
                from .agent.node import run_agent_node

                agent_runner = run_agent_node
        redaction = Redaction(interceptors)
        if redaction and self.recorder is not None:
            # the stored plan hides what the redacting interceptors hide from the tools
            self.recorder.redact_plans(redaction.plan)
        # (an executor that hands the run to a process that traces it says so: ``traced_here``
        # false, as a streamed round's planner step on a worker, whose run the solve's driver
        # follows and traces)
        self.telemetry = (
            RunTelemetry.start(graph, self.run_id, self.executor.name, self.parent_id, redaction)
            if getattr(self.executor, "traced_here", True) is not False
            else None
        )
        from .runner import Effects

        effects = Effects(
            self.run_id,
            self.journal,
            resuming.effects if resuming is not None else (),
            in_doubt=settings.in_doubt,
            revised=self._parent_effects(),
            redaction=redaction,  # what the journal stores hides what the tools do not see
        )
        calls = ToolCalls(
            self.run_id,
            registry or _no_tools(),
            interceptors,
            self.executor.invoker,
            self.task_events,
            resuming.answers if resuming is not None else None,
            effects=effects,
            ledger=ledger,
        )
        return TaskRunner(
            graph,
            registry,
            run_id=self.run_id,
            calls=calls,
            retry=settings.retry,
            on_failure=settings.on_failure,
            max_concurrency=settings.max_concurrency,
            max_elements=settings.max_elements,
            element_concurrency=self.executor.element_concurrency,
            emit=self.task_events,
            record=self.recorder.record if self.recorder is not None else None,
            started=self.recorder.started if self.recorder is not None else None,
            telemetry=self.telemetry,
            redaction=redaction,
            llm=model,
            agent_runner=agent_runner,
            reuse=reuse,
            prior=resuming.prior if resuming is not None else None,
            logger=self.log,
        )

    def _parent_effects(self) -> Sequence[EffectRecord]:
        """The calls with side effects that took effect in the runs this one revises (its
        parent, in the same store, the parent's parent, ...): the same calls here are taken
        over, never made again; and their calls in doubt that a person resolved otherwise
        (made again with their key, or not made), with what other runs did under such a key
        (see :meth:`~dagagent.store.RunStore.inherited_effects` and
        :class:`~dagagent.runner.Effects`)."""
        if self.parent_id is None or self.journal is None or self.recorder is None:
            return ()
        from .errors import StoreError
        from .store import RunStore

        try:
            with RunStore(self.recorder.path) as store:
                if not store.exists(self.parent_id):
                    return ()
                return store.inherited_effects(self.parent_id, revising=self.run_id)
        except StoreError as exc:
            raise StoreError(
                f"cannot read the calls with side effects of run {self.parent_id}, which run "
                f"{self.run_id} revises: {exc}"
            ) from None

    async def go(self, runner: TaskRunner) -> RunResult:
        """Run the plan with ``runner``: recorded, announced and traced from start to end."""
        graph, emit, recorder, otel = self.graph, self.emit, self.recorder, self.telemetry
        growing = not graph.complete  # a streamed plan: tasks arrive while it runs
        if recorder is not None:
            recorder.start()
        if emit is not None:
            emit(RunStarted(self.run_id, _snapshot(graph.plan), self.executor.name, self.parent_id))
            if growing:
                graph.watch(self._extended)
        self.log.info("run.started", tasks=len(graph), executor=self.executor.name)
        started = time.time()
        failure: BaseException | None = None
        result: RunResult | None = None
        try:
            if otel is not None:
                with otel.current():
                    await self.executor.run(graph, runner, self.settings.on_failure)
            else:
                await self.executor.run(graph, runner, self.settings.on_failure)
            # An executor may return just as the run is stopped from outside (a stop signal
            # cancels the run while the plan being written is cut short, and the executor,
            # woken with nothing left to run, ends before the cancellation reaches it). The
            # run was stopped all the same: recorded as cancelled, and cancelled.
            await anyio.lowlevel.checkpoint_if_cancelled()
        except BaseException as exc:
            failure = exc
            raise
        finally:
            if emit is not None and growing:
                graph.unwatch(self._extended)
            try:
                finish_unstarted(graph, runner)
                result = self._result(runner, started, failure)
                if emit is not None:
                    emit(RunFinished(self.run_id, result))
            finally:
                if self.journal is not None:
                    self.journal.close()  # every call awaited its commits: nothing is queued
                if recorder is not None:
                    recorder.close()  # flush: every result so far is durable
                if otel is not None:
                    otel.end(result, failure)
            if result is not None and recorder is not None and recorder.loss is not None:
                result.record_loss = recorder.loss  # never claim a record that is not there
        self.log.info("run.finished", status=result.status.value, **result.counts)
        return result

    def _extended(self, task_id: str | None) -> None:
        """A streamed plan grew: its record needs the task before the task can start."""
        if task_id is not None and self.emit is not None:
            self.planned_at[task_id] = time.time()
            plan = _snapshot(self.graph.plan)
            self.emit(PlanExtended(self.run_id, plan, dict(self.planned_at)))

    def _result(
        self,
        runner: TaskRunner,
        started: float,
        failure: BaseException | None,
    ) -> RunResult:
        """The run's result; ``failure``: what interrupted it (``None``: it ran to its end)."""
        graph = self.graph
        tasks = {t: runner.results[t] for t in graph.tasks}  # in plan order
        statuses = [r.status for r in tasks.values()]
        if isinstance(failure, DriverLostError):  # it goes on on the cluster: resumable
            status = RunStatus.INTERRUPTED
        elif failure is not None:
            status = RunStatus.CANCELLED
        elif graph.aborted:
            # A plan cut short while it was written (an invalid task, a model that failed
            # mid-answer, or before its first task): whatever ran, the plan did not.
            status = RunStatus.FAILED
        elif all(r.settled for r in tasks.values()):  # a condition's skip is no failure
            status = RunStatus.SUCCEEDED
        elif TaskStatus.WAITING in statuses and not any(s in FAILURES for s in statuses):
            status = RunStatus.PAUSED  # nothing else could run: the rest waits for a person
        else:
            status = RunStatus.FAILED
        if status is not RunStatus.PAUSED:
            for r in tasks.values():
                if r.status is TaskStatus.WAITING:
                    _left_waiting(r, status, self.run_id)
        cp_len, cp = finished_critical_path(graph.order, graph.dependencies, tasks)
        # A run starts no later than its first task: a round's run of a solve on Temporal
        # (dagagent.workflows.temporal_solve) ran on the workers before its driver saw it.
        started = min([started, *(r.started_at for r in tasks.values() if r.started_at)])
        return RunResult(
            run_id=self.run_id,
            status=status,
            goal=graph.plan.goal,
            executor=self.executor.name,
            tasks=tasks,
            started_at=started,
            finished_at=time.time(),
            critical_path=cp,
            critical_path_s=cp_len,
            parent_id=self.parent_id,
            usage=self.meter.total if self.meter is not None and self.meter.calls else None,
        )


#: How a call that waits says who decides: true while its run is paused, not once it ended.
_LATER = (": a person decides later (dagagent approve)", ": a person decides later")


def _left_waiting(result: TaskResult, status: RunStatus, run_id: str) -> None:
    """A task still waiting for a person's decision when its run ended otherwise than paused
    (another task failed, the run was stopped): nobody can approve it any more (the run's
    questions are closed), so its error says it did not run and what runs it again."""
    for r in (result, *(e for e in result.elements or () if e.status is TaskStatus.WAITING)):
        what = r.error or "waiting for a person's decision"
        for said in _LATER:
            what = what.removesuffix(said)
        r.error = (
            f"not run: the run ended {status.value} while this was {what}; it cannot be "
            f"approved any more ('dagagent replan {run_id} --execute' runs it again, under the "
            "run's approval rules)"
        )


def _snapshot(plan: Plan) -> Plan:
    """The plan as it is now, for a record written later (a growing plan keeps changing)."""
    return Plan.model_construct(goal=plan.goal, tasks=list(plan.tasks))


def _no_tools() -> Registry:
    from .tools import Registry

    return Registry()


def _used_tools(graph: PlanGraph, registry: Registry | None) -> list[Tool]:
    """The tools the plan's tasks can call (an agent task without a subset, or a plan still
    being written: all)."""
    if registry is None:
        return []
    if not graph.complete:
        return list(registry)  # a plan still arriving may call any of them
    names: dict[str, None] = {}
    for task in graph.plan.tasks:
        used = task.tool_names
        if used is None:
            return list(registry)
        names.update(dict.fromkeys(used))
    return [registry.get(n) for n in names if n in registry]


def execute_sync(
    plan: Plan | PlanGraph | Mapping[str, Any] | str | Path,
    registry: Registry | None = None,
    **options: Any,
) -> RunResult:
    """:func:`execute` for scripts: runs its own event loop (do not call it from async code),
    which does not wait, as it closes, for a thread a timed-out tool left running
    (:mod:`dagagent.tools._loop`)."""
    from .tools._loop import run_own_loop

    async def main() -> RunResult:
        return await execute(plan, registry, **options)

    return run_own_loop(main)
