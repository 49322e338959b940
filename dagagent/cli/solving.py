"""What a solve asked from the command line is set up with, for ``ask`` and ``chat`` alike:
the model, the budget and its prices, the tools, the approval rules and the interceptors they
make, and a planner of the user's own. Options are checked here, before anything runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .options import BudgetOptions, ModelChoice, discovery_of, make_planner
from .rules import ApprovalRules

if TYPE_CHECKING:
    from ..approval import Policy
    from ..budget import Budget, Prices
    from ..planners import LLMPlanner
    from ..tools import Registry, ToolDiscovery


@dataclass
class SolveSetup:
    """The parts of a solve the command's options give."""

    choice: ModelChoice
    llm: Any  # a client of dagagent.llm, opened with "async with"
    registry: Registry
    rules: ApprovalRules
    #: The first interceptor when it is a policy: solve takes it as its policy (streamed
    #: planning holds back the tasks it may ask about or deny until the plan is whole).
    policy: Policy | None
    interceptors: list[Any]
    planner: LLMPlanner | None
    budget: Budget | None
    prices: Prices | None


def solve_setup(
    choice: ModelChoice,
    spending: BudgetOptions,
    *,
    approve: bool,
    tools: str | None,
    mcp: list[str] | None,
    skills: Path | None,
    policy_file: Path | None,
    ask: list[str] | None,
    no_wait: bool,
    planner_prompt: Path | None,
    examples: Path | None,
    agent_tasks: bool,
    max_attempts: int,
    structured: bool,
    sub_solves: bool,
    max_tools: int,
) -> SolveSetup:
    """Check the options and build what a solve (or each turn of a conversation) uses."""
    from ..approval import Policy
    from .approve import run_interceptors, stdin_is_terminal
    from .tools import load_tools

    choice.require()
    budget, prices = spending.budget(), spending.prices()
    if approve and not stdin_is_terminal():
        raise ConfigError(
            "--approve needs a terminal to ask on, but stdin is not a terminal "
            "(run without --approve, or from a terminal)"
        )
    registry = load_tools(tools, mcp, skills)
    rules = ApprovalRules.given(policy_file, ask or ())
    policies = run_interceptors(None, registry, approve=False, rules=rules, no_wait=no_wait)
    first = policies[0] if policies and isinstance(policies[0], Policy) else None
    llm = choice.client()
    planner = own_planner(
        llm,
        registry,
        choice,
        planner_prompt=planner_prompt,
        examples=examples,
        agent_tasks=agent_tasks,
        max_attempts=max_attempts,
        structured=structured,
        sub_solves=sub_solves,
        discovery=discovery_of(max_tools),
    )
    return SolveSetup(
        choice=choice,
        llm=llm,
        registry=registry,
        rules=rules,
        policy=first,
        interceptors=list(policies[1:] if first is not None else policies),
        planner=planner,
        budget=budget,
        prices=prices,
    )


#: The keys of a solve's runs' context that record a planner of one's own.
PLANNER_KEYS = ("planner_prompt", "examples")


def planner_context(planner_prompt: Path | None, examples: Path | None) -> dict[str, str]:
    """What a solve's runs record of ``--planner-prompt`` and ``--examples`` (each file's
    absolute path), so that ``dagagent resume`` plans with them again."""
    given = {"planner_prompt": planner_prompt, "examples": examples}
    return {k: str(Path(v).resolve()) for k, v in given.items() if v is not None}


def own_planner(
    llm: Any,
    registry: Registry,
    choice: ModelChoice,
    *,
    planner_prompt: Path | None,
    examples: Path | None,
    agent_tasks: bool,
    max_attempts: int,
    structured: bool,
    sub_solves: bool,
    discovery: ToolDiscovery,
) -> LLMPlanner | None:
    """The planner of one's own that ``--planner-prompt`` and ``--examples`` make, for a
    solve with these options; ``None`` without either (the solve's built-in planner)."""
    if planner_prompt is None and examples is None:
        return None
    return make_planner(
        llm,
        registry,
        settings=choice.settings(),
        prompt_file=planner_prompt,
        examples_file=examples,
        agent_tasks=agent_tasks,
        max_attempts=max_attempts,
        structured=structured,
        solve_depth=0 if sub_solves else None,
        discovery=discovery,
    )
