"""A validated plan as a graph: its tasks, their dependencies and dependents, and its levels.

Executors read :class:`PlanGraph` (``dependencies``, ``dependents``, ``order``, ``levels``);
:func:`dagagent.validate` builds it. A plan that is still arriving is a
:class:`~dagagent.graph.GrowingGraph`, the same type, whose ``complete`` stays false until it is
closed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from typing import TYPE_CHECKING

from ._critical_path import critical_path

if TYPE_CHECKING:
    import networkx as nx

    from ..errors import Issue
    from ..plan import Plan, Task
    from ..references import Template

__all__ = ["PlanGraph", "generations", "nx_graph", "successors"]


class PlanGraph:
    """A validated plan: its tasks by id, compiled references, dependency edges and levels."""

    complete = True
    """``False`` while tasks are still being added (a streamed plan: see
    :class:`~dagagent.graph.GrowingGraph`); a validated plan is complete."""
    aborted = False
    """Whether planning stopped early (an invalid task): only a growing graph can be."""

    def __init__(
        self,
        plan: Plan,
        templates: dict[str, Template],
        warnings: list[Issue],
        *,
        dependencies: dict[str, tuple[str, ...]],
        levels: list[list[str]],
        dependents: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """``levels``: the topological levels, each in plan order; ``dependents`` when the
        caller has them already (else they are worked out from ``dependencies``)."""
        self.plan = plan
        self.tasks: dict[str, Task] = {t.id: t for t in plan.tasks}
        self.templates = templates
        self.warnings = warnings
        self.dependencies = dependencies
        self._dependents = dependents
        self.levels = levels
        self.order: list[str] = [n for level in levels for n in level]
        self._graph: nx.DiGraph[str] | None = None

    @property
    def dependents(self) -> Mapping[str, Sequence[str]]:
        """The tasks that depend on each task, in plan order."""
        if self._dependents is None:
            self._dependents = successors(self.dependencies)
        return self._dependents

    def watch(self, watcher: Callable[[str | None], None]) -> None:
        """Tell ``watcher`` about tasks added later, then ``None`` when the plan is complete.
        A validated plan is complete already: ``watcher(None)`` at once."""
        watcher(None)

    def unwatch(self, watcher: Callable[[str | None], None]) -> None:
        """Stop telling ``watcher``."""

    @property
    def graph(self) -> nx.DiGraph[str]:
        """The dependency graph as a networkx ``DiGraph`` (an edge runs from a dependency to
        its dependent)."""
        if self._graph is None:
            self._graph = nx_graph(self.dependencies)
        return self._graph

    def __len__(self) -> int:
        return len(self.tasks)

    def descendants(self, task_id: str) -> set[str]:
        """Every task that depends on ``task_id``, directly or not."""
        dependents = self.dependents
        seen: set[str] = set()
        stack = list(dependents[task_id])
        while stack:
            n = stack.pop()
            if n not in seen:
                seen.add(n)
                stack.extend(dependents[n])
        return seen

    def critical_path(self, durations: Mapping[str, float]) -> tuple[float, list[str]]:
        """Longest path through the graph when each task takes ``durations[id]`` (missing: 0)."""
        return critical_path(self.order, self.dependencies, durations)

    def level_bound(self, durations: Mapping[str, float]) -> float:
        """Sum over levels of the slowest task: the best a level-barrier executor can do."""
        return sum(
            max((durations.get(t, 0.0) for t in level), default=0.0) for level in self.levels
        )


def successors(preds: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """Each task's dependents, in the order of ``preds`` (every dependency must be a key)."""
    succs: dict[str, list[str]] = {n: [] for n in preds}
    for n, ds in preds.items():
        for d in ds:
            succs[d].append(n)
    return succs


def generations(
    preds: Mapping[str, Sized], succs: Mapping[str, Iterable[str]]
) -> tuple[list[list[str]], int]:
    """Kahn's algorithm by generations: (levels, number of tasks placed). Fewer placed than
    tasks means a cycle."""
    indegree = {n: len(p) for n, p in preds.items()}
    current = [n for n, k in indegree.items() if not k]
    levels: list[list[str]] = []
    placed = 0
    while current:
        levels.append(current)
        placed += len(current)
        following: list[str] = []
        for n in current:
            for c in succs[n]:
                indegree[c] -= 1
                if not indegree[c]:
                    following.append(c)
        current = following
    return levels, placed


def nx_graph(preds: Mapping[str, Iterable[str]]) -> nx.DiGraph[str]:
    """``preds`` (each task's dependencies) as a networkx ``DiGraph``."""
    import networkx as nx  # imported when needed: it takes a quarter of a second

    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(preds)
    graph.add_edges_from((d, n) for n, ds in preds.items() for d in ds)
    return graph
