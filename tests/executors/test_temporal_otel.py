"""OpenTelemetry on Temporal: a run, or a solve, is one trace from its driver to the workers.

The driver (this process) exports to memory; a ``dagagent worker --otel`` process exports
over OTLP/HTTP to a loopback collector the test starts, configured by the standard
``OTEL_*`` variables alone. The spans of the tasks, and of the model calls (an agent task's,
a solve's planner's and joiner's), are made on the worker, where they ran, as children of
the run's (or the solve's) span on the driver; the workflows that carried the context
replay as they ran.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("temporalio")

import temporal_tools  # the workers import it too
from eventually import wait_until
from llm_server import LLMTestServer, Reply
from otel_support import Collector, Telemetry, in_memory

import dagagent
from dagagent.executors.temporal import TemporalExecutor
from dagagent.llm import wire
from dagagent.settings import RunSettings, TaskRetryPolicy
from dagagent.workflows.temporal_solve import solve_workflow_id

from .temporal_fixtures import Workers
from .test_temporal import replay
from .test_temporal_solve import Model, client_of, history_of, replay as replay_solve

pytestmark = [pytest.mark.slow, pytest.mark.asyncio_only("Temporal's client runs on asyncio")]

TRACED = "temporal_tools:traced"


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.server.shutdown()
    c.server.server_close()


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    with in_memory() as t:
        yield t


@pytest.fixture
def model_server() -> Iterator[LLMTestServer]:
    with LLMTestServer() as srv:
        yield srv


def _attrs(span: Any) -> dict[str, Any]:
    """An OTLP span's attributes as plain values."""
    return {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in span.attributes}


@pytest.mark.anyio
async def test_a_run_on_temporal_is_one_trace_from_driver_to_worker(
    own_workers: Workers, collector: Collector, otel: Telemetry, model_server: LLMTestServer
) -> None:
    own_workers.start(
        1,
        "--otel",
        tools=TRACED,
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
            "OTEL_SERVICE_NAME": "the-worker",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_BSP_SCHEDULE_DELAY": "20",  # sent as they end: the test waits for them
        },
    )
    ex = TemporalExecutor(
        own_workers.address, task_queue=own_workers.queue, payloads=own_workers.payloads
    )
    plan = {
        "tasks": [
            {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
            {"id": "ctx", "tool": "trace_context", "args": {}},
            {"id": "f", "tool": "boom", "args": {"x": "${a}"}, "retries": 1},
            {"id": "think", "instruction": "Say what ${a} is."},
        ]
    }
    model_server.responder = lambda _request: Reply(json=wire.openai_text("It is three."))
    settings = RunSettings(
        executor=ex, on_failure="continue", retry=TaskRetryPolicy(base_delay_s=0.01, jitter=0)
    )
    async with client_of(model_server) as llm:
        result = await dagagent.execute(plan, None, llm=llm, settings=settings)
    assert result.tasks["a"].output == 3 and result.tasks["f"].attempts == 2, result.tasks
    assert result.tasks["think"].output == "It is three."

    # the driver: the run's span, and no task span (the tasks ran on the worker)
    (run,) = otel.finished()
    assert run.name == "invoke_workflow dagagent.run"
    assert run.attributes is not None and run.attributes["dagagent.executor"] == "temporal"
    trace_id = run.context.trace_id.to_bytes(16, "big")
    run_span_id = run.context.span_id.to_bytes(8, "big")

    # the worker: one span per attempt, in the run's trace, children of the run's span
    def tool_spans() -> list[Any]:
        found = [s for s, _ in collector.received_spans() if s.name.startswith("execute_tool")]
        return found if len(found) >= 4 else []

    spans = wait_until(tool_spans, "the worker's four task spans reached the collector")
    assert sorted(s.name for s in spans) == [
        "execute_tool add",
        "execute_tool boom",
        "execute_tool boom",
        "execute_tool trace_context",
    ]
    assert {service for _, service in collector.received_spans()} == {"the-worker"}
    for s in spans:
        assert (s.trace_id, s.parent_span_id) == (trace_id, run_span_id), s.name
    by_task = {
        (_attrs(s)["dagagent.task.id"], _attrs(s)["dagagent.task.attempt"]): s for s in spans
    }
    assert set(by_task) == {("a", 1), ("ctx", 1), ("f", 1), ("f", 2)}
    added = _attrs(by_task["a", 1])
    assert added["dagagent.task.status"] == "succeeded"
    assert added["gen_ai.tool.name"] == "add" and added["dagagent.run.id"] == result.run_id
    assert added["gen_ai.tool.call.id"] == f"{result.run_id}/a"
    for attempt in (1, 2):  # a failing task's spans: its error, each attempt
        failed = by_task["f", attempt]
        attrs = _attrs(failed)
        assert attrs["dagagent.task.status"] == "failed" and attrs["error.type"] == "ValueError"
        assert failed.status.code == failed.status.STATUS_CODE_ERROR
        (event,) = [e for e in failed.events if e.name == "exception"]
        assert "boom 3" in str(_attrs(event)["exception.message"])
        assert "temporal_tools.py" in str(_attrs(event)["exception.stacktrace"])

    # an agent task's attempt, with its model call under it
    def agent_spans() -> dict[str, Any]:
        found = {s.name: s for s, _ in collector.received_spans()}
        return found if {"invoke_agent think", "chat gpt-test"} <= set(found) else {}

    found = wait_until(agent_spans, "the worker's agent task spans reached the collector")
    agent, chat = found["invoke_agent think"], found["chat gpt-test"]
    assert (agent.trace_id, agent.parent_span_id) == (trace_id, run_span_id)
    assert _attrs(agent)["dagagent.task.status"] == "succeeded"
    assert (chat.trace_id, chat.parent_span_id) == (trace_id, agent.span_id)
    assert _attrs(chat)["dagagent.role"] == "agent"

    # a tool's own instrumentation nests under its task's span, on the worker
    seen = result.tasks["ctx"].output
    ctx_span = by_task["ctx", 1]
    assert seen["trace_id"].to_bytes(16, "big") == trace_id
    assert seen["span_id"].to_bytes(8, "big") == ctx_span.span_id

    # the workflow that carried the trace context replays as it ran
    await replay(ex)


@pytest.mark.anyio
async def test_a_solve_on_temporal_is_one_trace_with_the_workers_model_calls(
    own_workers: Workers, collector: Collector, otel: Telemetry, model_server: LLMTestServer
) -> None:
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
            {"id": "ctx", "tool": "trace_context", "args": {}},
        ],
    }
    model_server.responder = Model([plan], [{"action": "finish", "answer": "3", "cites": ["a"]}])
    own_workers.start(
        1,
        "--otel",
        tools=TRACED,
        env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
            "OTEL_SERVICE_NAME": "the-worker",
            "OTEL_BSP_SCHEDULE_DELAY": "20",
            "OTEL_METRIC_EXPORT_INTERVAL": "50",
        },
    )
    ex = TemporalExecutor(
        own_workers.address, task_queue=own_workers.queue, payloads=own_workers.payloads
    )
    async with client_of(model_server) as llm:
        solution = await dagagent.solve(
            "add 1 and 2",
            temporal_tools.traced,
            llm,
            settings=RunSettings(executor=ex, retry=TaskRetryPolicy(base_delay_s=0.01)),
        )
    assert solution.status.value == "answered", solution.reason

    # the driver: the solve's span, and its round's run (followed here) under it
    (solve,) = otel.named("invoke_workflow dagagent.solve")
    assert solve.attributes is not None
    assert solve.attributes["dagagent.solve.id"] == solution.solve_id
    assert solve.attributes["dagagent.solve.status"] == "answered"
    (run,) = otel.named("invoke_workflow dagagent.run")
    assert run.parent is not None and run.parent.span_id == solve.context.span_id
    trace_id = solve.context.trace_id.to_bytes(16, "big")
    solve_span_id = solve.context.span_id.to_bytes(8, "big")

    # the worker: the planner's and the joiner's steps with their model calls, the tasks
    def received() -> dict[str, list[Any]]:
        by_name: dict[str, list[Any]] = {}
        for s, _ in collector.received_spans():
            by_name.setdefault(s.name, []).append(s)
        wanted = ("plan planner", "invoke_agent joiner", "execute_tool add")
        return by_name if all(w in by_name for w in wanted) else {}

    spans = wait_until(received, "the worker's spans of the solve reached the collector")
    assert len(spans["chat gpt-test"]) == 2
    assert "invoke_workflow dagagent.run" not in spans  # the round's run is the driver's
    for name in ("plan planner", "invoke_agent joiner", "execute_tool add"):
        (span,) = spans[name]
        assert (span.trace_id, span.parent_span_id) == (trace_id, solve_span_id), name
    for role, step in (("planner", "plan planner"), ("joiner", "invoke_agent joiner")):
        (chat,) = [c for c in spans["chat gpt-test"] if _attrs(c)["dagagent.role"] == role]
        assert chat.parent_span_id == spans[step][0].span_id and chat.trace_id == trace_id
        assert _attrs(chat)["dagagent.round"] == 1
        assert _attrs(chat)["dagagent.solve.id"] == solution.solve_id
    (ctx_span,) = spans["execute_tool trace_context"]
    seen = solution.rounds[0].result.tasks["ctx"].output  # type: ignore[union-attr]
    assert seen["span_id"].to_bytes(8, "big") == ctx_span.span_id

    # the workers' metrics: their model calls' tokens (the tasks' are the driver's)
    names = wait_until(
        lambda: (n := collector.metric_names()) and "gen_ai.client.token.usage" in n and n,
        "the worker's model-call metrics reached the collector",
    )
    assert "dagagent.tasks" not in names
    counted = {
        (p.attributes["gen_ai.tool.name"], p.attributes["dagagent.task.status"]): p.value
        for p in otel.points("dagagent.tasks")
    }
    assert counted == {("add", "succeeded"): 1, ("trace_context", "succeeded"): 1}

    # the solve's workflow, which carried the context to its steps and its round, replays
    _, history = await history_of(ex, solve_workflow_id(solution.solve_id))
    await replay_solve(ex, history)
