"""OpenTelemetry for the tests: the SDK's providers exporting to memory, set as the global
ones for a test (:func:`in_memory`); and a loopback OTLP/HTTP collector for the tests whose
processes export their spans and metrics (``--otel`` on a command, ``dagagent worker
--otel``), which keeps every request and reads them back as the protobuf the exporters
send (:class:`Collector`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

__all__ = ["Collector", "Telemetry", "in_memory"]


class Telemetry:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.reader = InMemoryMetricReader()

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name == name]

    def children(self, parent: ReadableSpan) -> list[ReadableSpan]:
        pid = parent.context.span_id
        return [s for s in self.finished() if s.parent is not None and s.parent.span_id == pid]

    def points(self, metric: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        found = []
        for rm in data.resource_metrics if data is not None else ():
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == metric:
                        found.extend(m.data.data_points)
        return found


def _reset_globals() -> None:
    # What OpenTelemetry's own test utilities do: the global providers may be set once per
    # process, so tests reset them to "never set".
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    metrics._internal._METER_PROVIDER_SET_ONCE = Once()
    metrics._internal._METER_PROVIDER = None


@contextmanager
def in_memory() -> Iterator[Telemetry]:
    """Global tracer and meter providers of the SDK, exporting to memory, inside."""
    t = Telemetry()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(t.spans))
    meter_provider = MeterProvider(metric_readers=[t.reader])
    _reset_globals()
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    try:
        yield t
    finally:
        _reset_globals()
        tracer_provider.shutdown()
        meter_provider.shutdown()


class Collector:
    """An OTLP/HTTP receiver on a free loopback port (``url``), serving until ``server`` is
    shut down."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, bytes]] = []
        self._lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with collector._lock:
                    collector.requests.append((self.path, body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _received(self, path: str) -> list[bytes]:
        with self._lock:
            return [body for p, body in self.requests if p == path]

    def received_spans(self) -> list[tuple[Any, str]]:
        """Every span received (the OTLP ``Span`` message: ``trace_id``, ``span_id``,
        ``parent_span_id``, ``attributes``, ``status``, ``events``...), with the
        ``service.name`` of the process that sent it."""
        found = []
        for body in self._received("/v1/traces"):
            req = ExportTraceServiceRequest.FromString(body)
            for rs in req.resource_spans:
                service = next(
                    a.value.string_value for a in rs.resource.attributes if a.key == "service.name"
                )
                for ss in rs.scope_spans:
                    found.extend((s, service) for s in ss.spans)
        return found

    def spans(self) -> list[tuple[str, dict[str, object], str]]:
        """Every span received: its name, its attributes (OTLP ``AnyValue``s) and the
        ``service.name`` of the process that sent it."""
        return [
            (s.name, {a.key: a.value for a in s.attributes}, service)
            for s, service in self.received_spans()
        ]

    def metric_names(self) -> set[str]:
        names = set()
        for body in self._received("/v1/metrics"):
            req = ExportMetricsServiceRequest.FromString(body)
            for rm in req.resource_metrics:
                for sm in rm.scope_metrics:
                    names.update(m.name for m in sm.metrics)
        return names
