"""The data of an agent run: its state (for checkpoints), steps, events and result.

:class:`AgentState` is a pydantic model holding everything needed to continue a run — the
conversation, the step counter, the usage so far and the loop-detection counters — so
``state.model_dump_json()`` is a checkpoint and ``AgentState.model_validate_json(text)``
brings it back. The conversation only ever holds whole steps (a model turn together with
the results of the tools it called), so a checkpoint taken at any time resumes cleanly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from dagagent.llm import Message, Usage
from dagagent.results import AgentStep, CallRecord, best_so_far

from .limits import PARTIAL_STOPS

__all__ = ["AgentEvent", "AgentResult", "AgentState", "CallRecord", "EventKind", "Mode", "Step"]

Mode = Literal["tools", "text"]
EventKind = Literal["thought", "tool_call", "tool_result", "answer", "error"]

_AnyMessage = Annotated[Message, Field(discriminator="role")]


Step = AgentStep
"""One model turn (the same class as :class:`dagagent.AgentStep`, the record a plan's agent task
keeps in ``TaskResult.steps``)."""


class AgentState(BaseModel):
    """Everything needed to continue an agent run; JSON-serialisable."""

    version: Literal[1] = 1
    goal: str
    mode: Mode
    messages: list[_AnyMessage] = Field(default_factory=list)
    step: int = Field(default=0, description="Model turns taken so far.")
    usage: Usage = Field(default_factory=Usage)
    elapsed_s: float = Field(default=0.0, description="Wall-clock seconds spent, all runs.")
    format_failures: int = Field(
        default=0, description="Replies in a row that fit no format (reset by a good reply)."
    )
    call_counts: dict[str, int] = Field(
        default_factory=dict, description="Identical-call counters for loop detection."
    )
    steps: list[Step] = Field(default_factory=list)
    answer: str | None = None
    stop_reason: str | None = None
    stop_detail: str | None = None

    @property
    def finished(self) -> bool:
        """Whether the run ended with an answer (resuming it returns that answer)."""
        return self.stop_reason == "answer"

    def steps_json(self) -> list[dict[str, Any]]:
        """The steps so far as JSON-able dicts (see :meth:`AgentResult.steps_json`)."""
        return _steps_json(self.steps)


@dataclass(frozen=True, slots=True)
class AgentEvent:
    """Something the agent did, as ``agent.stream(goal)`` yields it.

    - ``thought``: ``text`` is the model's reasoning for this step;
    - ``tool_call``: ``tool``, ``call_id`` and ``args`` of a call about to be made;
    - ``tool_result``: ``text`` is the observation the model will see, ``is_error`` marks
      failed calls (unknown tool, bad arguments, a raising tool, a denied call);
    - ``answer``: ``text`` is the final answer (``stop_reason="answer"``);
    - ``error``: ``text`` says what went wrong; with a ``stop_reason`` the run has stopped
      without an answer, without one the model was asked to correct itself.
    """

    kind: EventKind
    step: int
    text: str | None = None
    tool: str | None = None
    call_id: str | None = None
    args: Any = None
    is_error: bool = False
    stop_reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The event's set fields, for logs and JSON."""
        d: dict[str, Any] = {"kind": self.kind, "step": self.step}
        for name in ("text", "tool", "call_id", "args", "stop_reason"):
            value = getattr(self, name)
            if value is not None:
                d[name] = value
        if self.is_error:
            d["is_error"] = True
        return d


class AgentResult(BaseModel):
    """How an agent run ended. ``answer`` is set only when ``stop_reason == "answer"``;
    ``detail`` explains any other stop; ``state`` can be resumed."""

    answer: str | None
    stop_reason: str
    detail: str | None = None
    steps: list[Step]
    usage: Usage
    state: AgentState

    @property
    def ok(self) -> bool:
        return self.stop_reason == "answer"

    @property
    def best_so_far(self) -> str | None:
        """For a run that stopped before answering because it ran out of time, steps or
        tokens, or went round in circles (``deadline``, ``max_steps``, ``max_tokens``,
        ``loop``): its partial answer, made from its last thought and what its calls returned
        (see :func:`dagagent.results.best_so_far`); ``None`` when it answered, stopped for
        another reason, or has nothing to give."""
        if self.stop_reason not in PARTIAL_STOPS:
            return None
        return best_so_far(self.steps)

    def steps_json(self) -> list[dict[str, Any]]:
        """The steps as JSON-able dicts (what a plan node keeps in ``TaskResult.steps``)."""
        return _steps_json(self.steps)


def _steps_json(steps: list[AgentStep]) -> list[dict[str, Any]]:
    return [s.model_dump(mode="json") for s in steps]  # fields at their defaults left out
