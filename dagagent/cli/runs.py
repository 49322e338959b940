"""``dagagent runs``, ``show``, ``graph`` and ``replan``: reviewing recorded runs and revising
failed plans. Business logic lives in :mod:`dagagent.store` and :mod:`dagagent.review`.

One concern, the commands over recorded runs: each finds a run the same way (:func:`find_run`:
``RUN`` or ``--last`` in ``--store``) and shows it with the same styles. It is longer than the
other command modules because ``replan`` shows a review, a diff and the reuse forecast in text
and JSON, then runs the revised plan; what each of those means lives in :mod:`dagagent.review`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer
from rich import box
from rich.table import Table
from rich.text import Text

from ..errors import ConfigError
from ..graph import PlanGraph, critical_path, validate
from ..plan import Plan, load_plan
from ..results import as_text
from ..review import (
    PlanDiff,
    ReuseDecision,
    RunReview,
    format_diff,
    format_review,
    review_run,
)
from ..store import RunRecord, RunStore, SolveRecord, check_run_id, default_store_path
from ..text import shorten
from ..workflows.replan import Revision, revise_run
from ._app import EXIT_FAILED, EXIT_OK, app, err, guard, load_registry, out
from .diagram import FORMATS, render_graph
from .options import (
    ExecutorOpt,
    LastOpt,
    MaxAttemptsOpt,
    MaxConcurrencyOpt,
    OnFailureOpt,
    OutOpt,
    RunArg,
    RunOptions,
    StoreOpt,
    TimeoutOpt,
    ToolsOpt,
)
from .recording import run_recorded
from .render import STATUS_STYLE, print_json, terminal_text
from .run import agent_model, print_result

__all__ = ["find_run", "make_model"]

FromOpt = Annotated[
    Path | None,
    typer.Option("--from", metavar="FILE", help="The revised plan, edited by hand (JSON)."),
]

_STYLE: dict[str, str] = {s.value: style for s, style in STATUS_STYLE.items()}
_STYLE.update({"running": "blue", "interrupted": "yellow", "unrecorded": "dim"})
_STATUS_ORDER = ("succeeded", "reused", "failed", "denied", "cancelled", "skipped")


def _when(ts: float | None, *, seconds: bool = True) -> str:
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M", time.localtime(ts))


def _counts_text(counts: dict[str, int], unrecorded: int = 0) -> Text:
    text = Text()
    parts = [(s, counts[s]) for s in _STATUS_ORDER if counts.get(s)]
    parts += [(s, n) for s, n in sorted(counts.items()) if s not in _STATUS_ORDER]
    if unrecorded:
        parts.append(("unrecorded", unrecorded))
    for i, (s, n) in enumerate(parts):
        if i:
            text.append(", ")
        text.append(f"{n} {s}", style=_STYLE.get(s, ""))
    return text


def _open_store(store: Path | None) -> RunStore:
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
    limit: int = typer.Option(20, "--limit", "-n", min=1, help="Show at most N runs."),
    store: StoreOpt = None,
    json_out: bool = typer.Option(False, "--json", help="Print the runs as JSON."),
) -> None:
    """List recorded runs, most recent first: id, when, goal, status, task counts."""
    with _open_store(store) as st:
        runs = st.list_runs(limit)
        path = st.path
    if json_out:
        # "run_id" too: the key 'show --json' and 'run --json' use for the same value.
        print_json(
            out,
            [
                {
                    "run_id": r.run_id,
                    "id": r.run_id,  # the old name, kept in the JSON output
                    **r.model_dump(mode="json"),
                    "unrecorded": r.unrecorded,
                }
                for r in runs
            ],
        )
        return
    if not runs:
        out.print(f"no runs recorded in {path}", markup=False, highlight=False)
        return
    table = Table(title=f"runs in {path}", box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("id", no_wrap=True)
    table.add_column("when", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("tasks", min_width=12)
    table.add_column("goal", min_width=12)
    for r in runs:
        goal = shorten(r.goal, 60) + (f" (replans {r.parent_id})" if r.parent_id else "")
        table.add_row(
            r.run_id,
            _when(r.created, seconds=False),
            Text(r.status.value, style=_STYLE.get(r.status.value, "")),
            _counts_text(r.counts, r.unrecorded),
            goal,
        )
    out.print(table)


# ---------------------------------------------------------------------------------------------
# show


def _graph_of(plan: Plan) -> PlanGraph:
    return validate(plan)  # the graph only: tools are not needed to draw or measure it


def _critical(record: RunRecord, graph: PlanGraph) -> tuple[float, list[str]]:
    if record.critical_path:
        return record.critical_path_s or 0.0, record.critical_path
    durations = {
        t: r.duration_s
        for t, r in record.tasks.items()
        if r.duration_s is not None and r.status.value != "reused"
    }
    return critical_path(graph.order, graph.dependencies, durations)


@app.command("show")
@guard
def show_cmd(
    run: RunArg = None,
    last: LastOpt = False,
    store: StoreOpt = None,
    json_out: bool = typer.Option(False, "--json", help="Print the record as JSON."),
) -> None:
    """Show a recorded run: each task's status, duration, attempts, output or error, and the
    critical path."""
    with _open_store(store) as st:
        record = find_run(st, run, last)
        solve = st.solve_of_run(record.run_id)
    graph = _graph_of(record.plan)
    cp_s, cp = _critical(record, graph)
    if json_out:
        doc = record.to_json_dict()
        doc["critical_path"], doc["critical_path_s"] = cp, cp_s
        doc["solve"] = solve.to_json_dict() if solve is not None else None
        print_json(out, doc)
        return
    head = Text(f"run {record.run_id}: ")
    head.append(record.status.value, style=_STYLE.get(record.status.value, ""))
    if record.parent_id:
        head.append(f" (replans run {record.parent_id})")
    out.print(head)
    if record.goal:
        out.print(f"goal: {record.goal}", markup=False, highlight=False)
    wall = f"{record.wall_time_s:.3f}s" if record.wall_time_s is not None else "-"
    tools = record.context.get("tools")
    out.print(
        f"executor {record.executor or '-'}; started {_when(record.started_at or record.created)};"
        f" wall time {wall}" + (f"; tools {tools}" if tools else ""),
        markup=False,
        highlight=False,
    )
    table = Table()
    table.add_column("id")
    table.add_column("tool")
    table.add_column("status")
    table.add_column("time", justify="right")
    table.add_column("tries", justify="right")
    table.add_column("output / error")
    for t in record.plan.tasks:
        r = record.tasks.get(t.id)
        what = t.tool if t.tool is not None else "agent"
        if r is None:
            table.add_row(t.id, what, Text("unrecorded", style="dim"), "-", "-", "")
            continue
        dur = r.duration_s
        detail = r.error if r.error else shorten(r.output, 60)
        table.add_row(
            t.id,
            what,
            Text(r.status.value, style=_STYLE.get(r.status.value, "")),
            f"{dur:.3f}s" if dur is not None else "-",
            str(r.attempts),
            Text(detail or "", style="red" if r.error and not r.status.ok else ""),
        )
    out.print(table)
    out.print("tasks: ", _counts_text(record.counts, len(record.unrecorded)), sep="")
    out.print(
        f"critical path {cp_s:.3f}s: {' -> '.join(cp) if cp else '-'}",
        markup=False,
        highlight=False,
    )
    if solve is not None:
        _show_solve(solve, record.run_id)


def _show_solve(solve: SolveRecord, run_id: str) -> None:
    """The round this run was, the joiner's decision about it and, for the run the answer
    came from, the answer in full (untrusted text: control characters escaped, no markup)."""
    rnd = solve.round_of(run_id)
    where = f"round {rnd.round} of solve {solve.id}" if rnd is not None else f"solve {solve.id}"
    out.print(f"{where} ({solve.status})", markup=False, highlight=False)
    decision = rnd.decision if rnd is not None else None
    if rnd is not None and decision is not None and decision.get("action") == "replan":
        feedback = terminal_text(str(decision.get("feedback", "")))
        out.print(f"the joiner asked for another plan: {feedback}", markup=False)
    elif rnd is not None and rnd.outcome in ("gave_up", "failed"):
        out.print(f"{rnd.outcome}: {terminal_text(rnd.reason)}", markup=False, highlight=False)
    if solve.run_id == run_id and solve.status == "answered":
        cites = ", ".join(solve.cites) or "no task"
        out.print(f"answer (cites {cites}):", markup=False, highlight=False)
        out.print(terminal_text(as_text(solve.answer)), markup=False, highlight=False)


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
) -> None:
    """Draw a plan's graph (a plan file), or a recorded run's graph marked by task status."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    statuses: dict[str, str] | None = None
    if target is not None and not last and _is_plan_path(target):
        graph = validate(Path(target))
    else:
        with _open_store(store) as st:
            record = find_run(st, target, last)
        graph = _graph_of(record.plan)
        statuses = {t: r.status.value for t, r in record.tasks.items()}
    out.print(render_graph(graph, fmt, statuses), markup=False, highlight=False)


def _is_plan_path(target: str) -> bool:
    """A file that exists, or anything that cannot be a run id (reported as a missing plan)."""
    if Path(target).is_file():
        return True
    try:
        check_run_id(target)
    except Exception:
        return True
    return False


# ---------------------------------------------------------------------------------------------
# replan


def _print_reuse(decisions: dict[str, ReuseDecision]) -> None:
    groups: dict[str, list[str]] = {"reuse": [], "maybe": [], "run": []}
    for d in decisions.values():
        groups[d.action].append(d.task_id if d.action == "reuse" else f"{d.task_id} ({d.reason})")
    if groups["reuse"]:
        out.print(f"will reuse: {', '.join(groups['reuse'])}", markup=False, highlight=False)
    if groups["maybe"]:
        out.print(
            "reused if their inputs come out the same: " + "; ".join(groups["maybe"]),
            markup=False,
            highlight=False,
        )
    if groups["run"]:
        out.print(f"will run: {'; '.join(groups['run'])}", markup=False, highlight=False)


def make_model(model: str, base_url: str | None, *, timeout: float = 60.0) -> Any:
    """The model client for ``--model`` (a seam: tests put a scripted model here)."""
    from ..llm import from_env

    return from_env(model, base_url, timeout=timeout)


def _revise(
    record: RunRecord,
    registry: Any,
    *,
    plan: Plan | None,
    llm: Any,
    agent_llm: Any,
    max_attempts: int,
    quiet: bool,
) -> Revision:
    """The replan workflow's revision step (:func:`dagagent.workflows.revise_run`)."""
    from ..planners import LLMReplanner

    replanner = LLMReplanner(llm, registry, max_attempts=max_attempts) if llm is not None else None

    async def main() -> Revision:
        if llm is None:
            return await revise_run(record, registry, plan=plan, agent_llm=agent_llm)
        async with llm:
            return await revise_run(record, registry, replanner=replanner, agent_llm=agent_llm)

    # an LLMError is reported by guard: "the model could not be used"
    revision = anyio.run(main)
    if revision.planning is not None and not quiet:
        err.print(
            f"revised by {getattr(llm, 'model', 'the model')}: {revision.planning.summary()}",
            markup=False,
            highlight=False,
        )
        for w in revision.planning.warnings:
            err.print(f"warning: {w}", markup=False, highlight=False)
    return revision


@app.command("replan")
@guard
def replan_cmd(
    run: RunArg = None,
    last: LastOpt = False,
    from_file: FromOpt = None,
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        metavar="SPEC",
        help="Ask this model for a revised plan: openai:MODEL (OpenAI or any "
        "OpenAI-compatible server) or anthropic:MODEL. Keys come from the environment.",
    ),
    base_url: str | None = typer.Option(
        None,
        "--base-url",
        metavar="URL",
        help="Server for --model, e.g. http://localhost:11434/v1. Default: $DAGAGENT_BASE_URL.",
    ),
    max_attempts: MaxAttemptsOpt = 3,
    out_file: OutOpt = None,
    execute_it: bool = typer.Option(
        False,
        "--execute",
        "-x",
        help="Run the revised plan (without a revision: the same plan again) as a new run "
        "linked to this one, reusing every unchanged success.",
    ),
    tools: ToolsOpt = None,
    executor: ExecutorOpt = "levels",
    on_failure: OnFailureOpt = "cancel",
    max_concurrency: MaxConcurrencyOpt = None,
    store: StoreOpt = None,
    json_out: bool = typer.Option(False, "--json", help="Print everything as one JSON object."),
    timeout: TimeoutOpt = 60.0,
) -> None:
    """Review a run (what failed and why, what it blocked, what succeeded), compare it with a
    revised plan (--from FILE or --model SPEC) and optionally run that plan (--execute),
    reusing the outputs of every task whose id, tool, arguments and inputs are unchanged.
    Exit 0 after a review; with --execute, the new run's exit code (0 ok, 1 failed); 3 when
    the model gave no valid plan in --max-attempts."""
    if from_file is not None and model is not None:
        raise ConfigError("give --from FILE or --model SPEC, not both")
    if base_url is not None and model is None:
        raise ConfigError("--base-url needs --model")
    with _open_store(store) as st:
        record = find_run(st, run, last)
        path = st.path
    spec, registry = _registry_for(record, tools)
    review = review_run(record)
    if not json_out:
        out.print(format_review(review), markup=False, highlight=False)
    llm: Any = None
    edited: Plan | None = load_plan(from_file) if from_file is not None else None
    if model is not None:
        llm = make_model(model, base_url, timeout=timeout)
    agent_llm = llm
    if llm is None and execute_it and any(t.is_agent for t in (edited or record.plan).tasks):
        agent_llm = agent_model(None, None)  # $DAGAGENT_MODEL, as for 'dagagent run'
    revision: Revision | None = None
    if edited is not None or llm is not None or execute_it:
        revision = _revise(
            record,
            registry,
            plan=edited,
            llm=llm,
            agent_llm=agent_llm,
            max_attempts=max_attempts,
            quiet=json_out,
        )
    plan = revision.plan if revision is not None else record.plan
    diff: PlanDiff | None = revision.diff if revision is not None else None
    decisions: dict[str, ReuseDecision] | None = revision.reuse if revision is not None else None
    if diff is not None and revision is not None and not json_out:
        out.print("")
        out.print(f"changes to the plan of run {record.run_id}:", markup=False, highlight=False)
        out.print(format_diff(diff, record.plan, revision.plan), markup=False, highlight=False)
    if decisions is not None and not json_out:
        _print_reuse(decisions)
    if out_file is not None:
        _write_plan(out_file, plan)
        if not json_out:
            if diff is not None:
                err.print(f"wrote the revised plan to {out_file}", markup=False)
            else:
                err.print(
                    f"wrote the plan of run {record.run_id} to {out_file}; edit it, then: "
                    f"dagagent replan {record.run_id} --from {out_file} --execute",
                    markup=False,
                    highlight=False,
                )
    doc: dict[str, Any] = {"review": review.to_json_dict()}
    if json_out:
        doc["diff"] = diff.to_json_dict() if diff is not None else None
        doc["plan"] = plan.model_dump(mode="json", exclude_defaults=True)
        doc["reuse"] = (
            {k: {"action": d.action, "reason": d.reason} for k, d in decisions.items()}
            if decisions is not None
            else None
        )
    if not execute_it:
        if json_out:
            doc["result"] = None
            print_json(out, doc)
        elif diff is None and out_file is None:
            _hint(record, review)
        raise typer.Exit(EXIT_OK)
    assert revision is not None
    for w in revision.graph.warnings:
        err.print(f"warning: {w}", markup=False, highlight=False)
    if not json_out:
        out.print("")
        out.print(f"running it as a new run (parent {record.run_id}):", markup=False)
    options = RunOptions(
        executor=executor, on_failure=on_failure, max_concurrency=max_concurrency, store=path
    )
    result = run_recorded(
        revision.graph,
        registry,
        console=None if json_out else out,
        store=path,
        reuse=revision.reuse_map(),
        parent_id=record.run_id,
        llm=agent_llm if any(t.is_agent for t in plan.tasks) else None,
        **options.execute_options(tools_spec=spec),
    )
    if json_out:
        doc["result"] = result.to_json_dict()
        print_json(out, doc)
        raise typer.Exit(EXIT_OK if result.ok else EXIT_FAILED)
    code = print_result(result, as_json=False)
    reused = result.counts.get("reused", 0)
    err.print(
        f"recorded as run {result.run_id} (parent {record.run_id}, {reused} reused) in "
        f"{default_store_path(path)}",
        markup=False,
        highlight=False,
    )
    raise typer.Exit(code)


def _registry_for(record: RunRecord, tools: str | None) -> tuple[str | None, Any]:
    """``--tools`` if given, else the tools recorded with the run, else the default."""
    if tools is not None:
        return tools, load_registry(tools)
    recorded = record.context.get("tools")
    if not isinstance(recorded, str):
        return None, load_registry(None)
    try:
        return recorded, load_registry(recorded)
    except ConfigError as exc:
        raise ConfigError(
            f"cannot load the tools run {record.run_id} used ({recorded}): {exc}; "
            "pass --tools MODULE:ATTR"
        ) from None


def _hint(record: RunRecord, review: RunReview) -> None:
    if not (review.failed or review.blocked or review.unrecorded):
        return
    out.print("")
    out.print(
        f"to revise it: dagagent replan {record.run_id} --out plan.json, edit plan.json, then "
        f"dagagent replan {record.run_id} --from plan.json --execute",
        markup=False,
        highlight=False,
    )


def _write_plan(path: Path, plan: Plan) -> None:
    try:
        path.write_text(plan.to_json(indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the plan to {path}: {exc}") from None
