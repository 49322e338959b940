"""Keeping secrets out of what leaves the runner: the one boundary where a task's record, its
events and its spans are redacted.

The redacting interceptors (:class:`~dagagent.runner.ArgumentRedactor`, such as
:func:`dagagent.interceptors.redacting`) rewrite a call's arguments on its way to the tool and
record the redaction as a decision. What never reached them must be redacted all the same: a
task that failed before its call (its arguments did not validate, an earlier interceptor
refused it), an agent's calls whose arguments did not fit, error messages and tracebacks that
quote a secret. :class:`Redaction` does that for every result, event and span, in one place.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

from ..results import REDACT, AgentStep, CallDecision
from ..text import jsonable
from ._calls import ArgumentRedactor, Interceptor

__all__ = ["Redaction"]


class Redaction:
    """The redacting interceptors of a run, applied to what leaves its runner."""

    def __init__(self, interceptors: Sequence[Interceptor]) -> None:
        self.redactors: tuple[ArgumentRedactor, ...] = tuple(
            cast(ArgumentRedactor, i)  # mypy does not narrow a Callable by a Protocol
            for i in interceptors
            if isinstance(i, ArgumentRedactor)
        )

    def __bool__(self) -> bool:
        return bool(self.redactors)

    def args(self, tool: str, args: Any) -> Any:
        """``args`` of a call of ``tool`` as the redacting interceptors would pass them on."""
        if not isinstance(args, dict):
            return args
        for redactor in self.redactors:
            hidden = redactor.redact_args(tool, args)
            if hidden is not None:
                args = hidden
        return args

    def text(self, tool: str, args: Any, text: str) -> str:
        """``text`` about a call of ``tool`` with ``args`` without the values they hide."""
        if not isinstance(args, dict):
            return text
        for redactor in self.redactors:
            text = redactor.redact_text(tool, args, text)
        return text

    def failure(
        self,
        tool: str,
        args: Any,
        error: str | None,
        traceback: str | None,
        decisions: list[CallDecision],
    ) -> tuple[str | None, str | None]:
        """A failed call's error and traceback without its secrets; when its call may not
        have reached the interceptors, the arguments they would have passed on are added to
        ``decisions`` as a redaction (which the run store keeps instead of the arguments)."""
        if not self.redactors or not isinstance(args, dict):
            return error, traceback
        if error is not None:
            error = self.text(tool, args, error)
        if traceback is not None:
            traceback = self.text(tool, args, traceback)
        hidden = self.args(tool, args)
        if hidden is not args and not any(d.redacts_task_call for d in decisions):
            decisions.append(
                CallDecision(
                    tool=tool,
                    decision=REDACT,
                    decided_by="redacting",
                    reason="redacted for the record (the task failed before its call)",
                    args=jsonable(hidden),
                    at=time.time(),
                    source="plan",
                )
            )
        return error, traceback

    def steps(self, steps: list[AgentStep]) -> list[AgentStep]:
        """An agent's steps with each call's arguments as the interceptors would pass them on,
        and an error it saw back without the values they hide: every call, also one that
        never reached them (its arguments did not fit the tool, the tool is unknown)."""
        if not self.redactors:
            return steps
        out: list[AgentStep] = []
        for step in steps:
            calls = []
            for c in step.calls:
                args = self.args(c.tool, c.args)
                observation = c.observation
                if observation is not None and c.is_error:
                    observation = self.text(c.tool, c.args, observation)
                if args is c.args and observation == c.observation:
                    calls.append(c)
                else:
                    calls.append(c.model_copy(update={"args": args, "observation": observation}))
            changed = any(a is not b for a, b in zip(calls, step.calls, strict=True))
            out.append(step.model_copy(update={"calls": calls}) if changed else step)
        return out
