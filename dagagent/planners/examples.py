"""Few-shot plans of one's own: a goal and the plan that reaches it, shown to the planner's model
before the goal it is asked to plan (``LLMPlanner(..., examples=...)``, ``dagagent ask
--examples FILE``).

**The examples file** is one JSON array, each element an object with exactly two keys::

    [
      {"goal": "Which is warmer, Oslo or Rome?",
       "plan": {"tasks": [
         {"id": "oslo", "tool": "get_weather", "args": {"city": "Oslo"}},
         {"id": "rome", "tool": "get_weather", "args": {"city": "Rome"}},
         {"id": "warmer", "tool": "compare",
          "args": {"a": "${oslo.temp_c}", "b": "${rome.temp_c}"}}]}}
    ]

``plan`` is a plan in the plan format (its ``goal`` may be left out: the example's goal is
taken), or the list of its tasks. Every example must be a valid plan for the registry the
planner plans for, checked as :func:`dagagent.validate` checks a plan: a model copies what
its examples do, so an example naming a tool that is not there, or arguments that do not fit,
is a :class:`~dagagent.errors.ConfigError` naming the example and every issue, before any
model call.

Each example becomes two turns of the conversation, after the system prompt: the user asking
for the example's goal as the planner asks for a goal, and the assistant answering with the
plan as one JSON object, as the prompt asks the model to.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, PlanLoadError, PlanValidationError
from ..graph import validate
from ..llm import AssistantMessage, Message, UserMessage
from ..plan import Plan, load_plan
from ..text import read_bounded, shorten
from .prompts import plan_user_prompt

if TYPE_CHECKING:
    from ..tools import Registry

__all__ = ["MAX_EXAMPLES_BYTES", "PlanExample", "example_messages", "load_examples"]

#: The largest examples file read.
MAX_EXAMPLES_BYTES = 1_000_000


@dataclass(frozen=True)
class PlanExample:
    """A goal and a valid plan that reaches it."""

    goal: str
    plan: Plan

    def messages(self) -> list[Message]:
        """The two turns this example is shown as."""
        answer = self.plan.model_dump_json(exclude_defaults=True, exclude={"goal"})
        return [UserMessage(plan_user_prompt(self.goal)), AssistantMessage(answer)]


def load_examples(
    source: str | Path | Sequence[PlanExample | Mapping[str, Any]], registry: Registry
) -> list[PlanExample]:
    """Read and check examples: from a path to an examples file (see the module docstring),
    or from ``PlanExample`` objects or dicts of the same shape. Raises
    :class:`~dagagent.errors.ConfigError` naming the file, the example and what is wrong."""
    if isinstance(source, (str, Path)):
        where = f"examples file {str(source)!r}"
        try:
            text = read_bounded(source, MAX_EXAMPLES_BYTES, what="examples file")
        except OSError as exc:
            raise ConfigError(f"cannot read the {where}: {exc.strerror or exc}") from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(f"cannot read the {where}: {exc}") from None
        try:
            data: Any = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"the {where} is not JSON: {exc}") from None
    else:
        where, data = "examples", source
    if isinstance(data, Mapping) or not isinstance(data, Sequence) or isinstance(data, str):
        raise ConfigError(
            f"the {where} must be a JSON array of examples, each "
            '{"goal": "...", "plan": {"tasks": [...]}}'
        )
    return [_example(item, n, where, registry) for n, item in enumerate(data, 1)]


def _example(item: Any, n: int, where: str, registry: Registry) -> PlanExample:
    plan_data: Any
    if isinstance(item, PlanExample):
        goal, plan_data = item.goal, item.plan
    else:
        if not isinstance(item, Mapping) or set(item) != {"goal", "plan"}:
            got = (
                f"an object with the keys {sorted(map(str, item))}"
                if isinstance(item, Mapping)
                else f"a {type(item).__name__}"
            )
            raise ConfigError(
                f"{where}: example {n} must be an object with exactly the keys 'goal' and "
                f"'plan', not {got}"
            )
        goal, plan_data = item["goal"], item["plan"]
    if not isinstance(goal, str) or not goal.strip():
        raise ConfigError(f"{where}: example {n} has no goal: 'goal' must be a non-empty string")
    named = f"{where}: example {n} ({shorten(goal.strip(), 60)!r})"
    if isinstance(plan_data, list):
        plan_data = {"tasks": plan_data}
    if isinstance(plan_data, Mapping) and "goal" not in plan_data:
        plan_data = {"goal": goal.strip(), **plan_data}
    if not isinstance(plan_data, Mapping | Plan):
        raise ConfigError(
            f"{named}: 'plan' must be a plan (an object with 'tasks') or the list of its tasks, "
            f"not a {type(plan_data).__name__}"
        )
    try:
        plan = load_plan(plan_data)
        validate(plan, registry)
    except (PlanLoadError, PlanValidationError) as exc:
        issues = "; ".join(str(i) for i in exc.issues) or str(exc)
        raise ConfigError(f"{named} is not a valid plan for these tools: {issues}") from None
    return PlanExample(goal.strip(), plan)


def example_messages(examples: Sequence[PlanExample]) -> list[Message]:
    """The turns of ``examples``, in order."""
    return [m for example in examples for m in example.messages()]
