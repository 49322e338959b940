"""The self-healing loop shared by the planner and the replanner: ask, parse, validate, and
send the specific problems back until the plan is valid or the attempts run out.

Parsing is tolerant: the JSON may sit in a code fence or after some prose, and a bare list
of tasks is read as a plan. Problems found (each an :class:`~dagagent.errors.Issue`):

=====================  ==========================================================================
``empty_answer``       the model answered with no text
``truncated``          the answer was cut off (``finish_reason`` "length", or unterminated JSON)
``not_json``           no JSON plan in the answer (the JSON error is quoted)
``schema``             the JSON does not fit the plan format (from :func:`dagagent.load_plan`)
``agent_task``         an agent task from a planner that plans tool calls only
(graph codes)          every issue of :func:`dagagent.validate`: ``cycle``, ``unknown_tool``,
                       ``bad_arguments``, ``missing_dependency``, ...
(caller codes)         extra checks, e.g. the replanner's ``changed_success``
=====================  ==========================================================================

An answer cut off by the output limit (``finish_reason == "length"``) is always rejected,
even when what arrived happens to parse: a structured-output backend may close the JSON of
a partial plan, and a silently shortened plan is worse than another attempt.

After ``max_attempts`` rejected answers, :class:`~dagagent.errors.PlanningError` carries
every attempt's raw text and issues. Errors talking to the model (``LLMError``) are not
caught: they propagate as themselves.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypedDict, TypeVar

from typing_extensions import Unpack

from ..errors import ConfigError, Issue, PlanningError
from ..events import get_logger
from ..graph import PlanGraph
from ..llm import (
    LLM,
    AssistantMessage,
    LLMResponse,
    Message,
    ModelSettings,
    ResponseFormat,
    Usage,
    UserMessage,
)
from ..plan import Plan
from ..text import shorten
from ..tools import Registry
from .parsing import extract_json, parse_plan_answer
from .prompts import feedback_prompt
from .schema import plan_response_format

__all__ = [
    "Check",
    "HealingPlanner",
    "PlanAttempt",
    "PlanningOptions",
    "PlanningResult",
    "ask_until_valid",
    "extract_json",
    "parse_plan_answer",
]

T = TypeVar("T")

Check = Callable[[Plan, PlanGraph], Sequence[Issue]]
"""An extra check on a valid plan: returns issues to feed back (empty: accept)."""

_ECHO_CHARS = 12_000  # how much of a rejected answer goes back into the conversation


@dataclass(frozen=True)
class PlanAttempt:
    """One answer of the model (a plan, or a joiner's decision): its raw text, what was wrong
    with it (empty: accepted)."""

    raw: str
    issues: tuple[Issue, ...]
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None

    @property
    def ok(self) -> bool:
        return not self.issues


@dataclass(frozen=True)
class PlanningResult:
    """A valid plan and how it was obtained: every attempt (the last one was accepted), the
    tokens used, and warnings that did not block the plan."""

    plan: Plan
    graph: PlanGraph
    attempts: tuple[PlanAttempt, ...]
    warnings: tuple[Issue, ...] = ()

    @property
    def usage(self) -> Usage:
        """Tokens over every attempt."""
        return sum((a.usage for a in self.attempts), Usage())

    @property
    def calls(self) -> int:
        """Model calls made (one per attempt; HTTP retries inside a call are not counted)."""
        return len(self.attempts)

    def usage_dict(self) -> dict[str, int]:
        """``attempts``, ``calls``, ``input_tokens``, ``output_tokens``, ``total_tokens``."""
        usage = self.usage
        return {
            "attempts": len(self.attempts),
            "calls": self.calls,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens,
        }

    def summary(self) -> str:
        """``"2 attempts, 2 calls, 812 input + 230 output tokens"``."""
        n, usage = len(self.attempts), self.usage
        return (
            f"{n} attempt{'s' if n != 1 else ''}, {self.calls} call{'s' if self.calls != 1 else ''}"
            f", {usage.input_tokens} input + {usage.output_tokens} output tokens"
        )


# ---------------------------------------------------------------------------- the loop


async def ask_until_valid(
    llm: LLM,
    messages: Sequence[Message],
    parse: Callable[[str, LLMResponse], tuple[T | None, Sequence[Issue]]],
    *,
    feedback: Callable[[Sequence[Issue]], str],
    max_attempts: int = 3,
    response_format: ResponseFormat | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    what: str = "plan",
) -> tuple[T | None, list[PlanAttempt]]:
    """The healing loop itself, for any structured answer (a plan, a joiner's decision).

    Asks ``llm``; ``parse(text, response)`` reads the answer into a value or issues. An
    answer with issues goes back into the conversation (cut to 12,000 characters) followed
    by ``feedback(issues)``, up to ``max_attempts`` answers. Returns the accepted value
    (``None`` if every answer was rejected) and every attempt. Model errors propagate."""
    log = get_logger(planner=what)
    history: list[Message] = list(messages)
    attempts: list[PlanAttempt] = []
    for n in range(1, max_attempts + 1):
        response = await llm.complete(
            history,
            response_format=response_format,
            max_tokens=max_tokens,
            temperature=temperature,
        )
        raw = _answer_text(response)
        value, issues = parse(raw, response)
        attempts.append(PlanAttempt(raw, tuple(issues), response.usage, response.finish_reason))
        if value is not None and not issues:
            log.info(f"{what} accepted", attempt=n)
            return value, attempts
        log.info(f"{what} attempt rejected", attempt=n, issues=[str(i) for i in issues[:5]])
        echo = shorten(raw, _ECHO_CHARS, one_line=False, fit=False)
        history.append(AssistantMessage(echo or "(empty answer)"))
        history.append(UserMessage(feedback(issues)))
    return None, attempts


def _answer_text(response: LLMResponse) -> str:
    """The text of an answer. A model that was offered no tools but answered with a tool
    call anyway (small models behind OpenAI-compatible servers do, with the plan as the
    call's arguments) is read by those arguments."""
    if response.content.strip() or not response.tool_calls:
        return response.content
    call = response.tool_calls[0]
    if call.arguments_error is not None:
        return call.raw_arguments or ""
    return json.dumps(call.arguments, ensure_ascii=False)


class PlanningOptions(TypedDict, total=False):
    """The options every planner takes (:class:`HealingPlanner` and its subclasses).

    - ``max_attempts`` (3): answers to try (the first one plus repairs) before
      :class:`~dagagent.errors.PlanningError`.
    - ``strict`` (``None``): ``None`` sends an OpenAI strict schema when the registry allows
      one (see :mod:`dagagent.planners.schema`), else a non-strict one; ``True`` insists
      (``ConfigError`` if impossible); ``False`` never.
    - ``structured`` (``True``): ``False`` sends no response format at all (for servers that
      reject ``response_format``; the prompt alone describes the format).
    - ``agent_tasks`` (``False``): the plan may also hold agent tasks (``instruction``).
    - ``settings``: a :class:`~dagagent.llm.ModelSettings` whose ``max_tokens`` and
      ``temperature`` go with every call.
    """

    max_attempts: int
    strict: bool | None
    structured: bool
    agent_tasks: bool
    settings: ModelSettings | None


class HealingPlanner:
    """A planner that heals: asks ``llm`` for a plan with the registry's plan schema as the
    response format, validates each answer and feeds its issues back, up to
    ``max_attempts`` answers (:meth:`ask_for_plan`); keeps the latest result
    (``last_result`` / ``last_usage``). The base of :class:`~dagagent.planners.LLMPlanner`
    and :class:`~dagagent.planners.LLMReplanner`; its options are :class:`PlanningOptions`.
    """

    def __init__(self, llm: LLM, registry: Registry, **options: Unpack[PlanningOptions]) -> None:
        max_attempts = options.get("max_attempts", 3)
        agent_tasks = options.get("agent_tasks", False)
        if max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, not {max_attempts}")
        if not len(registry) and not agent_tasks:
            raise ConfigError("cannot plan with an empty registry: register some tools first")
        self.llm = llm
        self.registry = registry
        self.max_attempts = max_attempts
        self.agent_tasks = agent_tasks
        self.settings = options.get("settings") or ModelSettings()
        self.max_tokens = self.settings.max_tokens
        self.temperature = self.settings.temperature
        self.response_format: ResponseFormat | None = (
            plan_response_format(registry, strict=options.get("strict"), agent_tasks=agent_tasks)
            if options.get("structured", True)
            else None
        )
        self.last_result: PlanningResult | None = None

    @property
    def strict(self) -> bool:
        """Whether the response format sent is a strict schema."""
        return self.response_format is not None and self.response_format.strict

    async def ask_for_plan(
        self,
        messages: Sequence[Message],
        *,
        goal: str,
        check: Check | None = None,
        warn: Callable[[Plan, PlanGraph], Sequence[Issue]] | None = None,
        what: str = "plan",
    ) -> PlanningResult:
        """Ask ``messages`` until a valid plan for ``goal`` comes back; raise
        :class:`PlanningError` after ``max_attempts`` rejected answers. ``check`` adds
        issues to feed back, ``warn`` issues to report with an accepted plan."""

        def parse(raw: str, response: LLMResponse) -> tuple[PlanGraph | None, list[Issue]]:
            graph, issues = parse_plan_answer(
                raw,
                self.registry,
                goal=goal,
                finish_reason=response.finish_reason,
                null_optionals=self.strict,
                agent_tasks=self.agent_tasks,
            )
            if graph is not None and check is not None:
                issues = list(check(graph.plan, graph))
            return graph, issues

        graph, attempts = await ask_until_valid(
            self.llm,
            messages,
            parse,
            feedback=lambda issues: feedback_prompt(
                issues, truncated=any(i.code == "truncated" for i in issues)
            ),
            max_attempts=self.max_attempts,
            response_format=self.response_format,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            what=what,
        )
        if graph is not None:
            warnings = tuple(warn(graph.plan, graph)) if warn is not None else ()
            return PlanningResult(graph.plan, graph, tuple(attempts), warnings)
        raise PlanningError(
            f"no valid {what} after {len(attempts)} attempt{'s' if len(attempts) != 1 else ''}"
            f" (goal: {shorten(goal, 80)!r})",
            attempts=[(a.raw, list(a.issues)) for a in attempts],
        )

    @property
    def last_usage(self) -> Usage | None:
        return self.last_result.usage if self.last_result is not None else None
