"""A plan that arrives task by task: checking each task as it comes, and a graph that grows.

When a plan streams from a model, every task is checked the moment it is complete
(:class:`PlanChecker`): the checks of :func:`dagagent.validate` (the same code,
:func:`dagagent.graph.check_task`), against the tasks accepted so far. A task may reference
tasks that come later in the plan: it is held until they have all been accepted, then
checked again as a whole and accepted, and with it every held task that waited only for it
(:meth:`PlanChecker.take`). A task whose arrival would close a loop of tasks waiting for each
other is an issue at once (``cycle``); a task still held when the plan ends is one then
(:meth:`PlanChecker.finish`: ``missing_dependency``, naming the task that never came). So
tasks are accepted in an order in which each comes after its dependencies: every prefix of
the accepted tasks is a valid acyclic plan, and a task that was accepted never becomes
invalid.

A task that was accepted goes into a :class:`GrowingGraph`, a
:class:`~dagagent.graph.PlanGraph` that executors may already run while tasks are still being
added. It tells its watchers (executors) about each added task and, once, that the plan is
complete (``close()``), or that planning stopped because a later task was invalid
(``close(aborted=True)``). Nothing polls.

Levels of a growing graph are depth levels: a task's level is one more than the deepest of
its dependencies (0 without any). A task's level is known when it is added and never changes
(a task is added after its dependencies, and later tasks cannot become its dependencies), so
``levels`` only ever grows; when the graph is closed they are exactly the levels
:func:`dagagent.validate` computes for the whole plan.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import Issue
from ..plan import ID_RE, AgentTask, Plan, Task
from ..references import Template
from ._graph import PlanGraph
from ._validate import check_task, dependencies_of, sub_solve_issues

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
    its plans may hold tool calls only; ``solve_depth`` says whether sub-solves may be held
    (see :func:`~dagagent.graph.sub_solve_issues`). ``known``: ids accepted in advance (tasks that
    already ran; a new task may reference them).

    :meth:`check` checks a task against the tasks accepted so far; :meth:`take` does it for
    a plan whose tasks may come before the tasks they use (see the module docstring), and
    :meth:`finish` says what is still held when the plan ends.
    """

    def __init__(
        self,
        registry: Registry | None,
        *,
        agent_tasks: bool = True,
        known: tuple[str, ...] = (),
        solve_depth: int | None = None,
    ) -> None:
        self.registry = registry
        self.agent_tasks = agent_tasks
        self.solve_depth = solve_depth
        self.ids: set[str] = set(known)
        self.tasks: dict[str, Task] = {}  # accepted so far: what a map's list may be read from
        #: Tasks held until the tasks they name (not seen yet) are accepted, in arrival order,
        #: each with the ids it still waits for.
        self.held: dict[str, tuple[TaskCheck, set[str]]] = {}

    def check(self, task: Task) -> TaskCheck:
        """Check ``task``; when it is valid, it counts as seen for the tasks after it. A
        reference to a task not accepted yet is an issue here (``missing_dependency``)."""
        check = self._check(task)
        if check.ok:
            self._accept(task)
        return check

    def take(self, task: Task) -> tuple[list[TaskCheck], list[Issue]]:
        """Check ``task`` as a task of a plan that may name tasks still to come: the tasks
        accepted now (``task`` and the held tasks it completed, each after the tasks it
        depends on; none when ``task`` is held) and the issues that reject the plan (then
        nothing is accepted)."""
        check = self._check(task)
        waits = self._waits_for(check)
        if waits is None:  # what it names may still come: only its other issues are issues
            return [], [i for i in check.issues if i.code != "missing_dependency"] or check.issues
        if waits:
            loop = self._loop(task.id, waits)
            if loop is not None:
                path = " -> ".join(loop)
                return [], [Issue("cycle", task.id, f"dependency cycle: {path}")]
            self.held[task.id] = (check, waits)
            return [], []
        self._accept(task)
        accepted = [check]
        for done in accepted:  # grows while it is read: what each acceptance releases
            for tid, (waiting, missing) in list(self.held.items()):
                missing.discard(done.task.id)
                if missing:
                    continue
                del self.held[tid]
                again = self._check(waiting.task)
                if not again.ok:
                    return [], again.issues
                self._accept(again.task)
                accepted.append(again)
        return accepted, []

    def finish(self) -> list[Issue]:
        """The issues of the tasks still held at the end of the plan: each names the tasks
        it waits for that never came (``missing_dependency``)."""
        issues = []
        for tid, (check, missing) in self.held.items():
            reasons = dependencies_of(check.task, check.template)
            for d in sorted(missing, key=list(reasons).index):
                why = reasons[d]
                what = "depends on" if why == "depends_on" else f"has {why} to"
                if d in self.held:
                    told = f"{what} task {d!r}, which waits for a task the plan never gave"
                else:
                    hint = ""
                    if check.task.for_each is not None and d in ("item", "index"):
                        hint = f" (the element of a map is ${{@{d}}}, with an '@')"
                    told = f"{what} unknown task {d!r}{hint}: the plan ended without it"
                issues.append(Issue("missing_dependency", tid, told))
        return issues

    # -- internals --------------------------------------------------------------------------

    def _check(self, task: Task) -> TaskCheck:
        tid = task.id
        issues: list[Issue] = []
        if tid in self.ids or tid in self.held:
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
        issues.extend(sub_solve_issues((task,), self.solve_depth))
        if not self.agent_tasks and isinstance(task, AgentTask) and not task.solve:
            issues.append(
                Issue(
                    "agent_task",
                    tid,
                    "the task has no 'tool': every task must call one of the listed tools",
                )
            )
        found, template, deps = check_task(task, self.ids, self.registry, tasks=self.tasks)
        for issue in found:
            sub_solve = isinstance(task, AgentTask) and task.solve
            if issue.code == "missing_instruction" and not self.agent_tasks and not sub_solve:
                continue  # already said: agent_task
            issues.append(issue)
        return TaskCheck(task, issues, template, deps)

    def _accept(self, task: Task) -> None:
        self.ids.add(task.id)
        self.tasks[task.id] = task

    def _waits_for(self, check: TaskCheck) -> set[str] | None:
        """The ids ``check``'s task waits for (empty: none, it is valid); ``None`` when it
        has issues that no later task can mend."""
        if check.ok:
            return set()
        if any(i.code != "missing_dependency" for i in check.issues):
            return None
        task = check.task
        return {
            d
            for d in dependencies_of(task, check.template)
            if d != task.id and d not in self.ids and not d.startswith("@")
        } or None

    def _loop(self, tid: str, waits: set[str]) -> list[str] | None:
        """The loop ``tid`` would close by waiting for ``waits`` (held tasks waiting, in
        the end, for ``tid``), as a path from ``tid`` back to itself; ``None`` if none."""
        trail: dict[str, str] = {}
        todo = [d for d in sorted(waits) if d in self.held]
        for d in todo:
            trail.setdefault(d, tid)
        while todo:
            current = todo.pop()
            for d in sorted(self.held[current][1]):
                if d == tid:
                    path = [current]
                    while path[-1] != tid:
                        path.append(trail[path[-1]])
                    return [tid, *path]  # tid waits for ... which waits for tid
                if d in self.held and d not in trail:
                    trail[d] = current
                    todo.append(d)
        return None


class GrowingGraph(PlanGraph):
    """A :class:`~dagagent.graph.PlanGraph` whose tasks are added while it is being run.

    ``add`` takes a task that :class:`PlanChecker` accepted (its dependencies must all be in
    the graph already); ``close`` says that no task will follow. ``complete`` is ``False``
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
