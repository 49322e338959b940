"""``dagagent runs``, ``show`` and ``graph``: reviewing recorded runs (``replan``, which revises
them, is in :mod:`dagagent.cli.replan`). Business logic lives in :mod:`dagagent.store`.

:func:`find_run` is how every command over recorded runs finds one: ``RUN`` or ``--last`` in
``--store``.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from ..errors import ConfigError, StoreError
from ._app import app, err, guard, out
from .diagram import FORMATS, render_graph
from .options import (
    LastOpt,
    McpOpt,
    RunArg,
    StoreOpt,
    ToolsOpt,
)

if TYPE_CHECKING:
    from ..graph import PlanGraph
    from ..llm import Usage
    from ..plan import Plan
    from ..results import AgentStep, CallDecision, ModelCall, TaskResult
    from ..store import (
        ApprovalRecord,
        DamagedRun,
        EffectRecord,
        RunRecord,
        RunStore,
        RunSummary,
        SolveRecord,
        UnrunPlan,
    )

__all__ = ["find_run", "open_store"]

_STYLES: dict[str, str] = {}


def _style(status: str) -> str:
    """The style a status is shown in (a task's, or a recorded run's)."""
    if not _STYLES:
        from .render import STATUS_STYLE

        _STYLES.update(STATUS_STYLE)
        _STYLES.update(
            {
                "interrupted": "yellow",
                "unrecorded": "dim",
                "pending": "dim",
                "paused": "medium_purple1",
                IN_DOUBT: "bold yellow",
            }
        )
    return _STYLES.get(status, "")


#: How a call with side effects whose outcome is unknown is shown (see docs/exactly-once.md).
IN_DOUBT = "in doubt"

_STATUS_ORDER = ("running", "succeeded", "reused", "failed", "denied", "cancelled", "skipped")


def _settings_text(settings: dict[str, Any]) -> str:
    """The settings a run was recorded with that are not the defaults (a resume goes on with
    them), as ``" (on_failure continue, max_concurrency 2)"``; ``""`` if none."""
    from ..settings import RunSettings
    from ..text import printable

    default = RunSettings().to_record()
    shown = []
    for name, value in settings.items():
        if name not in default or value == default[name]:
            continue
        if isinstance(value, dict):
            value = ", ".join(f"{k} {v}" for k, v in value.items() if v != default[name].get(k))
        shown.append(f"{name} {printable(str(value))}")
    return f" ({'; '.join(shown)})" if shown else ""


def _when(ts: float | None, *, seconds: bool = True) -> str:
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M", time.localtime(ts))


def _counts_text(
    counts: dict[str, int], unrecorded: int = 0, missing: str = "unrecorded", in_doubt: int = 0
) -> Text:
    """Counts by status; ``unrecorded`` tasks without a record are ``missing`` (``pending``
    in a run under way); ``in_doubt``: calls with side effects whose outcome is unknown."""
    text = Text()
    parts = [(s, counts[s]) for s in _STATUS_ORDER if counts.get(s)]
    parts += [(s, n) for s, n in sorted(counts.items()) if s not in _STATUS_ORDER]
    if unrecorded:
        parts.append((missing, unrecorded))
    if in_doubt:
        parts.append((IN_DOUBT, in_doubt))
    for i, (s, n) in enumerate(parts):
        if i:
            text.append(", ")
        text.append(f"{n} {s}", style=_style(s))
    return text


def open_store(store: Path | None) -> RunStore:
    from ..store import RunStore

    return RunStore(store, create=False)


def find_run(st: RunStore, run: str | None, last: bool) -> RunRecord:
    """The record named by ``RUN`` or ``--last`` (exactly one of them)."""
    if run is not None and last:
        raise ConfigError("give a RUN id or --last, not both")
    if run is None and not last:
        raise ConfigError("give a RUN id (see 'dagagent runs') or --last")
    if last:
        return st.last_run()
    assert run is not None
    return st.get_run(run)


# ---------------------------------------------------------------------------------------------
# runs


@app.command("runs")
@guard
def runs_cmd(
    limit: int = typer.Option(
        20, "--limit", "-n", min=1, help="Show at most N runs and plans not run."
    ),
    store: StoreOpt = None,
    json_out: bool = typer.Option(
        False,
        "--json",
        help='Print {"store", "found", "runs", "plans_not_run", "damaged"} as JSON: the store '
        "read, why that one, each run (id and run_id, the same, parent_id, created, goal, "
        "status, executor, started_at, finished_at, n_tasks, counts, unrecorded, in_doubt), "
        "each plan not run (run_id, started_at, planned, rejected, replan_of, calls, tokens, "
        "cost_usd, models), and each run whose record cannot be read (run_id, problem).",
    ),
) -> None:
    """List recorded runs, most recent first: id, when, goal, status, task counts; and the
    plans that were not run (plan or replan --model without --execute, or planning that
    failed), marked 'not run', under the id the run would have had (dagagent show ID)."""
    from ..store import RunSummary, StoreSource, UnrunPlan, locate_store
    from ..text import printable, shorten
    from .render import print_json

    location = locate_store(store)
    path, why = location.path, location.describe()
    runs: list[RunSummary] = []
    damaged: list[DamagedRun] = []
    unrun: list[UnrunPlan] = []
    # a store named with --store must exist (a typo is an error); the one found by default
    # may simply have nothing recorded yet
    if location.source is StoreSource.given or path.exists():
        with open_store(store) as st:
            runs, damaged = st.scan_runs(limit)
            unrun = st.unrun_plans(limit)
    # the newest N of both, runs and plans not run, as the table shows them
    listed: list[RunSummary | UnrunPlan] = [*runs, *unrun]
    rows = sorted(listed, key=_listed_at, reverse=True)[:limit]
    runs = [r for r in rows if isinstance(r, RunSummary)]
    unrun = [r for r in rows if isinstance(r, UnrunPlan)]
    for bad in damaged:  # named, and left out of the list: the others are still listed
        err.print(
            f"warning: run {bad.run_id} is damaged and left out: {printable(bad.problem)}",
            markup=False,
            highlight=False,
        )
    if json_out:
        # One object, as every --json prints: the store read (and why that one), then the
        # runs, newest first. Each run has "run_id", the key 'show --json' and 'run --json'
        # use, and "id", the same value, the key this listing has always had.
        print_json(
            out,
            {
                "store": str(path),
                "found": location.source.value,
                "runs": [
                    {"id": r.run_id, **r.model_dump(mode="json"), "unrecorded": r.unrecorded}
                    for r in runs
                ],
                "plans_not_run": [_unrun_json(u) for u in unrun],
                "damaged": [d.model_dump(mode="json") for d in damaged],
            },
        )
        return
    # which store, and why that one: the same command elsewhere may read another
    out.print(f"{'runs' if rows else 'no runs recorded'} in {path}", markup=False, highlight=False)
    out.print(f"({why})", style="dim", markup=False, highlight=False)
    if not rows:
        return
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("id", no_wrap=True)
    table.add_column("when", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("tasks", min_width=12)
    table.add_column("goal", min_width=12)
    for r in rows:
        if isinstance(r, UnrunPlan):
            table.add_row(*_unrun_row(r))
            continue
        goal = shorten(r.goal, 60) + (f" (replans {r.parent_id})" if r.parent_id else "")
        table.add_row(
            r.run_id,
            _when(r.created, seconds=False),
            Text(r.status.value, style=_style(r.status.value)),
            _counts_text(
                r.counts,
                r.unrecorded,
                "pending" if r.status == "running" else "unrecorded",
                r.in_doubt,
            )
            if r.n_tasks
            else Text("none", style="dim"),
            goal,
        )
    out.print(table)


def _listed_at(r: RunSummary | UnrunPlan) -> float:
    """When a run was created, or a plan not run began to be planned."""
    from ..store import UnrunPlan

    return r.started_at if isinstance(r, UnrunPlan) else r.created


def _unrun_row(u: UnrunPlan) -> tuple[str, str, Text, Text, str]:
    """A plan not run as a row of ``dagagent runs``: what became of its planning, and what
    it was (a revision of a run, or a plan made from a goal: the goal is not on record)."""
    outcome = Text("planned" if u.accepted else "no plan", style="" if u.accepted else "red")
    if u.rejected:
        outcome.append(f", {u.rejected} rejected", style="dim")
    what = f"revision of run {u.replan_of}" if u.replan_of else "plan"
    return (
        u.run_id,
        _when(u.started_at, seconds=False),
        Text("not run", style="dim"),
        outcome,
        f"({what} not run: dagagent show {u.run_id})",
    )


def _unrun_json(u: UnrunPlan) -> dict[str, Any]:
    """A plan not run as ``dagagent runs --json`` lists it."""
    spend = u.spend
    return {
        "run_id": u.run_id,
        "started_at": u.started_at,
        "planned": u.accepted > 0,
        "rejected": u.rejected,
        "replan_of": u.replan_of,
        "calls": spend.calls,
        "input_tokens": spend.input_tokens,
        "output_tokens": spend.output_tokens,
        "cost_usd": spend.cost_usd,
        "estimated": spend.estimated,
        "models": spend.models,
    }


# ---------------------------------------------------------------------------------------------
# show


@dataclass(frozen=True)
class UnrunCalls:
    """The model calls recorded under a run id no run has: a plan that was not run (``plan``
    without ``--execute``, ``replan --model`` without it, or planning that failed), which keeps
    the id its run would have had."""

    run_id: str
    calls: list[ModelCall]

    @property
    def replan_of(self) -> str | None:
        """The run whose plan these calls revised (``replan RUN --model``), if they did."""
        return next((c.replan_of for c in self.calls if c.replan_of), None)


def find_run_or_solve(
    st: RunStore, ref: str | None, last: bool
) -> RunRecord | SolveRecord | UnrunCalls:
    """The run, or the solve, that ``RUN`` names (``--last``: the last run): a solve's id (the
    one ``dagagent ask`` prints last) opens the solve; the id a plan that was not run was
    given (``plan`` prints it) opens its model calls."""
    if ref is not None and not last:
        solve_id = st.resolve_solve(ref)
        if solve_id is not None:
            try:
                st.resolve(ref)
            except StoreError:
                return st.get_solve(solve_id)
            raise StoreError(f"{ref} begins the id of a run and of a solve: give more digits")
    try:
        return find_run(st, ref, last)
    except StoreError:
        if ref is None or last:
            raise
        run_id = st.resolve_calls(ref)
        if run_id is None:
            raise
        return UnrunCalls(run_id, [c for c in st.model_calls(run_id=run_id) if c.solve_id is None])


def _graph_of(plan: Plan) -> PlanGraph:
    from ..graph import recorded_graph

    return recorded_graph(plan)  # the graph only: tools are not needed to draw or measure it


def _new_versions(st: RunStore, record: RunRecord) -> list[str]:
    """The tasks of a replan's run that succeeded in its parent under another call."""
    from ..errors import StoreError
    from ..review import new_versions

    if record.parent_id is None:
        return []
    try:
        parent = st.get_run(record.parent_id)
    except StoreError:  # the parent is gone from the store: nothing to compare with
        return []
    return new_versions(parent.plan, record.plan, parent.tasks)


@app.command("show")
@guard
def show_cmd(
    run: RunArg = None,
    last: LastOpt = False,
    store: StoreOpt = None,
    json_out: bool = typer.Option(False, "--json", help="Print the record as JSON."),
    timeline: bool = typer.Option(
        False,
        "--timeline",
        help="Print the run's timeline instead: one bar per task from start to end, the "
        "waits before them and the critical path.",
    ),
    task: str | None = typer.Option(
        None,
        "--task",
        metavar="ID",
        help="Show one task in full instead: its arguments, output, error (with the "
        "traceback of a tool that raised) and attempts.",
    ),
    verbose: bool = typer.Option(
        False,
        "--verbose",
        "-v",
        help="Also print the traceback of each task whose tool raised.",
    ),
) -> None:
    """Show a recorded run: each task's status, duration, attempts, output or error, and the
    critical path."""
    from ..store import SolveRecord, person_wait_s, person_waits
    from .render import path_text, print_json, waited_for_approval

    with open_store(store) as st:
        found = find_run_or_solve(st, run, last)
        if isinstance(found, SolveRecord):
            if task is not None or timeline:
                runs = ", ".join(r.run_id for r in found.rounds if r.run_id) or "none"
                raise ConfigError(
                    f"{found.solve_id} is a solve: --task and --timeline show a run (its "
                    f"rounds' runs: {runs})"
                )
            turn = st.turn_of_solve(found.solve_id)
            if json_out:
                print_json(out, {**found.to_json_dict(), "session": _turn_json(turn)})
            else:
                _show_solve_record(found, verbose=verbose, turn=turn)
            return
        if isinstance(found, UnrunCalls):
            if task is not None or timeline:
                raise ConfigError(
                    f"{found.run_id} was not run (only the model calls that planned it are on "
                    "record): --task and --timeline show a run"
                )
            _show_unrun(found, as_json=json_out, verbose=verbose)
            return
        record = found
        solve = st.solve_of_run(record.run_id)
        turn = st.turn_of_solve(solve.solve_id) if solve is not None else None
        # The run's own model calls (a solve's are shown with the solve): the planner's or
        # replanner's that made its plan, and its agent tasks'.
        calls = [c for c in st.model_calls(run_id=record.run_id) if c.solve_id is None]
        versions = _new_versions(st, record)
        revisions = st.revisions_not_run(record.run_id)
        history = st.approval_history(record.run_id)
        effects = st.effects(record.run_id)
    doubts: dict[str, list[EffectRecord]] = {}
    took_effect: set[str] = set()  # tasks without a result whose calls are on record as done
    for e in effects:
        if e.in_doubt:
            doubts.setdefault(e.task_id, []).append(e)
        elif e.state == "succeeded":
            took_effect.add(e.task_id)
    if task is not None:
        _show_task(
            record,
            task,
            as_json=json_out,
            history=history,
            calls=[c for c in calls if c.task_id == task],
            verbose=verbose,
        )
        return
    cp_s, cp = record.measured_critical_path()
    now = time.time()
    if timeline:
        from ..ui import build_view, timeline_text

        out.print(
            timeline_text(build_view(record, now=now, approvals=history), width=max(60, out.width)),
            markup=False,
            highlight=False,
        )
        return
    if json_out:
        doc = record.to_json_dict()
        doc["critical_path"], doc["critical_path_s"] = cp, cp_s
        doc["solve"] = (
            {**solve.to_json_dict(), "session": _turn_json(turn)} if solve is not None else None
        )
        doc["new_versions"] = versions
        doc["revisions_not_run"] = revisions
        doc["effects"] = [e.to_json_dict() for e in effects]
        doc["in_doubt"] = [e.key for e in effects if e.in_doubt]
        doc["calls"] = [c.to_json_dict() for c in calls]
        doc["spent"] = _spent(calls).to_json_dict()
        print_json(out, doc)
        return
    head = Text(f"run {record.run_id}: ")
    head.append(record.status.value, style=_style(record.status.value))
    if record.parent_id:
        head.append(f" (replans run {record.parent_id})")
    out.print(head)
    if record.goal:
        out.print(f"goal: {record.goal}", markup=False, highlight=False)
    for revision in revisions:
        out.print(
            f"revised, not run: {revision} (dagagent show {revision})",
            markup=False,
            highlight=False,
        )
    started = record.started_at if record.started_at is not None else record.created
    if record.wall_time_s is not None:
        wall = f"wall time {record.wall_time_s:.3f}s"
        people = person_wait_s(
            person_waits(history, until=record.finished_at),
            started,
            record.finished_at or started,
        )
        if people >= 0.01:
            wall += f" ({people:.3f}s of it waiting for a person's decision)"
    elif record.status == "running":
        wall = f"running for {now - started:.3f}s"
    else:
        wall = "wall time -"
    if record.status == "paused" and record.finished_at is not None:
        wall += (
            f"; paused since {_when(record.finished_at)} ({now - record.finished_at:.0f}s ago), "
            "waiting for a person's decision"
        )
    tools = record.context.get("tools")
    out.print(
        f"executor {record.executor or '-'}{_settings_text(record.settings)}; "
        f"started {_when(started)}; {wall}" + (f"; tools {tools}" if tools else ""),
        markup=False,
        highlight=False,
    )
    if not record.plan.tasks:
        # A streamed plan cut short before its first task (rejected, or the model could not
        # be used): nothing ran. The solve's round below says why.
        out.print(
            "tasks: none: no task of its plan was accepted, so nothing ran",
            markup=False,
            highlight=False,
        )
        _show_calls(calls, verbose=verbose)
        if solve is not None:
            _show_solve(solve, record.run_id, turn)
        return
    waits = waited_for_approval(record.tasks.values())
    table = Table()
    table.add_column("id")
    table.add_column("tool")
    table.add_column("status")
    table.add_column("time", justify="right")
    if waits:
        table.add_column("approval", justify="right")
    table.add_column("tries", justify="right")
    table.add_column("output / error")
    # A task with no record: not started yet in a run under way, else the run ended (or its
    # process died) before it did.
    missing = "pending" if record.status == "running" else "unrecorded"
    shown = _shown_tasks(record)
    for t in record.plan.tasks:
        if t.id not in shown:
            continue
        r = record.tasks.get(t.id)
        what = t.label
        doubt = doubts.get(t.id)
        if r is None:
            blank = ("-", "") if waits else ("-",)
            state = Text(IN_DOUBT, style=_style(IN_DOUBT)) if doubt else Text(missing, style="dim")
            note = _doubt_text(doubt) if doubt else ""
            if not doubt and t.id in took_effect and record.status != "running":
                note = "its call took effect (on record): a resume takes its output, not the call"
            table.add_row(t.id, what, state, *blank, "-", note)
            continue
        if r.elements is not None:
            what = f"{what} ×{len(r.elements)}"
        _add_result_row(table, t.id, what, r, waits, now, doubt)
        if r.elements:
            _add_element_rows(table, t.id, r.elements, waits, now)
    if len(shown) < len(record.plan.tasks):
        table.caption = _left_out_caption(record, shown, missing)
    out.print(table)
    out.print(
        "tasks: ",
        _counts_text(
            record.counts, len(record.unrecorded), missing, sum(len(d) for d in doubts.values())
        ),
        sep="",
    )
    if doubts:
        _show_doubts(record, doubts)
    _show_workers(record)
    if versions:
        out.print(
            f"new versions of tasks that succeeded in run {record.parent_id} (their calls "
            f"changed, so they ran again): {', '.join(versions)}",
            markup=False,
            highlight=False,
        )
    out.print(f"critical path {cp_s:.3f}s: {path_text(cp)}", markup=False, highlight=False)
    _show_calls(calls, verbose=verbose)
    if verbose:
        _show_tracebacks(record)
    if record.status == "paused":
        from .run import paused_hint

        paused_hint(record.as_result(), console=out)
    elif record.status == "interrupted" and record.executor == "temporal":
        out.print(
            f"its driver stopped; the run's workflow goes on on the Temporal workers: "
            f"'dagagent resume {record.run_id}' follows it and records what it did",
            markup=False,
            highlight=False,
        )
    if solve is not None:
        _show_solve(solve, record.run_id, turn)


def _shown_tasks(record: RunRecord) -> set[str]:
    """The tasks ``show`` lists: all of them, or in a run of more than ``MAX_ROWS``, those
    that did not succeed (a failure, a wait, a task still running or never recorded), then
    the first others in plan order, up to ``MAX_ROWS``."""
    from .render import MAX_ROWS

    order = [t.id for t in record.plan.tasks]
    if len(order) <= MAX_ROWS:
        return set(order)

    def settled(tid: str) -> bool:
        r = record.tasks.get(tid)
        return r is not None and r.status.ok

    first = [t for t in order if not settled(t)][:MAX_ROWS]
    first += [t for t in order if settled(t)][: MAX_ROWS - len(first)]
    return set(first)


def _left_out_caption(record: RunRecord, shown: set[str], missing: str) -> str:
    """What a shortened listing leaves out, by status, and how to see it."""
    left = Counter(
        (r.status.value if (r := record.tasks.get(t.id)) is not None else missing)
        for t in record.plan.tasks
        if t.id not in shown
    )
    counts = ", ".join(f"{n:,} {status}" for status, n in left.most_common())
    return (
        f"{len(shown):,} of {len(record.plan.tasks):,} tasks listed (those that did not "
        f"succeed first); {sum(left.values()):,} more ({counts}). "
        f"dagagent show {record.run_id} --task ID shows one, --json every one, "
        "dagagent ui all of them page by page"
    )


def _show_workers(record: RunRecord) -> None:
    """Where the tasks ran, when not in the run's process (the workers of a run on Temporal):
    each worker with the number of tasks it ran (a map's elements by the workers of their
    chunks)."""
    from ..text import printable

    counts: Counter[str] = Counter()
    for r in record.tasks.values():
        ran = [e.worker for e in r.elements or () if e.worker is not None]
        if not ran and r.worker is not None:
            ran = [r.worker]
        counts.update(ran)
    if counts:
        listed = ", ".join(f"{printable(w)} ({n})" for w, n in counts.most_common())
        out.print(f"workers: {listed}", markup=False, highlight=False)


def _show_tracebacks(record: RunRecord) -> None:
    """The traceback of each task whose tool raised, in plan order."""
    from ..text import printable

    for t in record.plan.tasks:
        r = record.tasks.get(t.id)
        if r is not None and r.traceback:
            out.print(f"traceback of task {t.id}:", markup=False, highlight=False)
            out.print(printable(r.traceback, lines=True), markup=False, highlight=False)


_ELEMENT_ROWS = 10  # the elements of a map task listed under it; show --task lists them all


def _doubt_text(doubt: list[EffectRecord]) -> str:
    e = doubt[0]
    more = f" (and {len(doubt) - 1} more)" if len(doubt) > 1 else ""
    return f"its call of {e.tool} may or may not have taken effect{more}: see below"


def _show_doubts(record: RunRecord, doubts: dict[str, list[EffectRecord]]) -> None:
    """The calls in doubt, with what their key is and what the next resume does."""
    from ..text import printable

    n = sum(len(d) for d in doubts.values())
    out.print(
        Text(f"{n} call{'s' if n != 1 else ''} in doubt", style=_style(IN_DOUBT)),
        Text(
            " (a tool with side effects was called and the run stopped before its outcome was "
            "recorded: whether it took effect is unknown; it is never made again silently):"
        ),
        sep="",
    )
    for items in doubts.values():
        for e in items:
            out.print(
                f"  {printable(e.where)}: {printable(e.tool)}, key {e.key}, started "
                f"{_when(e.started_at)} (attempt {e.attempt}, {e.state})",
                markup=False,
                highlight=False,
            )
    if record.status.value in ("succeeded", "failed", "cancelled"):
        first = next(iter(doubts.values()))[0]
        hint = (
            f"run {record.run_id} is {record.status.value}: nothing resumes it. Check with the "
            f"service by the key, then say what became of the call: 'dagagent approve "
            f"{record.run_id} {printable(first.task_id)} --happened [--output JSON]' (a "
            "revision takes it over), --allow (a revision makes it again, same key) or --deny "
            f"(a revision denies its task); then 'dagagent replan {record.run_id} --execute'"
        )
    else:
        hint = (
            f"'dagagent resume {record.run_id}' asks each tool's reconciler, or waits for a "
            "person: 'dagagent approve RUN TASK --happened [--output JSON]' (it took effect), "
            "--allow (make it again, same key) or --deny"
        )
    out.print(hint, markup=False, highlight=False)


def _add_result_row(
    table: Table,
    task_id: str,
    what: str,
    r: TaskResult,
    waits: bool,
    now: float,
    doubt: list[EffectRecord] | None = None,
) -> None:
    from ..results import TaskStatus
    from ..text import shorten
    from .render import time_cells

    ran, waited = time_cells(r)
    running = r.status is TaskStatus.RUNNING
    if running and r.started_at is not None:
        ran = f"{now - r.started_at:.3f}s…"  # so far
    status = Text(r.status.value, style=_style(r.status.value))
    if doubt and not r.status.ok:
        status = Text(IN_DOUBT, style=_style(IN_DOUBT))
    if doubt and not r.status.ok:
        detail = _doubt_text(doubt)
    elif running:
        detail = ""
    elif r.partial:
        detail = f"(partial) {shorten(r.output, max(60, out.width - 70))}"
    elif r.error:
        detail = r.error
    elif r.elements:
        counts = Counter(e.status.value for e in r.elements)
        detail = f"{len(r.elements)} elements: {_counts_text(dict(counts)).plain}"
    else:
        detail = shorten(r.output, max(60, out.width - 60))
    table.add_row(
        task_id,
        what,
        status,
        ran,
        *((waited,) if waits else ()),
        "-" if running else str(r.attempts),
        Text(detail or "", style=_detail_style(r)),
    )


def _detail_style(r: TaskResult) -> str:
    """An error in red; why a task waits or did not run in its own status's colour."""
    if not r.error or r.status.ok:
        return ""
    if r.status.value in ("failed", "denied"):
        return "red"
    return _style(r.status.value)


def _add_element_rows(
    table: Table, task_id: str, elements: list[TaskResult], waits: bool, now: float
) -> None:
    """The first elements of a map task, each as ``  [i]``; failed ones first of all."""
    shown = sorted(range(len(elements)), key=lambda i: (elements[i].status.ok, i))[:_ELEMENT_ROWS]
    for i in sorted(shown):
        _add_result_row(table, f"  [{i}]", "", elements[i], waits, now)
    if len(elements) > len(shown):
        more = Text(f"... {len(elements) - len(shown)} more elements: show --task {task_id}", "dim")
        table.add_row(*[""] * (len(table.columns) - 1), more)


def _show_task(
    record: RunRecord,
    task_id: str,
    *,
    as_json: bool,
    history: Sequence[ApprovalRecord] = (),
    calls: Sequence[ModelCall] = (),
    verbose: bool = False,
) -> None:
    """One task of a run in full: nothing cut, untrusted text escaped; the approval decisions
    about its calls (who allowed, denied, edited or redacted, when and why) and the questions
    it left for a person (``history``: the run's, from the store); an agent task's model
    calls (``calls``, recorded outside a solve; ``verbose``: what each wrote)."""
    from ..plan import ToolTask
    from ..text import as_text, did_you_mean, printable
    from .render import print_json

    planned = {t.id: t for t in record.plan.tasks}
    if task_id not in planned:
        raise ConfigError(
            f"run {record.run_id} has no task {task_id!r}{did_you_mean(task_id, planned)} "
            f"(tasks: {', '.join(planned)})"
        )
    t, r = planned[task_id], record.tasks.get(task_id)
    asked = [a for a in history if a.task_id == task_id or a.task_id.startswith(f"{task_id}[")]
    if as_json:
        doc: dict[str, Any] = {"run_id": record.run_id}
        doc["task"] = t.model_dump(mode="json", exclude_none=True)
        doc["result"] = r.to_json_dict() if r is not None else None
        doc["approvals"] = [a.model_dump(mode="json") for a in asked]
        doc["calls"] = [c.to_json_dict() for c in calls]
        print_json(out, doc)
        return

    def line(label: str, value: str) -> None:
        out.print(f"{label}: {value}", markup=False, highlight=False)

    line("task", f"{task_id} of run {record.run_id}")
    line("tool", t.label)
    if t.when is not None:
        line("when", printable(t.when, lines=True))
    if r is None:
        line("status", "unrecorded (the run did not get to it)")
        _show_approvals(asked)
        return
    ran, waited = r.run_s, r.approval_wait_s
    took = f" in {ran:.3f}s" if ran is not None and ran > 0 else ""
    if waited >= 0.001:
        took += f" ({'after ' if took else ''}{waited:.3f}s waiting for approval)"
    line("status", r.status.value + took)
    line("attempts", str(r.attempts))
    if r.worker is not None:
        line("worker", printable(r.worker))
    planned_args = t.args if isinstance(t, ToolTask) else None
    args = r.args if r.args is not None else planned_args  # the store keeps redacted arguments
    if r.elements is not None and r.args is not None:
        line("list", printable(as_text(r.args), lines=True))
    else:
        line("arguments", printable(as_text(args), lines=True))
    if r.error:
        label = "why skipped" if r.skipped_by_condition else "partial" if r.partial else "error"
        line(label, printable(r.error, lines=True))
    if r.traceback:
        out.print("traceback:", markup=False)
        out.print(printable(r.traceback, lines=True), markup=False, highlight=False)
    _show_decisions(r.decisions or ())
    _show_approvals(asked)
    if r.steps:
        _show_steps(r.steps)
    _show_calls(calls, verbose=verbose)
    if r.output is not None:
        out.print("output:", markup=False)
        out.print(printable(as_text(r.output), lines=True), markup=False, highlight=False)
    for e in r.elements or ():
        if e.steps:
            out.print(f"element {e.task_id}:", markup=False, highlight=False)
            _show_steps(e.steps, indent="  ")
        dur = e.duration_s
        took = f" in {dur:.3f}s" if dur is not None else ""
        tries = f", {e.attempts} attempt{'s' if e.attempts != 1 else ''}" if e.attempts else ""
        line(f"element {e.task_id}", f"{e.status.value}{took}{tries}")
        if e.args is not None:
            line("  arguments", printable(as_text(e.args), lines=True))
        if e.error:
            label = "  why skipped" if e.skipped_by_condition else "  error"
            line(label, printable(e.error, lines=True))
        _show_decisions(e.decisions or (), indent="  ")
        if e.output is not None:
            line("  output", printable(as_text(e.output), lines=True))


#: How each kind of decision reads in 'show --task'.
_DECIDED = {
    "allow": "allowed",
    "deny": "denied",
    "edit": "allowed with edited arguments",
    "wait": "left for a person's decision",
    "unanswered": "unanswered (the run stopped first)",
    "redact": "arguments redacted",
}


def _show_decisions(decisions: Sequence[CallDecision], indent: str = "") -> None:
    """The decisions taken about a task's calls, in order: when, which call, what was
    decided, by whom, under which rule, why (untrusted text escaped)."""
    from ..text import as_text, printable

    if not decisions:
        return
    say = functools.partial(out.print, markup=False, highlight=False)
    say(f"{indent}decisions:")
    for d in decisions:
        what = _DECIDED.get(d.decision, d.decision)
        by = "" if d.decision in ("wait", "unanswered") else f" by {d.decided_by}"
        rule = f" ({d.rule})" if d.rule and d.rule != d.decided_by else ""
        whose = " (a call its agent made)" if d.source == "agent" else ""
        say(printable(f"{indent}  {_when(d.at)} {d.tool}{whose}: {what}{by}{rule}", lines=True))
        if d.reason:
            say(printable(f"{indent}    why: {d.reason}", lines=True))
        if d.decision in ("edit", "redact") and d.args is not None:
            say(printable(f"{indent}    arguments then: {as_text(d.args)}", lines=True))


#: What became of a question to a person, as 'show --task' says it.
_ASKED = {
    "waiting": "waiting for a decision",
    "decided": "decided; the next resume uses it",
    "used": "decided, and used",
    "closed": "closed",
}


def _show_approvals(asked: Sequence[ApprovalRecord]) -> None:
    """The questions a task's calls left for a person, and what became of each: who decided,
    when, why, and whether a resume used the decision."""
    from ..text import printable

    if not asked:
        return
    say = functools.partial(out.print, markup=False, highlight=False)
    say("asked a person:")
    for a in asked:
        task = f" {a.task_id}" if "[" in a.task_id else ""
        rule = f" ({a.rule})" if a.rule else ""
        state = _ASKED.get(a.state, a.state)
        say(printable(f"  {_when(a.asked_at)}{task} {a.tool}{rule}: {state}", lines=True))
        if a.decision is not None:
            said = f"    {a.decision} by {a.decided_by or 'someone'} at {_when(a.decided_at)}"
            say(printable(said, lines=True))
        if a.reason:
            say(printable(f"    why: {a.reason}", lines=True))
        if a.note:
            say(printable(f"    {a.note}", lines=True))
        elif a.used_at is not None:
            say(f"    used by the resume at {_when(a.used_at)}")


def _show_steps(steps: list[AgentStep], indent: str = "") -> None:
    """An agent's steps in full, one model turn after another: its thought, each tool call it
    made and what it saw, its answer, or why a reply could not be used (untrusted text:
    control characters escaped, no markup)."""
    from ..text import as_text, printable

    def say(text: str) -> None:
        out.print(printable(text, lines=True), markup=False, highlight=False)

    n = len(steps)
    say(f"{indent}agent steps ({n} model turn{'s' if n != 1 else ''}):")
    for s in steps:
        tokens = f" ({s.usage.total_tokens} tokens)" if s.usage.total_tokens else ""
        say(f"{indent}  step {s.step}{tokens}")
        if s.thought:
            say(f"{indent}    thought: {s.thought}")
        for c in s.calls:
            say(f"{indent}    calls {c.tool}({as_text(c.args)})")
            if c.observation is None:
                say(f"{indent}      not called: the run stopped first")
            else:
                what = "error" if c.is_error else "saw"
                say(f"{indent}      {what}: {c.observation}")
        if s.answer is not None:
            say(f"{indent}    answer: {s.answer}")
        if s.error:
            say(f"{indent}    unusable reply: {s.error}")


def _turn_json(turn: tuple[str, int, str] | None) -> dict[str, Any] | None:
    """``--json``'s ``"session"`` of a solve: the session turn it belongs to, or ``None``."""
    if turn is None:
        return None
    return {"name": turn[0], "turn": turn[1], "solve_id": turn[2]}


def _show_solve(solve: SolveRecord, run_id: str, turn: tuple[str, int, str] | None = None) -> None:
    """The round this run was (and the session turn its solve belongs to, ``turn``), the
    joiner's decision about it and, for the run the answer came from, the answer in full
    (untrusted text: control characters escaped, no markup)."""
    from ..text import as_text, printable

    rnd = solve.round_of(run_id)
    where = (
        f"round {rnd.round} of solve {solve.solve_id}"
        if rnd is not None
        else f"solve {solve.solve_id}"
    )
    if turn is not None:
        where += f", turn {turn[1]} of session {turn[0]}"
    out.print(printable(f"{where} ({solve.status})"), markup=False, highlight=False)
    calls = solve.calls_of(rnd.round) if rnd is not None else []
    if calls:
        from ..llm import Usage

        used = sum((c.usage for c in calls), Usage())
        out.print(
            f"model calls of the round: {used.summary()} (each one: dagagent show "
            f"{solve.solve_id})",
            markup=False,
            highlight=False,
        )
    decision = rnd.decision if rnd is not None else None
    if rnd is not None and decision is not None and decision.get("action") == "replan":
        feedback = printable(str(decision.get("feedback", "")), lines=True)
        out.print(f"the joiner asked for another plan: {feedback}", markup=False)
    elif rnd is not None and rnd.outcome in ("gave_up", "failed", "paused"):
        out.print(
            f"{rnd.outcome}: {printable(rnd.reason, lines=True)}", markup=False, highlight=False
        )
    if solve.run_id == run_id and solve.status == "answered":
        cites = ", ".join(solve.cites) or "no task"
        out.print(f"answer (cites {cites}):", markup=False, highlight=False)
        out.print(printable(as_text(solve.answer), lines=True), markup=False, highlight=False)
    for text in _children_lines(solve, run_id):
        out.print(printable(text), markup=False, highlight=False)
    if rnd is not None and rnd.outcome == "paused" and solve.status == "paused":
        out.print(
            f"once decided, 'dagagent resume {run_id}' continues the solve",
            markup=False,
            highlight=False,
        )


def _show_solve_record(
    solve: SolveRecord, *, verbose: bool = False, turn: tuple[str, int, str] | None = None
) -> None:
    """A solve: the session turn it belongs to (``turn``: session, number, the turn's solve),
    how it ended, its rounds, every model call (role, model, time to the first token,
    duration, tokens, cost, how it ended) and the answer; ``verbose``: what each call wrote,
    in full (as the store keeps it: redacted, bounded). Untrusted text is escaped."""
    from ..text import as_text, printable, shorten

    def line(text: str) -> None:
        out.print(printable(text), markup=False, highlight=False)

    head = Text(f"solve {solve.solve_id}: ")
    head.append(solve.status.value, style=_style(solve.status.value))
    n = len(solve.rounds)
    head.append(f" ({n} round{'s' if n != 1 else ''})")
    out.print(head)
    line(f"goal: {solve.goal}")
    if turn is not None:
        name, number, own = turn
        within = "" if own == solve.solve_id else f", under its solve {own}"
        line(f"turn {number} of session {name}{within} (dagagent sessions {name})")
    if solve.parent is not None:
        line(
            f"a sub-solve (depth {solve.depth}) of {solve.parent.describe()} "
            f"(dagagent show {solve.parent.solve_id})"
        )
    took = f"; {solve.finished_at - solve.created:.1f} s" if solve.finished_at is not None else ""
    servers = sorted({c.server for c in solve.calls if c.server})
    models = ", ".join(solve.models) or "-"
    at = f" at {', '.join(servers)}" if servers else ""
    line(f"started {_when(solve.created)}{took}; model {models}{at}")
    if solve.reason and solve.status.value != "answered":
        line(f"why: {solve.reason}")
    spent = solve.spent
    by_role = ", ".join(f"{role} {u.calls}" for role, u in solve.spent_by_role().items())
    line(f"model calls: {spent.summary()}" + (f" ({by_role})" if by_role else ""))
    below = (solve.usage or {}).get("sub_solves")
    if below is not None and below.calls:
        line(f"and its sub-solves': {below.summary()} (each sub-solve's: dagagent show ID)")
    if solve.calls:
        out.print(_calls_table(solve.calls))
        if any(c.estimated for c in solve.calls):
            out.print("~ estimated: the provider did not report the tokens", style="dim")
    for r in solve.rounds:
        what: str = r.outcome
        decision = r.decision or {}
        if decision.get("action") == "replan":
            what += f": {shorten(str(decision.get('feedback', '')), 200)}"
        elif r.reason and r.outcome not in ("answered", "replan"):
            what += f": {shorten(r.reason, 200)}"
        line(f"round {r.round} (run {r.run_id or '-'}): {what}")
        if r.run_id is not None:
            for text in _children_lines(solve, r.run_id, indent="  "):
                line(text)
    for text in _selection_lines(solve.calls, verbose=verbose):
        line(text)
    for c in solve.calls:
        if c.issues:
            line(f"call {c.seq} ({c.role}, round {c.round}) was rejected:")
            for issue in c.issues:
                line(f"  {issue}")
        if c.error and c.status != "answered":
            line(f"call {c.seq} ({c.role}, round {c.round}) {c.status}: {c.error}")
        if verbose:
            line(f"call {c.seq} ({c.role}, round {c.round}) wrote:")
            out.print(printable(c.text, lines=True), markup=False, highlight=False)
            if c.cut_chars:
                line(f"... {c.cut_chars:,} more characters not kept")
    if solve.status.value == "answered":
        cites = ", ".join(solve.cites) or "no task"
        line(f"answer (cites {cites}, in run {solve.run_id}):")
        out.print(printable(as_text(solve.answer), lines=True), markup=False, highlight=False)
    if not verbose and solve.calls:
        line("(-v prints what each model call wrote)")


def _children_lines(solve: SolveRecord, run_id: str, *, indent: str = "") -> list[str]:
    """The sub-solves the tasks of run ``run_id`` started, under each task: one line each,
    with its element, id, status and answer (or why it has none)."""
    from ..text import as_text, shorten

    lines: list[str] = []
    tasks = list(dict.fromkeys(c.link.task_id for c in solve.children if c.link.run_id == run_id))
    for task_id in tasks:
        children = solve.children_of(run_id, task_id)
        lines.append(
            f"{indent}task {task_id}: {len(children)} sub-solve{'s' if len(children) != 1 else ''}"
            " (dagagent show ID)"
        )
        for c in children:
            element = f"[{c.link.element}] " if c.link.element is not None else ""
            if c.status.value == "answered":
                said = shorten(as_text(c.answer), 120)
            else:
                said = shorten(c.reason, 160)
            lines.append(f"{indent}  {element}{c.solve_id} {c.status.value}: {said}")
    return lines


def _calls_table(calls: Sequence[ModelCall]) -> Table:
    """One row per model call: its place, round, role (and task), how it ended, time to the
    first token, duration, tokens in and out (``~``: estimated) and cost."""
    from ..llm.usage import format_cost
    from ..text import printable

    rounds = any(c.round is not None for c in calls)  # a solve's: outside one, none has
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    left = ("who", "status")
    for name in ("#", *(("rnd",) if rounds else ()), *left, "1st tok", "time", "in", "out", "cost"):
        table.add_column(name, justify="left" if name in left else "right", no_wrap=True)
    for c in calls:
        status = c.status + (" (rejected)" if c.issues else "")
        if c.finish_reason not in (None, "stop", "tool_calls"):
            status += f" ({printable(c.finish_reason or '')})"
        est = "~" if c.estimated else ""
        table.add_row(
            str(c.seq),
            *((str(c.round) if c.round is not None else "-",) if rounds else ()),
            Text(f"{c.role} {printable(c.task_id)}" if c.task_id else c.role),
            Text(status, style="red" if c.status in ("failed", "refused") else ""),
            f"{c.first_token_s:.2f}s" if c.first_token_s is not None else "-",
            f"{c.duration_s:.2f}s" if c.duration_s is not None else "-",
            f"{est}{c.input_tokens:,}",
            f"{est}{c.output_tokens:,}",
            format_cost(c.cost_usd) if c.cost_usd is not None else "-",
        )
    return table


def _selection_lines(calls: Sequence[ModelCall], *, verbose: bool) -> list[str]:
    """For each call that was shown a part of a large registry (``tool_selection``): how
    many tools of how many, chosen how, and which (each with its score and, if it was not
    ranked in, why it is there: named in the goal, kept from the plan, skills; those first,
    then the ranked ones, best first). A call shown
    the same tools as the one before says so in one line. Without ``verbose``, the first
    twelve tools only."""
    lines: list[str] = []
    last: tuple[str, Any] | None = None
    for c in calls:
        sel = c.options.get("tool_selection")
        if not isinstance(sel, dict) or not isinstance(sel.get("shown"), list):
            continue
        who = f"{c.role} {c.task_id}" if c.task_id else c.role
        if last is not None and last[1] == sel:
            lines.append(f"call {c.seq} ({who}) was shown the same tools as call {last[0]}")
            continue
        last = (str(c.seq), sel)
        shown = [t for t in sel["shown"] if isinstance(t, dict)]
        # those there whatever their rank first, then the ranked, best first
        shown.sort(
            key=lambda t: (
                t.get("why") == "ranked",
                -(t["score"] if isinstance(t.get("score"), (int, float)) else 0.0),
            )
        )
        how = "embedding similarity" if sel.get("method") == "embedding" else "BM25"
        head = (
            f"call {c.seq} ({who}) was shown {len(shown)} of {sel.get('total', '?')} tools "
            f"(more than {sel.get('threshold', '?')}: the {sel.get('limit', '?')} best by {how}"
            ", and those the goal names"
            + (", the plan uses" if c.role == "replanner" else "")
            + ")"
        )
        lines.append(head + (f"; {sel['note']}" if sel.get("note") else "") + ":")
        parts = []
        for t in shown:
            score = t.get("score")
            text = str(t.get("name", "?"))
            if isinstance(score, (int, float)):
                text += f" {score:.2f}"
            if t.get("why") not in (None, "ranked"):
                text += f" ({t['why']})"
            parts.append(text)
        more = len(parts) - 12
        if not verbose and more > 0:
            parts = [*parts[:12], f"... {more} more (-v lists them)"]
        lines.append("  " + ", ".join(parts))
    return lines


def _spent(calls: Sequence[ModelCall]) -> Usage:
    from ..llm import Usage

    return sum((c.usage for c in calls), Usage())


def _show_calls(calls: Sequence[ModelCall], *, verbose: bool, head: str = "model calls") -> None:
    """The model calls of a run, or of a task, outside a solve: what they used (by role),
    one row each, each rejected attempt's issues and, ``verbose``, what each call wrote (as
    the store keeps it: redacted, bounded). Untrusted text is escaped."""
    from ..text import printable

    if not calls:
        return

    def line(text: str) -> None:
        out.print(printable(text), markup=False, highlight=False)

    roles: dict[str, int] = {}
    for c in calls:
        roles[c.role] = roles.get(c.role, 0) + 1
    models = ", ".join(dict.fromkeys(c.model for c in calls if c.model)) or "-"
    servers = sorted({c.server for c in calls if c.server})
    at = f" at {', '.join(servers)}" if servers else ""
    by_role = ", ".join(f"{role} {n}" for role, n in roles.items())
    line(f"{head}: {_spent(calls).summary()} ({by_role}); model {models}{at}")
    out.print(_calls_table(calls))
    if any(c.estimated for c in calls):
        out.print("~ estimated: the provider did not report the tokens", style="dim")
    for text in _selection_lines(calls, verbose=verbose):
        line(text)
    for c in calls:
        who = f"{c.role} {c.task_id}" if c.task_id else c.role
        if c.issues:
            line(f"call {c.seq} ({who}) was rejected:")
            for issue in c.issues:
                line(f"  {issue}")
        if c.error and c.status != "answered":
            line(f"call {c.seq} ({who}) {c.status}: {c.error}")
        if verbose:
            line(f"call {c.seq} ({who}) wrote:")
            out.print(printable(c.text, lines=True), markup=False, highlight=False)
            if c.cut_chars:
                line(f"... {c.cut_chars:,} more characters not kept")
    if not verbose:
        line("(-v prints what each model call wrote)")


def _show_unrun(found: UnrunCalls, *, as_json: bool, verbose: bool) -> None:
    """The model calls of a plan that was not run (see :class:`UnrunCalls`)."""
    from .render import print_json

    calls = found.calls
    if as_json:
        print_json(
            out,
            {
                "run_id": found.run_id,
                "run": None,
                "replan_of": found.replan_of,
                "calls": [c.to_json_dict() for c in calls],
                "spent": _spent(calls).to_json_dict(),
            },
        )
        return
    started = min(c.started_at for c in calls)
    if found.replan_of is not None:
        what = f"the model calls that revised the plan of run {found.replan_of}"
    else:
        what = "the model calls that planned it"
    out.print(
        f"{found.run_id}: not run ({what}; no run has this id)", markup=False, highlight=False
    )
    if found.replan_of is not None:
        out.print(
            f"the run it revised: dagagent show {found.replan_of}", markup=False, highlight=False
        )
    out.print(f"started {_when(started)}", markup=False, highlight=False)
    _show_calls(calls, verbose=verbose)


# ---------------------------------------------------------------------------------------------
# graph


@app.command("graph")
@guard
def graph_cmd(
    target: str | None = typer.Argument(
        None, metavar="PLAN_OR_RUN", help="A plan file, or a run id (statuses are shown)."
    ),
    last: LastOpt = False,
    fmt: str = typer.Option(
        "ascii", "--format", "-f", metavar="FORMAT", help=f"One of: {', '.join(FORMATS)}."
    ),
    store: StoreOpt = None,
    tools: ToolsOpt = None,
    mcp: McpOpt = None,
) -> None:
    """Draw a plan's graph (a plan file), or a recorded run's graph marked by task status.
    With --tools or --mcp, a plan file is checked against those tools as 'validate' does
    (a run's graph is drawn from its record)."""
    from ..graph import validate

    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    statuses: dict[str, str] | None = None
    elements: dict[str, list[str]] | None = None
    if target is not None and not last and _is_plan_path(target):
        registry = None
        if tools or mcp:
            from .tools import load_tools

            registry = load_tools(tools, mcp)
        graph = validate(Path(target), registry)
    else:
        with open_store(store) as st:
            record = find_run(st, target, last)
        graph = _graph_of(record.plan)
        statuses = {t: r.status.value for t, r in record.tasks.items()}
        elements = {
            t: [e.status.value for e in r.elements]
            for t, r in record.tasks.items()
            if r.elements is not None
        }
    out.print(render_graph(graph, fmt, statuses, elements), markup=False, highlight=False)


def _is_plan_path(target: str) -> bool:
    """A file that exists, or anything that cannot be a run id (reported as a missing plan)."""
    from ..store import check_run_id

    if Path(target).is_file():
        return True
    try:
        check_run_id(target)
    except Exception:
        return True
    return False
