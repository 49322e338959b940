"""Checking a plan as a graph (networkx), and what the graph tells: levels, critical path.

:func:`validate` reports every issue at once. Issue codes:

==========================  =====================================================================
``empty_plan``              the plan has no tasks
``invalid_id``              a task id breaks the id rule (see :mod:`dagagent.plan`)
``duplicate_id``            two tasks share an id
``missing_dependency``      ``depends_on`` or a ``${ref}`` names a task that is not in the plan
``self_dependency``         a task depends on (or references) itself
``cycle``                   tasks depend on each other in a loop; the message shows the loop
``unknown_tool``            ``tool`` (or a name in an agent task's ``tools``) is not registered
``bad_arguments``           literal arguments do not fit the tool's schema
``not_retryable``           ``retries`` on a tool that may not be called again (an MCP tool not
                            declared idempotent or read-only)
``bad_reference``           a ``${`` that is not a well-formed reference
``tool_and_instruction``    a task has both ``tool`` and ``instruction``
``missing_instruction``     an agent task (no ``tool``) has no instruction
``agent_args``              an agent task has ``args`` (agents take an instruction, not args)
``tool_tools``              a tool task has ``tools`` (a tools subset is for agent tasks)
==========================  =====================================================================

Map tasks (``for_each``) add ``bad_for_each``, ``for_each_not_list``, ``element_outside_map``,
``unknown_element`` and ``map_option``: see :mod:`dagagent.map_checks`.

The last four are about a task's kind (see :mod:`dagagent.plan`): a plan read from JSON or a
dict is read leniently (:func:`~dagagent.plan.read_plan`), so that they are reported together
with every other issue.

Warnings (do not stop a run): ``no_llm`` — the plan has agent tasks but no model was given.

Over 400 lines: checking a plan task by task (:func:`check_task`, shared by :func:`validate`
and streamed plans) and what the checked graph tells (:class:`PlanGraph`: levels, critical
path) read the same dependency edges and issue codes. The one-pass road for plain plans
(:func:`_scan_plain`) must find what the task-by-task checks find, so it sits beside them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Container, Iterable, Mapping, Sequence, Sized
from typing import TYPE_CHECKING, Any

from ._gc import bulk
from .errors import Issue, PlanLoadError, PlanValidationError
from .map_checks import element_issues, for_each_reference, map_issues
from .plan import ID_PATTERN, ID_RE, AgentTask, Plan, Task, ToolTask, read_plan_fields
from .references import Reference, Template
from .text import did_you_mean, shorten

if TYPE_CHECKING:
    from pathlib import Path

    import networkx as nx

    from .results import TaskResult
    from .tools import Registry

__all__ = [
    "PlanGraph",
    "check_task",
    "critical_path",
    "dependencies_of",
    "dependency_graph",
    "finished_critical_path",
    "validate",
]


class PlanGraph:
    """A validated plan: its tasks, the dependency graph, compiled references and levels.

    Built once per plan by :func:`validate`; executors read ``dependencies``,
    ``dependents``, ``order`` and ``levels`` from it. ``dependents`` is worked out from
    ``dependencies`` on first use (an executor running level by level needs it only when a
    task fails), and ``graph`` (a networkx ``DiGraph``) too: nothing on the run path needs it.
    """

    complete = True
    """``False`` while tasks are still being added (a streamed plan: see
    :class:`~dagagent.growing.GrowingGraph`); a validated plan is complete."""
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
        tasks: dict[str, Task] | None = None,
        plain: bool = False,
        tool_names: Sequence[str] | None = None,
    ) -> None:
        """``levels``: the topological levels, each in plan order; ``dependents``, ``tasks``
        (by id), ``plain`` and ``tool_names``: when the caller knows them."""
        self.plan = plan
        self._graph: nx.DiGraph[str] | None = None
        self.tasks: dict[str, Task] = {t.id: t for t in plan.tasks} if tasks is None else tasks
        self.templates = templates
        self.warnings = warnings
        self.dependencies = dependencies
        self._dependents = dependents
        self.levels = levels
        self.order: list[str] = [n for level in levels for n in level]
        #: Whether every task is known to be a tool task that is not a map (what a run then
        #: need not look for task by task).
        self.plain = plain
        #: The tools the tasks call, in plan order, when validation listed them (else
        #: ``None``: read them from the tasks).
        self.tool_names = tool_names

    @property
    def dependents(self) -> Mapping[str, Sequence[str]]:
        """The tasks that depend on each task, in plan order (lists shared by every run of
        the graph: read them, do not change them)."""
        if self._dependents is None:
            with bulk(len(self.dependencies)):
                self._dependents = _successors(self.dependencies)
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
            self._graph = _nx_graph(self.dependencies)
        return self._graph

    def __len__(self) -> int:
        return len(self.tasks)

    def descendants(self, task_id: str) -> set[str]:
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


def critical_path(
    order: Sequence[str],
    dependencies: Mapping[str, Sequence[str]],
    durations: Mapping[str, float],
) -> tuple[float, list[str]]:
    """Length and tasks of the longest path, for tasks given in topological ``order``.

    Each task's path comes through its dependency that finishes last (the first of them on a
    tie); a dependency not in ``order`` finishes at 0. Worked out at the end of every run, so
    a task of one or two dependencies (most of them) takes no inner loop."""
    finish: dict[str, float] = {}
    via: dict[str, str | None] = {}
    at, took, deps_of = finish.get, durations.get, dependencies.get
    for n in order:
        ds = deps_of(n, ())
        k = len(ds)
        if k == 1:
            (a,) = ds
            finish[n] = at(a, 0.0) + took(n, 0.0)
            via[n] = a
        elif k == 2:
            a, b = ds
            fa, fb = at(a, 0.0), at(b, 0.0)
            if fb > fa:
                fa, a = fb, b
            finish[n] = fa + took(n, 0.0)
            via[n] = a
        elif k:
            best, best_dep = 0.0, None
            for d in ds:
                f = at(d, 0.0)
                if f > best or best_dep is None:
                    best, best_dep = f, d
            finish[n] = best + took(n, 0.0)
            via[n] = best_dep
        else:
            finish[n] = took(n, 0.0)
            via[n] = None
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
    from .results import TaskStatus  # here: checking a plan needs no results

    finished = (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.DENIED)
    durations: dict[str, float] = {}
    for task_id, r in results.items():
        if r.status in finished and r.started_at is not None and r.finished_at is not None:
            durations[task_id] = r.finished_at - r.started_at
        elif r.status is TaskStatus.REUSED:
            durations[task_id] = 0.0
    return critical_path([t for t in order if t in durations], dependencies, durations)


def _successors(preds: Mapping[str, Iterable[str]]) -> dict[str, Sequence[str]]:
    """Each task's dependents, in the order of ``preds`` (every dependency must be a key).

    A task nothing depends on (every task of a wide level, the last level of any plan) gets
    the one empty tuple rather than a list of its own: no object made for it, and none for
    the garbage collector to walk while the run holds the graph."""
    succs: dict[str, list[str]] = {}
    mine = succs.get
    for n, ds in preds.items():
        for d in ds:
            found = mine(d)
            if found is None:
                succs[d] = [n]
            else:
                found.append(n)
    none: tuple[str, ...] = ()
    return {n: mine(n, none) for n in preds}


def _generations(
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
                k = indegree[c] - 1
                indegree[c] = k
                if not k:
                    following.append(c)
        current = following
    return levels, placed


def _cycle_issues(graph: nx.DiGraph[str]) -> list[Issue]:
    import networkx as nx

    issues = []
    for comp in nx.strongly_connected_components(graph):
        if len(comp) < 2:
            continue
        sub = graph.subgraph(comp)
        start = min(comp)
        try:
            edges = nx.find_cycle(sub, source=start)
        except nx.NetworkXNoCycle:  # pragma: no cover - an SCC of size >= 2 has a cycle
            continue
        path = [edges[0][0]] + [e[1] for e in edges]
        issues.append(
            Issue("cycle", path[0], "dependency cycle: " + " -> ".join(str(p) for p in path))
        )
    return issues


def dependencies_of(task: Task, template: Template) -> dict[str, str]:
    """The ids ``task`` waits for, each with the reason: its ``depends_on`` first, then the
    task its ``for_each`` references, then the tasks its ``template`` references (a reference
    implies a dependency; ``${@item}`` names no task). As written: ids that are not in the
    plan, or the task's own, are for the caller to judge."""
    deps = dict.fromkeys(task.depends_on, "depends_on")
    if task.for_each is not None:
        ref = for_each_reference(task)
        if ref is not None and not ref.element:
            deps.setdefault(ref.task_id, f"for_each {ref.text}")
    for ref in template.refs:
        if not ref.element:
            deps.setdefault(ref.task_id, f"reference {ref.text}")
    return deps


def dependency_graph(plan: Plan) -> nx.DiGraph[str]:
    """The dependency graph of a plan that need not be valid: an edge from each dependency
    to its dependent, for the dependencies that are other tasks of the plan."""
    import networkx as nx  # imported when needed: it takes a quarter of a second

    graph: nx.DiGraph[str] = nx.DiGraph()
    ids = {t.id for t in plan.tasks}
    graph.add_nodes_from(ids)
    for t in plan.tasks:
        for dep in dependencies_of(t, Template(t.template_source)):
            if dep in ids and dep != t.id:
                graph.add_edge(dep, t.id)
    return graph


def _id_issues(plan: Plan) -> tuple[list[Issue], dict[str, Task]]:
    """``empty_plan``, ``duplicate_id`` and ``invalid_id``; the tasks by id (the first of
    each id)."""
    issues: list[Issue] = []
    if not plan.tasks:
        issues.append(Issue("empty_plan", None, "the plan has no tasks"))
    ids: dict[str, Task] = {}
    seen_dupes = set()
    for t in plan.tasks:
        if t.id in ids and t.id not in seen_dupes:
            issues.append(Issue("duplicate_id", t.id, f"task id {t.id!r} is used more than once"))
            seen_dupes.add(t.id)
        ids.setdefault(t.id, t)
        if not ID_RE.match(t.id):
            issues.append(
                Issue(
                    "invalid_id",
                    t.id,
                    f"task id {t.id!r} is not valid: use 1-64 letters, digits, '_' or '-', "
                    "not starting with '-' (dots are reserved for reference paths)",
                )
            )
    return issues, ids


def _template(task: Task, issues: list[Issue]) -> Template:
    """The task's compiled template; ``bad_arguments`` (nested too deeply), ``bad_reference``."""
    try:
        tmpl = Template(task.template_source)
    except PlanLoadError as exc:  # arguments nested too deeply
        issues.append(Issue("bad_arguments", task.id, str(exc)))
        return Template({})
    for bad in tmpl.malformed:
        shown = shorten(bad, 60, one_line=False)
        issues.append(
            Issue(
                "bad_reference",
                task.id,
                f"malformed reference in {shown!r}: write ${{task_id}} or ${{task_id.path}}"
                " (and $${ for a literal '${')",
            )
        )
    return tmpl


def _tool_issues(task: Task, tmpl: Template, registry: Registry, issues: list[Issue]) -> None:
    """``unknown_tool``, ``bad_arguments`` (for the arguments known before the run) and
    ``not_retryable``."""
    tid = task.id
    if isinstance(task, AgentTask):
        for name in task.tools or ():
            if name not in registry:
                hint = did_you_mean(name, registry.names)
                issues.append(
                    Issue("unknown_tool", tid, f"agent tool {name!r} is not registered{hint}")
                )
        return
    if task.tool not in registry:
        known = ", ".join(sorted(registry.names)) or "none"
        hint = did_you_mean(task.tool, registry.names)
        issues.append(
            Issue("unknown_tool", tid, f"unknown tool {task.tool!r}{hint} (known: {known})")
        )
        return
    if tmpl.refs:
        literal = tmpl.literal_keys()
        referenced = [k for k in task.args if k not in literal]
    else:
        literal, referenced = tmpl.literal, []  # as the tool gets them: $${ written as ${
    tool = registry.get(task.tool)
    problems = tool.check_partial(literal, referenced)
    if problems:
        issues.append(
            Issue(
                "bad_arguments",
                tid,
                f"arguments for tool {task.tool!r} do not fit its schema: " + "; ".join(problems),
            )
        )
    if task.retries and not tool.retryable:
        issues.append(
            Issue(
                "not_retryable",
                tid,
                f"tool {task.tool!r} may not be retried (it does not declare that "
                "calling it again is safe): remove 'retries'",
            )
        )


def _scan(
    plan: Plan, registry: Registry | None, kind_issues: list[Issue]
) -> tuple[list[Issue], dict[str, Template], dict[str, tuple[str, ...]], dict[str, list[str]]]:
    """Every issue but cycles, each task's in turn (``kind_issues``, found while reading the
    plan, at their task's turn); the templates; dependencies and dependents of each task, in
    edge order (with duplicate ids, an issue, a task's edges are those of all its copies)."""
    issues, ids = _id_issues(plan)
    mixed: dict[str | None, list[Issue]] = {}
    for issue in kind_issues:
        mixed.setdefault(issue.task_id, []).append(issue)
    preds: dict[str, tuple[str, ...]] = {}
    succs: dict[str, list[str]] = {t.id: [] for t in plan.tasks}
    templates: dict[str, Template] = {}
    for t in plan.tasks:
        tid = t.id
        found, templates[tid], mine = check_task(t, ids, registry, mixed.pop(tid, ()), tasks=ids)
        issues.extend(found)
        for d in mine:
            succs[d].append(tid)
        prev = preds.get(tid)
        preds[tid] = tuple(mine) if prev is None else prev + tuple(mine)
    for rest in mixed.values():  # a task that could not be told apart by its id
        issues.extend(rest)
    return issues, templates, preds, succs


# The whole of a plain plan in one pass (hot path): tool tasks only, none of them a map, every
# id valid and unique, dependencies and tools known. It finds what _scan would (when there is
# nothing to report) at a fraction of the cost per task, and gives up, returning None, at the
# first sign of an issue, for _scan to find and word every issue. When every task comes after
# its dependencies (as most plans are written) it places each task on its level as it goes:
# the levels come out in plan order and acyclic, with nothing left for Kahn's algorithm to do.
# It reads each task's fields from its __dict__ (or as the reader hands them over), not as the
# model's attributes: at 10,000 tasks this road and the reader take about 19,000 machine
# instructions a task (valgrind), 25,000 when it read attributes and called Template({}).
# tests/test_plain_plans.py checks that both roads agree.

_IDS_RE = re.compile(rf"(?:{ID_PATTERN}\n)*{ID_PATTERN}")

_Scanned = tuple[
    dict[str, Template],  # templates
    dict[str, tuple[str, ...]],  # dependencies, in plan order
    list[list[str]] | None,  # levels in plan order, if every task comes after its dependencies
    dict[str, Task],  # tasks by id
    list[str] | None,  # the tools the tasks call, in plan order (None: no registry to check)
]


def _scan_plain(
    plan: Plan, registry: Registry | None, fields: list[dict[str, Any]] | None = None
) -> _Scanned | None:
    """``fields``: each task's ``__dict__`` when the plan was read as a plain plan (see
    :func:`~dagagent.plan.read_plan_fields`); else they are read here, for plain tool tasks."""
    tasks = plan.tasks
    if not tasks:
        return None
    # A task's fields are read from its __dict__: pydantic models have a __getattr__, which
    # makes each attribute read several times the cost of a dict lookup.
    if fields is None:
        fields = []
        for t in tasks:
            if type(t) is not ToolTask:
                return None  # an agent task (or a subclass): the full checks
            f = t.__dict__
            if f["for_each"] is not None or f["max_concurrency"] is not None or f["allow_partial"]:
                return None  # a map task or a map's option: the full checks
            fields.append(f)
    tools = {t.name: t for t in registry} if registry is not None else None
    checked: dict[str, bool] = {}  # tool name -> it is known, its call without arguments fine
    used: dict[str, None] = {}  # the tools called, in plan order
    by_id: dict[str, Task] = {}
    preds: dict[str, tuple[str, ...]] = {}
    templates: dict[str, Template] = {}
    depth: dict[str, int] = {}  # the level of each task placed so far
    levels: list[list[str]] | None = []
    template, tuple_, len_, new = Template, tuple, len, object.__new__
    refs: tuple[Reference, ...]
    mine: tuple[str, ...]
    for t, f in zip(tasks, fields, strict=True):
        tid = f["id"]
        by_id[tid] = t
        args = f["args"]
        deps = f["depends_on"]
        if not args and type(args) is dict:
            # Template(args) for no arguments, built as its __init__ builds it, at half the
            # cost of the call (tests/test_plain_plans.py compares the two)
            tmpl = new(template)
            tmpl._compiled = tmpl.literal = args
            tmpl.refs = tmpl.malformed = refs = ()
        else:
            try:
                tmpl = template(args)
            except PlanLoadError:  # nested too deeply
                return None
            if tmpl.malformed:
                return None
            refs = tmpl.refs
        templates[tid] = tmpl
        if refs:
            for r in refs:
                if r.element:  # ${@item} outside a map: an issue
                    return None
            mine = tuple_(dict.fromkeys([*deps, *(r.task_id for r in refs)]))
        elif len_(deps) == 2:
            d0, d1 = deps
            mine = (d0, d1) if d0 != d1 else (d0,)
        elif len_(deps) < 2:
            mine = tuple_(deps)
        else:
            mine = tuple_(dict.fromkeys(deps))
        preds[tid] = mine
        if levels is not None:
            try:
                if len_(mine) == 2:  # the most common case, without a loop
                    level = depth[mine[0]]
                    above = depth[mine[1]]
                    level = (level if level > above else above) + 1
                else:
                    level = 0
                    for d in mine:
                        above = depth[d]
                        if above >= level:
                            level = above + 1
            except KeyError:  # a task not placed yet (or none at all): see below
                levels = None
            else:
                depth[tid] = level
                if level < len_(levels):
                    levels[level].append(tid)
                else:
                    levels.append([tid])
        if tools is None:
            continue
        name = f["tool"]
        used[name] = None
        retries = f["retries"]
        if not args and not retries:  # most tasks: a tool called without arguments
            try:
                fine = checked[name]
            except KeyError:
                tool = tools.get(name)
                fine = checked[name] = tool is not None and not tool.check_partial({}, ())
            if not fine:
                return None
            continue
        tool = tools.get(name)
        if tool is None or (retries and not tool.retryable):
            return None
        if refs or (args and tool.check_partial(args, ())):
            # references (their keys are checked as _tool_issues does) or a problem
            problems: list[Issue] = []
            _tool_issues(t, tmpl, registry, problems)  # type: ignore[arg-type]
            if problems:
                return None
        elif not args and tool.check_partial({}, ()):
            return None
    joined = "\n".join(by_id)
    if (
        len_(by_id) != len_(tasks)  # a duplicate id
        or joined.count("\n") != len_(tasks) - 1  # an id holding a line break
        or not _IDS_RE.fullmatch(joined)  # an invalid id
    ):
        return None
    if levels is None:  # some task came before a dependency: is each one a task, not itself?
        for tid, mine in preds.items():
            for d in mine:
                if d == tid or d not in by_id:
                    return None
    return templates, preds, levels, by_id, None if tools is None else list(used)


def check_task(
    t: Task,
    known: Container[str],
    registry: Registry | None,
    kind_issues: Iterable[Issue] = (),
    *,
    tasks: Mapping[str, Task] | None = None,
) -> tuple[list[Issue], Template, list[str]]:
    """The checks of one task against the ids ``known`` so far: its kind (``kind_issues``:
    what reading it found), its references, its dependencies (each must be in ``known``), its
    tool and literal arguments (with a ``registry``), its ``for_each`` (against what the tasks
    in ``tasks`` declare they return). Returns the issues, the compiled template
    and the task's dependencies that are known, in edge order. Used by :func:`validate` for a
    whole plan and by :class:`~dagagent.growing.PlanChecker` for a plan that arrives task by
    task."""
    issues: list[Issue] = []
    tid = t.id
    if isinstance(t, AgentTask) and not t.instruction.strip():
        issues.append(
            Issue(
                "missing_instruction",
                tid,
                "the task has no 'tool', so it is an agent task, and it has no 'instruction'",
            )
        )
    issues.extend(kind_issues)
    tmpl = _template(t, issues)
    if tmpl.refs:
        issues.extend(element_issues(t, tmpl))
    mine: list[str] = []
    for d, why in dependencies_of(t, tmpl).items():
        if d == tid:
            issues.append(Issue("self_dependency", tid, f"the task depends on itself ({why})"))
        elif d not in known:
            what = "depends on" if why == "depends_on" else f"has {why} to"
            hint = ""
            if t.for_each is not None and d in ("item", "index"):
                hint = f" (the element of a map is ${{@{d}}}, with an '@')"
            issues.append(Issue("missing_dependency", tid, f"{what} unknown task {d!r}{hint}"))
        else:
            mine.append(d)
    if registry is not None:
        _tool_issues(t, tmpl, registry, issues)
    if t.for_each is not None or t.max_concurrency is not None or t.allow_partial:
        issues.extend(map_issues(t, tmpl, tasks, registry))
    return issues, tmpl, mine


def _nx_graph(preds: Mapping[str, Iterable[str]]) -> nx.DiGraph[str]:
    import networkx as nx  # imported when needed: it takes a quarter of a second

    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from(preds)
    graph.add_edges_from((d, n) for n, ds in preds.items() for d in ds)
    return graph


def validate(
    plan: Plan | Mapping[str, Any] | str | Path,
    registry: Registry | None = None,
    *,
    llm: Any = None,
    check_llm: bool = False,
) -> PlanGraph:
    """Check ``plan`` and return its :class:`PlanGraph`.

    Raises :class:`PlanValidationError` with every issue found (:class:`PlanLoadError` if it
    cannot be read as a plan at all). Without a ``registry`` the tool and argument checks are
    skipped. With ``check_llm=True`` and no ``llm``, a plan that has agent tasks gets a
    ``no_llm`` warning in ``PlanGraph.warnings``.
    """
    with bulk(_size(plan)):
        return _validate(plan, registry, llm, check_llm)


def _size(plan: object) -> int:
    """How many tasks ``plan`` holds, if that is known before it is read (0 if not)."""
    if isinstance(plan, Plan):
        tasks: object = plan.tasks
    elif isinstance(plan, Mapping):
        tasks = plan.get("tasks")
    else:
        return 0
    return len(tasks) if isinstance(tasks, list) else 0


def _validate(
    plan: Plan | Mapping[str, Any] | str | Path,
    registry: Registry | None,
    llm: Any,
    check_llm: bool,
) -> PlanGraph:
    plan, kind_issues, fields = read_plan_fields(plan)
    scanned = None if kind_issues else _scan_plain(plan, registry, fields)
    dependents = by_id = tool_names = None
    succs: Mapping[str, Sequence[str]] | None = None
    if scanned is not None:
        templates, preds, levels, by_id, tool_names = scanned
        issues: list[Issue] = []
    else:
        issues, templates, preds, succs = _scan(plan, registry, kind_issues)
        levels = None
    if levels is None:
        if succs is None:
            succs = _successors(preds)
        dependents = succs
        generations, placed = _generations(preds, succs)
        if placed < len(preds):  # some tasks wait on each other: find and show the loops
            issues.extend(_cycle_issues(_nx_graph(preds)))
        pos = {t.id: i for i, t in enumerate(plan.tasks)}
        levels = [sorted(g, key=pos.__getitem__) for g in generations]
    if issues:
        raise PlanValidationError(issues)
    warnings: list[Issue] = []
    if check_llm and llm is None and scanned is None:  # a plain plan has no agent task
        warnings = [
            Issue(
                "no_llm", t.id, "agent task needs a model (llm=...), none was given; it will fail"
            )
            for t in plan.tasks
            if isinstance(t, AgentTask)
        ]
    return PlanGraph(
        plan,
        templates,
        warnings,
        dependencies=preds,
        levels=levels,
        dependents=dependents,
        tasks=by_id,
        plain=scanned is not None,
        tool_names=tool_names,
    )
