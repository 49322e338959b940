"""Every model call of a solve is a record: planner, replanner, joiner and agent calls with
their round, task, options, text, times and tokens, in ``Solution.calls``, in the run store
(read back equal) and on the spans; a rejected attempt keeps its text and issues and is told
to listeners when it is rejected; a deadline ends a solve ``timed_out`` with what was running.

The model is a ScriptedLLM (plain, or in a provider's wire format through the real client)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

import dagagent
from dagagent.errors import LLMRateLimitError
from dagagent.events import ModelCallFinished, ModelCallRejected, ModelCallStarted
from dagagent.interceptors import redacting
from dagagent.llm import LLMResponse, ScriptedLLM, StreamEnd, TextDelta, fallback, wire
from dagagent.results import SolveStatus
from dagagent.store import RunStore
from dagagent.workflows._calls import MAX_TEXT_CHARS

from .test_solve import GOAL, PARIS, TOKYO, WARMER, World, finish, plan, replan

pytestmark = pytest.mark.anyio


@pytest.fixture
def world() -> World:
    return World()


async def test_every_call_of_a_solve_is_recorded_with_its_round_and_role(
    world: World, tmp_path: Path
) -> None:
    events: list[Any] = []
    llm = ScriptedLLM.openai(
        [
            wire.openai_text("Sure! Here is <b>no</b> plan.", input_tokens=900, output_tokens=9),
            wire.openai_text(plan(PARIS), input_tokens=1200, output_tokens=40),
            wire.openai_text(replan("compare with Tokyo"), input_tokens=700, output_tokens=12),
            wire.openai_text(plan(PARIS, TOKYO, WARMER), input_tokens=1500, output_tokens=90),
            wire.openai_text(finish("Tokyo", ["cmp"]), input_tokens=800, output_tokens=15),
        ]
    )
    store = tmp_path / "runs.db"
    async with llm:
        solution = await dagagent.solve(
            GOAL, world.registry, llm, store=store, listeners=[events.append]
        )
    assert solution.ok
    calls = solution.calls
    assert [(c.seq, c.round, c.role, c.status) for c in calls] == [
        (1, 1, "planner", "answered"),
        (2, 1, "planner", "answered"),
        (3, 1, "joiner", "answered"),
        (4, 2, "replanner", "answered"),
        (5, 2, "joiner", "answered"),
    ]
    first = calls[0]
    assert first.text == "Sure! Here is <b>no</b> plan." and first.text_chars == len(first.text)
    assert first.issues and first.issues[0].startswith("[not_json]")
    assert all(not c.issues for c in calls[1:])
    assert first.model == "gpt-test" and first.provider == "openai"
    assert first.server == "http://scripted.invalid/v1"
    assert first.options["stream"] is True
    assert first.options["response_format"]["name"] == "dagagent_plan"
    assert (first.input_tokens, first.output_tokens, first.estimated) == (900, 9, False)
    assert first.cost_usd is None  # gpt-test has no price: blank, never guessed
    assert all(c.started_at > 0 and c.duration_s is not None for c in calls)
    assert calls[2].run_id == solution.rounds[0].run_id
    assert calls[4].run_id == solution.rounds[1].run_id
    # the usage by role is the calls', and each round's too
    assert solution.usage.planner.calls == 3 and solution.usage.joiner.calls == 2
    assert solution.usage.total.input_tokens == 900 + 1200 + 700 + 1500 + 800
    assert solution.round_usage(2).calls == 2
    # listeners heard each call start and end, and the rejection as it happened
    kinds = [e.kind for e in events if e.kind.startswith("model_call")]
    assert kinds[:3] == ["model_call.started", "model_call.finished", "model_call.rejected"]
    assert kinds.count("model_call.started") == kinds.count("model_call.finished") == 5
    rejected = next(e for e in events if isinstance(e, ModelCallRejected))
    assert rejected.record.call_id == first.call_id and rejected.record.issues == first.issues
    started = next(e for e in events if isinstance(e, ModelCallStarted))
    assert started.role == "planner" and started.round == 1
    # the store has them, exactly once each, as the solution does
    with RunStore(store) as st:
        record = st.get_solve(solution.solve_id)
        assert record.calls == calls
        (n,) = st._query("SELECT COUNT(*) FROM model_calls")[0]
        assert n == 5
        (summary,) = st.list_solves()
    assert summary.spent.calls == 5 and summary.models == ["gpt-test"]
    doc = json.loads(json.dumps(solution.to_json_dict()))
    assert [c["call_id"] for c in doc["calls"]] == [c.call_id for c in calls]
    assert doc["rounds"][0]["usage"]["calls"] == 3


async def test_a_streamed_plan_cut_at_an_invalid_task_keeps_its_text_and_issues(
    world: World,
) -> None:
    unknown = {"id": "x", "tool": "no_such_tool", "args": {}}
    text = plan(PARIS, unknown, TOKYO)
    async with ScriptedLLM(
        [text, plan(PARIS, TOKYO, WARMER), finish("Tokyo", ["cmp"])], chunk_size=16
    ) as llm:
        solution = await dagagent.solve(GOAL, world.registry, llm)
    assert solution.ok
    cut = solution.calls[0]
    assert cut.status == "cut" and cut.role == "planner"
    assert cut.issues and "no_such_tool" in " ".join(cut.issues)
    assert 0 < len(cut.text) < len(text) and text.startswith(cut.text)
    assert cut.output_tokens > 0 and cut.estimated  # a cut-off stream is never 0


async def test_agent_calls_name_their_task(world: World) -> None:
    note = {"id": "note", "instruction": "Say how warm Paris is: ${paris}", "tools": []}
    async with ScriptedLLM(
        [plan(PARIS, note), "Paris is 18 C.", finish("Paris is 18 C.", ["note"])]
    ) as llm:
        solution = await dagagent.solve(GOAL, world.registry, llm, agent_tasks=True)
    assert solution.ok
    agent = [c for c in solution.calls if c.role == "agent"]
    assert len(agent) == 1 and agent[0].task_id == "note" and agent[0].round == 1
    assert agent[0].run_id == solution.run_id and agent[0].text == "Paris is 18 C."
    assert solution.usage.agents.calls == 1


async def test_what_the_model_wrote_is_redacted_and_bounded(world: World) -> None:
    secret = "hunter2-very-secret"
    login = {"id": "paris", "tool": "get_weather", "args": {"city": "Paris", "password": secret}}
    long_answer = finish("x" * (MAX_TEXT_CHARS + 500), ["paris"])
    reg = dagagent.Registry()

    @reg.tool
    def get_weather(city: str, password: str = "") -> dict[str, Any]:
        """Weather."""
        return {"city": city, "temp_c": 18.0}

    async with ScriptedLLM(
        [json.dumps({"tasks": [login]}), f"mail me at ann@example.org {long_answer}"]
    ) as llm:
        solution = await dagagent.solve(
            GOAL,
            reg,
            llm,
            # \b: a pattern free to start inside a word is quadratic in Python's re over the
            # 32,000 x's below (3 s of a test for nothing the test is about)
            interceptors=[redacting(patterns=[r"\b[\w.]+@example\.org"])],
            structured=False,
        )
    planner, joiner = solution.calls
    assert secret not in planner.text and "[redacted]" in planner.text
    assert "ann@example.org" not in joiner.text
    assert len(joiner.text) == MAX_TEXT_CHARS and joiner.cut_chars > 500


# ---------------------------------------------------------------------------- deadline


class Stuck:
    """A model whose calls write ``first`` and then nothing more, ever."""

    model = "stuck"
    provider_name = "openai"

    def __init__(self, first: str, *, answers: list[str] | None = None) -> None:
        self.first = first
        self.answers = list(answers or [])

    async def complete(self, messages: Any, **options: Any) -> LLMResponse:
        raise NotImplementedError

    async def stream(self, messages: Any, **options: Any) -> Any:
        if self.answers:
            response = LLMResponse(content=self.answers.pop(0), finish_reason="stop")
            yield TextDelta(response.content)
            yield StreamEnd(response)
            return
        yield TextDelta(self.first)
        await anyio.sleep_forever()


async def test_a_deadline_ends_the_solve_with_what_was_running(
    world: World, tmp_path: Path
) -> None:
    store = tmp_path / "runs.db"
    # wall-clock time: the solve writes its record in worker threads, which a skipping clock
    # would not wait for (the deadline would pass while the first write is under way)
    solution = await dagagent.solve(
        GOAL, world.registry, Stuck('{"tasks": [{"id": "pa'), store=store, deadline_s=1.0
    )
    assert solution.status is SolveStatus.TIMED_OUT
    assert "deadline passed" in solution.reason and "the planner (round 1)" in solution.reason
    (call,) = solution.calls
    assert call.status == "cancelled" and call.text == '{"tasks": [{"id": "pa'
    assert solution.rounds[0].outcome == "timed_out"
    with RunStore(store) as st:
        record = st.get_solve(solution.solve_id)
    assert record.status is SolveStatus.TIMED_OUT and record.calls == solution.calls


@pytest.mark.skip_time
async def test_a_deadline_keeps_what_finished_and_names_the_task_that_ran(
    world: World,
) -> None:
    reg = dagagent.Registry()

    @reg.tool
    async def fast(city: str) -> str:
        """Answers at once."""
        return city

    @reg.tool
    async def forever(city: str) -> str:
        """Never answers."""
        await anyio.sleep_forever()
        return city

    text = json.dumps(
        {
            "tasks": [
                {"id": "a", "tool": "fast", "args": {"city": "Paris"}},
                {"id": "b", "tool": "forever", "args": {"city": "Tokyo"}},
            ]
        }
    )
    solution = await dagagent.solve(GOAL, reg, Stuck("", answers=[text]), deadline_s=5)
    assert solution.status is SolveStatus.TIMED_OUT
    assert "task b of run" in solution.reason
    result = solution.rounds[0].result
    assert result is not None and result.tasks["a"].output == "Paris"  # kept
    assert result.tasks["b"].status.value == "cancelled"


async def test_a_bad_deadline_is_refused(world: World) -> None:
    with pytest.raises(dagagent.ConfigError, match="deadline_s"):
        await dagagent.solve(GOAL, world.registry, ScriptedLLM([]), deadline_s=0)


async def test_finished_events_carry_the_record(world: World) -> None:
    events: list[Any] = []
    async with ScriptedLLM([plan(PARIS), finish("18 C", ["paris"])]) as llm:
        await dagagent.solve(GOAL, world.registry, llm, listeners=[events.append])
    records = [e.record for e in events if isinstance(e, ModelCallFinished)]
    assert [r.role for r in records] == ["planner", "joiner"]
    assert all(isinstance(r.call_id, str) and r.call_id for r in records)


async def test_a_call_a_fallback_moved_on_is_recorded_as_the_model_that_answered(
    world: World, tmp_path: Path
) -> None:
    limited = LLMRateLimitError("OpenAI is rate limiting (HTTP 429): slow down (gave up)")
    primary = ScriptedLLM([limited, limited], model="gpt-test")
    secondary = ScriptedLLM.anthropic(
        [wire.anthropic_text(plan(PARIS)), wire.anthropic_text(finish("18 C", ["paris"]))]
    )
    store = tmp_path / "runs.db"
    async with primary, secondary:
        solution = await dagagent.solve(
            GOAL, world.registry, fallback(primary, secondary), store=store
        )
    assert solution.ok
    assert [(c.role, c.model, c.provider) for c in solution.calls] == [
        ("planner", "claude-test", "anthropic"),
        ("joiner", "claude-test", "anthropic"),
    ]
    for call in solution.calls:
        (gave_up,) = call.options["fallback"]
        assert gave_up["model"] == "gpt-test" and gave_up["reason"] == "rate_limit"
        assert "slow down" in gave_up["error"]
    with RunStore(store) as st:
        assert st.get_solve(solution.solve_id).calls == solution.calls
