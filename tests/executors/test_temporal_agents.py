"""Agent tasks of a plain run (``dagagent run --model``, ``execute(llm=...)``) on the Temporal
executor: the driver sends the workers the model as a spec without its key, a worker makes
the agent's model calls with its own key, and the driver records them in the run store with
the run and the task, as a local run does.

The model is a loopback server speaking OpenAI's wire format (:class:`~llm_server.LLMTestServer`),
called by the ``dagagent worker`` processes of :mod:`.temporal_fixtures`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import dagagent
from dagagent.errors import ConfigError
from dagagent.llm import ScriptedLLM, wire
from dagagent.settings import RunSettings, TaskRetryPolicy

pytest.importorskip("temporalio")

import temporal_tools  # the workers import it too
from llm_server import LLMTestServer, Recorded, Reply

from dagagent.executors.temporal import TemporalExecutor

from .temporal_fixtures import TOOLS, WORKER_KEY, Workers

pytestmark = [pytest.mark.slow, pytest.mark.asyncio_only("Temporal's client runs on asyncio")]

DRIVER_KEY = "sk-driver-only-secret"
FAST_RETRY = TaskRetryPolicy(base_delay_s=0.01, jitter=0)

PLAN = {
    "goal": "g",
    "tasks": [
        {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
        {"id": "think", "instruction": "Say what ${a} is.", "depends_on": ["a"]},
        {"id": "echoed", "tool": "echo", "args": {"value": "${think}"}},
    ],
}


class Agent:
    """The agent's model: it answers each request with the next text, saying it used
    ``100 + n`` input tokens for request ``n``; it keeps what it was asked."""

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.asked: list[str] = []

    def __call__(self, request: Recorded) -> Reply:
        self.asked.append(json.dumps(request.json["messages"]))
        n = len(self.asked)
        text = self.texts.pop(0)
        return Reply(json=wire.openai_text(text, input_tokens=100 + n, output_tokens=7))


@pytest.fixture
def model_server() -> Iterator[LLMTestServer]:
    with LLMTestServer() as srv:
        yield srv


def executor(workers: Workers) -> TemporalExecutor:
    return TemporalExecutor(workers.address, task_queue=workers.queue, payloads=workers.payloads)


@pytest.mark.anyio
async def test_an_agent_task_of_a_run_runs_on_a_worker_its_calls_recorded(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """``execute`` with a model: the agent task runs on a worker (with the worker's key: the
    driver's never travels), reads its dependency's output, and its answer feeds a tool task;
    the run's usage counts the agent's call."""
    agent = Agent("It is three.")
    model_server.responder = agent
    store = tmp_path / "runs.db"
    llm = dagagent.llm.OpenAIChat("gpt-test", base_url=f"{model_server.url}/v1", api_key=DRIVER_KEY)
    async with llm:
        result = await dagagent.execute(
            PLAN,
            temporal_tools.registry,
            llm=llm,
            settings=RunSettings(executor=executor(workers), retry=FAST_RETRY),
            store=store,
        )
    assert result.ok, {t: r.error for t, r in result.tasks.items()}
    assert result.tasks["think"].output == "It is three."
    assert result.tasks["echoed"].output == "It is three."
    assert "3" in agent.asked[0]  # ${a}, resolved on the worker
    assert {r.headers["authorization"] for r in model_server.requests} == {f"Bearer {WORKER_KEY}"}
    assert result.usage is not None and result.usage.input_tokens == 101
    with dagagent.RunStore(store) as runs:
        recorded = runs.get_run(result.run_id)
        assert recorded.tasks["think"].output == "It is three."
        assert recorded.tasks["think"].worker  # it ran on a worker, which is on record


def test_run_model_on_temporal_records_the_agents_calls_and_steps(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """``dagagent run --model --executor temporal`` (in process): each model call of the agent
    is a record of the run and its task, numbered and priced by the driver, and ``show
    --task`` lists the agent's steps."""
    model_server.responder = Agent("It is three.")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(PLAN))
    store = tmp_path / "runs.db"
    cli = CliRunner()
    ran = cli.invoke(
        dagagent.cli.app,
        ["run", str(plan_file), "--tools", TOOLS, "--executor", "temporal",
         "--temporal-address", workers.address, "--task-queue", workers.queue,
         "--payload-store", str(workers.payloads), "--store", str(store), "--json",
         "--model", "openai:gpt-4o-mini", "--base-url", f"{model_server.url}/v1"],
        env={"OPENAI_API_KEY": DRIVER_KEY},
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    with dagagent.RunStore(store) as runs:
        [run] = runs.list_runs()
        calls = runs.model_calls(run_id=run.run_id)
    assert [(c.role, c.task_id, c.seq, c.run_id) for c in calls] == [
        ("agent", "think", 1, run.run_id)
    ]
    [call] = calls
    assert call.model == "gpt-4o-mini"
    assert (call.input_tokens, call.output_tokens) == (101, 7)
    assert call.cost_usd is not None and call.cost_usd > 0  # the driver's prices
    assert call.text == "It is three."
    assert {r.headers["authorization"] for r in model_server.requests} == {f"Bearer {WORKER_KEY}"}
    shown = cli.invoke(
        dagagent.cli.app, ["show", run.run_id, "--task", "think", "--store", str(store)]
    )
    assert shown.exit_code == 0, shown.output
    assert "It is three." in shown.output
    assert "agent steps (1 model turn)" in shown.output
    assert "answer: It is three." in shown.output
    assert re.search(r"1\s+agent think\s+answered", shown.output), shown.output


@pytest.mark.anyio
async def test_a_model_the_workers_cannot_build_is_refused_before_anything_runs(
    workers: Workers, tmp_path: Path
) -> None:
    store = tmp_path / "runs.db"
    with pytest.raises(ConfigError, match="needs a model its workers can build from a spec"):
        await dagagent.execute(
            PLAN,
            temporal_tools.registry,
            llm=ScriptedLLM(["x"]),
            settings=RunSettings(executor=executor(workers)),
            store=store,
        )
    # nothing ran: no workflow, no task recorded
    if store.exists():
        with dagagent.RunStore(store) as runs:
            assert all(not r.tasks for r in runs.list_runs())


def test_the_workers_redacting_interceptors_hide_secrets_in_the_agents_records(
    own_workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """What the agent wrote is on record as the worker's redacting interceptors leave it, as
    a local run's redacting interceptors leave it."""
    own_workers.start(1, "--interceptors", "temporal_tools:redactors")
    model_server.responder = Agent("The key is sk-abc123.")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(
        json.dumps({"goal": "g", "tasks": [{"id": "think", "instruction": "Say the key."}]})
    )
    store = tmp_path / "runs.db"
    ran = CliRunner().invoke(
        dagagent.cli.app,
        ["run", str(plan_file), "--tools", TOOLS, "--executor", "temporal",
         "--temporal-address", own_workers.address, "--task-queue", own_workers.queue,
         "--payload-store", str(own_workers.payloads), "--store", str(store), "--json",
         "--model", "openai:gpt-test", "--base-url", f"{model_server.url}/v1"],
        env={"OPENAI_API_KEY": DRIVER_KEY},
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    with dagagent.RunStore(store) as runs:
        [run] = runs.list_runs()
        [call] = runs.model_calls(run_id=run.run_id)
    assert call.task_id == "think"
    assert "sk-abc123" not in call.text
    assert "[redacted]" in call.text


@pytest.mark.anyio
async def test_an_agent_task_added_to_a_plan_being_written_runs_on_a_worker(
    workers: Workers, model_server: LLMTestServer
) -> None:
    """A plan still being written when the run starts, with a model: the agent task that
    joins it after its first task finished (it reaches the workflow as a signal) runs on a
    worker with the run's model."""
    from dagagent.events import TaskFinished
    from dagagent.graph import GrowingGraph, PlanChecker
    from dagagent.plan import AgentTask, ToolTask

    model_server.responder = Agent("It is three.")
    graph = GrowingGraph("streamed")
    checker = PlanChecker(temporal_tools.registry)
    graph.add(checker.check(ToolTask(id="a", tool="add", args={"a": 1, "b": 2})))

    def more(event: object) -> None:
        if isinstance(event, TaskFinished) and event.result.task_id == "a":
            graph.add(checker.check(AgentTask(id="think", instruction="Say what ${a} is.")))
            graph.close()

    llm = dagagent.llm.OpenAIChat("gpt-test", base_url=f"{model_server.url}/v1", api_key=DRIVER_KEY)
    async with llm:
        result = await dagagent.execute(
            graph,
            temporal_tools.registry,
            llm=llm,
            settings=RunSettings(executor=executor(workers), retry=FAST_RETRY),
            listeners=[more],
        )
    assert result.ok, {t: r.error for t, r in result.tasks.items()}
    assert result.tasks["think"].output == "It is three."
    assert result.tasks["think"].worker
    assert {r.headers["authorization"] for r in model_server.requests} == {f"Bearer {WORKER_KEY}"}
