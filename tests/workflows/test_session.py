"""dagagent.Session: turns that see the conversation so far, follow-ups that reuse an earlier
turn's outputs by reference without calling their tools again, compression past a token
limit (recorded, not made again), the records in the run store, and the errors a user can
cause.

The model is a ScriptedLLM in OpenAI's wire format (the real client code over an
httpx.MockTransport); the store is a real SQLite file."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import dagagent
from dagagent.errors import ConfigError, SessionError
from dagagent.llm import ScriptedLLM, wire
from dagagent.results import SolveStatus, TaskStatus
from dagagent.store import RunStore

pytestmark = pytest.mark.anyio

WEATHER = {"paris": 18.0, "tokyo": 24.5, "london": 14.0}


class World:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.registry = dagagent.Registry()

        @self.registry.tool
        def get_weather(city: str) -> dict[str, Any]:
            """Current temperature of a city.

            Args:
                city: City name.
            """
            self.calls[city] += 1
            return {"city": city, "temp_c": WEATHER[city.lower()]}

        @self.registry.tool
        def warmer(a: dict[str, Any], b: dict[str, Any]) -> str:
            """The warmer of two cities."""
            self.calls["warmer"] += 1
            return a["city"] if a["temp_c"] >= b["temp_c"] else b["city"]


@pytest.fixture
def world() -> World:
    return World()


def plan(*tasks: dict[str, Any]) -> str:
    return json.dumps({"tasks": list(tasks)})


def weather(tid: str, city: str) -> dict[str, Any]:
    return {"id": tid, "tool": "get_weather", "args": {"city": city}}


def finish(answer: Any, cites: list[str]) -> str:
    return json.dumps({"action": "finish", "answer": answer, "cites": cites})


def openai(*answers: str) -> ScriptedLLM:
    return ScriptedLLM.openai([wire.openai_text(a) for a in answers])


FOLLOW_UP = plan(
    weather("tokyo", "Tokyo"),
    {"id": "cmp", "tool": "warmer", "args": {"a": "${turn1.paris}", "b": "${tokyo}"}},
)


@pytest.mark.parametrize("stream", [False, True], ids=["whole-plan", "streamed"])
async def test_a_follow_up_reuses_an_earlier_output_without_calling_its_tool(
    world: World, tmp_path: Path, stream: bool
):
    llm = openai(
        plan(weather("paris", "Paris")),
        finish("18 C in Paris", ["paris"]),
        FOLLOW_UP,
        finish("Tokyo is warmer than Paris", ["cmp", "turn1"]),
    )
    db = tmp_path / "runs.db"
    async with llm, dagagent.Session("trip", world.registry, llm, store=db, stream=stream) as s:
        first = await s.ask("What is the weather in Paris?")
        second = await s.ask("Is Tokyo warmer?")
    assert first.ok and second.ok, (first.reason, second.reason)
    # Paris was looked up once, in turn 1: turn 2 reused its output by reference
    assert world.calls == Counter({"Paris": 1, "Tokyo": 1, "warmer": 1})
    result = second.rounds[0].result
    assert result is not None
    assert result.tasks["turn1"].status is TaskStatus.REUSED
    assert result.tasks["cmp"].output == "Tokyo"
    assert result.tasks["cmp"].args == {
        "a": {"city": "Paris", "temp_c": 18.0},
        "b": {"city": "Tokyo", "temp_c": 24.5},
    }
    assert second.cites == ["cmp", "turn1"]
    # turn 2's planner and joiner were shown the conversation: question, answer, outputs
    for request in (llm.wire_requests[2], llm.wire_requests[3]):
        text = request["messages"][-1]["content"]
        assert "The conversation so far" in text
        assert "question: <output>What is the weather in Paris?</output>" in text
        assert "answer: <output>18 C in Paris</output>" in text
        assert '${turn1.paris}: <output>{"city": "Paris", "temp_c": 18.0}</output>' in text
        assert text.index("--- This turn ---") > text.index("The conversation so far")
    # turn 1 was shown no conversation
    assert "conversation" not in llm.wire_requests[0]["messages"][-1]["content"]
    # on record: the session, its turns and their solves
    with RunStore(db) as store:
        record = store.get_session("trip")
        assert record is not None
        assert [(t.turn, t.solve_id, t.status) for t in record.turns] == [
            (1, first.solve_id, SolveStatus.ANSWERED),
            (2, second.solve_id, SolveStatus.ANSWERED),
        ]
        assert record.turns[1].question == "Is Tokyo warmer?"
        (listed,) = store.list_sessions()
        assert (listed.name, listed.turns, listed.last_status) == (
            "trip",
            2,
            SolveStatus.ANSWERED,
        )
        run = store.get_run(second.run_id or "")
        assert run.tasks["turn1"].status is TaskStatus.REUSED
        assert store.session_of_solve(second.solve_id) == ("trip", 2)


async def test_a_session_opened_again_goes_on_from_its_record(world: World, tmp_path: Path):
    db = tmp_path / "runs.db"
    llm = openai(plan(weather("paris", "Paris")), finish("18 C", ["paris"]))
    async with llm, dagagent.Session("trip", world.registry, llm, store=db) as s:
        await s.ask("Weather in Paris?")
    # another session object (another process, later): the outputs come from the store
    llm = openai(FOLLOW_UP, finish("Tokyo", ["cmp"]))
    async with llm, dagagent.Session("trip", world.registry, llm, store=db) as s:
        assert [t.question for t in s.turns] == ["Weather in Paris?"]
        assert s.turns[0].outputs == {"paris": {"city": "Paris", "temp_c": 18.0}}
        second = await s.ask("Is Tokyo warmer?")
    assert second.ok and second.answer == "Tokyo"
    assert world.calls["Paris"] == 1
    assert [t.number for t in s.turns] == [1, 2]


async def test_a_reference_to_a_turn_that_does_not_exist_is_sent_back(world: World, tmp_path: Path):
    bad = plan({"id": "x", "tool": "warmer", "args": {"a": "${turn5.paris}", "b": "${turn5.p}"}})
    llm = openai(
        plan(weather("paris", "Paris")),
        finish("18 C", ["paris"]),
        bad,
        FOLLOW_UP,
        finish("Tokyo", ["cmp"]),
    )
    async with (
        llm,
        dagagent.Session("trip", world.registry, llm, store=tmp_path / "r.db", stream=False) as s,
    ):
        await s.ask("Weather in Paris?")
        second = await s.ask("Is Tokyo warmer?")
    assert second.ok
    feedback = llm.wire_requests[3]["messages"][-1]["content"]
    assert "unknown task 'turn5'" in feedback


async def test_compression_past_the_limit_is_a_recorded_call_not_made_again(
    world: World, tmp_path: Path
):
    db = tmp_path / "runs.db"
    long_answer = "It is mild. " * 60  # about 180 tokens a turn: past the limit soon
    script = []
    for city in ("Paris", "London"):
        script += [plan(weather(city.lower(), city)), finish(long_answer + city, [city.lower()])]
    script.append("SUMMARY: asked about Paris (18 C).")  # the compression, before turn 3
    script += [plan(weather("tokyo", "Tokyo")), finish("Tokyo 24.5", ["tokyo"])]
    llm = openai(*script)
    async with (
        llm,
        dagagent.Session(
            "long", world.registry, llm, store=db, max_tokens=150, keep=1, stream=False
        ) as s,
    ):
        await s.ask("Paris?")
        await s.ask("London?")
        third = await s.ask("Tokyo?")
    assert third.ok
    (compress,) = [c for c in third.calls if c.role == "compress"]
    assert compress.status == "answered" and compress.round is None
    assert third.usage.compress.calls == 1
    assert third.usage.total.calls == 3
    request = llm.wire_requests[4]
    assert "Write the summary of turns 1-1." in request["messages"][-1]["content"]
    # the planner of turn 3 saw the summary instead of turn 1, turn 2 word for word, and
    # every output still by reference
    planner_text = llm.wire_requests[5]["messages"][-1]["content"]
    assert "Summary of turns 1-1:\n<output>SUMMARY: asked about Paris (18 C).</output>" in (
        planner_text
    )
    assert "Paris?" not in planner_text and "question: <output>London?</output>" in planner_text
    # turn 1's output: its reference only (it is summarised); turn 2's with a preview
    assert "- turn 1 (summarised): ${turn1.paris}\n" in planner_text
    assert '${turn2.london}: <output>{"city": "London", "temp_c": 14.0}</output>' in planner_text
    with RunStore(db) as store:
        record = store.get_session("long")
        assert record is not None
        assert (record.turns[2].summary, record.turns[2].summarized) == (
            "SUMMARY: asked about Paris (18 C).",
            1,
        )
        assert next(c.role for c in store.get_solve(third.solve_id).calls) == "compress"
    # read again (a resume of turn 3 would be): the summary is on record, nothing to compress
    async with dagagent.Session("long", world.registry, llm, store=db, max_tokens=150, keep=1) as s:
        again = s.conversation(3)
        assert again.summary == "SUMMARY: asked about Paris (18 C)." and again.summarized == 1
        assert not again.needs_compression


async def test_a_turn_that_did_not_end_must_be_resumed_first(world: World, tmp_path: Path):
    db = tmp_path / "runs.db"
    with RunStore(db) as store:  # a turn whose process died before its solve was recorded
        store.start_turn("t", "0123456789ab", "Paris?", after=0)
    llm = openai()
    async with llm, dagagent.Session("t", world.registry, llm, store=db) as s:
        assert s.unfinished == 1
        with pytest.raises(SessionError, match=r"turn 1 of session 't' has not ended"):
            await s.ask("Tokyo?")


async def test_a_turn_that_died_before_its_solve_began_is_asked_again(world: World, tmp_path: Path):
    db = tmp_path / "runs.db"
    with RunStore(db) as store:
        store.start_turn("t", "0123456789ab", "Paris?", after=0)
    llm = openai(
        plan(weather("paris", "Paris")),
        finish("18 C", ["paris"]),
        FOLLOW_UP,
        finish("Tokyo", ["cmp"]),
    )
    async with llm, dagagent.Session("t", world.registry, llm, store=db) as s:
        resumed = await s.resume()
        assert resumed is not None and resumed.ok and resumed.solve_id == "0123456789ab"
        assert s.unfinished is None and s.turns[0].outputs == {
            "paris": {"city": "Paris", "temp_c": 18.0}
        }
        second = await s.ask("Tokyo?")
    assert second.ok and world.calls["Paris"] == 1


async def test_a_paused_turn_is_resumed_as_a_turn_then_the_conversation_goes_on(
    world: World, tmp_path: Path
):
    db = tmp_path / "runs.db"
    policy = dagagent.Policy(
        [dagagent.Rule(tool="get_weather", args={"city": "Tokyo"}, action="ask")],
        ask=dagagent.ask_later,
    )
    llm = openai(
        plan(weather("paris", "Paris")),
        finish("18 C", ["paris"]),
        FOLLOW_UP,  # Tokyo waits for a person; turn 1's Paris is reused
        finish("Tokyo is warmer", ["cmp"]),
        plan(weather("london", "London")),
        finish("14 C", ["london"]),
    )
    async with llm, dagagent.Session("t", world.registry, llm, store=db, policy=policy) as s:
        await s.ask("Paris?")
        paused = await s.ask("Is Tokyo warmer?")
        assert paused.status is SolveStatus.PAUSED and s.unfinished == 2
        with pytest.raises(SessionError, match=r"turn 2 of session 't' has not ended"):
            await s.ask("London?")
        # not as a bare solve: it would lose the conversation the turn was asked in
        with pytest.raises(dagagent.DecisionError, match=r"turn 2 of session 't': resume it"):
            await dagagent.resume_solve(paused.solve_id, world.registry, llm, store=db)
        resumed = await s.resume(decisions={"tokyo": dagagent.Approval.approve("ok", by="ann")})
        assert resumed is not None and resumed.ok and resumed.answer == "Tokyo is warmer"
        assert s.unfinished is None and await s.resume() is None
        third = await s.ask("London?")
    assert third.ok
    assert world.calls == Counter({"Paris": 1, "Tokyo": 1, "warmer": 1, "London": 1})


async def test_another_process_taking_the_turn_is_a_clear_error(world: World, tmp_path: Path):
    db = tmp_path / "runs.db"
    with RunStore(db) as store:
        assert store.start_turn("t", "0123456789ab", "Paris?", after=0) == 1
        with pytest.raises(dagagent.StoreError, match="moved on"):
            store.start_turn("t", "0123456789ac", "Tokyo?", after=0)


async def test_bad_options_are_config_errors(world: World, tmp_path: Path):
    llm = openai()
    with pytest.raises(ConfigError, match="cannot name a session"):
        dagagent.Session("no spaces", world.registry, llm, store=tmp_path / "r.db")
    with pytest.raises(ConfigError, match="keep must be at least 1"):
        dagagent.Session("s", world.registry, llm, store=tmp_path / "r.db", keep=0)
    with pytest.raises(ConfigError, match="solve_id= is the session's own"):
        dagagent.Session("s", world.registry, llm, store=tmp_path / "r.db", solve_id="x")
    registry = dagagent.Registry()

    @registry.tool
    def earlier_turn(turn: int) -> int:
        """Clash."""
        return turn

    with pytest.raises(ConfigError, match="earlier_turn"):
        dagagent.Session("s", registry, llm, store=tmp_path / "r.db")
    async with llm, dagagent.Session("s", world.registry, llm, store=tmp_path / "r.db") as s:
        with pytest.raises(ConfigError, match="question is empty"):
            await s.ask("  ")


async def test_a_planner_of_ones_own_plans_a_follow_up(world: World, tmp_path: Path):
    llm = openai(
        plan(weather("paris", "Paris")),
        finish("18 C", ["paris"]),
        FOLLOW_UP,
        finish("Tokyo", ["cmp"]),
    )
    own = dagagent.planners.LLMPlanner(llm, world.registry, system_prompt="Plan. {tools}")
    async with (
        llm,
        dagagent.Session(
            "t", world.registry, llm, store=tmp_path / "r.db", planner=own, stream=False
        ) as s,
    ):
        await s.ask("Paris?")
        second = await s.ask("Tokyo?")
    assert second.ok and world.calls["Paris"] == 1
    system = llm.wire_requests[2]["messages"][0]["content"]
    assert system.startswith("Plan. ") and "earlier_turn" not in system
    other = dagagent.Registry()
    other.add(world.registry.get("warmer"))
    with pytest.raises(ConfigError, match="plans for other tools"):  # before the turn is taken
        async with dagagent.Session(
            "u",
            world.registry,
            llm,
            store=tmp_path / "r.db",
            planner=dagagent.planners.LLMPlanner(llm, other),
        ) as s:
            await s.ask("Paris?")
    async with dagagent.Session("u", world.registry, llm, store=tmp_path / "r.db") as s:
        assert s.turns == [] and s.unfinished is None
        with pytest.raises(ConfigError, match="max_rounds must be at least 1"):
            await s.ask("Paris?", max_rounds=0)
        assert s.turns == [] and s.unfinished is None
