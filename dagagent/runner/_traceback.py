"""A failing tool's traceback, as ``TaskResult.traceback`` keeps it: the user's own frames
(the runner's, the thread pool's and the event loop's frames above them are left out),
chained exceptions included, and bounded in size.

Only failures that are not dagagent's own get one: a :class:`~dagagent.errors.DagagentError`
(a timeout, a denial, bad arguments, an agent that stopped) names its problem in its message,
and its traceback would show dagagent's code, not the user's.
"""

from __future__ import annotations

import traceback
from types import TracebackType

from ..errors import DagagentError

__all__ = ["MAX_TRACEBACK_CHARS", "task_traceback"]

#: At most this many characters of a traceback are kept: its beginning and its end (the
#: innermost frames and the error), with a note of what was cut between them.
MAX_TRACEBACK_CHARS = 8000

# Frames of these modules, above the first frame of the tool's own code, are how the call got
# there (the runner, a worker thread, the event loop, a Dask worker): not the user's story.
_PLUMBING = (
    "dagagent.runner",
    "dagagent.tools",
    "dagagent.executors",
    "dagagent.observability",
    "anyio",
    "asyncio",
    "concurrent.futures",
    "threading",
    "contextvars",
    "functools",
    "distributed",
    "dask",
    "tornado",
    "opentelemetry",
)


def task_traceback(exc: BaseException) -> str | None:
    """The traceback to record for a task that failed with ``exc`` (``None`` for
    dagagent's own errors, which explain themselves)."""
    if isinstance(exc, DagagentError):
        return None
    try:
        tb = _from_user_code(exc.__traceback__)
        text = "".join(traceback.format_exception(type(exc), exc, tb))
    except Exception:  # a record of the failure must never become a second failure
        return None
    return bound(text)


def _from_user_code(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` from its first frame outside the plumbing (all of it if every frame is)."""
    first = tb
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if not isinstance(module, str) or not module.startswith(_PLUMBING):
            return tb
        tb = tb.tb_next
    return first


def bound(text: str, limit: int = MAX_TRACEBACK_CHARS) -> str:
    """``text`` if it fits in ``limit`` characters, else its beginning and its end (two
    thirds of what is kept: the innermost frames and the error) with the number of
    characters cut between them."""
    if len(text) <= limit:
        return text
    keep = max(limit - 80, 2)  # room for the note
    head = keep // 3
    tail = keep - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n... ({cut} characters of the traceback cut) ...\n{text[-tail:]}"
