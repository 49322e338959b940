"""The tool-call seam: how a validated call reaches its tool.

A call goes through the run's **interceptors** (tracing, caching, redaction, approval rules;
the first is the outermost), then the tool's guardrails (``max_calls``, ``cooldown_s``,
checked and counted on the run's :class:`~dagagent.runner.CallLedger`), then a per-tool
concurrency limit, then the **invoker**, which performs it (in-process by default; the
Dask executor ships it to a worker). The task's timeout bounds only the innermost call, so
time an interceptor spends waiting (say, for a person to approve) does not count against it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, runtime_checkable

import anyio

from ..errors import TaskTimeoutError, ToolLimitError
from ..events import TaskDecision
from ..results import ApprovalAnswer, CallDecision, Decision, DecisionSource
from ..text import jsonable
from ._ledger import CallLedger

if TYPE_CHECKING:
    from ..events import Event
    from ..tools import CallIdentity, Registry, Tool
    from ._effects import Effects

__all__ = [
    "ArgumentRedactor",
    "CallNext",
    "CallOptions",
    "Interceptor",
    "Invoker",
    "ToolCalls",
    "ToolInvocation",
    "invoke_local",
]

Invoker = Callable[["Tool", Mapping[str, Any]], Awaitable[Any]]
"""``async (tool, validated_args) -> output``: performs one call (see ``Executor.invoker``)."""
CallNext = Callable[["ToolInvocation"], Awaitable[Any]]
Interceptor = Callable[["ToolInvocation", CallNext], Awaitable[Any]]
"""``async (invocation, call_next) -> output``: middleware around every tool call."""


@runtime_checkable
class ArgumentRedactor(Protocol):
    """An interceptor that hides secrets in arguments (``dagagent.interceptors.redacting``).
    When a task fails before its call reaches it (its arguments do not validate, an earlier
    interceptor refused it), the runner still asks it to redact what the task's record keeps:
    the arguments and the error message."""

    def redact_args(self, tool: str, args: Any) -> dict[str, Any] | None: ...

    def redact_text(self, tool: str, args: Any, text: str) -> str: ...


@dataclass
class ToolInvocation:
    """One call of a tool by a task, as interceptors see it. Interceptors may replace
    ``args`` (then they are validated again; assign a new dict rather than mutating it),
    return a result without calling ``call_next``, or raise
    :class:`~dagagent.errors.TaskDeniedError` to refuse it.

    ``timeout`` (the task's timeout, if any) applies to the innermost call only, so time an
    interceptor spends waiting (e.g. for a person to approve) does not count against it.

    (Not :class:`dagagent.llm.ToolCall`, which is a call a model asks for.)"""

    run_id: str
    task_id: str
    tool: Tool
    args: dict[str, Any]
    attempt: int = 1
    source: DecisionSource = "plan"  # "plan": a tool task's call; "agent": its agent's
    decisions: list[CallDecision] = field(default_factory=list)
    timeout: float | None = None
    #: Decisions a person recorded about this task's waiting calls (a resumed run).
    answers: Sequence[ApprovalAnswer] = ()
    #: A call of a tool with side effects: its identity (idempotency key...), else ``None``.
    identity: CallIdentity | None = None
    #: The calls of the run (or solve) so far, which guardrails are checked against.
    ledger: CallLedger = field(default_factory=CallLedger, repr=False)
    _emit: Callable[[Event], None] | None = field(default=None, repr=False)
    _validated: dict[str, Any] | None = field(default=None, repr=False)
    _answer: ApprovalAnswer | None = field(default=None, repr=False)

    @property
    def tool_name(self) -> str:
        return self.tool.name

    def answer(self) -> ApprovalAnswer | None:
        """The decision a person recorded about this very call (same tool, same arguments as
        when it was asked), if any: an approval policy uses it instead of asking again. Once
        found it stays this call's answer (a second policy about the call sees it too)."""
        if self._answer is None and self.answers:
            args = jsonable(self.args)
            name = self.tool.name
            for a in self.answers:
                if a.tool == name and a.args == args:
                    self._answer = a
                    break
        return self._answer

    def changed_answer_note(self) -> str | None:
        """When a person decided about this task's call but its arguments have changed since
        (a replan), why it is asked about again; else ``None``."""
        if self._answer is not None:
            return None
        other = next((a for a in self.answers if a.tool == self.tool.name), None)
        if other is None:
            return None
        return (
            f"the arguments changed since {other.decided_by} decided ({other.decision}) "
            "about this call: asked again"
        )

    def decide(
        self,
        decision: Decision,
        decided_by: str,
        reason: str | None = None,
        *,
        rule: str | None = None,
        at: float | None = None,
    ) -> CallDecision:
        """Record a decision about this call (allow / deny / edit by an approval ``rule``,
        redact...) in the task's record, and emit it as an event. ``at``: when it was taken,
        if not now (a person's decision recorded while the run was paused: when they took
        it, not when the resume came to use it)."""
        entry = CallDecision(
            tool=self.tool.name,
            decision=decision,
            decided_by=decided_by,
            reason=reason,
            args=jsonable(self.args),
            at=time.time() if at is None else at,
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


async def invoke_local(tool: Tool, args: Mapping[str, Any]) -> Any:
    """The default invoker: call the tool in this process."""
    return await tool.acall(args)


class CallOptions(TypedDict, total=False):
    """The keywords of :meth:`ToolCalls.call` past the tool and its arguments, for the seams
    that pass them on (:meth:`~dagagent.runner.TaskRunner.call_tool`)."""

    attempt: int
    source: DecisionSource
    decisions: list[CallDecision] | None
    timeout: float | None
    element: int | None


class ToolCalls:
    """The call seam of one run: its interceptors, per-tool limits and invoker, composed once;
    ``effects``: the run's calls with side effects (see :mod:`._effects`)."""

    def __init__(
        self,
        run_id: str,
        registry: Registry,
        interceptors: Sequence[Interceptor] = (),
        invoker: Invoker | None = None,
        emit: Callable[[Event], None] | None = None,
        answers: Mapping[str, Sequence[ApprovalAnswer]] | None = None,
        effects: Effects | None = None,
        ledger: CallLedger | None = None,
    ) -> None:
        self.run_id = run_id
        if effects is None:
            from ._effects import Effects

            effects = Effects(run_id)
        self.effects = effects
        #: The calls made so far, for the guardrails (a solve's, across its rounds).
        self.ledger = ledger if ledger is not None else CallLedger()
        self._answers = dict(answers or {})
        self._interceptors = tuple(interceptors)
        self._invoker = invoker or invoke_local
        self._emit = emit
        self._limits = {
            t.name: anyio.CapacityLimiter(t.max_concurrency) for t in registry if t.max_concurrency
        }
        chain: CallNext = self._innermost
        for icpt in reversed(self._interceptors):
            chain = _bind(icpt, chain)
        self._chain = chain

    @property
    def answers(self) -> Mapping[str, Sequence[ApprovalAnswer]]:
        """A resumed run's decisions about the calls that waited, by task (and element)."""
        return self._answers

    @property
    def interceptors(self) -> tuple[Interceptor, ...]:
        """The interceptors every call goes through, outermost first."""
        return self._interceptors

    @property
    def intercepted(self) -> bool:
        """Whether decisions may be taken about calls: they go through interceptors, or a
        resumed run's record of calls with side effects decides about some."""
        return bool(self._interceptors) or self.effects.has_prior

    async def call(
        self,
        task_id: str,
        tool: Tool,
        args: Mapping[str, Any],
        *,
        attempt: int = 1,
        source: DecisionSource = "plan",
        decisions: list[CallDecision] | None = None,
        timeout: float | None = None,
        element: int | None = None,
    ) -> Any:
        """Validate ``args`` and call ``tool`` through the interceptors and the invoker
        (``timeout`` bounds the invoker call, not the interceptors); decisions taken about
        the call are added to ``decisions``. ``element``: the map element making the call.

        A call of a tool with side effects is first looked up in the run's record (a call
        that took effect is not made again; one in doubt is resolved: see :mod:`._effects`),
        and is made between its intent and its outcome, both committed."""
        validated = tool.validate_args(args)
        identity: CallIdentity | None = None
        if tool.side_effects:
            effects = self.effects
            identity = effects.identify(task_id, element, tool, validated, attempt, source)
            answers = self._answers.get(task_id, ()) if self._answers else ()
            done, output = await effects.before(identity, tool, decisions, answers)
            if done:
                return output
        if not self._interceptors:
            return await self._invoke(tool, validated, timeout, identity)
        call = ToolInvocation(
            self.run_id,
            task_id,
            tool,
            validated,
            attempt,
            source,
            timeout=timeout,
            answers=self._answers.get(task_id, ()) if self._answers else (),
            identity=identity,
            ledger=self.ledger,
            _emit=self._emit,
            _validated=validated,
        )
        try:
            return await self._chain(call)
        finally:
            if decisions is not None:
                decisions.extend(call.decisions)

    async def _innermost(self, call: ToolInvocation) -> Any:
        return await self._invoke(call.tool, call.args, call.timeout, call.identity)

    async def _invoke(
        self,
        tool: Tool,
        args: Mapping[str, Any],
        timeout: float | None,
        identity: CallIdentity | None = None,
    ) -> Any:
        if timeout is None:
            return await self._limited(tool, args, identity)
        try:
            with anyio.fail_after(timeout) as scope:
                output = await self._limited(tool, args, identity)
        except TimeoutError:
            if not scope.cancel_called:  # the tool's own TimeoutError, not the task's timeout
                raise
            raise TaskTimeoutError(f"timed out after {timeout:g} s") from None
        except Exception as exc:
            if not scope.cancel_called:
                raise
            # The tool caught its timeout's cancellation, then failed: it timed out.
            raise TaskTimeoutError(timed_out_late(timeout, exc)) from exc
        if scope.cancel_called:  # the tool caught its timeout's cancellation, returned later
            raise TaskTimeoutError(timed_out_late(timeout))
        return output

    def _guard(self, tool: Tool) -> None:
        """Count the call of ``tool`` about to start, or refuse it: it would cross the tool's
        ``max_calls`` or ``cooldown_s`` (checked and counted in one step, so concurrent calls
        never get past a limit together; after the tool's concurrency limit, so a call that
        waited for a place counts from when it starts)."""
        if tool.max_calls is None and tool.cooldown_s is None:
            return
        ledger, name = self.ledger, tool.name
        crossing = ledger.crossing(
            name, f"tool {name!r}", max_calls=tool.max_calls, cooldown_s=tool.cooldown_s
        )
        if crossing is not None:
            raise ToolLimitError(crossing.message, tool=name, limit=crossing.limit)
        ledger.count(name)

    async def _limited(
        self, tool: Tool, args: Mapping[str, Any], identity: CallIdentity | None
    ) -> Any:
        limit = self._limits.get(tool.name) if self._limits else None
        if limit is None:
            self._guard(tool)
            if identity is None:
                return await self._invoker(tool, args)
            return await self._recorded(tool, args, identity)
        async with limit:
            self._guard(tool)
            if identity is None:
                return await self._invoker(tool, args)
            return await self._recorded(tool, args, identity)

    async def _recorded(self, tool: Tool, args: Mapping[str, Any], identity: CallIdentity) -> Any:
        """A call with side effects, between its intent and its outcome (a call the
        guardrails refuse has neither: it is never made)."""
        invoker = self._invoker
        return await self.effects.invoke(identity, lambda: invoker(tool, args))


def timed_out_late(timeout: float | None, exc: BaseException | None = None) -> str:
    """The error of a task whose tool (or agent) caught the cancellation of its timeout and
    went on: a timed-out task is never a success, whenever it returns."""
    then = f"failed ({type(exc).__name__}: {exc})" if exc is not None else "returned"
    return (
        f"timed out after {timeout:g} s (it caught the cancellation, then {then} later; "
        "its output is discarded)"
    )


def _bind(icpt: Interceptor, nxt: CallNext) -> CallNext:
    async def step(call: ToolInvocation) -> Any:
        async def call_next(c: ToolInvocation) -> Any:
            if c.args is not c._validated:  # an interceptor replaced them: validate again
                c.args = c.tool.validate_args(c.args)
                c._validated = c.args
            return await nxt(c)

        return await icpt(call, call_next)

    return step
