"""``LLMReplanner``: a partly failed run in, a revised plan out, reusing every success.

::

    replanner = LLMReplanner(llm, registry)
    new_plan = await replanner.replan(goal, old_plan, run_result.tasks)

The model sees the goal, the old plan, the outputs of the tasks that succeeded (shortened)
and the errors of those that failed, and is asked to keep the successful tasks exactly
(same id, tool and args: their fingerprints stay equal, so ``execute(..., reuse=...)``
reuses their outputs) and to fix or replace the failed ones. The answer goes through the
same parse → validate → feedback loop as the planner
(:class:`~dagagent.planners.heal.HealingPlanner`), plus one more check:

- a successful task kept under its id but with another tool or other args is an **issue**
  (``changed_success``) fed back to the model: the id would then name a different
  computation, its output could not be reused, and the run history would be misleading.
  The model may keep the task unchanged or give the changed task a new id.
- a successful task that the revised plan drops is a **warning** (``dropped_success``) in
  ``PlanningResult.warnings``: the model may have found a better path.
- a failed task kept unchanged is a warning (``unchanged_failure``): it may fail again, but
  failures can be transient (timeouts, rate limits).
"""

from __future__ import annotations

from collections.abc import Mapping

from typing_extensions import Unpack

from .. import telemetry
from ..errors import Issue
from ..graph import PlanGraph
from ..llm import LLM, Message, SystemMessage, UserMessage
from ..plan import Plan, ToolTask, same_call
from ..results import TaskResult, TaskStatus
from ..tools import Registry
from .heal import HealingPlanner, PlanningOptions, PlanningResult
from .prompts import replan_user_prompt, shorten, system_prompt

__all__ = ["LLMReplanner", "replan_issues", "replan_warnings"]


def _succeeded(results: Mapping[str, TaskResult]) -> list[str]:
    return [tid for tid, r in results.items() if r.status.ok]


def replan_issues(old: Plan, new: Plan, results: Mapping[str, TaskResult]) -> list[Issue]:
    """``changed_success`` for each successful task the new plan changed under its id."""
    before = {t.id: t for t in old.tasks}
    after = {t.id: t for t in new.tasks}
    issues = []
    for tid in _succeeded(results):
        if tid in before and tid in after and not same_call(before[tid], after[tid]):
            was = before[tid]
            what = (
                f"tool {was.tool!r} with args {shorten(was.args, 200)}"
                if isinstance(was, ToolTask)
                else f"instruction {shorten(was.instruction, 200)}"
            )
            issues.append(
                Issue(
                    "changed_success",
                    tid,
                    f"this task succeeded in the previous run; keep it exactly as it was "
                    f"({what}) so its output is reused, or give the changed task a new id",
                )
            )
    return issues


def replan_warnings(old: Plan, new: Plan, results: Mapping[str, TaskResult]) -> list[Issue]:
    """``dropped_success`` and ``unchanged_failure`` warnings."""
    before = {t.id: t for t in old.tasks}
    after = {t.id: t for t in new.tasks}
    warnings = [
        Issue("dropped_success", tid, "succeeded before but the revised plan leaves it out")
        for tid in _succeeded(results)
        if tid in before and tid not in after
    ]
    for tid, r in results.items():
        if (
            r.status in (TaskStatus.FAILED, TaskStatus.DENIED)
            and tid in before
            and tid in after
            and same_call(before[tid], after[tid])
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
        self._system: str | None = None

    def messages(
        self,
        goal: str,
        plan: Plan,
        results: Mapping[str, TaskResult],
        *,
        feedback: str | None = None,
    ) -> list[Message]:
        """The conversation the first attempt sends."""
        if self._system is None:
            self._system = system_prompt(
                self.registry, agent_tasks=self.agent_tasks, replanning=True
            )
        text = replan_user_prompt(
            goal, plan, results, output_chars=self.output_chars, feedback=feedback
        )
        return [SystemMessage(self._system), UserMessage(text)]

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

        def check(new: Plan, graph: PlanGraph) -> list[Issue]:
            return replan_issues(plan, new, results)

        def warn(new: Plan, graph: PlanGraph) -> list[Issue]:
            return replan_warnings(plan, new, results)

        messages = self.messages(goal, plan, results, feedback=feedback)
        with telemetry.operation("plan planner", telemetry.PLANNING, role="planner"):
            result = await self.ask_for_plan(
                messages, goal=goal, check=check, warn=warn, what="revised plan"
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
        """A revised plan that keeps the successful tasks of ``plan`` unchanged (see the
        module docstring)."""
        return (await self.replan_with_report(goal, plan, results, feedback=feedback)).plan
