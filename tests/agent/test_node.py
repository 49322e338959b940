"""Agent tasks in plans: execute() with an llm, the CLI's --model, and failures."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import structlog
from llm_server import LLMTestServer, Reply
from typer.testing import CliRunner

import dagagent
from dagagent import Registry, TaskDeniedError, TaskStatus
from dagagent.agent import AgentLimits, AgentStoppedError, make_agent_runner
from dagagent.cli import app
from dagagent.errors import AgentError
from dagagent.events import TaskAgentEvent, TaskFinished, TaskStarted
from dagagent.llm import (
    HTTPRetryPolicy,
    LLMRequest,
    LLMResponse,
    ModelSettings,
    ScriptedLLM,
    ToolCall,
    ToolResultMessage,
    UserMessage,
    wire,
)
from dagagent.results import AgentStep, CallRecord
from dagagent.runner import ToolInvocation
from dagagent.settings import RunSettings
from dagagent.text import jsonable

pytestmark = pytest.mark.anyio


PLAN = {
    "goal": "A note about Paris",
    "tasks": [
        {"id": "paris", "tool": "weather", "args": {"city": "Paris"}},
        {
            "id": "note",
            "instruction": "Write one sentence: Paris is ${paris.temp_c} C, plus 2.",
            "tools": ["add"],
        },
        {"id": "loud", "tool": "shout", "args": {"text": "${note}"}},
    ],
}


def call(id: str, name: str, **args: Any) -> ToolCall:
    return ToolCall(id=id, name=name, arguments=args)


def user_text(request: LLMRequest) -> str:
    return "\n".join(m.content for m in request.messages if isinstance(m, UserMessage))


@pytest.mark.parametrize("executor", ["levels", "dataflow", "serial"])
async def test_plan_mixing_tool_and_agent_tasks(tools: Registry, executor: str) -> None:
    with ScriptedLLM(
        [
            LLMResponse(content="adding", tool_calls=[call("c1", "add", a=18, b=2)]),
            "Paris is 20 C.",
        ]
    ) as llm:
        result = await dagagent.execute(
            PLAN, tools, llm=llm, settings=RunSettings(executor=executor)
        )

    assert result.ok, result.tasks
    assert result.outputs == {
        "paris": {"city": "Paris", "temp_c": 18},
        "note": "Paris is 20 C.",
        "loud": "PARIS IS 20 C.",  # the agent's answer fed the next task through ${note}
    }
    first = llm.requests[0]
    assert [t.name for t in first.tools] == ["add"]  # limited to the task's tools
    text = user_text(first)
    assert text.startswith("Write one sentence: Paris is 18 C, plus 2.")  # reference resolved
    assert '- paris: <output>{"city": "Paris", "temp_c": 18}</output>' in text  # as context
    note = result.tasks["note"]
    assert note.steps is not None and note.status is TaskStatus.SUCCEEDED
    assert note.steps[0].calls == [
        CallRecord(id="c1", tool="add", args={"a": 18, "b": 2}, observation="20")
    ]
    assert note.steps[-1].answer == "Paris is 20 C."
    assert json.loads(json.dumps(result.to_json_dict()))["tasks"]["note"]["steps"] == jsonable(
        note.steps
    )


async def test_agent_steps_reach_listeners_as_events(tools: Registry) -> None:
    events: list[Any] = []
    with ScriptedLLM(
        [
            LLMResponse(content="adding", tool_calls=[call("c1", "add", a=18, b=2)]),
            "Paris is 20 C.",
        ]
    ) as llm:
        result = await dagagent.execute(PLAN, tools, llm=llm, listeners=[events.append])
    assert result.ok
    agent = [e for e in events if isinstance(e, TaskAgentEvent)]
    assert {e.task_id for e in agent} == {"note"} and {e.run_id for e in agent} == {result.run_id}
    assert [(e.action, e.step) for e in agent] == [
        ("thought", 1),
        ("tool_call", 1),
        ("tool_result", 1),
        ("answer", 2),
    ]
    assert agent[1].tool == "add" and agent[1].args == {"a": 18, "b": 2}
    assert agent[2].text == "20" and not agent[2].is_error
    assert agent[3].text == "Paris is 20 C."
    # they come while the task runs: after it started, before it finished
    started = next(
        i for i, e in enumerate(events) if isinstance(e, TaskStarted) and e.task_id == "note"
    )
    finished = next(
        i
        for i, e in enumerate(events)
        if isinstance(e, TaskFinished) and e.result.task_id == "note"
    )
    positions = [i for i, e in enumerate(events) if isinstance(e, TaskAgentEvent)]
    assert started < min(positions) and max(positions) < finished
    # The scripted model reports no usage: the tokens are estimated, never 0.
    assert result.usage is not None and result.usage.calls == 2 and result.usage.estimated
    assert result.usage.input_tokens > 0 and result.usage.output_tokens > 0


async def test_text_mode_runner(tools: Registry) -> None:
    runner = make_agent_runner(mode="text", limits=AgentLimits(max_steps=4))
    with ScriptedLLM(
        ['Thought: add\nAction: add\nAction Input: {"a": 18, "b": 2}', "Final Answer: 20 C"]
    ) as llm:
        result = await dagagent.execute(PLAN, tools, llm=llm, agent_runner=runner)
    assert result.outputs["loud"] == "20 C"
    assert llm.requests[0].stop == ["Observation:"] and "[add]" in llm.requests[0].system
    with pytest.raises(AgentError, match="mode"):
        make_agent_runner(mode="chat")  # type: ignore[arg-type]


async def test_through_the_openai_wire_format(tools: Registry) -> None:
    async with ScriptedLLM.openai(
        [wire.openai_tool_calls([("add", {"a": 18, "b": 2})]), wire.openai_text("20")]
    ) as llm:
        result = await dagagent.execute(PLAN, tools, llm=llm)
    assert result.outputs["loud"] == "20"
    sent = llm.wire_requests[1]["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "20"}


async def test_without_llm_the_agent_task_fails_clearly(tools: Registry) -> None:
    graph = dagagent.validate(PLAN, tools, check_llm=True)
    assert [(w.code, w.task_id) for w in graph.warnings] == [("no_llm", "note")]
    assert dagagent.validate(PLAN, tools, llm=ScriptedLLM(), check_llm=True).warnings == []
    result = await dagagent.execute(PLAN, tools)
    note = result.tasks["note"]
    assert note.status is TaskStatus.FAILED and note.error_type == "AgentError"
    assert "needs a model" in (note.error or "") and "llm=" in (note.error or "")
    assert result.tasks["loud"].status in (TaskStatus.SKIPPED, TaskStatus.CANCELLED)
    assert result.tasks["paris"].ok


async def test_a_stop_without_answer_fails_the_task(tools: Registry) -> None:
    plan = json.loads(json.dumps(PLAN))
    plan["tasks"][1]["retries"] = 2  # a stopped agent is not retried
    # (without its best so far: with it, the task would succeed with a partial answer)
    runner = make_agent_runner(limits=AgentLimits(max_steps=2, best_so_far=False))
    with ScriptedLLM(
        [
            LLMResponse(tool_calls=[call("c1", "add", a=1, b=2)]),
            LLMResponse(tool_calls=[call("c2", "add", a=2, b=2)]),
        ]
    ) as llm:
        result = await dagagent.execute(plan, tools, llm=llm, agent_runner=runner)
    note = result.tasks["note"]
    assert note.status is TaskStatus.FAILED and note.attempts == 1
    assert note.error_type == "AgentStoppedError"
    error = note.error or ""
    assert error.startswith("agent task 'note' stopped without an answer (max_steps): ")
    assert 'last steps: #1 add({"a": 1, "b": 2}) -> 3; #2 add({"a": 2, "b": 2}) (not run)' in error
    with pytest.raises(dagagent.RunFailedError, match="max_steps"):
        result.raise_for_status()


async def test_stopped_error_carries_the_steps(tools: Registry) -> None:
    graph = dagagent.validate(PLAN, tools)
    seen: list[AgentStoppedError] = []

    async def keep(node: Any) -> Any:
        try:
            return await make_agent_runner(limits=AgentLimits(max_parse_retries=0))(node)
        except AgentStoppedError as exc:
            seen.append(exc)
            raise

    with ScriptedLLM([""]) as llm:
        await dagagent.execute(graph, tools, llm=llm, agent_runner=keep)
    (exc,) = seen
    assert exc.stop_reason == "no_answer" and exc.task_id == "note"
    assert exc.steps == [AgentStep(step=1, error="the reply was empty (no text, no tool call)")]


async def test_denied_call_is_an_observation_in_a_plan(tools: Registry) -> None:
    async def no_agent_shouting(call: ToolInvocation, call_next: Any) -> Any:
        if call.source == "agent" and call.tool_name == "shout":
            call.decide("deny", "rule:quiet", "agents may not shout")
            raise TaskDeniedError("agents may not shout", decided_by="rule:quiet")
        return await call_next(call)

    plan = {
        "goal": "g",
        "tasks": [{"id": "a", "instruction": "Say hi loudly", "tools": ["shout"]}],
    }
    with ScriptedLLM(
        [LLMResponse(tool_calls=[call("c1", "shout", text="hi")]), "hi (quietly)"]
    ) as llm:
        result = await dagagent.execute(plan, tools, llm=llm, interceptors=[no_agent_shouting])
    task = result.tasks["a"]
    assert task.status is TaskStatus.SUCCEEDED and task.output == "hi (quietly)"
    (msg,) = [m for m in llm.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert msg.is_error and msg.content == "denied: agents may not shout"
    assert task.decisions is not None and task.decisions[0].decision == "deny"
    assert task.steps is not None and task.steps[0].calls[0].is_error is True


@pytest.mark.skip_time
async def test_task_timeout_wraps_the_agent_run(tools: Registry) -> None:
    async def slow(request: LLMRequest) -> str:
        await anyio.sleep_forever()  # a model that never answers
        return "late"

    plan = {"goal": "g", "tasks": [{"id": "a", "instruction": "think", "timeout_s": 0.5}]}
    with ScriptedLLM([slow]) as llm:
        with anyio.fail_after(5):
            result = await dagagent.execute(plan, tools, llm=llm)
    assert result.tasks["a"].status is TaskStatus.FAILED
    assert result.tasks["a"].error == "timed out after 0.5 s"


@pytest.mark.skip_time  # every tool here is async: all the waiting is on the event loop
async def test_an_agent_task_cut_off_keeps_the_steps_it_took(tools: Registry) -> None:
    async def slow(request: LLMRequest) -> str:
        await anyio.sleep_forever()  # a model that never answers
        return "late"

    async def plus(a: int, b: int) -> int:
        return a + b

    tools.add(dagagent.Tool(plus, name="plus"))

    def first_step() -> LLMResponse:
        return LLMResponse(tool_calls=[call("c1", "plus", a=1, b=2)])

    # Timed out while waiting on the model for its second step.
    plan = {"goal": "g", "tasks": [{"id": "a", "instruction": "think", "timeout_s": 1.5}]}
    with ScriptedLLM([first_step(), slow]) as llm:
        with anyio.fail_after(5):
            result = await dagagent.execute(plan, tools, llm=llm)
    task = result.tasks["a"]
    # it had found something out: it succeeds with that, marked partial
    assert task.status is TaskStatus.SUCCEEDED and task.partial
    assert task.error == "partial answer: timed out after 1.5 s before the agent answered"
    assert task.output == 'What the tools returned:\n- plus({"a": 1, "b": 2}): 3'
    assert task.steps is not None and task.steps[0].calls[0].observation == "3"

    # Cancelled (a sibling failed) while waiting on the model for its second step.
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "a", "instruction": "think"},
            {"id": "boom", "tool": "weather", "args": {"city": "Atlantis"}, "depends_on": []},
        ],
    }

    async def late_failure(city: str) -> None:
        await anyio.sleep(0.3)
        raise LookupError(city)

    failing = Registry([tools.get("plus"), dagagent.Tool(late_failure, name="weather")])
    with ScriptedLLM([first_step(), slow]) as llm:
        with anyio.fail_after(5):
            result = await dagagent.execute(
                plan, failing, llm=llm, settings=RunSettings(executor="dataflow")
            )
    task = result.tasks["a"]
    assert task.status is TaskStatus.CANCELLED
    assert task.steps is not None and task.steps[0].calls[0].observation == "3"


async def test_an_agent_out_of_steps_gives_its_best_so_far_marked_partial(
    tools: Registry,
) -> None:
    runner = make_agent_runner(limits=AgentLimits(max_steps=2))
    with ScriptedLLM(
        [
            LLMResponse(content="First 1 + 2.", tool_calls=[call("c1", "add", a=1, b=2)]),
            LLMResponse(
                content="Now 3 + 4; the sum so far is 3.", tool_calls=[call("c2", "add", a=3, b=4)]
            ),
        ]
    ) as llm:
        result = await dagagent.execute(PLAN, tools, llm=llm, agent_runner=runner)
    assert result.ok, result.tasks
    note = result.tasks["note"]
    assert note.status is TaskStatus.SUCCEEDED and note.partial and note.attempts == 1
    assert note.error_type == "PartialAnswer"
    assert note.error == (
        "partial answer: the agent stopped before answering (max_steps: used all 2 steps "
        "without reaching an answer)"
    )
    # its last thought, then what its calls returned (the second call was never made)
    assert note.output == (
        'Now 3 + 4; the sum so far is 3.\n\nWhat the tools returned:\n- add({"a": 1, "b": 2}): 3'
    )
    # downstream tasks use it
    assert result.tasks["loud"].output == note.output.upper()


async def test_an_agent_with_nothing_found_still_fails(tools: Registry) -> None:
    runner = make_agent_runner(limits=AgentLimits(max_steps=1))
    plan = {"goal": "g", "tasks": [{"id": "a", "instruction": "think", "tools": ["add"]}]}
    with ScriptedLLM([LLMResponse(tool_calls=[call("c1", "add", a="x", b=2)])]) as llm:
        result = await dagagent.execute(plan, tools, llm=llm, agent_runner=runner)
    task = result.tasks["a"]  # its one call never ran (max_steps stops before it): nothing
    assert task.status is TaskStatus.FAILED and task.error_type == "AgentStoppedError"


def test_the_joiner_and_a_revision_know_a_partial_answer() -> None:
    from dagagent.plan import Plan
    from dagagent.planners.prompts import results_sections
    from dagagent.results import TaskResult
    from dagagent.review import reuse_map
    from dagagent.store import RunRecord

    plan = Plan.model_validate({"goal": "g", "tasks": [{"id": "a", "instruction": "think"}]})
    partial = TaskResult(
        task_id="a",
        status=TaskStatus.SUCCEEDED,
        output="half of it",
        error="partial answer: timed out after 2 s before the agent answered",
        error_type="PartialAnswer",
        args="think",
    )
    (section,) = results_sections(plan, {"a": partial})
    assert (
        "- a: PARTIAL answer only, <error>partial answer: timed out after 2 s before the agent "
        "answered</error>, output so far: <output>half of it</output>"
    ) in section
    record = RunRecord(
        run_id="abcdef012345",
        parent_id=None,
        created=1.0,
        goal="g",
        status="succeeded",
        executor="dataflow",
        started_at=1.0,
        finished_at=2.0,
        critical_path=[],
        critical_path_s=None,
        plan=plan,
        tasks={"a": partial},
    )
    assert reuse_map(record) == {}  # a revision runs it again


# ---------------------------------------------------------------------------- CLI

cli = CliRunner()


@pytest.fixture(autouse=True)
def _restore_structlog() -> Iterator[None]:
    """The CLI configures structlog to print to the stderr CliRunner captures (and closes):
    put the defaults back so later tests do not log to a closed stream."""
    yield
    structlog.reset_defaults()


AGENT_PLAN = {
    "goal": "Paris note",
    "tasks": [
        {"id": "paris", "tool": "get_weather", "args": {"city": "Paris"}},
        {"id": "note", "instruction": "Describe ${paris.condition}", "tools": ["calculate"]},
        {"id": "upper", "tool": "format_report", "args": {"title": "${note}", "lines": []}},
    ],
}


def write_plan(tmp_path: Path) -> str:
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(AGENT_PLAN))
    return str(p)


def test_cli_run_with_model_against_a_loopback_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DAGAGENT_MODEL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    plan = write_plan(tmp_path)
    with LLMTestServer() as server:
        server.push(
            Reply(json=wire.openai_tool_calls([("calculate", {"expression": "6*7"})])),
            Reply(json=wire.openai_text("A fine day (42).")),
        )
        r = cli.invoke(
            app,
            [
                "run", plan, "--json", "--store", str(tmp_path / "runs.db"),
                "--model", "openai:test-model", "--base-url", server.url + "/v1",
            ],
        )  # fmt: skip
        server.check()
        sent = [req.json for req in server.requests]
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["tasks"]["note"]["output"] == "A fine day (42)."
    assert data["tasks"]["note"]["steps"][0]["calls"][0]["observation"] == "42"
    assert data["tasks"]["upper"]["output"].startswith("A fine day (42).")
    assert sent[0]["model"] == "test-model"
    assert [t["function"]["name"] for t in sent[0]["tools"]] == ["calculate"]


def test_cli_model_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = write_plan(tmp_path)
    with LLMTestServer() as server:
        server.push(Reply(json=wire.openai_text("ok")))
        monkeypatch.setenv("DAGAGENT_MODEL", "openai:env-model")
        monkeypatch.setenv("DAGAGENT_BASE_URL", server.url + "/v1")
        r = cli.invoke(app, ["run", plan, "--json", "--store", str(tmp_path / "runs.db")])
        server.check()
        assert server.requests[0].json["model"] == "env-model"
    assert r.exit_code == 0, r.output


def test_cli_without_model_warns_and_fails_the_agent_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DAGAGENT_MODEL", raising=False)
    plan = write_plan(tmp_path)
    r = cli.invoke(app, ["run", plan, "--json", "--store", str(tmp_path / "runs.db")])
    assert r.exit_code == 1
    # once, worded for the command line
    (warning,) = [line for line in r.stderr.splitlines() if "no_llm" in line]
    assert warning.startswith("warning: [no_llm] agent task 'note' will fail without a model")
    assert "--model" in warning and "DAGAGENT_MODEL" in warning and "llm=" not in warning
    data = json.loads(r.stdout)
    assert "needs a model" in data["tasks"]["note"]["error"]
    assert "--model" in data["tasks"]["note"]["error"]
    assert "Traceback" not in r.output


def test_cli_model_option_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAGAGENT_MODEL", raising=False)
    plan = write_plan(tmp_path)
    r = cli.invoke(app, ["run", plan, "--base-url", "http://127.0.0.1:9/v1"])
    assert r.exit_code == 2 and "--base-url needs a model" in r.stderr
    r = cli.invoke(app, ["run", plan, "--model", "nonsense"])
    assert r.exit_code == 2 and "unknown model spec 'nonsense'" in r.stderr
    assert "Traceback" not in r.output


@pytest.mark.skip_time
async def test_tool_timeouts_apply_to_agent_calls() -> None:
    reg = Registry()

    @reg.tool(timeout_s=0.5)
    async def hang() -> str:
        """Never answers in time."""
        await anyio.sleep_forever()  # a model that never answers
        return "late"

    plan = {"goal": "g", "tasks": [{"id": "a", "instruction": "try it"}]}
    with ScriptedLLM([LLMResponse(tool_calls=[call("c1", "hang")]), "it hung"]) as llm:
        with anyio.fail_after(3):
            result = await dagagent.execute(plan, reg, llm=llm)
    assert result.tasks["a"].output == "it hung"
    (msg,) = [m for m in llm.requests[1].messages if isinstance(m, ToolResultMessage)]
    assert msg.is_error and msg.content == "tool 'hang' timed out after 0.5 s"


# ----------------------------------------------------------------------------------------------
# Agent nodes in plans with models that fail, stall or never stop: what the task says,
# what the run store keeps, and what the CLI shows.
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def flaky_tools() -> Registry:
    reg = Registry()

    @reg.tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @reg.tool
    def city(name: str) -> dict[str, Any]:
        """A city record."""
        return {"name": name, "coastal": False, "mayor": None}

    @reg.tool
    async def broken() -> str:
        """Fails after a moment."""
        await anyio.sleep(0.05)
        raise RuntimeError("sensor offline")

    return reg


ONE_AGENT = {"goal": "g", "tasks": [{"id": "sum", "instruction": "Add 1 and 2", "tools": ["add"]}]}


async def test_a_model_that_dies_mid_agent_keeps_the_steps_taken(
    flaky_tools: Registry, tmp_path: Path
) -> None:
    dead = httpx.Response(500, json=wire.openai_error("upstream down"))
    script = [wire.openai_tool_calls([("add", {"a": 1, "b": 2})]), dead, dead]
    store = tmp_path / "runs.db"
    async with ScriptedLLM.openai(
        script, settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=1))
    ) as llm:
        result = await dagagent.execute(ONE_AGENT, flaky_tools, llm=llm, store=store)
    task = result.tasks["sum"]
    assert task.status is TaskStatus.FAILED and task.error_type == "LLMServerError"
    assert "HTTP 500" in (task.error or "") and "upstream down" in (task.error or "")
    assert task.steps is not None
    assert task.steps[0].calls[0].observation == "3"  # done before the model died

    shown = CliRunner().invoke(app, ["show", result.run_id, "--json", "--store", str(store)])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["tasks"]["sum"]["steps"] == jsonable(task.steps)


async def test_a_model_error_is_retried_by_the_tasks_retries(flaky_tools: Registry) -> None:
    plan = json.loads(json.dumps(ONE_AGENT))
    plan["tasks"][0]["retries"] = 1
    dead = httpx.Response(500, json=wire.openai_error("down"))
    add = wire.openai_tool_calls([("add", {"a": 1, "b": 2})])
    script = [add, dead, add, wire.openai_text("3")]  # attempt 1 dies after a call; 2 answers
    async with ScriptedLLM.openai(
        script, settings=ModelSettings(retry=HTTPRetryPolicy(max_retries=0))
    ) as llm:
        result = await dagagent.execute(plan, flaky_tools, llm=llm)
    task = result.tasks["sum"]
    assert (task.status, task.attempts, task.output) == (TaskStatus.SUCCEEDED, 2, "3")
    assert task.steps is not None and len(task.steps) == 2  # the attempt that succeeded


async def test_stopped_agent_steps_are_recorded_by_the_store(
    flaky_tools: Registry, tmp_path: Path
) -> None:
    store = tmp_path / "runs.db"
    forever = [wire.anthropic_tool_use([("add", {"a": i, "b": 1})]) for i in range(10)]
    async with ScriptedLLM.anthropic(forever) as llm:
        result = await dagagent.execute(ONE_AGENT, flaky_tools, llm=llm, store=store)
    task = result.tasks["sum"]
    # out of steps with results found: its best so far, marked partial, recorded as such
    assert task.partial and "(max_steps: " in (task.error or "")
    assert task.steps is not None and len(task.steps) == 10
    shown = CliRunner().invoke(app, ["show", result.run_id, "--json", "--store", str(store)])
    doc = json.loads(shown.stdout)["tasks"]["sum"]
    assert doc["steps"] == jsonable(task.steps)
    assert (doc["status"], doc["error_type"]) == ("succeeded", "PartialAnswer")
    with dagagent.RunStore(store) as runs:
        assert runs.get_run(result.run_id).tasks["sum"].partial
    one = CliRunner().invoke(app, ["show", result.run_id, "--task", "sum", "--store", str(store)])
    assert "partial: partial answer: the agent stopped before answering (max_steps" in one.output


async def test_an_instruction_that_is_one_reference_is_shown_as_json(flaky_tools: Registry) -> None:
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "paris", "tool": "city", "args": {"name": "Paris"}},
            {"id": "note", "instruction": "${paris}"},
            {"id": "flag", "instruction": "${paris.coastal}"},
        ],
    }
    with ScriptedLLM(["a note", "a flag"]) as llm:
        result = await dagagent.execute(
            plan, flaky_tools, llm=llm, settings=RunSettings(executor="serial")
        )
    assert result.ok
    firsts = [next(m for m in r.messages if isinstance(m, UserMessage)) for r in llm.requests]
    assert firsts[0].content.startswith('{"name": "Paris", "coastal": false, "mayor": null}\n')
    assert firsts[1].content.startswith("False\n")  # as "${paris.coastal}" in text reads


@pytest.mark.skip_time  # the sensor fails once the agent waits on the model
@pytest.mark.parametrize("executor", ["levels", "dataflow"])
async def test_fail_fast_cancels_an_agent_waiting_on_the_model(
    flaky_tools: Registry, executor: str
) -> None:
    async def stalled(body: dict[str, Any]) -> dict[str, Any]:
        await anyio.sleep_forever()  # a model that never answers
        return wire.openai_text("late")

    plan = {
        "goal": "g",
        "tasks": [
            {"id": "think", "instruction": "Think hard"},
            {"id": "sensor", "tool": "broken", "args": {}},
        ],
    }
    async with ScriptedLLM.openai([stalled]) as llm:
        with anyio.fail_after(10):
            t0 = anyio.current_time()
            result = await dagagent.execute(
                plan, flaky_tools, llm=llm, settings=RunSettings(executor=executor)
            )
            elapsed = anyio.current_time() - t0
    assert elapsed < 5  # not the 30 s the model would take
    assert result.tasks["sensor"].status is TaskStatus.FAILED
    assert result.tasks["think"].status is TaskStatus.CANCELLED


# ---------------------------------------------------------------------------- CLI


def test_cli_model_that_repeats_itself_gives_its_best_so_far_marked_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DAGAGENT_MODEL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"goal": "g", "tasks": [{"id": "calc", "instruction": "6*7?", "tools": ["calculate"]}]}
        )
    )
    again = wire.openai_tool_calls([("calculate", {"expression": "6*7"})])
    with LLMTestServer() as server:
        server.push(*[Reply(json=again)] * 3)
        r = CliRunner().invoke(
            app,
            [
                "run", str(plan), "--json", "--store", str(tmp_path / "runs.db"),
                "--model", "openai:m", "--base-url", server.url + "/v1",
            ],
        )  # fmt: skip
        server.check()
    assert r.exit_code == 0, r.output
    task = json.loads(r.stdout)["tasks"]["calc"]
    assert (task["status"], task["error_type"]) == ("succeeded", "PartialAnswer")
    assert task["error"].startswith(
        "partial answer: the agent stopped before answering (loop: stuck: asked for calculate"
    )
    assert task["output"] == 'What the tools returned:\n- calculate({"expression": "6*7"}): 42'
    assert [c.get("observation") for s in task["steps"] for c in s["calls"]] == ["42", "42", None]
    assert "Traceback" not in r.output
