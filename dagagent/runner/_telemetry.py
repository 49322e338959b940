"""One run's OpenTelemetry spans and metrics (see :mod:`dagagent.telemetry`).

Made by ``execute()`` only when the application has set a tracer or meter provider; the
runner then asks ``self.telemetry is not None`` at three points of a task (its attempts, an
agent's tool calls, its record), and does nothing else when it is ``None``: a run without
OpenTelemetry does no span work at all.

The tree of a run::

    invoke_workflow dagagent.run          the run: id, executor, status, task count
    ├── execute_tool TOOL                 one per attempt of a tool task (retries visible),
    │                                     and one, marked reused, for a task taken over
    └── invoke_agent TASK                 one per attempt of an agent task
        ├── chat MODEL                    its model calls (dagagent.llm)
        └── execute_tool TOOL             each tool call its agent made (gen_ai.tool.call.id)

Each task span is current while its tool runs, and the context travels into sync tools'
worker threads (anyio copies it) and to Dask workers (the Dask invoker sends it along), so
a tool's own instrumentation (httpx, a database client) nests under its task.

On Temporal, a task runs on a worker, in a task runner of its own: its telemetry there is
:meth:`RunTelemetry.joined` to the run's span on the driver, whose W3C trace context the
run's workflow hands each activity (:meth:`RunTelemetry.carrier`); the task's spans are
made on the worker, under the driver's run span, and the driver records the tasks' metrics
(it sees every task end, those no worker ran too).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import anyio

from .. import telemetry as otel
from ..errors import TaskDeniedError
from ..plan import AgentTask
from ..results import REDACT, CallDecision, TaskResult, TaskStatus
from ..tools import Tool
from ._cancel import really_cancelled
from ._traceback import task_traceback

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

    from ..graph import PlanGraph
    from ..plan import Task
    from ..results import RunResult
    from ._record import TaskRun
    from ._redaction import Redaction

__all__ = ["RunTelemetry"]

Attempt = Callable[["TaskRun"], Awaitable[Any]]


class RunTelemetry:
    """The spans and metrics of one run."""

    def __init__(
        self,
        tracer: Tracer | None,
        instruments: otel.Instruments | None,
        graph: PlanGraph,
        run_id: str,
        executor: str,
        redaction: Redaction,
    ) -> None:
        self.tracer = tracer
        self.instruments = instruments
        self.graph = graph
        self.run_id = run_id
        self.executor = executor
        self.content = otel.content_captured()
        self.span: Span | None = None
        self._context: Context | None = None
        self._cancelled = anyio.get_cancelled_exc_class()
        #: Applied to what a failure's span says (its message and traceback).
        self.redaction = redaction
        #: Whether this runner records the tasks' metrics (and the spans of reused tasks):
        #: ``False`` on a worker, whose driver records them (see :meth:`joined`).
        self.records = True

    @classmethod
    def start(
        cls,
        graph: PlanGraph,
        run_id: str,
        executor: str,
        parent_id: str | None,
        redaction: Redaction,
    ) -> RunTelemetry | None:
        """The telemetry of a run starting now, with its span begun; ``None`` when
        OpenTelemetry is off (no tracer and no meter provider set)."""
        tracer, instruments = otel.tracer(), otel.instruments()
        if tracer is None and instruments is None:
            return None
        self = cls(tracer, instruments, graph, run_id, executor, redaction)
        if tracer is not None:
            from opentelemetry import trace

            attributes: dict[str, Any] = {
                otel.OPERATION: "invoke_workflow",
                otel.WORKFLOW_NAME: "dagagent.run",
                otel.RUN_ID: run_id,
                otel.EXECUTOR: executor,
            }
            if parent_id is not None:
                attributes[otel.PARENT_RUN_ID] = parent_id
            self.span = tracer.start_span("invoke_workflow dagagent.run", attributes=attributes)
            self._context = trace.set_span_in_context(self.span)
        return self

    @classmethod
    def joined(
        cls,
        graph: PlanGraph,
        run_id: str,
        executor: str,
        redaction: Redaction,
        headers: Mapping[str, str] | None,
    ) -> RunTelemetry | None:
        """The telemetry of a task run on a worker for a run whose span is in another
        process: its task spans are children of the span ``headers`` carry (W3C trace
        context, from :meth:`carrier`; without them, each attempt's span begins a trace),
        and it records no metrics of tasks (the run's driver does). ``None`` when
        OpenTelemetry is off here."""
        tracer, instruments = otel.tracer(), otel.instruments()
        if tracer is None and instruments is None:
            return None
        self = cls(tracer, None, graph, run_id, executor, redaction)
        self.records = False
        if tracer is not None and headers:
            from opentelemetry import propagate

            self._context = propagate.extract(dict(headers))
        return self

    def carrier(self) -> dict[str, str] | None:
        """The run span's trace context as W3C headers, for the tasks run in another
        process to join (see :meth:`joined`); ``None`` when not tracing."""
        if self._context is None:
            return None
        from opentelemetry import propagate

        headers: dict[str, str] = {}
        propagate.inject(headers, context=self._context)
        return headers or None

    @contextmanager
    def current(self) -> Iterator[None]:
        """The run's span is the current one inside (what the run does nests under it)."""
        if self.span is None:
            yield
            return
        from opentelemetry.trace import use_span

        with use_span(self.span, end_on_exit=False):
            yield

    def end(self, result: RunResult | None, exc: BaseException | None = None) -> None:
        """End the run's span with how the run ended."""
        span = self.span
        if span is None:
            return
        if result is not None:
            span.set_attribute(otel.RUN_STATUS, result.status.value)
            span.set_attribute(otel.TASK_COUNT, len(result.tasks))
            for status, n in result.counts.items():
                span.set_attribute(f"dagagent.run.tasks.{status}", n)
            if result.status.value == "failed":
                from opentelemetry.trace import Status, StatusCode

                span.set_attribute(otel.ERROR_TYPE, "TaskFailed")
                span.set_status(Status(StatusCode.ERROR, "a task failed"))
        if exc is not None and not isinstance(exc, self._cancelled):
            otel.end_with_error(span, exc)
        span.end()

    # -- a task's attempts -----------------------------------------------------------------

    def attempts(self, task: Task, attempt: Attempt) -> Attempt:
        """``attempt`` with a span around each call: ``execute_tool TOOL`` for a tool task,
        ``invoke_agent TASK`` for an agent task (``attempt`` itself when not tracing)."""
        tracer = self.tracer
        agent = isinstance(task, AgentTask)
        if tracer is None:
            return _as_agent(attempt) if agent else attempt  # metrics only: the role
        from opentelemetry.trace import SpanKind, use_span

        base: dict[str, Any] = {otel.RUN_ID: self.run_id, otel.TASK_ID: task.id}
        if agent:
            name = f"invoke_agent {task.id}"
            base[otel.OPERATION] = "invoke_agent"
            base[otel.AGENT_NAME] = task.id
            base[otel.TASK_KIND] = "agent"
        else:
            tool_name = task.tool_names[0] if task.tool_names else ""
            name = f"execute_tool {tool_name}"
            base[otel.OPERATION] = "execute_tool"
            base[otel.TOOL_NAME] = tool_name
            base[otel.TOOL_TYPE] = "function"
            base[otel.TOOL_CALL_ID] = f"{self.run_id}/{task.id}"
            base[otel.TASK_KIND] = "tool"
        context = self._context
        content = self.content and not agent

        async def traced(run: TaskRun) -> Any:
            attributes = {**base, otel.TASK_ATTEMPT: run.attempts}
            span = tracer.start_span(
                name, context=context, kind=SpanKind.INTERNAL, attributes=attributes
            )
            role = otel.ROLE.set("agent") if agent else None  # its model calls' role
            try:
                with use_span(span, end_on_exit=False, record_exception=False):
                    output = await attempt(run)
            except BaseException as exc:
                self._failed(span, exc, task.id, run.args)
                raise
            else:
                span.set_attribute(otel.TASK_STATUS, TaskStatus.SUCCEEDED.value)
                if content:
                    span.set_attribute(otel.TOOL_CALL_RESULT, otel.content_text(output))
                return output
            finally:
                if content:
                    args = _redacted(run.decisions, 0, "plan", run.args)
                    span.set_attribute(otel.TOOL_CALL_ARGUMENTS, otel.content_text(args))
                span.end()
                if role is not None:
                    otel.ROLE.reset(role)

        return traced

    def _failed(self, span: Span, exc: BaseException, task_id: str, args: Any) -> None:
        if isinstance(exc, self._cancelled) and really_cancelled():
            span.set_attribute(otel.TASK_STATUS, TaskStatus.CANCELLED.value)
            return
        denied = isinstance(exc, TaskDeniedError)
        status = TaskStatus.DENIED if denied else TaskStatus.FAILED
        span.set_attribute(otel.TASK_STATUS, status.value)
        message, stack = str(exc), task_traceback(exc)
        tool = getattr(self.graph.tasks.get(task_id), "tool", None)
        if self.redaction and isinstance(tool, str):
            message = self.redaction.text(tool, args, message)
            stack = None if stack is None else self.redaction.text(tool, args, stack)
        otel.end_with_error(span, exc, stack, message)

    # -- an agent's tool calls -------------------------------------------------------------

    async def agent_call(
        self,
        task_id: str,
        tool: Tool,
        args: Mapping[str, Any],
        decisions: list[CallDecision] | None,
        call: Callable[[], Awaitable[Any]],
    ) -> Any:
        """``call()``, one tool call an agent task's agent made, in an ``execute_tool`` span
        under the agent task's span."""
        tracer = self.tracer
        if tracer is None:
            return await call()
        from opentelemetry.trace import SpanKind, use_span

        attributes: dict[str, Any] = {
            otel.OPERATION: "execute_tool",
            otel.TOOL_NAME: tool.name,
            otel.TOOL_TYPE: "function",
            otel.RUN_ID: self.run_id,
            otel.TASK_ID: task_id,
            otel.CALL_SOURCE: "agent",
        }
        call_id = otel.TOOL_CALL_ID_VAR.get()
        if call_id is not None:
            attributes[otel.TOOL_CALL_ID] = call_id
        before = len(decisions) if decisions is not None else 0
        span = tracer.start_span(
            f"execute_tool {tool.name}", kind=SpanKind.INTERNAL, attributes=attributes
        )
        try:
            with use_span(span, end_on_exit=False, record_exception=False):
                output = await call()
        except BaseException as exc:
            self._failed(span, exc, task_id, args)
            raise
        else:
            span.set_attribute(otel.TASK_STATUS, TaskStatus.SUCCEEDED.value)
            if self.content:
                span.set_attribute(otel.TOOL_CALL_RESULT, otel.content_text(output))
            return output
        finally:
            if self.content:
                shown = _redacted(decisions, before, "agent", args)
                span.set_attribute(otel.TOOL_CALL_ARGUMENTS, otel.content_text(shown))
            span.end()

    # -- a task's record -------------------------------------------------------------------

    def finished(self, r: TaskResult) -> None:
        """A task's result is recorded: its metrics, and the span of a reused task."""
        if not self.records:
            return
        task = self.graph.tasks.get(r.task_id)
        status = r.status
        if status is TaskStatus.REUSED and self.tracer is not None and task is not None:
            self._reused(task, r)
        inst = self.instruments
        if inst is None:
            return
        attributes: dict[str, Any] = {otel.TASK_STATUS: status.value, otel.EXECUTOR: self.executor}
        if task is not None:
            attributes[otel.TASK_KIND] = "agent" if isinstance(task, AgentTask) else "tool"
            if not isinstance(task, AgentTask) and task.tool_names:
                attributes[otel.TOOL_NAME] = task.tool_names[0]
        inst.tasks.add(1, attributes)
        duration = r.duration_s
        if duration is not None and status is not TaskStatus.REUSED:
            inst.task_duration.record(duration, attributes)

    def _reused(self, task: Task, r: TaskResult) -> None:
        assert self.tracer is not None
        tool_name = (
            task.tool_names[0] if task.tool_names and not isinstance(task, AgentTask) else ""
        )
        agent = isinstance(task, AgentTask)
        operation = "invoke_agent" if agent else "execute_tool"
        attributes: dict[str, Any] = {
            otel.OPERATION: operation,
            otel.RUN_ID: self.run_id,
            otel.TASK_ID: task.id,
            otel.TASK_STATUS: TaskStatus.REUSED.value,
            otel.TASK_REUSED: True,
            otel.TASK_KIND: "agent" if agent else "tool",
        }
        if agent:
            attributes[otel.AGENT_NAME] = task.id
        else:
            attributes[otel.TOOL_NAME] = tool_name
        start = int((r.started_at or time.time()) * 1e9)
        end = int((r.finished_at or time.time()) * 1e9)
        span = self.tracer.start_span(
            f"{operation} {task.id if agent else tool_name}",
            context=self._context,
            attributes=attributes,
            start_time=start,
        )
        span.end(end_time=max(end, start))


def _as_agent(attempt: Attempt) -> Attempt:
    """``attempt`` of an agent task, its model calls marked as the agent's."""

    async def as_agent(run: TaskRun) -> Any:
        token = otel.ROLE.set("agent")
        try:
            return await attempt(run)
        finally:
            otel.ROLE.reset(token)

    return as_agent


def _redacted(decisions: list[CallDecision] | None, start: int, source: str, args: Any) -> Any:
    """The arguments of a call as the redacting interceptor left them (``args`` if none did):
    the last redaction of a call from ``source`` among ``decisions[start:]``."""
    found = args
    for d in (decisions or ())[start:]:
        if d.decision == REDACT and d.source == source:
            found = d.args
    return found
