"""What :func:`dagagent.solve` returns: :class:`Solution` (the outcome, the answer, every
:class:`Round`, every model call) and :class:`SolveUsage` (model calls, tokens and cost by
role)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..errors import SolveError
from ..llm import Usage
from ..plan import Plan
from ..planners import JoinDecision, JoinReport, PlanningResult
from ..results import ModelCall, RoundOutcome, RunResult, SolveStatus
from ..text import as_text, jsonable

__all__ = ["Round", "Solution", "SolveUsage"]


class SolveUsage(BaseModel):
    """What a solve used, split by role: ``planner`` (planning and replanning, repairs
    included), ``agents`` (agent tasks of every round) and ``joiner``, and ``sub_solves``
    (every model call of its sub-solves, at any depth); each a :class:`~dagagent.llm.Usage`
    with its cost when the model's price is known."""

    model_config = ConfigDict(frozen=True)

    planner: Usage = Field(default_factory=Usage)
    agents: Usage = Field(default_factory=Usage)
    joiner: Usage = Field(default_factory=Usage)
    #: A session's compression of its older turns, before the turn (see
    #: :mod:`dagagent.planners.conversation`).
    compress: Usage = Field(default_factory=Usage)
    sub_solves: Usage = Field(default_factory=Usage)

    @property
    def total(self) -> Usage:
        return self.planner + self.agents + self.joiner + self.compress + self.sub_solves

    def to_json_dict(self) -> dict[str, dict[str, Any]]:
        found = {
            "planner": self.planner.to_json_dict(),
            "agents": self.agents.to_json_dict(),
            "joiner": self.joiner.to_json_dict(),
        }
        if self.compress.calls:
            found["compress"] = self.compress.to_json_dict()
        if not self.sub_solves.empty:
            found["sub_solves"] = self.sub_solves.to_json_dict()
        found["total"] = self.total.to_json_dict()
        return found

    def summary(self) -> str:
        """``"4 model calls (planner 2, agents 0, joiner 2), 1812 input + 230 output tokens"``
        (``(some estimated)`` when they are, and the cost when it is known)."""
        t = self.total
        text = (
            f"{t.calls} model call{'s' if t.calls != 1 else ''} (planner {self.planner.calls}, "
            f"agents {self.agents.calls}, joiner {self.joiner.calls}"
            + (f", compress {self.compress.calls}" if self.compress.calls else "")
            + (f", sub-solves {self.sub_solves.calls}" if self.sub_solves.calls else "")
            + "), "
            f"{t.input_tokens} input + {t.output_tokens} output tokens"
        )
        if t.estimated:
            text += " (some estimated)"
        if t.cost_usd is not None:
            from ..llm.usage import format_cost

            text += f", {format_cost(t.cost_usd)}"
        return text


class Round(BaseModel):
    """One round of a solve: the plan (``None`` if planning failed), how it was planned
    (``planning``: attempts and usage), the run (``None`` if nothing ran), the joiner's
    decision (``None`` if the joiner did not decide) and how it was obtained (``joining``),
    the ``feedback`` the plan was revised with, and how the round ended
    (``outcome``: ``answered``, ``replan``, ``gave_up``, ``failed`` or ``paused``, with a
    ``reason``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    number: int
    plan: Plan | None = None
    planning: PlanningResult | None = Field(default=None, repr=False)
    result: RunResult | None = None
    decision: JoinDecision | None = None
    joining: JoinReport | None = Field(default=None, repr=False)
    feedback: str | None = None
    outcome: RoundOutcome | None = None
    reason: str = ""

    @property
    def run_id(self) -> str | None:
        return self.result.run_id if self.result is not None else None

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "round": self.number,
            "run_id": self.run_id,
            "parent_id": self.result.parent_id if self.result is not None else None,
            "feedback": self.feedback,
            "plan": self.plan.model_dump(mode="json", exclude_defaults=True)
            if self.plan is not None
            else None,
            "planning": self.planning.usage_dict() if self.planning is not None else None,
            "result": self.result.to_json_dict() if self.result is not None else None,
            "decision": self.decision.to_json_dict() if self.decision is not None else None,
            "joining": {"attempts": len(self.joining.attempts), **_usage(self.joining)}
            if self.joining is not None
            else None,
            "outcome": self.outcome,
            "reason": self.reason,
        }


class Solution(BaseModel):
    """The outcome of :func:`solve`.

    ``status`` (``answered`` | ``gave_up`` | ``failed`` | ``paused`` | ``budget_exhausted`` |
    ``timed_out``) and ``reason``; for an answered goal, ``answer`` (text, or JSON data) and
    ``cites`` (the ids of the tasks it rests on, in the last round's run); every ``round``;
    ``usage`` split by role; ``calls``, every model call (:class:`~dagagent.results.ModelCall`,
    in the order they started);
    ``error``, the exception behind a ``failed`` solve
    (:class:`~dagagent.errors.PlanningError`, :class:`~dagagent.errors.JoinerError`, an
    :class:`~dagagent.errors.LLMError`...); ``not_recorded``: what of the solve and its
    rounds' runs the run store could not write (empty when all of it was, or when there is
    no store).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    solve_id: str
    goal: str
    status: SolveStatus
    reason: str = ""
    answer: Any = None
    cites: list[str] = Field(default_factory=list)
    rounds: list[Round] = Field(default_factory=list)
    usage: SolveUsage = Field(default_factory=SolveUsage)
    calls: list[ModelCall] = Field(default_factory=list, repr=False)
    error: Exception | None = Field(default=None, repr=False, exclude=True)
    not_recorded: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status is SolveStatus.ANSWERED

    @property
    def run_id(self) -> str | None:
        """The last round's run (the one the answer's ``cites`` refer to; of a paused solve,
        the run that waits)."""
        for r in reversed(self.rounds):
            if r.run_id is not None:
                return r.run_id
        return None

    @property
    def answer_text(self) -> str:
        """The answer as text: a string as it is, data as JSON ("" without an answer)."""
        return "" if self.answer is None else as_text(self.answer)

    def raise_for_status(self) -> Solution:
        """Return self if the goal was answered, else raise
        :class:`~dagagent.errors.SolveError` with the reason."""
        if self.ok:
            return self
        raise SolveError(f"{self.status.value}: {self.reason}", self)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "solve_id": self.solve_id,
            "goal": self.goal,
            "status": self.status.value,
            "reason": self.reason,
            "answer": jsonable(self.answer),
            "cites": list(self.cites),
            "run_id": self.run_id,
            "usage": self.usage.to_json_dict(),
            "error": None
            if self.error is None
            else {"type": type(self.error).__name__, "message": str(self.error)},
            "not_recorded": list(self.not_recorded),
            "rounds": [
                {**r.to_json_dict(), "usage": self.round_usage(r.number).to_json_dict()}
                for r in self.rounds
            ],
            "calls": [c.to_json_dict() for c in self.calls],
        }

    def round_usage(self, number: int) -> Usage:
        """What the model calls of round ``number`` used, every role together."""
        return sum((c.usage for c in self.calls if c.round == number), Usage())


def _usage(report: JoinReport) -> dict[str, int]:
    u = report.usage
    return {
        "calls": report.calls,
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "total_tokens": u.total_tokens,
    }
