"""``LLMReplanner``: a partly failed run in, a revised plan out, reusing every success.

::

    replanner = LLMReplanner(llm, registry)
    new_plan = await replanner.replan(goal, old_plan, run_result.tasks)

The model sees the goal, the old plan, the outputs of the tasks that succeeded (shortened)
and the errors of those that failed, and is asked to keep the successful tasks exactly
(same id, tool and args: their fingerprints stay equal, so ``execute(..., reuse=...)``
reuses their outputs) and to fix or replace the failed ones. The answer goes through the
same parse → validate → feedback loop as the planner
(:class:`~dagagent.planners.heal.HealingPlanner`). What it did to the tasks of the old plan
comes with the revised plan as warnings (``PlanningResult.warnings``), never as issues:

- a successful task kept under its id but with another tool or other args is a **new
  version** of that task (``new_version``): it runs (its old output is not reused: its
  fingerprint changed), and the tasks that use its output run again unless it comes out the
  same. The plans' diff lists it as changed, and the reuse prediction says it runs.
- a successful task that the revised plan drops is ``dropped_success``: the model may have
  found a better path.
- a failed task kept unchanged is ``unchanged_failure``: it may fail again, but failures
  can be transient (timeouts, rate limits).
"""

from __future__ import annotations

from collections.abc import Mapping

from typing_extensions import Unpack

from .. import telemetry
from ..errors import Issue
from ..graph import PlanGraph
from ..llm import LLM, Message, SystemMessage, UserMessage
from ..plan import Plan, Task, ToolTask, same_call
from ..results import TaskResult, TaskStatus
from ..review import new_versions
from ..tools import Registry, ToolSelection
from .heal import HealingPlanner, PlanningOptions, PlanningResult, plan_tools
from .prompts import replan_user_prompt, shorten, system_prompt

__all__ = ["LLMReplanner", "replan_warnings"]


def _succeeded(results: Mapping[str, TaskResult]) -> list[str]:
    return [tid for tid, r in results.items() if r.status.ok]


def _call(task: Task) -> str:
    if isinstance(task, ToolTask):
        return f"{task.tool}({shorten(task.args, 120)})"
    return f"{'sub-solve' if task.solve else 'agent'}: {shorten(task.instruction, 120)}"


def replan_warnings(old: Plan, new: Plan, results: Mapping[str, TaskResult]) -> list[Issue]:
    """``dropped_success``, ``new_version`` and ``unchanged_failure`` (see the module
    docstring)."""
    before = {t.id: t for t in old.tasks}
    after = {t.id: t for t in new.tasks}
    warnings = [
        Issue("dropped_success", tid, "succeeded before but the revised plan leaves it out")
        for tid in _succeeded(results)
        if tid in before and tid not in after
    ]
    warnings += [
        Issue(
            "new_version",
            tid,
            f"succeeded before as {_call(before[tid])}; the revised plan changes it to "
            f"{_call(after[tid])}: it runs again, and so do the tasks that use its output, "
            "unless it comes out the same",
        )
        for tid in new_versions(old, new, results)
    ]
    for tid, r in results.items():
        if (
            r.status in (TaskStatus.FAILED, TaskStatus.DENIED)
            and tid in before
            and tid in after
            and same_call(before[tid], after[tid])
            and before[tid].when == after[tid].when  # a new condition may be the fix
        ):
            warnings.append(
                Issue("unchanged_failure", tid, f"{r.status.value} before and kept unchanged")
            )
    return warnings


class LLMReplanner(HealingPlanner):
    """Revises a partly failed plan with ``llm``; the options are those of
    :class:`~dagagent.planners.LLMPlanner`, plus ``output_chars``: how much of each
    successful output the model sees."""

    def __init__(
        self,
        llm: LLM,
        registry: Registry,
        *,
        output_chars: int = 300,
        **options: Unpack[PlanningOptions],
    ) -> None:
        super().__init__(llm, registry, **options)
        self.output_chars = output_chars
        self._system: dict[frozenset[str] | None, str] = {}

    async def select_plan_tools(
        self, goal: str, plan: Plan, feedback: str | None = None
    ) -> ToolSelection | None:
        """The tools to show for revising ``plan`` (see
        :meth:`~dagagent.planners.heal.HealingPlanner.select_tools`): ranked for the goal and
        the feedback, and always those ``plan`` uses, so its tasks can be kept."""
        query = f"{goal}\n{feedback}" if feedback else goal
        return await self.select_tools(query, keep=plan_tools(plan))

    def messages(
        self,
        goal: str,
        plan: Plan,
        results: Mapping[str, TaskResult],
        *,
        feedback: str | None = None,
        selection: ToolSelection | None = None,
    ) -> list[Message]:
        """The conversation the first attempt sends (showing ``selection``'s tools, when
        not all)."""
        shown = selection.names if selection is not None else None
        key = frozenset(shown) if shown is not None else None
        if key not in self._system:
            if len(self._system) >= 32:
                self._system.clear()
            self._system[key] = system_prompt(
                self.registry,
                agent_tasks=self.agent_tasks,
                replanning=True,
                sub_solves=self.sub_solves,
                shown=shown,
            )
        text = replan_user_prompt(
            goal, plan, results, output_chars=self.output_chars, feedback=feedback
        )
        return [SystemMessage(self._system[key]), UserMessage(self.with_conversation_text(text))]

    async def replan_with_report(
        self,
        goal: str,
        plan: Plan,
        results: Mapping[str, TaskResult],
        *,
        feedback: str | None = None,
    ) -> PlanningResult:
        """A valid revised plan, its attempts, usage and warnings. ``feedback``: what the
        results still lack (a joiner's or a person's words), shown to the model.

        Raises :class:`~dagagent.errors.PlanningError` when no answer was valid; model
        errors (``LLMError``) propagate as themselves.
        """
        goal = (goal or plan.goal).strip()

        def warn(new: Plan, graph: PlanGraph) -> list[Issue]:
            return replan_warnings(plan, new, results)

        selection = await self.select_plan_tools(goal, plan, feedback)
        messages = self.messages(goal, plan, results, feedback=feedback, selection=selection)
        with telemetry.operation("plan planner", telemetry.PLANNING, role="planner"):
            result = await self.ask_for_plan(
                messages, goal=goal, warn=warn, what="revised plan", selection=selection
            )
        self.last_result = result
        return result

    async def replan(
        self,
        goal: str,
        plan: Plan,
        results: Mapping[str, TaskResult],
        *,
        feedback: str | None = None,
    ) -> Plan:
        """A revised plan for ``goal`` that reuses the successful tasks of ``plan`` it keeps
        (see the module docstring)."""
        return (await self.replan_with_report(goal, plan, results, feedback=feedback)).plan
