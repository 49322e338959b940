"""Reviewing a recorded run: what failed and why, what was cancelled or skipped because of it,
what a condition skipped, what succeeded (:func:`review_run`, :func:`format_review`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import networkx as nx

from ..graph import dependency_graph
from ..results import TaskStatus
from ..text import shorten as _shorten
from ._reuse import output_lost

if TYPE_CHECKING:
    from ..store import RunRecord

_FAILED = (TaskStatus.FAILED, TaskStatus.DENIED)
_BLOCKED = (TaskStatus.CANCELLED, TaskStatus.SKIPPED)
#: Tasks with no result yet: one still running, one waiting for a person's decision.
_NO_RESULT_YET = (TaskStatus.RUNNING, TaskStatus.WAITING)


def shorten(value: Any, width: int = 80) -> str:
    """One line, at most ``width`` characters (JSON for structured values), cut with ``...``:
    the review is plain ASCII text (see :func:`dagagent.text.shorten`)."""
    return _shorten(value, width, ellipsis="...")


@dataclass(frozen=True)
class TaskOutcome:
    """One task in a review."""

    task_id: str
    status: str  # a TaskStatus value, or "unrecorded" (the run was killed first)
    tool: str
    attempts: int = 0
    duration_s: float | None = None
    error: str | None = None
    error_type: str | None = None
    output: str | None = None  # shortened
    caused_by: tuple[str, ...] = ()  # failed tasks upstream (skipped) or in the run (cancelled)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "status": self.status,
            "tool": self.tool,
            "attempts": self.attempts,
            "duration_s": self.duration_s,
            "error": self.error,
            "error_type": self.error_type,
            "output": self.output,
            "caused_by": list(self.caused_by),
        }


@dataclass(frozen=True)
class RunReview:
    """What happened in a run, grouped for a reader deciding how to fix the plan."""

    run_id: str
    goal: str
    status: str
    failed: list[TaskOutcome]
    blocked: list[TaskOutcome]  # cancelled or skipped
    succeeded: list[TaskOutcome]  # succeeded or reused
    # no result: the process stopped before they finished (``unrecorded``), or not yet
    # (``running``, ``waiting`` for a person)
    unrecorded: list[TaskOutcome]
    #: skipped by a condition (its own ``when`` was false, or a task it depends on was
    #: skipped so): as the plan meant, not a failure's doing
    by_condition: list[TaskOutcome] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "goal": self.goal,
            "status": self.status,
            "failed": [o.to_json_dict() for o in self.failed],
            "blocked": [o.to_json_dict() for o in self.blocked],
            "succeeded": [o.to_json_dict() for o in self.succeeded],
            "unrecorded": [o.to_json_dict() for o in self.unrecorded],
            "skipped_by_condition": [o.to_json_dict() for o in self.by_condition],
        }


def review_run(record: RunRecord, *, width: int = 80) -> RunReview:
    """Group the tasks of ``record`` into failed, blocked (cancelled/skipped), succeeded and
    unrecorded, with errors, the failures that blocked each task, and shortened outputs."""
    plan = record.plan
    results = record.tasks
    graph = dependency_graph(plan)
    failed_ids = [t for t, r in results.items() if r.status in _FAILED]
    failed: list[TaskOutcome] = []
    blocked: list[TaskOutcome] = []
    succeeded: list[TaskOutcome] = []
    unrecorded: list[TaskOutcome] = []
    by_condition: list[TaskOutcome] = []
    for t in plan.tasks:
        r = results.get(t.id)
        if r is None or r.status in _NO_RESULT_YET:
            status = "unrecorded" if r is None else r.status.value
            unrecorded.append(TaskOutcome(t.id, status, t.label))
            continue
        tool, dur = t.label, r.duration_s
        if r.skipped_by_condition:
            by_condition.append(TaskOutcome(t.id, r.status.value, tool, error=r.error))
        elif r.status in _FAILED:
            failed.append(
                TaskOutcome(t.id, r.status.value, tool, r.attempts, dur, r.error, r.error_type)
            )
        elif r.status in _BLOCKED:
            if r.status is TaskStatus.SKIPPED:
                upstream = nx.ancestors(graph, t.id)
                causes = tuple(f for f in failed_ids if f in upstream)
                if not causes:  # blocked by a cancelled or unrecorded task upstream
                    causes = tuple(
                        a
                        for a in graph.predecessors(t.id)
                        if not (a in results and results[a].status.ok)
                    )
            else:
                causes = tuple(failed_ids)
            blocked.append(
                TaskOutcome(t.id, r.status.value, tool, r.attempts, dur, r.error, caused_by=causes)
            )
        else:
            shown = shorten(f"({r.error})" if output_lost(r) else r.output, width)
            succeeded.append(TaskOutcome(t.id, r.status.value, tool, r.attempts, dur, output=shown))
    return RunReview(
        record.run_id,
        record.goal,
        record.status.value,
        failed,
        blocked,
        succeeded,
        unrecorded,
        by_condition,
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def format_review(review: RunReview) -> str:
    """The review as plain text (what ``dagagent replan`` prints)."""
    lines = [f"run {review.run_id}: {review.status}" + (f" - {review.goal}" if review.goal else "")]
    if review.failed:
        lines.append(f"failed ({len(review.failed)}):")
        for o in review.failed:
            tries = f", {_plural(o.attempts, 'attempt')}" if o.attempts else ""
            lines.append(f"  {o.task_id} [{o.tool}{tries}] {o.status}: {o.error}")
    if review.blocked:
        lines.append(f"cancelled or skipped because of it ({len(review.blocked)}):")
        for o in review.blocked:
            why = f" (because of {', '.join(o.caused_by)})" if o.caused_by else ""
            lines.append(f"  {o.task_id} [{o.tool}] {o.status}{why}")
    if review.unrecorded:
        lines.append(f"no result (yet) ({len(review.unrecorded)}):")
        lines.append(
            "  "
            + ", ".join(
                o.task_id if o.status == "unrecorded" else f"{o.task_id} ({o.status})"
                for o in review.unrecorded
            )
        )
    if review.by_condition:
        lines.append(f"skipped by a condition ({len(review.by_condition)}):")
        for o in review.by_condition:
            lines.append(f"  {o.task_id} [{o.tool}]: {o.error}")
    if review.succeeded:
        lines.append(f"succeeded ({len(review.succeeded)}):")
        for o in review.succeeded:
            tag = " (reused)" if o.status == TaskStatus.REUSED.value else ""
            lines.append(f"  {o.task_id} [{o.tool}]{tag} = {o.output}")
    if not (
        review.failed
        or review.blocked
        or review.unrecorded
        or review.succeeded
        or review.by_condition
    ):
        lines.append("no task of its plan was accepted, so nothing ran")
    elif not (review.failed or review.blocked or review.unrecorded):
        lines.append("nothing failed")
    return "\n".join(lines)
