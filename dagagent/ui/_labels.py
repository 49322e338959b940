"""How the viewer names what it shows: each task's status, its kind and what it runs, short
labels, and durations for people. The DAG, the timeline, the pages and the text timeline all
use these words, so that a status or a duration reads the same everywhere.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from ..store import RunRecord
from ..text import shorten

__all__ = [
    "STATUSES",
    "fmt_s",
    "short_label",
    "status_counts",
    "status_counts_of",
    "task_kind",
    "task_statuses",
    "task_what",
]

#: Task statuses in the order the viewer lists them; ``pending`` (a running run's task that has
#: not started), ``unrecorded`` (a finished run's task without a result) and ``in-doubt`` (a task
#: whose call with side effects started and has no outcome on record: see
#: docs/exactly-once.md) are the viewer's own.
STATUSES = (
    "running",
    "succeeded",
    "reused",
    "failed",
    "denied",
    "cancelled",
    "skipped",
    "waiting",
    "in-doubt",
    "pending",
    "unrecorded",
)


def task_kind(task: Any) -> str:
    """``tool`` or ``agent`` (read by attribute, so any task type of the plan will do)."""
    return "agent" if getattr(task, "instruction", None) is not None else "tool"


def task_what(task: Any) -> str:
    """What a task runs: its tool's name, ``agent``, or ``sub-solve``."""
    tool = getattr(task, "tool", None)
    if isinstance(tool, str):
        return tool
    return "sub-solve" if getattr(task, "solve", False) else "agent"


def task_statuses(record: RunRecord, in_doubt: Collection[str] = ()) -> dict[str, str]:
    """Each task's status as the viewer names it (see :data:`STATUSES`); ``in_doubt``: the
    tasks with a call in doubt (shown so unless they have an output since)."""
    missing = "pending" if record.status == "running" else "unrecorded"
    status_of = {
        t.id: (r.status.value if (r := record.tasks.get(t.id)) is not None else missing)
        for t in record.plan.tasks
    }
    for tid in in_doubt:
        r = record.tasks.get(tid)
        if tid in status_of and (r is None or not r.status.ok):
            status_of[tid] = "in-doubt"
    return status_of


def status_counts(status_of: Mapping[str, str]) -> list[tuple[str, int]]:
    """How many tasks have each status, in the order of :data:`STATUSES` (statuses no task
    has are left out)."""
    n: dict[str, int] = {}
    for s in status_of.values():
        n[s] = n.get(s, 0) + 1
    return status_counts_of(n)


def status_counts_of(tally: Mapping[str, int]) -> list[tuple[str, int]]:
    """``tally`` (tasks by status) in the order of :data:`STATUSES`, statuses of no task left
    out (a status the viewer does not know comes last, not lost)."""
    known = [(s, tally[s]) for s in STATUSES if tally.get(s)]
    return known + [(s, k) for s, k in tally.items() if k and s not in STATUSES]


def short_label(text: str, n: int) -> str:
    """``text`` shortened to ``n`` characters, for a box or a row label."""
    return shorten(text, n, one_line=False)


def fmt_s(s: float) -> str:
    """A duration for people: ``340ms``, ``2.41s``, ``3m05s``."""
    if s < 1:
        return f"{s * 1000:.0f}ms"
    if s < 60:
        return f"{s:.2f}s"
    m, sec = divmod(round(s), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"
