"""OpenTelemetry on Temporal: a run is one trace from its driver to the workers.

The driver (this process) exports to memory; a ``dagagent worker --otel`` process exports
over OTLP/HTTP to a loopback collector the test starts, configured by the standard
``OTEL_*`` variables alone. The task spans are made on the worker, where the tasks ran, and
are children of the run's span on the driver.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("temporalio")

from eventually import wait_until
from otel_support import Collector, Telemetry, in_memory

import dagagent
from dagagent.executors.temporal import TemporalExecutor
from dagagent.settings import RunSettings, TaskRetryPolicy

from .temporal_fixtures import Workers
from .test_temporal import replay

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


def _attrs(span: Any) -> dict[str, Any]:
    """An OTLP span's attributes as plain values."""
    return {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in span.attributes}


@pytest.mark.anyio
async def test_a_run_on_temporal_is_one_trace_from_driver_to_worker(
    own_workers: Workers, collector: Collector, otel: Telemetry
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
        ]
    }
    settings = RunSettings(
        executor=ex, on_failure="continue", retry=TaskRetryPolicy(base_delay_s=0.01, jitter=0)
    )
    result = await dagagent.execute(plan, None, settings=settings)
    assert result.tasks["a"].output == 3 and result.tasks["f"].attempts == 2, result.tasks

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

    # a tool's own instrumentation nests under its task's span, on the worker
    seen = result.tasks["ctx"].output
    ctx_span = by_task["ctx", 1]
    assert seen["trace_id"].to_bytes(16, "big") == trace_id
    assert seen["span_id"].to_bytes(8, "big") == ctx_span.span_id

    # the workflow that carried the trace context replays as it ran
    await replay(ex)
