"""``dagagent validate`` and ``dagagent run``."""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ..limits import DEFAULT_MAX_ELEMENTS
from ..tools import DEFAULT_THRESHOLD
from ._app import EXIT_FAILED, EXIT_OK, EXIT_PAUSED, EXIT_RECORD, app, err, guard, out
from .options import (
    ApproveOpt,
    AskOpt,
    BaseUrlOpt,
    DaskAddressOpt,
    DaskThreadsOpt,
    DaskWorkersOpt,
    ExecutorOpt,
    MaxConcurrencyOpt,
    MaxElementsOpt,
    MaxToolsOpt,
    McpOpt,
    ModelChoice,
    ModelOpt,
    NoWaitOpt,
    OnFailureOpt,
    OtelOpt,
    PayloadStoreOpt,
    PlanArg,
    PolicyOpt,
    RunOptions,
    SkillsOpt,
    StoreOpt,
    StreamTimeoutOpt,
    TaskQueueOpt,
    TemporalAddressOpt,
    TemporalApiKeyOpt,
    TemporalNamespaceOpt,
    TemporalTlsCaOpt,
    TemporalTlsCertOpt,
    TemporalTlsKeyOpt,
    TemporalTlsOpt,
    ToolsOpt,
)
from .otel import configure_otel
from .tools import load_tools

if TYPE_CHECKING:
    from rich.console import Console

    from ..graph import PlanGraph
    from ..results import RunResult
    from ..workflows._calls import SolveCalls

__all__ = [
    "agent_calls",
    "agent_model",
    "paused_hint",
    "print_result",
    "run_exit_code",
    "run_graph",
]


@app.command("validate")
@guard
def validate_cmd(
    plan: PlanArg,
    tools: ToolsOpt = None,
    mcp: McpOpt = None,
    skills: SkillsOpt = None,
    json_out: bool = typer.Option(False, "--json", help="Print the levels as JSON."),
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        metavar="SPEC",
        help="The model agent tasks would use (only checked for presence; nothing is sent). "
        "Default: $DAGAGENT_MODEL.",
    ),
    sub_solves: bool = typer.Option(
        False,
        "--sub-solves",
        help="Check the plan as a plan of a solve given sub-solves (dagagent ask --sub-solves), "
        'which may hold tasks with "solve": true; without it, as dagagent run runs it, where '
        "such a task is an issue.",
    ),
) -> None:
    """Check a plan (graph, tools, arguments) and report every issue at once."""
    from ..graph import validate
    from .render import plan_table, print_json, print_warnings

    registry = load_tools(tools, mcp, skills)
    graph = validate(
        plan,
        registry,
        check_llm=not ModelChoice(model).configured,
        solve_depth=0 if sub_solves else None,
    )
    if json_out:
        print_json(
            out,
            {
                "valid": True,
                "tasks": len(graph),
                "levels": graph.levels,
                "warnings": [list(w) for w in graph.warnings],
            },
        )
        return
    out.print(plan_table(graph))
    print_warnings(err, graph.warnings)
    n, k = len(graph), len(graph.levels)
    out.print(
        f"valid: {n} task{'s' if n != 1 else ''} in {k} level{'s' if k != 1 else ''}",
        markup=False,
    )


#: At most this many final tasks have their output printed in full after a run.
MAX_FINAL_OUTPUTS = 3


def final_tasks(graph: PlanGraph) -> list[str]:
    """The tasks nothing depends on, in plan order: what a run produces."""
    dependents = graph.dependents
    return [t.id for t in graph.plan.tasks if not dependents[t.id]]


def print_result(
    result: RunResult,
    *,
    as_json: bool,
    graph: PlanGraph | None = None,
    startup_s: float | None = None,
) -> int:
    """Print a run's result: its table (cells cut to the terminal's width), the output of its
    final tasks in full (``graph``: the plan that ran), then one summary line. ``startup_s``:
    how long the run waited for its executor to get ready (a Dask cluster), which the run's
    own time leaves out; ``--json`` gives it as ``executor_startup_s``."""
    from ..text import as_text, printable
    from .render import path_text, print_json, result_table

    if as_json:
        doc = result.to_json_dict()
        if startup_s is not None:
            doc["executor_startup_s"] = startup_s
        print_json(out, doc)
    else:
        out.print(result_table(result, width=out.width))
        finals = [
            tid
            for tid in (final_tasks(graph) if graph is not None else ())
            if tid in result.tasks and result.tasks[tid].ok and result.tasks[tid].output is not None
        ]
        for tid in finals[:MAX_FINAL_OUTPUTS]:
            out.print(f"output of {tid}:", markup=False, highlight=False)
            out.print(
                printable(as_text(result.tasks[tid].output), lines=True),
                markup=False,
                highlight=False,
            )
        if len(finals) > MAX_FINAL_OUTPUTS:
            out.print(
                f"({len(finals) - MAX_FINAL_OUTPUTS} more final tasks: "
                "dagagent show --last --task ID)",
                markup=False,
                highlight=False,
            )
        counts = ", ".join(f"{n} {s}" for s, n in sorted(result.counts.items()))
        out.print(
            f"{result.status.value} in {result.wall_time_s:.3f}s ({counts}); "
            f"critical path {result.critical_path_s:.3f}s: {path_text(result.critical_path)}",
            markup=False,
            highlight=False,
        )
    return run_exit_code(result)


def run_exit_code(result: RunResult) -> int:
    """0 the run succeeded, 6 it paused (tasks wait for a person's decision; the next steps
    are printed on stderr), 1 otherwise."""
    from ..results import RunStatus

    if result.ok:
        return EXIT_OK
    if result.status is RunStatus.PAUSED:
        paused_hint(result)
        return EXIT_PAUSED
    return EXIT_FAILED


def paused_hint(result: RunResult, *, console: Console | None = None) -> None:
    """What a paused run waits for, and the commands that continue it (on ``console``,
    default stderr)."""
    from ..text import printable

    waiting = result.waiting()
    n = len(waiting)
    names = ", ".join(printable(r.task_id) for r in waiting[:10]) + (", ..." if n > 10 else "")
    run = result.run_id
    if not n:  # a resume stopped before its run went on (refused, or cut off): it held it
        for line in (
            "paused: no task waits for a person's decision; a resume of it stopped before "
            "anything ran",
            f"  continue: dagagent resume {run} (it says again what it needs, if anything)",
        ):
            (console or err).print(line, markup=False, highlight=False)
        return
    for line in (
        f"paused: {n} task{'s' if n != 1 else ''} wait{'s' if n == 1 else ''} for a person's "
        f"decision ({names}); nothing else could run",
        f"  see them:      dagagent approvals --run {run}",
        f"  decide:        dagagent approve {run} TASK --allow | --deny [--reason TEXT] "
        "[--edit ARGS.json]",
        f"  then continue: dagagent resume {run}",
    ):
        (console or err).print(line, markup=False, highlight=False)


def run_graph(
    graph: PlanGraph,
    registry: Any,
    options: RunOptions,
    *,
    as_json: bool,
    llm: Any = None,
    calls: SolveCalls | None = None,
    model: ModelChoice | None = None,
) -> int:
    """What ``run`` and ``plan --execute`` do with a validated plan: confirm it and set up
    approval as the options say, run it recorded in the run store with progress (none with
    ``as_json``), print the result; return the exit code. The agent tasks' model calls (of
    ``llm``) are recorded with the run and their task: by ``calls`` (``plan --execute``'s,
    whose ``run_id`` is the run's, with the planner's calls already in it), else by a
    recorder of the run's own. The run's record keeps the model (``model``, the choice that
    made ``llm``) and ``--max-tools``, which ``resume`` gives its agent tasks again."""
    from .approve import rules_to_workers
    from .recording import run_recorded, say_recorded

    execute_options = options.execute_options()
    agents: dict[str, Any] = {}
    if llm is not None and model is not None:
        agents.update(model.to_record(llm))  # never a key: see ModelChoice.to_record
    if options.max_tools != DEFAULT_THRESHOLD:
        agents["max_tools"] = options.max_tools
    interceptors = rules_to_workers(
        execute_options["settings"].executor,
        options.rules,
        options.interceptors(graph, registry),
        no_wait=options.no_wait,
    )
    with agent_calls(llm, options.store, calls, interceptors) as (metered, run_id):
        result = run_recorded(
            graph,
            registry,
            console=None if as_json else out,
            store=options.store,
            run_id=run_id,
            live=options.live,  # questions on the terminal: no live display over them
            interceptors=interceptors,
            llm=metered,
            agents=agents,
            **execute_options,
        )
    startup = getattr(execute_options["settings"].executor, "startup_s", None)
    code = print_result(result, as_json=as_json, graph=graph, startup_s=startup)
    if startup is not None and not as_json:
        # the run's own time leaves out the cluster's start: say both
        err.print(
            f"Dask took {startup:.1f}s to start and receive the tools, the run "
            f"{result.wall_time_s:.1f}s: {startup + result.wall_time_s:.1f}s in all",
            markup=False,
            highlight=False,
        )
    if not say_recorded(result, options.store, quiet=as_json):
        return EXIT_RECORD
    raised = [r.task_id for r in result.tasks.values() if r.traceback]
    if raised and not as_json:
        where = f" --store {shlex.quote(str(options.store))}" if options.store else ""
        err.print(
            f"where the tool of task {raised[0]} failed: "
            f"dagagent show {result.run_id} --task {shlex.quote(raised[0])}{where}",
            markup=False,
            highlight=False,
        )
    return code


@contextlib.contextmanager
def agent_calls(
    llm: Any,
    store: str | Path | None,
    calls: SolveCalls | None,
    interceptors: Sequence[Any] = (),
) -> Iterator[tuple[Any, str | None]]:
    """``(llm, run id)`` for a run whose agent tasks' model calls are recorded: ``llm``
    wrapped so that each call is a record of the run and its task (see
    :func:`dagagent.workflows.run_calls`), and the id the run is to have. ``calls``: the
    recorder to use (its ``run_id`` is the run's); without one, a new one (closed on the
    way out, so every record is written). Without ``llm``: ``(None, calls.run_id)``."""
    from ..llm import MeteredLLM

    if llm is None:
        yield None, calls.run_id if calls is not None else None
        return
    own: SolveCalls | None = None
    opened: Any = None
    if calls is not None and interceptors:
        from ..runner._redaction import Redaction

        # what the agents write is redacted as the run's redacting interceptors say (known
        # only now: the plan's calls were made before the run's interceptors)
        calls.redaction = Redaction(interceptors)
    if calls is None:
        from ..run import new_run_id
        from ..store import RunStore
        from ..workflows._calls import run_calls

        opened = RunStore(store)
        calls = own = run_calls(opened, new_run_id(), interceptors=interceptors)
    try:
        yield MeteredLLM(llm, observer=calls.observer("agent")), calls.run_id
    finally:
        if own is not None:
            lost = own.close()
            if lost is not None:
                err.print(f"error: not recorded: {lost}", markup=False, highlight=False)
        if opened is not None:
            opened.close()


def agent_model(
    model: str | None, base_url: str | None, stream_timeout: float | None = None
) -> Any:
    """The model for agent tasks: ``--model``, else ``$DAGAGENT_MODEL``, else none
    (``stream_timeout``: ``--stream-timeout``)."""
    return ModelChoice(model, base_url, stream_timeout=stream_timeout).client_if_named()


@app.command("run")
@guard
def run_cmd(
    ctx: typer.Context,
    plan: PlanArg,
    tools: ToolsOpt = None,
    mcp: McpOpt = None,
    skills: SkillsOpt = None,
    max_tools: MaxToolsOpt = DEFAULT_THRESHOLD,
    executor: ExecutorOpt = "dataflow",
    on_failure: OnFailureOpt = "cancel",
    max_concurrency: MaxConcurrencyOpt = None,
    max_elements: MaxElementsOpt = DEFAULT_MAX_ELEMENTS,
    json_out: bool = typer.Option(False, "--json", help="Print only the result, as JSON."),
    approve: ApproveOpt = False,
    ask: AskOpt = None,
    policy_file: PolicyOpt = None,
    store: StoreOpt = None,
    no_wait: NoWaitOpt = False,
    dask_address: DaskAddressOpt = None,
    dask_workers: DaskWorkersOpt = None,
    dask_threads: DaskThreadsOpt = None,
    temporal_address: TemporalAddressOpt = None,
    task_queue: TaskQueueOpt = None,
    temporal_namespace: TemporalNamespaceOpt = None,
    payload_store: PayloadStoreOpt = None,
    temporal_api_key: TemporalApiKeyOpt = None,
    temporal_tls: TemporalTlsOpt = None,
    temporal_tls_cert: TemporalTlsCertOpt = None,
    temporal_tls_key: TemporalTlsKeyOpt = None,
    temporal_tls_ca: TemporalTlsCaOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    stream_timeout: StreamTimeoutOpt = None,
    otel: OtelOpt = False,
) -> None:
    """Validate and run a plan, recording it in the run store (review it with 'dagagent show',
    revise it with 'dagagent replan'). Exit 0 if every task succeeded, 1 if the run failed, 6
    if it paused (tasks wait for a person's decision: dagagent approvals, approve, resume)."""
    from ..graph import validate
    from .render import print_warnings

    if otel:
        configure_otel()
    options = RunOptions.of(ctx)  # --executor, --ask, --dask-*...: read from ctx
    registry = load_tools(tools, mcp, skills)
    choice = ModelChoice(model, base_url, stream_timeout=stream_timeout)
    llm = choice.client_if_named()
    graph = validate(plan, registry, llm=llm, check_llm=True, solve_depth=None)
    print_warnings(err, graph.warnings)
    raise typer.Exit(run_graph(graph, registry, options, as_json=json_out, llm=llm, model=choice))
