"""Reading server-sent events (``text/event-stream``), with a limit on how long each event
may take to arrive."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from dagagent.llm._json import loads_json
from dagagent.llm.types import closing_stream

__all__ = [
    "IdleLimit",
    "SSEEvent",
    "StreamIdleTimeout",
    "StreamLimitExceeded",
    "bounded_lines",
    "is_event_stream",
    "iter_sse",
]


@dataclass(frozen=True)
class SSEEvent:
    """One server-sent event; ``event`` is ``"message"`` when the server named none."""

    event: str
    data: str
    id: str | None = None

    def json(self) -> Any:
        return loads_json(self.data)


class StreamIdleTimeout(httpx.ReadTimeout):
    """No complete event arrived in time, though bytes may have (keep-alive comments, or
    a server trickling its answer byte by byte, which a read timeout alone never catches
    because every byte restarts it)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no complete event for {seconds:g}s")
        self.seconds = seconds


class StreamLimitExceeded(Exception):
    """A stream grew past its size, or lasted past its time: a server streaming without end,
    or one gigantic event, is cut off here rather than filling memory or holding the call.
    ``setting`` names the :class:`~dagagent.llm.ModelSettings` field that set the bound
    (``max_response_bytes`` or ``max_stream_s``)."""

    def __init__(self, message: str, setting: str) -> None:
        super().__init__(message)
        self.setting = setting


_EOL = re.compile(r"\r\n|\r|\n")  # the three line ends of text/event-stream


async def bounded_lines(
    chunks: AsyncIterator[str],
    *,
    max_chars: int | None = None,
    max_seconds: float | None = None,
) -> AsyncIterator[str]:
    """The lines (without their ends) of a stream of text chunks, raising
    :class:`StreamLimitExceeded` once the stream holds more than ``max_chars`` characters or
    runs longer than ``max_seconds``. Unlike reading lines whole, a line that never ends is
    held only up to ``max_chars``; each chunk is looked at once."""
    total = 0
    end = None if max_seconds is None else anyio.current_time() + max_seconds
    pending: list[str] = []  # the start of a line that has not ended yet
    after_cr = False
    async with closing_stream(chunks):
        async for chunk in chunks:
            total += len(chunk)
            if max_chars is not None and total > max_chars:
                raise StreamLimitExceeded(
                    f"is larger than {max_chars:,} characters", "max_response_bytes"
                )
            if end is not None and anyio.current_time() > end:
                raise StreamLimitExceeded(f"lasted longer than {max_seconds:g} s", "max_stream_s")
            if after_cr and chunk.startswith("\n"):  # a \r\n split between two chunks
                chunk = chunk[1:]
            if not chunk:
                continue
            after_cr = chunk.endswith("\r")
            pieces = _EOL.split(chunk)
            if len(pieces) == 1:
                pending.append(chunk)
                continue
            yield "".join(pending) + pieces[0]
            for piece in pieces[1:-1]:
                yield piece
            pending = [pieces[-1]] if pieces[-1] else []
    if pending:
        yield "".join(pending)


IdleLimit = float | Callable[[], float | None] | None
"""Seconds each server-sent event may take to arrive, a function giving them (asked before
each event), or None for no limit."""


def is_event_stream(response: httpx.Response) -> bool:
    return "text/event-stream" in response.headers.get("content-type", "")


async def iter_sse(lines: AsyncIterator[str], *, idle: IdleLimit = None) -> AsyncIterator[SSEEvent]:
    """Parse ``text/event-stream`` lines into events (an unterminated last event is dropped,
    as the SSE spec says).

    With ``idle``, each event (counted from the previous one, or from the start) must be
    complete within that many seconds, else :class:`StreamIdleTimeout` is raised; comment
    lines and bytes that do not complete an event do not count.
    """
    async with closing_stream(lines):
        event = ""
        data: list[str] = []
        last_id: str | None = None
        limit = idle() if callable(idle) else idle
        deadline = None if limit is None else anyio.current_time() + limit
        while True:
            try:
                if deadline is None:
                    raw = await anext(lines)
                else:
                    with anyio.move_on_after(deadline - anyio.current_time()) as scope:
                        raw = await anext(lines)
                    if scope.cancelled_caught:
                        raise StreamIdleTimeout(limit or 0.0)
            except StopAsyncIteration:
                return
            line = raw.rstrip("\r\n")
            if not line:
                if data:
                    yield SSEEvent(event=event or "message", data="\n".join(data), id=last_id)
                    limit = idle() if callable(idle) else idle
                    deadline = None if limit is None else anyio.current_time() + limit
                event, data = "", []
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
            elif name == "id":
                last_id = value
