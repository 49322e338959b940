"""Asking: what an ``ask`` callback gets (:class:`ApprovalRequest`) and returns
(:class:`Approval`), and how a policy puts its questions to it (one at a time)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import anyio
import anyio.to_thread

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..results import ApprovalAnswer
    from ..runner import ToolInvocation
    from ..tools import Tool
    from ._rules import Rule

__all__ = ["Approval", "ApprovalRequest", "AskCallback", "AskResult", "Asker", "ask_later"]


@dataclass(frozen=True)
class Approval:
    """The answer of an ``ask`` callback. Build it with :meth:`approve`, :meth:`deny`,
    :meth:`edit` or :meth:`later`; ``decided_by`` names who decided (default: the callback).
    """

    approved: bool
    reason: str | None = None
    args: Mapping[str, Any] | None = None
    decided_by: str | None = None
    wait: bool = False

    @classmethod
    def approve(cls, reason: str | None = None, *, by: str | None = None) -> Approval:
        return cls(True, reason, None, by)

    @classmethod
    def deny(cls, reason: str | None = None, *, by: str | None = None) -> Approval:
        return cls(False, reason, None, by)

    @classmethod
    def edit(
        cls, args: Mapping[str, Any], reason: str | None = None, *, by: str | None = None
    ) -> Approval:
        """Approve the call with these arguments instead (they are validated again)."""
        return cls(True, reason, dict(args), by)

    @classmethod
    def later(cls, reason: str | None = None) -> Approval:
        """No answer now: a person decides later. The task waits (status ``waiting``), the
        run goes on as far as it can and ends ``paused``; see :func:`ask_later`."""
        return cls(False, reason, None, None, True)

    @classmethod
    def from_answer(cls, answer: ApprovalAnswer) -> Approval:
        """The approval a recorded decision (``dagagent approve``) stands for."""
        by = answer.decided_by
        if answer.decision == "deny":
            return cls.deny(answer.reason or "not approved", by=by)
        if answer.decision == "edit" and answer.edit_args is not None:
            return cls.edit(answer.edit_args, answer.reason, by=by)
        return cls.approve(answer.reason, by=by)


def ask_later(request: ApprovalRequest) -> Approval:
    """The ``ask`` callback of unattended runs: every question is answered later, by a
    person (``dagagent approve``, or :meth:`dagagent.RunStore.decide`): the task waits and
    the run ends ``paused`` until it is resumed (``dagagent resume``, :func:`dagagent.resume`).
    """
    return Approval.later("a person decides later (dagagent approve)")


@dataclass(frozen=True)
class ApprovalRequest:
    """What an ``ask`` callback is asked about: the call and the rule that wants the question
    (``None`` when the policy's default is ``ask``, or a limit asks); ``reason``: why a limit
    asks (the call would cross it)."""

    call: ToolInvocation
    rule: Rule | None
    rule_label: str
    reason: str | None = None

    @property
    def task_id(self) -> str:
        return self.call.task_id

    @property
    def tool(self) -> Tool:
        return self.call.tool

    @property
    def tool_name(self) -> str:
        return self.call.tool.name

    @property
    def args(self) -> dict[str, Any]:
        return self.call.args

    @property
    def source(self) -> str:
        return self.call.source

    def describe(self) -> str:
        who = "an agent step of task" if self.call.source == "agent" else "task"
        text = f"{who} {self.call.task_id!r} wants to call {self.call.tool.name!r}"
        if self.reason:
            text += f", beyond {self.rule_label}: {self.reason}"
        return text


AskResult = Union[Approval, bool]  # noqa: UP007 - a runtime alias, kept valid on 3.10
AskCallback = Callable[[ApprovalRequest], Union[AskResult, Awaitable[AskResult]]]  # noqa: UP007


class Asker:
    """Puts a policy's questions to its ``ask`` callback: sync callbacks in a worker thread,
    async ones awaited, one question at a time unless ``serialize`` is false. Without a
    callback, every question is denied and says why."""

    def __init__(self, ask: AskCallback | None, *, serialize: bool = True) -> None:
        self.ask = ask
        self.serialize = serialize
        self.name = _callable_name(ask) if ask is not None else ""
        self._is_async = ask is not None and _is_async(ask)
        self._lock = anyio.Lock() if serialize else None

    async def __call__(self, request: ApprovalRequest) -> Approval:
        if self.ask is None:
            return Approval.deny(
                f"approval needed for tool {request.tool_name!r} but no ask callback was given",
                by=request.rule_label,
            )
        if self.ask is ask_later:  # nothing to wait for here: no thread, no lock
            return ask_later(request)
        if self._lock is None:
            return await self._call(request)
        async with self._lock:
            return await self._call(request)

    async def _call(self, request: ApprovalRequest) -> Approval:
        ask = self.ask
        assert ask is not None
        answer: Any
        if self._is_async:
            answer = await ask(request)  # type: ignore[misc]
        else:
            answer = await anyio.to_thread.run_sync(ask, request)
            if inspect.isawaitable(answer):
                answer = await answer
        if isinstance(answer, Approval):
            return answer
        if isinstance(answer, bool):
            return Approval(answer)
        raise ConfigError(
            f"the ask callback {self.name} returned {type(answer).__name__}; "
            "expected an Approval or a bool"
        )


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - objects with an async __call__
    )


def _callable_name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return f"ask callback {name!r}"
