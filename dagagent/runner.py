"""Running ONE task: references → arguments → call → timeout / retries → TaskResult + events.

Executors decide *when* a task starts and call :meth:`TaskRunner.run_task`; everything about
*what* running it means lives here, so that every executor behaves the same. The runner has
two seams of its own:

- **interceptors** wrap every tool call (tracing, caching, redaction, approval rules);
- the **invoker** performs the call itself (in-process by default; the Dask executor ships
  it to a worker). Only the tool call travels; references, validation, retries, records and
  events stay here.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from .errors import (
    AgentError,
    ReferenceResolutionError,
    TaskDeniedError,
    TaskTimeoutError,
    ToolArgumentsError,
    UnknownToolError,
)
from .events import (
    Listener,
    TaskAgentEvent,
    TaskDecision,
    TaskFinished,
    TaskRetrying,
    TaskStarted,
    debug_enabled,
)
from .plan import _interp_text
from .results import AgentStep, CallDecision, TaskResult, TaskStatus, jsonable
from .tools import GENERATOR_TYPES, materialize_async

if TYPE_CHECKING:
    from .graph import PlanGraph
    from .plan import Task
    from .tools import Registry, Tool

__all__ = [
    "AgentTaskRunner",
    "Interceptor",
    "Invoker",
    "RetryPolicy",
    "TaskRunner",
    "ToolCall",
    "task_fingerprint",
]

Invoker = Callable[["Tool", Mapping[str, Any]], Awaitable[Any]]
CallNext = Callable[["ToolCall"], Awaitable[Any]]
Interceptor = Callable[["ToolCall", CallNext], Awaitable[Any]]


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff between attempts: ``base_delay_s * 2**(attempt-1)``, capped, with ±jitter."""

    base_delay_s: float = 0.2
    max_delay_s: float = 30.0
    jitter: float = 0.5

    def delay(self, attempt: int) -> float:
        d: float = min(self.max_delay_s, self.base_delay_s * 2.0 ** (attempt - 1))
        if self.jitter:
            d *= 1 + random.uniform(-self.jitter, self.jitter)
        return max(0.0, d)


@dataclass
class ToolCall:
    """One tool call as interceptors see it. Interceptors may replace ``args`` (then they are
    validated again; assign a new dict rather than mutating it), return a result without
    calling ``call_next``, or raise :class:`~dagagent.errors.TaskDeniedError` to refuse it.

    ``timeout`` (the task's timeout, if any) applies to the innermost call only, so time an
    interceptor spends waiting (e.g. for a person to approve) does not count against it."""

    run_id: str
    task_id: str
    tool: Tool
    args: dict[str, Any]
    attempt: int = 1
    source: str = "plan"  # "plan" for a tool task, "agent" for a call made by a ReAct node
    decisions: list[CallDecision] = field(default_factory=list)
    timeout: float | None = None
    _emit: Callable[[Any], None] | None = field(default=None, repr=False)
    _validated: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def tool_name(self) -> str:
        return self.tool.name

    def decide(
        self, decision: str, decided_by: str, reason: str | None = None, *, rule: str | None = None
    ) -> CallDecision:
        """Record a decision about this call (allow / deny / edit by an approval ``rule``,
        redact...) in the task's record, and emit it as an event."""
        entry = CallDecision(
            tool=self.tool.name,
            decision=decision,
            decided_by=decided_by,
            reason=reason,
            args=jsonable(self.args),
            at=time.time(),
            rule=rule,
            source=self.source,
        )
        self.decisions.append(entry)
        if self._emit is not None:
            self._emit(
                TaskDecision(
                    self.run_id, self.task_id, self.tool.name, decision, decided_by, reason
                )
            )
        return entry


@dataclass
class AgentNode:
    """What an agent task gets: its task, the resolved instruction, and a way to call tools
    through the same interceptors as plan tasks."""

    run_id: str
    task: Task
    instruction: str
    tools: Registry
    context: dict[str, Any]
    call_tool: Callable[[Tool, dict[str, Any]], Awaitable[Any]]
    llm: Any
    # Set by the agent runner: the steps taken so far. Whenever the agent does not return
    # (it fails, times out or is cancelled), the task's record keeps these steps.
    steps_so_far: Callable[[], list[AgentStep] | None] | None = None
    # Set by the runner when the run has listeners: the agent runner reports each thing the
    # agent does (``kind``, ``step`` and the fields of a ``TaskAgentEvent``) through it.
    on_event: Callable[..., None] | None = None

    def partial_steps(self) -> list[AgentStep] | None:
        if self.steps_so_far is None:
            return None
        try:
            return self.steps_so_far() or None
        except Exception:  # a record of the steps must never turn into a second failure
            return None


AgentTaskRunner = Callable[[AgentNode], Awaitable[tuple[Any, list[AgentStep] | None]]]

_NOT_RETRIED = (
    ToolArgumentsError,
    ReferenceResolutionError,
    TaskDeniedError,
    UnknownToolError,
    AgentError,
)


_SUCCEEDED = TaskStatus.SUCCEEDED
_REUSED = TaskStatus.REUSED
_FAILED = TaskStatus.FAILED
_CANCELLED = TaskStatus.CANCELLED

_RESULT_FIELDS = (
    "task_id",
    "status",
    "output",
    "error",
    "error_type",
    "attempts",
    "started_at",
    "finished_at",
    "args",
    "steps",
    "decisions",
)
_RESULT_FIELDS_SET = set(_RESULT_FIELDS)
# What ``TaskResult.model_construct`` does when every field is given, without its generic
# per-field loop (one result is built per task). Only while TaskResult stays a plain model.
_FAST_RESULTS = (
    tuple(TaskResult.model_fields) == _RESULT_FIELDS
    and not TaskResult.__pydantic_post_init__
    and not TaskResult.__pydantic_root_model__
    and TaskResult.model_config.get("extra") != "allow"
    and all(
        f.alias is None and f.validation_alias is None for f in TaskResult.model_fields.values()
    )
)
_new = object.__new__
_set = object.__setattr__


def _task_result(
    task_id: str,
    status: TaskStatus,
    output: Any,
    error: str | None,
    error_type: str | None,
    attempts: int,
    started_at: float | None,
    finished_at: float | None,
    args: Any,
    steps: list[AgentStep] | None,
    decisions: list[CallDecision] | None,
) -> TaskResult:
    values = {
        "task_id": task_id,
        "status": status,
        "output": output,
        "error": error,
        "error_type": error_type,
        "attempts": attempts,
        "started_at": started_at,
        "finished_at": finished_at,
        "args": args,
        "steps": steps,
        "decisions": decisions,
    }
    if not _FAST_RESULTS:
        return TaskResult.model_construct(**values)
    r: TaskResult = _new(TaskResult)
    _set(r, "__dict__", values)
    _set(r, "__pydantic_fields_set__", _RESULT_FIELDS_SET.copy())
    _set(r, "__pydantic_extra__", None)
    _set(r, "__pydantic_private__", None)
    return r


def task_fingerprint(task: Task, resolved: Any) -> str:
    """What makes a task's output reusable: its id, tool (or instruction and tool subset) and
    its resolved inputs. Equal fingerprints → the earlier output may be reused."""
    payload = {
        "id": task.id,
        "tool": task.tool,
        "tools": task.tools,
        "input": jsonable(resolved),
    }
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class TaskRunner:
    """Runs the tasks of one run. ``results`` and ``outputs`` fill in as tasks finish."""

    def __init__(
        self,
        graph: PlanGraph,
        registry: Registry | None,
        *,
        run_id: str,
        retry: RetryPolicy | None = None,
        max_concurrency: int | None = None,
        interceptors: Sequence[Interceptor] = (),
        listeners: Sequence[Listener] = (),
        invoker: Invoker | None = None,
        llm: Any = None,
        agent_runner: AgentTaskRunner | None = None,
        reuse: Mapping[str, tuple[str, Any]] | None = None,
        logger: Any = None,
    ) -> None:
        from .tools import Registry

        self.graph = graph
        self.tasks = graph.tasks
        self.templates = graph.templates
        self.registry = registry if registry is not None else Registry()
        self.run_id = run_id
        self.retry = retry or RetryPolicy()
        self.results: dict[str, TaskResult] = {}
        self.outputs: dict[str, Any] = {}
        self.listeners = tuple(listeners)
        self._emit_fn = self._emit if self.listeners else None
        self._invoker = invoker
        self._interceptors = tuple(interceptors)
        self.llm = llm
        self._agent_runner = agent_runner
        self._reuse = dict(reuse or {})
        self._partial_steps: dict[str, list[AgentStep] | None] = {}  # agent tasks cut off
        self._limiter = anyio.CapacityLimiter(max_concurrency) if max_concurrency else None
        if self._limiter is not None:
            # A task takes its slot before it starts and keeps it until it finishes (retries
            # included): at most max_concurrency tasks are ever between TaskStarted and
            # TaskFinished, and a task waiting for a slot has not started.
            self.run_task = self._run_task_limited  # type: ignore[method-assign]
        self._tool_limiters = {
            t.name: anyio.CapacityLimiter(t.max_concurrency)
            for t in self.registry
            if t.max_concurrency
        }
        self._log = logger
        self._debug = logger is not None and debug_enabled(logger)
        self._cancelled_exc = anyio.get_cancelled_exc_class()
        # Nothing between the runner and an async tool: call it directly (see run_task).
        self._direct = self._limiter is None and not self._interceptors and self._invoker is None
        self._chain: CallNext = self._compose()

    # -- events ---------------------------------------------------------------------------

    def _emit(self, event: Any) -> None:
        for listener in self.listeners:
            try:
                listener(event)
            except Exception as exc:  # a broken listener must not break the run
                if self._log is not None:
                    self._log.warning("listener.failed", error=repr(exc), event_kind=event.kind)

    # -- the tool call seam ---------------------------------------------------------------

    def _compose(self) -> CallNext:
        async def invoke(call: ToolCall) -> Any:
            if call.timeout is None:
                return await self._invoke(call.tool, call.args)
            return await self._invoke_timed(call.tool, call.args, call.timeout)

        chain: CallNext = invoke
        for icpt in reversed(self._interceptors):
            chain = _bind(icpt, chain)
        return chain

    async def _invoke(self, tool: Tool, args: Mapping[str, Any]) -> Any:
        lim = self._tool_limiters.get(tool.name) if self._tool_limiters else None
        if lim is not None:
            async with lim:
                return await (self._invoker or _local)(tool, args)
        if self._invoker is not None:
            return await self._invoker(tool, args)
        return await tool.acall(args)

    async def _invoke_timed(self, tool: Tool, args: Mapping[str, Any], timeout: float) -> Any:
        try:
            with anyio.fail_after(timeout):
                return await self._invoke(tool, args)
        except TimeoutError:
            raise TaskTimeoutError(f"timed out after {timeout:g} s") from None

    async def call_tool(
        self,
        task_id: str,
        tool: Tool,
        args: Mapping[str, Any],
        *,
        attempt: int = 1,
        source: str = "plan",
        decisions: list[CallDecision] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Validate ``args`` and call ``tool`` through the interceptors and the invoker
        (``timeout`` bounds the invoker call, not the interceptors)."""
        validated = tool.validate_args(args)
        if not self._interceptors:
            if timeout is None:
                return await self._invoke(tool, validated)
            return await self._invoke_timed(tool, validated, timeout)
        call = ToolCall(
            self.run_id,
            task_id,
            tool,
            validated,
            attempt,
            source,
            timeout=timeout,
            _emit=self._emit_fn,
            _validated=validated,
        )
        try:
            return await self._chain(call)
        finally:
            if decisions is not None:
                decisions.extend(call.decisions)

    # -- one task -------------------------------------------------------------------------

    def _same_upstream(self, task_id: str) -> bool:
        """Whether every task ``task_id`` depends on has the output it had in the run being
        reused (reused itself, or run again with an equal result). Arguments are not all of a
        task's inputs: an agent task sees its dependencies' outputs, and a ``depends_on``
        may stand for a side effect (a file written upstream)."""
        reuse, outputs = self._reuse, self.outputs
        for d in self.graph.dependencies[task_id]:
            before = reuse.get(d)
            if before is None or d not in outputs:
                return False
            now = outputs[d]
            if now is not before[1] and not _same_output(now, before[1]):
                return False
        return True

    def mark(self, task_id: str, status: TaskStatus, error: str | None = None) -> TaskResult:
        """Record a task that never started (skipped or cancelled)."""
        r = _task_result(task_id, status, None, error, None, 0, None, None, None, None, None)
        self.results[task_id] = r
        if self._emit_fn is not None:
            self._emit_fn(TaskFinished(self.run_id, r))
        return r

    async def _run_task_limited(self, task_id: str) -> TaskResult:
        limiter = self._limiter
        assert limiter is not None
        await limiter.acquire()
        try:
            # The run may have been stopped while this task waited: a slot handed over just
            # before the cancellation does not let the task start after it.
            await anyio.lowlevel.checkpoint_if_cancelled()
            return await TaskRunner.run_task(self, task_id)
        finally:
            limiter.release()

    async def run_task(self, task_id: str) -> TaskResult:
        """Run one task to its final status. Never raises, except the cancellation of the
        surrounding scope (after recording the task as cancelled)."""
        task = self.tasks[task_id]
        started = time.time()
        emit = self._emit_fn
        if emit is not None:
            emit(TaskStarted(self.run_id, task_id, started))
        if self._debug:
            self._log.debug("task.started", run_id=self.run_id, task_id=task_id)
        attempts = 0
        resolved: Any = None
        steps: list[AgentStep] | None = None
        decisions: list[CallDecision] | None = [] if self._interceptors else None
        status = _FAILED
        output: Any = None
        error: str | None = None
        error_type: str | None = None
        try:
            tmpl = self.templates[task_id]
            resolved = tmpl.resolve(self.outputs) if tmpl.refs else tmpl.literal
            if self._reuse and task_id in self._reuse:
                fp, prev = self._reuse[task_id]
                if fp == task_fingerprint(task, resolved) and self._same_upstream(task_id):
                    return self._finish(
                        task_id,
                        TaskStatus.REUSED,
                        prev,
                        None,
                        None,
                        0,
                        started,
                        resolved,
                        None,
                        None,
                    )
            if task.tool is not None:
                tool = self.registry.get(task.tool)
                retries = task.retries if task.retries is not None else tool.retries
                timeout = task.timeout_s if task.timeout_s is not None else tool.timeout_s
                # No limiter, interceptor, invoker or timeout in the way of an async tool:
                # what _attempt_tool -> call_tool -> _invoke -> Tool.acall would do, inline.
                direct = (
                    self._direct
                    and timeout is None
                    and tool._is_async
                    and tool.name not in self._tool_limiters
                )
            else:
                tool = None
                retries = task.retries or 0
                timeout = task.timeout_s
                direct = False
            while True:
                attempts += 1
                try:
                    if direct:
                        output = await tool.fn(**tool.validate_args(resolved))  # type: ignore[union-attr]
                        if type(output) in GENERATOR_TYPES:
                            output = await materialize_async(output)
                    elif tool is not None:
                        output = await self._attempt_tool(
                            task_id, tool, resolved, timeout, attempts, decisions
                        )
                    else:
                        output, steps = await self._attempt_agent(
                            task, resolved, timeout, decisions
                        )
                    status = _SUCCEEDED
                    break
                except _NOT_RETRIED:
                    raise
                except Exception as exc:
                    if attempts > retries:
                        raise
                    delay = self.retry.delay(attempts)
                    if emit is not None:
                        emit(TaskRetrying(self.run_id, task_id, attempts, _describe(exc), delay))
                    if self._log is not None:
                        self._log.info(
                            "task.retrying",
                            run_id=self.run_id,
                            task_id=task_id,
                            attempt=attempts,
                            error=_describe(exc),
                            delay_s=delay,
                        )
                    if delay:
                        await anyio.sleep(delay)
        except self._cancelled_exc as exc:
            if not _really_cancelled():
                # The tool raised a cancellation of its own (it awaited a future someone
                # else cancelled, say) while nobody cancelled this task: a failure of this
                # task, not a reason to stop its siblings or to lose the run.
                status, error_type = _FAILED, type(exc).__name__
                error = f"{_describe(exc)} (raised by the task itself; nothing cancelled it)"
            else:
                if self._partial_steps:
                    steps = self._partial_steps.pop(task_id, None) or steps
                self._finish(
                    task_id,
                    TaskStatus.CANCELLED,
                    None,
                    "cancelled while running",
                    None,
                    attempts,
                    started,
                    resolved,
                    steps,
                    decisions,
                )
                raise
        except TaskDeniedError as exc:
            status, error, error_type = TaskStatus.DENIED, str(exc), type(exc).__name__
        except Exception as exc:
            status, error, error_type = TaskStatus.FAILED, _describe(exc), type(exc).__name__
            if self._partial_steps:  # an agent that did not answer keeps the steps it took
                steps = self._partial_steps.pop(task_id, None) or steps
        except BaseException as exc:
            # SystemExit (a tool calling sys.exit()), KeyboardInterrupt or GeneratorExit raised
            # by a tool, a custom BaseException: the task fails (not retried). Let through, it
            # would end the run abruptly and lose every other task's result. (A real Ctrl-C
            # arrives as the cancellation of the run, above.)
            status, error_type = _FAILED, type(exc).__name__
            error = f"{_describe(exc)} (raised by the task; a BaseException, not retried)"
        return self._finish(
            task_id,
            status,
            output,
            error,
            error_type,
            attempts,
            started,
            resolved,
            steps,
            decisions,
        )

    def _finish(
        self,
        task_id: str,
        status: TaskStatus,
        output: Any,
        error: str | None,
        error_type: str | None,
        attempts: int,
        started: float,
        resolved: Any,
        steps: list[AgentStep] | None,
        decisions: list[CallDecision] | None,
    ) -> TaskResult:
        r = _task_result(
            task_id,
            status,
            output,
            error,
            error_type,
            attempts,
            started,
            time.time(),
            resolved,
            steps,
            decisions or None,
        )
        self.results[task_id] = r
        if status is _SUCCEEDED or status is _REUSED:
            self.outputs[task_id] = output
        if self._emit_fn is not None:
            self._emit_fn(TaskFinished(self.run_id, r))
        if self._debug:
            self._log.debug(
                "task.finished",
                run_id=self.run_id,
                task_id=task_id,
                status=status.value,
                attempts=attempts,
                error=error,
            )
        elif error is not None and self._log is not None and status is not _CANCELLED:
            self._log.info(
                "task.failed", run_id=self.run_id, task_id=task_id, status=status.value, error=error
            )
        return r

    async def _attempt_tool(
        self,
        task_id: str,
        tool: Tool,
        args: Any,
        timeout: float | None,
        attempt: int,
        decisions: list[CallDecision] | None,
    ) -> Any:
        return await self.call_tool(
            task_id, tool, args, attempt=attempt, decisions=decisions, timeout=timeout
        )

    async def _attempt_agent(
        self,
        task: Task,
        instruction: Any,
        timeout: float | None,
        decisions: list[CallDecision] | None,
    ) -> tuple[Any, list[AgentStep] | None]:
        if self.llm is None or self._agent_runner is None:
            raise AgentError(
                "this is an agent task (it has an 'instruction') and needs a model: pass "
                "llm=... to execute(), or --model to the CLI"
            )
        tools = self.registry.subset(task.tools) if task.tools is not None else self.registry
        context = {d: self.outputs.get(d) for d in self.graph.dependencies[task.id]}

        async def call(tool: Tool, args: dict[str, Any]) -> Any:
            return await self.call_tool(
                task.id, tool, args, source="agent", decisions=decisions, timeout=tool.timeout_s
            )

        # An instruction that is one reference ("${paris}") keeps the value's type: show it as
        # a reference inside longer text would be shown (JSON for a dict, not its repr).
        text = instruction if isinstance(instruction, str) else _interp_text(instruction)
        node = AgentNode(self.run_id, task, text, tools, context, call, self.llm)
        emit = self._emit_fn
        if emit is not None:
            run_id, task_id = self.run_id, task.id

            def on_event(kind: str, step: int, **fields: Any) -> None:
                emit(TaskAgentEvent(run_id, task_id, kind, step, **fields))

            node.on_event = on_event
        try:
            with anyio.fail_after(timeout):  # None: no limit
                answer = await self._agent_runner(node)
        except TimeoutError:
            self._partial_steps[task.id] = node.partial_steps()
            if timeout is None:  # raised by the agent itself, not by the task's timeout
                raise
            raise TaskTimeoutError(f"timed out after {timeout:g} s") from None
        except BaseException:  # failed, or cancelled: the record keeps the steps taken so far
            self._partial_steps[task.id] = node.partial_steps()
            raise
        self._partial_steps.pop(task.id, None)  # an earlier attempt's steps
        return answer


def _same_output(a: Any, b: Any) -> bool:
    """Equal as recorded: a live output against its JSON record (a set against a list...)."""
    try:
        return _canonical(a) == _canonical(b)
    except Exception:  # cannot be compared: not the same, as far as reuse is concerned
        return False


def _canonical(value: Any) -> str:
    return json.dumps(jsonable(value), sort_keys=True, separators=(",", ":"), default=str)


def _bind(icpt: Interceptor, nxt: CallNext) -> CallNext:
    async def step(call: ToolCall) -> Any:
        async def call_next(c: ToolCall) -> Any:
            if c.args is not c._validated:
                c.args = c.tool.validate_args(c.args)
                c._validated = c.args
            return await nxt(c)

        return await icpt(call, call_next)

    return step


async def _local(tool: Tool, args: Mapping[str, Any]) -> Any:
    return await tool.acall(args)


def _really_cancelled() -> bool:
    """Whether the current task is being cancelled (and not merely handed a cancellation
    exception raised by the code it ran)."""
    if anyio.current_effective_deadline() == -math.inf:
        return True  # an enclosing anyio cancel scope was cancelled
    try:
        task = asyncio.current_task()
    except RuntimeError:  # not on asyncio: trio's Cancelled cannot be raised by user code
        return True
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+
    return task is None or cancelling is None or cancelling() > 0


def _describe(exc: BaseException) -> str:
    if isinstance(
        exc,
        (
            ToolArgumentsError,
            ReferenceResolutionError,
            TaskTimeoutError,
            TaskDeniedError,
            AgentError,
            UnknownToolError,
        ),
    ):
        return str(exc)
    text = str(exc)
    name = type(exc).__name__
    return f"{name}: {text}" if text else name
