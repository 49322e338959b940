"""A solve whose round's run pauses (an ``ask`` rule's question left for a person) pauses
too; resume_solve continues it from its records in the store: the paused round's run goes on
with the decisions taken, then the joiner and the rounds after it, without planning the
paused round again."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import dagagent
from dagagent import Approval, DecisionError, Policy, Rule, ask_later
from dagagent.errors import StoreError
from dagagent.results import SolveStatus, TaskStatus

from .test_solve import (
    ATLANTIS,
    GOAL,
    PARIS,
    TOKYO,
    WARMER,
    World,
    finish,
    openai,
    plan,
    replan,
    weather,
)

pytestmark = pytest.mark.anyio


def _policy() -> Policy:
    """Asks a person about every weather look-up of Tokyo."""
    return Policy(
        [Rule(tool="get_weather", args={"city": "Tokyo"}, action="ask", name="tokyo")],
        ask=ask_later,
    )


@pytest.fixture
def world() -> World:
    return World()


@pytest.mark.parametrize("stream", [False, True])
async def test_a_paused_round_pauses_the_solve_which_resumes_from_the_store(
    world: World, tmp_path: Path, stream: bool
) -> None:
    store = tmp_path / "runs.db"
    llm = openai(plan(PARIS, TOKYO, WARMER))  # the plan; the joiner is not asked yet
    async with llm:
        paused = await dagagent.solve(
            GOAL, world.registry, llm, policy=_policy(), store=store, stream=stream
        )
    assert paused.status is SolveStatus.PAUSED and not paused.ok
    assert paused.reason.startswith(f"round 1: run {paused.run_id} paused: 1 task waits")
    (rnd,) = paused.rounds
    assert rnd.outcome == "paused" and rnd.result is not None
    assert rnd.result.tasks["tokyo"].status is TaskStatus.WAITING
    assert world.calls == Counter({"get_weather Paris": 1})
    assert llm.calls == 1  # the planner only
    with dagagent.RunStore(store) as st:
        record = st.get_solve(paused.solve_id)
        assert st.get_run(paused.run_id or "").status.value == "paused"
    assert record.status == "paused" and record.run_id == paused.run_id
    assert [(r.round, r.outcome) for r in record.rounds] == [(1, "paused")]

    # later, in another process perhaps: a decision, then the resume
    later = openai(finish("Tokyo is warmer.", ["cmp"]))  # the joiner, nothing else
    async with later:
        solution = await dagagent.resume_solve(
            paused.solve_id,
            world.registry,
            later,
            store=store,
            policy=_policy(),
            decisions={"tokyo": Approval.approve("fine", by="ann")},
        )
    assert solution.status is SolveStatus.ANSWERED, solution.reason
    assert solution.answer == "Tokyo is warmer." and solution.cites == ["cmp"]
    assert solution.solve_id == paused.solve_id and solution.run_id == paused.run_id
    assert later.calls == 1  # the joiner; the paused round was not planned again
    # every tool ran once over the whole solve: Paris was not looked up again
    assert world.calls == Counter({"get_weather Paris": 1, "get_weather Tokyo": 1, "warmer": 1})
    assert solution.usage.planner.calls == 1 and solution.usage.joiner.calls == 1
    with dagagent.RunStore(store) as st:
        record = st.get_solve(paused.solve_id)
        run = st.get_run(paused.run_id or "")
        history = st.approval_history(paused.run_id or "")
    assert record.status == "answered" and record.answer == "Tokyo is warmer."
    assert [(r.round, r.run_id, r.outcome) for r in record.rounds] == [
        (1, paused.run_id, "answered")
    ]
    assert record.usage is not None and record.usage["planner"].calls == 1
    # every model call of both processes, each once: the planner's before the pause, the
    # joiner's after it, in the order they started
    assert [(c.round, c.role) for c in record.calls] == [(1, "planner"), (1, "joiner")]
    assert record.calls == solution.calls
    assert run.status.value == "succeeded"
    assert [(a.task_id, a.decision, a.decided_by, a.state) for a in history] == [
        ("tokyo", "allow", "ann", "used")
    ]

    # nothing is left to resume: a second resume is refused and runs nothing
    with pytest.raises(DecisionError, match="is answered, not paused"):
        await dagagent.resume_solve(paused.solve_id, world.registry, later, store=store)
    assert world.calls["get_weather Tokyo"] == 1


async def test_a_solve_paused_in_a_later_round_resumes_with_its_earlier_rounds(
    world: World, tmp_path: Path
) -> None:
    """Round 1 fails on Atlantis, the joiner asks for Tokyo, round 2 waits for a person on
    Tokyo: the resume rebuilds round 1 from the store, continues round 2's run (Paris stays
    reused) and lets the joiner answer, with a round 3 still possible."""
    store = tmp_path / "runs.db"
    fixed = weather("tokyo2", "Tokyo")
    cmp2 = {"id": "cmp2", "tool": "warmer", "args": {"a": "${paris}", "b": "${tokyo2}"}}
    llm = openai(plan(PARIS, ATLANTIS, WARMER), replan("look up Tokyo"), plan(PARIS, fixed, cmp2))
    async with llm:
        paused = await dagagent.solve(
            GOAL, world.registry, llm, policy=_policy(), store=store, stream=False, max_rounds=3
        )
    assert paused.status is SolveStatus.PAUSED, paused.reason
    assert [r.outcome for r in paused.rounds] == ["replan", "paused"]
    second_run = paused.run_id
    with dagagent.RunStore(store) as st:
        st.decide(second_run or "", "tokyo2", "allow", by="bob")

    # the solve is found by its paused run too; the joiner first asks for one more round
    later = openai(
        replan("also say by how much"),
        plan(
            PARIS,
            fixed,
            cmp2,
            {"id": "by", "tool": "warmer", "args": {"a": "${tokyo2}", "b": "${paris}"}},
        ),
        finish("Tokyo, by 6.5 C", ["cmp2"]),
    )
    async with later:
        solution = await dagagent.resume_solve(
            second_run or "", world.registry, later, store=store, policy=_policy()
        )
    assert solution.status is SolveStatus.ANSWERED, solution.reason
    first, second, third = solution.rounds
    assert (first.outcome, second.outcome, third.outcome) == ("replan", "replan", "answered")
    # round 1 rebuilt from the store: its plan, its run's results, the joiner's decision
    assert first.decision is not None and first.decision.feedback == "look up Tokyo"
    assert first.result is not None and first.result.tasks["tokyo"].status is TaskStatus.FAILED
    assert second.result is not None and second.result.run_id == second_run
    assert second.result.tasks["paris"].status is TaskStatus.REUSED
    assert third.result is not None and third.result.parent_id == second_run
    # the model: the joiner for round 2, the replanner and the joiner for round 3
    assert later.calls == 3
    assert world.calls == Counter(
        {"get_weather Paris": 1, "get_weather Atlantis": 1, "get_weather Tokyo": 1, "warmer": 2}
    )
    assert solution.usage.planner.calls == 3 and solution.usage.joiner.calls == 3
    with dagagent.RunStore(store) as st:
        record = st.get_solve(paused.solve_id)
    assert [(r.round, r.outcome) for r in record.rounds] == [
        (1, "replan"),
        (2, "replan"),
        (3, "answered"),
    ]


async def test_an_undecided_call_pauses_the_solve_again(world: World, tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    async with openai(plan(PARIS, TOKYO, WARMER)) as llm:
        paused = await dagagent.solve(
            GOAL, world.registry, llm, policy=_policy(), store=store, stream=False
        )
    async with openai() as later:  # nobody decided: the model is not asked
        again = await dagagent.resume_solve(
            paused.solve_id, world.registry, later, store=store, policy=_policy()
        )
    assert again.status is SolveStatus.PAUSED and again.run_id == paused.run_id
    assert world.calls == Counter({"get_weather Paris": 1})
    with dagagent.RunStore(store) as st:
        assert st.get_solve(paused.solve_id).status == "paused"
        (asked,) = st.approvals(paused.run_id)
    assert (asked.task_id, asked.state) == ("tokyo", "waiting")


async def test_what_cannot_be_resumed_is_refused(world: World, tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    async with openai(plan(PARIS), finish("20 C", ["paris"])) as llm:
        answered = await dagagent.solve(GOAL, world.registry, llm, store=store, stream=False)
    run = await dagagent.execute({"tasks": [PARIS]}, world.registry, store=store)
    async with openai() as later:
        with pytest.raises(DecisionError, match="is answered, not paused"):
            await dagagent.resume_solve(answered.run_id or "", world.registry, later, store=store)
        with pytest.raises(StoreError, match="is not a round of a solve"):
            await dagagent.resume_solve(run.run_id, world.registry, later, store=store)
        with pytest.raises(StoreError, match="no run 0123456789ab"):
            await dagagent.resume_solve("0123456789ab", world.registry, later, store=store)


async def test_two_resumes_of_one_solve_cannot_both_go_on(world: World, tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    async with openai(plan(PARIS, TOKYO, WARMER)) as llm:
        paused = await dagagent.solve(
            GOAL, world.registry, llm, policy=_policy(), store=store, stream=False
        )
    with dagagent.RunStore(store) as one, dagagent.RunStore(store) as two:
        one.claim_solve(paused.solve_id)  # the first resume holds it
        with pytest.raises(DecisionError, match=r"is running .* not paused"):
            two.claim_solve(paused.solve_id)
        async with openai() as later:
            with pytest.raises(DecisionError, match="is running"):
                await dagagent.resume_solve(paused.solve_id, world.registry, later, store=two)
        one.release_solve(paused.solve_id)  # it stopped before its run went on
        assert two.get_solve(paused.solve_id).status == "paused"
    assert world.calls == Counter({"get_weather Paris": 1})


async def test_an_agent_task_that_waits_pauses_the_solve_and_continues_its_steps(
    tmp_path: Path,
) -> None:
    """An agent task's call waits: the solve pauses; on resume the agent makes the approved
    call and goes on from its recorded steps (the model is not asked for its first turn
    again), then the joiner answers."""
    import json

    from dagagent.llm import LLMResponse, ScriptedLLM, ToolCall

    calls: list[str] = []
    registry = dagagent.Registry()

    @registry.tool
    def fetch(city: str) -> dict[str, Any]:
        """Fetch a city's weather."""
        calls.append(f"fetch {city}")
        return {"city": city, "temp_c": 18}

    @registry.tool(side_effects=True)
    def send(to: str) -> str:
        """Send a message."""
        calls.append(f"send {to}")
        return f"sent to {to}"

    def policy() -> Policy:
        return Policy([Rule(tool="send", action="ask")], ask=ask_later)

    store = tmp_path / "runs.db"
    agent_plan = {"tasks": [{"id": "note", "instruction": "tell ann", "tools": ["fetch", "send"]}]}
    turn = LLMResponse(
        content="",
        tool_calls=[
            ToolCall(id="c1", name="fetch", arguments={"city": "Paris"}),
            ToolCall(id="c2", name="send", arguments={"to": "ann"}),
        ],
    )
    async with ScriptedLLM([json.dumps(agent_plan), turn]) as llm:
        paused = await dagagent.solve(
            "tell ann", registry, llm, agent_tasks=True, policy=policy(), store=store, stream=False
        )
    assert paused.status is SolveStatus.PAUSED and calls == ["fetch Paris"]
    finish_ = json.dumps({"action": "finish", "answer": "told ann", "cites": ["note"]})
    async with ScriptedLLM([LLMResponse(content="I told ann."), finish_]) as later:
        solution = await dagagent.resume_solve(
            paused.solve_id,
            registry,
            later,
            store=store,
            policy=policy(),
            decisions={"note": Approval.approve(by="ann")},
        )
        assert later.calls == 2  # the agent's next turn and the joiner
    assert solution.status is SolveStatus.ANSWERED and solution.answer == "told ann"
    assert calls == ["fetch Paris", "send ann"]  # the fetch that returned was not made again
    assert solution.usage.agents.calls == 2 and solution.usage.planner.calls == 1


async def test_a_resumed_solve_prices_its_calls_as_told(world: World, tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    prices = tmp_path / "prices.json"
    prices.write_text('{"*": {"input": 1.0, "output": 2.0}}')
    llm = openai(plan(PARIS, TOKYO, WARMER))
    async with llm:
        paused = await dagagent.solve(
            GOAL, world.registry, llm, policy=_policy(), store=store, stream=False, prices=prices
        )
    assert paused.status is SolveStatus.PAUSED
    later = openai(finish("Tokyo is warmer.", ["cmp"]))
    async with later:
        solution = await dagagent.resume_solve(
            paused.solve_id,
            world.registry,
            later,
            store=store,
            policy=_policy(),
            decisions={"tokyo": Approval.approve("fine", by="ann")},
            prices=prices,  # a file, as solve takes it
        )
    assert solution.status is SolveStatus.ANSWERED, solution.reason
    planner, joiner = solution.calls
    assert planner.cost_usd is not None and joiner.role == "joiner"
    expected = (joiner.input_tokens * 1.0 + joiner.output_tokens * 2.0) / 1_000_000
    assert joiner.cost_usd == pytest.approx(expected) and joiner.cost_usd > 0
    assert solution.usage.total.cost_usd == pytest.approx(planner.cost_usd + joiner.cost_usd)
    with dagagent.RunStore(store) as st:
        assert [c.cost_usd for c in st.get_solve(paused.solve_id).calls] == [
            planner.cost_usd,
            joiner.cost_usd,
        ]
