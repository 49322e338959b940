"""The record a task fills while it runs, and the public result it becomes.

**Hot path.** One :class:`TaskRun` and one :class:`~dagagent.results.TaskResult` are made per
task, so both are built the cheap way: ``TaskRun`` is a slots dataclass, and
:func:`task_result` fills a ``TaskResult`` without pydantic's per-field loop (what
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
from ..results import AgentStep, CallDecision, TaskResult, TaskStatus

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

# -- building TaskResult (hot path) -------------------------------------------------------------

_FIELDS = (
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
    "elements",
    "traceback",
)
_FIELDS_SET = frozenset(_FIELDS)
# The shortcut below is exactly model_construct only while TaskResult stays a plain model:
# these fields in this order, no aliases, no post-init, no extra fields.
_FAST = (
    tuple(TaskResult.model_fields) == _FIELDS
    and not TaskResult.__pydantic_post_init__
    and not TaskResult.__pydantic_root_model__
    and TaskResult.model_config.get("extra") != "allow"
    and all(
        f.alias is None and f.validation_alias is None for f in TaskResult.model_fields.values()
    )
)
_new = object.__new__
_set = object.__setattr__
# Every field is set, in every result: one set serves them all (pydantic only ever adds to a
# model's set of fields set, and adding one that is there changes nothing). A set per result
# would cost about 700 bytes each, 0.7 GB at a million tasks.
_ALL_SET = set(_FIELDS_SET)


def task_result(
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
    elements: list[TaskResult] | None = None,
    traceback: str | None = None,
) -> TaskResult:
    """``TaskResult.model_construct`` of every field, without its generic per-field loop."""
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
        "elements": elements,
        "traceback": traceback,
    }
    if not _FAST:
        return TaskResult.model_construct(**values)
    r: TaskResult = _new(TaskResult)
    _set(r, "__dict__", values)
    _set(r, "__pydantic_fields_set__", _ALL_SET)
    _set(r, "__pydantic_extra__", None)
    _set(r, "__pydantic_private__", None)
    return r
