"""Rich renderings shared by the commands: plans, results, issues, small DAG drawings."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..graph import PlanGraph
from ..plan import ToolTask
from ..text import shorten

if TYPE_CHECKING:
    from ..results import RunResult, TaskResult

__all__ = [
    "MAX_ROWS",
    "STATUS_STYLE",
    "path_text",
    "plan_table",
    "print_json",
    "print_warnings",
    "result_table",
    "time_cells",
    "waited_for_approval",
]

# By each TaskStatus's value, which looks up its member too (a str enum): showing a plan
# (dagagent validate) does not import the results.
STATUS_STYLE: dict[str, str] = {
    "succeeded": "green",
    "reused": "cyan",
    "failed": "red",
    "denied": "magenta",
    "cancelled": "yellow",
    "skipped": "dim",
    "waiting": "medium_purple1",
    "running": "blue",
}


#: A table shows at most this many tasks; a larger plan or run is summarised under it (a
#: terminal cannot show 100,000 rows, and drawing them took minutes).
MAX_ROWS = 100


def plan_table(graph: PlanGraph, *, whole: bool = False) -> Table:
    """The plan's tasks as a table; ``whole``: every task, with its arguments and
    instruction in full (what an approval is asked for), not cut to fit. Otherwise a plan of
    more than :data:`MAX_ROWS` tasks shows its first ones and a summary of the rest."""
    width = 10**9 if whole else 50
    level_of = {t: i for i, level in enumerate(graph.levels) for t in level}
    table = Table(title=graph.plan.goal or None, show_lines=False)
    order = graph.order
    if not whole and len(order) > MAX_ROWS:
        rest = order[MAX_ROWS:]
        by_tool = Counter(graph.tasks[t].label for t in rest)
        tools = ", ".join(f"{n} {label}" for label, n in by_tool.most_common(5))
        more = f", {len(by_tool) - 5} more tools" if len(by_tool) > 5 else ""
        table.caption = (
            f"… and {len(rest)} more tasks ({tools}{more}), up to level "
            f"{len(graph.levels) - 1}; --json lists every task"
        )
        order = order[:MAX_ROWS]
    table.add_column("level", justify="right")
    table.add_column("id")
    table.add_column("tool / instruction", overflow="fold")
    table.add_column("args", overflow="fold")  # a long word is folded, never cut
    table.add_column("depends on")
    for tid in order:
        t = graph.tasks[tid]
        if isinstance(t, ToolTask):
            what, args = t.tool, shorten(t.args, width, one_line=not whole)
        else:
            what, args = f"{t.label}: {shorten(t.instruction, width, one_line=not whole)}", ""
        table.add_row(
            str(level_of[tid]),
            tid,
            what,
            args,
            ", ".join(graph.dependencies[tid]),
        )
    return table


#: An approval wait shorter than this is a rule deciding, not a person: not worth a column.
_NOTICEABLE_WAIT_S = 0.001


def waited_for_approval(results: Iterable[TaskResult | None]) -> bool:
    """Whether any of these tasks waited for an approval decision (then tables show the wait
    in a column of its own, apart from the time the task ran)."""
    return any(r is not None and r.approval_wait_s >= _NOTICEABLE_WAIT_S for r in results)


def time_cells(r: TaskResult) -> tuple[str, str]:
    """A task's time running and its time waiting for approval, as table cells."""
    run = r.run_s
    wait = r.approval_wait_s
    return (
        f"{run:.3f}s" if run is not None and (run > 0 or wait < _NOTICEABLE_WAIT_S) else "-",
        f"{wait:.3f}s" if wait >= _NOTICEABLE_WAIT_S else "",
    )


def result_table(result: RunResult, *, width: int = 80) -> Table:
    """The run's tasks, one row each; the output or error cut to fit a terminal ``width``
    columns wide (never under 60 characters). When a task waited for approval, a column
    ``approval`` holds that wait and ``time`` only the time it ran. A run of more than
    :data:`MAX_ROWS` tasks shows those that did not succeed first, then the first others,
    in plan order, and says how many it leaves out."""
    cut = max(60, width - 40)
    shown: Mapping[str, TaskResult] = result.tasks
    if len(shown) > MAX_ROWS:
        first = [t for t, r in shown.items() if not r.ok][:MAX_ROWS]
        first += [t for t, r in shown.items() if r.ok][: MAX_ROWS - len(first)]
        keep = set(first)
        shown = {t: r for t, r in result.tasks.items() if t in keep}
    waits = waited_for_approval(result.tasks.values())
    table = Table(title=f"run {result.run_id}: {result.status.value}")
    table.add_column("id")
    table.add_column("status")
    table.add_column("time", justify="right")
    if waits:
        table.add_column("approval", justify="right")
    table.add_column("tries", justify="right")
    table.add_column("output / error")
    for tid, r in shown.items():
        ran, waited = time_cells(r)
        detail = r.error if r.error else shorten(r.output, cut)
        table.add_row(
            tid,
            Text(r.status.value, style=STATUS_STYLE.get(r.status, "")),
            ran,
            *((waited,) if waits else ()),
            str(r.attempts),
            Text(detail or "", style="red" if r.error and not r.status.ok else ""),
        )
    if len(shown) < len(result.tasks):
        left = Counter(r.status.value for t, r in result.tasks.items() if t not in shown)
        counts = ", ".join(f"{n} {status}" for status, n in sorted(left.items()))
        table.caption = (
            f"… and {sum(left.values())} more tasks ({counts}); "
            "dagagent show RUN --task ID shows one, --json every one"
        )
    return table


def path_text(path: list[str], most: int = 10) -> str:
    """A chain of task ids as ``a -> b -> c``, its middle left out when it is long; ``-`` when
    no task finished (a run that paused or was denied before anything ran)."""
    if not path:
        return "-"
    if len(path) <= most:
        return " -> ".join(path)
    half = most // 2
    return " -> ".join([*path[:half], f"… ({len(path) - 2 * half} more)", *path[-half:]])


def print_warnings(console: Console, warnings: Iterable[Any]) -> None:
    """Print a plan's warnings, one line each, except that every ``no_llm`` warning (agent
    tasks and no model) makes one line, worded for the command line."""
    no_model: list[str] = []
    sub_solves: set[str] = set()
    seen: set[str] = set()
    for w in warnings:
        if getattr(w, "code", None) == "no_llm":
            if w.task_id not in no_model:
                no_model.append(w.task_id)
            if str(getattr(w, "message", "")).startswith("sub-solve"):
                sub_solves.add(w.task_id)
            continue
        text = f"warning: {w}"
        if text not in seen:
            seen.add(text)
            console.print(text, markup=False, highlight=False)
    if no_model:
        tasks = ", ".join(repr(t) for t in no_model)
        noun = "agent task" if len(no_model) == 1 else "agent tasks"
        if sub_solves:
            noun = (
                ("sub-solve" if len(no_model) == 1 else "sub-solves")
                if len(sub_solves) == len(no_model)
                else "agent tasks and sub-solves"
            )
        console.print(
            f"warning: [no_llm] {noun} {tasks} will fail without a model: pass --model SPEC "
            "or set DAGAGENT_MODEL",
            markup=False,
            highlight=False,
        )


def print_json(console: Console, data: Any) -> None:
    """Print ``data`` as strict JSON (RFC 8259) that any parser reads: NaN and infinities
    become the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``, and text that UTF-8
    cannot carry (lone surrogates from a tool) is written as ``\\u`` escapes."""
    from .signals import json_written

    json_written()
    try:
        text = json.dumps(data, default=str, allow_nan=False, ensure_ascii=False)
    except ValueError:  # NaN or an infinity somewhere
        text = json.dumps(_finite(data), default=str, ensure_ascii=False)
    try:
        text.encode("utf-8")
        ascii_only = False
    except UnicodeEncodeError:
        ascii_only = True
    if not console.is_terminal:
        # A pipe or a file: plain indented JSON, without rich's highlighting pass (which costs
        # about a second for a plan of a few hundred tasks).
        doc = json.loads(text)
        console.file.write(json.dumps(doc, indent=2, ensure_ascii=ascii_only) + "\n")
        console.file.flush()
        return
    console.print_json(text, ensure_ascii=ascii_only)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
