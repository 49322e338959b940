"""Streamed planning: tasks run while the plan is still being written."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import Any

import anyio
import pytest
from llm_server import OPENAI, LLMTestServer

import dagagent
from dagagent.approval import Policy, Rule
from dagagent.events import TaskParsed
from dagagent.llm import LLMResponse, ScriptedLLM, StreamEnd, StreamEvent, wire
from dagagent.planners import LLMPlanner
from dagagent.planners.streaming import plan_and_execute_streamed
from dagagent.settings import RunSettings

pytestmark = pytest.mark.anyio
# A test whose model streams from a script, with pauses between chunks, to tools that nap
# waits only on the event loop: it skips time (the few sync tools run when no pause is
# pending). One that talks to the loopback server keeps the real clock.
skip_time = pytest.mark.skip_time


def plan_text(*tasks: dict[str, Any], tail: str = "") -> str:
    return json.dumps({"goal": "g", "tasks": list(tasks)}) + tail


def work(tid: str, seconds: float = 0.0, **extra: Any) -> dict[str, Any]:
    task: dict[str, Any] = {"id": tid, "tool": "work", "args": {"name": tid, "seconds": seconds}}
    task.update(extra)
    return task


class Timed:
    """A model that streams a scripted answer and notes when its last piece came."""

    def __init__(self, inner: ScriptedLLM) -> None:
        self.inner = inner
        self.ended: list[float] = []

    async def complete(self, messages: Sequence[Any], **options: Any) -> LLMResponse:
        response = await self.inner.complete(messages, **options)
        self.ended.append(anyio.current_time())
        return response

    async def stream(self, messages: Sequence[Any], **options: Any) -> AsyncGenerator[StreamEvent]:
        async with aclosing(self.inner.stream(messages, **options)) as events:
            async for event in events:
                if isinstance(event, StreamEnd):
                    self.ended.append(anyio.current_time())
                yield event


def events_of(kind: type) -> tuple[list[Any], Any]:
    seen: list[Any] = []

    def listener(event: Any) -> None:
        if isinstance(event, kind):
            seen.append(event)

    return seen, listener


@skip_time
async def test_the_first_tool_starts_before_the_plan_ends(
    registry: dagagent.Registry, recorder: Any
) -> None:
    tasks = [work("first")] + [work(f"t{i}") for i in range(6)]
    answer = plan_text(*tasks)
    llm = Timed(ScriptedLLM([answer], chunk_size=8, chunk_delay_s=0.01))
    parsed, listener = events_of(TaskParsed)
    round_ = await plan_and_execute_streamed(
        LLMPlanner(llm, registry), "go", registry, listeners=[listener]
    )
    assert round_.result.status is dagagent.RunStatus.SUCCEEDED
    assert [t.id for t in round_.plan.tasks] == [t["id"] for t in tasks]
    started_first = recorder.intervals["first"][0]
    # The answer takes about len/8 * 0.01 s (0.5 s or more); "first" starts after 2 tasks' text.
    assert started_first < llm.ended[0]
    assert [e.task_id for e in parsed] == [t["id"] for t in tasks]
    assert parsed[0].since_s < parsed[-1].since_s


@skip_time
async def test_streamed_slow_tools_start_while_the_plan_is_written_and_not_before_otherwise(
    registry: dagagent.Registry, recorder: Any
) -> None:
    # How much faster this makes a run is measured by benchmarks/streamed_planning.py; here
    # only the order of events, which holds on a machine however busy.
    fan = [work(f"slow{i}", 0.6) for i in range(5)]
    note = {
        "id": "note",
        "tool": "echo",
        "args": {
            "value": "summary of " + " ".join(f"${{slow{i}}}" for i in range(5)) + " " + "x" * 300
        },
    }
    answer = plan_text(*fan, note)
    for stream in (True, False):
        llm = Timed(ScriptedLLM([answer], chunk_size=8, chunk_delay_s=0.01))
        planner = LLMPlanner(llm, registry)
        if stream:
            round_ = await plan_and_execute_streamed(planner, "go", registry)
            result = round_.result
        else:
            plan = await planner.plan("go")
            result = await dagagent.execute(
                plan, registry, settings=RunSettings(executor="dataflow")
            )
        assert result.status is dagagent.RunStatus.SUCCEEDED
        starts = [recorder.intervals[f"slow{i}"][0] for i in range(5)]
        if stream:  # every slow tool began while the model was still writing the note
            assert max(starts) < llm.ended[0], (starts, llm.ended)
        else:
            assert min(starts) >= llm.ended[0], (starts, llm.ended)


class Endless:
    """A model whose streamed answer never ends: ``head``, then ``piece(n)`` forever."""

    def __init__(self, head: str, piece: Any, delay: float = 0.001) -> None:
        self.head, self.piece, self.delay = head, piece, delay
        self.sent = 0
        self.closed = False

    async def complete(self, messages: Sequence[Any], **options: Any) -> LLMResponse:
        raise AssertionError("streamed planning streams")

    async def stream(self, messages: Sequence[Any], **options: Any) -> AsyncGenerator[StreamEvent]:
        from dagagent.llm import TextDelta

        try:
            yield TextDelta(self.head)
            n = 0
            while True:
                n += 1
                self.sent += 1
                await anyio.sleep(self.delay)
                yield TextDelta(self.piece(n))
        finally:
            self.closed = True


@skip_time
async def test_a_model_repeating_the_same_task_forever_is_cut_off(
    registry: dagagent.Registry, recorder: Any
) -> None:
    llm = Endless(
        '{"tasks": [', lambda n: json.dumps(work(f"again{n}") | {"args": {"name": "x"}}) + ", "
    )
    t0 = time.perf_counter()
    with pytest.raises(dagagent.PlanningError) as err:
        await plan_and_execute_streamed(LLMPlanner(llm, registry, max_attempts=1), "go", registry)
    assert time.perf_counter() - t0 < 5
    assert llm.closed and llm.sent < 10
    ((_raw, issues),) = err.value.attempts
    assert [i.code for i in issues] == ["repeated_task"]
    assert "repeats itself" in issues[0].message
    assert recorder.calls.get("x", 0) <= 2  # the copies allowed before the cut ran, no more


@skip_time
async def test_a_model_that_never_closes_the_json_is_cut_off(
    registry: dagagent.Registry, recorder: Any
) -> None:
    head = '{"tasks": [' + json.dumps(work("a")) + ", " + json.dumps(work("b")) + '], "goal": "'
    llm = Endless(head, lambda n: "and so on ")
    t0 = time.perf_counter()
    with pytest.raises(dagagent.PlanningError) as err:
        await plan_and_execute_streamed(
            LLMPlanner(llm, registry, max_attempts=1), "go", registry, max_task_chars=2_000
        )
    assert time.perf_counter() - t0 < 5
    assert llm.closed and llm.sent < 400
    ((_raw, issues),) = err.value.attempts
    assert [i.code for i in issues] == ["runaway"]
    assert recorder.calls == {"a": 1}  # a was complete once b began; b never was


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        ({"id": "b", "tool": "nope", "args": {}}, "unknown_tool"),
        ({"id": "b", "tool": "add", "args": {"a": "many", "b": 1}}, "bad_arguments"),
        ({"id": "b", "tool": "echo", "args": {"value": "${b}"}}, "self_dependency"),
    ],
)
async def test_an_invalid_task_stops_the_stream_and_the_model_plans_the_rest(
    registry: dagagent.Registry, recorder: Any, bad: dict[str, Any], code: str
) -> None:
    first = plan_text(
        work("a"), bad, work("never"), {"id": "later", "tool": "add", "args": {"a": 1, "b": 2}}
    )
    second = plan_text(
        {"id": "b", "tool": "echo", "args": {"value": "${a}"}},
    )
    llm = ScriptedLLM([first, second], chunk_size=16)
    # "continue": the task accepted before the invalid one runs to its end, however early
    # the invalid one arrives (under "cancel" it would be stopped with the plan)
    round_ = await plan_and_execute_streamed(
        LLMPlanner(llm, registry), "go", registry, settings=RunSettings(on_failure="continue")
    )
    rejected, accepted = round_.planning.attempts
    assert [i.code for i in rejected.issues] == [code]
    assert accepted.ok
    feedback = llm.requests[1].messages[-1].content
    assert code.split("_")[0] in feedback or "unknown" in feedback or "itself" in feedback
    assert "already ran" in feedback and "- a: output" in feedback
    # a ran once, in the first attempt's run, and is reused by the second; "never" never ran.
    assert recorder.calls == {"a": 1}
    result = round_.result
    assert result.tasks["a"].status is dagagent.TaskStatus.REUSED
    assert result.tasks["b"].output == "a"
    assert [t.id for t in round_.plan.tasks] == ["a", "b"]
    assert len(round_.runs) == 2 and result.parent_id == round_.runs[0].run_id


async def test_a_task_listed_before_the_tasks_it_uses_runs_once_they_have_come(
    registry: dagagent.Registry, recorder: Any
) -> None:
    tasks = [
        {"id": "sum", "tool": "echo", "args": {"value": "${a} and ${b}"}},
        work("a"),
        {"id": "late", "tool": "echo", "args": {"value": "${b}"}},
        work("b"),
    ] + [work(f"t{i}") for i in range(4)]
    llm = Timed(ScriptedLLM([plan_text(*tasks)], chunk_size=8, chunk_delay_s=0.01))
    parsed, listener = events_of(TaskParsed)
    round_ = await plan_and_execute_streamed(
        LLMPlanner(llm, registry), "go", registry, listeners=[listener]
    )
    assert round_.result.status is dagagent.RunStatus.SUCCEEDED
    assert round_.result.tasks["sum"].output == "a and b"
    assert len(llm.inner.requests) == 1  # no second call: the order was no problem
    # accepted (and announced) as soon as their dependencies were: after them, before the end
    order = [e.task_id for e in parsed]
    assert order[:4] == ["a", "b", "sum", "late"]
    assert [t.id for t in round_.plan.tasks][:4] == order[:4]
    assert recorder.intervals["b"][0] < llm.ended[0]  # the run did not wait for the end


async def test_a_task_that_waits_for_a_task_the_plan_never_gives_is_sent_back(
    registry: dagagent.Registry, recorder: Any
) -> None:
    first = plan_text({"id": "b", "tool": "echo", "args": {"value": "${x}"}}, work("a"))
    second = plan_text({"id": "b", "tool": "echo", "args": {"value": "${a}"}})
    llm = ScriptedLLM([first, second], chunk_size=16)
    round_ = await plan_and_execute_streamed(
        LLMPlanner(llm, registry), "go", registry, settings=RunSettings(on_failure="continue")
    )
    rejected, accepted = round_.planning.attempts
    assert [(i.code, i.task_id) for i in rejected.issues] == [("missing_dependency", "b")]
    assert "unknown task 'x'" in llm.requests[1].messages[-1].content
    assert accepted.ok and round_.result.tasks["b"].output == "a"
    assert recorder.calls == {"a": 1}  # ran while b waited, and was reused after


async def test_tasks_waiting_for_each_other_stop_the_stream_at_once(
    registry: dagagent.Registry, recorder: Any
) -> None:
    answer = plan_text(
        {"id": "p", "tool": "echo", "args": {"value": "${q}"}},
        {"id": "q", "tool": "echo", "args": {"value": "${p}"}},
        work("never"),
    )
    llm = ScriptedLLM([answer], chunk_size=16)
    with pytest.raises(dagagent.PlanningError) as err:
        await plan_and_execute_streamed(LLMPlanner(llm, registry, max_attempts=1), "go", registry)
    ((_raw, issues),) = err.value.attempts
    assert [(i.code, i.message) for i in issues] == [("cycle", "dependency cycle: q -> p -> q")]
    assert recorder.calls == {}


async def test_a_held_side_effect_waiting_for_a_later_task_still_waits_for_the_whole_plan(
    registry: dagagent.Registry, recorder: Any
) -> None:
    sent: list[float] = []

    @registry.tool(side_effects=True)
    async def send(to: str) -> str:
        """Send a message."""
        sent.append(anyio.current_time())
        return to

    tasks = [{"id": "mail", "tool": "send", "args": {"to": "${a}"}}, work("a")]
    tasks += [work(f"t{i}") for i in range(5)]
    llm = Timed(ScriptedLLM([plan_text(*tasks)], chunk_size=8, chunk_delay_s=0.01))
    parsed, listener = events_of(TaskParsed)
    round_ = await plan_and_execute_streamed(
        LLMPlanner(llm, registry), "go", registry, listeners=[listener]
    )
    assert round_.result.tasks["mail"].output == "a"
    assert sent and sent[0] >= llm.ended[0]
    assert [(e.task_id, e.held) for e in parsed][:2] == [("a", False), ("mail", True)]


@skip_time
async def test_a_side_effecting_tool_is_held_until_the_plan_is_whole(
    registry: dagagent.Registry, recorder: Any
) -> None:
    sent: list[float] = []

    @registry.tool(side_effects=True)
    async def send(to: str) -> str:
        """Send a message."""
        sent.append(anyio.current_time())
        return to

    tasks = [{"id": "mail", "tool": "send", "args": {"to": "bob"}}, work("after_mail")]
    tasks += [work(f"t{i}") for i in range(5)]
    llm = Timed(ScriptedLLM([plan_text(*tasks)], chunk_size=8, chunk_delay_s=0.01))
    parsed, listener = events_of(TaskParsed)
    round_ = await plan_and_execute_streamed(
        LLMPlanner(llm, registry), "go", registry, listeners=[listener]
    )
    assert round_.result.status is dagagent.RunStatus.SUCCEEDED
    assert sent and sent[0] >= llm.ended[0]
    assert recorder.intervals["after_mail"][0] < llm.ended[0]  # not held: nothing to wait for
    assert [e.held for e in parsed] == [True] + [False] * 6
    assert [t.id for t in round_.plan.tasks][-1] == "mail"  # held tasks join last


async def test_a_held_task_never_runs_when_the_plan_is_rejected(
    registry: dagagent.Registry, recorder: Any
) -> None:
    calls: list[str] = []

    @registry.tool(side_effects=True)
    def send(to: str) -> str:
        """Send a message."""
        calls.append(to)
        return to

    answer = plan_text(
        {"id": "mail", "tool": "send", "args": {"to": "bob"}},
        work("a"),
        {"id": "x", "tool": "nope"},
    )
    llm = ScriptedLLM([answer])
    with pytest.raises(dagagent.PlanningError):
        await plan_and_execute_streamed(LLMPlanner(llm, registry, max_attempts=1), "go", registry)
    assert calls == []


async def test_a_task_a_policy_would_ask_about_is_held(
    registry: dagagent.Registry, recorder: Any
) -> None:
    asked: list[str] = []
    policy = Policy(
        [Rule(tool="work", args={"name": "ask*"}, action="ask")],
        ask=lambda r: asked.append(r.task_id) or True,
    )
    answer = plan_text(work("ask_me"), work("free"))
    parsed, listener = events_of(TaskParsed)
    round_ = await plan_and_execute_streamed(
        LLMPlanner(ScriptedLLM([answer]), registry),
        "go",
        registry,
        policy=policy,
        interceptors=[policy],
        listeners=[listener],
    )
    assert round_.result.status is dagagent.RunStatus.SUCCEEDED
    assert [(e.task_id, e.held) for e in parsed] == [("ask_me", True), ("free", False)]
    assert asked == ["ask_me"]


async def test_streaming_over_sse_from_an_openai_compatible_server(
    registry: dagagent.Registry, recorder: Any, server: LLMTestServer
) -> None:
    answer = plan_text(work("a"), {"id": "b", "tool": "echo", "args": {"value": "${a}"}})
    server.push(OPENAI.sse(wire.openai_text(answer)))
    async with OPENAI.client(server) as llm:
        round_ = await plan_and_execute_streamed(LLMPlanner(llm, registry), "go", registry)
    body = server.requests[0].json
    assert body["stream"] is True and body["max_tokens"] > 0
    assert round_.result.tasks["b"].output == "a"


async def test_streaming_anthropic_style(registry: dagagent.Registry, recorder: Any) -> None:
    plan = {
        "goal": "g",
        "tasks": [work("a"), {"id": "b", "tool": "echo", "args": {"value": "${a}"}}],
    }
    llm = ScriptedLLM.anthropic([wire.anthropic_tool_use([("dagagent_plan", plan)])], chunk_size=5)
    async with llm:
        round_ = await plan_and_execute_streamed(LLMPlanner(llm, registry), "go", registry)
    assert llm.wire_requests[0]["stream"] is True
    assert round_.result.tasks["b"].output == "a"
    assert round_.planning.usage.output_tokens >= 0


async def test_the_store_keeps_every_attempt_with_its_whole_plan(
    registry: dagagent.Registry, recorder: Any, tmp_path: Any
) -> None:
    first = plan_text(work("a"), {"id": "b", "tool": "nope", "args": {}})
    second = plan_text({"id": "b", "tool": "echo", "args": {"value": "${a}"}})
    store = dagagent.RunStore(tmp_path / "runs.db")
    round_ = await plan_and_execute_streamed(
        LLMPlanner(ScriptedLLM([first, second]), registry),
        "go",
        registry,
        store=store,
        settings=RunSettings(on_failure="continue"),  # "a" runs to its end: see above
    )
    stopped, final = (store.get_run(r.run_id) for r in round_.runs)
    assert [t.id for t in stopped.plan.tasks] == ["a"]  # the invalid task never joined
    assert stopped.tasks["a"].status is dagagent.TaskStatus.SUCCEEDED
    assert [t.id for t in final.plan.tasks] == ["a", "b"]
    assert final.parent_id == stopped.run_id
    assert final.tasks["a"].status is dagagent.TaskStatus.REUSED
    assert final.tasks["b"].output == "a"


async def test_a_model_failing_mid_answer_raises_its_own_error_after_the_run(
    registry: dagagent.Registry, recorder: Any
) -> None:
    from dagagent.errors import LLMConnectionError

    def piece(n: int) -> str:
        if n == 3:
            raise LLMConnectionError("the connection dropped")
        return json.dumps(work(f"t{n}", 0.3)) + ", "

    llm = Endless('{"tasks": [', piece)
    with pytest.raises(LLMConnectionError, match="dropped"):
        await plan_and_execute_streamed(
            LLMPlanner(llm, registry), "go", registry, settings=RunSettings(on_failure="continue")
        )
    assert recorder.calls == {"t1": 1}  # t1 was complete (t2 had begun) and ran to its end
    assert recorder.intervals["t1"][1] - recorder.intervals["t1"][0] >= 0.3


@skip_time
async def test_a_streamed_solve_runs_slow_tools_while_the_plan_is_written(
    registry: dagagent.Registry, recorder: Any
) -> None:
    fan = [work(f"slow{i}", 0.6) for i in range(5)]
    refs = " ".join(f"${{slow{i}}}" for i in range(5))
    note = {"id": "note", "tool": "echo", "args": {"value": f"all of {refs} " + "x" * 300}}
    answer = plan_text(*fan, note)
    finish = json.dumps({"action": "finish", "answer": "done", "cites": ["note"]})
    for stream in (False, True):
        llm = Timed(ScriptedLLM([answer, finish], chunk_size=8, chunk_delay_s=0.01))
        solution = await dagagent.solve("go", registry, llm, stream=stream)
        assert solution.ok and solution.answer == "done"
        starts = [recorder.intervals[f"slow{i}"][0] for i in range(5)]
        planned = llm.ended[0]  # the planner's answer ended (the joiner's comes after)
        if stream:
            assert max(starts) < planned, (starts, llm.ended)
        else:
            assert min(starts) >= planned, (starts, llm.ended)


@skip_time
async def test_an_llmcompiler_answer_streams_line_by_line(
    registry: dagagent.Registry, recorder: Any
) -> None:
    answer = (
        "Thought: look both up.\n"
        '1. work("p", 0.6)\n'
        '2. work("q")\n'
        "Thought: then echo\n"
        "3. echo($1)\n"
        + "".join(f"{n}. add({n}, {n})\n" for n in range(4, 30))
        + "30. join()<END_OF_PLAN>\nthis is never read"
    )
    llm = Timed(ScriptedLLM([answer], chunk_size=4, chunk_delay_s=0.01))
    round_ = await plan_and_execute_streamed(LLMPlanner(llm, registry), "go", registry)
    assert round_.result.status is dagagent.RunStatus.SUCCEEDED
    assert round_.result.tasks["3"].output == "p"
    assert round_.plan.tasks[2].description == "then echo"
    assert len(round_.plan.tasks) == 29
    assert recorder.intervals["p"][0] < llm.ended[0]  # started while lines kept coming


async def test_a_malformed_llmcompiler_line_stops_the_stream(
    registry: dagagent.Registry, recorder: Any
) -> None:
    answer = '1. work("p")\n2. this is not a call\n3. work("never")\n'
    with pytest.raises(dagagent.PlanningError) as err:
        await plan_and_execute_streamed(
            LLMPlanner(ScriptedLLM([answer]), registry, max_attempts=1), "go", registry
        )
    ((_raw, issues),) = err.value.attempts
    assert issues[0].code == "schema" and "line 2" in issues[0].message
    assert "never" not in recorder.calls


async def test_a_solve_counts_the_planner_answers_it_cut_off(
    registry: dagagent.Registry, recorder: Any
) -> None:
    bad = plan_text(work("a"), {"id": "b", "tool": "nope", "args": {}}, work("c"))
    good = plan_text({"id": "b", "tool": "echo", "args": {"value": "${a}"}})
    finish = json.dumps({"action": "finish", "answer": "a", "cites": ["b"]})
    events: list[Any] = []
    solution = await dagagent.solve(
        "go", registry, ScriptedLLM([bad, good, finish]), listeners=[events.append]
    )
    assert solution.ok and solution.answer == "a"
    assert solution.usage.planner.calls == 2  # the rejected answer was a call too
    assert recorder.calls == {"a": 1}
    parsed = [e.task_id for e in events if isinstance(e, TaskParsed)]
    assert parsed == ["a", "b"]  # the first answer's a, then the second's b; never c
