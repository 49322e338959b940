"""``LLMPlanner``: a goal in, a validated plan out.

::

    planner = LLMPlanner(llm, registry)
    plan = await planner.plan("Compare the weather in Paris and Tokyo")
    report = await planner.plan_with_report("...")   # plan, graph, attempts, usage

The prompt carries the tool catalog, the plan format and the reference syntax and asks for
a plan as parallel as the goal allows; the registry's plan schema goes along as the
response format (see :mod:`dagagent.planners.schema`); answers are parsed, validated and
healed by :class:`~dagagent.planners.heal.HealingPlanner`.
"""

from __future__ import annotations

from typing_extensions import Unpack

from .. import telemetry
from ..errors import ConfigError
from ..llm import LLM, Message, SystemMessage, UserMessage
from ..plan import Plan
from ..tools import Registry
from .heal import HealingPlanner, PlanningOptions, PlanningResult
from .prompts import plan_user_prompt, system_prompt

__all__ = ["LLMPlanner"]


class LLMPlanner(HealingPlanner):
    """Turns goals into validated plans for ``registry`` with ``llm``.

    - ``max_attempts``, ``strict``, ``structured``, ``agent_tasks``, ``settings`` (a
      :class:`~dagagent.llm.ModelSettings`): see :class:`~dagagent.planners.heal.PlanningOptions`.
    - ``system_prompt``: replace the generated system prompt (the catalog included).

    ``last_result`` / ``last_usage`` describe the latest ``plan()`` call; when planning
    concurrently with one planner, use ``plan_with_report()`` instead.
    """

    def __init__(
        self,
        llm: LLM,
        registry: Registry,
        *,
        system_prompt: str | None = None,
        **options: Unpack[PlanningOptions],
    ) -> None:
        super().__init__(llm, registry, **options)
        self._system = system_prompt

    def system_prompt(self) -> str:
        if self._system is None:
            self._system = system_prompt(self.registry, agent_tasks=self.agent_tasks)
        return self._system

    def messages(self, goal: str) -> list[Message]:
        """The conversation the first attempt sends."""
        return [SystemMessage(self.system_prompt()), UserMessage(plan_user_prompt(goal))]

    async def plan_with_report(self, goal: str) -> PlanningResult:
        """A valid plan for ``goal`` with its graph, attempts and usage.

        Raises :class:`~dagagent.errors.PlanningError` (every attempt's raw text and issues)
        when no answer was valid; model errors (``LLMError``) propagate as themselves.
        """
        if not goal.strip():
            raise ConfigError("the goal is empty: say what the plan should achieve")
        with telemetry.operation("plan planner", telemetry.PLANNING, role="planner"):
            result = await self.ask_for_plan(self.messages(goal), goal=goal.strip())
        self.last_result = result
        return result

    async def plan(self, goal: str) -> Plan:
        """A valid plan for ``goal`` (see :meth:`plan_with_report`)."""
        return (await self.plan_with_report(goal)).plan
