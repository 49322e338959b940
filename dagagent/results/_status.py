"""The closed vocabularies of a run's records: task and run statuses, and the words of call
decisions."""

from __future__ import annotations

import enum
from typing import Literal, TypeAlias

__all__ = [
    "CONDITION_FALSE",
    "FAILURES",
    "REDACT",
    "UNANSWERED",
    "WAIT",
    "ApprovalState",
    "Decision",
    "DecisionSource",
    "FailurePolicy",
    "PersonDecision",
    "RoundOutcome",
    "RunStatus",
    "SolveStatus",
    "TaskStatus",
]


class TaskStatus(str, enum.Enum):
    """What happened to a task.

    - ``succeeded`` / ``reused``: it has an output (``reused``: taken from an earlier run).
    - ``failed``: it raised, timed out, or its arguments were bad, after every retry.
    - ``denied``: an interceptor or approval rule refused its call; treated like a failure.
    - ``cancelled``: it was running, or had not started, when the run was stopped.
    - ``skipped``: it never started, because a task it depends on did not succeed, or
      because its ``when`` condition was false (or a task it depends on was skipped so):
      then its ``error_type`` is :data:`CONDITION_FALSE` and its ``error`` says why. A task
      skipped by a condition does not make its run fail.
    - ``waiting``: an approval rule asked about its call and a person will answer later
      (``dagagent approve``); its descendants wait with it (skipped until the run resumes).
    - ``running``: it started and has not ended yet. Only a record of a run still under way
      says so (the run store records a task when it starts, and its end over it); a
      :class:`~dagagent.results.RunResult` never holds it.
    """

    SUCCEEDED = "succeeded"
    REUSED = "reused"
    FAILED = "failed"
    DENIED = "denied"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    WAITING = "waiting"
    RUNNING = "running"

    @property
    def ok(self) -> bool:
        """Whether a task that ended so has an output (``succeeded`` or ``reused``)."""
        return self in _HAS_OUTPUT

    def __str__(self) -> str:
        return self.value


_HAS_OUTPUT = frozenset({TaskStatus.SUCCEEDED, TaskStatus.REUSED})
#: The ``error_type`` of a task skipped by a condition: its own ``when`` was false, or a task
#: it depends on was skipped so (its ``error`` says which, and the values the condition read).
CONDITION_FALSE = "ConditionFalse"
#: The statuses of a task that did not get its output by its own doing.
FAILURES = frozenset({TaskStatus.FAILED, TaskStatus.DENIED})


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


class SolveStatus(str, enum.Enum):
    """How a solve ended: ``answered``, ``gave_up`` (no progress left to make),
    ``failed`` (a model gave nothing usable, or could not be reached), ``paused`` (its last
    round's run waits for a person's decision: :func:`~dagagent.workflows.resume_solve`
    goes on once it is taken), ``budget_exhausted`` (its :class:`~dagagent.Budget` ran out
    before an answer; every result so far is kept) or ``timed_out`` (its deadline passed:
    what was running was cancelled, what finished is kept). A solve store record may also be
    ``running``, ``cancelled`` (stopped from outside) or ``interrupted`` (its process died)."""

    ANSWERED = "answered"
    GAVE_UP = "gave_up"
    FAILED = "failed"
    PAUSED = "paused"
    BUDGET_EXHAUSTED = "budget_exhausted"
    TIMED_OUT = "timed_out"
    RUNNING = "running"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    def __str__(self) -> str:
        return self.value


RoundOutcome: TypeAlias = Literal[
    "running",
    "answered",
    "replan",
    "gave_up",
    "failed",
    "paused",
    "budget_exhausted",
    "timed_out",
    "cancelled",
    "interrupted",
]
"""How a round of a solve ended (``running`` while it is under way; ``budget_exhausted``: the
solve's budget ran out in it; ``timed_out``: the solve's deadline passed in it;
``interrupted``: its process died)."""

ApprovalState: TypeAlias = Literal["waiting", "decided", "used", "closed"]
"""Where a question about a call stands: nobody decided yet, a decision waits for a resume,
a resume used it, or the run will not resume."""

FailurePolicy: TypeAlias = Literal["cancel", "continue"]
"""What a task's failure does to the rest of a run: ``cancel`` stops it (running tasks are
cancelled, the others marked), ``continue`` lets independent branches run to their end."""

Decision: TypeAlias = Literal["allow", "deny", "edit", "wait", "unanswered", "redact"]
"""What was decided about one tool call (see :class:`~dagagent.results.CallDecision`)."""

PersonDecision: TypeAlias = Literal["allow", "deny", "edit"]
"""What a person may decide about a call that waits for them."""

DecisionSource: TypeAlias = Literal["plan", "agent"]
"""Whose call it was: the plan task's own (``plan``) or one its agent made (``agent``)."""

#: The decision the ``redacting`` interceptor records when it rewrites a call's arguments.
REDACT: Decision = "redact"
#: The decision recorded when the run stopped while a question about the call was still
#: unanswered (the call never started).
UNANSWERED: Decision = "unanswered"
#: The decision an ``ask`` rule records when the answer comes later: the task waits.
WAIT: Decision = "wait"
