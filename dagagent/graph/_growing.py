"""A plan that arrives task by task: checking each task as it comes, and a graph that grows.

When a plan streams from a model, every task is checked the moment it is complete, against
the tasks seen before it (:class:`PlanChecker`): the checks of :func:`dagagent.validate`
(the same code, :func:`dagagent.graph.check_task`), with one rule more: a task may depend
only on tasks listed *before* it. So every prefix of the plan is a valid acyclic plan, and a
task that passed its check never becomes invalid.

A task that passed goes into a :class:`GrowingGraph`, a :class:`~dagagent.graph.PlanGraph`
that executors may already run while tasks are still being added. It tells its watchers
(executors) about each added task and, once, that the plan is complete (``close()``), or that
planning stopped because a later task was invalid (``close(aborted=True)``). Nothing polls.

Levels of a growing graph are depth levels: a task's level is one more than the deepest of
its dependencies (0 without any). A task's level is known when it arrives and never changes
(later tasks cannot become its dependencies), so ``levels`` only ever grows; when the graph is
closed they are exactly the levels :func:`dagagent.validate` computes for the whole plan.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import Issue
from ..plan import ID_RE, AgentTask, Plan, Task
from ..references import Template
from ._graph import PlanGraph
from ._validate import check_task

if TYPE_CHECKING:
    from ..tools import Registry

__all__ = ["GrowingGraph", "PlanChecker", "TaskCheck", "Watcher"]

Watcher = Callable[[str | None], None]
"""Told each added task id, then ``None`` once when the graph is closed."""


class TaskCheck:
    """What checking one task found: its issues (empty: valid), its compiled template and
    the dependencies it has (all of them tasks seen before it)."""

    __slots__ = ("dependencies", "issues", "task", "template")

    def __init__(
        self, task: Task, issues: list[Issue], template: Template, dependencies: list[str]
    ) -> None:
        self.task = task
        self.issues = issues
        self.template = template
        self.dependencies = tuple(dependencies)

    @property
    def ok(self) -> bool:
        return not self.issues


class PlanChecker:
    """Checks tasks one at a time against the tasks accepted before them.

    ``agent_tasks=False`` refuses agent tasks (code ``agent_task``), as the planner does when
    its plans may hold tool calls only. ``known``: ids accepted in advance (tasks that
    already ran; a new task may reference them).
    """

    def __init__(
        self,
        registry: Registry | None,
        *,
        agent_tasks: bool = True,
        known: tuple[str, ...] = (),
    ) -> None:
        self.registry = registry
        self.agent_tasks = agent_tasks
        self.ids: set[str] = set(known)
        self.tasks: dict[str, Task] = {}  # accepted so far: what a map's list may be read from

    def check(self, task: Task) -> TaskCheck:
        """Check ``task``; when it is valid, it counts as seen for the tasks after it."""
        tid = task.id
        issues: list[Issue] = []
        if tid in self.ids:
            issues.append(Issue("duplicate_id", tid, f"task id {tid!r} is used more than once"))
        if not ID_RE.match(tid):
            issues.append(
                Issue(
                    "invalid_id",
                    tid,
                    f"task id {tid!r} is not valid: use 1-64 letters, digits, '_' or '-', "
                    "not starting with '-' (dots are reserved for reference paths)",
                )
            )
        if not self.agent_tasks and isinstance(task, AgentTask):
            issues.append(
                Issue(
                    "agent_task",
                    tid,
                    "the task has no 'tool': every task must call one of the listed tools",
                )
            )
        found, template, deps = check_task(task, self.ids, self.registry, tasks=self.tasks)
        for issue in found:
            if issue.code == "missing_dependency":
                issue = Issue(
                    issue.code,
                    issue.task_id,
                    f"{issue.message} (a task may only use tasks listed before it)",
                )
            elif issue.code == "missing_instruction" and not self.agent_tasks:
                continue  # already said: agent_task
            issues.append(issue)
        if not issues:
            self.ids.add(tid)
            self.tasks[tid] = task
        return TaskCheck(task, issues, template, deps)


class GrowingGraph(PlanGraph):
    """A :class:`~dagagent.graph.PlanGraph` whose tasks are added while it is being run.

    ``add`` takes a task that passed :meth:`PlanChecker.check` (its dependencies must all be
    in the graph already); ``close`` says that no task will follow. ``complete`` is ``False``
    until then; ``aborted`` tells a plan cut short by an invalid task from a finished one.
    Executors ``watch`` it (see :mod:`dagagent.executors`).
    """

    def __init__(self, goal: str = "") -> None:
        self._children: dict[str, list[str]] = {}
        super().__init__(
            Plan(goal=goal, tasks=[]),
            {},
            [],
            dependencies={},
            levels=[],
            dependents=self._children,
        )
        self.complete = False
        self.aborted = False
        self._depth: dict[str, int] = {}
        self._watchers: list[Watcher] = []

    def watch(self, watcher: Watcher) -> None:
        """Call ``watcher(task_id)`` for every task added from now on and ``watcher(None)``
        when the graph is closed (at once if it is closed already)."""
        self._watchers.append(watcher)
        if self.complete:
            watcher(None)

    def unwatch(self, watcher: Watcher) -> None:
        """Stop telling ``watcher``."""
        if watcher in self._watchers:
            self._watchers.remove(watcher)

    def add(self, check: TaskCheck) -> None:
        """Add a checked task and tell the watchers."""
        task = check.task
        tid = task.id
        if self.complete:
            raise RuntimeError(f"cannot add task {tid!r}: the plan is complete")
        if not check.ok or tid in self.tasks:
            raise ValueError(f"task {tid!r} did not pass its check")
        deps = check.dependencies
        missing = [d for d in deps if d not in self.tasks]
        if missing:
            raise ValueError(f"task {tid!r} depends on {missing[0]!r}, which is not in the graph")
        self.plan.tasks.append(task)
        self.tasks[tid] = task
        self.templates[tid] = check.template
        self.dependencies[tid] = deps
        dependents = self._children
        dependents[tid] = []
        for d in deps:
            dependents[d].append(tid)  # a list: a task many others depend on stays linear
        depth = 1 + max((self._depth[d] for d in deps), default=-1)
        self._depth[tid] = depth
        if depth == len(self.levels):
            self.levels.append([])
        self.levels[depth].append(tid)
        self.order.append(tid)
        for watcher in tuple(self._watchers):
            watcher(tid)

    def close(self, *, aborted: bool = False) -> None:
        """No task will follow (``aborted``: because planning stopped on an invalid task).
        ``order`` becomes level by level, as for a validated plan. Closing twice is a no-op."""
        if self.complete:
            return
        self.complete = True
        self.aborted = aborted
        self.order[:] = [n for level in self.levels for n in level]
        for watcher in tuple(self._watchers):
            watcher(None)
