"""Reading server-sent events (``text/event-stream``), with a limit on how long each event
may take to arrive."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import httpx

from dagagent.llm._json import loads_json

__all__ = ["IdleLimit", "SSEEvent", "StreamIdleTimeout", "is_event_stream", "iter_sse"]


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
    event = ""
    data: list[str] = []
    last_id: str | None = None
    iterator = aiter(lines)
    limit = idle() if callable(idle) else idle
    deadline = None if limit is None else anyio.current_time() + limit
    while True:
        try:
            if deadline is None:
                raw = await anext(iterator)
            else:
                with anyio.move_on_after(deadline - anyio.current_time()) as scope:
                    raw = await anext(iterator)
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
