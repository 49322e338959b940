"""What a run on Temporal tells its workflow about limits, without a server: which limits
each task's calls count on (the workflow counts them, see ``RunWorkflow._counted``), and
that a limit of the run's approval rules counts the tools its worker-side
:class:`~dagagent.approval.Limit` counts."""

from __future__ import annotations

from typing import Any

import pytest

import dagagent
from dagagent.approval import Limit
from dagagent.plan import AgentTask, ToolTask

pytest.importorskip("temporalio")

from dagagent.executors.temporal._executor import _limit_keys, _limits_tool

registry = dagagent.Registry()


@registry.tool(max_calls=2)
def send_mail(to: str) -> str:
    """Send a mail."""
    return to


@registry.tool(side_effects=True)
def send_money(to: str) -> str:
    """Send money."""
    return to


@registry.tool
def read_page(url: str) -> str:
    """Read a page."""
    return url


LIMITS: list[dict[str, Any]] = [
    {"tool": "send_*", "max_calls": 3},
    {"tool": ["read_*", "send_money"], "cooldown_s": 5},
    {"tool": "*", "side_effects": True, "max_calls": 1},
    {"tool": "*", "side_effects": False, "max_calls": 9},
    {"max_calls": 4},
    {"tool": "nothing_here", "max_calls": 1},
]


@pytest.mark.parametrize("spec", LIMITS, ids=str)
def test_a_limit_counts_the_tools_its_policy_counts_on_the_workers(spec: dict[str, Any]) -> None:
    limit = Limit(**spec)
    for tool in registry:
        assert _limits_tool(spec, tool) is limit.matches(tool), tool.name


def test_each_task_counts_on_its_tools_own_limits_and_the_runs() -> None:
    mail = ToolTask(id="m", tool="send_mail", args={"to": "x"})
    money = ToolTask(id="p", tool="send_money", args={"to": "x"})
    page = ToolTask(id="r", tool="read_page", args={"url": "x"})
    assert _limit_keys(registry, mail, LIMITS) == [
        "limit:1",
        "limit:4",
        "limit:5",
        "tool:send_mail",
    ]
    assert _limit_keys(registry, money, LIMITS) == ["limit:1", "limit:2", "limit:3", "limit:5"]
    assert _limit_keys(registry, page, []) == []  # nothing limits it: it runs as before
    # an agent task counts on the limits of every tool it may call
    agent = AgentTask(id="a", instruction="look", tools=["read_page", "send_mail"])
    assert _limit_keys(registry, agent, LIMITS[:2]) == ["limit:1", "limit:2", "tool:send_mail"]
    anything = AgentTask(id="b", instruction="anything")
    assert _limit_keys(registry, anything, []) == ["tool:send_mail"]
