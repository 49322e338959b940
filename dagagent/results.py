"""Outcomes: the status of each task, its records (agent steps, call decisions), the result of
a run."""

from __future__ import annotations

import enum
import warnings
from collections import Counter
from collections.abc import Collection, ItemsView, Iterable, Iterator, Mapping, ValuesView
from itertools import repeat
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)
from pydantic_core import core_schema

from ._models import AVAILABLE, construct_all, consume
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
    "TaskResults",
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
_FAILURES = (TaskStatus.FAILED, TaskStatus.DENIED)


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


# -- building results (the hot path of a run) ---------------------------------------------------

_FIELDS = tuple(TaskResult.model_fields)
# The shortcut below is exactly model_construct only while TaskResult stays a plain model:
# these fields in this order, no aliases, no post-init, no extra fields.
_FAST = (
    _FIELDS
    == (
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
_ALL_SET = set(_FIELDS)


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


#: A task that succeeded with nothing more to say (no steps, decisions or elements), as a run
#: holds it until its :class:`TaskResult` is read: ``(task_id, output, attempts, started_at,
#: finished_at, args)``.
Success = tuple[str, Any, int, float, float, Any]

_SUCCEEDED = TaskStatus.SUCCEEDED


def _from_success(s: Success) -> TaskResult:
    task_id, output, attempts, started_at, finished_at, args = s
    return task_result(
        task_id, _SUCCEEDED, output, None, None, attempts, started_at, finished_at, args, None, None
    )


_SUCCESS_FIELDS = ("task_id", "output", "attempts", "started_at", "finished_at", "args")
_SUCCESS_BASE = dict.fromkeys(_FIELDS)
_SUCCESS_BASE["status"] = _SUCCEEDED


def _from_successes(held: list[Success]) -> list[TaskResult]:
    """:func:`_from_success` of each, every step done for all at once by C loops (``map``)."""
    if not _FAST or not AVAILABLE:
        return [_from_success(s) for s in held]
    n = len(held)
    fields = list(map(dict.copy, repeat(_SUCCESS_BASE, n)))
    consume(map(dict.update, fields, map(zip, repeat(_SUCCESS_FIELDS, n), held)))
    return construct_all(TaskResult, fields, repeat(_ALL_SET, n))


class TaskResults(Mapping[str, TaskResult]):
    """The results of a run's tasks, by task id (``RunResult.tasks``): a read-only mapping.

    A task that succeeded with nothing more to say is held as its values (a :data:`Success`)
    and its :class:`TaskResult` is built the first time it is read, then kept (the same object
    on every read). A run that nobody reads task by task (``result.ok``, ``result.outputs``,
    ``result.counts``) never builds one: at 10,000 tasks that is about a sixth of what
    ``execute(plan)`` costs (12,000 to 13,000 machine instructions a task). :meth:`statuses`
    and :meth:`outputs` read them without building them; :meth:`values` and :meth:`items`
    build every one not built yet in one pass, at about the cost of building them as the
    tasks ended.

    Compares equal to a mapping with the same results; ``dict(tasks)`` is a plain dict.
    """

    __slots__ = ("_held",)

    def __init__(self, results: Mapping[str, TaskResult] | Iterable[tuple[str, TaskResult]] = ()):
        #: Each task's result, or its values (a tuple) until it is read.
        self._held: dict[str, TaskResult | Success] = dict(results)

    @classmethod
    def holding(cls, held: dict[str, TaskResult | Success]) -> TaskResults:
        """Results around ``held`` as it is (not copied): what a run fills as tasks end."""
        self = cls.__new__(cls)
        self._held = held
        return self

    def __getitem__(self, task_id: str) -> TaskResult:
        r = self._held[task_id]
        if type(r) is tuple:
            r = self._held[task_id] = _from_success(r)
        return r  # type: ignore[return-value]  # a tuple was replaced just above

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._held

    def __iter__(self) -> Iterator[str]:
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)

    def __repr__(self) -> str:
        return repr(dict(self.items()))

    def values(self) -> ValuesView[TaskResult]:
        """Every result, each built if it is not yet (in one pass; a snapshot of the results
        so far, not a live view)."""
        return self._built().values()

    def items(self) -> ItemsView[str, TaskResult]:
        """``(task_id, result)`` of every result, as :meth:`values` gives them."""
        return self._built().items()

    def _built(self) -> dict[str, TaskResult]:
        held = self._held
        ids = [t for t, r in held.items() if type(r) is tuple]
        if ids:
            values: list[Success] = [held[t] for t in ids]  # type: ignore[misc]  # tuples
            held.update(zip(ids, _from_successes(values), strict=True))
        return dict(held)  # type: ignore[arg-type]  # no tuple is left

    def ordered(self, task_ids: Collection[str]) -> TaskResults:
        """These results (each as it is held) in the order of ``task_ids``, every one of
        which must have a result."""
        held = self._held
        return TaskResults.holding(
            dict(zip(task_ids, map(held.__getitem__, task_ids), strict=True))
        )

    def status(self, task_id: str) -> TaskStatus:
        """The status of task ``task_id`` (``KeyError`` if it has no result)."""
        r = self._held[task_id]
        return _SUCCEEDED if type(r) is tuple else r.status  # type: ignore[union-attr]

    def statuses(self) -> Iterator[tuple[str, TaskStatus]]:
        """``(task_id, status)`` of every result, in order, without building any."""
        for task_id, r in self._held.items():
            yield task_id, _SUCCEEDED if type(r) is tuple else r.status  # type: ignore[union-attr]

    def outputs(self) -> dict[str, Any]:
        """The outputs of the tasks that have one (succeeded or reused), without building a
        result."""
        out: dict[str, Any] = {}
        for task_id, r in self._held.items():
            if type(r) is tuple:
                out[task_id] = r[1]
            elif r.status.ok:  # type: ignore[union-attr]
                out[task_id] = r.output  # type: ignore[union-attr]
        return out

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        # Validated from a mapping of results (or taken as it is); serialised as that mapping.
        as_dict = handler.generate_schema(dict[str, TaskResult])
        return core_schema.union_schema(
            [
                core_schema.is_instance_schema(cls),
                core_schema.no_info_after_validator_function(cls, as_dict),
            ],
            serialization=core_schema.wrap_serializer_function_ser_schema(_as_dict, schema=as_dict),
        )


def _as_dict(value: Any, serialize: SerializerFunctionWrapHandler) -> Any:
    return serialize(dict(value) if isinstance(value, TaskResults) else value)


class StatusCounts(dict[str, int]):
    """How many tasks ended in each status, by status value: ``{"succeeded": 3, "failed": 1}``.

    Calling it returns it unchanged, with a :class:`DeprecationWarning`: ``RunResult.counts``
    used to be a method (``result.counts()``); it is now the same kind of member as
    ``RunRecord.counts`` and ``RunSummary.counts``."""

    @classmethod
    def of(cls, results: Iterable[TaskResult]) -> StatusCounts:
        tally = Counter(r.status for r in results)  # one run may hold 100,000 results
        return cls((status.value, n) for status, n in tally.items())

    @classmethod
    def of_statuses(cls, statuses: Iterable[TaskStatus]) -> StatusCounts:
        tally = Counter(statuses)
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
    """The outcome of a run: one :class:`TaskResult` per task, in plan order (``tasks``, a
    read-only mapping: see :class:`TaskResults`; given a dict, it is made one).

    ``record_loss`` is ``None`` unless the run was recorded in a run store that could not
    write all of it: then it says what is missing (:class:`RecordLoss`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, defer_build=True)

    run_id: str
    status: RunStatus
    goal: str = ""
    executor: str = ""
    tasks: TaskResults
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
        return self._tasks().outputs()

    @property
    def ok(self) -> bool:
        return self.status is RunStatus.SUCCEEDED

    @property
    def counts(self) -> StatusCounts:
        """How many tasks ended in each status."""
        return StatusCounts.of_statuses(s for _, s in self._tasks().statuses())

    def failures(self) -> list[TaskResult]:
        """The tasks that failed or were denied, in plan order."""
        tasks = self._tasks()
        return [tasks[t] for t, s in tasks.statuses() if s in _FAILURES]

    def waiting(self) -> list[TaskResult]:
        """The tasks waiting for a person's decision (the run is ``paused``)."""
        tasks = self._tasks()
        return [tasks[t] for t, s in tasks.statuses() if s is TaskStatus.WAITING]

    def _tasks(self) -> TaskResults:
        # A dict set without validation (model_construct, model_copy(update=...)) reads too.
        tasks = self.tasks
        return tasks if isinstance(tasks, TaskResults) else TaskResults(tasks)

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
