"""When an agent stops: its limits, and the reasons it stops.

:class:`AgentLimits` bounds one agent run: model turns (``max_steps``), tokens (the sum of the
usage of every model call, ``max_tokens``), wall-clock time (``deadline_s``), corrective
messages for replies that fit no format (``max_parse_retries``) and identical tool calls
(``max_repeats``: the same tool with the same arguments — as the tool would receive them —
in that many turns means the agent is stuck). Steps and tokens count over the whole life of
an :class:`~dagagent.agent.AgentState`, resumes included; the deadline counts from the start
of each ``run`` / ``resume`` call.

These are the stop conditions of one agent run, checked after each turn. What a whole solve
may spend (tokens, cost, model and tool calls over every role, reserved before each call) is
another concept: :class:`~dagagent.Budget`, which agent tasks of a solve spend from too.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PARTIAL_STOPS", "STOP_REASONS", "AgentLimits", "call_signature"]

STOP_REASONS: Final = (
    "answer",  # the model gave its final answer
    "max_steps",  # every allowed model turn was used
    "max_tokens",  # the summed usage reached max_tokens
    "deadline",  # deadline_s passed (a model or tool call in flight was cut short)
    "loop",  # the same tool with the same arguments was requested in max_repeats turns
    "parse_error",  # text mode: replies fit no format, max_parse_retries corrections in a row
    "no_answer",  # the model kept replying with nothing (no text, no tool call)
)
"""Every ``AgentResult.stop_reason``; only ``"answer"`` comes with an answer."""

PARTIAL_STOPS: Final = frozenset({"max_steps", "max_tokens", "deadline", "loop"})
"""The stops after which an agent may still give its best answer so far
(``AgentResult.best_so_far``): it ran out of turns, tokens or time, or went round in circles,
having found things out; not a model whose replies could not be used."""


class AgentLimits(BaseModel):
    """Limits of one agent run (``None`` switches a limit off)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_steps: int | None = Field(default=10, ge=1, description="Model turns, at most.")
    max_tokens: int | None = Field(
        default=None, ge=1, description="Input + output tokens over every model call, at most."
    )
    deadline_s: float | None = Field(
        default=None, gt=0, description="Seconds from the start of run() / resume()."
    )
    max_parse_retries: int = Field(
        default=3,
        ge=0,
        description="Corrective messages sent in a row for replies that fit no format; "
        "one more such reply stops the run (parse_error / no_answer).",
    )
    max_repeats: int | None = Field(
        default=3,
        ge=2,
        description="The same tool with the same arguments (as the tool would receive them) "
        "in this many turns stops the run as stuck (loop); the repeated call is not made.",
    )
    best_so_far: bool = Field(
        default=True,
        description="An agent task that stops before answering (its deadline, its task's "
        "timeout, its step or token budget, a loop) succeeds with its best answer so far, "
        "marked partial, when it has one; False: it fails.",
    )


def call_signature(tool: str, args: Any) -> str:
    """A short, stable key for ``tool`` called with ``args`` (key order does not matter)."""
    blob = json.dumps([tool, args], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(blob.encode(), digest_size=12).hexdigest()
