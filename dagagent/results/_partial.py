"""Best so far: what an agent that stopped before answering can still give.

An agent task that reaches its deadline (the task's ``timeout_s`` or the agent's own
``deadline_s``) or its step or token budget, or that is stopped going round in circles, has
no final answer; it may still have found things out. :func:`best_so_far` makes its partial
answer from the steps it took: the last thing it thought, and what its tool calls returned
(the latest first to go when there are many). A task that gives it instead of failing
*succeeded*, its result marked partial (``error_type`` :data:`PARTIAL_ANSWER`, ``error`` says
why it stopped), so that downstream tasks can use it and the joiner is told it is partial.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..text import jsonable, shorten
from ._records import AgentStep

__all__ = ["PARTIAL_ANSWER", "PartialAnswer", "best_so_far"]

#: The ``error_type`` of a task that succeeded with a partial answer (``error``: why).
PARTIAL_ANSWER = "PartialAnswer"
#: What a partial answer shows of the calls the agent made, at most.
_MAX_FINDINGS = 8
_FINDING_CHARS = 600


@dataclass(frozen=True)
class PartialAnswer:
    """An agent runner's answer that is not a final one: ``answer`` is the best so far,
    ``why`` says why the agent stopped before answering. The task runner records the task as
    succeeded with ``answer`` as its output, marked partial with ``why``."""

    answer: Any
    why: str


def best_so_far(steps: Sequence[AgentStep] | None) -> str | None:
    """The partial answer the ``steps`` of an agent that did not answer can give: its last
    thought and what its calls returned (not the calls that failed; a call repeated with the
    same outcome once; the latest few); ``None`` when it has neither."""
    if not steps:
        return None
    thought = next((s.thought.strip() for s in reversed(steps) if s.thought.strip()), "")
    findings: list[str] = []
    for s in reversed(steps):
        for c in reversed(s.calls):
            if c.observation is None or c.is_error:
                continue
            args = json.dumps(jsonable(c.args), ensure_ascii=False, default=str)
            finding = (
                f"- {c.tool}({shorten(args, 120, one_line=False)}): "
                f"{shorten(c.observation, _FINDING_CHARS, one_line=False)}"
            )
            if finding not in findings:  # the same call seen again tells nothing new
                findings.append(finding)
            if len(findings) == _MAX_FINDINGS:
                break
        if len(findings) == _MAX_FINDINGS:
            break
    if not thought and not findings:
        return None
    parts = []
    if thought:
        parts.append(thought)
    if findings:
        findings.reverse()  # in the order they were found
        parts.append("What the tools returned:\n" + "\n".join(findings))
    return "\n\n".join(parts)
