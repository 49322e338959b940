"""What a solve keeps of each model call: :class:`ModelCall`."""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

from ..llm.observe import CallOutcome
from ..llm.usage import Usage

__all__ = ["MODEL_ROLES", "ModelCall", "ModelRole"]

ModelRole: TypeAlias = Literal["planner", "replanner", "joiner", "agent"]
"""What a model call was for: writing a plan (``planner``), revising one (``replanner``),
answering or asking for another round (``joiner``), a turn of an agent task (``agent``)."""

MODEL_ROLES: tuple[ModelRole, ...] = ("planner", "replanner", "joiner", "agent")


class ModelCall(BaseModel):
    """One model call of a solve, as the run store keeps it.

    - Where it belongs: ``solve_id``, ``round``, ``run_id`` (the round's run; an agent task's
      run), ``role``, ``task_id`` (an agent task's), ``seq`` (its place among the solve's
      calls, in the order they started); ``replan_of``, for a replanner's call outside a
      solve (``dagagent replan RUN --model``), the run whose plan it revised.
    - What was asked: ``model``, ``provider``, ``server`` (scheme, host and path: never a
      credential), ``options`` (output limit, temperature, response format, tools, ...).
      A call a :class:`~dagagent.llm.FallbackLLM` moved on names the model that answered
      (or failed last); ``options["fallback"]`` lists the models given up on before it, each
      ``{"model", "reason", "error"}``.
    - What came back: ``text`` (what the model wrote, secrets redacted, cut to a bound:
      ``text_chars`` is its whole length), ``finish_reason``, ``status`` (``answered``,
      ``failed``, ``cancelled``, ``cut``, ``refused``) and ``error``; ``issues``, why its
      reader rejected the answer (a planning or joining attempt that was sent back).
    - When: ``started_at`` (Unix time), ``first_token_s`` (seconds to the first piece of the
      answer), ``duration_s``.
    - What it used: ``input_tokens``, ``output_tokens`` (``estimated`` when the provider did
      not say, or said what cannot be), ``cost_usd`` (``None`` when the price is unknown).
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    call_id: str
    solve_id: str | None = None
    round: int | None = None
    run_id: str | None = None
    role: ModelRole
    task_id: str | None = None
    seq: int = 0
    model: str = ""
    provider: str = ""
    server: str | None = None
    response_model: str = ""
    options: dict[str, Any] = Field(default_factory=dict)
    status: CallOutcome
    error: str | None = None
    started_at: float
    first_token_s: float | None = None
    duration_s: float | None = None
    finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False
    cost_usd: float | None = None
    text: str = ""
    text_chars: int = 0
    issues: list[str] = Field(default_factory=list)
    replan_of: str | None = None

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def usage(self) -> Usage:
        """The call's usage (``calls=0`` for a refused call: nothing was sent)."""
        return Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            calls=0 if self.status == "refused" else 1,
            cost_usd=self.cost_usd,
            estimated=self.estimated,
        )

    @property
    def cut_chars(self) -> int:
        """Characters of the text not kept (it was longer than the store's bound)."""
        return max(0, self.text_chars - len(self.text))

    @property
    def rejected(self) -> bool:
        """Whether its reader rejected the answer (``issues``)."""
        return bool(self.issues)

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
