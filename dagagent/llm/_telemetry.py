"""A model call as OpenTelemetry sees it: a ``chat MODEL`` span (CLIENT) with the GenAI
conventions' request, response and usage attributes and the role the call served
(``dagagent.role``: planner, agent or joiner), and the ``gen_ai.client.token.usage`` and
``gen_ai.client.operation.duration`` metrics. Made only when OpenTelemetry is on
(see :mod:`dagagent.telemetry`)."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .. import telemetry as otel
from .types import LLMRequest, LLMResponse, StreamEnd, StreamEvent

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

__all__ = ["CallSpan", "call_span"]


def call_span(client: object, request: LLMRequest) -> CallSpan | None:
    """The telemetry of one call of ``client``; ``None`` when OpenTelemetry is off."""
    tracer, instruments = otel.tracer(), otel.instruments()
    if tracer is None and instruments is None:
        return None
    return CallSpan(tracer, instruments, client, request)


class CallSpan:
    """One model call's span and metrics."""

    def __init__(
        self,
        tracer: Tracer | None,
        instruments: otel.Instruments | None,
        client: object,
        request: LLMRequest,
    ) -> None:
        self.tracer = tracer
        self.instruments = instruments
        self.model = str(getattr(client, "model", "") or "")
        self.common: dict[str, Any] = {
            otel.OPERATION: "chat",
            otel.PROVIDER: str(getattr(client, "provider_name", "") or "_OTHER"),
        }
        if self.model:
            self.common[otel.REQUEST_MODEL] = self.model
        role = otel.ROLE.get()
        if role is not None:
            self.common[otel.ROLE_ATTR] = role
        self.attributes = dict(self.common)
        given = otel.CALL_ATTRIBUTES.get()  # where the call belongs (solve, round, task)
        if given:
            self.attributes.update(given)
            if otel.ROLE_ATTR in given:
                self.common[otel.ROLE_ATTR] = given[otel.ROLE_ATTR]
        if request.max_tokens is not None:
            self.attributes[otel.REQUEST_MAX_TOKENS] = request.max_tokens
        if request.temperature is not None:
            self.attributes[otel.REQUEST_TEMPERATURE] = request.temperature
        base_url = getattr(client, "base_url", None)
        if isinstance(base_url, str) and base_url:
            parts = urlsplit(base_url)
            if parts.hostname:
                self.attributes[otel.SERVER_ADDRESS] = parts.hostname
                port = parts.port or (443 if parts.scheme == "https" else 80)
                self.attributes[otel.SERVER_PORT] = port
        self.span: Span | None = None
        self.started = 0.0
        self.response_model = ""

    def start(self) -> None:
        self.started = time.perf_counter()
        if self.tracer is not None:
            from opentelemetry.trace import SpanKind

            name = f"chat {self.model}" if self.model else "chat"
            self.span = self.tracer.start_span(
                name, kind=SpanKind.CLIENT, attributes=self.attributes
            )

    def answered(self, response: LLMResponse) -> None:
        """The call's answer is complete: its usage, model and finish reason."""
        usage = response.usage
        self.response_model = response.model
        span = self.span
        if span is not None:
            if response.model:
                span.set_attribute(otel.RESPONSE_MODEL, response.model)
            if response.finish_reason:
                span.set_attribute(otel.FINISH_REASONS, [response.finish_reason])
            span.set_attribute(otel.INPUT_TOKENS, usage.input_tokens)
            span.set_attribute(otel.OUTPUT_TOKENS, usage.output_tokens)
        inst = self.instruments
        if inst is not None:
            attributes = self._metric_attributes()
            for kind, n in (("input", usage.input_tokens), ("output", usage.output_tokens)):
                inst.token_usage.record(n, {**attributes, otel.TOKEN_TYPE: kind})

    def end(self, exc: BaseException | None = None) -> None:
        """The call is over (``exc``: how it failed)."""
        span = self.span
        if span is not None:
            if exc is not None:
                otel.end_with_error(span, exc)
            span.end()
        inst = self.instruments
        if inst is not None:
            attributes = self._metric_attributes()
            if exc is not None:
                attributes[otel.ERROR_TYPE] = type(exc).__qualname__
            inst.operation_duration.record(time.perf_counter() - self.started, attributes)

    def _metric_attributes(self) -> dict[str, Any]:
        attributes = dict(self.common)
        if self.response_model:
            attributes[otel.RESPONSE_MODEL] = self.response_model
        return attributes

    async def complete(self, answer: Any) -> LLMResponse:
        """Await ``answer`` (the call) with this call's span current."""
        self.start()
        try:
            if self.span is None:
                response: LLMResponse = await answer
            else:
                from opentelemetry.trace import use_span

                with use_span(self.span, end_on_exit=False, record_exception=False):
                    response = await answer
        except BaseException as exc:
            self.end(exc)
            raise
        self.answered(response)
        self.end()
        return response

    async def stream(
        self, events: AsyncGenerator[StreamEvent, None]
    ) -> AsyncGenerator[StreamEvent, None]:
        """``events`` as they come; the span ends with the stream. (The span is not made
        current: a generator cannot hold a context across its yields.)"""
        self.start()
        ended = False
        try:
            async with aclosing(events) as inner:
                async for event in inner:
                    if isinstance(event, StreamEnd):
                        self.answered(event.response)
                    yield event
        except GeneratorExit:  # the reader stopped early (streamed planning cut it off)
            ended = True
            self.end()
            raise
        except BaseException as exc:
            ended = True
            self.end(exc)
            raise
        finally:
            if not ended:
                self.end()
