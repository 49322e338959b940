"""Comparing two plans: added, removed and changed tasks, and what changed in each
(:func:`diff_plans`, :func:`format_diff`)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..plan import Plan, Task, ToolTask
from ..text import jsonable

if TYPE_CHECKING:
    pass
from ._review import shorten

_FIELDS = (
    "tool",
    "instruction",
    "args",
    "tools",
    "solve",
    "depends_on",
    "when",
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
_ABSENT_FIELD: dict[str, Any] = {"args": {}, "solve": False}


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
        kind = "sub-solve" if task.solve else "agent"
        text = f"{kind}: {shorten(task.instruction, 60)}"
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
