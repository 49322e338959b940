"""Sub-solves: a task (``"solve": true``) whose sub-goal is reached by a child solve with
plan → run → join rounds of its own, recorded as a child of its task, within its parent's
budget, nested at most MAX_SOLVE_DEPTH deep, resumed with its parent.

The model is a ScriptedLLM in OpenAI's wire format whose every answer is chosen from the
request (the goal it is about, and whether it asks for a plan or a decision): sub-solves of a
map run at once, so the order of their calls is not fixed; the script still has exactly as
many answers as calls are expected."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

import dagagent
from dagagent import Budget
from dagagent.errors import BudgetExceededError
from dagagent.events import InSubSolve, ModelCallStarted, RunStarted, TaskFinished
from dagagent.limits import MAX_SOLVE_DEPTH
from dagagent.llm import ModelSettings, ScriptedLLM
from dagagent.planners import PLAN_FORMAT_NAME, LLMPlanner, parse_plan_answer
from dagagent.results import SolveStatus, TaskStatus

pytestmark = pytest.mark.anyio

GOAL = "Find the best steel supplier in each region"
SUPPLIERS = {"EU": ["Acme", "Stahlwerk"], "US": ["Bolt", "Forge"], "JP": ["Kanto"]}


class World:
    """Counted tools: ``calls`` counts each (tool, argument) call."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.registry = dagagent.Registry()

        @self.registry.tool
        def list_regions() -> list[str]:
            """The regions we buy in."""
            self.calls["list_regions"] += 1
            return ["EU", "US"]

        @self.registry.tool
        def suppliers(region: str) -> list[str]:
            """The steel suppliers of a region, best first.

            Args:
                region: EU, US or JP.
            """
            self.calls[f"suppliers {region}"] += 1
            if region not in SUPPLIERS:
                raise LookupError(f"no suppliers known in {region!r}")
            return SUPPLIERS[region]

        @self.registry.tool
        async def survey(region: str) -> str:
            """A survey of a region's suppliers, which never ends (until cancelled).

            Args:
                region: The region.
            """
            self.calls[f"survey {region}"] += 1
            await anyio.sleep_forever()
            raise AssertionError("unreachable")


@pytest.fixture
def world() -> World:
    return World()


def _goal(body: dict[str, Any]) -> str:
    text = body["messages"][-1]["content"]
    found = re.search(r"^Goal: (.*)$", text, re.M)
    assert found, text
    return found.group(1).strip()


def _is_plan(body: dict[str, Any]) -> bool:
    return body.get("response_format", {}).get("json_schema", {}).get("name") == PLAN_FORMAT_NAME


def _region(goal: str) -> str:
    return goal.rsplit(" ", 1)[-1]


PARENT_PLAN = {
    "tasks": [
        {"id": "regions", "tool": "list_regions", "args": {}},
        {
            "id": "best",
            "for_each": "${regions}",
            "instruction": "Find the best steel supplier in ${@item}",
            "solve": True,
            "tools": ["suppliers"],
        },
    ]
}


def child_plan(region: str) -> dict[str, Any]:
    return {"tasks": [{"id": "s", "tool": "suppliers", "args": {"region": region}}]}


def finish(answer: Any, cites: list[str]) -> str:
    return json.dumps({"action": "finish", "answer": answer, "cites": cites})


class Router:
    """Answers each request from what it asks: the parent's plan and decision, each child's
    plan and decision. ``seen`` counts the (goal, kind) of every request."""

    def __init__(self, parent_plan: dict[str, Any] = PARENT_PLAN) -> None:
        self.parent_plan = parent_plan
        self.seen: Counter[tuple[str, str]] = Counter()
        self.prompts: dict[str, str] = {}  # goal -> the planner's system prompt

    def __call__(self, body: dict[str, Any]) -> str:
        goal = _goal(body)
        kind = "plan" if _is_plan(body) else "join"
        self.seen[(goal, kind)] += 1
        if kind == "plan":
            self.prompts[goal] = body["messages"][0]["content"]
            if goal == GOAL:
                return json.dumps(self.parent_plan)
            return json.dumps(child_plan(_region(goal)))
        if goal == GOAL:
            return finish("EU: Acme; US: Bolt", [])
        return finish(SUPPLIERS[_region(goal)][0], ["s"])


def scripted(router: Router, calls: int) -> ScriptedLLM:
    return ScriptedLLM.openai([router] * calls)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_sub_solve_in_a_map_is_a_child_solve_per_element(
    world: World, tmp_path: Path, stream: bool
) -> None:
    store = tmp_path / "runs.db"
    router = Router()
    events: list[Any] = []
    async with scripted(router, 6) as llm:  # parent plan + join, each child plan + join
        solution = await dagagent.solve(
            GOAL,
            world.registry,
            llm,
            sub_solves=True,
            store=store,
            stream=stream,
            listeners=[events.append],
        )
    assert solution.status is SolveStatus.ANSWERED, solution.reason
    assert router.seen == Counter(
        {
            (GOAL, "plan"): 1,
            (GOAL, "join"): 1,
            ("Find the best steel supplier in EU", "plan"): 1,
            ("Find the best steel supplier in EU", "join"): 1,
            ("Find the best steel supplier in US", "plan"): 1,
            ("Find the best steel supplier in US", "join"): 1,
        }
    )
    (rnd,) = solution.rounds
    assert rnd.result is not None
    best = rnd.result.tasks["best"]
    assert best.status is TaskStatus.SUCCEEDED
    assert best.output == ["Acme", "Bolt"]  # each element's child's answer, in order
    # the parent's listeners hear each child start and end, and each child's own events,
    # wrapped so that they say whose they are
    subs = [e for e in events if e.kind in ("subsolve.started", "subsolve.finished")]
    assert sorted((e.kind, e.element) for e in subs) == [
        ("subsolve.finished", 0),
        ("subsolve.finished", 1),
        ("subsolve.started", 0),
        ("subsolve.started", 1),
    ]
    assert all(e.solve_id == solution.solve_id and e.task_id == "best" for e in subs)
    own = [e for e in events if not isinstance(e, InSubSolve)]
    assert {getattr(e, "solve_id", solution.solve_id) for e in own} == {solution.solve_id}
    started = {e.child_id: e.element for e in subs if e.kind == "subsolve.started"}
    below = [e for e in events if isinstance(e, InSubSolve)]
    assert {e.child_id for e in below} == set(started)
    for e in below:
        assert (e.solve_id, e.task_id, e.depth) == (solution.solve_id, "best", 1)
        assert e.run_id == rnd.result.run_id and e.element == started[e.child_id]
        assert getattr(e.event, "solve_id", e.child_id) == e.child_id
    for child_id in started:
        inner = [e.event for e in below if e.child_id == child_id]
        kinds = [e.kind for e in inner]
        for kind in ("round.started", "run.started", "joiner.decided", "round.finished"):
            assert kinds.count(kind) == 1, (kind, kinds)
        assert [e.role for e in inner if isinstance(e, ModelCallStarted)] == ["planner", "joiner"]
        (done,) = [e.result for e in inner if isinstance(e, TaskFinished)]
        assert done.task_id == "s" and done.output in (["Acme", "Stahlwerk"], ["Bolt", "Forge"])
        # each child's events come in its own order: it started before its round's run
        assert kinds.index("round.started") < kinds.index("run.started")
    # the parent's own progress is not confused with a child's: its one run, its one round
    assert [e.run_id for e in own if isinstance(e, RunStarted)] == [rnd.result.run_id]
    assert world.calls == Counter({"list_regions": 1, "suppliers EU": 1, "suppliers US": 1})
    # the planner was told of sub-solves; so was the children's (depth 1 < MAX_SOLVE_DEPTH)
    assert '"solve": true' in router.prompts[GOAL]
    assert '"solve": true' in router.prompts["Find the best steel supplier in EU"]
    # what the children spent counts for the parent
    assert solution.usage.planner.calls == 1 and solution.usage.joiner.calls == 1
    assert solution.usage.sub_solves.calls == 4
    assert solution.usage.total.calls == 6
    assert "sub-solves 4" in solution.usage.summary()

    with dagagent.RunStore(store) as st:
        parent = st.get_solve(solution.solve_id)
        children = parent.children_of(rnd.result.run_id, "best")
        assert [(c.link.element, c.status, c.answer) for c in children] == [
            (0, SolveStatus.ANSWERED, "Acme"),
            (1, SolveStatus.ANSWERED, "Bolt"),
        ] or sorted((c.link.element, c.answer) for c in children) == [(0, "Acme"), (1, "Bolt")]
        for c in children:
            child = st.get_solve(c.solve_id)
            assert child.parent is not None and child.depth == 1
            assert child.parent.solve_id == solution.solve_id
            assert child.parent.run_id == rnd.result.run_id and child.parent.task_id == "best"
            assert (
                child.goal == f"Find the best steel supplier in {['EU', 'US'][c.link.element or 0]}"
            )
            assert child.status == "answered" and [r.outcome for r in child.rounds] == ["answered"]
            assert [call.role for call in child.calls] == ["planner", "joiner"]
            assert child.options is not None and child.options["tools"] == ["suppliers"]
        assert [call.role for call in parent.calls] == ["planner", "joiner"]
        assert parent.usage is not None and parent.usage["sub_solves"].calls == 4


async def test_a_when_condition_decides_whether_a_sub_solve_starts(
    world: World, tmp_path: Path
) -> None:
    plan = json.loads(json.dumps(PARENT_PLAN))
    plan["tasks"][1]["when"] = "${@item} != 'US'"
    router = Router(plan)
    async with scripted(router, 4) as llm:  # no child for US
        solution = await dagagent.solve(
            GOAL, world.registry, llm, sub_solves=True, store=tmp_path / "r.db", stream=False
        )
    assert solution.status is SolveStatus.ANSWERED, solution.reason
    best = solution.rounds[0].result.tasks["best"]  # type: ignore[union-attr]
    assert best.output == ["Acme", None]
    assert best.elements is not None and best.elements[1].skipped_by_condition
    assert ("Find the best steel supplier in US", "plan") not in router.seen


async def test_a_child_that_would_overspend_stops_and_the_parent_sees_why(
    world: World, tmp_path: Path
) -> None:
    """The parent may make 3 model calls, one kept for its joiner's last answer: after its
    planner's, 1 is left for the child, whose own reserve keeps it for its joiner: the child's
    planner is refused, the child ends budget_exhausted, its task fails saying so, and the
    parent's joiner reads why."""
    plan = {
        "tasks": [
            {
                "id": "best",
                "instruction": "Find the best steel supplier in EU",
                "solve": True,
            }
        ]
    }
    router = Router(plan)
    store = tmp_path / "runs.db"
    async with scripted(router, 2) as llm:  # the parent's planner and joiner only
        solution = await dagagent.solve(
            GOAL,
            world.registry,
            llm,
            sub_solves=True,
            store=store,
            stream=False,
            budget=Budget(model_calls=3),
        )
    assert router.seen == Counter({(GOAL, "plan"): 1, (GOAL, "join"): 1})
    best = solution.rounds[0].result.tasks["best"]  # type: ignore[union-attr]
    assert best.status is TaskStatus.FAILED and best.error_type == "SubSolveError"
    assert "ended budget_exhausted" in (best.error or "")
    assert "the planner's call was refused: the budget of 1 model call" in (best.error or "")
    join_text = llm.wire_requests[-1]["messages"][-1]["content"]
    assert "ended budget_exhausted" in join_text
    assert world.calls == Counter()
    with dagagent.RunStore(store) as st:
        (child,) = st.get_solve(solution.solve_id).children
        record = st.get_solve(child.solve_id)
    assert record.status == "budget_exhausted"
    assert record.options is not None and record.options["budget"]["model_calls"] == 1


async def test_a_sub_solve_that_cannot_start_fails_its_task_with_the_parents_budget(
    world: World,
) -> None:
    """Nothing left outside the parent's reserve: the child is not even started."""
    plan = {"tasks": [{"id": "best", "instruction": "Find the best in EU", "solve": True}]}
    router = Router(plan)
    async with scripted(router, 2) as llm:
        solution = await dagagent.solve(
            GOAL,
            world.registry,
            llm,
            sub_solves=True,
            stream=False,
            budget=Budget(model_calls=2),
        )
    best = solution.rounds[0].result.tasks["best"]  # type: ignore[union-attr]
    assert best.status is TaskStatus.FAILED
    assert (best.error or "").startswith("sub-solve of task 'best' did not start: ")
    assert "nothing left of its model calls" in (best.error or "")


def test_sub_solves_are_checked_by_depth(world: World) -> None:
    answer = json.dumps(PARENT_PLAN)
    graph, issues = parse_plan_answer(answer, world.registry, goal=GOAL, solve_depth=0)
    assert graph is not None and not issues
    graph, issues = parse_plan_answer(answer, world.registry, goal=GOAL)
    assert graph is None
    assert [(i.code, i.task_id) for i in issues] == [("sub_solve", "best")]
    assert "sub_solves=True" in issues[0].message
    graph, issues = parse_plan_answer(
        answer, world.registry, goal=GOAL, solve_depth=MAX_SOLVE_DEPTH
    )
    assert graph is None
    assert [(i.code, i.task_id) for i in issues] == [("sub_solve_too_deep", "best")]
    assert f"solves nest at most {MAX_SOLVE_DEPTH} deep" in issues[0].message
    # the prompt and the response format speak of sub-solves only where they may be planned
    deep = LLMPlanner(ScriptedLLM(), world.registry, solve_depth=MAX_SOLVE_DEPTH)
    top = LLMPlanner(ScriptedLLM(), world.registry, solve_depth=0)
    off = LLMPlanner(ScriptedLLM(), world.registry)
    assert '"solve": true' in top.system_prompt()
    assert '"solve": true' not in deep.system_prompt()
    assert '"solve": true' not in off.system_prompt()
    assert top.response_format is not None and '"solve"' in json.dumps(top.response_format.schema)
    assert off.response_format is not None and '"solve"' not in json.dumps(
        off.response_format.schema
    )


async def test_a_solve_at_the_deepest_level_is_told_no_sub_solve(world: World) -> None:
    """A plan past the depth limit is refused with the reason, fed back to the model, which
    plans without one."""
    deep = LLMPlanner(
        ScriptedLLM([json.dumps(PARENT_PLAN), json.dumps(child_plan("EU"))]),
        world.registry,
        solve_depth=MAX_SOLVE_DEPTH,
        structured=False,
    )
    async with deep.llm:  # type: ignore[attr-defined]
        result = await deep.plan_with_report("Find the best steel supplier in EU")
    assert [t.id for t in result.plan.tasks] == ["s"]
    (rejected, _) = result.attempts
    assert [i.code for i in rejected.issues] == ["sub_solve_too_deep"]


async def test_a_sub_solve_outside_a_solve_fails_its_task_clearly(world: World) -> None:
    result = await dagagent.execute(
        {"tasks": [{"id": "best", "instruction": "Find the best in EU", "solve": True}]},
        world.registry,
        llm=ScriptedLLM(),
    )
    best = result.tasks["best"]
    assert best.status is TaskStatus.FAILED
    assert "is a sub-solve ('solve': true): it runs only in a solve" in (best.error or "")


async def test_a_child_that_gives_up_fails_its_element_with_its_reason(
    world: World, tmp_path: Path
) -> None:
    """The US child's plan fails; its joiner asks for another round, whose plan is the same:
    the child gives up, and its element fails with the child's reason, for the parent's
    joiner to read; the EU child's answer stands."""
    router = Router()

    def route(body: dict[str, Any]) -> str:
        goal = _goal(body)
        if goal.endswith(" US"):
            kind = "plan" if _is_plan(body) else "join"
            router.seen[(goal, kind)] += 1
            if kind == "plan":
                return json.dumps(child_plan("Atlantis"))
            return json.dumps({"action": "replan", "feedback": "try again"})
        return router(body)

    async with ScriptedLLM.openai([route] * 7) as llm:
        solution = await dagagent.solve(
            GOAL, world.registry, llm, sub_solves=True, store=tmp_path / "r.db", stream=False
        )
    assert router.seen[("Find the best steel supplier in US", "plan")] == 2  # plan, replan
    best = solution.rounds[0].result.tasks["best"]  # type: ignore[union-attr]
    assert best.status is TaskStatus.FAILED and best.elements is not None
    eu, us = best.elements
    assert eu.status is TaskStatus.SUCCEEDED and eu.output == "Acme"
    assert us.status is TaskStatus.FAILED and us.error_type == "SubSolveError"
    assert "ended gave_up: round 2: the revised plan is the same" in (us.error or "")
    join_text = llm.wire_requests[-1]["messages"][-1]["content"]
    assert "ended gave_up" in join_text
    assert solution.status is SolveStatus.ANSWERED


@pytest.mark.asyncio_only("a deadline that passes in real time: once is enough")
async def test_a_sub_solves_timeout_is_its_deadline(world: World, tmp_path: Path) -> None:
    """The task's timeout_s is the child's deadline: the child's run is cancelled when it
    passes, the child ends timed_out with what it kept, and the parent's joiner reads why."""
    plan = {
        "tasks": [
            {
                "id": "best",
                "instruction": "Find the best steel supplier in EU",
                "solve": True,
                "timeout_s": 1.0,
            }
        ]
    }
    router = Router(plan)

    def route(body: dict[str, Any]) -> str:
        if _goal(body).endswith(" EU") and _is_plan(body):
            router.seen[(_goal(body), "plan")] += 1
            return json.dumps({"tasks": [{"id": "s", "tool": "survey", "args": {"region": "EU"}}]})
        return router(body)

    store = tmp_path / "runs.db"
    async with ScriptedLLM.openai([route] * 3) as llm:  # parent plan, child plan, parent join
        solution = await dagagent.solve(
            GOAL, world.registry, llm, sub_solves=True, store=store, stream=False
        )
    assert solution.status is SolveStatus.ANSWERED, solution.reason
    best = solution.rounds[0].result.tasks["best"]  # type: ignore[union-attr]
    assert best.status is TaskStatus.FAILED and best.error_type == "SubSolveError"
    assert "ended timed_out: the deadline passed in round 1 (1.0 s into the solve)" in (
        best.error or ""
    )
    assert "cancelled: task s of run" in (best.error or "")
    assert world.calls == Counter({"survey EU": 1})
    with dagagent.RunStore(store) as st:
        (child,) = st.get_solve(solution.solve_id).children
        assert st.get_solve(child.solve_id).status == "timed_out"


@pytest.mark.asyncio_only("a deadline that passes in real time: once is enough")
async def test_the_parents_deadline_bounds_its_sub_solves(world: World, tmp_path: Path) -> None:
    plan = {"tasks": [{"id": "best", "instruction": "Find the best in EU", "solve": True}]}
    router = Router(plan)

    def route(body: dict[str, Any]) -> str:
        if _goal(body).endswith(" EU") and _is_plan(body):
            router.seen[(_goal(body), "plan")] += 1
            return json.dumps({"tasks": [{"id": "s", "tool": "survey", "args": {"region": "EU"}}]})
        return router(body)

    store = tmp_path / "runs.db"
    async with ScriptedLLM.openai([route] * 2) as llm:  # parent plan, child plan
        solution = await dagagent.solve(
            GOAL, world.registry, llm, sub_solves=True, store=store, stream=False, deadline_s=1.0
        )
    assert solution.status is SolveStatus.TIMED_OUT, solution.reason
    assert "task best of run" in solution.reason
    with dagagent.RunStore(store) as st:
        (child,) = st.get_solve(solution.solve_id).children
        record = st.get_solve(child.solve_id)
    assert record.status in ("timed_out", "cancelled")
    assert record.options is not None and 0 < record.options["deadline_s"] <= 1.0


def test_sub_solves_running_at_once_share_what_their_parent_has_left() -> None:
    """Two children carve the same remainder; each call is held on the parent's ledger too,
    so together they cannot spend more than it: the parent refuses the call that would cross
    it though the child's own budget has room; a settled call counts on both, and in the
    parent's ``below``."""
    from dagagent.budget import Prices
    from dagagent.llm import LiveCall, LLMRequest, Usage
    from dagagent.workflows._spending import Spending

    parent = Spending(Budget(tokens=2000, reserve=0.5), Prices())  # 1,000 outside the reserve
    call = LiveCall.of(object(), LLMRequest.build("x" * 40, max_tokens=400))
    first, second = (Spending(parent.carve(), Prices(), parent=parent) for _ in range(2))
    assert first.budget is not None and first.budget.tokens == 1000
    held = first.reserve(call)  # ~420 tokens, on both ledgers
    assert parent.held_tokens == held.tokens == first.held_tokens
    second.reserve(call)  # the parent now holds two calls' worth, of its 1,000
    third = Spending(Budget(tokens=10_000), Prices(), parent=parent)  # room of its own
    with pytest.raises(BudgetExceededError) as by_parent:
        third.reserve(call)
    assert "(in a sub-solve)" in str(by_parent.value)  # the parent refused it
    assert third.held_tokens == 0 and third.low is None and parent.low is not None
    first.settle(held, Usage(input_tokens=10, output_tokens=20, calls=1), 0.0)
    assert first.tokens == parent.tokens == 30 and parent.model_calls == 1
    assert parent.below.calls == 1 and parent.below.total_tokens == 30
    assert parent.held_tokens == second.held_tokens  # only the second's call is held now


async def test_sub_solves_nest_down_to_the_deepest_level(world: World, tmp_path: Path) -> None:
    """A sub-solve's plan holds a sub-solve (depth 2), whose planner is told of none; every
    call below counts for the top solve; the records link each level to the one above."""
    top = {
        "tasks": [{"id": "eu", "instruction": "Find the best steel supplier in EU", "solve": True}]
    }
    middle = {"tasks": [{"id": "deep", "instruction": "Dig deeper into the market", "solve": True}]}
    seen: Counter[str] = Counter()
    prompts: dict[str, str] = {}

    def route(body: dict[str, Any]) -> str:
        goal, kind = _goal(body), "plan" if _is_plan(body) else "join"
        seen[f"{goal}/{kind}"] += 1
        if kind == "plan":
            prompts[goal] = body["messages"][0]["content"]
            if goal == GOAL:
                return json.dumps(top)
            if goal.endswith(" EU"):
                return json.dumps(middle)
            return json.dumps(child_plan("EU"))
        return finish({"Dig deeper into the market": "Acme (deep)"}.get(goal, "Acme"), [])

    store = tmp_path / "runs.db"
    events: list[Any] = []
    async with ScriptedLLM.openai([route] * 6) as llm:
        solution = await dagagent.solve(
            GOAL,
            world.registry,
            llm,
            sub_solves=True,
            store=store,
            stream=False,
            listeners=[events.append],
        )
    assert solution.status is SolveStatus.ANSWERED, solution.reason
    assert set(seen.values()) == {1} and len(seen) == 6
    # the grandchild's events reach the top once, wrapped once, saying they are its own
    below = [e for e in events if isinstance(e, InSubSolve)]
    assert not any(isinstance(e.event, InSubSolve) for e in below)
    by_depth = {e.depth: (e.child_id, e.task_id) for e in below}
    assert sorted(by_depth) == [1, 2] and by_depth[2][1] == "deep" and by_depth[1][1] == "eu"
    deep_rounds = [e for e in below if e.depth == 2 and e.event.kind == "round.started"]
    assert len(deep_rounds) == 1 and deep_rounds[0].event.goal == "Dig deeper into the market"
    assert [e.depth for e in events if e.kind == "subsolve.started"] == [1, 2]
    assert '"solve": true' in prompts["Find the best steel supplier in EU"]
    assert '"solve": true' not in prompts["Dig deeper into the market"]  # depth 2: none below it
    assert solution.usage.sub_solves.calls == 4  # the child's 2 and the grandchild's 2
    with dagagent.RunStore(store) as st:
        (child,) = st.get_solve(solution.solve_id).children
        middle_record = st.get_solve(child.solve_id)
        (grandchild,) = middle_record.children
        deepest = st.get_solve(grandchild.solve_id)
    assert middle_record.depth == 1 and deepest.depth == 2
    assert deepest.parent is not None and deepest.parent.solve_id == middle_record.solve_id
    assert middle_record.answer == "Acme" and deepest.answer == "Acme (deep)"
    assert middle_record.usage is not None and middle_record.usage["sub_solves"].calls == 2


async def test_agent_tasks_and_sub_solves_in_one_plan(world: World, tmp_path: Path) -> None:
    """With agent tasks allowed too, an agent task is the ReAct agent's, a sub-solve a
    child solve's."""
    plan = {
        "tasks": [
            {"id": "eu", "instruction": "Find the best steel supplier in EU", "solve": True},
            {"id": "note", "instruction": "Say why ${eu} is best", "tools": ["suppliers"]},
        ]
    }
    router = Router(plan)
    agent_turns: list[str] = []

    def route(body: dict[str, Any]) -> str:
        if "response_format" not in body:  # a turn of the ReAct agent
            agent_turns.append(body["messages"][-1]["content"])
            return "Acme is first in the list."
        return router(body)

    async with ScriptedLLM.openai([route] * 5) as llm:
        solution = await dagagent.solve(
            GOAL,
            world.registry,
            llm,
            sub_solves=True,
            agent_tasks=True,
            store=tmp_path / "r.db",
            stream=False,
        )
    assert solution.status is SolveStatus.ANSWERED, solution.reason
    tasks = solution.rounds[0].result.tasks  # type: ignore[union-attr]
    assert tasks["eu"].output == "Acme" and tasks["eu"].steps is None
    assert tasks["note"].output == "Acme is first in the list." and tasks["note"].steps
    assert len(agent_turns) == 1 and "Say why Acme is best" in agent_turns[0]
    assert solution.usage.agents.calls == 1 and solution.usage.sub_solves.calls == 2


def test_a_plan_diff_says_when_a_task_becomes_a_sub_solve() -> None:
    from dagagent.plan import Plan
    from dagagent.review import diff_plans

    agent = Plan.load({"tasks": [{"id": "x", "instruction": "Find the best in EU"}]})
    sub = Plan.load({"tasks": [{"id": "x", "instruction": "Find the best in EU", "solve": True}]})
    diff = diff_plans(agent, sub)
    assert [str(c) for c in diff.changed["x"]] == ["solve: false -> true"]
    assert agent.tasks[0].fingerprint("a") != sub.tasks[0].fingerprint("a")  # never reused
    assert sub.tasks[0].label == "sub-solve"


async def test_a_planner_of_ones_own_must_agree_on_sub_solves(world: World) -> None:
    from dagagent.errors import ConfigError

    mine = LLMPlanner(ScriptedLLM(), world.registry)
    with pytest.raises(ConfigError, match=r"build it with solve_depth=0"):
        await dagagent.solve(GOAL, world.registry, ScriptedLLM(), planner=mine, sub_solves=True)
    deep = LLMPlanner(ScriptedLLM(), world.registry, solve_depth=0)
    with pytest.raises(ConfigError, match=r"build it with solve_depth=None"):
        await dagagent.solve(GOAL, world.registry, ScriptedLLM(), planner=deep)


def test_a_tool_task_cannot_be_a_sub_solve(world: World) -> None:
    from dagagent.plan import read_plan

    plan, issues = read_plan(
        {"tasks": [{"id": "s", "tool": "suppliers", "args": {"region": "EU"}, "solve": True}]}
    )
    assert [(i.code, i.task_id) for i in issues] == [("tool_solve", "s")]
    assert plan.tasks[0].kind == "tool"  # read as the tool task it is, the stray key set aside
    assert "'solve' is for a task with an 'instruction'" in issues[0].message


async def test_a_planner_of_ones_own_plans_the_sub_solves_too(world: World) -> None:
    """The parent's prompt and settings go down; of its examples, only those a child could
    run (its task's tools) are shown to the child's planner."""
    bodies: dict[str, list[dict[str, Any]]] = {}
    router = Router()

    def route(body: dict[str, Any]) -> str:
        if _is_plan(body):
            bodies.setdefault(_goal(body), []).append(body)
        return router(body)

    examples = [
        {"goal": "Who sells steel in JP?", "plan": [child_plan("JP")["tasks"][0]]},
        {"goal": "Which regions do we buy in?", "plan": [PARENT_PLAN["tasks"][0]]},
    ]
    async with ScriptedLLM.openai([route] * 6) as llm:
        planner = LLMPlanner(
            llm,
            world.registry,
            system_prompt="You plan for the purchasing desk of ACME.\n\n{tools}",
            examples=examples,
            solve_depth=0,
            settings=ModelSettings(temperature=0.25),
        )
        solution = await dagagent.solve(
            GOAL, world.registry, llm, sub_solves=True, stream=False, planner=planner
        )
    assert solution.status is SolveStatus.ANSWERED, solution.reason
    (top,) = bodies[GOAL]
    (eu,) = bodies["Find the best steel supplier in EU"]
    for body in (top, eu):
        assert body["messages"][0]["content"].startswith("You plan for the purchasing desk")
    said = [m["content"] for m in eu["messages"][1:-1]]
    assert any("Who sells steel in JP?" in text for text in said)
    assert not any("Which regions do we buy in?" in text for text in said)  # not its tool
    assert "Which regions do we buy in?" in json.dumps(top["messages"])
    # the child's catalog is its task's tools; its planner keeps the parent's settings
    child_prompt = eu["messages"][0]["content"]
    assert "suppliers" in child_prompt and "list_regions" not in child_prompt
    assert top["temperature"] == eu["temperature"] == 0.25
