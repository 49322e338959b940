"""``--otel``: send a command's traces and metrics to an OpenTelemetry collector.

The command sets up the OpenTelemetry SDK with the OTLP exporters, configured as every
OpenTelemetry program is, by the standard environment variables (``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf``, the default here, or ``grpc``),
``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``...), as the
global providers that :mod:`dagagent.telemetry` writes to. The SDK flushes what is left when
the process exits. Needs ``pip install 'dagagent[otel]'``.
"""

from __future__ import annotations

import os

from ..errors import ConfigError

__all__ = ["configure_otel"]


def configure_otel() -> None:
    """Global tracer and meter providers exporting over OTLP, from the ``OTEL_*`` variables."""
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf").strip()
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        elif protocol in ("http/protobuf", "http"):
            # the same classes over HTTP: mypy sees two definitions of each name
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # type: ignore[assignment]
                OTLPMetricExporter,
            )
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[assignment]
                OTLPSpanExporter,
            )
        else:
            raise ConfigError(
                f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: --otel sends http/protobuf or grpc"
            )
    except ImportError as exc:
        raise ConfigError(
            f"--otel needs OpenTelemetry's SDK and OTLP exporter ({exc}): "
            "pip install 'dagagent[otel]'"
        ) from None
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "dagagent"}
    resource = Resource.create(attributes)
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
