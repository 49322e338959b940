"""Drawing a plan's graph as Mermaid, Graphviz DOT or plain text, optionally marked by status.

Pure functions from a :class:`~dagagent.graph.PlanGraph` (and, for a recorded run, each
task's status) to text; ``dagagent graph`` prints them.

A map task is one node whatever its count: ``tool ×N`` (``×${ref}`` in a plan whose list is
not known yet), with, for a recorded run, how its elements ended (``elements``: the element
statuses of each map task).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..graph import PlanGraph
    from ..plan import Task

__all__ = ["FORMATS", "render_graph", "to_ascii", "to_dot", "to_mermaid"]

FORMATS = ("ascii", "mermaid", "dot")

UNRECORDED = "unrecorded"

# (fill, stroke) per status; unrecorded = the run stopped before the task finished.
_COLOURS: dict[str, tuple[str, str]] = {
    "succeeded": ("#c8e6c9", "#2e7d32"),
    "reused": ("#b2ebf2", "#00838f"),
    "failed": ("#ffcdd2", "#c62828"),
    "denied": ("#e1bee7", "#6a1b9a"),
    "cancelled": ("#fff9c4", "#f9a825"),
    "skipped": ("#eeeeee", "#9e9e9e"),
    UNRECORDED: ("#ffffff", "#9e9e9e"),
}


Elements = Mapping[str, Sequence[str]]
"""The statuses of each map task's elements, in order, by task id."""


def _what(task: Task, elements: Elements | None = None) -> str:
    if task.for_each is None:
        return task.label
    statuses = elements.get(task.id) if elements is not None else None
    if statuses is None:
        n = task.for_each if isinstance(task.for_each, str) else str(len(task.for_each))
        return f"{task.label} ×{n}"
    counts = Counter(statuses)
    told = ", ".join(f"{k} {s}" for s, k in counts.items()) if len(counts) > 1 else ""
    return f"{task.label} ×{len(statuses)}" + (f" ({told})" if told else "")


def _status_of(task_id: str, statuses: Mapping[str, str] | None) -> str | None:
    if statuses is None:
        return None
    return statuses.get(task_id, UNRECORDED)


def to_mermaid(
    graph: PlanGraph, statuses: Mapping[str, str] | None = None, elements: Elements | None = None
) -> str:
    """A Mermaid ``flowchart``; with ``statuses``, nodes are coloured by status."""
    node = {tid: f"t{i}" for i, tid in enumerate(graph.order)}
    lines = ["flowchart TD"]
    if graph.plan.goal:
        lines.append(f"  %% goal: {' '.join(graph.plan.goal.split())}")
    for tid in graph.order:
        label = f"{tid}<br/>{_what(graph.tasks[tid], elements)}"
        st = _status_of(tid, statuses)
        if st is not None:
            label += f"<br/>{st}"
        lines.append(f'  {node[tid]}["{_mermaid_text(label)}"]')
    for tid in graph.order:
        for dep in graph.dependencies[tid]:
            lines.append(f"  {node[dep]} --> {node[tid]}")
    if statuses is not None:
        used: dict[str, list[str]] = {}
        for tid in graph.order:
            used.setdefault(_status_of(tid, statuses) or UNRECORDED, []).append(node[tid])
        for st, nodes in used.items():
            fill, stroke = _COLOURS.get(st, ("#ffffff", "#000000"))
            dash = ",stroke-dasharray:4 3" if st == UNRECORDED else ""
            lines.append(f"  classDef {st} fill:{fill},stroke:{stroke}{dash}")
            lines.append(f"  class {','.join(nodes)} {st}")
    return "\n".join(lines)


def _mermaid_text(text: str) -> str:
    # Keep the <br/> line breaks; escape what would end the label or start markup.
    parts = text.split("<br/>")
    esc = [
        p.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")
        for p in parts
    ]
    return "<br/>".join(esc)


def _dot_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(
    graph: PlanGraph, statuses: Mapping[str, str] | None = None, elements: Elements | None = None
) -> str:
    """A Graphviz ``digraph``; with ``statuses``, nodes are filled by status."""
    lines = ["digraph plan {", "  rankdir=TB;"]
    if graph.plan.goal:
        lines.append(f"  label={_dot_str(graph.plan.goal)};")
        lines.append("  labelloc=t;")
    lines.append('  node [shape=box, style="rounded,filled", fillcolor="#ffffff"];')
    for tid in graph.order:
        label = f"{tid}\n{_what(graph.tasks[tid], elements)}"
        attrs = []
        st = _status_of(tid, statuses)
        if st is not None:
            label += f"\n{st}"
            fill, stroke = _COLOURS.get(st, ("#ffffff", "#000000"))
            attrs.append(f'fillcolor="{fill}", color="{stroke}"')
            if st == UNRECORDED:
                attrs.append('style="rounded,dashed"')
        extra = "".join(f", {a}" for a in attrs)
        lines.append(f"  {_dot_str(tid)} [label={_dot_str(label)}{extra}];")
    for tid in graph.order:
        for dep in graph.dependencies[tid]:
            lines.append(f"  {_dot_str(dep)} -> {_dot_str(tid)};")
    lines.append("}")
    return "\n".join(lines)


def to_ascii(
    graph: PlanGraph, statuses: Mapping[str, str] | None = None, elements: Elements | None = None
) -> str:
    """Plain text, one topological level at a time: ``[status] id  tool  <- dependencies``."""
    lines: list[str] = []
    if graph.plan.goal:
        lines.append(f"goal: {' '.join(graph.plan.goal.split())}")
    id_w = max((len(t) for t in graph.order), default=0)
    what = {t: _what(graph.tasks[t], elements) for t in graph.order}
    what_w = max((len(w) for w in what.values()), default=0)
    mark_w = 0
    if statuses is not None:
        mark_w = max((len(_status_of(t, statuses) or "") for t in graph.order), default=0) + 2
    if not graph.order:
        lines.append("(no tasks)")
    for i, level in enumerate(graph.levels):
        lines.append(f"level {i}")
        for tid in level:
            mark = ""
            if statuses is not None:
                mark = f"[{_status_of(tid, statuses)}]".ljust(mark_w) + " "
            deps = graph.dependencies[tid]
            arrow = f"  <- {', '.join(deps)}" if deps else ""
            row = f"  {mark}{tid.ljust(id_w)}  {what[tid].ljust(what_w)}{arrow}"
            lines.append(row.rstrip())
    return "\n".join(lines)


def render_graph(
    graph: PlanGraph,
    fmt: str,
    statuses: Mapping[str, str] | None = None,
    elements: Elements | None = None,
) -> str:
    """``fmt``: one of :data:`FORMATS`."""
    if fmt == "mermaid":
        return to_mermaid(graph, statuses, elements)
    if fmt == "dot":
        return to_dot(graph, statuses, elements)
    if fmt == "ascii":
        return to_ascii(graph, statuses, elements)
    raise ValueError(f"unknown graph format {fmt!r}")
