"""``LLMPlanner``: a goal in, a validated plan out.

::

    planner = LLMPlanner(llm, registry)
    plan = await planner.plan("Compare the weather in Paris and Tokyo")
    report = await planner.plan_with_report("...")   # plan, graph, attempts, usage

The prompt carries the tool catalog, the plan format and the reference syntax and asks for
a plan as parallel as the goal allows; the registry's plan schema goes along as the
response format (see :mod:`dagagent.planners.schema`); answers are parsed, validated and
healed by :class:`~dagagent.planners.heal.HealingPlanner`.

A prompt of one's own replaces the generated one (``system_prompt=``): the marker
``{tools}`` in it stands for the tool catalog, which is added at its end when the marker is
not there (the model cannot plan with tools it is not told about). Few-shot plans
(``examples=``, see :mod:`dagagent.planners.examples`) go between the system prompt and
the goal.

A registry larger than the discovery's threshold (``discovery=``, a
:class:`~dagagent.tools.ToolDiscovery`; 30 tools by default) is shown by relevance: the
prompt (and the ``{tools}`` marker) lists only the tools chosen for the goal
(:meth:`~dagagent.planners.heal.HealingPlanner.select_tools`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from typing_extensions import Self, Unpack

from .. import telemetry
from ..errors import ConfigError, PlanLoadError, PlanValidationError
from ..llm import LLM, Message, SystemMessage, UserMessage
from ..plan import Plan
from ..tools import Registry, ToolSelection
from .examples import PlanExample, example_messages, load_examples
from .heal import HealingPlanner, PlanningOptions, PlanningResult, plan_tools
from .prompts import plan_user_prompt, planner_skills, system_prompt, tools_section

__all__ = ["TOOLS_MARKER", "LLMPlanner"]

TOOLS_MARKER = "{tools}"
"""Where a system prompt of one's own wants the tool catalog."""


class LLMPlanner(HealingPlanner):
    """Turns goals into validated plans for ``registry`` with ``llm``.

    - ``max_attempts``, ``strict``, ``structured``, ``agent_tasks``, ``solve_depth``,
      ``max_tasks``,
      ``settings`` (a :class:`~dagagent.llm.ModelSettings`): see
      :class:`~dagagent.planners.heal.PlanningOptions`.
    - ``system_prompt``: a system prompt of one's own, instead of the generated one;
      ``{tools}`` in it stands for the tool catalog (added at the end when missing).
    - ``examples``: few-shot plans, :class:`~dagagent.planners.examples.PlanExample` s or
      dicts ``{"goal": ..., "plan": ...}``, or the path of an examples file; each must be a
      valid plan for ``registry`` (:class:`~dagagent.errors.ConfigError` otherwise).

    ``last_result`` / ``last_usage`` describe the latest ``plan()`` call; when planning
    concurrently with one planner, use ``plan_with_report()`` instead.
    """

    def __init__(
        self,
        llm: LLM,
        registry: Registry,
        *,
        system_prompt: str | None = None,
        examples: str | Path | Sequence[PlanExample | Mapping[str, Any]] = (),
        **options: Unpack[PlanningOptions],
    ) -> None:
        super().__init__(llm, registry, **options)
        if system_prompt is not None and not system_prompt.strip():
            raise ConfigError("the planner's system prompt is empty")
        self.own_prompt = system_prompt
        self._system: dict[frozenset[str] | None, str] = {}
        self.examples: list[PlanExample] = load_examples(examples, registry)

    async def select_tools(self, goal: str, keep: Iterable[str] = ()) -> ToolSelection | None:
        """The tools to show for ``goal`` (see
        :meth:`~dagagent.planners.heal.HealingPlanner.select_tools`), always with those the
        few-shot examples use: a plan the model is shown uses no tool it is not told about."""
        shown = [name for example in self.examples for name in plan_tools(example.plan)]
        return await super().select_tools(goal, [*keep, *shown])

    def system_prompt(self, selection: ToolSelection | None = None) -> str:
        """The system prompt: one's own (with the tool catalog), else the generated one;
        ``selection``: the tools it shows, when not all."""
        shown = selection.names if selection is not None else None
        key = frozenset(shown) if shown is not None else None
        if key not in self._system:
            if len(self._system) >= 32:
                self._system.clear()
            own = self.own_prompt
            if own is None:
                text = system_prompt(
                    self.registry,
                    agent_tasks=self.agent_tasks,
                    sub_solves=self.sub_solves,
                    shown=shown,
                )
            else:
                catalog = tools_section(self.registry, shown, agent_tasks=self.agent_tasks)
                catalog = catalog.split("\n", 1)[1] if shown is None else catalog
                skills = planner_skills(self.registry, agent_tasks=self.agent_tasks)
                if skills:  # the skills go where the tools are shown
                    catalog = f"{catalog}\n\n{skills}"
                if TOOLS_MARKER in own:
                    text = own.replace(TOOLS_MARKER, catalog)
                elif shown is None:
                    text = f"{own.rstrip()}\n\nTools:\n{catalog}"
                else:
                    text = f"{own.rstrip()}\n\n{catalog}"
            self._system[key] = text
        return self._system[key]

    def for_registry(self, registry: Registry) -> Self:
        """A copy checking plans against ``registry`` (see
        :meth:`HealingPlanner.for_registry`); its prompt keeps this planner's tool catalog."""
        self.system_prompt()  # made now, from the tools it was built with
        return super().for_registry(registry)

    def for_sub_solve(self, registry: Registry, solve_depth: int) -> LLMPlanner:
        """The planner of a sub-solve of a solve this planner plans for: the same model,
        prompt of one's own, settings and options, for the sub-solve's tools (``registry``,
        its task's ``tools``) at its depth (``solve_depth``: whether its plans may hold
        sub-solves in turn). Of the few-shot examples it keeps those that are plans the
        sub-solve could run (only its tools; a sub-solve only where it may have one): a model
        is never shown an example using a tool it is not told about. It is shown no
        conversation (a session's turns are its parent's)."""
        from ..graph import sub_solve_issues, validate

        kept = []
        for example in self.examples:
            if sub_solve_issues(example.plan.tasks, solve_depth):
                continue
            try:
                validate(example.plan, registry)
            except (PlanLoadError, PlanValidationError):
                continue
            kept.append(example)
        return LLMPlanner(
            self.llm,
            registry,
            system_prompt=self.own_prompt,
            examples=kept,
            max_attempts=self.max_attempts,
            strict=self._strict_option,
            structured=self.response_format is not None,
            agent_tasks=self.agent_tasks,
            solve_depth=solve_depth,
            max_tasks=self.max_tasks,
            settings=self.settings,
            discovery=self.discovery,
        )

    def messages(self, goal: str, selection: ToolSelection | None = None) -> list[Message]:
        """The conversation the first attempt sends: the system prompt (showing
        ``selection``'s tools, when not all), the examples, the goal."""
        return [
            SystemMessage(self.system_prompt(selection)),
            *example_messages(self.examples),
            UserMessage(self.with_conversation_text(plan_user_prompt(goal))),
        ]

    async def plan_with_report(self, goal: str) -> PlanningResult:
        """A valid plan for ``goal`` with its graph, attempts and usage.

        Raises :class:`~dagagent.errors.PlanningError` (every attempt's raw text and issues)
        when no answer was valid; model errors (``LLMError``) propagate as themselves.
        """
        if not goal.strip():
            raise ConfigError("the goal is empty: say what the plan should achieve")
        selection = await self.select_tools(goal)
        with telemetry.operation("plan planner", telemetry.PLANNING, role="planner"):
            result = await self.ask_for_plan(
                self.messages(goal, selection), goal=goal.strip(), selection=selection
            )
        self.last_result = result
        return result

    async def plan(self, goal: str) -> Plan:
        """A valid plan for ``goal`` (see :meth:`plan_with_report`)."""
        return (await self.plan_with_report(goal)).plan
