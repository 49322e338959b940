"""What a task's record holds besides its output: an agent's steps and the calls it made,
decisions about calls, and a person's answers to them."""

from __future__ import annotations

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

from ..llm.usage import Usage
from ._status import REDACT, Decision, DecisionSource, PersonDecision

__all__ = [
    "AgentStep",
    "ApprovalAnswer",
    "CallDecision",
    "CallRecord",
    "load_decisions",
    "load_steps",
]


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


class CallDecision(BaseModel):
    """A decision taken about one tool call of a task, as ``TaskResult.decisions`` keeps it.

    ``decision`` is ``allow`` / ``deny`` / ``edit`` (an approval rule or a person; ``rule``
    names the rule), ``wait`` (an ``ask`` rule whose answer comes later, or a call in doubt
    that waits for a person), ``unanswered`` (the run stopped while the question was open),
    ``redact`` (the ``redacting`` interceptor hid arguments), ``happened`` (a call left in
    doubt by a crash took effect, says its reconciler or a person: its output stands and it
    is not made again) or ``replayed`` (a resumed run found the call's outcome on record and
    took it instead of making the call again). ``args`` are the call's arguments when it was decided
    (JSON-able; after an edit or a redaction, the new ones), ``source`` whether the call was
    the plan task's own (``plan``) or one its agent made (``agent``), ``at`` when it was
    taken (a Unix timestamp; a decision on record from before the run, such as a person's
    recorded while the run was paused, keeps the time it was taken, not when it was used)."""

    model_config = ConfigDict(defer_build=True)

    tool: str
    decision: Decision
    decided_by: str
    reason: str | None = None
    args: Any = None
    at: float
    rule: str | None = None
    source: DecisionSource = "plan"

    @property
    def redacts_task_call(self) -> bool:
        """Whether this is a redaction of the task's own call (not of one its agent made)."""
        return self.decision == REDACT and self.source == "plan"


class ApprovalAnswer(BaseModel):
    """A person's decision about a waiting call, as a resumed run uses it.

    ``tool`` and ``args`` are the call as it was asked about: the decision answers only a call
    of that tool with those arguments (a call whose arguments changed since, after a replan
    say, is asked about again). ``decision`` is ``allow``, ``deny`` or ``edit`` (then
    ``edit_args`` are the arguments to call with instead), or, for a call in doubt,
    ``happened`` (it took effect; its output is on the call's record)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    task_id: str
    tool: str
    args: Any = None
    decision: PersonDecision
    decided_by: str
    reason: str | None = None
    edit_args: dict[str, Any] | None = None
    at: float = 0.0
    #: The rule that asked (``"in doubt"`` for a call whose outcome was unknown).
    rule: str | None = None


# Built on first use, as the models are.
_LAZY = ConfigDict(defer_build=True)
_STEPS: TypeAdapter[list[AgentStep]] = TypeAdapter(list[AgentStep], config=_LAZY)
_DECISIONS: TypeAdapter[list[CallDecision]] = TypeAdapter(list[CallDecision], config=_LAZY)


def load_steps(data: Any) -> list[AgentStep] | None:
    """Agent steps from their JSON record (e.g. a run store row); ``None`` stays ``None``."""
    return None if data is None else _STEPS.validate_python(data)


def load_decisions(data: Any) -> list[CallDecision] | None:
    """Call decisions from their JSON record (records older than ``source`` read as ``plan``)."""
    return None if data is None else _DECISIONS.validate_python(data)
