"""Running ONE task, top to bottom: resolve its references → reuse an earlier output if it
may → attempt it, with retries and a timeout → record its result and emit its events."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn, cast

import anyio
import anyio.lowlevel
from typing_extensions import Unpack

from ..errors import AgentError, TaskDeniedError, TaskTimeoutError, TaskWaitingError
from ..events import (
    Emitter,
    Listener,
    TaskAgentEvent,
    TaskFinished,
    TaskRetrying,
    TaskStarted,
    debug_enabled,
)
from ..plan import AgentTask, ToolTask
from ..references import reference_text
from ..results import (
    REDACT,
    UNANSWERED,
    AgentStep,
    ApprovalAnswer,
    CallDecision,
    Success,
    TaskResult,
    TaskResults,
    TaskStatus,
    jsonable,
)
from ..tools import GENERATOR_TYPES, Registry, Tool, materialize_async
from ._agent import AgentNode, AgentTaskRunner
from ._calls import ArgumentRedactor, CallOptions, Interceptor, Invoker, ToolCalls, timed_out_late
from ._cancel import IGNORED_CANCEL, cancellation_check, really_cancelled
from ._map import DEFAULT_MAX_ELEMENTS, run_map
from ._record import TaskRun, describe, task_result
from ._retry import NOT_RETRIED, TaskRetryPolicy
from ._reuse import same_upstream, task_fingerprint
from ._traceback import task_traceback

if TYPE_CHECKING:
    from ..graph import PlanGraph
    from ..plan import Task
    from ._telemetry import RunTelemetry

__all__ = ["TaskRunner"]

_SUCCEEDED = TaskStatus.SUCCEEDED
_REUSED = TaskStatus.REUSED
_FAILED = TaskStatus.FAILED
_DENIED = TaskStatus.DENIED
_CANCELLED = TaskStatus.CANCELLED
_WAITING = TaskStatus.WAITING

Attempt = Callable[[TaskRun], Awaitable[Any]]
"""One attempt at a task: its output, or it raises."""


class TaskRunner:
    """Runs the tasks of one run. ``results`` and ``outputs`` fill in as tasks finish.

    ``results`` is a :class:`~dagagent.results.TaskResults`: a task that succeeded with
    nothing more to say is held as its values, its ``TaskResult`` built only when read."""

    def __init__(
        self,
        graph: PlanGraph,
        registry: Registry | None,
        *,
        run_id: str,
        retry: TaskRetryPolicy | None = None,
        max_concurrency: int | None = None,
        interceptors: Sequence[Interceptor] = (),
        listeners: Sequence[Listener] = (),
        invoker: Invoker | None = None,
        llm: object = None,
        agent_runner: AgentTaskRunner | None = None,
        reuse: Mapping[str, tuple[str, Any]] | None = None,
        prior: Mapping[str, TaskResult] | None = None,
        answers: Mapping[str, Sequence[ApprovalAnswer]] | None = None,
        logger: Any = None,
        on_failure: str = "cancel",
        max_elements: int = DEFAULT_MAX_ELEMENTS,
        telemetry: RunTelemetry | None = None,
        record: Callable[[TaskResult], None] | None = None,
        record_success: Callable[[tuple[str, Any, int, float, float, Any]], None] | None = None,
    ) -> None:
        self.graph = graph
        self.tasks = graph.tasks
        self.templates = graph.templates
        self.registry = registry if registry is not None else Registry()
        self.run_id = run_id
        self.retry = retry or TaskRetryPolicy()
        # Each task's result, or a plain success's values (see TaskResults), as tasks end.
        self._held: dict[str, TaskResult | Success] = {}
        self.results = TaskResults.holding(self._held)
        self.outputs: dict[str, Any] = {}
        #: How long each task that finished took (succeeded, failed or denied; a reused one:
        #: 0), noted as it finishes: the run's critical path is worked out from these at the
        #: end, without reading every result again.
        self.took: dict[str, float] = {}
        self.listeners = tuple(listeners)
        #: Emits run events to the listeners (``None`` without listeners: nothing is built).
        self.emit = Emitter(self.listeners, logger) if self.listeners else None
        #: Takes every final result as it is made (the run store's recorder: a result on its
        #: queue, no event built for it).
        self.record = record
        #: With ``record``: takes instead the result of a task that succeeded with nothing
        #: more to say (no steps, decisions, elements), as ``(task_id, output, attempts,
        #: started_at, finished_at, args)`` (see ``RunRecorder.record_success``).
        self.record_success = record_success if record is not None else None
        # Whether a plain success may be held as its values: nothing takes its TaskResult as
        # it ends (no listener; the recorder, if any, takes the values too). Telemetry, set
        # after the runner is made, is checked as each task ends.
        self._compact = self.emit is None and (record is None or self.record_success is not None)
        #: The tool-call seam: interceptors, per-tool limits, the invoker.
        self.calls = ToolCalls(run_id, self.registry, interceptors, invoker, self.emit, answers)
        self._intercepted = self.calls.intercepted
        #: Interceptors that hide secrets: a task failing before its call reaches them is
        #: redacted for its record all the same (see :meth:`_redact_failure`).
        self._redactors = tuple(
            cast(ArgumentRedactor, i)  # mypy does not narrow a Callable by a Protocol
            for i in interceptors
            if isinstance(i, ArgumentRedactor)
        )
        # Tools a task may call directly when it has no timeout (worked out once per run).
        self._direct = frozenset(t.name for t in self.registry if self.calls.is_direct(t, None))
        # ... and of those, the async functions the runner may await itself (what Tool.acall
        # does for them, without its coroutine in between).
        self._awaited = frozenset(
            t.name
            for t in self.registry
            if t.name in self._direct and t.is_async and type(t).acall is Tool.acall
        )
        self.llm = llm
        self._agent_runner = agent_runner
        self._reuse = dict(reuse or {})
        # A resumed run (see dagagent.resume): what succeeded before the pause stands as it
        # was recorded; an agent task that waited continues from its recorded steps.
        prior = prior or {}
        self._kept = {t: r for t, r in prior.items() if r.status.ok}
        self._resume_steps: dict[str, list[AgentStep]] = {
            t: list(r.steps)
            for t, r in prior.items()
            if r.status is _WAITING and r.steps and isinstance(self.tasks.get(t), AgentTask)
        }
        # ... and a map task that waited runs only its elements that waited.
        self._resume_elements: dict[str, list[TaskResult]] = {
            t: list(r.elements) for t, r in prior.items() if r.status is _WAITING and r.elements
        }
        # A task takes a slot before it starts and keeps it until it finishes (retries
        # included): at most max_concurrency tasks are ever between TaskStarted and
        # TaskFinished, and a task waiting for a slot has not started.
        self._slots = anyio.CapacityLimiter(max_concurrency) if max_concurrency else None
        self.max_concurrency = max_concurrency
        #: Map tasks (``for_each``; see :mod:`._map`): how a failed element ends the others
        #: (the run's ``on_failure``), the longest list a map may expand, and a bound on the
        #: elements of one map at once that an executor may set (the serial executor: 1).
        self.on_failure = on_failure
        self.max_elements = max_elements
        self.element_concurrency: int | None = None
        # Whether a task may be a map: checked once per task only when one may be.
        self._maps = not graph.complete or (
            not graph.plain and any(t.for_each is not None for t in self.tasks.values())
        )
        self._log = logger
        self._debug = logger is not None and debug_enabled(logger)
        #: The tools a task may call *plainly* (see run_task_status), by name: awaited
        #: directly, with no retries and no timeout, in a run where nothing but its result
        #: is kept of such a task (no listener, limiter, debug log, reused output, success
        #: kept from before a pause, or map to see to). ``None``: every task takes the full
        #: path.
        self._plain: dict[str, Tool] | None = None
        if (
            self._compact
            and self._slots is None
            and not (self._kept or self._reuse or self._maps or self._debug)
        ):
            self._plain = {
                t.name: t
                for t in self.registry
                if t.name in self._awaited and not t.retries and t.timeout_s is None
            } or None
        self._cancelled_exc = anyio.get_cancelled_exc_class()
        self._stop_cause: str | None = None  # see stop_cause()
        self._cancel_ignored = cancellation_check()
        #: The run's OpenTelemetry spans and metrics (``None``, the usual case: no span work
        #: at all; see :mod:`._telemetry`).
        self.telemetry = telemetry

    # -- one task ---------------------------------------------------------------------------

    async def run_task(self, task_id: str) -> TaskResult:
        """Run one task to its final status and return its result (see
        :meth:`run_task_status`)."""
        await self.run_task_status(task_id)
        return self.results[task_id]

    async def run_task_status(self, task_id: str) -> TaskStatus:
        """Run one task to its final status: take a slot (with ``max_concurrency``), resolve
        its references, reuse an earlier output if it may, else attempt it (by its kind, with
        its retries and timeout), then record its result and emit its events. Returns the
        status (what an executor needs; the result is in ``results``).

        A map task (``for_each``) runs once per element of its list instead (see
        :mod:`._map`): each element takes a slot, the task itself none.

        Never raises, except the cancellation of the surrounding scope (after recording the
        task as cancelled).

        **Plainly.** A tool task whose tool is awaited directly, with no retries and no
        timeout, in a run that keeps nothing of it but its result (see ``_plain``), is run
        without the record and the steps every other task goes through: its time stamps, its
        arguments and its output are all there is to keep. It ends as any task does (a
        failure, a cancellation, a tool that caught the run's cancellation), through the
        same code, with the record made then."""
        plain = self._plain
        if plain is not None and self.telemetry is None:
            task = self.tasks[task_id]
            tool = plain.get(task.tool) if isinstance(task, ToolTask) else None
            if tool is not None and not task.retries and task.timeout_s is None:
                started = time.time()
                args = None  # until resolved (a task whose references fail made no attempt)
                try:
                    tmpl = self.templates[task_id]
                    args = tmpl.resolve(self.outputs) if tmpl.refs else tmpl.literal
                    output = await tool.fn(**tool.validate_args(args))
                    if type(output) in GENERATOR_TYPES:
                        output = await materialize_async(output)
                except BaseException as exc:
                    tried = 0 if args is None else 1
                    return self._ended_by(TaskRun(task_id, started, None, tried, args), exc)
                if self._cancel_ignored():
                    await self._stopped_anyway(TaskRun(task_id, started, None, 1, args))
                # Held as _finish holds a plain success.
                finished = time.time()
                held = (task_id, output, 1, started, finished, args)
                self._held[task_id] = held
                self.outputs[task_id] = output
                self.took[task_id] = finished - started
                if self.record_success is not None:
                    self.record_success(held)
                return _SUCCEEDED
        if self._kept and task_id in self._kept:  # a resumed run: it succeeded before
            return self._keep(self._kept[task_id])
        if self._maps and self.tasks[task_id].for_each is not None:
            return await self._run_map(task_id)
        slots = self._slots
        if slots is not None:
            await _take(slots)
        task = self.tasks[task_id]
        run = TaskRun(task_id, time.time(), [] if self._intercepted else None)
        if self.emit is not None:
            self.emit(TaskStarted(self.run_id, task_id, run.started_at))
        if self._debug:
            self._log.debug("task.started", run_id=self.run_id, task_id=task_id)
        try:
            tmpl = self.templates[task_id]  # its references, resolved
            run.args = tmpl.resolve(self.outputs) if tmpl.refs else tmpl.literal
            if self._reuse and self._reusable(task, run.args):
                return self._finish(run, _REUSED, self._reuse[task_id][1])
            attempt, retries = self._attempt_for(task)
            if self.telemetry is not None:
                attempt = self.telemetry.attempts(task, attempt)
            while True:
                run.attempts += 1
                try:
                    if isinstance(attempt, Tool):  # hot path: nothing in the way of the tool
                        if attempt.name in self._awaited:
                            output = await attempt.fn(**attempt.validate_args(run.args))
                            if type(output) in GENERATOR_TYPES:
                                output = await materialize_async(output)
                        else:
                            output = await attempt.acall(attempt.validate_args(run.args))
                    else:
                        output = await attempt(run)
                    break
                except NOT_RETRIED:
                    raise
                except Exception as exc:
                    if run.attempts > retries:
                        raise
                    await self._wait_to_retry(run, exc)
        except BaseException as exc:
            return self._ended_by(run, exc)
        else:
            if self._cancel_ignored():
                await self._stopped_anyway(run)
            return self._finish(run, _SUCCEEDED, output)
        finally:
            if slots is not None:
                slots.release()  # after the task's result and events

    def _ended_by(self, run: TaskRun, exc: BaseException) -> TaskStatus:
        """Record ``run`` as ended by ``exc`` (raised by its attempt, or on the way to it) and
        return its status; the cancellation of the surrounding scope is raised again, once
        recorded."""
        if isinstance(exc, self._cancelled_exc):
            if really_cancelled():
                self._finish(run, _CANCELLED, error=self._cancelled_why(run))
                raise exc
            # The tool raised a cancellation of its own (it awaited a future someone else
            # cancelled, say) while nobody cancelled this task: a failure of this task, not
            # a reason to stop its siblings or to lose the run.
            why = f"{describe(exc)} (raised by the task itself; nothing cancelled it)"
            return self._fail(run, exc, why)
        if isinstance(exc, TaskWaitingError):
            return self._finish(run, _WAITING, error=str(exc), error_type=type(exc).__name__)
        if isinstance(exc, TaskDeniedError):
            return self._finish(run, _DENIED, error=str(exc), error_type=type(exc).__name__)
        if isinstance(exc, Exception):
            return self._fail(run, exc, describe(exc))
        # SystemExit (a tool calling sys.exit()), KeyboardInterrupt or GeneratorExit raised by
        # a tool, a custom BaseException: the task fails (not retried). Let through, it would
        # end the run abruptly and lose every other task's result. (A real Ctrl-C arrives as
        # the cancellation of the run, above.)
        why = f"{describe(exc)} (raised by the task; a BaseException, not retried)"
        return self._fail(run, exc, why)

    async def _stopped_anyway(self, run: TaskRun) -> NoReturn:
        """The tool caught the run's cancellation (fail-fast, Ctrl-C) and returned anyway: it
        was stopped, so it did not succeed. Recorded as cancelled, and cancelled again."""
        self._finish(run, _CANCELLED, error=f"{IGNORED_CANCEL}: {self.stop_cause()}")
        await anyio.lowlevel.checkpoint()  # a cancel scope's cancellation, raised again
        raise self._cancelled_exc()  # a one-time Task.cancel(), caught by the tool

    def scrub(self, task_id: str, args: Any, text: str) -> str:
        """``text`` about a call of task ``task_id`` with ``args``, as the redacting
        interceptors would leave it (e.g. an exception's message shown on a span)."""
        tool = getattr(self.tasks.get(task_id), "tool", None)
        if not self._redactors or not isinstance(tool, str) or not isinstance(args, dict):
            return text
        for redactor in self._redactors:
            text = redactor.redact_text(tool, args, text)
        return text

    def _redact_failure(
        self, run: TaskRun, error: str | None, traceback: str | None
    ) -> tuple[str | None, str | None]:
        """Keep secrets out of a failed task's record when its call may not have reached the
        redacting interceptors: its error message and traceback are scrubbed, and the
        arguments they would have passed on are recorded as a redaction (which the run store
        keeps instead)."""
        tool = getattr(self.tasks.get(run.task_id), "tool", None)
        if not isinstance(tool, str) or not isinstance(run.args, dict):
            return error, traceback
        args: dict[str, Any] = run.args
        for redactor in self._redactors:
            if error is not None:
                error = redactor.redact_text(tool, run.args, error)
            if traceback is not None:
                traceback = redactor.redact_text(tool, run.args, traceback)
            new = redactor.redact_args(tool, args)
            if new is not None:
                args = new
        decisions = run.decisions if run.decisions is not None else []
        if args is not run.args and not any(d.redacts_task_call for d in decisions):
            decisions.append(
                CallDecision(
                    tool=tool,
                    decision=REDACT,
                    decided_by="redacting",
                    reason="redacted for the record (the task failed before its call)",
                    args=jsonable(args),
                    at=time.time(),
                    source="plan",
                )
            )
            run.decisions = decisions
        return error, traceback

    def _redact_steps(self, steps: list[AgentStep]) -> list[AgentStep]:
        """An agent's steps as the redacting interceptors would leave them: each call's
        arguments as they would pass them on, and an error it saw back without the values
        they hide. Every call, also one that never reached them (its arguments did not fit
        the tool, the tool is unknown), so that no secret a model wrote reaches the record."""
        out: list[AgentStep] = []
        for step in steps:
            calls = []
            for c in step.calls:
                args, observation = c.args, c.observation
                if isinstance(args, dict):
                    for redactor in self._redactors:
                        if observation is not None and c.is_error:
                            observation = redactor.redact_text(c.tool, c.args, observation)
                        new = redactor.redact_args(c.tool, args)
                        if new is not None:
                            args = new
                if args is c.args and observation is c.observation:
                    calls.append(c)
                else:
                    calls.append(c.model_copy(update={"args": args, "observation": observation}))
            changed = any(a is not b for a, b in zip(calls, step.calls, strict=True))
            out.append(step.model_copy(update={"calls": calls}) if changed else step)
        return out

    async def _run_map(self, task_id: str) -> TaskStatus:
        task = self.tasks[task_id]
        run = TaskRun(task_id, time.time(), None)
        if self.emit is not None:
            self.emit(TaskStarted(self.run_id, task_id, run.started_at))
        return await run_map(self, task, run)

    def stop_cause(self) -> str:
        """Why the run stopped, as the records of the tasks it cancelled say it: the first
        failure when failures stop the run, a plan being written that was rejected, or else
        something outside the run. Worked out once, when the first task is cancelled."""
        if self._stop_cause is None:
            failed = None
            if self.on_failure == "cancel":  # then a cancellation after a failure is its doing
                failed = next(
                    ((t, s) for t, s in self.results.statuses() if s in (_FAILED, _DENIED)), None
                )
            if failed is not None:
                cause = f"the run was stopped after task {failed[0]!r} {failed[1].value}"
            elif getattr(self.graph, "aborted", False):
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
        before = self._reuse.get(task.id)
        return (
            before is not None
            and before[0] == task_fingerprint(task, resolved)
            and same_upstream(self.graph.dependencies[task.id], self.outputs, self._reuse)
        )

    def _attempt_for(self, task: Task) -> tuple[Tool | Attempt, int]:
        """How to attempt ``task``, by its kind, and how many retries it has. A tool task
        whose call has nothing in the way (see :meth:`ToolCalls.is_direct`) gets its tool,
        to be called directly."""
        if isinstance(task, AgentTask):
            return partial(self._attempt_agent, task), task.retries or 0
        tool = self.registry.get(task.tool)
        retries = task.retries if task.retries is not None else tool.retries
        timeout = task.timeout_s if task.timeout_s is not None else tool.timeout_s
        if timeout is None and tool.name in self._direct:
            return tool, retries
        return partial(self._attempt_tool, tool, timeout), retries

    def _attempt_tool(self, tool: Tool, timeout: float | None, run: TaskRun) -> Awaitable[Any]:
        return self.calls.call(
            run.task_id,
            tool,
            run.args,
            attempt=run.attempts,
            decisions=run.decisions,
            timeout=timeout,
        )

    async def _attempt_agent(self, task: AgentTask, run: TaskRun) -> Any:
        if self.llm is None or self._agent_runner is None:
            raise AgentError(
                "this is an agent task (it has an 'instruction') and needs a model: pass "
                "llm=... to execute(), or --model to the CLI"
            )
        node = self._agent_node(task, run)
        timeout = task.timeout_s
        try:
            with anyio.fail_after(timeout) as scope:  # None: no limit
                output, run.steps = await self._agent_runner(node)
        except TimeoutError:
            run.steps = node.partial_steps()
            if not scope.cancel_called:  # raised by the agent itself, not by the task's timeout
                raise
            raise TaskTimeoutError(f"timed out after {timeout:g} s") from None
        except BaseException:  # failed, or cancelled: the record keeps the steps taken so far
            run.steps = node.partial_steps()
            raise
        if scope.cancel_called:  # the agent caught its timeout's cancellation and answered late
            raise TaskTimeoutError(timed_out_late(timeout))
        return output

    def _agent_node(self, task: AgentTask, run: TaskRun) -> AgentNode:
        tools = self.registry.subset(task.tools) if task.tools is not None else self.registry
        context = {d: self.outputs.get(d) for d in self.graph.dependencies[task.id]}
        decisions = run.decisions

        async def call(tool: Tool, args: dict[str, Any]) -> Any:
            return await self.calls.call(
                task.id, tool, args, source="agent", decisions=decisions, timeout=tool.timeout_s
            )

        telemetry = self.telemetry
        if telemetry is not None:
            untraced = call

            async def call(tool: Tool, args: dict[str, Any]) -> Any:
                return await telemetry.agent_call(
                    task.id, tool, args, decisions, partial(untraced, tool, args)
                )

        # An instruction that is one reference ("${paris}") keeps the value's type: show it as
        # a reference inside longer text would be shown (JSON for a dict, not its repr).
        text = run.args if isinstance(run.args, str) else reference_text(run.args)
        node = AgentNode(self.run_id, task, text, tools, context, call, self.llm)
        if run.resume_steps is not None:  # a map task's element: its own steps
            node.resume_steps, run.resume_steps = run.resume_steps, None  # once, not on retry
        else:
            node.resume_steps = self._resume_steps.pop(task.id, None)
        emit = self.emit
        if emit is not None:
            run_id, task_id = self.run_id, task.id

            redactors = self._redactors

            def on_event(kind: str, step: int, **fields: Any) -> None:
                # A call's arguments are shown (progress, listeners) as the redacting
                # interceptors leave them, as they are recorded: a secret the model wrote
                # is not printed on the terminal either.
                if redactors and kind == "tool_call" and isinstance(fields.get("args"), dict):
                    args = fields["args"]
                    for redactor in redactors:
                        hidden = redactor.redact_args(fields.get("tool") or "", args)
                        if hidden is not None:
                            args = hidden
                    fields["args"] = args
                emit(TaskAgentEvent(run_id, task_id, kind, step, **fields))

            node.on_event = on_event
        return node

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

    def _fail(self, run: TaskRun, exc: BaseException, error: str) -> TaskStatus:
        """Record ``run`` as failed by ``exc``, with the traceback of the tool's own code."""
        return self._finish(
            run, _FAILED, error=error, error_type=type(exc).__name__, traceback=task_traceback(exc)
        )

    def _finish(
        self,
        run: TaskRun,
        status: TaskStatus,
        output: Any = None,
        *,
        error: str | None = None,
        error_type: str | None = None,
        elements: list[TaskResult] | None = None,
        traceback: str | None = None,
    ) -> TaskStatus:
        if (
            status is _SUCCEEDED
            and self._compact
            and elements is None
            and run.steps is None
            and not run.decisions
            and self.telemetry is None
        ):
            # A plain success (the most common end of a task): held as its values, its
            # TaskResult built only if someone reads it (see TaskResults).
            task_id, started_at, finished_at = run.task_id, run.started_at, time.time()
            held = (task_id, output, run.attempts, started_at, finished_at, run.args)
            self._held[task_id] = held
            self.outputs[task_id] = output
            self.took[task_id] = finished_at - started_at
            if self.record_success is not None:
                self.record_success(held)
        else:  # the logs below say the error as the record has it (redacted)
            error = self._finish_result(run, status, output, error, error_type, elements, traceback)
        if self._debug:
            self._log.debug(
                "task.finished",
                run_id=self.run_id,
                task_id=run.task_id,
                status=status.value,
                attempts=run.attempts,
                error=error,
            )
        elif error is not None and self._log is not None and status is not _CANCELLED:
            self._log.info(
                "task.failed",
                run_id=self.run_id,
                task_id=run.task_id,
                status=status.value,
                error=error,
            )
        return status

    def _finish_result(
        self,
        run: TaskRun,
        status: TaskStatus,
        output: Any,
        error: str | None,
        error_type: str | None,
        elements: list[TaskResult] | None,
        traceback: str | None,
    ) -> str | None:
        """The end of a task as its TaskResult: built, kept, recorded and announced. Returns
        its error as recorded (what redacting interceptors left of it)."""
        if self._redactors:
            if status is not _SUCCEEDED and status is not _REUSED:
                error, traceback = self._redact_failure(run, error, traceback)
            if run.steps:
                run.steps = self._redact_steps(run.steps)
        task_id, started_at, finished_at = run.task_id, run.started_at, time.time()
        r = task_result(
            task_id,
            status,
            output,
            error,
            error_type,
            run.attempts,
            started_at,
            finished_at,
            run.args,
            run.steps,
            run.decisions or None,
            elements,
            traceback,
        )
        self._held[task_id] = r
        if self.telemetry is not None:
            self.telemetry.finished(r)
        if status is _SUCCEEDED:
            self.outputs[task_id] = output
            self.took[task_id] = finished_at - started_at
        elif status is _REUSED:
            self.outputs[task_id] = output
            self.took[task_id] = 0.0
        elif status is _FAILED or status is _DENIED:
            self.took[task_id] = finished_at - started_at
        if self.record is not None:
            self.record(r)
        if self.emit is not None:
            self.emit(TaskFinished(self.run_id, r))
        return error

    def _keep(self, r: TaskResult) -> TaskStatus:
        """A task of a resumed run that succeeded before the pause: its record stands."""
        self._held[r.task_id] = r
        self.outputs[r.task_id] = r.output
        if r.status is _REUSED:
            self.took[r.task_id] = 0.0
        elif r.started_at is not None and r.finished_at is not None:
            self.took[r.task_id] = r.finished_at - r.started_at
        if self.record is not None:
            self.record(r)
        if self.emit is not None:
            self.emit(TaskFinished(self.run_id, r))
        return r.status

    def mark(self, task_id: str, status: TaskStatus, error: str | None = None) -> TaskResult:
        """Record a task that never started (skipped or cancelled)."""
        r = task_result(task_id, status, None, error, None, 0, None, None, None, None, None, None)
        self._held[task_id] = r
        if self.telemetry is not None:
            self.telemetry.finished(r)
        if self.record is not None:
            self.record(r)
        if self.emit is not None:
            self.emit(TaskFinished(self.run_id, r))
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


async def _take(slots: anyio.CapacityLimiter) -> None:
    """Wait for a slot. The run may have been stopped while the task waited: a slot handed
    over just before the cancellation does not let the task start after it."""
    await slots.acquire()
    try:
        await anyio.lowlevel.checkpoint_if_cancelled()
    except BaseException:
        slots.release()
        raise
