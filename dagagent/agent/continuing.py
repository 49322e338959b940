"""The conversation an agent had, rebuilt from its recorded steps, to continue it.

An agent task whose tool call waited for a person (an approval answered later) is recorded
with its steps (:class:`~dagagent.results.AgentStep`): each model turn's thought, its calls
and what each call returned. Those typed records are enough to continue the agent when the
run resumes, instead of starting it over: the messages the model saw are rebuilt from them
(its reply, then the observations, turn by turn), and the calls of the last step that have no
observation yet — the call that waited, and any that did not get to run — are made first.
A call with an observation is never made again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from dagagent.llm import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage
from dagagent.results import AgentStep, CallRecord
from dagagent.text import as_data, jsonable

from .state import Mode

__all__ = ["observation_text", "observations_of", "open_calls", "reply_of", "step_messages"]


def open_calls(step: AgentStep) -> list[CallRecord]:
    """The calls of a step that have not returned yet (no observation)."""
    return [c for c in step.calls if c.observation is None]


def reply_of(mode: Mode, step: AgentStep) -> AssistantMessage:
    """The model's reply of a step that made calls, as the model sent it."""
    if mode == "tools":
        return AssistantMessage(
            step.thought,
            [
                ToolCall(id=c.id, name=c.tool, arguments=c.args if isinstance(c.args, dict) else {})
                for c in step.calls
            ],
        )
    call = step.calls[0]
    given = call.args if isinstance(call.args, str) else json.dumps(jsonable(call.args))
    thought = f"Thought: {step.thought}\n" if step.thought else ""
    return AssistantMessage(f"{thought}Action: {call.tool}\nAction Input: {given}")


def observations_of(mode: Mode, calls: Sequence[CallRecord]) -> list[Message]:
    """What the model saw of its calls' results."""
    if mode == "tools":
        return [ToolResultMessage(c.id, c.observation or "", c.is_error) for c in calls]
    return [UserMessage(observation_text(c.observation or "", c.is_error)) for c in calls]


def observation_text(text: str, is_error: bool) -> str:
    """A call's result as the text format shows it: ``Observation:`` and the result as data
    (between ``<output>`` and ``</output>``), ``Error:`` first for a failed call."""
    return f"Observation: {'Error: ' if is_error else ''}{as_data(text)}"


def step_messages(mode: Mode, step: AgentStep, correction: Callable[[str], str]) -> list[Message]:
    """The messages one finished step added to the conversation (``correction``: what the
    agent tells the model about an unusable reply)."""
    if step.error is not None:
        return [UserMessage(correction(step.error))]
    if step.answer is not None:
        return [AssistantMessage(step.answer)]
    if not step.calls:
        return []
    return [reply_of(mode, step), *observations_of(mode, step.calls)]
