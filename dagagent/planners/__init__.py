"""From a goal to a validated plan, and from a failed run to a revised one.

- :class:`LLMPlanner`: goal → plan, with the registry's plan schema as the response format
  and a self-healing loop that feeds validation issues back to the model.
- :class:`LLMReplanner`: goal + old plan + task results → revised plan that keeps every
  successful task unchanged, so its output can be reused.
- :class:`Joiner`: goal + plan + task results → ``finish(answer, cites)`` or
  ``replan(feedback)``.
- :class:`PlanExample` / :func:`load_examples`: few-shot plans of one's own for the planner.
- :func:`plan_json_schema`: the JSON Schema of a plan for a registry.
- :func:`parse_llmcompiler`: LLMCompiler plan text (``1. tool(args)`` lines) → plan.
"""

from .examples import PlanExample, load_examples
from .heal import HealingPlanner, PlanAttempt, PlanningOptions, PlanningResult
from .joiner import JoinDecision, Joiner, JoinReport, parse_join_answer
from .llmcompiler import parse_llmcompiler
from .parsing import extract_json, parse_plan_answer
from .planner import LLMPlanner
from .prompts import system_prompt, tool_catalog
from .replan import LLMReplanner
from .schema import (
    PLAN_FORMAT_NAME,
    REFERENCE_PATTERN,
    plan_json_schema,
    plan_response_format,
    strict_problems,
)

__all__ = [
    "PLAN_FORMAT_NAME",
    "REFERENCE_PATTERN",
    "HealingPlanner",
    "JoinDecision",
    "JoinReport",
    "Joiner",
    "LLMPlanner",
    "LLMReplanner",
    "PlanAttempt",
    "PlanExample",
    "PlanningOptions",
    "PlanningResult",
    "extract_json",
    "load_examples",
    "parse_join_answer",
    "parse_llmcompiler",
    "parse_plan_answer",
    "plan_json_schema",
    "plan_response_format",
    "strict_problems",
    "system_prompt",
    "tool_catalog",
]
