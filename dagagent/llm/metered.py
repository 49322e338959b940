"""``MeteredLLM``: a model client that counts another client's calls and tokens, and tells an
observer about each call as it happens.

One model often serves several roles in a run (the planner, the agent tasks, the joiner);
each role gets its own ``MeteredLLM`` around the same client, so its usage can be told apart::

    planner_usage = UsageTracker()
    planner = LLMPlanner(MeteredLLM(llm, planner_usage), registry)

Around a :class:`~dagagent.llm.FallbackLLM`, a call that moved on to another model is that
model's call (``LiveCall.model``), with the models given up on in ``LiveCall.fallbacks``.

A call is counted once it is over, however it ended: answered, failed, cancelled, or cut
off by its reader (streamed planning stops reading an answer it rejects). Its tokens are the
provider's when it reported them, else estimated (see :mod:`dagagent.llm.observe`): a call
that was sent is never counted as 0 tokens. A call an observer refused was not sent and is
not counted.

With ``observer=`` (a :class:`~dagagent.llm.CallObserver`), every call is a
:class:`~dagagent.llm.LiveCall` the observer hears about as it starts, as each piece of the
answer arrives, and as it ends.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from typing import Any

from typing_extensions import Unpack

from .observe import CallObserver, LiveCall, set_last_call
from .protocol import LLM
from .router import FallbackLLM
from .types import (
    LLMRequest,
    LLMResponse,
    Message,
    RequestOptions,
    StreamEnd,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from .usage import Usage, UsageTracker

__all__ = ["MeteredLLM"]


def _cancellation(exc: BaseException) -> bool:
    """Whether ``exc`` is the cancellation of the caller (not a failure of the call)."""
    import anyio

    return isinstance(exc, (anyio.get_cancelled_exc_class(), KeyboardInterrupt))


class MeteredLLM:
    """Forwards every call to ``llm`` and records its usage in ``usage`` (a new
    :class:`~dagagent.llm.UsageTracker` unless one is given); tells ``observer`` about each
    call (see the module docstring). Other attributes (``model``, ...) are those of
    ``llm``."""

    def __init__(
        self,
        llm: LLM,
        usage: UsageTracker | None = None,
        *,
        observer: CallObserver | None = None,
    ) -> None:
        self.llm = llm
        self.usage = usage if usage is not None else UsageTracker()
        self.observer = observer

    @property
    def model(self) -> str:
        return str(getattr(self.llm, "model", ""))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.llm, name)

    def __repr__(self) -> str:
        return f"MeteredLLM({self.llm!r}, {self.usage!r})"

    def _start(
        self, messages: Sequence[Message], options: RequestOptions, stream: bool
    ) -> LiveCall:
        """The call about to be made, announced (the observer may refuse it: it raises)."""
        request = LLMRequest.build(messages, stream=stream, **options)
        call = LiveCall.of(self.llm, request)
        call.observer = self.observer
        set_last_call(call)
        if self.observer is not None:
            try:
                self.observer.started(call)
            except BaseException as exc:
                call.end("refused", error=exc)
                self.observer.ended(call)
                raise
        return call

    def spec(self, *, what: str = "a run with agent tasks") -> dict[str, Any]:
        """The model this wraps as a spec workers build it from, without a key (see
        :func:`dagagent.llm._described.model_of`); a :class:`~dagagent.errors.ConfigError`
        for a model that cannot be one."""
        from ._described import model_of

        return model_of(self.llm, None, what=what)

    def made_elsewhere(self, records: Sequence[dict[str, Any]]) -> None:
        """Calls of this model made elsewhere (on a worker, from its :meth:`spec`), as the
        JSON of their :class:`~dagagent.results.ModelCall` records: counted in ``usage``
        and handed to the observer (and to the model this wraps, when it is metered too)."""
        for r in records:
            if r.get("status") != "refused":
                self.usage.record(
                    Usage(
                        input_tokens=int(r.get("input_tokens") or 0),
                        output_tokens=int(r.get("output_tokens") or 0),
                        estimated=bool(r.get("estimated")),
                    )
                )
        hear = getattr(self.observer, "made_elsewhere", None)
        if hear is not None:
            hear(records)
        if isinstance(self.llm, MeteredLLM):
            self.llm.made_elsewhere(records)

    def _end(self, call: LiveCall) -> None:
        if call.outcome != "refused":
            self.usage.record(call.usage)
        if self.observer is not None:
            self.observer.ended(call)

    async def complete(
        self, messages: Sequence[Message], **options: Unpack[RequestOptions]
    ) -> LLMResponse:
        call = self._start(messages, options, stream=False)
        try:
            if isinstance(self.llm, FallbackLLM):
                response = await self.llm.complete_watched(messages, call.fell_back, **options)
            else:
                response = await self.llm.complete(messages, **options)
        except BaseException as exc:
            call.end("cancelled" if _cancellation(exc) else "failed", error=exc)
            self._end(call)
            raise
        call.end("answered", response)
        self._end(call)
        return response

    async def stream(
        self, messages: Sequence[Message], **options: Unpack[RequestOptions]
    ) -> AsyncGenerator[StreamEvent, None]:
        call = self._start(messages, options, stream=True)
        observer = self.observer
        events: AsyncIterator[StreamEvent]
        if isinstance(self.llm, FallbackLLM):
            events = self.llm.stream_watched(messages, call.fell_back, **options)
        else:
            events = self.llm.stream(messages, **options)
        try:
            async with aclosing(events) as inner:  # type: ignore[type-var]
                async for event in inner:
                    if isinstance(event, StreamEnd):
                        call.end("answered", event.response)
                    elif isinstance(event, TextDelta):
                        call.wrote(event.text)
                    elif isinstance(event, ToolCallDelta):
                        call.wrote(event.arguments or event.name or "")
                    if observer is not None and call.running:
                        try:
                            observer.wrote(call)
                        except BaseException as exc:  # the observer cut the call short
                            call.end("cut", error=exc)
                            raise
                    yield event
        except GeneratorExit:  # the reader stopped reading
            if call.running:
                call.end("cut")
            self._end(call)
            raise
        except BaseException as exc:
            if call.running:
                call.end("cancelled" if _cancellation(exc) else "failed", error=exc)
            self._end(call)
            raise
        if call.running:  # a stream that ended without its StreamEnd
            call.end("failed")
        self._end(call)
