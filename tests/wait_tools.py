"""The tools and plans the tests of approvals that wait share, in-process
(``tests/workflows/test_resume.py``) and in real processes (``tests/cli/test_waiting.py``,
which copies this file next to its plans and passes ``--tools wait_tools.py:registry``).

Every call is logged as one line (``fetch Paris``, ``send ann hi``): to the function given to
:func:`make_registry`, or, for :data:`registry`, to the file ``$WAIT_LOG``. ``slow`` blocks
while the file ``$WAIT_FLAG`` exists (at most 60 s)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from dagagent import Registry


def make_registry(log: Callable[[str], Any]) -> Registry:
    registry = Registry()

    @registry.tool
    def fetch(city: str) -> dict[str, Any]:
        """Fetch a city."""
        log(f"fetch {city}")
        return {"city": city}

    @registry.tool(side_effects=True)
    def send(to: str, text: str = "hi") -> str:
        """Send a message."""
        log(f"send {to} {text}")
        return f"sent to {to}"

    @registry.tool
    def after(note: str) -> str:
        """Note what happened."""
        log(f"after {note}")
        return note

    @registry.tool
    def slow(name: str) -> str:
        """Block while the flag file exists (at most 60 s)."""
        log(f"slow {name}")
        deadline = time.monotonic() + 60
        while os.path.exists(os.environ["WAIT_FLAG"]) and time.monotonic() < deadline:
            time.sleep(0.02)
        return name

    return registry


def _log_to_file(line: str) -> None:
    with open(os.environ["WAIT_LOG"], "a", encoding="utf-8") as f:
        f.write(line + "\n")


registry = make_registry(_log_to_file)

PLAN = {
    "goal": "fetch, then send, then note",
    "tasks": [
        {"id": "a", "tool": "fetch", "args": {"city": "Paris"}},
        {"id": "mail", "tool": "send", "args": {"to": "${a.city}"}},
        {"id": "done", "tool": "after", "args": {"note": "${mail}"}},
        {"id": "b", "tool": "fetch", "args": {"city": "Tokyo"}},
    ],
}

TWO = {
    "goal": "two waiting branches",
    "tasks": [
        {"id": "m1", "tool": "send", "args": {"to": "ann"}},
        {"id": "d1", "tool": "after", "args": {"note": "${m1}"}},
        {"id": "m2", "tool": "send", "args": {"to": "bob"}},
        {"id": "d2", "tool": "after", "args": {"note": "${m2}"}},
    ],
}

#: Two waiting calls; once both are approved, the task after the first fails (it looks up a
#: field of a text) and the second's branch is independent of it. Run serially (a level
#: at a time, each in plan order), ``d2`` starts after ``bad`` failed: it runs under
#: ``on_failure="continue"`` only.
BESIDE = {
    "goal": "a failure beside an independent branch",
    "tasks": [
        {"id": "m1", "tool": "send", "args": {"to": "ann"}},
        {"id": "bad", "tool": "after", "args": {"note": "${m1.missing}"}},
        {"id": "m2", "tool": "send", "args": {"to": "bob"}},
        {"id": "d2", "tool": "after", "args": {"note": "${m2}"}},
    ],
}
