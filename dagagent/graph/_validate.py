"""Checking a plan as a graph, every issue at once: :func:`validate` for a whole plan,
:func:`check_task` for one task (what :func:`validate` and a streamed plan's checker share).

:func:`validate` reports every issue at once. Issue codes:

==========================  =====================================================================
``empty_plan``              the plan has no tasks
``invalid_id``              a task id breaks the id rule (see :mod:`dagagent.plan`)
``duplicate_id``            two tasks share an id
``missing_dependency``      ``depends_on`` or a ``${ref}`` names a task that is not in the plan
``self_dependency``         a task depends on (or references) itself
``cycle``                   tasks depend on each other in a loop; the message shows the loop
``unknown_tool``            ``tool`` (or a name in an agent task's ``tools``) is not registered
``bad_arguments``           literal arguments do not fit the tool's schema, or an argument that
                            is one reference holds what the upstream tool declares it returns,
                            which the parameter cannot take (see :mod:`._types`)
``not_retryable``           ``retries`` on a tool that may not be called again (an MCP tool not
                            declared idempotent or read-only)
``bad_reference``           a ``${`` that is not a well-formed reference
``bad_condition``           ``when`` is not a condition (see :mod:`dagagent.conditions`): the
                            message names the character where reading it stopped
``tool_and_instruction``    a task has both ``tool`` and ``instruction``
``missing_instruction``     an agent task (no ``tool``) has no instruction
``agent_args``              an agent task has ``args`` (agents take an instruction, not args)
``tool_tools``              a tool task has ``tools`` (a tools subset is for agent tasks)
``tool_solve``              a tool task has ``solve`` (a sub-solve is a task with an
                            ``instruction``)
``sub_solve``               a task is a sub-solve (``"solve": true``) where its plan may hold
                            none: the solve was not given ``sub_solves=True``
                            (:func:`sub_solve_issues`)
``sub_solve_too_deep``      a sub-solve in the plan of a solve already
                            :data:`~dagagent.limits.MAX_SOLVE_DEPTH` levels deep
==========================  =====================================================================

Map tasks (``for_each``) add ``bad_for_each``, ``for_each_not_list``, ``element_outside_map``,
``unknown_element`` and ``map_option``: see :mod:`._maps`.

The last four are about a task's kind (see :mod:`dagagent.plan`): a plan read from JSON or a
dict is read leniently (:func:`~dagagent.plan.read_plan`), so that they are reported together
with every other issue.

Warnings (do not stop a run): ``no_llm`` — the plan has agent tasks (or sub-solves) but no
model was given; ``sub_solve_retries`` — a sub-solve has ``retries``, which it does not use.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from ..conditions import condition_references, parse_condition
from ..errors import ConditionSyntaxError, Issue, PlanLoadError, PlanValidationError
from ..limits import MAX_SOLVE_DEPTH
from ..plan import ID_RE, AgentTask, Plan, Task, ToolTask, read_plan
from ..references import Template
from ..text import did_you_mean, shorten
from ._graph import PlanGraph, generations, nx_graph
from ._maps import element_issues, element_schema, for_each_reference, map_issues
from ._types import argument_type_issues

if TYPE_CHECKING:
    from pathlib import Path

    import networkx as nx

    from ..llm import LLM
    from ..tools import Registry

__all__ = [
    "check_task",
    "dependencies_of",
    "dependency_graph",
    "recorded_graph",
    "sub_solve_allowed",
    "sub_solve_issues",
    "validate",
]


def sub_solve_allowed(depth: int | None) -> bool:
    """Whether the plan of a solve at ``depth`` (``None``: a plan for no solve, or for a
    solve without ``sub_solves``) may hold sub-solves."""
    return depth is not None and depth < MAX_SOLVE_DEPTH


def sub_solve_issues(tasks: Iterable[Task], depth: int | None) -> list[Issue]:
    """The sub-solves (tasks with ``"solve": true``) among ``tasks`` that the plan of a solve at
    ``depth`` may not hold (see :func:`sub_solve_allowed`): ``sub_solve`` when sub-solves are
    not enabled, ``sub_solve_too_deep`` past :data:`~dagagent.limits.MAX_SOLVE_DEPTH`."""
    if sub_solve_allowed(depth):
        return []
    issues = []
    for t in tasks:
        if not (isinstance(t, AgentTask) and t.solve):
            continue
        if depth is None:
            issues.append(
                Issue(
                    "sub_solve",
                    t.id,
                    "the task is a sub-solve ('solve': true), and this plan may hold none: "
                    "sub-solves run only inside a solve given sub_solves=True (dagagent ask "
                    "--sub-solves); write the sub-goal as tasks of this plan",
                )
            )
        else:
            issues.append(
                Issue(
                    "sub_solve_too_deep",
                    t.id,
                    f"the task is a sub-solve ('solve': true), but this plan is already a "
                    f"sub-solve {depth} level{'s' if depth != 1 else ''} deep, and solves nest "
                    f"at most {MAX_SOLVE_DEPTH} deep: reach this sub-goal with tool tasks"
                    " (or an agent task) instead",
                )
            )
    return issues


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
    task its ``for_each`` references, then the tasks its ``when`` reads, then the tasks its
    ``template`` references (a reference implies a dependency; ``${@item}`` names no task).
    As written: ids that are not in the plan, or the task's own, are for the caller to
    judge."""
    deps = dict.fromkeys(task.depends_on, "depends_on")
    if task.for_each is not None:
        ref = for_each_reference(task)
        if ref is not None and not ref.element:
            deps.setdefault(ref.task_id, f"for_each {ref.text}")
    for ref in condition_references(task.when):
        if not ref.element:
            deps.setdefault(ref.task_id, f"condition reference {ref.text}")
    for ref in template.refs:
        if not ref.element:
            deps.setdefault(ref.task_id, f"reference {ref.text}")
    return deps


def _condition_issues(task: Task) -> list[Issue]:
    """``bad_condition`` (a ``when`` that does not parse), and the map-element checks of the
    references it reads."""
    if task.when is None:
        return []
    try:
        condition = parse_condition(task.when)
    except ConditionSyntaxError as exc:
        shown = shorten(exc.text, 80, one_line=False)
        return [
            Issue(
                "bad_condition",
                task.id,
                f"'when' {shown!r}, at character {exc.position + 1}: {exc.problem}",
            )
        ]
    return element_issues(task, condition.refs)


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
    tool and literal arguments (with a ``registry``), its ``for_each`` and the arguments that
    are one reference each (against what the tasks in ``tasks`` declare they return).
    Returns the issues, the compiled template and the task's dependencies that are known, in
    edge order. Used by :func:`validate` for a whole plan and by
    :class:`~dagagent.graph.PlanChecker` for a plan that arrives task by task."""
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
        issues.extend(element_issues(t, tmpl.refs))
    issues.extend(_condition_issues(t))
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
    if registry is not None and tmpl.refs and isinstance(t, ToolTask) and t.tool in registry:
        elements = element_schema(t, tasks, registry)
        issues.extend(argument_type_issues(t, tmpl, tasks, registry, elements))
    return issues, tmpl, mine


def validate(
    plan: Plan | Mapping[str, Any] | str | Path,
    registry: Registry | None = None,
    *,
    llm: LLM | None = None,
    check_llm: bool = False,
    solve_depth: int | Literal["any"] | None = "any",
) -> PlanGraph:
    """Check ``plan`` and return its :class:`PlanGraph`.

    Raises :class:`PlanValidationError` with every issue found (:class:`PlanLoadError` if it
    cannot be read as a plan at all). Without a ``registry`` the tool and argument checks are
    skipped. With ``check_llm=True`` and no ``llm``, a plan that has agent tasks (sub-solves
    included: their planner, runs and joiner need one) gets a ``no_llm`` warning in
    ``PlanGraph.warnings``.

    ``solve_depth`` says where the plan will run, for its sub-solves (tasks with
    ``"solve": true``; see :func:`sub_solve_issues`): ``None`` outside a solve, or in a solve
    without ``sub_solves`` (as ``dagagent run`` runs it): each sub-solve is an issue
    (``sub_solve``); the depth of a solve given ``sub_solves=True`` (0: the top solve): past
    :data:`~dagagent.limits.MAX_SOLVE_DEPTH` each is an issue (``sub_solve_too_deep``);
    ``"any"`` (the default): not checked.
    """
    plan, kind_issues = read_plan(plan)
    if solve_depth != "any":
        kind_issues = [*kind_issues, *sub_solve_issues(plan.tasks, solve_depth)]
    return _checked(plan, registry, kind_issues, llm=llm, check_llm=check_llm)


def recorded_graph(plan: Plan) -> PlanGraph:
    """The graph of a plan on record (a run's plan, checked when it ran), for the readers
    that draw or measure it: :func:`validate` without tools, except that a plan of no tasks
    is an empty graph, not an issue (a streamed plan rejected before its first task, or a
    model that could not be reached, leaves such a run)."""
    return _checked(plan, None, [], empty_ok=True)


def _checked(
    plan: Plan,
    registry: Registry | None,
    kind_issues: list[Issue],
    *,
    llm: LLM | None = None,
    check_llm: bool = False,
    empty_ok: bool = False,
) -> PlanGraph:
    issues, templates, preds, succs = _scan(plan, registry, kind_issues)
    generations_, placed = generations(preds, succs)
    if placed < len(preds):  # some tasks wait on each other: find and show the loops
        issues.extend(_cycle_issues(nx_graph(preds)))
    if empty_ok:
        issues = [i for i in issues if i.code != "empty_plan"]
    if issues:
        raise PlanValidationError(issues)
    pos = {t.id: i for i, t in enumerate(plan.tasks)}
    levels = [sorted(g, key=pos.__getitem__) if len(g) > 1 else list(g) for g in generations_]
    warnings: list[Issue] = []
    if check_llm and llm is None:
        warnings = [
            Issue(
                "no_llm",
                t.id,
                "sub-solve needs a model (llm=...) to plan, run and join its rounds, none was "
                "given; it will fail"
                if t.solve
                else "agent task needs a model (llm=...), none was given; it will fail",
            )
            for t in plan.tasks
            if isinstance(t, AgentTask)
        ]
    warnings.extend(
        Issue(
            "sub_solve_retries",
            t.id,
            f"retries={t.retries} is not used: a sub-solve is not tried again (it had its "
            "rounds); one that ends without an answer fails its task",
        )
        for t in plan.tasks
        if isinstance(t, AgentTask) and t.solve and t.retries
    )
    return PlanGraph(plan, templates, warnings, dependencies=preds, levels=levels, dependents=succs)
