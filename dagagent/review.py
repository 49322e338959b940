"""Reviewing a recorded run, comparing plans, deciding what a revised plan may reuse.

Pure functions over records (no I/O): :func:`review_run` says what failed and why, what was
cancelled or skipped because of it and what succeeded; :func:`diff_plans` lists added,
removed and changed tasks (and what changed in each); :func:`reuse_map` is the
``reuse={task_id: (fingerprint, output)}`` argument of :func:`dagagent.execute` built from a
parent run; :func:`predict_reuse` tells, before running, which tasks of a revised plan will be
reused. The runner makes the final decision at run time by comparing fingerprints
(:func:`dagagent.plan.task_fingerprint`: id, tool, resolved arguments) and the outputs of the
task's dependencies with the parent run's, so a changed upstream output defeats reuse even when
the task's own definition is unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import networkx as nx

from .graph import dependency_graph
from .plan import Plan, Task, ToolTask, same_call
from .results import TaskResult, TaskStatus, jsonable
from .text import shorten as _shorten

if TYPE_CHECKING:
    from .store import RunRecord

__all__ = [
    "Change",
    "PlanDiff",
    "ReuseDecision",
    "RunReview",
    "TaskOutcome",
    "diff_plans",
    "format_diff",
    "format_review",
    "predict_reuse",
    "reuse_map",
    "review_run",
    "shorten",
]

_FAILED = (TaskStatus.FAILED, TaskStatus.DENIED)
_BLOCKED = (TaskStatus.CANCELLED, TaskStatus.SKIPPED)


def shorten(value: Any, width: int = 80) -> str:
    """One line, at most ``width`` characters (JSON for structured values), cut with ``...``:
    the review is plain ASCII text (see :func:`dagagent.text.shorten`)."""
    return _shorten(value, width, ellipsis="...")


# ---------------------------------------------------------------------------------------------
# Review


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
    unrecorded: list[TaskOutcome]  # no result: the process stopped before they finished

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "goal": self.goal,
            "status": self.status,
            "failed": [o.to_json_dict() for o in self.failed],
            "blocked": [o.to_json_dict() for o in self.blocked],
            "succeeded": [o.to_json_dict() for o in self.succeeded],
            "unrecorded": [o.to_json_dict() for o in self.unrecorded],
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
    for t in plan.tasks:
        r = results.get(t.id)
        if r is None:
            unrecorded.append(TaskOutcome(t.id, "unrecorded", t.label))
            continue
        tool, dur = t.label, r.duration_s
        if r.status in _FAILED:
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
            shown = shorten(f"({r.error})" if _output_lost(r) else r.output, width)
            succeeded.append(TaskOutcome(t.id, r.status.value, tool, r.attempts, dur, output=shown))
    return RunReview(
        record.run_id, record.goal, record.status.value, failed, blocked, succeeded, unrecorded
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
        lines.append(f"no result recorded, the run stopped first ({len(review.unrecorded)}):")
        lines.append("  " + ", ".join(o.task_id for o in review.unrecorded))
    if review.succeeded:
        lines.append(f"succeeded ({len(review.succeeded)}):")
        for o in review.succeeded:
            tag = " (reused)" if o.status == TaskStatus.REUSED.value else ""
            lines.append(f"  {o.task_id} [{o.tool}]{tag} = {o.output}")
    if not (review.failed or review.blocked or review.unrecorded):
        lines.append("nothing failed")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Plan diff

_FIELDS = (
    "tool",
    "instruction",
    "args",
    "tools",
    "depends_on",
    "retries",
    "timeout_s",
    "description",
)


@dataclass(frozen=True)
class Change:
    """One changed field of a task; ``field`` is a path such as ``args.city``."""

    field: str
    old: Any
    new: Any

    def __str__(self) -> str:
        if self.field == "depends_on":
            old, new = set(self.old or ()), set(self.new or ())
            parts = [f"+{d}" for d in sorted(new - old)] + [f"-{d}" for d in sorted(old - new)]
            return f"depends_on {' '.join(parts)}"
        return f"{self.field}: {_show(self.old)} -> {_show(self.new)}"

    def to_json_dict(self) -> dict[str, Any]:
        return {"field": self.field, "old": jsonable(self.old), "new": jsonable(self.new)}


_ABSENT = "(none)"


def _show(value: Any) -> str:
    if value is None:
        return _ABSENT
    return shorten(value if not isinstance(value, str) else json.dumps(value), 60)


@dataclass(frozen=True)
class PlanDiff:
    """What changed from one plan to another, task by task (matched by id)."""

    added: list[str]
    removed: list[str]
    changed: dict[str, list[Change]]
    unchanged: list[str]
    goal: tuple[str, str] | None = None

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed or self.goal)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "goal": list(self.goal) if self.goal else None,
            "added": self.added,
            "removed": self.removed,
            "changed": {k: [c.to_json_dict() for c in v] for k, v in self.changed.items()},
            "unchanged": self.unchanged,
        }


def _value_changes(path: str, old: Any, new: Any) -> Iterator[Change]:
    if old == new and type(old) is type(new):
        return
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for k in list(old) + [k for k in new if k not in old]:
            yield from _value_changes(f"{path}.{k}", old.get(k), new.get(k))
        return
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from _value_changes(f"{path}.{i}", a, b)
        return
    yield Change(path, old, new)


# What a field of the other kind reads as: a tool task has no instruction, an agent no args.
_ABSENT_FIELD: dict[str, Any] = {"args": {}}


def _task_changes(old: Task, new: Task) -> list[Change]:
    changes: list[Change] = []
    for name in _FIELDS:
        default = _ABSENT_FIELD.get(name)
        a: Any = getattr(old, name, default)
        b: Any = getattr(new, name, default)
        if name == "depends_on":
            if set(a) != set(b):
                changes.append(Change(name, sorted(a), sorted(b)))
        elif name == "args":
            changes.extend(_value_changes("args", a, b))
        elif a != b or type(a) is not type(b):
            changes.append(Change(name, a, b))
    return changes


def diff_plans(old: Plan, new: Plan) -> PlanDiff:
    """Added, removed and changed tasks (matched by id), in the order of each plan."""
    before = {t.id: t for t in old.tasks}
    after = {t.id: t for t in new.tasks}
    added = [t.id for t in new.tasks if t.id not in before]
    removed = [t.id for t in old.tasks if t.id not in after]
    changed: dict[str, list[Change]] = {}
    unchanged: list[str] = []
    for t in new.tasks:
        if t.id in before:
            ch = _task_changes(before[t.id], t)
            if ch:
                changed[t.id] = ch
            else:
                unchanged.append(t.id)
    goal = (old.goal, new.goal) if old.goal != new.goal else None
    return PlanDiff(added, removed, changed, unchanged, goal)


def _describe_task(task: Task) -> str:
    if isinstance(task, ToolTask):
        text = f"{task.tool}({shorten(task.args, 60)})"
    else:
        text = f"agent: {shorten(task.instruction, 60)}"
    if task.depends_on:
        text += f" after {', '.join(task.depends_on)}"
    return text


def format_diff(diff: PlanDiff, old: Plan, new: Plan) -> str:
    """The diff as plain text: ``+`` added, ``-`` removed, ``~`` changed (with each change)."""
    if diff.empty:
        return "the plans are the same"
    before = {t.id: t for t in old.tasks}
    after = {t.id: t for t in new.tasks}
    lines: list[str] = []
    if diff.goal:
        lines.append(f"~ goal: {json.dumps(diff.goal[0])} -> {json.dumps(diff.goal[1])}")
    lines.extend(f"+ {tid}: {_describe_task(after[tid])}" for tid in diff.added)
    lines.extend(f"- {tid}: {_describe_task(before[tid])}" for tid in diff.removed)
    for tid, changes in diff.changed.items():
        lines.append(f"~ {tid}: " + "; ".join(str(c) for c in changes))
    summary = (
        f"{len(diff.added)} added, {len(diff.removed)} removed, {len(diff.changed)} changed, "
        f"{len(diff.unchanged)} unchanged"
    )
    lines.append(summary)
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Reuse


def reuse_map(record: RunRecord) -> dict[str, tuple[str, Any]]:
    """``{task_id: (fingerprint, output)}`` of the run's succeeded and reused tasks: pass it as
    ``execute(..., reuse=...)`` so that unchanged successes are not run again."""
    out: dict[str, tuple[str, Any]] = {}
    for tid, r in record.tasks.items():
        fp = record.fingerprints.get(tid)
        if r.status.ok and fp is not None and not _output_lost(r):
            out[tid] = (fp, r.output)
    return out


def _output_lost(r: TaskResult) -> bool:
    """A success whose output the store could not write: nothing to reuse."""
    from .store import OUTPUT_NOT_RECORDED

    return r.error_type == OUTPUT_NOT_RECORDED


@dataclass(frozen=True)
class ReuseDecision:
    """The prediction for one task of a revised plan.

    ``action``: ``reuse`` (unchanged success, inputs unchanged), ``maybe`` (unchanged success,
    but a task it depends on runs again: reused only if that task's output comes out equal),
    or ``run``.
    """

    task_id: str
    action: str
    reason: str


def predict_reuse(record: RunRecord, new: Plan) -> dict[str, ReuseDecision]:
    """For each task of ``new`` (in plan order): will running it with ``reuse_map(record)``
    reuse the recorded output? A static prediction; the runner decides at run time."""
    before = {t.id: t for t in record.plan.tasks}
    reusable = reuse_map(record)
    graph = dependency_graph(new)
    try:
        order = list(nx.topological_sort(graph))
    except nx.NetworkXUnfeasible:  # an invalid plan: no prediction is worth making
        order = [t.id for t in new.tasks]
    tasks = {t.id: t for t in new.tasks}
    decided: dict[str, ReuseDecision] = {}
    for tid in order:
        t = tasks[tid]
        old = before.get(tid)
        r = record.tasks.get(tid)
        if old is None:
            decided[tid] = ReuseDecision(tid, "run", "new task")
        elif r is None:
            decided[tid] = ReuseDecision(tid, "run", "no recorded result")
        elif tid not in reusable:
            why = f"{r.status.value} before"
            if r.status.ok:
                if _output_lost(r):
                    why += ", output not recorded"
                elif r.redacted_args is not None:
                    why += ", arguments redacted"
                else:
                    why += ", arguments not recorded"
            decided[tid] = ReuseDecision(tid, "run", why)
        elif not same_call(old, t):
            decided[tid] = ReuseDecision(tid, "run", "changed")
        else:
            rerun = sorted(
                d for d in graph.predecessors(tid) if d in decided and decided[d].action != "reuse"
            )
            if rerun:
                decided[tid] = ReuseDecision(
                    tid, "maybe", f"unchanged, but {', '.join(rerun)} runs again"
                )
            else:
                decided[tid] = ReuseDecision(tid, "reuse", "unchanged success")
    return {t.id: decided[t.id] for t in new.tasks}
