"""OpenTelemetry traces and metrics, when the application uses OpenTelemetry.

dagagent never configures OpenTelemetry: it writes to the **global** tracer and meter
providers, so whatever the application set up (an SDK with its exporters, an agent's
auto-instrumentation) receives dagagent's spans and metrics beside its own. It is on when the
application has set a provider, and off otherwise. dagagent never imports OpenTelemetry itself:
an application that set a provider has imported it, so "is it on" is a look in
``sys.modules`` and, if it is there, at the provider. Without the ``otel`` extra, or with it
but no provider set, nothing is imported and nothing is measured. The question is asked once
per run, model call or planning step, never per task (see :mod:`dagagent.runner._telemetry`).

Names follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``: operation names
``invoke_workflow``, ``invoke_agent``, ``plan``, ``chat``, ``execute_tool``), with
``dagagent.*`` attributes for what they do not cover (run and task ids, executor, status,
attempts, reuse, the role a model call served). The documentation's OpenTelemetry page
(``docs/opentelemetry.md``) draws the span tree and lists the metrics.

Tool arguments and outputs are recorded only when the user opts in, as the conventions ask:
:func:`capture_content` or ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``; and
then the arguments as the redacting interceptor left them.

This module imports nothing else of dagagent but :mod:`dagagent.text`: every layer may use it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram
    from opentelemetry.trace import Span, Tracer

__all__ = [
    "AGENT_TASK",
    "CALL_ATTRIBUTES",
    "CONTENT_ENV",
    "ROLE",
    "Instruments",
    "attached",
    "capture_content",
    "carrier",
    "content_captured",
    "content_text",
    "end_with_error",
    "instruments",
    "operation",
    "start_span",
    "tool_call_id",
    "tracer",
    "within",
]

SCOPE = "dagagent"
"""The instrumentation scope of every span and metric dagagent writes."""

CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""Set to ``true`` to record tool arguments and outputs (after redaction)."""

MAX_CONTENT_CHARS = 4000
"""At most this many characters of an argument or output are recorded on a span."""

# -- attribute names: the GenAI conventions, then dagagent's own ---------------------------------

OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
RESPONSE_MODEL = "gen_ai.response.model"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
TOKEN_TYPE = "gen_ai.token.type"
AGENT_NAME = "gen_ai.agent.name"
WORKFLOW_NAME = "gen_ai.workflow.name"
TOOL_NAME = "gen_ai.tool.name"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_DESCRIPTION = "gen_ai.tool.description"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT = "gen_ai.tool.call.result"
ERROR_TYPE = "error.type"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"

RUN_ID = "dagagent.run.id"
PARENT_RUN_ID = "dagagent.run.parent_id"
RUN_STATUS = "dagagent.run.status"
EXECUTOR = "dagagent.executor"
TASK_COUNT = "dagagent.run.tasks"
TASK_ID = "dagagent.task.id"
TASK_KIND = "dagagent.task.kind"
TASK_STATUS = "dagagent.task.status"
TASK_ATTEMPT = "dagagent.task.attempt"
TASK_REUSED = "dagagent.task.reused"
CALL_SOURCE = "dagagent.call.source"
ROLE_ATTR = "dagagent.role"
SOLVE_ID = "dagagent.solve.id"
SOLVE_STATUS = "dagagent.solve.status"
ROUND = "dagagent.round"
ROUND_OUTCOME = "dagagent.round.outcome"
MODEL_CALLS = "dagagent.model_calls"
COST = "dagagent.usage.cost_usd"
ESTIMATED = "dagagent.usage.estimated"

#: The attributes of a planning step (planning or replanning: the ``chat`` spans of its model
#: calls nest under it) and of a joiner's decision.
PLANNING = {OPERATION: "plan", AGENT_NAME: "planner"}
JOINING = {OPERATION: "invoke_agent", AGENT_NAME: "joiner"}

#: The role a model call serves (``planner``, ``agent`` or ``joiner``), set by whoever asks
#: the model while OpenTelemetry is on; chat spans and token metrics carry it.
ROLE: ContextVar[str | None] = ContextVar("dagagent_model_role", default=None)

#: The id the model gave a tool call, while an agent makes that call.
TOOL_CALL_ID_VAR: ContextVar[str | None] = ContextVar("dagagent_tool_call_id", default=None)

#: The agent task whose agent is at work, as ``(run id, task id)``: set by the runner around
#: an agent task (whatever telemetry does), so that whoever watches its model calls knows
#: which task they serve.
AGENT_TASK: ContextVar[tuple[str, str] | None] = ContextVar("dagagent_agent_task", default=None)

#: Attributes for the ``chat`` span of the model call about to be made (its solve, round,
#: role, task), set by whoever watches model calls; the span copies them when it starts.
CALL_ATTRIBUTES: ContextVar[Mapping[str, Any] | None] = ContextVar(
    "dagagent_call_attributes", default=None
)

# -- on or off ------------------------------------------------------------------------------------

_tracer: tuple[object, Tracer] | None = None
_instruments: tuple[object, Instruments] | None = None


def tracer() -> Tracer | None:
    """dagagent's tracer from the global tracer provider, or ``None`` when tracing is off
    (OpenTelemetry not imported by the application, or no tracer provider set)."""
    global _tracer
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    cached = _tracer
    if cached is not None and cached[0] is provider:
        return cached[1]
    made: Tracer = provider.get_tracer(SCOPE)
    _tracer = (provider, made)
    return made


@dataclass(frozen=True)
class Instruments:
    """dagagent's metrics, made once per meter provider."""

    task_duration: Histogram
    tasks: Counter
    token_usage: Histogram
    operation_duration: Histogram


def instruments() -> Instruments | None:
    """dagagent's metrics on the global meter provider, or ``None`` when metrics are off."""
    global _instruments
    metrics = sys.modules.get("opentelemetry.metrics")
    if metrics is None:
        return None
    provider = metrics.get_meter_provider()
    if isinstance(provider, metrics.NoOpMeterProvider) or type(provider).__name__.startswith(
        "_Proxy"
    ):
        return None
    cached = _instruments
    if cached is not None and cached[0] is provider:
        return cached[1]
    meter = provider.get_meter(SCOPE)
    made = Instruments(
        task_duration=meter.create_histogram(
            "dagagent.task.duration", unit="s", description="How long each task took."
        ),
        tasks=meter.create_counter(
            "dagagent.tasks", unit="{task}", description="Tasks by how they ended."
        ),
        token_usage=meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Number of input and output tokens used.",
        ),
        operation_duration=meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration."
        ),
    )
    _instruments = (provider, made)
    return made


# -- content, on opt-in -----------------------------------------------------------------------

_capture: bool | None = None


def capture_content(on: bool | None = True) -> None:
    """Record tool arguments and outputs on spans (``None``: as ``CONTENT_ENV`` says)."""
    global _capture
    _capture = on


def content_captured() -> bool:
    """Whether tool arguments and outputs are recorded (off unless the user opted in)."""
    if _capture is not None:
        return _capture
    return os.environ.get(CONTENT_ENV, "").strip().lower() in ("1", "true", "yes")


def content_text(value: Any) -> str:
    """A value as a span records it: JSON text, bounded in size."""
    import json

    from .text import jsonable, shorten

    try:
        text = json.dumps(jsonable(value), ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = str(value)
    return shorten(text, MAX_CONTENT_CHARS)


# -- spans ------------------------------------------------------------------------------------


def end_with_error(
    span: Span, exc: BaseException, stacktrace: str | None = None, message: str | None = None
) -> None:
    """Mark ``span`` as failed by ``exc``: ``error.type``, an ERROR status and an exception
    event (with ``stacktrace`` and ``message`` in place of the exception's own, when given:
    a traceback bounded to the tool's frames, a message with secrets redacted)."""
    from opentelemetry.trace import Status, StatusCode

    text = str(exc) if message is None else message
    span.set_attribute(ERROR_TYPE, type(exc).__qualname__)
    span.set_status(Status(StatusCode.ERROR, text[:200] or type(exc).__name__))
    extra: dict[str, Any] = {"exception.message": text}
    if stacktrace is not None:
        extra["exception.stacktrace"] = stacktrace
    span.record_exception(exc, attributes=extra, escaped=True)


@contextmanager
def operation(
    name: str,
    attributes: Mapping[str, Any],
    *,
    role: str | None = None,
    kind: str = "INTERNAL",
) -> Iterator[Span | None]:
    """A span named ``name`` around the block, current inside it (so what the block does
    nests under it), or ``None`` when tracing is off. ``role``: the role of the model calls
    made inside (set whenever tracing or metrics are on). An exception leaving the block
    marks the span as failed."""
    t = tracer()
    token = ROLE.set(role) if role is not None and (t is not None or instruments()) else None
    try:
        if t is None:
            yield None
            return
        from opentelemetry.trace import SpanKind, use_span

        span = t.start_span(name, kind=SpanKind[kind], attributes=dict(attributes))
        with use_span(
            span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        ):
            try:
                yield span
            except BaseException as exc:
                end_with_error(span, exc)
                raise
            finally:
                span.end()
    finally:
        if token is not None:
            ROLE.reset(token)


def start_span(name: str, attributes: Mapping[str, Any]) -> Span | None:
    """A span begun now (not current: see :func:`within`), or ``None`` when tracing is off."""
    t = tracer()
    return None if t is None else t.start_span(name, attributes=dict(attributes))


@contextmanager
def within(span: Span | None) -> Iterator[None]:
    """``span`` is the current one inside (nothing when it is ``None``)."""
    if span is None:
        yield
        return
    from opentelemetry.trace import use_span

    with use_span(span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
        yield


@contextmanager
def tool_call_id(call_id: str) -> Iterator[None]:
    """While an agent makes the call the model named ``call_id``: its execute_tool span
    says so (``gen_ai.tool.call.id``)."""
    token = TOOL_CALL_ID_VAR.set(call_id)
    try:
        yield
    finally:
        TOOL_CALL_ID_VAR.reset(token)


# -- across processes (Dask workers) ------------------------------------------------------------


def carrier() -> dict[str, str]:
    """The current trace context as W3C headers, to send along with a call to another
    process (call only while tracing is on)."""
    from opentelemetry import propagate

    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers


@contextmanager
def attached(headers: Mapping[str, str] | None) -> Iterator[None]:
    """The trace context of ``headers`` (from :func:`carrier`) is the current one inside, so
    what a tool does in another process nests under its task; nothing without headers or
    without OpenTelemetry there."""
    if not headers:
        yield
        return
    try:
        from opentelemetry import context, propagate
    except ImportError:
        yield
        return
    token = context.attach(propagate.extract(dict(headers)))
    try:
        yield
    finally:
        context.detach(token)
