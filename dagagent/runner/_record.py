"""The record a task fills while it runs, and how a failure is worded in its result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import (
    AgentError,
    ConditionError,
    ReferenceResolutionError,
    TaskDeniedError,
    TaskTimeoutError,
    ToolArgumentsError,
    ToolLimitError,
    UnknownToolError,
)
from ..results import AgentStep, CallDecision

__all__ = ["TaskRun", "describe"]


@dataclass(slots=True)
class TaskRun:
    """One task while it runs: what its :class:`~dagagent.results.TaskResult` will say."""

    task_id: str
    started_at: float
    decisions: list[CallDecision] | None  # filled by interceptors (e.g. approval), if any
    attempts: int = 0
    args: Any = None  # the resolved arguments (a tool task) or instruction (an agent task)
    steps: list[AgentStep] | None = None  # an agent task's steps, when it has any
    #: A resumed agent element (of a map task) that waited: the steps it continues from.
    resume_steps: list[AgentStep] | None = None
    #: An agent that stopped before answering gave its best so far: why it stopped.
    partial: str | None = None


def describe(exc: BaseException) -> str:
    """A failure as the task's ``error`` says it: dagagent's own errors by their message
    (they name the problem), anything else prefixed with its type."""
    if isinstance(exc, _SELF_EXPLAINING):
        return str(exc)
    text = str(exc)
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


_SELF_EXPLAINING = (
    ConditionError,
    ToolLimitError,
    ToolArgumentsError,
    ReferenceResolutionError,
    TaskTimeoutError,
    TaskDeniedError,
    AgentError,
    UnknownToolError,
)
