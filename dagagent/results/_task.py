"""The outcome of one task: :class:`TaskResult`."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

from pydantic import TypeAdapter

from ..text import jsonable
from ._partial import PARTIAL_ANSWER
from ._records import AgentStep, CallDecision
from ._status import CONDITION_FALSE, REDACT, UNANSWERED, TaskStatus

__all__ = ["TaskResult"]

_FINISHED = frozenset({TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.DENIED})


#: Decisions that are records, not waits: a redaction, and the outcome of a call taken from
#: the record of side effects (``replayed``, ``happened``).
_NO_WAIT = frozenset({REDACT, "replayed", "happened"})


@dataclass(slots=True, kw_only=True)
class TaskResult:
    """The outcome of one task. Times are Unix timestamps (seconds).

    A slots dataclass, made once per task of every run; pydantic validates it where it comes
    in from outside (:meth:`validate`, the run store) and serialises it inside
    :class:`~dagagent.results.RunResult`."""

    task_id: str
    status: TaskStatus
    output: Any = None
    error: str | None = None
    error_type: str | None = None
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    #: The resolved, validated arguments of the call (an agent task: its instruction).
    args: Any = None
    #: Agent tasks: the ReAct steps that produced the answer.
    steps: list[AgentStep] | None = None
    #: Decisions (approval, redaction) taken about this task's calls.
    decisions: list[CallDecision] | None = None
    #: Map tasks: one result per element of the list, in order (task_id ``<task>[<index>]``).
    elements: list[TaskResult] | None = None
    #: Where the tool's own code failed: the traceback of the exception it raised (bounded in
    #: size; none for dagagent's own errors, whose message says it all).
    traceback: str | None = None
    #: Where the task ran when not in the run's own process: the worker (``pid@host`` on
    #: Temporal) that ran it; ``None`` in process.
    worker: str | None = None

    @classmethod
    def validate(cls, data: Any) -> TaskResult:
        """A result from its JSON-like record (a mapping), checked field by field; raises
        pydantic's ``ValidationError`` naming what does not fit."""
        return _adapter().validate_python(data)

    def but(self, **changes: Any) -> TaskResult:
        """A copy with ``changes``."""
        return replace(self, **changes)

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at

    @property
    def ok(self) -> bool:
        return self.status.ok

    @property
    def skipped_by_condition(self) -> bool:
        """Whether the task was skipped by a condition: its own ``when`` was false, or a
        task it depends on was skipped so (``error`` says why). Such a task is settled, not
        failed: it does not make its run fail."""
        return self.status is TaskStatus.SKIPPED and self.error_type == CONDITION_FALSE

    @property
    def partial(self) -> bool:
        """Whether the task succeeded with a partial answer: an agent that stopped before
        answering (its deadline, its step or token budget) gave its best so far (``error``
        says why it stopped; see :mod:`dagagent.results._partial`)."""
        return self.status.ok and self.error_type == PARTIAL_ANSWER

    @property
    def settled(self) -> bool:
        """Whether the task ended as its plan meant it to: it has an output, or a condition
        skipped it."""
        return self.status.ok or self.skipped_by_condition

    @property
    def took_s(self) -> float | None:
        """How long the task took towards the run's end, for its critical path: its duration
        if it finished on its own (succeeded, failed or was denied), 0 if its output was
        reused, ``None`` if it did not finish (cancelled, skipped, waiting)."""
        if self.status is TaskStatus.REUSED:
            return 0.0
        if self.status in _FINISHED:
            return self.duration_s
        return None

    @property
    def approval_wait_s(self) -> float:
        """Seconds the task's own call waited for approval decisions after the task started
        (a person answering a question; 0 when nothing was asked): the time from its start
        to the last decision about its own call. A task cancelled before its question was
        answered waited all its time."""
        last = None
        for d in self.decisions or ():
            if d.source == "plan" and d.decision not in _NO_WAIT:
                last = d
        if last is None or self.started_at is None:
            return 0.0
        end = self.finished_at if self.finished_at is not None else last.at
        if last.decision == UNANSWERED:
            return max(0.0, end - self.started_at)
        return max(0.0, min(last.at, end) - self.started_at)

    @property
    def run_s(self) -> float | None:
        """``duration_s`` without :attr:`approval_wait_s`: the time the task spent running
        (``None`` when it has no duration; 0 when its call never started)."""
        d = self.duration_s
        if d is None:
            return None
        return max(0.0, d - self.approval_wait_s)

    @property
    def redacted_args(self) -> Any:
        """The arguments of the task's own call as a redacting interceptor left them (its last
        rewrite), or ``None`` if none was redacted. The run store records these instead of
        ``args``, so that a secret it hid never reaches the store, and such a task is never
        reused (its real arguments are not on record to compare)."""
        found = None
        for d in self.decisions or ():
            if d.redacts_task_call:
                found = d.args
        return found

    def to_json_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "task_id": self.task_id,
            "status": self.status.value,
            "output": jsonable(self.output),
            "error": self.error,
            "error_type": self.error_type,
            "attempts": self.attempts,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_s": self.duration_s,
        }
        if self.args is not None:
            d["args"] = jsonable(self.args)
        if self.steps is not None:
            d["steps"] = jsonable(self.steps)
        if self.decisions is not None:
            d["decisions"] = jsonable(self.decisions)
        if self.elements is not None:
            d["elements"] = [e.to_json_dict() for e in self.elements]
        if self.traceback is not None:
            d["traceback"] = self.traceback
        if self.worker is not None:
            d["worker"] = self.worker
        return d


@functools.cache
def _adapter() -> TypeAdapter[TaskResult]:
    return TypeAdapter(TaskResult)  # built on first use: importing the results builds no schema
