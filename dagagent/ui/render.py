"""Pages as HTML: Jinja2 templates with autoescape on, so every value from a plan, a tool or a
model is escaped where it is shown. Nothing from a run is marked safe; the only text not
escaped again is the viewer's own stylesheet and script, inlined into a report, and the task
panels a report embeds, which the same autoescaping templates rendered.

The same templates serve the web app (``mode="app"``: assets linked from ``/static``, task
panels fetched from the server, the task table paged by the server) and a report
(``mode="report"``: one file with the stylesheet, the script and the task panels inline, the
task table paged by the script).

A report holds at most :data:`REPORT_MAX_TASKS` tasks' rows and panels (all of them, in a run
that has no more): those that did not succeed, then the critical path, then the first in plan
order; and it stops adding panels once they reach :data:`REPORT_PANELS_BUDGET` characters. It
says how many tasks it leaves out and how to see them (``dagagent show RUN --task ID``, the
viewer), so its size does not grow with the run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from ..llm.usage import Usage, format_cost
from ..results import ModelCall
from ..review import PlanDiff, diff_plans
from ..store import (
    ApprovalRecord,
    EffectRecord,
    RunRecord,
    RunSummary,
    SolveRecord,
    SolveSummary,
    UnrunPlan,
)
from ..text import jsonable, shorten
from ._dag import levels_name
from ._labels import status_counts
from ._solve import build_solve_view
from .view import (
    PAGE_SIZE,
    STATUSES,
    LevelSpan,
    RunView,
    build_view,
    fmt_s,
    task_kind,
    task_what,
)

__all__ = [
    "Page",
    "RunAround",
    "render_error",
    "render_panel",
    "render_report",
    "render_run",
    "render_runs",
    "render_solve",
    "render_unrun",
    "report_tasks",
]

HERE = Path(__file__).parent
STATIC = HERE / "static"
#: A value longer than this is cut in a report (the web app shows it whole).
REPORT_VALUE_LIMIT = 200_000
#: The most tasks a report lists and holds the panels of.
REPORT_MAX_TASKS = 500
#: A report stops adding task panels once they reach this many characters.
REPORT_PANELS_BUDGET = 8_000_000


def _pretty(value: Any, limit: int | None = None) -> str:
    """A value as readable text: a string as is, anything else as indented JSON."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(jsonable(value), indent=2, ensure_ascii=False)
        except (TypeError, ValueError):
            text = repr(value)
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit:,} more characters not in this report)"
    return text


def _when(ts: float | None) -> str:
    if ts is None:
        return "–"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _dur(s: float | None) -> str:
    return "–" if s is None else fmt_s(s)


def _preview(value: Any, n: int = 140) -> str:
    return shorten(_pretty(value, n * 2), n)


def _env() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(HERE / "templates")),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        pretty=_pretty,
        when=_when,
        dur=_dur,
        preview=_preview,
        q=lambda s: quote(str(s), safe=""),
        num=lambda x: f"{x:.1f}",
        cost=lambda usd: "–" if usd is None else format_cost(usd),
    )
    env.globals.update(task_kind=task_kind, task_what=task_what, STATUSES=STATUSES)
    return env


_ENV = _env()


def _asset(name: str) -> str:
    text = (STATIC / name).read_text(encoding="utf-8")
    # Inlined into <style>/<script>: our own files, which must never close the element early.
    if "</" in text.lower().replace("<\\/", ""):
        raise ValueError(f"static/{name} contains '</' and cannot be inlined")
    return text


@dataclass
class Page:
    """Where a page is: the app (``base`` is the URL prefix) or a report file."""

    mode: str = "app"
    store: str = ""
    base: str = ""

    @property
    def report(self) -> bool:
        return self.mode == "report"

    def assets(self) -> dict[str, str]:
        if not self.report:
            return {}
        return {"css": _asset("app.css"), "js": _asset("app.js")}


def _common(page: Page) -> dict[str, Any]:
    return {"page": page, "assets": page.assets(), "generated": _when(time.time())}


def _chains(runs: Sequence[RunSummary]) -> list[tuple[RunSummary, int]]:
    """Runs with replans right under the run they revise (depth = replans from the root)."""
    by_id = {r.run_id: r for r in runs}
    children: dict[str, list[RunSummary]] = {}
    roots: list[RunSummary] = []
    for r in runs:
        if r.parent_id is not None and r.parent_id in by_id:
            children.setdefault(r.parent_id, []).append(r)
        else:
            roots.append(r)
    out: list[tuple[RunSummary, int]] = []
    seen: set[str] = set()

    def walk(r: RunSummary, depth: int) -> None:
        if r.run_id in seen:
            return
        seen.add(r.run_id)
        out.append((r, depth))
        for c in sorted(children.get(r.run_id, []), key=lambda c: c.created):
            walk(c, depth + 1)

    for r in roots:
        walk(r, 0)
    for r in runs:  # a loop of parents (never made by dagagent, but a store is a file)
        walk(r, 0)
    return out


def render_runs(
    runs: Sequence[RunSummary],
    *,
    page: Page,
    status: str | None = None,
    answers: Mapping[str, Any] | None = None,
    limit: int = 200,
    solves: Sequence[SolveSummary] = (),
    unrun: Sequence[UnrunPlan] = (),
) -> str:
    """The runs list (``status``: only runs of that status), under the recent ``solves``
    (their model and what they cost) and the plans that were not run (``unrun``: see
    :meth:`~dagagent.store.RunStore.unrun_plans`)."""
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.status] = counts.get(r.status, 0) + 1
    shown = [r for r in runs if status is None or r.status == status]
    rows = _chains(shown)
    return _ENV.get_template("runs.html").render(
        **_common(page),
        rows=rows,
        n_runs=len(runs),
        counts=sorted(counts.items(), key=lambda kv: -kv[1]),
        status=status,
        answers=answers or {},
        limit=limit,
        now=time.time(),
        solves=solves,
        unrun=unrun,
        solve_of_run={rid: sv.solve_id for sv in solves for rid in sv.run_ids},
    )


def level_span(raw: str) -> LevelSpan:
    """A level filter as the query ``?level=`` gives it: ``3``, or ``0-1999`` for the levels a
    box of a collapsed DAG holds. Raises ``ValueError`` with a message for people."""
    first, dash, last = raw.strip().partition("-")
    try:
        lo = int(first)
        hi = int(last) if dash else lo
    except ValueError:
        raise ValueError("level must be a number, or two joined by '-' (3 or 0-1999)") from None
    if lo < 0 or hi < lo:
        raise ValueError("level must be a level of the run, or a span from lower to higher")
    return lo, hi


@dataclass
class _TableQuery:
    status: str | None = None
    level: LevelSpan | None = None
    page: int = 1

    @property
    def level_name(self) -> str:
        return "" if self.level is None else levels_name(*self.level)

    def url(self, base: str, **change: Any) -> str:
        level = None
        if self.level is not None:
            lo, hi = self.level
            level = str(lo) if lo == hi else f"{lo}-{hi}"
        q = {"status": self.status, "level": level, "page": self.page, **change}
        q = {k: v for k, v in q.items() if v is not None and not (k == "page" and v == 1)}
        return base + ("?" + urlencode(q) if q else "")


def report_tasks(view: RunView) -> list[str]:
    """The tasks a report holds, in plan order: all of them, or in a run of more than
    :data:`REPORT_MAX_TASKS`, those that did not succeed, then the critical path, then the
    first in plan order, up to that many."""
    order = [t.id for t in view.record.plan.tasks]
    if len(order) <= REPORT_MAX_TASKS:
        return order
    ok = ("succeeded", "reused")
    keep: dict[str, None] = {}
    for group in (
        (t for t in order if view.status_of[t] not in ok),
        view.critical,
        order,
    ):
        for t in group:
            if len(keep) >= REPORT_MAX_TASKS:
                break
            keep[t] = None
    return [t for t in order if t in keep]


def _run_context(
    view: RunView,
    *,
    page: Page,
    status: str | None,
    level: LevelSpan | None,
    page_no: int,
    held: list[str] | None = None,
) -> dict[str, Any]:
    record = view.record
    ids = view.task_ids(status=status, level=level) if held is None else held
    if page.report:
        rows, pages, page_no = ids, max(1, -(-len(ids) // PAGE_SIZE)), 1
    else:
        pages = max(1, -(-len(ids) // PAGE_SIZE))
        page_no = min(max(1, page_no), pages)
        rows = ids[(page_no - 1) * PAGE_SIZE : page_no * PAGE_SIZE]
    return {
        "v": view,
        "r": record,
        "tasks": view.graph.tasks,
        "rows": rows,
        "n_rows": len(ids),
        "pages": pages,
        "page_no": page_no,
        "tq": _TableQuery(status, level, page_no),
        "run_url": f"{page.base}/runs/{record.run_id}",
        "n_levels": len(view.graph.levels),
        "left_out": 0,
        "chip_counts": status_counts({t: view.status_of[t] for t in rows})
        if page.report
        else view.counts,
    }


@dataclass(frozen=True)
class RunAround:
    """What a run's page shows beside its own record, read from the same store (see
    :func:`dagagent.ui.app.run_around`): the run it replans (``parent``) and those that
    replan it, the answer a solve gave from it, the calls of it that waited for a person
    (its :meth:`~dagagent.store.RunStore.approval_history`), and, for a round of a solve,
    what became of that round (``round_note``)."""

    parent: RunRecord | None = None
    children: Sequence[RunSummary] = ()
    answer: Any = None
    approvals: Sequence[ApprovalRecord] = ()
    round_note: str | None = None
    #: Its calls with side effects (a task whose call is in doubt is shown ``in-doubt``).
    effects: Sequence[EffectRecord] = ()
    #: Its own model calls, outside a solve: the planner's or replanner's that made its plan
    #: (``dagagent plan --execute``, ``replan --model --execute``) and its agent tasks'.
    calls: Sequence[ModelCall] = ()
    #: The plans not run that revised its plan (``replan RUN --model`` without ``--execute``).
    revisions_not_run: Sequence[str] = ()


def render_run(
    record: RunRecord,
    *,
    page: Page,
    around: RunAround | None = None,
    status: str | None = None,
    level: int | LevelSpan | None = None,
    page_no: int = 1,
    live_only: bool = False,
    now: float | None = None,
    solve: SolveRecord | None = None,
) -> str:
    """The run page (``live_only``: only the part a running run's page refreshes; ``solve``:
    the solve the run is a round of)."""
    around = around or RunAround()
    view = build_view(record, now=now, approvals=around.approvals, effects=around.effects)
    span = (level, level) if isinstance(level, int) else level
    panels: list[tuple[str, Markup]] = []
    held: list[str] | None = None
    if page.report and not live_only:
        # Rendered by the autoescaping panel template: HTML already, not text to escape again.
        held = []
        size = 0
        for tid in report_tasks(view):
            html = render_panel(view, tid, page=page)
            if size + len(html) > REPORT_PANELS_BUDGET and held:
                break
            size += len(html)
            held.append(tid)
            panels.append((tid, Markup(html)))
    ctx = _run_context(view, page=page, status=status, level=span, page_no=page_no, held=held)
    if held is not None:
        ctx["left_out"] = len(record.plan.tasks) - len(held)
    ctx["round_reason"] = around.round_note
    if live_only:
        return _ENV.get_template("_live.html").render(**_common(page), **ctx)
    diff: PlanDiff | None = None
    parent_view: RunView | None = None
    parent = around.parent
    if parent is not None:
        diff = diff_plans(parent.plan, record.plan)
        parent_view = build_view(parent)
    return _ENV.get_template("run.html").render(
        **_common(page),
        **ctx,
        parent=parent,
        parent_view=parent_view,
        diff=diff,
        reused=[t for t, s in view.status_of.items() if s == "reused"],
        children=around.children,
        revisions_not_run=around.revisions_not_run,
        answer=around.answer,
        round_note=around.round_note,
        panels=panels,
        solve=solve,
        solve_round=_round_of(solve, record.run_id),
        calls=around.calls,
        calls_used=sum((c.usage for c in around.calls), Usage()),
        calls_planned=any(c.role in ("planner", "replanner") for c in around.calls),
        calls_agent=any(c.role == "agent" for c in around.calls),
    )


def render_unrun(run_id: str, calls: Sequence[ModelCall], *, page: Page) -> str:
    """The page of a plan that was not run: the model calls recorded under the run id it
    would have had (``dagagent plan`` without ``--execute``, or planning that failed), and
    the run whose plan they revised (``replan RUN --model`` without ``--execute``)."""
    return _ENV.get_template("unrun.html").render(
        **_common(page),
        run_id=run_id,
        calls=calls,
        used=sum((c.usage for c in calls), Usage()),
        models=list(dict.fromkeys(c.model for c in calls if c.model)),
        started=min((c.started_at for c in calls), default=None),
        replan_of=next((c.replan_of for c in calls if c.replan_of), None),
    )


def _round_of(solve: SolveRecord | None, run_id: str) -> int | None:
    rnd = solve.round_of(run_id) if solve is not None else None
    return rnd.round if rnd is not None else None


def render_solve(
    record: SolveRecord, runs: Mapping[str, RunRecord], *, page: Page, now: float | None = None
) -> str:
    """The page of a solve: the answer on top (what the model wrote one click away), its
    rounds, one timeline of each round's planner, tasks and joiner, and every model call."""
    view = build_solve_view(record, runs, now=now if now is not None else time.time())
    return _ENV.get_template("solve.html").render(**_common(page), s=record, sv=view)


def render_panel(view: RunView, task_id: str, *, page: Page) -> str:
    """The panel of one task: its definition, arguments, output or error, attempts, approval
    decisions and agent steps."""
    task = view.graph.tasks[task_id]
    r = view.record.tasks.get(task_id)
    return _ENV.get_template("_panel.html").render(
        **_common(page),
        v=view,
        tid=task_id,
        task=task,
        res=r,
        kind=task_kind(task),
        status=view.status_of[task_id],
        limit=REPORT_VALUE_LIMIT if page.report else None,
        traceback=getattr(r, "traceback", None),
        wait=view.wait_of(task_id),
        people_s=sum(b - a for a, b in view.people.get(task_id, ())),
    )


def render_error(code: int, detail: str, *, page: Page) -> str:
    """A page that says what went wrong (a run not found, a bad request, a record the viewer
    could not show)."""
    title = {400: "bad request", 404: "not found"}.get(code, "error")
    return _ENV.get_template("error.html").render(
        **_common(page), code=code, title=title, detail=detail
    )


def render_report(record: RunRecord, *, around: RunAround | None = None, store: str = "") -> str:
    """The run page as one self-contained HTML file: no request leaves it."""
    return render_run(record, page=Page(mode="report", store=store), around=around)
