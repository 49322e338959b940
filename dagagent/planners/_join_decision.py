"""What the joiner decides about a round, and the JSON format it is asked to answer in.

A decision is ``finish`` (an answer and the tasks it cites) or ``replan`` (what is missing,
for the next plan). The response format is a JSON schema the model's structured output
follows; on the last round it allows ``finish`` only.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..llm import ResponseFormat

__all__ = ["JoinDecision", "join_response_format"]


class JoinDecision(BaseModel):
    """The joiner's decision about one round.

    - ``action="finish"``: ``answer`` (text, or JSON data when the goal asks for data) and
      ``cites``, the ids of the tasks whose outputs the answer rests on.
    - ``action="replan"``: ``feedback``, what is missing, for the next plan.
    """

    model_config = ConfigDict(frozen=True)

    action: Literal["finish", "replan"]
    answer: Any = None
    cites: list[str] = Field(default_factory=list)
    feedback: str = ""

    @property
    def finished(self) -> bool:
        return self.action == "finish"

    def to_json_dict(self) -> dict[str, Any]:
        if self.finished:
            return {"action": "finish", "answer": self.answer, "cites": list(self.cites)}
        return {"action": "replan", "feedback": self.feedback}


def join_response_format(*, must_finish: bool = False) -> ResponseFormat:
    """The JSON schema the joiner's answer follows (not strict: the answer may be any JSON
    value, which OpenAI's strict mode cannot express)."""
    actions = ["finish"] if must_finish else ["finish", "replan"]
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": actions},
            "answer": {
                "description": "finish: the answer to the goal, as text, or JSON data when "
                "the goal asks for data"
            },
            "cites": {
                "type": "array",
                "items": {"type": "string"},
                "description": "finish: ids of the tasks whose outputs the answer rests on",
            },
            "feedback": {
                "type": "string",
                "description": "replan: what is missing or wrong, and what the next plan should do",
            },
        },
        "required": ["action", "answer", "cites"] if must_finish else ["action"],
    }
    return ResponseFormat("join_decision", schema, strict=False)
