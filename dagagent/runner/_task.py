"""Running ONE task, top to bottom: resolve its references → reuse an earlier output if it
may → attempt it, with retries and a timeout → record its result and emit its events."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import anyio.lowlevel
from typing_extensions import Unpack

from .. import telemetry as otel
from ..conditions import Condition, parse_condition
from ..errors import (
    AgentError,
    ConditionError,
    TaskDeniedError,
    TaskTimeoutError,
    TaskWaitingError,
)
from ..events import (
    Event,
    TaskAgentEvent,
    TaskElementFinished,
    TaskFinished,
    TaskRetrying,
    TaskStarted,
    debug_enabled,
)
from ..graph import as_text, text_slots
from ..limits import DEFAULT_MAX_ELEMENTS
from ..plan import AgentTask, ToolTask
from ..references import ElementScope, reference_text
from ..results import (
    CONDITION_FALSE,
    FAILURES,
    PARTIAL_ANSWER,
    UNANSWERED,
    AgentStep,
    FailurePolicy,
    PartialAnswer,
    TaskResult,
    TaskStatus,
    best_so_far,
)
from ..settings import TaskRetryPolicy
from ..tools import Registry, Tool
from ._agent import AgentNode, AgentTaskRunner
from ._calls import CallOptions, ToolCalls, timed_out_late
from ._cancel import IGNORED_CANCEL, cancel_ignored, really_cancelled
from ._condition import condition_false, element_condition
from ._effects import TookEffect
from ._map import run_map
from ._record import TaskRun, describe
from ._redaction import Redaction
from ._retry import NOT_RETRIED
from ._reuse import same_upstream, task_fingerprint
from ._slot import take_slot
from ._traceback import task_traceback

if TYPE_CHECKING:
    from ..graph import PlanGraph
    from ..plan import Task
    from ._telemetry import RunTelemetry

__all__ = ["Attempt", "Ending", "TaskRunner"]

_SUCCEEDED = TaskStatus.SUCCEEDED
_REUSED = TaskStatus.REUSED
_FAILED = TaskStatus.FAILED
_DENIED = TaskStatus.DENIED
_CANCELLED = TaskStatus.CANCELLED
_WAITING = TaskStatus.WAITING
_SKIPPED = TaskStatus.SKIPPED

Attempt = Callable[[TaskRun], Awaitable[Any]]
"""One attempt at a task: its output, or it raises."""


@dataclass(frozen=True)
class Ending:
    """How an attempt that raised ends its task (or a map's element)."""

    status: TaskStatus
    error: str
    error_type: str | None = None
    traceback: str | None = None


class TaskRunner:
    """Runs the tasks of one run; ``results`` and ``outputs`` fill in as tasks finish.

    Its collaborators come at construction: ``calls`` (the tool-call seam: interceptors,
    limits, invoker), ``emit`` (run events for the listeners), ``started`` and ``record`` (for
    the run store: each task's id and start as it starts, its final result as it ends),
    ``telemetry``
    (OpenTelemetry, or ``None``), ``redaction`` (applied to every result and event that
    leaves the runner), ``llm`` and ``agent_runner`` (for agent tasks; the model is opaque
    here), ``reuse`` (an earlier run's outputs, by
    fingerprint: see :func:`dagagent.review.reuse_map`) and ``prior`` (the results a resumed
    run recorded before its pause)."""

    def __init__(
        self,
        graph: PlanGraph,
        registry: Registry | None,
        *,
        run_id: str,
        calls: ToolCalls | None = None,
        retry: TaskRetryPolicy | None = None,
        on_failure: FailurePolicy = "cancel",
        max_concurrency: int | None = None,
        max_elements: int = DEFAULT_MAX_ELEMENTS,
        element_concurrency: int | None = None,
        emit: Callable[[Event], None] | None = None,
        record: Callable[[TaskResult], None] | None = None,
        started: Callable[[str, float], None] | None = None,
        telemetry: RunTelemetry | None = None,
        redaction: Redaction | None = None,
        llm: object = None,
        agent_runner: AgentTaskRunner | None = None,
        reuse: Mapping[str, tuple[str, Any]] | None = None,
        prior: Mapping[str, TaskResult] | None = None,
        logger: Any = None,
    ) -> None:
        self.graph = graph
        self.tasks = graph.tasks
        self.templates = graph.templates
        self.registry = registry if registry is not None else Registry()
        self.run_id = run_id
        self.calls = calls or ToolCalls(run_id, self.registry)
        self.retry = retry or TaskRetryPolicy()
        #: How a failed element ends a map's other elements (the run's ``on_failure``).
        self.on_failure = on_failure
        #: At most this many tasks (and map elements) run at once across the run.
        self.max_concurrency = max_concurrency
        #: The longest list a map task may expand.
        self.max_elements = max_elements
        #: A bound on the elements of one map at once that the executor sets (serial: 1).
        self.element_concurrency = element_concurrency
        self.emit = emit
        self.record = record
        self.started = started
        self.telemetry = telemetry
        self.redaction = redaction or Redaction(())
        self.llm = llm
        self.agent_runner = agent_runner
        self.results: dict[str, TaskResult] = {}
        self.outputs: dict[str, Any] = {}
        self.reuse = reuse or {}
        #: A resumed run's results recorded before (``None``: not a resumed run).
        self.prior: Mapping[str, TaskResult] | None = prior
        prior = prior or {}
        # A resumed run: what succeeded before the pause stands as it was recorded; an agent
        # task that waited continues from its recorded steps, a map task that waited runs
        # only its elements that waited.
        self._kept = {t: r for t, r in prior.items() if r.status.ok}
        self._resume_steps: dict[str, list[AgentStep]] = {
            t: list(r.steps)
            for t, r in prior.items()
            if r.status is _WAITING and r.steps and isinstance(self.tasks.get(t), AgentTask)
        }
        self.resume_elements: dict[str, list[TaskResult]] = {
            t: list(r.elements) for t, r in prior.items() if r.status is _WAITING and r.elements
        }
        # A task takes a slot before it starts and keeps it until it finishes (retries
        # included): at most max_concurrency tasks are ever between TaskStarted and
        # TaskFinished, and a task waiting for a slot has not started.
        self.slots = anyio.CapacityLimiter(max_concurrency) if max_concurrency else None
        self._log = logger
        self._debug = logger is not None and debug_enabled(logger)
        self._cancelled_exc = anyio.get_cancelled_exc_class()
        self._stop_cause: str | None = None  # see stop_cause()
        self._text_slots: dict[str, tuple[tuple[str | int, ...], ...]] = {}

    # -- one task ---------------------------------------------------------------------------

    async def run_task(self, task_id: str) -> TaskResult:
        """Run one task to its final status and return its result: decide its ``when`` (false:
        skipped, without starting), take a slot (with ``max_concurrency``), resolve its
        references, reuse an earlier output if it may,
        else attempt it (by its kind, with its retries and timeout), then record its result
        and emit its events. A map task (``for_each``) runs once per element of its list
        instead (see :mod:`._map`): each element takes a slot, the task itself none.

        Never raises, except the cancellation of the surrounding scope (after recording the
        task as cancelled)."""
        kept = self._kept.get(task_id)
        if kept is not None:  # a resumed run: it succeeded before
            return self._keep(kept)
        task = self.tasks[task_id]
        if task.when is not None:
            condition = parse_condition(task.when)  # checked when the plan was
            if not element_condition(condition):
                settled = self._decide(task_id, condition)
                if settled is not None:
                    return settled
        if task.for_each is not None:
            run = self._start(task_id)
            return await run_map(self, task, run)
        slots = self.slots
        if slots is not None:
            await take_slot(slots)
        try:
            run = self._start(task_id)
            try:
                run.args = self.resolve_args(task, self.outputs)
                if self.reuse and self._reusable(task, run.args):
                    return self.finish(run, _REUSED, self.reuse[task_id][1])
                output = await self.attempts(run, *self.attempt_for(task))
            except BaseException as exc:
                ending = self.ending(exc)
                if ending is None:  # the run's cancellation: recorded, then raised again
                    done = self.calls.effects.took_effect(task_id)
                    if done is not None and isinstance(task, ToolTask):
                        # stopped after its call took effect: it has its output all the same
                        self.finish(run, _SUCCEEDED, done.output)
                    else:
                        self.finish(run, _CANCELLED, error=self._cancelled_why(run))
                    raise
                return self.finish(
                    run,
                    ending.status,
                    error=ending.error,
                    error_type=ending.error_type,
                    traceback=ending.traceback,
                )
            if cancel_ignored():
                await self._stopped_anyway(run)
            return self.finish(run, _SUCCEEDED, output)
        finally:
            if slots is not None:
                slots.release()  # after the task's result and events

    def reuse_now(self, task_id: str) -> TaskResult | None:
        """Settle ``task_id`` with the earlier run's output, without calling anything, if it
        may be reused now (as :meth:`run_task` would reuse it: same fingerprint, same
        upstream outputs, every dependency settled here): its result, recorded; else
        ``None``, and nothing recorded. A map task or one with a condition is never settled
        here (:meth:`run_task` decides those). For an executor that runs the tasks elsewhere
        (Temporal), so that a reused task costs no call there."""
        task = self.tasks[task_id]
        if task_id not in self.reuse or task.for_each is not None or task.when is not None:
            return None
        if any(d not in self.outputs for d in self.graph.dependencies[task_id]):
            return None
        try:
            args = self.resolve_args(task, self.outputs)
        except Exception:  # a reference that does not resolve: the task's own run says why
            return None
        if not self._reusable(task, args):
            return None
        run = self._start(task_id)
        run.args = args
        return self.finish(run, _REUSED, self.reuse[task_id][1])

    def _decide(self, task_id: str, condition: Condition) -> TaskResult | None:
        """Decide a task's ``when`` before it starts: ``None`` when it holds (run the task),
        else the task's result: skipped (the condition is false) or failed (it could not be
        decided)."""
        try:
            holds = condition.decide(self.outputs)
        except ConditionError as exc:
            run = self._start(task_id)
            return self.finish(run, _FAILED, error=str(exc), error_type=type(exc).__name__)
        if holds:
            return None
        return self.mark(
            task_id, _SKIPPED, condition_false(condition, self.outputs), CONDITION_FALSE
        )

    def resolve_args(self, task: Task, outputs: Mapping[str, Any]) -> Any:
        """The arguments (or instruction) of ``task`` with its references resolved from
        ``outputs`` (a map element's scope, for an element): a number or boolean that is a
        whole argument of a tool parameter taking text is given as its text (see
        :func:`dagagent.graph.text_slots`)."""
        tmpl = self.templates[task.id]
        if not tmpl.refs:
            return tmpl.literal
        args = tmpl.resolve(outputs)
        slots = self._text_slots.get(task.id)
        if slots is None:
            slots = ()
            if isinstance(task, ToolTask) and task.tool in self.registry:
                slots = text_slots(self.registry.get(task.tool), tmpl)
            self._text_slots[task.id] = slots
        return as_text(args, slots) if slots else args

    def _start(self, task_id: str) -> TaskRun:
        run = TaskRun(task_id, time.time(), [] if self.calls.intercepted else None)
        if self.started is not None:
            # On record as running until its result replaces it (the store writes only the
            # last of the two when both come in one batch). Nothing else yet: its arguments
            # are recorded with its result, after any redaction.
            self.started(task_id, run.started_at)
        if self.emit is not None:
            self.emit(TaskStarted(self.run_id, task_id, run.started_at))
        if self._debug:
            self._log.debug("task.started", run_id=self.run_id, task_id=task_id)
        return run

    async def attempts(self, run: TaskRun, attempt: Attempt, retries: int) -> Any:
        """Attempt ``run`` until it succeeds or its ``retries`` are spent (a failure another
        attempt would only repeat is not retried): its output, or the last attempt's error."""
        while True:
            run.attempts += 1
            try:
                return await attempt(run)
            except NOT_RETRIED:
                raise
            except Exception as exc:
                if run.attempts > retries:
                    raise
                await self._wait_to_retry(run, exc)

    def ending(self, exc: BaseException) -> Ending | None:
        """How ``exc``, raised by an attempt (or on the way to it), ends the task; ``None``:
        it is the cancellation of the surrounding scope, for the caller to record and raise."""
        if isinstance(exc, self._cancelled_exc):
            if really_cancelled():
                return None
            # The tool raised a cancellation of its own (it awaited a future someone else
            # cancelled, say) while nobody cancelled this task: a failure of this task, not
            # a reason to stop its siblings or to lose the run.
            why = f"{describe(exc)} (raised by the task itself; nothing cancelled it)"
            return Ending(_FAILED, why, type(exc).__name__, task_traceback(exc))
        if isinstance(exc, TaskWaitingError):
            return Ending(_WAITING, str(exc), type(exc).__name__)
        if isinstance(exc, TaskDeniedError):
            return Ending(_DENIED, str(exc), type(exc).__name__)
        if isinstance(exc, Exception):
            return Ending(_FAILED, describe(exc), type(exc).__name__, task_traceback(exc))
        # SystemExit (a tool calling sys.exit()), KeyboardInterrupt or GeneratorExit raised by
        # a tool, a custom BaseException: the task fails (not retried). Let through, it would
        # end the run abruptly and lose every other task's result. (A real Ctrl-C arrives as
        # the cancellation of the run.)
        why = f"{describe(exc)} (raised by the task; a BaseException, not retried)"
        return Ending(_FAILED, why, type(exc).__name__, task_traceback(exc))

    async def _stopped_anyway(self, run: TaskRun) -> NoReturn:
        """The tool caught the run's cancellation (fail-fast, Ctrl-C) and returned anyway: it
        was stopped, so it did not succeed. Recorded as cancelled, and cancelled again."""
        self.finish(run, _CANCELLED, error=f"{IGNORED_CANCEL}: {self.stop_cause()}")
        await self.cancelled_again()

    async def cancelled_again(self) -> NoReturn:
        """Raise the run's cancellation again, for a tool that caught it and returned."""
        await anyio.lowlevel.checkpoint()  # a cancel scope's cancellation, raised again
        raise self._cancelled_exc()  # a one-time Task.cancel(), caught by the tool

    def attempt_for(self, task: Task) -> tuple[Attempt, int]:
        """How to attempt ``task``, by its kind (traced when the run has telemetry), and how
        many retries it has."""
        attempt: Attempt
        if isinstance(task, AgentTask):
            attempt, retries = partial(self._attempt_agent, task), task.retries or 0
        else:
            tool = self.registry.get(task.tool)
            retries = task.retries if task.retries is not None else tool.retries
            timeout = task.timeout_s if task.timeout_s is not None else tool.timeout_s
            attempt = partial(self._attempt_tool, tool, timeout)
        if self.telemetry is not None:
            attempt = self.telemetry.attempts(task, attempt)
        return attempt, retries

    def _attempt_tool(self, tool: Tool, timeout: float | None, run: TaskRun) -> Awaitable[Any]:
        return self.calls.call(
            run.task_id,
            tool,
            run.args,
            attempt=run.attempts,
            decisions=run.decisions,
            timeout=timeout,
            element=run.element,
        )

    async def _attempt_agent(self, task: AgentTask, run: TaskRun) -> Any:
        llm, agent_runner = self.llm, self.agent_runner
        if (llm is None or agent_runner is None) and task.solve:
            raise AgentError(
                "this task is a sub-solve ('solve': true): it runs only in a solve given "
                "sub_solves=True (dagagent ask --sub-solves), not in a run of its own"
            )
        if llm is None or agent_runner is None:
            raise AgentError(
                "this is an agent task (it has an 'instruction') and needs a model: pass "
                "llm=... to execute(), or --model to the CLI"
            )
        node = self._agent_node(task, run, llm)
        timeout = task.timeout_s if not task.solve else None  # a sub-solve's own deadline
        serving = otel.AGENT_TASK.set((self.run_id, run.task_id))  # its model calls' task
        try:
            with anyio.fail_after(timeout) as scope:  # None: no limit
                output, run.steps = await agent_runner(node)
        except TimeoutError:
            run.steps = node.partial_steps()
            if not scope.cancel_called:  # raised by the agent itself, not by the task's timeout
                raise
            why = f"timed out after {timeout:g} s"
            found = best_so_far(run.steps) if node.best_so_far else None
            if found is None:
                raise TaskTimeoutError(why) from None
            output = PartialAnswer(found, f"{why} before the agent answered")
        except BaseException:  # failed, or cancelled: the record keeps the steps taken so far
            run.steps = node.partial_steps()
            raise
        finally:
            otel.AGENT_TASK.reset(serving)
        if scope.cancel_called and not isinstance(output, PartialAnswer):
            # the agent caught its timeout's cancellation and answered late
            raise TaskTimeoutError(timed_out_late(timeout))
        if isinstance(output, PartialAnswer):
            run.partial = output.why
            return output.answer
        run.partial = None  # a retry that answered
        return output

    def _agent_node(self, task: AgentTask, run: TaskRun, llm: object) -> AgentNode:
        tools = self.registry.subset(task.tools) if task.tools is not None else self.registry
        context = {d: self.outputs.get(d) for d in self.graph.dependencies[task.id]}
        decisions = run.decisions
        telemetry = self.telemetry

        async def call(tool: Tool, args: dict[str, Any]) -> Any:
            def made() -> Awaitable[Any]:
                return self.calls.call(
                    task.id,
                    tool,
                    args,
                    source="agent",
                    decisions=decisions,
                    timeout=tool.timeout_s,
                    attempt=run.attempts,
                    element=run.element,
                )

            if telemetry is None:
                return await made()
            return await telemetry.agent_call(task.id, tool, args, decisions, made)

        # An instruction that is one reference ("${paris}") keeps the value's type: show it as
        # a reference inside longer text would be shown (JSON for a dict, not its repr).
        text = run.args if isinstance(run.args, str) else reference_text(run.args)
        resume: list[AgentStep] | None
        if run.resume_steps is not None:  # a map task's element: its own steps
            resume, run.resume_steps = run.resume_steps, None  # once, not on retry
        else:
            resume = self._resume_steps.pop(task.id, None)
        return AgentNode(
            self.run_id,
            task,
            text,
            tools,
            context,
            call,
            llm,
            on_event=self._agent_events(task.id) if self.emit is not None else None,
            resume_steps=resume,
            element=run.element,
        )

    def _agent_events(self, task_id: str) -> Callable[..., None]:
        emit, run_id, redaction = self.emit, self.run_id, self.redaction
        assert emit is not None

        def on_event(kind: str, step: int, **fields: Any) -> None:
            # A call's arguments are shown (progress, listeners) as the redacting
            # interceptors leave them, as they are recorded.
            if kind == "tool_call" and redaction:
                fields["args"] = redaction.args(fields.get("tool") or "", fields.get("args"))
            emit(TaskAgentEvent(run_id, task_id, kind, step, **fields))

        return on_event

    async def _wait_to_retry(self, run: TaskRun, exc: Exception) -> None:
        delay = self.retry.delay(run.attempts)
        if self.emit is not None:
            self.emit(TaskRetrying(self.run_id, run.task_id, run.attempts, describe(exc), delay))
        if self._log is not None:
            self._log.info(
                "task.retrying",
                run_id=self.run_id,
                task_id=run.task_id,
                attempt=run.attempts,
                error=describe(exc),
                delay_s=delay,
            )
        if delay:
            await anyio.sleep(delay)

    # -- records and events -----------------------------------------------------------------

    def finish(
        self,
        run: TaskRun,
        status: TaskStatus,
        output: Any = None,
        *,
        error: str | None = None,
        error_type: str | None = None,
        elements: list[TaskResult] | None = None,
        traceback: str | None = None,
    ) -> TaskResult:
        """The end of a task (``run``): its result, redacted, kept, recorded and announced."""
        if self.redaction:
            task = self.tasks.get(run.task_id)
            if isinstance(task, ToolTask):
                decisions = run.decisions if run.decisions is not None else []
                error, traceback = self.redaction.record(
                    task.tool, run.args, error, traceback, decisions, task
                )
                run.decisions = decisions or None
            if run.steps:
                run.steps = self.redaction.steps(run.steps)
        if status is _SUCCEEDED and run.partial is not None:
            error, error_type = f"partial answer: {run.partial}", PARTIAL_ANSWER
        r = TaskResult(
            task_id=run.task_id,
            status=status,
            output=output,
            error=error,
            error_type=error_type,
            attempts=run.attempts,
            started_at=run.started_at,
            finished_at=time.time(),
            args=run.args,
            steps=run.steps,
            decisions=run.decisions or None,
            elements=elements,
            traceback=traceback,
        )
        self._ended(r)
        if self._log is not None and error is not None and status is not _CANCELLED:
            self._log.info(
                "task.failed",
                run_id=self.run_id,
                task_id=r.task_id,
                status=status.value,
                error=error,
            )
        elif self._debug:
            self._log.debug(
                "task.finished",
                run_id=self.run_id,
                task_id=r.task_id,
                status=status.value,
                attempts=r.attempts,
            )
        return r

    def _ended(self, r: TaskResult) -> None:
        self.results[r.task_id] = r
        if r.status.ok:
            self.outputs[r.task_id] = r.output
        if self.telemetry is not None:
            self.telemetry.finished(r)
        if self.record is not None:
            self.record(r)
        if self.emit is not None:
            self.emit(TaskFinished(self.run_id, r))

    def _keep(self, r: TaskResult) -> TaskResult:
        """A task of a resumed run that succeeded before the pause: its record stands."""
        self._ended(r)
        return r

    def mark(
        self,
        task_id: str,
        status: TaskStatus,
        error: str | None = None,
        error_type: str | None = None,
    ) -> TaskResult:
        """Record a task that never started (skipped or cancelled), and why (``error_type``
        :data:`~dagagent.results.CONDITION_FALSE`: skipped by a condition). A task of a
        resumed run that succeeded before stands as it was recorded, whatever stopped this run
        before the executor got to it (its success is never lost)."""
        kept = self._kept.get(task_id)
        if kept is not None:
            return self._keep(kept)
        task = self.tasks.get(task_id)
        elements: list[TaskResult] | None = None
        steps: list[AgentStep] | None = None
        if isinstance(task, ToolTask) and task.for_each is None:
            done = self.calls.effects.took_effect(task_id)
            if done is not None:
                return self._took_effect(task_id, done)
        if task is not None and task.for_each is not None:
            elements = self._unstarted_elements(task, error)
            if elements and all(e.status.ok for e in elements):
                # every element had succeeded, or took effect: so did the task
                run = TaskRun(task_id, time.time(), None)
                run.attempts = 1
                output = [e.output for e in elements]
                return self.finish(run, _SUCCEEDED, output, elements=elements)
        elif isinstance(task, AgentTask):
            # Its record keeps the steps it took before it waited (the calls they made, and
            # what those calls returned, stay on record).
            steps = self._resume_steps.pop(task_id, None)
        if isinstance(task, ToolTask) and task.for_each is None:
            error = self._in_doubt_still(task_id, None, error)
        r = TaskResult(
            task_id=task_id,
            status=status,
            error=error,
            error_type=error_type,
            elements=elements,
            steps=steps,
        )
        self._ended(r)
        return r

    def _in_doubt_still(self, task_id: str, element: int | None, error: str | None) -> str | None:
        """The record's ``error`` for a tool task (or map element) that the run ends
        without running: when a call it made before this run is in doubt still (nobody
        said what became of it), it says so, not that the task did not run (the call may
        have taken effect; ``dagagent approvals`` lists it for a person)."""
        keys = [
            r.key
            for r in self.calls.effects.in_doubt_of(task_id)
            if r.element == element and r.resolution is None
        ]
        if not keys:
            return error
        why = (error or "").removeprefix("not run: ").removeprefix("not run") or "the run ended"
        return (
            f"not run again: {why}; its call before (idempotency key {', '.join(keys)}) is in "
            "doubt, it may have taken effect: 'dagagent approvals' lists it for a person to "
            "say what became of it"
        )

    def _took_effect(self, task_id: str, done: TookEffect) -> TaskResult:
        """A tool task that the run ends without running, whose call took effect before
        (committed before a crash, or found to have happened by a person or a reconciler):
        it succeeded, with that output, whatever stopped this run first."""
        task = self.tasks[task_id]
        assert isinstance(task, ToolTask)
        run = TaskRun(task_id, time.time(), [done.decision])
        tool = self.registry.get(task.tool)
        run.args = done.args_of(tool, lambda: self.resolve_args(task, self.outputs))
        run.attempts = done.attempt
        return self.finish(run, _SUCCEEDED, done.output)

    def _element_args(
        self, task: Task, items: list[Any] | None, i: int, before: TaskResult | None
    ) -> Any:
        """Element ``i``'s arguments as the plan resolves them now (or as its record before
        says them)."""
        if items is not None and i < len(items):
            return self.resolve_args(task, ElementScope(self.outputs, items[i], i))
        if before is not None and before.args is not None:
            return before.args
        raise LookupError(f"element {i} of task {task.id!r} has no arguments to resolve")

    def _unstarted_elements(self, task: Task, why: str | None) -> list[TaskResult] | None:
        """The elements of map task ``task``, which the run ends without running: those
        recorded before it waited stand, those whose call took effect have its output, the
        others did not run. ``None`` when none of it is on record (none of its elements
        made a call with side effects, and it did not wait before), or the list's length is
        unknown (its reference cannot be resolved now)."""
        from ._map import MapRun

        prior = self.resume_elements.pop(task.id, None)
        effects = self.calls.effects
        if prior is None and not effects.has_element_calls(task.id):
            return None  # nothing of it on record: it did not run, as a whole
        items: list[Any] | None
        try:
            items = MapRun(self, task, TaskRun(task.id, time.time(), None)).expand()
        except Exception:  # its list cannot be resolved now
            items = None
        if prior is not None:
            n = len(prior)
        elif items is not None:
            n = len(items)
        else:
            return None
        out: list[TaskResult] = []
        for i in range(n):
            before = prior[i] if prior is not None else None
            if before is not None and before.status is not _WAITING:
                out.append(before)
                continue
            done = effects.took_effect(task.id, i) if isinstance(task, ToolTask) else None
            if done is not None and isinstance(task, ToolTask):
                args = done.args_of(
                    self.registry.get(task.tool),
                    partial(self._element_args, task, items, i, before),
                )
                out.append(
                    TaskResult(
                        task_id=f"{task.id}[{i}]",
                        status=_SUCCEEDED,
                        output=done.output,
                        attempts=done.attempt,
                        finished_at=time.time(),
                        args=self.redaction.args(task.tool, args) if self.redaction else args,
                        decisions=[done.decision],
                    )
                )
            else:
                steps = before.steps if before is not None else None
                out.append(
                    TaskResult(
                        task_id=f"{task.id}[{i}]",
                        status=_CANCELLED,
                        error=self._in_doubt_still(task.id, i, why or "not run"),
                        steps=steps,
                    )
                )
        return out

    def ran_elsewhere(self, r: TaskResult) -> TaskResult:
        """Record a task that a remote scheduler ran through its own runner (the Temporal
        executor's workflow, on a worker): its start, each element of a map, its result,
        with their events, as if it had run here."""
        if r.started_at is not None:
            if self.started is not None:
                self.started(r.task_id, r.started_at)
            if self.emit is not None:
                self.emit(TaskStarted(self.run_id, r.task_id, r.started_at))
                for i, element in enumerate(r.elements or ()):
                    self.emit(TaskElementFinished(self.run_id, r.task_id, i, element))
        self._ended(r)
        return r

    # -- the seams, for the tasks' own use ---------------------------------------------------

    async def call_tool(
        self, task_id: str, tool: Tool, args: Mapping[str, Any], **options: Unpack[CallOptions]
    ) -> Any:
        """Validate ``args`` and call ``tool`` through the interceptors and the invoker
        (``timeout`` bounds the invoker call, not the interceptors); the options are those
        of :meth:`ToolCalls.call <dagagent.runner.ToolCalls.call>`."""
        return await self.calls.call(task_id, tool, args, **options)

    def tools_in_use(self) -> dict[Tool, list[str]]:
        """Every tool the plan can call, with the ids of the tasks that can call it (an agent
        task can call each tool of its ``tools``, or of the registry). While the plan is still
        arriving (a growing graph), every tool of the registry is in use."""
        used: dict[Tool, list[str]] = {}
        registry = self.registry
        if not self.graph.complete:
            used = {tool: [] for tool in registry}
        for task_id, task in self.tasks.items():
            names = task.tool_names
            for name in registry.names if names is None else names:
                if name in registry:
                    used.setdefault(registry.get(name), []).append(task_id)
        return used

    def stop_cause(self) -> str:
        """Why the run stopped, as the records of the tasks it cancelled say it: the first
        failure when failures stop the run, a plan being written that was rejected, or else
        something outside the run. Worked out once, when the first task is cancelled."""
        if self._stop_cause is None:
            failed = None
            if self.on_failure == "cancel":  # then a cancellation after a failure is its doing
                failed = next((r for r in self.results.values() if r.status in FAILURES), None)
            if failed is not None:
                cause = f"the run was stopped after task {failed.task_id!r} {failed.status.value}"
            elif self.graph.aborted:
                cause = "the run was stopped because the plan being written was rejected"
            else:
                cause = "the run was interrupted (Ctrl-C, a signal, or its caller)"
            self._stop_cause = cause
        return self._stop_cause

    def _cancelled_why(self, run: TaskRun) -> str:
        decisions = run.decisions
        if decisions and decisions[-1].decision == UNANSWERED and decisions[-1].source == "plan":
            what = "cancelled while waiting for approval (its call never started)"
        else:
            what = "cancelled while running"
        return f"{what}: {self.stop_cause()}"

    def _reusable(self, task: Task, resolved: Any) -> bool:
        """Whether the earlier run's output stands: same fingerprint, same upstream outputs."""
        before = self.reuse.get(task.id)
        return (
            before is not None
            and before[0] == task_fingerprint(task, resolved)
            and same_upstream(self.graph.dependencies[task.id], self.outputs, self.reuse)
        )
