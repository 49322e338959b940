"""Rich renderings shared by the commands: plans, results, issues, small DAG drawings."""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table
from rich.text import Text

from ..graph import PlanGraph
from ..results import RunResult, TaskStatus, jsonable

__all__ = ["STATUS_STYLE", "plan_table", "result_table", "short"]

STATUS_STYLE = {
    TaskStatus.SUCCEEDED: "green",
    TaskStatus.REUSED: "cyan",
    TaskStatus.FAILED: "red",
    TaskStatus.DENIED: "magenta",
    TaskStatus.CANCELLED: "yellow",
    TaskStatus.SKIPPED: "dim",
}


def short(value: Any, width: int = 60) -> str:
    """A one-line, shortened rendering of a value."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(jsonable(value), ensure_ascii=False)
        except (TypeError, ValueError):
            text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def plan_table(graph: PlanGraph) -> Table:
    level_of = {t: i for i, level in enumerate(graph.levels) for t in level}
    table = Table(title=graph.plan.goal or None, show_lines=False)
    table.add_column("level", justify="right")
    table.add_column("id")
    table.add_column("tool / instruction")
    table.add_column("args")
    table.add_column("depends on")
    for tid in graph.order:
        t = graph.tasks[tid]
        what = t.tool if t.tool is not None else f"agent: {short(t.instruction, 50)}"
        table.add_row(
            str(level_of[tid]),
            tid,
            what,
            short(t.args, 50) if t.tool is not None else "",
            ", ".join(graph.dependencies[tid]),
        )
    return table


def result_table(result: RunResult) -> Table:
    table = Table(title=f"run {result.run_id}: {result.status.value}")
    table.add_column("id")
    table.add_column("status")
    table.add_column("time", justify="right")
    table.add_column("tries", justify="right")
    table.add_column("output / error")
    for tid, r in result.tasks.items():
        dur = r.duration_s
        detail = r.error if r.error else short(r.output)
        table.add_row(
            tid,
            Text(r.status.value, style=STATUS_STYLE.get(r.status, "")),
            f"{dur:.3f}s" if dur is not None else "-",
            str(r.attempts),
            Text(detail or "", style="red" if r.error and not r.status.ok else ""),
        )
    return table
