"""A model's reply, read as a turn: the final answer, tool calls to make, or a problem to
correct.

In tools mode a reply with tool calls asks for them all (each resolved, see
:meth:`~dagagent.agent._calls.Toolbox.resolve`), and a reply with text only is the answer.
Call ids must be unique in the whole conversation, since the results are matched to them:
some servers number the calls of each reply from 0 again, or send none, so a missing or
repeated id is replaced, in the calls and in the reply kept in the conversation. In text mode
the reply is read by :func:`~dagagent.agent.parsing.parse_react`: an action is one call, a
final answer the answer, a reply that fits no format a problem.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dagagent.llm import AssistantMessage, LLMResponse, Message

from ._calls import TOO_DEEP, Call, Toolbox
from ._prompts import EMPTY_PROBLEM
from .parsing import ReActFormatError, cut_observation, parse_react
from .state import Mode

__all__ = ["Turn", "read_turn"]


@dataclass
class Turn:
    """One model reply, read: an answer, tool calls, or a problem to correct."""

    message: AssistantMessage  # the reply as the conversation keeps it
    thought: str = ""
    answer: str | None = None
    calls: list[Call] = field(default_factory=list)
    problem: str | None = None
    empty: bool = False


def read_turn(
    response: LLMResponse,
    *,
    mode: Mode,
    step: int,
    history: Sequence[Message],
    tools: Toolbox,
) -> Turn:
    """Read ``response``, the reply of turn ``step`` to the conversation ``history``."""
    if mode == "text":
        return _read_text(response, step, tools)
    message = response.to_message()
    if response.tool_calls:
        calls = []
        seen = {tc.id for m in history if isinstance(m, AssistantMessage) for tc in m.tool_calls}
        fixed = False
        for i, tc in enumerate(response.tool_calls, 1):
            call_id = tc.id
            if not call_id or call_id in seen:  # the results must match unique ids
                call_id, n, fixed = f"call_{step}_{i}", 1, True
                while call_id in seen:
                    n += 1
                    call_id = f"call_{step}_{i}_{n}"
            seen.add(call_id)
            args: Any = tc.raw_arguments if tc.arguments_error else tc.arguments
            call = tools.resolve(call_id, tc.name, args, tc.arguments_error, False)
            fixed = fixed or call.args is not args  # too deep to keep: not sent back either
            calls.append(call)
        if fixed:
            message = AssistantMessage(
                response.content,
                [
                    tc.model_copy(update={"id": c.id})
                    if c.args is not TOO_DEEP
                    else tc.model_copy(update={"id": c.id, "arguments": {}})
                    for tc, c in zip(response.tool_calls, calls, strict=True)
                ],
            )
        return Turn(message, thought=response.content.strip(), calls=calls)
    text = response.content.strip()
    if not text:
        return Turn(message, problem=EMPTY_PROBLEM, empty=True)
    return Turn(message, answer=text)


def _read_text(response: LLMResponse, step: int, tools: Toolbox) -> Turn:
    text = cut_observation(response.content).strip()
    message = AssistantMessage(text)
    try:
        reply = parse_react(text)
    except ReActFormatError as exc:
        return Turn(message, problem=str(exc), empty=not text)
    if reply.final_answer is not None:
        return Turn(message, thought=reply.thought, answer=reply.final_answer)
    assert reply.action is not None
    call = tools.resolve(f"step_{step}", reply.action, reply.action_input, reply.input_error, True)
    return Turn(message, thought=reply.thought, calls=[call])
