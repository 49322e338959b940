"""What a revised plan may reuse of its parent run: :func:`reuse_map` (the ``reuse=`` argument
of :func:`dagagent.execute`), :func:`predict_reuse` (which tasks will be reused) and
:func:`new_versions` (the successes it changes under their ids, which run again)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import networkx as nx

from ..graph import dependency_graph
from ..plan import Plan, Task, element_key, same_call
from ..results import TaskResult

if TYPE_CHECKING:
    from ..store import RunRecord


def reuse_map(record: RunRecord) -> dict[str, tuple[str, Any]]:
    """``{task_id: (fingerprint, output)}`` of the run's succeeded and reused tasks: pass it as
    ``execute(..., reuse=...)`` so that unchanged successes are not run again. The elements
    of a map task that succeeded are there too, each under
    :func:`~dagagent.plan.element_key` of its fingerprint, even when the task failed: a
    replan runs only the elements that did not succeed, or whose input changed. A partial
    answer (an agent that stopped before answering) is never reused: a revision runs it again."""
    out: dict[str, tuple[str, Any]] = {}
    for tid, r in record.tasks.items():
        fp = record.fingerprints.get(tid)
        if r.status.ok and not r.partial and fp is not None and not output_lost(r):
            out[tid] = (fp, r.output)
    for task in record.plan.tasks:
        mapped = record.tasks.get(task.id)
        if mapped is not None and mapped.elements:
            out.update(_element_reuse(task, mapped.elements))
    return out


def _element_reuse(task: Task, elements: list[TaskResult]) -> dict[str, tuple[str, Any]]:
    """The elements of a map task that succeeded, under :func:`~dagagent.plan.element_key`
    (whether or not the task as a whole did)."""
    out: dict[str, tuple[str, Any]] = {}
    for e in elements:
        if (
            e.status.ok
            and not e.partial
            and e.args is not None
            and e.redacted_args is None
            and not output_lost(e)
        ):
            fp = task.fingerprint(e.args)
            out[element_key(task.id, fp)] = (fp, e.output)
    return out


def output_lost(r: TaskResult) -> bool:
    """A success whose output the store could not write: nothing to reuse."""
    from ..store import OUTPUT_NOT_RECORDED

    return r.error_type == OUTPUT_NOT_RECORDED


def new_versions(old: Plan, new: Plan, results: Mapping[str, TaskResult]) -> list[str]:
    """The tasks of ``new`` that succeeded in the run of ``old`` (``results``) and that
    ``new`` changes under the same id (another tool or arguments, another list): new versions
    of those tasks, which run again (their fingerprints changed), in ``new``'s order."""
    before = {t.id: t for t in old.tasks}
    return [
        t.id
        for t in new.tasks
        if t.id in before
        and t.id in results
        and results[t.id].status.ok
        and not same_call(before[t.id], t)
    ]


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
    decided: dict[str, ReuseDecision] = {}
    changed = set(new_versions(record.plan, new, record.tasks))
    for tid in order:
        old = before.get(tid)
        r = record.tasks.get(tid)
        if old is None:
            decided[tid] = ReuseDecision(tid, "run", "new task")
        elif r is None:
            decided[tid] = ReuseDecision(tid, "run", "no recorded result")
        elif tid in changed:
            why = f"a new version: its call changed since it {r.status.value}"
            decided[tid] = ReuseDecision(tid, "run", why)
        elif tid not in reusable:
            why = f"{r.status.value} before"
            kept = sum(1 for e in r.elements or () if e.status.ok)
            if kept and not r.status.ok:
                why += f"; the {kept} of {len(r.elements or ())} elements that succeeded are reused"
                why += " if their input is unchanged"
            if r.status.ok:
                if r.partial:
                    why += " with a partial answer (a revision runs it again)"
                elif output_lost(r):
                    why += ", output not recorded"
                elif r.redacted_args is not None:
                    why += ", arguments redacted"
                else:
                    why += ", arguments not recorded"
            decided[tid] = ReuseDecision(tid, "run", why)
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
