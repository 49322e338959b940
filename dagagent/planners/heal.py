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
(caller codes)         extra checks a caller of :meth:`HealingPlanner.ask_for_plan` adds
=====================  ==========================================================================

An answer cut off by the output limit (``finish_reason == "length"``) is always rejected,
even when what arrived happens to parse: a structured-output backend may close the JSON of
a partial plan, and a silently shortened plan is worse than another attempt. A plan of more
than ``max_tasks`` tasks is an issue too (``too_many_tasks``).

**Bounded output.** Every call asks for at most :meth:`HealingPlanner.output_limit` tokens:
the ``max_tokens`` of the planner's settings, else room for a plan of ``max_tasks`` tasks of
the registry's tools (:func:`dagagent.limits.plan_tokens`).

**Servers without json_schema.** A server that refuses the plan's response format (a 400
naming ``response_format`` or the JSON schema:
:class:`~dagagent.errors.LLMUnsupportedOptionError`) is asked again at once without it, the
prompt alone describing the format; the planner sends none from then on, logs a warning and
says so in the ``warnings`` of every plan it makes after (``no_response_format``). The joiner
falls back the same way.

**Large registries.** Past the threshold of the planner's ``discovery``
(:class:`~dagagent.tools.ToolDiscovery`: 30 tools by default), :meth:`HealingPlanner.
select_tools` picks the tools the prompt shows for a goal, and the response format holds only
those (:meth:`HealingPlanner.format_for`); each call made for the plan carries the selection
in its record (``options["tool_selection"]``). Plans are still validated against the whole
registry: a plan that uses a registered tool it was not shown is accepted.

After ``max_attempts`` rejected answers, :class:`~dagagent.errors.PlanningError` carries
every attempt's raw text and issues. Errors talking to the model (``LLMError``) are not
caught: they propagate as themselves.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypedDict, TypeVar

from typing_extensions import Self, Unpack

from ..errors import ConfigError, Issue, LLMUnsupportedOptionError, PlanningError
from ..events import get_logger
from ..graph import PlanGraph, sub_solve_allowed
from ..limits import AGENT_TASK_TOKENS, DEFAULT_MAX_TASKS, call_tokens, plan_tokens
from ..llm import (
    LLM,
    AssistantMessage,
    LLMResponse,
    Message,
    ModelSettings,
    ResponseFormat,
    Usage,
    UserMessage,
    ask_streamed,
    last_call,
    reject_last_call,
)
from ..llm.observe import noting
from ..plan import Plan, ToolTask
from ..text import shorten
from ..tools import Registry, ToolDiscovery, ToolSelection, select_tools
from .conversation import Conversation, in_conversation
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
    "plan_tools",
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
    without_format: Callable[[Issue], None] | None = None,
) -> tuple[T | None, list[PlanAttempt]]:
    """The healing loop itself, for any structured answer (a plan, a joiner's decision).

    Asks ``llm``; ``parse(text, response)`` reads the answer into a value or issues. An
    answer with issues goes back into the conversation (cut to 12,000 characters) followed
    by ``feedback(issues)``, up to ``max_attempts`` answers. Returns the accepted value
    (``None`` if every answer was rejected) and every attempt. Model errors propagate,
    except a server's refusal of ``response_format``: the call is made again without it and
    ``without_format`` gets the warning (see :func:`format_refused`)."""
    log = get_logger(planner=what)
    history: list[Message] = list(messages)
    attempts: list[PlanAttempt] = []
    for n in range(1, max_attempts + 1):
        while True:
            try:
                response = await ask_streamed(  # streamed: its progress shows as it is written
                    llm,
                    history,
                    response_format=response_format,
                    max_tokens=max_tokens,
                    temperature=temperature,
                )
                break
            except LLMUnsupportedOptionError as exc:
                if exc.option != "response_format" or response_format is None:
                    raise
                response_format = None
                warning = format_refused(exc, what)
                if without_format is not None:
                    without_format(warning)
        raw = _answer_text(response)
        value, issues = parse(raw, response)
        attempts.append(PlanAttempt(raw, tuple(issues), _usage(response), response.finish_reason))
        if value is not None and not issues:
            log.info(f"{what} accepted", attempt=n)
            return value, attempts
        log.info(f"{what} attempt rejected", attempt=n, issues=[str(i) for i in issues[:5]])
        reject_last_call(issues)  # its observer records why, and says so now
        echo = shorten(raw, _ECHO_CHARS, one_line=False, fit=False)
        history.append(AssistantMessage(echo or "(empty answer)"))
        history.append(UserMessage(feedback(issues)))
    return None, attempts


def format_refused(error: LLMUnsupportedOptionError, what: str) -> Issue:
    """The warning (logged, and returned for the record) that a server refused the
    ``json_schema`` response format, so that the format of ``what`` goes in the prompt alone."""
    issue = Issue(
        "no_response_format",
        None,
        f"the server does not take json_schema response formats, so the {what} format is "
        f"described in the prompt alone ({error})",
    )
    get_logger(planner=what).warning("planner.no_response_format", detail=issue.message)
    return issue


def _usage(response: LLMResponse) -> Usage:
    """The usage of the call that gave ``response``: as its observer counted it (estimated
    where the provider said nothing), else as the provider said."""
    call = last_call()
    return call.usage if call is not None and call.response is response else response.usage


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


def plan_tools(plan: Plan) -> list[str]:
    """The tools ``plan`` uses: its tool tasks' and the tools its agent tasks list."""
    names: dict[str, None] = {}
    for task in plan.tasks:
        if isinstance(task, ToolTask):
            names.setdefault(task.tool, None)
        else:
            for name in getattr(task, "tools", None) or ():
                names.setdefault(name, None)
    return list(names)


class PlanningOptions(TypedDict, total=False):
    """The options every planner takes (:class:`HealingPlanner` and its subclasses).

    - ``max_attempts`` (3): answers to try (the first one plus repairs) before
      :class:`~dagagent.errors.PlanningError`.
    - ``strict`` (``None``): ``True`` sends OpenAI's strict schema (``ConfigError`` if the
      registry cannot have one; every field of every task is then written, which costs
      output tokens); ``None`` or ``False``, the non-strict one.
    - ``structured`` (``True``): ``False`` sends no response format at all (for servers that
      reject ``response_format``; the prompt alone describes the format).
    - ``agent_tasks`` (``False``): the plan may also hold agent tasks (``instruction``).
    - ``solve_depth`` (``None``): the plans are for a solve at this depth that may hold
      sub-solves (``"solve": true``; 0: a top solve), down to
      :data:`~dagagent.limits.MAX_SOLVE_DEPTH`; ``None``: they may hold none.
    - ``max_tasks`` (50): the most tasks a plan may have (``too_many_tasks``); with the
      registry's tools, it sets the default output limit (see
      :meth:`HealingPlanner.output_limit`).
    - ``settings``: a :class:`~dagagent.llm.ModelSettings` whose ``max_tokens`` (the output
      limit of each call) and ``temperature`` go with every call.
    - ``discovery``: a :class:`~dagagent.tools.ToolDiscovery`: how many tools a registry
      may have before the prompt shows only those most relevant to the goal, how many, and
      how they are ranked (default: past 30 tools, the 30 best by BM25).
    """

    max_attempts: int
    strict: bool | None
    structured: bool
    agent_tasks: bool
    solve_depth: int | None
    max_tasks: int
    settings: ModelSettings | None
    discovery: ToolDiscovery | None


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
        max_tasks = options.get("max_tasks", DEFAULT_MAX_TASKS)
        if max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, not {max_attempts}")
        if isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1:
            raise ConfigError(f"max_tasks must be at least 1, not {max_tasks!r}")
        solve_depth = options.get("solve_depth")
        sub_solves = sub_solve_allowed(solve_depth)
        if not len(registry) and not agent_tasks and not sub_solves:
            raise ConfigError("cannot plan with an empty registry: register some tools first")
        self.llm = llm
        self.registry = registry
        self.max_attempts = max_attempts
        self.agent_tasks = agent_tasks
        self.solve_depth = solve_depth
        #: Whether the plans may hold sub-solves (``solve_depth`` allows them).
        self.sub_solves = sub_solves
        self.max_tasks = max_tasks
        self.settings = options.get("settings") or ModelSettings()
        self.discovery = options.get("discovery") or ToolDiscovery()
        self._formats: dict[frozenset[str], ResponseFormat] = {}
        self.temperature = self.settings.temperature
        # What one task of a plan for this registry takes to write, by kind of task.
        self._task_tokens = [call_tokens(t.name, t.parameters_schema) for t in registry]
        if agent_tasks or sub_solves:
            self._task_tokens.append(AGENT_TASK_TOKENS)
        self.max_tokens = self.output_limit()
        self._strict_option = options.get("strict")
        self.response_format: ResponseFormat | None = (
            plan_response_format(
                registry,
                strict=self._strict_option,
                agent_tasks=agent_tasks,
                sub_solves=sub_solves,
            )
            if options.get("structured", True)
            else None
        )
        #: Set when a server refused the response format: the warning every plan carries.
        self.format_warning: Issue | None = None
        self.last_result: PlanningResult | None = None
        #: The turns before this one, in a session (see :meth:`with_conversation`).
        self.conversation: Conversation | None = None

    def with_llm(self, llm: LLM) -> Self:
        """A copy of this planner that asks ``llm`` (say, the same model metered apart)."""
        clone = copy.copy(self)
        clone.llm = llm
        clone.last_result = None
        return clone

    def for_registry(self, registry: Registry) -> Self:
        """A copy of this planner that checks plans against ``registry``: the same tools and
        more (a session's, which adds the reader of earlier turns' outputs), its prompt and
        response format unchanged (they show the tools a plan is written with)."""
        clone = copy.copy(self)
        clone.registry = registry
        clone.last_result = None
        return clone

    def with_conversation(self, conversation: Conversation | None) -> Self:
        """A copy of this planner for one turn of a session: its prompt shows
        ``conversation`` (the earlier questions, answers and outputs) and its plans may
        reference earlier turns' outputs (``${turnN.task}``, see
        :mod:`dagagent.planners.conversation`)."""
        clone = copy.copy(self)
        clone.conversation = conversation
        clone.last_result = None
        return clone

    def with_conversation_text(self, text: str) -> str:
        """``text`` (what the model is asked) after the conversation section, when there
        is one (see :func:`~dagagent.planners.conversation.in_conversation`)."""
        return in_conversation(self.conversation, text)

    def output_limit(self, max_tasks: int | None = None) -> int:
        """The most tokens one answer may have: the settings' ``max_tokens``, else room for a
        plan of ``max_tasks`` tasks (default: the planner's) of this registry's tools
        (:func:`dagagent.limits.plan_tokens`)."""
        if self.settings.max_tokens is not None:
            return self.settings.max_tokens
        return plan_tokens(self._task_tokens, max_tasks=max_tasks or self.max_tasks)

    async def select_tools(self, goal: str, keep: Iterable[str] = ()) -> ToolSelection | None:
        """The tools to show the model for ``goal`` (always ``keep``), or ``None``: every
        tool (a registry no larger than the discovery's threshold)."""
        return await select_tools(self.registry, goal, self.discovery, keep=keep)

    def format_for(self, selection: ToolSelection | None) -> ResponseFormat | None:
        """The response format of a plan of the selected tools (``None``: the planner sends
        none, the server having refused it or ``structured=False``)."""
        if selection is None or self.response_format is None:
            return self.response_format
        key = frozenset(selection.names)
        if key not in self._formats:
            if len(self._formats) >= 32:
                self._formats.clear()
            self._formats[key] = plan_response_format(
                self.registry.subset(selection.names),
                strict=self._strict_option,
                agent_tasks=self.agent_tasks,
                sub_solves=self.sub_solves,
            )
        return self._formats[key]

    def without_format(self, warning: Issue) -> None:
        """The server refused the response format (``warning``, from :func:`format_refused`):
        plan with the prompt alone from now on, and say so in the warnings of every plan."""
        self.response_format = None
        if self.format_warning is None:
            self.format_warning = warning

    def planning_warnings(self, *more: Issue) -> tuple[Issue, ...]:
        """The warnings of a plan: the planner's own (``no_response_format``), then ``more``."""
        own = (self.format_warning,) if self.format_warning is not None else ()
        return (*own, *more)

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
        selection: ToolSelection | None = None,
    ) -> PlanningResult:
        """Ask ``messages`` until a valid plan for ``goal`` comes back; raise
        :class:`PlanningError` after ``max_attempts`` rejected answers. ``check`` adds
        issues to feed back, ``warn`` issues to report with an accepted plan;
        ``selection``: the tools the messages show (the response format holds only those,
        and each call's record says which they were)."""

        def parse(raw: str, response: LLMResponse) -> tuple[PlanGraph | None, list[Issue]]:
            graph, issues = parse_plan_answer(
                raw,
                self.registry,
                goal=goal,
                finish_reason=response.finish_reason,
                null_optionals=self.strict,
                agent_tasks=self.agent_tasks,
                given=self.conversation.tasks() if self.conversation is not None else None,
                solve_depth=self.solve_depth,
            )
            if graph is not None and len(graph.plan.tasks) > self.max_tasks:
                issues = [
                    Issue(
                        "too_many_tasks",
                        None,
                        f"the plan has {len(graph.plan.tasks)} tasks, more than "
                        f"{self.max_tasks}: plan fewer, larger steps",
                    )
                ]
            elif graph is not None and check is not None:
                issues = list(check(graph.plan, graph))
            return graph, issues

        notes = {"tool_selection": selection.as_json()} if selection is not None else {}
        with noting(**notes):
            graph, attempts = await ask_until_valid(
                self.llm,
                messages,
                parse,
                feedback=lambda issues: feedback_prompt(
                    issues, truncated=any(i.code == "truncated" for i in issues)
                ),
                max_attempts=self.max_attempts,
                response_format=self.format_for(selection),
                max_tokens=self.max_tokens,
                temperature=self.temperature,
                what=what,
                without_format=self.without_format,
            )
        if graph is not None:
            warnings = self.planning_warnings(*(warn(graph.plan, graph) if warn else ()))
            return PlanningResult(graph.plan, graph, tuple(attempts), warnings)
        raise PlanningError(
            f"no valid {what} after {len(attempts)} attempt{'s' if len(attempts) != 1 else ''}"
            f" (goal: {shorten(goal, 80)!r})",
            attempts=[(a.raw, list(a.issues)) for a in attempts],
        )

    @property
    def last_usage(self) -> Usage | None:
        return self.last_result.usage if self.last_result is not None else None
