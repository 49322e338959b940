"""Outcomes: the status of each task, its records (agent steps, call decisions), the result of
a run."""

from __future__ import annotations

import enum
import warnings
from collections import Counter
from collections.abc import Iterable
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)

from .errors import RunFailedError
from .llm.usage import Usage
from .text import as_text, jsonable

__all__ = [
    "REDACT",
    "UNANSWERED",
    "WAIT",
    "AgentStep",
    "ApprovalAnswer",
    "CallDecision",
    "CallRecord",
    "RecordLoss",
    "RunResult",
    "RunStatus",
    "StatusCounts",
    "TaskResult",
    "TaskStatus",
    "as_text",
    "jsonable",
    "load_decisions",
    "load_steps",
]


class TaskStatus(str, enum.Enum):
    """What happened to a task.

    - ``succeeded`` / ``reused``: it has an output (``reused``: taken from an earlier run).
    - ``failed``: it raised, timed out, or its arguments were bad, after every retry.
    - ``denied``: an interceptor or approval rule refused its call; treated like a failure.
    - ``cancelled``: it was running, or had not started, when the run was stopped.
    - ``skipped``: it never started because a task it depends on did not succeed.
    - ``waiting``: an approval rule asked about its call and a person will answer later
      (``dagagent approve``); its descendants wait with it (skipped until the run resumes).
    """

    SUCCEEDED = "succeeded"
    REUSED = "reused"
    FAILED = "failed"
    DENIED = "denied"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    WAITING = "waiting"

    @property
    def ok(self) -> bool:
        return self in _HAS_OUTPUT  # asked once per task by the executors

    def __str__(self) -> str:
        return self.value


_HAS_OUTPUT = frozenset({TaskStatus.SUCCEEDED, TaskStatus.REUSED})


class RunStatus(str, enum.Enum):
    """How a run ended: ``succeeded``, ``failed``, ``cancelled`` or ``paused`` (tasks wait
    for a person's decision and nothing else could run; resume it once they are decided) —
    a :class:`RunResult` is always one of these. A run store record may also be ``running``
    (not finished yet) or ``interrupted`` (the process that ran it is gone without finishing
    it)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PAUSED = "paused"
    RUNNING = "running"
    INTERRUPTED = "interrupted"

    def __str__(self) -> str:
        return self.value


class CallRecord(BaseModel):
    """One tool call an agent's model asked for, and what it saw in return.

    ``args`` are the arguments as the model wrote them (text mode: possibly a bare string);
    ``observation`` is ``None`` when the call was not made because the run stopped first.
    """

    model_config = ConfigDict(defer_build=True)

    id: str
    tool: str
    args: Any = None
    observation: str | None = None
    is_error: bool = False


class AgentStep(BaseModel):
    """One model turn of an agent: its thought, the calls it made (or its answer), its usage.

    ``error`` says why the turn was not usable (a reply that fits no format, an empty reply);
    the model was told and asked again.

    Serialised (``model_dump``, JSON, the run store), a step leaves out every field still at
    its default, here and in its calls: the shape agent steps have always been recorded in.
    """

    model_config = ConfigDict(defer_build=True)

    step: int
    thought: str = ""
    calls: list[CallRecord] = Field(default_factory=list)
    answer: str | None = None
    error: str | None = None
    usage: Usage = Field(default_factory=Usage)

    @model_serializer(mode="wrap")
    def _as_record(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        if info.exclude_defaults:  # already without defaults (the call below, nested ones)
            return handler(self)
        return self.model_dump(mode=info.mode, exclude_defaults=True, round_trip=info.round_trip)


#: The ``decision`` of the :class:`CallDecision` that the ``redacting`` interceptor records
#: when it rewrites a call's arguments; its ``args`` are the redacted arguments.
REDACT = "redact"
#: The ``decision`` recorded when the run stopped while a question about the call was still
#: unanswered (the call never started); ``at`` is when the question was withdrawn.
UNANSWERED = "unanswered"


class CallDecision(BaseModel):
    """A decision taken about one tool call of a task, as ``TaskResult.decisions`` keeps it.

    ``decision`` is ``allow`` / ``deny`` / ``edit`` (an approval rule or a person; ``rule``
    names the rule), ``wait`` (an ``ask`` rule whose answer comes later), ``unanswered``
    (the run stopped while the question was open) or ``redact`` (the ``redacting``
    interceptor hid arguments). ``args`` are the call's arguments when it was decided
    (JSON-able; after an edit or a redaction, the new ones), ``source`` whether the call was
    the plan task's own (``plan``) or one its agent made (``agent``), ``at`` a Unix
    timestamp."""

    model_config = ConfigDict(defer_build=True)

    tool: str
    decision: str
    decided_by: str
    reason: str | None = None
    args: Any = None
    at: float
    rule: str | None = None
    source: str = "plan"

    @property
    def redacts_task_call(self) -> bool:
        """Whether this is a redaction of the task's own call (not of one its agent made)."""
        return self.decision == REDACT and self.source == "plan"


#: The ``decision`` of the :class:`CallDecision` an ``ask`` rule records when the answer comes
#: later: the task waits (status ``waiting``); ``args`` are the arguments the person decides on.
WAIT = "wait"


class ApprovalAnswer(BaseModel):
    """A person's decision about a waiting call, as a resumed run uses it.

    ``tool`` and ``args`` are the call as it was asked about: the decision answers only a call
    of that tool with those arguments (a call whose arguments changed since, after a replan
    say, is asked about again). ``decision`` is ``allow``, ``deny`` or ``edit`` (then
    ``edit_args`` are the arguments to call with instead)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    task_id: str
    tool: str
    args: Any = None
    decision: str
    decided_by: str
    reason: str | None = None
    edit_args: dict[str, Any] | None = None
    at: float = 0.0


# Built on first use, as the models are: importing the results costs a command that runs
# nothing (dagagent validate) no schema.
_LAZY = ConfigDict(defer_build=True)
_STEPS: TypeAdapter[list[AgentStep]] = TypeAdapter(list[AgentStep], config=_LAZY)
_DECISIONS: TypeAdapter[list[CallDecision]] = TypeAdapter(list[CallDecision], config=_LAZY)


def load_steps(data: Any) -> list[AgentStep] | None:
    """Agent steps from their JSON record (e.g. a run store row); ``None`` stays ``None``."""
    return None if data is None else _STEPS.validate_python(data)


def load_decisions(data: Any) -> list[CallDecision] | None:
    """Call decisions from their JSON record (records older than ``source`` read as ``plan``)."""
    return None if data is None else _DECISIONS.validate_python(data)


class TaskResult(BaseModel):
    """The outcome of one task. Times are Unix timestamps (seconds)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, defer_build=True)

    task_id: str
    status: TaskStatus
    output: Any = None
    error: str | None = None
    error_type: str | None = None
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    args: Any = Field(default=None, description="The resolved, validated arguments of the call.")
    steps: list[AgentStep] | None = Field(
        default=None, description="Agent tasks: the ReAct steps that produced the answer."
    )
    decisions: list[CallDecision] | None = Field(
        default=None, description="Decisions (approval, redaction) taken about this task's calls."
    )
    elements: list[TaskResult] | None = Field(
        default=None,
        description=(
            "Map tasks: one result per element of the list, in order (task_id '<task>[<index>]')."
        ),
    )
    traceback: str | None = Field(
        default=None,
        description="Where the tool's own code failed: the traceback of the exception it raised "
        "(bounded in size; none for dagagent's own errors, whose message says it all).",
    )

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at

    @property
    def ok(self) -> bool:
        return self.status.ok

    @property
    def approval_wait_s(self) -> float:
        """Seconds the task's own call waited for approval decisions after the task started
        (a person answering a question; 0 when nothing was asked): the time from its start
        to the last decision about its own call. A task cancelled before its question was
        answered waited all its time."""
        last = None
        for d in self.decisions or ():
            if d.source == "plan" and d.decision != REDACT:
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
        return d


class StatusCounts(dict[str, int]):
    """How many tasks ended in each status, by status value: ``{"succeeded": 3, "failed": 1}``.

    Calling it returns it unchanged, with a :class:`DeprecationWarning`: ``RunResult.counts``
    used to be a method (``result.counts()``); it is now the same kind of member as
    ``RunRecord.counts`` and ``RunSummary.counts``."""

    @classmethod
    def of(cls, results: Iterable[TaskResult]) -> StatusCounts:
        tally = Counter(r.status for r in results)  # one run may hold 100,000 results
        return cls((status.value, n) for status, n in tally.items())

    def __call__(self) -> StatusCounts:
        warnings.warn(
            "RunResult.counts() is deprecated: counts is a property (use result.counts)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self


class RecordLoss(BaseModel):
    """What of a run the run store could not write (``RunResult.record_loss``), and why.

    - ``run``: nothing of the run is in the store (its first row could not be written, so no
      task's result could be either);
    - ``tasks``: the tasks whose result is not in the store;
    - ``outputs``: the tasks recorded without their output (the row says why; never reused);
    - ``finish``: the run's end (status, times, critical path) is not in the store, so the
      record reads as running or interrupted;
    - ``plan``: the plan as it grew while the run was planned is not in the store;
    - ``error``: the store's error (the last one), e.g. ``database is locked``.
    """

    model_config = ConfigDict(defer_build=True)

    run: bool = False
    tasks: list[str] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)
    finish: bool = False
    plan: bool = False
    error: str = ""

    @property
    def parts(self) -> list[str]:
        """What is missing, in words (``["the result of task b", ...]``)."""
        if self.run:
            return ["the whole run"]
        parts = [f"the result of task {t}" for t in self.tasks[:10]]
        if len(self.tasks) > 10:
            parts.append(f"the results of {len(self.tasks) - 10} more tasks")
        parts += [f"the output of task {t}" for t in self.outputs[:10]]
        if len(self.outputs) > 10:
            parts.append(f"the outputs of {len(self.outputs) - 10} more tasks")
        if self.plan:
            parts.append("the plan as it grew")
        if self.finish:
            parts.append("how the run ended")
        return parts

    def __str__(self) -> str:
        return f"not written: {', '.join(self.parts)} ({self.error})"


class RunResult(BaseModel):
    """The outcome of a run: one :class:`TaskResult` per task, in plan order.

    ``record_loss`` is ``None`` unless the run was recorded in a run store that could not
    write all of it: then it says what is missing (:class:`RecordLoss`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, defer_build=True)

    run_id: str
    status: RunStatus
    goal: str = ""
    executor: str = ""
    tasks: dict[str, TaskResult]
    started_at: float
    finished_at: float
    critical_path: list[str] = Field(default_factory=list)
    critical_path_s: float = 0.0
    parent_id: str | None = None
    usage: dict[str, Any] | None = None
    record_loss: RecordLoss | None = None

    @property
    def wall_time_s(self) -> float:
        return self.finished_at - self.started_at

    @property
    def outputs(self) -> dict[str, Any]:
        """Outputs of the tasks that have one (succeeded or reused)."""
        return {k: r.output for k, r in self.tasks.items() if r.status.ok}

    @property
    def ok(self) -> bool:
        return self.status is RunStatus.SUCCEEDED

    @property
    def counts(self) -> StatusCounts:
        """How many tasks ended in each status."""
        return StatusCounts.of(self.tasks.values())

    def failures(self) -> list[TaskResult]:
        return [
            r for r in self.tasks.values() if r.status in (TaskStatus.FAILED, TaskStatus.DENIED)
        ]

    def waiting(self) -> list[TaskResult]:
        """The tasks waiting for a person's decision (the run is ``paused``)."""
        return [r for r in self.tasks.values() if r.status is TaskStatus.WAITING]

    def __repr__(self) -> str:
        # Short on purpose: a run may hold 100,000 task results, and reprs get built in
        # places nobody reads (asyncio formats the finished task that returned this result).
        counts = ", ".join(f"{n} {s}" for s, n in sorted(self.counts.items()))
        return (
            f"RunResult(run_id={self.run_id!r}, status={self.status.value!r}, "
            f"tasks={len(self.tasks)} ({counts}), wall_time_s={self.wall_time_s:.3f})"
        )

    def raise_for_status(self) -> RunResult:
        """Return self if the run succeeded, else raise :class:`RunFailedError` naming
        the failures."""
        if self.status is RunStatus.SUCCEEDED:
            return self
        lines = [f"{r.task_id}: {r.status.value}: {r.error}" for r in self.failures()]
        counts = ", ".join(f"{n} {s}" for s, n in sorted(self.counts.items()))
        detail = ("\n  " + "\n  ".join(lines)) if lines else ""
        raise RunFailedError(f"run {self.run_id} {self.status.value} ({counts}){detail}", self)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "parent_id": self.parent_id,
            "status": self.status.value,
            "goal": self.goal,
            "executor": self.executor,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "wall_time_s": self.wall_time_s,
            "critical_path": self.critical_path,
            "critical_path_s": self.critical_path_s,
            "counts": dict(self.counts),
            "usage": self.usage,
            "record_loss": None if self.record_loss is None else self.record_loss.model_dump(),
            "tasks": {k: r.to_json_dict() for k, r in self.tasks.items()},
        }
