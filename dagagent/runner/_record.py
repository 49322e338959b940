"""The record a task fills while it runs, and the public result it becomes.

**Hot path.** A :class:`TaskRun` (a slots dataclass) is made for a task that goes the task
runner's full way; a task run *plainly* (see ``TaskRunner.run_task_status``) gets one only if
it does not succeed. A task that succeeds with nothing more to say ends as a tuple of its
values, held in ``TaskRunner.results`` (a :class:`~dagagent.results.TaskResults`) until someone
reads its result; any other end is built at once by :func:`~dagagent.results.task_result`,
which fills a ``TaskResult`` without pydantic's per-field loop (what
``TaskResult.model_construct`` does when every field is given). ``benchmarks/overhead.py``
guards this; ``tests/test_benchmarks_smoke.py`` checks that the result is a normal model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import (
    AgentError,
    ReferenceResolutionError,
    TaskDeniedError,
    TaskTimeoutError,
    ToolArgumentsError,
    UnknownToolError,
)
from ..results import AgentStep, CallDecision, task_result

__all__ = ["TaskRun", "describe", "task_result"]


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


def describe(exc: BaseException) -> str:
    """A failure as the task's ``error`` says it: dagagent's own errors by their message
    (they name the problem), anything else prefixed with its type."""
    if isinstance(exc, _SELF_EXPLAINING):
        return str(exc)
    text = str(exc)
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


_SELF_EXPLAINING = (
    ToolArgumentsError,
    ReferenceResolutionError,
    TaskTimeoutError,
    TaskDeniedError,
    AgentError,
    UnknownToolError,
)
