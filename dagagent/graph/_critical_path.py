"""The critical path: the longest chain of dependent tasks, by their durations; of a run that
ran, the chain of tasks that held up its end."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..results import TaskResult

__all__ = ["critical_path", "finished_critical_path"]


def critical_path(
    order: Sequence[str],
    dependencies: Mapping[str, Sequence[str]],
    durations: Mapping[str, float],
) -> tuple[float, list[str]]:
    """Length and tasks of the longest path, for tasks given in topological ``order``.

    Each task's path comes through its dependency that finishes last (the first of them on a
    tie); a dependency not in ``order`` finishes at 0."""
    finish: dict[str, float] = {}
    via: dict[str, str | None] = {}
    for n in order:
        best, best_dep = 0.0, None
        for d in dependencies.get(n, ()):
            f = finish.get(d, 0.0)
            if best_dep is None or f > best:
                best, best_dep = f, d
        finish[n] = best + durations.get(n, 0.0)
        via[n] = best_dep
    if not finish:
        return 0.0, []
    end = max(finish, key=finish.__getitem__)
    path = [end]
    node = via[end]
    while node is not None:
        path.append(node)
        node = via[node]
    path.reverse()
    return finish[end], path


def finished_critical_path(
    order: Sequence[str],
    dependencies: Mapping[str, Sequence[str]],
    results: Mapping[str, TaskResult],
) -> tuple[float, list[str]]:
    """The critical path a run measured: the chain of tasks that held up its end. It ends at
    the task that finished last, and each task on it is reached through its dependency that
    actually finished last, the one it waited for; its length is the time those tasks took
    (succeeded, failed or denied, each its duration; a reused task takes no time). A task
    the run cancelled or skipped did not finish, so no path runs through it.

    When every task starts as soon as its dependencies are done, that is the longest chain
    by durations. It differs when something else held tasks back (a plan still being
    written, a level barrier, a concurrency limit): then the dependency that finished last
    is not the one with the longest chain behind it, and the path follows what really
    happened. Results without times are measured by durations alone."""
    durations: dict[str, float] = {}
    ends: dict[str, float] = {}
    for task_id, r in results.items():
        took = r.took_s
        if took is not None:
            durations[task_id] = took
            if r.finished_at is not None:
                ends[task_id] = r.finished_at
    finished = [t for t in order if t in durations]
    if len(ends) < len(durations):
        return critical_path(finished, dependencies, durations)
    length: dict[str, float] = {}
    via: dict[str, str | None] = {}
    for n in finished:
        best: str | None = None
        for d in dependencies.get(n, ()):
            if d in ends and (best is None or ends[d] > ends[best]):
                best = d
        via[n] = best
        length[n] = durations[n] + (length[best] if best is not None else 0.0)
    if not finished:
        return 0.0, []
    last = max(finished, key=ends.__getitem__)
    path = [last]
    node = via[last]
    while node is not None:
        path.append(node)
        node = via[node]
    path.reverse()
    return length[last], path
