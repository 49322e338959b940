"""dagagent.solve: plan → run → join rounds, replanning with reuse, forced finish, giving
up, healing the joiner, usage accounting, events and the replan workflow as a library.

The model is a ScriptedLLM in the providers' wire formats (real OpenAI / Anthropic client
code over an httpx.MockTransport); every body carries 10 input and 5 output tokens."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

import dagagent
from dagagent.events import JoinerDecided, RoundFinished, RoundStarted
from dagagent.llm import HTTPRetryPolicy, ModelSettings, ScriptedLLM, Usage, wire
from dagagent.planners import PLAN_FORMAT_NAME
from dagagent.results import SolveStatus, TaskStatus
from dagagent.settings import RunSettings
from dagagent.workflows import record_of, replan_run, revise_run

pytestmark = pytest.mark.anyio

GOAL = "Which is warmer, Paris or Tokyo?"
WEATHER = {"paris": 18.0, "tokyo": 24.5, "london": 14.0}


class World:
    """Counted weather tools: ``calls`` counts each (tool, city) call."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.registry = dagagent.Registry()

        @self.registry.tool
        def get_weather(city: str) -> dict[str, Any]:
            """Current temperature of a city (Paris, Tokyo, London).

            Args:
                city: City name.
            """
            self.calls[f"get_weather {city}"] += 1
            try:
                return {"city": city, "temp_c": WEATHER[city.lower()]}
            except KeyError:
                raise LookupError(f"no weather for {city!r}") from None

        @self.registry.tool
        def warmer(a: dict[str, Any], b: dict[str, Any]) -> str:
            """The warmer of two cities.

            Args:
                a: Weather of the first city.
                b: Weather of the second city.
            """
            self.calls["warmer"] += 1
            return a["city"] if a["temp_c"] >= b["temp_c"] else b["city"]


@pytest.fixture
def world() -> World:
    return World()


def plan(*tasks: dict[str, Any]) -> str:
    return json.dumps({"goal": GOAL, "tasks": list(tasks)})


def weather(tid: str, city: str) -> dict[str, Any]:
    return {"id": tid, "tool": "get_weather", "args": {"city": city}}


PARIS, TOKYO = weather("paris", "Paris"), weather("tokyo", "Tokyo")
ATLANTIS = weather("tokyo", "Atlantis")  # a wrong city under the id tokyo: it fails
WARMER = {"id": "cmp", "tool": "warmer", "args": {"a": "${paris}", "b": "${tokyo}"}}


def finish(answer: Any, cites: list[str]) -> str:
    return json.dumps({"action": "finish", "answer": answer, "cites": cites})


def replan(feedback: str) -> str:
    return json.dumps({"action": "replan", "feedback": feedback})


def openai(*answers: str) -> ScriptedLLM:
    return ScriptedLLM.openai([wire.openai_text(a) for a in answers])


async def test_finish_on_round_one(world: World):
    llm = openai(plan(PARIS, TOKYO, WARMER), finish("Tokyo is warmer (24.5 C).", ["cmp", "tokyo"]))
    events: list[Any] = []
    async with llm:
        solution = await dagagent.solve(
            GOAL, world.registry, llm, stream=False, listeners=[events.append]
        )
    assert solution.status is SolveStatus.ANSWERED and solution.ok
    assert solution.answer == "Tokyo is warmer (24.5 C)."
    assert solution.cites == ["cmp", "tokyo"]
    (rnd,) = solution.rounds
    assert rnd.result is not None and rnd.result.ok and rnd.outcome == "answered"
    assert rnd.decision is not None and rnd.decision.finished
    assert solution.run_id == rnd.result.run_id
    assert solution.usage.planner.calls == 1 and solution.usage.joiner.calls == 1
    assert solution.usage.agents.calls == 0
    assert solution.usage.total.input_tokens == 20
    # The scripted bodies report 5 output tokens for answers hundreds of characters long, which
    # no tokenizer gives: not believed, estimated from the characters instead.
    assert solution.usage.total.estimated and solution.usage.total.output_tokens > 10
    assert solution.raise_for_status() is solution
    # the joiner saw the goal, the plan and the outputs
    join_request = llm.wire_requests[1]
    assert join_request["response_format"]["json_schema"]["name"] == "join_decision"
    text = join_request["messages"][-1]["content"]
    assert f"Goal: {GOAL}" in text and '"tool":"warmer"' in text
    assert '- tokyo: succeeded, output: <output>{"city": "Tokyo", "temp_c": 24.5}</output>' in text
    kinds = [e.kind for e in events]
    assert kinds[0] == "round.started" and kinds[-1] == "round.finished"
    assert kinds.index("run.finished") < kinds.index("joiner.decided")
    decided = next(e for e in events if isinstance(e, JoinerDecided))
    assert decided.action == "finish" and decided.cites == ("cmp", "tokyo")
    assert decided.run_id == rnd.result.run_id


async def test_replan_then_finish_reuses_successes(world: World):
    fixed_tokyo = weather("tokyo2", "Tokyo")
    fixed_cmp = {"id": "cmp2", "tool": "warmer", "args": {"a": "${paris}", "b": "${tokyo2}"}}
    llm = openai(
        plan(PARIS, ATLANTIS, WARMER),
        replan("the second city was Atlantis, not Tokyo: look up Tokyo"),
        plan(PARIS, fixed_tokyo, fixed_cmp),
        finish("Tokyo", ["cmp2"]),
    )
    events: list[Any] = []
    async with llm:
        solution = await dagagent.solve(
            GOAL, world.registry, llm, stream=False, listeners=[events.append]
        )
    assert solution.status is SolveStatus.ANSWERED and solution.answer == "Tokyo"
    first, second = solution.rounds
    assert first.outcome == "replan" and first.decision is not None
    assert first.result is not None and first.result.tasks["tokyo"].status is TaskStatus.FAILED
    assert second.feedback == "the second city was Atlantis, not Tokyo: look up Tokyo"
    assert second.result is not None and second.result.parent_id == first.result.run_id
    assert second.result.tasks["paris"].status is TaskStatus.REUSED
    # Paris was looked up once over both rounds; Tokyo once, in round 2
    assert world.calls == Counter(
        {"get_weather Paris": 1, "get_weather Atlantis": 1, "get_weather Tokyo": 1, "warmer": 1}
    )
    # the replanner saw the joiner's feedback
    replan_prompt = llm.wire_requests[2]["messages"][-1]["content"]
    assert "the second city was Atlantis, not Tokyo: look up Tokyo" in replan_prompt
    assert "- tokyo: failed: <error>LookupError: no weather for 'Atlantis'</error>" in replan_prompt
    assert solution.usage.planner.calls == 2 and solution.usage.joiner.calls == 2
    started = [e for e in events if isinstance(e, RoundStarted)]
    assert [(e.round, e.parent_id) for e in started] == [(1, None), (2, first.result.run_id)]
    finished = [(e.round, e.outcome) for e in events if isinstance(e, RoundFinished)]
    assert finished == [(1, "replan"), (2, "answered")]


@pytest.mark.parametrize("stream", [True, False])
async def test_a_replan_that_changes_a_success_under_its_id_runs_the_new_version(
    world: World, stream: bool
):
    london = weather("paris", "London")  # the id paris, now London
    llm = openai(
        plan(PARIS, TOKYO, WARMER),
        replan("compare London with Tokyo instead"),
        plan(london, TOKYO, WARMER),
        finish("Tokyo", ["cmp"]),
    )
    async with llm:
        solution = await dagagent.solve(GOAL, world.registry, llm, stream=stream)
    assert solution.status is SolveStatus.ANSWERED
    assert solution.usage.planner.calls == 2  # the revision was taken as it came
    _, second = solution.rounds
    assert second.planning is not None
    assert [(w.code, w.task_id) for w in second.planning.warnings] == [("new_version", "paris")]
    assert second.result is not None
    statuses = {k: r.status for k, r in second.result.tasks.items()}
    assert statuses == {
        "paris": TaskStatus.SUCCEEDED,  # the new version ran
        "tokyo": TaskStatus.REUSED,
        "cmp": TaskStatus.SUCCEEDED,  # its input changed: it ran again
    }
    assert second.result.outputs["paris"] == {"city": "London", "temp_c": 14.0}
    assert world.calls == Counter(
        {"get_weather Paris": 1, "get_weather Tokyo": 1, "get_weather London": 1, "warmer": 2}
    )


async def test_last_round_forces_a_finish(world: World):
    llm = openai(
        plan(PARIS, TOKYO, WARMER),
        replan("double-check Tokyo"),  # the last round: not accepted
        finish("Tokyo", ["cmp"]),
    )
    async with llm:
        solution = await dagagent.solve(GOAL, world.registry, llm, max_rounds=1, stream=False)
    assert solution.status is SolveStatus.ANSWERED and solution.answer == "Tokyo"
    first, second = llm.wire_requests[1], llm.wire_requests[2]
    schema = first["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["action"]["enum"] == ["finish"]
    assert "This is the last round" in first["messages"][-1]["content"]
    assert "[must_finish]" in second["messages"][-1]["content"]
    assert solution.usage.joiner.calls == 2
    assert world.calls["get_weather Paris"] == 1


async def test_a_round_without_new_success_gives_up(world: World):
    llm = openai(
        plan(PARIS, ATLANTIS, WARMER),
        replan("try again"),
        plan(
            PARIS,
            weather("tokyo2", "Atlantis2"),
            WARMER | {"args": {"a": "${paris}", "b": "${tokyo2}"}},
        ),
    )
    async with llm:
        solution = await dagagent.solve(GOAL, world.registry, llm, stream=False)
    assert solution.status is SolveStatus.GAVE_UP and not solution.ok
    assert "round 2 added no new success" in solution.reason
    assert "tokyo2 failed: LookupError: no weather for 'Atlantis2'" in solution.reason
    assert solution.answer is None and solution.rounds[-1].outcome == "gave_up"
    assert solution.usage.joiner.calls == 1  # the joiner is not asked about a stalled round
    with pytest.raises(dagagent.SolveError, match="gave_up: round 2 added no new success"):
        solution.raise_for_status()


async def test_a_revised_plan_identical_to_the_last_gives_up(world: World):
    llm = openai(plan(PARIS, ATLANTIS), replan("Atlantis failed"), plan(PARIS, ATLANTIS))
    async with llm:
        solution = await dagagent.solve(GOAL, world.registry, llm, stream=False)
    assert solution.status is SolveStatus.GAVE_UP
    assert "the revised plan is the same as round 1's" in solution.reason
    assert solution.rounds[-1].result is None  # nothing ran again
    assert world.calls["get_weather Atlantis"] == 1


async def test_an_unusable_joiner_answer_is_healed(world: World):
    llm = openai(
        plan(PARIS, TOKYO, WARMER),
        "I think Tokyo is warmer.",  # prose, no JSON
        json.dumps({"action": "finish", "answer": "Tokyo", "cites": ["nowhere"]}),
        "```json\n" + json.dumps({"finish": {"answer": "Tokyo", "cites": ["${cmp}"]}}) + "\n```",
    )
    async with llm:
        solution = await dagagent.solve(GOAL, world.registry, llm, stream=False)
    assert solution.status is SolveStatus.ANSWERED
    assert solution.answer == "Tokyo" and solution.cites == ["cmp"]
    joining = solution.rounds[0].joining
    assert joining is not None
    assert [[i.code for i in a.issues] for a in joining.attempts] == [
        ["not_json"],
        ["bad_cite"],
        [],
    ]
    feedback = llm.wire_requests[3]["messages"][-1]["content"]
    assert "[bad_cite] task 'nowhere'" in feedback
    assert solution.usage.joiner.calls == 3


async def test_a_joiner_that_never_answers_fails_the_solve(world: World):
    llm = openai(plan(PARIS, TOKYO, WARMER), "no", "still no", "never")
    async with llm:
        solution = await dagagent.solve(GOAL, world.registry, llm, stream=False)
    assert solution.status is SolveStatus.FAILED
    assert isinstance(solution.error, dagagent.JoinerError)
    assert len(solution.error.attempts) == 3
    assert "the joiner gave no usable decision after 3 attempts" in solution.reason
    assert solution.rounds[0].result is not None and solution.rounds[0].result.ok


async def test_no_valid_plan_fails_with_the_planning_error(world: World):
    llm = openai("no plan", "none", "nothing")
    async with llm:
        solution = await dagagent.solve(GOAL, world.registry, llm, stream=False)
    assert solution.status is SolveStatus.FAILED
    assert isinstance(solution.error, dagagent.PlanningError)
    assert solution.rounds[0].plan is None and solution.rounds[0].result is None
    assert solution.usage.planner.calls == 3


async def test_a_model_that_cannot_be_reached_fails_the_solve(world: World):
    import httpx

    llm = ScriptedLLM.openai(
        [httpx.ConnectError("refused")],
        settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=0)),
    )
    async with llm:
        solution = await dagagent.solve(GOAL, world.registry, llm, stream=False)
    assert solution.status is SolveStatus.FAILED
    assert isinstance(solution.error, dagagent.errors.LLMError)
    assert "the model could not be used" in solution.reason


async def test_structured_answer_and_anthropic_wire(world: World):
    answer = {"warmer": "Tokyo", "difference_c": 6.5}
    llm = ScriptedLLM.anthropic(
        [
            wire.anthropic_tool_use([(PLAN_FORMAT_NAME, json.loads(plan(PARIS, TOKYO)))]),
            wire.anthropic_tool_use(
                [
                    (
                        "join_decision",
                        {"action": "finish", "answer": answer, "cites": ["paris", "tokyo"]},
                    )
                ]
            ),
        ]
    )
    async with llm:
        solution = await dagagent.solve(GOAL, world.registry, llm, stream=False)
    assert solution.answer == answer
    assert json.loads(solution.answer_text) == answer
    assert llm.wire_requests[1]["tool_choice"] == {"type": "tool", "name": "join_decision"}
    doc = solution.to_json_dict()
    assert doc["answer"] == answer and doc["status"] == "answered"
    total = doc["usage"]["total"]
    assert total["calls"] == 2 and total["input_tokens"] == 20 and total["cost_usd"] is None
    # 5 output tokens reported for a whole plan: not believed, estimated from its characters
    assert total["estimated"] and total["output_tokens"] > 10
    assert total["total_tokens"] == total["input_tokens"] + total["output_tokens"]
    json.dumps(doc)  # strict JSON


async def test_agent_tasks_usage_is_in_the_run_result_and_the_solution(world: World):
    plan_with_agent = plan(
        PARIS, {"id": "note", "instruction": "Say how warm Paris is: ${paris.temp_c}", "tools": []}
    )
    llm = openai(plan_with_agent, "It is 18 C in Paris.", finish("18 C", ["note"]))
    async with llm:
        solution = await dagagent.solve(GOAL, world.registry, llm, stream=False, agent_tasks=True)
    assert solution.answer == "18 C"
    result = solution.rounds[0].result
    assert result is not None and result.outputs["note"] == "It is 18 C in Paris."
    assert result.usage == Usage(calls=1, input_tokens=10, output_tokens=5)
    assert solution.usage.agents.calls == 1
    assert solution.usage.total.calls == 3


async def test_execute_fills_run_usage_only_when_a_model_was_used(world: World):
    result = await dagagent.execute(json.loads(plan(PARIS)), world.registry, llm=openai())
    assert result.usage is None


async def test_bad_options_raise_before_anything_runs(world: World):
    llm = openai()
    with pytest.raises(dagagent.errors.ConfigError, match="max_rounds"):
        await dagagent.solve(GOAL, world.registry, llm, max_rounds=0)
    with pytest.raises(dagagent.errors.ConfigError, match="goal is empty"):
        await dagagent.solve("  ", world.registry, llm)
    assert llm.wire_requests == []


async def test_confirm_refused_runs_nothing(world: World):
    seen: list[list[str]] = []

    def confirm(graph: dagagent.PlanGraph) -> bool:
        seen.append(list(graph.tasks))
        return False

    llm = openai(plan(PARIS, TOKYO))
    async with llm:
        solution = await dagagent.solve(GOAL, world.registry, llm, confirm=confirm)
    assert seen == [["paris", "tokyo"]]
    assert solution.status is SolveStatus.GAVE_UP and "not approved" in solution.reason
    assert not world.calls


def test_solve_sync(world: World):
    llm = openai(plan(PARIS), finish("18 C", ["paris"]))
    solution = dagagent.solve_sync(GOAL, world.registry, llm, stream=False)
    assert solution.answer == "18 C"


# ---------------------------------------------------------------------------------------------
# the replan workflow as a library


async def test_revise_and_run_a_recorded_run(world: World, tmp_path: Any):
    store = tmp_path / "runs.db"
    first = await dagagent.execute(
        json.loads(plan(PARIS, ATLANTIS)),
        world.registry,
        store=store,
        settings=RunSettings(on_failure="continue"),
    )
    with dagagent.RunStore(store) as st:
        record = st.get_run(first.run_id)
    llm = openai(plan(PARIS, TOKYO))
    async with llm:
        revision, result = await replan_run(
            record, world.registry, llm=llm, feedback="Tokyo, not Atlantis", store=store
        )
    assert revision.diff is not None and list(revision.diff.changed) == ["tokyo"]
    assert {k: d.action for k, d in revision.reuse.items()} == {"paris": "reuse", "tokyo": "run"}
    assert revision.review.failed and revision.planning is not None
    assert "Tokyo, not Atlantis" in llm.wire_requests[0]["messages"][-1]["content"]
    assert result.parent_id == first.run_id and result.tasks["paris"].status is TaskStatus.REUSED
    assert world.calls["get_weather Paris"] == 1


async def test_revise_with_an_edited_plan_and_a_run_in_memory(world: World):
    old = dagagent.load_plan(json.loads(plan(PARIS, ATLANTIS)))
    first = await dagagent.execute(old, world.registry, settings=RunSettings(on_failure="continue"))
    record = record_of(old, first)
    revision = await revise_run(record, world.registry, plan=json.loads(plan(PARIS, TOKYO)))
    assert revision.planning is None and not revision.unchanged
    again = await revise_run(record, world.registry, plan=old)
    assert again.unchanged
    none = await revise_run(record, world.registry)
    assert none.diff is None and none.plan == old


# ---------------------------------------------------------------------------------------------
# records in the run store


async def test_the_store_keeps_the_answer_rounds_and_decisions(world: World, tmp_path: Any):
    long_answer = "Tokyo. " + "x" * 5000
    llm = openai(
        plan(PARIS, ATLANTIS, WARMER),
        replan("look up Tokyo"),
        plan(
            PARIS,
            weather("tokyo2", "Tokyo"),
            WARMER | {"id": "cmp2", "args": {"a": "${paris}", "b": "${tokyo2}"}},
        ),
        finish(long_answer, ["cmp2"]),
    )
    path = tmp_path / "runs.db"
    async with llm:
        solution = await dagagent.solve(GOAL, world.registry, llm, stream=False, store=path)
    first, second = solution.rounds
    assert first.result is not None and second.result is not None
    with dagagent.RunStore(path) as st:
        record = st.get_solve(solution.solve_id)
        assert st.solve_of_run(first.result.run_id) == record
        run1 = st.get_run(first.result.run_id)
        run2 = st.get_run(second.result.run_id)
    assert record.status == "answered" and record.answer == long_answer  # in full
    assert record.cites == ["cmp2"] and record.run_id == second.result.run_id
    assert record.usage is not None and record.usage["joiner"].calls == 2
    assert [(r.round, r.run_id, r.outcome) for r in record.rounds] == [
        (1, first.result.run_id, "replan"),
        (2, second.result.run_id, "answered"),
    ]
    assert record.rounds[0].decision == {"action": "replan", "feedback": "look up Tokyo"}
    assert record.rounds[1].decision is not None
    assert record.rounds[1].decision["answer"] == long_answer
    assert record.rounds[1].feedback == "look up Tokyo"
    # the rounds are parent and child runs; the second reused Paris
    assert run1.parent_id is None and run2.parent_id == run1.run_id
    assert run2.tasks["paris"].status is TaskStatus.REUSED


async def test_a_solve_that_failed_is_recorded_with_its_reason(world: World, tmp_path: Any):
    llm = openai("no plan", "none", "nothing")
    path = tmp_path / "runs.db"
    async with llm:
        solution = await dagagent.solve(GOAL, world.registry, llm, stream=False, store=path)
    with dagagent.RunStore(path) as st:
        record = st.get_solve(solution.solve_id)
    assert record.status == "failed" and "no valid plan" in record.reason
    assert [(r.round, r.run_id, r.outcome) for r in record.rounds] == [(1, None, "failed")]


async def test_a_joiner_model_that_fails_ends_the_solve_as_failed(world: World):
    from dagagent.errors import LLMServerError

    llm = ScriptedLLM([plan(PARIS), LLMServerError("503 after every retry")])
    solution = await dagagent.solve(GOAL, world.registry, llm, stream=False)
    assert solution.status is SolveStatus.FAILED
    assert isinstance(solution.error, LLMServerError)
    assert "the joiner's model could not be used: 503 after every retry" in solution.reason
    (rnd,) = solution.rounds
    assert rnd.result is not None and rnd.result.ok and rnd.outcome == "failed"
    assert world.calls["get_weather Paris"] == 1


async def test_a_payment_of_round_one_is_taken_over_by_round_three(
    world: World, tmp_path: Any
) -> None:
    """Round 2's plan leaves the payment out, round 3's brings it back: what took effect in
    round 1 is taken over, not paid again (the payments counted in a file)."""
    paid = tmp_path / "paid.log"

    @world.registry.tool(side_effects=True)
    def pay(account: str, cents: int) -> str:
        """Pay an account."""
        with paid.open("a") as f:
            f.write(f"{account} {dagagent.current_call().idempotency_key}\n")
        return f"paid {cents}"

    payment = {"id": "pay", "tool": "pay", "args": {"account": "acme", "cents": 500}}
    llm = openai(
        plan(payment, ATLANTIS),
        replan("Atlantis is not a city"),
        plan(PARIS),  # the payment left out
        replan("now Tokyo, and the payment"),
        plan(payment, TOKYO),  # ... and back
        finish("Tokyo, paid.", ["pay", "tokyo"]),
    )
    async with llm:
        solution = await dagagent.solve(
            GOAL, world.registry, llm, stream=False, store=tmp_path / "runs.db"
        )
    assert solution.status is SolveStatus.ANSWERED, solution.reason
    third = solution.rounds[2].result
    assert third is not None and third.tasks["pay"].output == "paid 500"
    assert [d.decision for d in third.tasks["pay"].decisions or ()] == ["replayed"]
    assert len(paid.read_text().splitlines()) == 1  # paid once, in round 1
