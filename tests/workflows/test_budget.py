"""A solve's budget: every model call reserves its worst case first and is refused when it
could cross the budget; when the budget runs low the joiner answers once, within the reserve
kept for it, from what the solve has; otherwise the solve ends ``budget_exhausted`` with
every result kept. Tool calls past the budget are denied. Costs come from a price table, and
a cost budget needs the model's price."""

from __future__ import annotations

import json
from typing import Any

import pytest

import dagagent
from dagagent import Budget, Price, Prices
from dagagent.errors import BudgetExceededError, ConfigError
from dagagent.llm import LLMResponse, ScriptedLLM
from dagagent.results import SolveStatus, TaskStatus
from dagagent.workflows._spending import Spending

from .test_solve import GOAL, PARIS, TOKYO, World, finish, plan, replan

pytestmark = pytest.mark.anyio

FREE = Prices({"scripted": Price(input=1.0, output=2.0)}, defaults=False)  # $ per million


@pytest.fixture
def world() -> World:
    return World()


async def test_the_joiner_answers_within_its_reserve_when_the_calls_run_out(world: World) -> None:
    async with ScriptedLLM(
        [
            plan(PARIS),
            replan("compare with Tokyo"),
            finish("Paris is 18 C; Tokyo unknown", ["paris"]),
        ]
    ) as llm:
        solution = await dagagent.solve(
            GOAL, world.registry, llm, budget=Budget(model_calls=3), stream=False
        )
    assert solution.status is SolveStatus.ANSWERED
    assert solution.answer == "Paris is 18 C; Tokyo unknown"
    assert "budget ran low" in solution.reason and "model calls" in solution.reason
    roles = [(c.role, c.status) for c in solution.calls]
    assert roles == [
        ("planner", "answered"),
        ("joiner", "answered"),
        ("replanner", "refused"),  # one call kept for the joiner's last answer
        ("joiner", "answered"),
    ]
    assert solution.usage.total.calls == 3  # a refused call was never made
    # the last round (2) had no run: the answer came from round 1's results
    assert solution.rounds[-1].outcome == "answered"


async def test_a_budget_too_small_for_anything_ends_the_solve_at_once(world: World) -> None:
    async with ScriptedLLM([]) as llm:
        solution = await dagagent.solve(GOAL, world.registry, llm, budget=Budget(tokens=500))
    assert solution.status is SolveStatus.BUDGET_EXHAUSTED
    assert "the planner's call was refused" in solution.reason
    assert "500 tokens" in solution.reason
    (refused,) = solution.calls
    assert refused.status == "refused" and refused.usage.calls == 0
    assert solution.usage.total.total_tokens == 0
    with pytest.raises(dagagent.SolveError, match="budget"):
        solution.raise_for_status()


async def test_tool_calls_past_the_budget_are_denied(world: World) -> None:
    async with ScriptedLLM(
        [plan(PARIS, TOKYO), finish("Only Paris is known: 18 C", ["paris"])]
    ) as llm:
        solution = await dagagent.solve(
            GOAL,
            world.registry,
            llm,
            budget=Budget(tool_calls=1),
            settings=dagagent.RunSettings(on_failure="continue", max_concurrency=1),
        )
    assert solution.status is SolveStatus.ANSWERED
    result = solution.rounds[0].result
    assert result is not None
    statuses = sorted(r.status.value for r in result.tasks.values())
    assert statuses == ["denied", "succeeded"]
    denied = next(r for r in result.tasks.values() if r.status is TaskStatus.DENIED)
    assert denied.error is not None and "budget of 1 tool call" in denied.error
    assert denied.decisions and denied.decisions[0].decided_by == "budget"
    assert sum(world.calls.values()) == 1


async def test_an_agent_call_refused_fails_its_task_and_the_joiner_answers(world: World) -> None:
    note = {"id": "note", "instruction": "Say how warm Paris is: ${paris}"}
    async with ScriptedLLM([plan(PARIS, note), finish("Paris: 18 C", ["paris"])]) as llm:
        solution = await dagagent.solve(
            GOAL,
            world.registry,
            llm,
            agent_tasks=True,
            budget=Budget(model_calls=2),  # the planner; the agent refused (1 kept); the joiner
        )
    assert solution.status is SolveStatus.ANSWERED
    result = solution.rounds[0].result
    assert result is not None and result.tasks["note"].status is TaskStatus.FAILED
    assert "refused" in (result.tasks["note"].error or "")
    assert [c.role for c in solution.calls if c.status == "refused"] == ["agent"]


async def test_a_cost_budget_needs_the_price_of_the_model(world: World) -> None:
    with pytest.raises(ConfigError, match="price"):
        await dagagent.solve(GOAL, world.registry, ScriptedLLM([]), budget=Budget(cost_usd=1))


async def test_costs_come_from_the_price_table(world: World) -> None:
    usage = dagagent.llm.Usage(input_tokens=1000, output_tokens=100)
    async with ScriptedLLM(
        [
            LLMResponse(content=plan(PARIS), usage=usage, finish_reason="stop"),
            LLMResponse(content=finish("18 C", ["paris"]), usage=usage, finish_reason="stop"),
        ]
    ) as llm:
        solution = await dagagent.solve(
            GOAL, world.registry, llm, prices=FREE, budget=Budget(cost_usd=0.05)
        )
    assert solution.ok
    cost = (1000 * 1.0 + 100 * 2.0) / 1_000_000
    assert [c.cost_usd for c in solution.calls] == [pytest.approx(cost)] * 2
    assert solution.usage.total.cost_usd == pytest.approx(2 * cost)
    assert solution.usage.planner.cost_usd == pytest.approx(cost)


async def test_a_prices_file_extends_the_table(tmp_path: Any, world: World) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"scripted": {"input": 3, "output": 6}}))
    async with ScriptedLLM([plan(PARIS), finish("18 C", ["paris"])]) as llm:
        solution = await dagagent.solve(GOAL, world.registry, llm, prices=path)
    assert all(c.cost_usd is not None and c.cost_usd > 0 for c in solution.calls)
    assert solution.usage.total.cost_usd is not None


async def test_a_call_without_an_output_limit_is_cut_where_the_budget_ends(world: World) -> None:
    endless = "word " * 40_000  # far past what is left
    async with ScriptedLLM([plan(PARIS), endless, finish("18 C", ["paris"])], chunk_size=64) as llm:
        solution = await dagagent.solve(
            GOAL, world.registry, llm, budget=Budget(tokens=40_000), stream=False
        )
    joiner = [c for c in solution.calls if c.role == "joiner"]
    assert joiner[0].status == "cut" and "past the" in (joiner[0].error or "")
    assert solution.status is SolveStatus.ANSWERED  # the last answer, within the reserve
    # within the budget, give or take the last piece the cut call wrote (16 tokens)
    assert solution.usage.total.total_tokens <= 40_000 + 16


def test_the_ledger_holds_calls_in_flight_and_refuses_what_could_cross() -> None:
    from dagagent.llm import LiveCall, LLMRequest

    spending = Spending(Budget(tokens=1000, reserve=0.0), Prices())
    call = LiveCall.of(object(), LLMRequest.build("x" * 40, max_tokens=400))
    held = [spending.reserve(call), spending.reserve(call)]
    with pytest.raises(BudgetExceededError) as refused:
        spending.reserve(call)
    assert refused.value.what == "tokens" and spending.low is not None
    assert spending.held_tokens == sum(h.tokens for h in held)
    spending.settle(held[0], dagagent.llm.Usage(input_tokens=10, output_tokens=20, calls=1), None)
    assert spending.tokens == 30 and spending.model_calls == 1
    spending.reserve(call)  # room again


def test_budgets_and_prices_refuse_bad_values(tmp_path: Any) -> None:
    with pytest.raises(ValueError):
        Budget(tokens=0)
    with pytest.raises(ValueError):
        Budget(reserve=1.0)
    bad = tmp_path / "bad.json"
    bad.write_text('{"m": {"input": -1, "output": 1}}')
    with pytest.raises(ConfigError, match="per million"):
        Prices.load(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        Prices.load(tmp_path / "missing.json")
    assert Prices().price("gpt-4o-mini-2024-07-18", "openai") is not None
    assert Prices().price("llama3.1", "openai") is None
    assert Budget(tokens=10, cost_usd=0.5).describe() == "10 tokens, $0.5"
