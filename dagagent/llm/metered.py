"""``MeteredLLM``: a model client that counts another client's calls and tokens.

One model often serves several roles in a run (the planner, the agent tasks, the joiner);
each role gets its own ``MeteredLLM`` around the same client, so its usage can be told apart::

    planner_usage = UsageTracker()
    planner = LLMPlanner(MeteredLLM(llm, planner_usage), registry)

A call is counted when its answer is complete (``complete`` returned, or the stream reached
its :class:`~dagagent.llm.StreamEnd`), or when the reader closed the stream before its end
(streamed planning cuts off an answer it rejects: a call whose tokens are not known, so it
counts none); a call that failed is not counted.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from typing import Any

from typing_extensions import Unpack

from .protocol import LLM
from .types import LLMResponse, Message, RequestOptions, StreamEnd, StreamEvent
from .usage import Usage, UsageTracker

__all__ = ["MeteredLLM"]


class MeteredLLM:
    """Forwards every call to ``llm`` and records its usage in ``usage`` (a new
    :class:`~dagagent.llm.UsageTracker` unless one is given). Other attributes (``model``,
    ...) are those of ``llm``."""

    def __init__(self, llm: LLM, usage: UsageTracker | None = None) -> None:
        self.llm = llm
        self.usage = usage if usage is not None else UsageTracker()

    @property
    def model(self) -> str:
        return str(getattr(self.llm, "model", ""))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.llm, name)

    def __repr__(self) -> str:
        return f"MeteredLLM({self.llm!r}, {self.usage!r})"

    async def complete(
        self, messages: Sequence[Message], **options: Unpack[RequestOptions]
    ) -> LLMResponse:
        response = await self.llm.complete(messages, **options)
        self.usage.record(response.usage)
        return response

    async def stream(
        self, messages: Sequence[Message], **options: Unpack[RequestOptions]
    ) -> AsyncGenerator[StreamEvent, None]:
        events = self.llm.stream(messages, **options)
        ended = False
        try:
            async with aclosing(events) as inner:  # type: ignore[type-var]
                async for event in inner:
                    if isinstance(event, StreamEnd):
                        ended = True
                        self.usage.record(event.response.usage)
                    yield event
        except GeneratorExit:
            if not ended:  # the reader stopped the answer (streamed planning cut it off)
                self.usage.record(Usage())
            raise
