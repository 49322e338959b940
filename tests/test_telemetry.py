"""OpenTelemetry: the span tree of a run (fan-out, retry, failure, agent task, reuse) read from
the SDK's in-memory exporter, attribute names against the GenAI conventions, redaction,
context in a sync tool's thread, chat spans and metrics of model calls, and nothing at all
(no span, no import) without a provider or without the package."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_support import Telemetry, _reset_globals, in_memory

import dagagent
from dagagent import TaskRetryPolicy, execute, telemetry
from dagagent.interceptors import redacting
from dagagent.llm import LLMResponse, ScriptedLLM, ToolCall
from dagagent.plan import Plan
from dagagent.runner import task_fingerprint
from dagagent.settings import RunSettings

pytestmark = pytest.mark.anyio

FAST_RETRY = TaskRetryPolicy(base_delay_s=0.001, max_delay_s=0.01)


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    """Global tracer and meter providers of the SDK, exporting to memory, for one test."""
    with in_memory() as t:
        try:
            yield t
        finally:
            telemetry.capture_content(None)


@pytest.fixture
def reg() -> dagagent.Registry:
    reg = dagagent.Registry()
    state = {"flaky": 0}

    @reg.tool
    async def fetch(name: str) -> str:
        """Fetch a thing."""
        return f"got {name}"

    @reg.tool
    async def join(parts: list[str]) -> str:
        """Join things."""
        return ", ".join(parts)

    @reg.tool
    async def flaky() -> str:
        """Fails once, then works."""
        state["flaky"] += 1
        if state["flaky"] == 1:
            raise ConnectionError("first try")
        return "second try"

    @reg.tool
    def broken(x: int) -> int:
        """Always fails (sync: a worker thread)."""
        return divide(x)

    @reg.tool
    def whose_span(secret: str = "", shown: str = "") -> dict[str, Any]:
        """Says which span is current in its worker thread."""
        ctx = trace.get_current_span().get_span_context()
        return {
            "trace_id": ctx.trace_id,
            "span_id": ctx.span_id,
            "thread": threading.current_thread() is not threading.main_thread(),
        }

    @reg.tool
    def leaky(api_key: str) -> None:
        """Fails, saying its secret."""
        raise PermissionError(f"key {api_key} refused")

    @reg.tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    return reg


def divide(x: int) -> int:
    return x // 0


PLAN = {
    "goal": "a run with every kind of task",
    "tasks": [
        {"id": "src", "tool": "fetch", "args": {"name": "root"}},
        {"id": "left", "tool": "fetch", "args": {"name": "${src}"}},
        {"id": "right", "tool": "fetch", "args": {"name": "${src}"}},
        {"id": "both", "tool": "join", "args": {"parts": ["${left}", "${right}"]}},
        {"id": "retry", "tool": "flaky", "args": {}, "retries": 1},
        {"id": "bad", "tool": "broken", "args": {"x": 1}},
        {"id": "note", "instruction": "Add 2 and 3", "tools": ["add"]},
    ],
}


def agent_llm() -> ScriptedLLM:
    return ScriptedLLM(
        [
            LLMResponse(
                content="adding",
                tool_calls=[ToolCall(id="call-7", name="add", arguments={"a": 2, "b": 3})],
            ),
            "5",
        ],
        model="test-model",
    )


async def test_the_span_tree_of_a_run(otel: Telemetry, reg: dagagent.Registry) -> None:
    with agent_llm() as llm:
        result = await execute(
            PLAN, reg, llm=llm, settings=RunSettings(on_failure="continue", retry=FAST_RETRY)
        )
    assert result.tasks["bad"].status == "failed" and result.tasks["both"].ok

    (run,) = otel.named("invoke_workflow dagagent.run")
    assert run.parent is None
    attrs = dict(run.attributes or {})
    assert attrs["gen_ai.operation.name"] == "invoke_workflow"
    assert attrs["dagagent.run.id"] == result.run_id and attrs["dagagent.executor"] == "dataflow"
    assert attrs["dagagent.run.status"] == "failed" and attrs["dagagent.run.tasks"] == 7
    assert run.status.status_code == trace.StatusCode.ERROR

    under_run = otel.children(run)
    by_task: dict[str, list[ReadableSpan]] = {}
    for s in under_run:
        by_task.setdefault(str((s.attributes or {})["dagagent.task.id"]), []).append(s)
    assert set(by_task) == {"src", "left", "right", "both", "retry", "bad", "note"}
    # the fan-out: one execute_tool span per task, named by its tool, all under the run
    for tid in ("src", "left", "right"):
        (s,) = by_task[tid]
        a = dict(s.attributes or {})
        assert s.name == "execute_tool fetch" and a["gen_ai.tool.name"] == "fetch"
        assert a["gen_ai.operation.name"] == "execute_tool"
        assert a["dagagent.task.status"] == "succeeded" and a["dagagent.task.attempt"] == 1
        assert a["dagagent.run.id"] == result.run_id
    # the fan-in ran after both branches
    (both,) = by_task["both"]
    assert both.start_time >= max(by_task["left"][0].end_time, by_task["right"][0].end_time)
    # the retry: two attempts, the first failed
    first, second = sorted(by_task["retry"], key=lambda s: s.start_time)
    assert [dict(s.attributes or {})["dagagent.task.attempt"] for s in (first, second)] == [1, 2]
    assert dict(first.attributes or {})["error.type"] == "ConnectionError"
    assert first.status.status_code == trace.StatusCode.ERROR
    assert second.status.status_code != trace.StatusCode.ERROR
    # the failure: the error, and the traceback of the tool's own code as an exception event
    (bad,) = by_task["bad"]
    a = dict(bad.attributes or {})
    assert a["dagagent.task.status"] == "failed" and a["error.type"] == "ZeroDivisionError"
    (event,) = [e for e in bad.events if e.name == "exception"]
    ev = dict(event.attributes or {})
    assert ev["exception.type"] == "ZeroDivisionError"
    stack = str(ev["exception.stacktrace"])
    assert stack == result.tasks["bad"].traceback and "in divide" in stack
    assert "dagagent/runner" not in stack
    # the agent task: invoke_agent, with its model calls and its tool call beneath
    (note,) = by_task["note"]
    assert note.name == "invoke_agent note"
    assert dict(note.attributes or {})["gen_ai.operation.name"] == "invoke_agent"
    inside = sorted(otel.children(note), key=lambda s: s.start_time)
    assert [s.name for s in inside] == ["chat test-model", "execute_tool add", "chat test-model"]
    chat, call, _ = inside
    c = dict(chat.attributes or {})
    assert c["gen_ai.operation.name"] == "chat" and c["gen_ai.request.model"] == "test-model"
    assert c["dagagent.role"] == "agent" and chat.kind == trace.SpanKind.CLIENT
    assert "gen_ai.usage.input_tokens" in c and "gen_ai.usage.output_tokens" in c
    t = dict(call.attributes or {})
    assert t["gen_ai.tool.call.id"] == "call-7" and t["dagagent.call.source"] == "agent"
    assert t["dagagent.task.id"] == "note" and t["gen_ai.tool.name"] == "add"
    # no content without opting in
    assert not any("gen_ai.tool.call.arguments" in (s.attributes or {}) for s in otel.finished())


async def test_a_reused_task_has_a_span_that_says_so(
    otel: Telemetry, reg: dagagent.Registry
) -> None:
    plan = {"tasks": [{"id": "src", "tool": "fetch", "args": {"name": "x"}}]}
    first = await execute(plan, reg)
    task = Plan.model_validate(plan).tasks[0]
    reuse = {"src": (task_fingerprint(task, first.tasks["src"].args), "got x")}
    otel.spans.clear()
    again = await execute(plan, reg, reuse=reuse, parent_id=first.run_id)
    assert again.tasks["src"].status == "reused"
    (run,) = otel.named("invoke_workflow dagagent.run")
    assert dict(run.attributes or {})["dagagent.run.parent_id"] == first.run_id
    (span,) = otel.children(run)
    a = dict(span.attributes or {})
    assert span.name == "execute_tool fetch"
    assert a["dagagent.task.reused"] is True and a["dagagent.task.status"] == "reused"


async def test_a_sync_tool_runs_inside_its_task_span(
    otel: Telemetry, reg: dagagent.Registry
) -> None:
    result = await execute({"tasks": [{"id": "w", "tool": "whose_span", "args": {}}]}, reg)
    out = result.tasks["w"].output
    (span,) = otel.named("execute_tool whose_span")
    assert out["thread"] is True  # a worker thread, and yet:
    assert out["span_id"] == span.context.span_id and out["trace_id"] == span.context.trace_id


async def test_arguments_and_outputs_only_on_opt_in_and_after_redaction(
    otel: Telemetry, reg: dagagent.Registry
) -> None:
    plan = {
        "tasks": [{"id": "w", "tool": "whose_span", "args": {"secret": "hunter2", "shown": "ok"}}]
    }
    await execute(plan, reg, interceptors=[redacting(args=["secret"])])
    (span,) = otel.named("execute_tool whose_span")
    assert "gen_ai.tool.call.arguments" not in (span.attributes or {})
    otel.spans.clear()
    telemetry.capture_content(True)
    await execute(plan, reg, interceptors=[redacting(args=["secret"])])
    (span,) = otel.named("execute_tool whose_span")
    a = dict(span.attributes or {})
    args = str(a["gen_ai.tool.call.arguments"])
    assert "hunter2" not in args and '"shown": "ok"' in args
    assert "trace_id" in str(a["gen_ai.tool.call.result"])


async def test_metrics_of_tasks_and_model_tokens_by_role(
    otel: Telemetry, reg: dagagent.Registry
) -> None:
    with agent_llm() as llm:
        await execute(
            PLAN, reg, llm=llm, settings=RunSettings(on_failure="continue", retry=FAST_RETRY)
        )
    counts = {
        (p.attributes["dagagent.task.status"], p.attributes.get("gen_ai.tool.name")): p.value
        for p in otel.points("dagagent.tasks")
    }
    assert counts[("succeeded", "fetch")] == 3 and counts[("failed", "broken")] == 1
    durations = otel.points("dagagent.task.duration")
    assert sum(p.count for p in durations) == 7
    tokens = otel.points("gen_ai.client.token.usage")
    assert {p.attributes["gen_ai.token.type"] for p in tokens} == {"input", "output"}
    assert {p.attributes["dagagent.role"] for p in tokens} == {"agent"}
    assert {p.attributes["gen_ai.request.model"] for p in tokens} == {"test-model"}
    (calls,) = otel.points("gen_ai.client.operation.duration")
    assert calls.count == 2


@pytest.mark.parametrize("stream", [False, True])
async def test_planner_and_joiner_calls_are_chat_spans_under_their_steps(
    otel: Telemetry, reg: dagagent.Registry, stream: bool
) -> None:
    plan_text = '{"goal": "g", "tasks": [{"id": "a", "tool": "fetch", "args": {"name": "n"}}]}'
    join_text = '{"action": "finish", "answer": "got n", "cites": ["a"]}'
    with ScriptedLLM([plan_text, join_text], model="m1") as llm:
        solution = await dagagent.solve("get n", reg, llm=llm, stream=stream)
    assert solution.status == "answered", solution
    (planning,) = otel.named("plan planner")
    (joining,) = otel.named("invoke_agent joiner")
    for step, role in ((planning, "planner"), (joining, "joiner")):
        (chat,) = otel.children(step)
        assert chat.name == "chat m1"
        assert dict(chat.attributes or {})["dagagent.role"] == role
    roles = {p.attributes["dagagent.role"] for p in otel.points("gen_ai.client.token.usage")}
    assert roles == {"planner", "joiner"}
    # the solve, its round, and in the round: the planning, the run and the joiner
    (solve,) = otel.named("invoke_workflow dagagent.solve")
    s = dict(solve.attributes or {})
    assert s["dagagent.solve.id"] == solution.solve_id and s["dagagent.solve.status"] == "answered"
    (rnd,) = otel.children(solve)
    assert rnd.name == "dagagent.round" and dict(rnd.attributes or {})["dagagent.round"] == 1
    assert dict(rnd.attributes or {})["dagagent.round.outcome"] == "answered"
    (run,) = otel.named("invoke_workflow dagagent.run")
    parents = {s.parent.span_id for s in (planning, joining, run) if s.parent is not None}
    assert parents == {rnd.context.span_id}


ATTRIBUTES_OF_THE_CONVENTIONS = {
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "gen_ai.request.max_tokens",
    "gen_ai.request.temperature",
    "gen_ai.response.model",
    "gen_ai.response.finish_reasons",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.token.type",
    "gen_ai.agent.name",
    "gen_ai.workflow.name",
    "gen_ai.tool.name",
    "gen_ai.tool.type",
    "gen_ai.tool.call.id",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}


def test_attribute_names_are_the_conventions() -> None:
    from opentelemetry.semconv._incubating.attributes import (
        error_attributes,
        gen_ai_attributes,
        server_attributes,
    )

    known = {
        v
        for mod in (gen_ai_attributes, error_attributes, server_attributes)
        for k, v in vars(mod).items()
        if k.isupper() and isinstance(v, str)
    }
    ours = {
        v
        for k, v in vars(telemetry).items()
        if k.isupper() and isinstance(v, str) and "." in v and not v.startswith("dagagent.")
    }
    ours -= {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"}
    assert ours and ours <= known, ours - known
    assert ours >= ATTRIBUTES_OF_THE_CONVENTIONS
    for k, v in vars(telemetry).items():  # everything else is ours, by name
        if k.isupper() and isinstance(v, str) and v.startswith("dagagent."):
            assert v == v.lower() and " " not in v


async def test_no_spans_without_a_provider(reg: dagagent.Registry) -> None:
    _reset_globals()
    assert telemetry.tracer() is None and telemetry.instruments() is None
    exporter = InMemorySpanExporter()
    provider = TracerProvider()  # made, never set as the global one
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    result = await execute(PLAN, reg, settings=RunSettings(on_failure="continue", retry=FAST_RETRY))
    assert result.tasks["src"].ok and exporter.get_finished_spans() == ()


@pytest.mark.slow
def test_without_opentelemetry_nothing_is_imported_and_runs_work(tmp_path: Any) -> None:
    """In a fresh interpreter where ``opentelemetry`` cannot be imported at all."""
    (tmp_path / "opentelemetry").mkdir()
    (tmp_path / "opentelemetry" / "__init__.py").write_text(
        "raise ImportError('opentelemetry is not installed here')\n"
    )
    code = """
import sys
import dagagent
reg = dagagent.Registry()

@reg.tool
def boom() -> int:
    "Fails."
    return 1 // 0

result = dagagent.execute_sync(
    {"tasks": [{"id": "a", "tool": "boom", "args": {}}]}, reg
)
assert result.tasks["a"].traceback, result.tasks["a"]
assert not any(m == "opentelemetry" or m.startswith("opentelemetry.") for m in sys.modules)
print("ok")
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.slow
async def test_the_trace_context_reaches_dask_worker_processes(otel: Telemetry) -> None:
    import dask_tools
    from distributed import LocalCluster

    from dagagent.executors.dask import DaskExecutor

    plan = {
        "tasks": [
            {"id": "s", "tool": "trace_context", "args": {}},
            {"id": "a", "tool": "atrace_context", "args": {}},
        ]
    }
    with LocalCluster(
        n_workers=1, threads_per_worker=2, processes=True, dashboard_address=":0"
    ) as cluster:
        exe = DaskExecutor(address=cluster.scheduler_address)
        result = await execute(plan, dask_tools.registry, settings=RunSettings(executor=exe))
    assert result.ok, result.tasks
    for tid, tool in (("s", "trace_context"), ("a", "atrace_context")):
        out = result.tasks[tid].output
        (span,) = otel.named(f"execute_tool {tool}")
        assert out["pid"] != os.getpid()  # another process, and yet under the task's span:
        assert (out["trace_id"], out["span_id"]) == (span.context.trace_id, span.context.span_id)


async def test_a_failures_span_keeps_secrets_out(otel: Telemetry, reg: dagagent.Registry) -> None:
    plan = {"tasks": [{"id": "k", "tool": "leaky", "args": {"api_key": "sk-123456"}}]}
    result = await execute(plan, reg, interceptors=[redacting()])
    assert "sk-123456" not in (result.tasks["k"].traceback or "") + (result.tasks["k"].error or "")
    (span,) = otel.named("execute_tool leaky")
    (event,) = [e for e in span.events if e.name == "exception"]
    shown = str(dict(event.attributes or {})) + str(span.status.description)
    assert "sk-123456" not in shown and "PermissionError" in shown


async def test_a_solves_chat_spans_name_its_round_and_role_and_rounds_sum_their_calls(
    otel: Telemetry,
) -> None:
    registry = dagagent.Registry()

    @registry.tool
    def echo(text: str) -> str:
        """Echo."""
        return text

    plan = '{"tasks": [{"id": "a", "tool": "echo", "args": {"text": "hi"}}]}'
    finish = '{"action": "finish", "answer": "hi", "cites": ["a"]}'
    async with ScriptedLLM([plan, finish]) as llm:
        solution = await dagagent.solve("Say hi", registry, llm)
    chats = [s for s in otel.finished() if s.name.startswith("chat")]
    assert [s.attributes["dagagent.role"] for s in chats] == ["planner", "joiner"]
    assert {s.attributes["dagagent.solve.id"] for s in chats} == {solution.solve_id}
    assert {s.attributes["dagagent.round"] for s in chats} == {1}
    (rnd,) = otel.named("dagagent.round")
    assert rnd.attributes["dagagent.model_calls"] == 2
    assert rnd.attributes["gen_ai.usage.output_tokens"] == solution.usage.total.output_tokens
    assert rnd.attributes["dagagent.usage.estimated"] is True  # the script reports no usage
    assert rnd.attributes["dagagent.usage.planner.calls"] == 1
    assert rnd.attributes["dagagent.usage.joiner.calls"] == 1
    (whole,) = otel.named("invoke_workflow dagagent.solve")
    assert whole.attributes["dagagent.model_calls"] == 2
    assert whole.attributes["dagagent.usage.joiner.output_tokens"] > 0


async def test_a_task_run_in_another_process_joins_its_runs_trace(
    otel: Telemetry, reg: dagagent.Registry
) -> None:
    """What a Temporal worker does with the W3C context its activity carries: the task's
    spans are children of the run's span (made by the driver), and the task's metrics are
    left to the driver, which records every task once."""
    from dagagent.runner import Redaction, RunTelemetry, TaskRunner

    plan = {"tasks": [{"id": "a", "tool": "add", "args": {"a": 1, "b": 2}}]}
    graph = dagagent.validate(plan, reg)
    driver = RunTelemetry.start(graph, "0123456789ab", "temporal", None, Redaction(()))
    assert driver is not None and driver.span is not None
    headers = driver.carrier()
    assert headers is not None and "traceparent" in headers

    joined = RunTelemetry.joined(graph, "0123456789ab", "temporal", Redaction(()), headers)
    runner = TaskRunner(graph, reg, run_id="0123456789ab", telemetry=joined)
    assert (await runner.run_task("a")).output == 3
    (span,) = otel.named("execute_tool add")
    assert span.parent is not None and span.parent.is_remote
    assert (span.context.trace_id, span.parent.span_id) == (
        driver.span.get_span_context().trace_id,
        driver.span.get_span_context().span_id,
    )
    assert span.attributes is not None and span.attributes["dagagent.task.status"] == "succeeded"
    assert otel.points("dagagent.tasks") == []  # the driver's to count
    driver.end(None)


def test_without_a_provider_a_worker_makes_no_telemetry(reg: dagagent.Registry) -> None:
    from dagagent.runner import Redaction, RunTelemetry

    graph = dagagent.validate(
        {"tasks": [{"id": "a", "tool": "add", "args": {"a": 1, "b": 2}}]}, reg
    )
    headers = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    assert RunTelemetry.joined(graph, "0123456789ab", "temporal", Redaction(()), headers) is None
