"""The critical path: the longest chain of dependent tasks, by their durations."""

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
    """The critical path a run measured: the longest chain of tasks that finished (succeeded,
    failed or were denied, each taking its duration; a reused task takes no time). A task the
    run cancelled or skipped did not finish, so no path runs through it."""
    durations: dict[str, float] = {}
    for task_id, r in results.items():
        took = r.took_s
        if took is not None:
            durations[task_id] = took
    return critical_path([t for t in order if t in durations], dependencies, durations)
