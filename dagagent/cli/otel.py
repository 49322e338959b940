"""``--otel``: send a command's traces and metrics where OpenTelemetry's standard variables say.

The command sets up the OpenTelemetry SDK as the global providers that
:mod:`dagagent.telemetry` writes to, configured as every OpenTelemetry program is, by the
standard environment variables:

- ``OTEL_TRACES_EXPORTER`` and ``OTEL_METRICS_EXPORTER`` (default ``otlp``; a comma-separated
  list): ``otlp``, ``console`` (written to stderr: stdout carries the command's output),
  ``none``, or the name of any exporter an installed package declares (the SDK's
  ``opentelemetry_traces_exporter`` / ``opentelemetry_metrics_exporter`` entry points);
- for ``otlp``: ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_PROTOCOL``
  (``http/protobuf``, the default here, or ``grpc``; ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` and
  ``..._METRICS_PROTOCOL`` for one signal), ``OTEL_EXPORTER_OTLP_HEADERS``,
  ``OTEL_EXPORTER_OTLP_TIMEOUT`` and the rest, read by the exporters themselves;
- ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER``, the
  batch processor's ``OTEL_BSP_*``, ``OTEL_METRIC_EXPORT_INTERVAL``, read by the SDK;
- ``OTEL_SDK_DISABLED=true``: nothing is set up.

**When the command ends**, what is left is sent before the process exits (or the process
ends first, with a flush that stops at once when a send fails; at most
:data:`FLUSH_TIMEOUT_S` for one that hangs). The exporters' own log lines (every retry of a
collector that is not there) are kept back; if something could not be sent, one warning
on stderr says so, where it was to go and why. Needs ``pip install 'dagagent[otel]'``.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

__all__ = ["FLUSH_TIMEOUT_S", "configure_otel", "shutdown_otel"]

#: The longest the end of a command waits for its telemetry to be sent (s).
FLUSH_TIMEOUT_S = 10.0
#: Once sending failed (or the time is up), how long the exporters get to give up (s).
_ABORT_WAIT_S = 2.0
#: The loggers whose lines a failed export writes (every retry): kept back, said once.
_EXPORT_LOGGERS = ("opentelemetry.exporter", "opentelemetry.sdk._shared_internal")
_HTTP_PROTOCOLS = ("http/protobuf", "http")


@dataclass
class _Telemetry:
    """The providers and exporters ``--otel`` set up, and what went wrong sending."""

    tracer_provider: Any
    meter_provider: Any
    exporters: list[Any]
    where: str
    failed: threading.Event = field(default_factory=threading.Event)
    problem: str | None = None
    closed: bool = False

    def note(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING and self.problem is None:
            self.problem = record.getMessage()
            self.failed.set()

    def close(self) -> None:
        """Send what is left, without waiting for a collector that is not there; say once
        what could not be sent."""
        if self.closed:
            return
        self.closed = True
        done = threading.Event()

        def shut_down() -> None:
            try:
                self.tracer_provider.shutdown()
                self.meter_provider.shutdown()
            finally:
                done.set()

        threading.Thread(target=shut_down, name="dagagent-otel-shutdown", daemon=True).start()
        deadline = time.monotonic() + FLUSH_TIMEOUT_S
        while not done.wait(0.02):
            if self.failed.is_set() or time.monotonic() >= deadline:
                if not self.failed.is_set():
                    self.problem = f"no answer within {FLUSH_TIMEOUT_S:g} s"
                for exporter in self.exporters:  # ends their retries at once
                    with contextlib.suppress(Exception):  # an exporter's own trouble
                        exporter.shutdown()
                done.wait(_ABORT_WAIT_S)
                break
        if self.problem is not None:
            from ._app import err

            err.print(
                f"warning: --otel: the traces and metrics could not all be sent to "
                f"{self.where}: {_reason(self.problem)}",
                markup=False,
                highlight=False,
            )


class _Held(logging.Handler):
    """Keeps the exporters' log lines back, noting the first problem."""

    def __init__(self, telemetry: _Telemetry) -> None:
        super().__init__(logging.WARNING)
        self.telemetry = telemetry

    def emit(self, record: logging.LogRecord) -> None:
        self.telemetry.note(record)


_current: _Telemetry | None = None


def configure_otel() -> None:
    """Global tracer and meter providers exporting as the ``OTEL_*`` variables say (see the
    module docstring); their end is :func:`shutdown_otel`, at exit."""
    global _current
    if _current is not None:
        return
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise _missing(exc) from None
    span_exporters = [_exporter("traces", name) for name in _names("OTEL_TRACES_EXPORTER")]
    metric_exporters = [_exporter("metrics", name) for name in _names("OTEL_METRICS_EXPORTER")]
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "dagagent"}
    resource = Resource.create(attributes)
    # Their end is ours (shutdown_otel, at exit): the SDK's own would wait for every retry.
    tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    for exporter in span_exporters:
        tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    readers = [
        e if isinstance(e, MetricReader) else PeriodicExportingMetricReader(e)
        for e in metric_exporters
    ]
    meter_provider = MeterProvider(
        resource=resource, metric_readers=readers, shutdown_on_exit=False
    )
    telemetry = _Telemetry(
        tracer_provider,
        meter_provider,
        [*span_exporters, *(e for e in metric_exporters if not isinstance(e, MetricReader))],
        _where(),
    )
    held = _Held(telemetry)
    for name in _EXPORT_LOGGERS:
        logger = logging.getLogger(name)
        logger.addHandler(held)
        logger.propagate = False
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    _current = telemetry
    atexit.register(shutdown_otel)


def shutdown_otel() -> None:
    """Send what ``--otel`` still holds, promptly (see the module docstring); a no-op
    without ``--otel`` or once done."""
    if _current is not None:
        _current.close()


def _missing(exc: ImportError) -> ConfigError:
    return ConfigError(
        f"--otel needs OpenTelemetry's SDK and OTLP exporter ({exc}): pip install 'dagagent[otel]'"
    )


def _names(variable: str) -> list[str]:
    raw = os.environ.get(variable, "").strip() or "otlp"
    names = [n.strip().lower() for n in raw.split(",") if n.strip()]
    return [] if "none" in names else names


def _protocol(signal: str) -> str:
    specific = f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL"
    return (
        os.environ.get(specific) or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf"
    ).strip()


def _exporter(signal: str, name: str) -> Any:
    """The exporter ``name`` of ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER``."""
    variable = f"OTEL_{signal.upper()}_EXPORTER"
    try:
        if name == "otlp":
            return _otlp(signal)
        if name == "console":
            if signal == "traces":
                from opentelemetry.sdk.trace.export import ConsoleSpanExporter

                return ConsoleSpanExporter(out=sys.stderr)
            from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

            return ConsoleMetricExporter(out=sys.stderr)
    except ImportError as exc:
        raise _missing(exc) from None
    from importlib.metadata import entry_points

    group = f"opentelemetry_{signal}_exporter"
    found = {ep.name: ep for ep in entry_points(group=group)}
    if name not in found:
        known = ", ".join(sorted({"otlp", "console", "none", *found}))
        raise ConfigError(f"{variable}={name!r}: no such exporter (known here: {known})")
    try:
        return found[name].load()()
    except Exception as exc:
        raise ConfigError(
            f"{variable}={name!r}: the exporter could not be made: {type(exc).__name__}: {exc}"
        ) from None


def _otlp(signal: str) -> Any:
    protocol = _protocol(signal)
    if protocol == "grpc":
        if signal == "traces":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            return OTLPSpanExporter()
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter()
    if protocol in _HTTP_PROTOCOLS:
        if signal == "traces":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter as HTTPSpanExporter,
            )

            return HTTPSpanExporter()
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
            OTLPMetricExporter as HTTPMetricExporter,
        )

        return HTTPMetricExporter()
    raise ConfigError(
        f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: --otel sends http/protobuf or grpc"
    )


def _where() -> str:
    """Where OTLP sends to, as the variables say (what the warning names)."""
    uses_otlp = "otlp" in _names("OTEL_TRACES_EXPORTER") + _names("OTEL_METRICS_EXPORTER")
    if not uses_otlp:
        return "the exporters of OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER"
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if endpoint:
        return f"{endpoint} (OTEL_EXPORTER_OTLP_ENDPOINT)"
    grpc = _protocol("traces") == "grpc"
    default = "http://localhost:4317" if grpc else "http://localhost:4318"
    return f"{default} (the default; set OTEL_EXPORTER_OTLP_ENDPOINT)"


def _reason(problem: str) -> str:
    """A failed export's log line, in a few words."""
    low = problem.lower()
    if "connection refused" in low or "failed to establish a new connection" in low:
        return "no collector answers there (connection refused); they were dropped"
    text = " ".join(problem.split())
    return (text[:300] + "…" if len(text) > 300 else text) + "; they were dropped"
