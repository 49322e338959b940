"""Outcomes: the status of each task, its records (agent steps, call decisions), the result
of a run."""

from ._model_calls import MODEL_ROLES, ModelCall, ModelRole
from ._partial import PARTIAL_ANSWER, PartialAnswer, best_so_far
from ._records import (
    AgentStep,
    ApprovalAnswer,
    CallDecision,
    CallRecord,
    load_decisions,
    load_steps,
)
from ._run import RecordLoss, RunResult, StatusCounts
from ._status import (
    CONDITION_FALSE,
    FAILURES,
    REDACT,
    UNANSWERED,
    WAIT,
    ApprovalState,
    Decision,
    DecisionSource,
    FailurePolicy,
    PersonDecision,
    RoundOutcome,
    RunStatus,
    SolveStatus,
    TaskStatus,
)
from ._task import TaskResult

__all__ = [
    "CONDITION_FALSE",
    "FAILURES",
    "MODEL_ROLES",
    "PARTIAL_ANSWER",
    "REDACT",
    "UNANSWERED",
    "WAIT",
    "AgentStep",
    "ApprovalAnswer",
    "ApprovalState",
    "CallDecision",
    "CallRecord",
    "Decision",
    "DecisionSource",
    "FailurePolicy",
    "ModelCall",
    "ModelRole",
    "PartialAnswer",
    "PersonDecision",
    "RecordLoss",
    "RoundOutcome",
    "RunResult",
    "RunStatus",
    "SolveStatus",
    "StatusCounts",
    "TaskResult",
    "TaskStatus",
    "best_so_far",
    "load_decisions",
    "load_steps",
]
