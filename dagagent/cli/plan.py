"""``dagagent plan GOAL``: ask a model for a plan, show it, save it or run it.

While the model writes, progress shows it on stderr (a live line on a terminal, a line every
few seconds otherwise); a rejected attempt is printed when it is rejected, with its issues.
``--deadline`` bounds the planning, streams included.

Exit codes: 0 planned (and, with ``--execute``, the run succeeded); 1 the run failed;
2 usage, no model configured, or the model could not be used (unreachable server, refused
key, provider error: one line on stderr); 3 no valid plan after every attempt (each
attempt's issues listed); 8 the deadline passed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ..errors import ConfigError, DeadlineError
from ..limits import DEFAULT_MAX_ELEMENTS
from ..tools import DEFAULT_THRESHOLD
from ._app import EXIT_OK, app, check_output_path, deadline_left, err, guard, out
from .options import (
    AgentTasksOpt,
    ApproveOpt,
    AskOpt,
    BaseUrlOpt,
    DaskAddressOpt,
    DaskThreadsOpt,
    DaskWorkersOpt,
    DeadlineOpt,
    ExamplesOpt,
    ExecutorOpt,
    MaxAttemptsOpt,
    MaxConcurrencyOpt,
    MaxElementsOpt,
    MaxTokensOpt,
    MaxToolsOpt,
    McpOpt,
    ModelChoice,
    ModelOpt,
    NoSchemaOpt,
    NoWaitOpt,
    OnFailureOpt,
    OtelOpt,
    OutOpt,
    PayloadStoreOpt,
    PlannerPromptOpt,
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
    TimeoutOpt,
    ToolsOpt,
    discovery_of,
    make_planner,
)
from .otel import configure_otel
from .run import run_graph
from .tools import load_tools

if TYPE_CHECKING:
    from ..llm import CallObserver, LiveCall
    from ..planners import LLMPlanner, PlanningResult
    from ..workflows._calls import SolveCalls
    from .writing import ModelProgress

__all__ = ["plan_cmd", "planning_summary"]


def planning_summary(result: PlanningResult) -> dict[str, Any]:
    """What ``--json`` prints: the plan, its levels, the planning usage and warnings."""
    return {
        "goal": result.plan.goal,
        "plan": json.loads(result.plan.to_json(indent=None)),
        "levels": result.graph.levels,
        "usage": result.usage_dict(),
        "warnings": [list(w) for w in result.warnings],
    }


class _Watching:
    """The planner's model calls, shown while they are written (an observer of them), and
    recorded by ``record`` (the observer of a :class:`~dagagent.workflows._calls.SolveCalls`)
    when given."""

    def __init__(self, progress: ModelProgress, record: CallObserver | None = None) -> None:
        self.progress = progress
        self.record = record
        self.calls: list[LiveCall] = []

    def started(self, call: LiveCall) -> None:
        if self.record is not None:
            self.record.started(call)
        self.calls.append(call)
        self.progress.started(call, "planner", None, None)

    def wrote(self, call: LiveCall) -> None:
        if self.record is not None:
            self.record.wrote(call)

    def ended(self, call: LiveCall) -> None:
        if self.record is not None:
            self.record.ended(call)
        self.progress.ended(call.id)

    def rejected(self, call: LiveCall, issues: Sequence[str]) -> None:
        if self.record is not None:
            self.record.rejected(call, issues)
        self.progress.rejected("planner", None, None, issues)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _models(llm: Any, watching: _Watching) -> str:
    """The models that answered the planner's calls, and the models a fallback gave up on."""
    answered: list[str] = []
    gave_up: list[str] = []
    for call in watching.calls:
        if call.model and call.model not in answered:
            answered.append(call.model)
        for failure in call.fallbacks:
            note = f"{failure.model} ({failure.reason.replace('_', ' ')})"
            if note not in gave_up:
                gave_up.append(note)
    text = ", ".join(answered) or str(llm.model)
    return f"{text}, falling back from {', '.join(gave_up)}" if gave_up else text


def _make_planner(
    choice: ModelChoice,
    registry: Any,
    *,
    max_attempts: int,
    agent_tasks: bool,
    structured: bool,
    prompt_file: Path | None = None,
    examples_file: Path | None = None,
    watching: _Watching | None = None,
    max_tools: int = DEFAULT_THRESHOLD,
) -> tuple[Any, LLMPlanner]:
    from ..llm import MeteredLLM

    llm = choice.client()
    planner = make_planner(
        MeteredLLM(llm, observer=watching) if watching is not None else llm,
        registry,
        settings=choice.settings(),
        prompt_file=prompt_file,
        examples_file=examples_file,
        max_attempts=max_attempts,
        agent_tasks=agent_tasks,
        structured=structured,
        discovery=discovery_of(max_tools),
    )
    return llm, planner


def _plan(
    llm: Any,
    planner: LLMPlanner,
    goal: str,
    *,
    deadline: float | None = None,
    watching: _Watching | None = None,
) -> PlanningResult:
    import anyio

    from .signals import run_stoppable

    async def main() -> PlanningResult:
        async with llm:
            with anyio.move_on_after(deadline_left(deadline)) as scope:
                return await planner.plan_with_report(goal)
        assert scope.cancelled_caught
        raise DeadlineError(_deadline_message(deadline, watching))

    return run_stoppable(main)  # an LLMError is reported by guard: "the model could not be used"


def _deadline_message(deadline: float | None, watching: _Watching | None) -> str:
    calls = watching.calls if watching is not None else []
    text = f"the deadline of {deadline:g} s passed while planning"
    if calls:
        last = calls[-1]
        n = len(calls)
        text += (
            f": the planner's call {n} of this plan was cancelled after {last.elapsed_s:.1f} s, "
            f"{last.chars:,} characters written"
        )
    return text + "; raise --deadline, or ask for a smaller plan"


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the plan to {path}: {exc.strerror or exc}") from None


@app.command("plan")
@guard
def plan_cmd(
    ctx: typer.Context,
    goal: str = typer.Argument(..., help="What the plan should achieve.", metavar="GOAL"),
    tools: ToolsOpt = None,
    mcp: McpOpt = None,
    skills: SkillsOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    out_file: OutOpt = None,
    execute: bool = typer.Option(
        False, "--execute", "-x", help="Run the plan right away, as 'dagagent run' would."
    ),
    json_out: bool = typer.Option(
        False,
        "--json",
        help="Print JSON: the plan and planning usage; with --execute, the run result "
        "(planning usage then goes to stderr).",
    ),
    max_attempts: MaxAttemptsOpt = 3,
    max_tools: MaxToolsOpt = DEFAULT_THRESHOLD,
    agent_tasks: AgentTasksOpt = False,
    no_schema: NoSchemaOpt = False,
    timeout: TimeoutOpt = 60.0,
    stream_timeout: StreamTimeoutOpt = None,
    max_tokens: MaxTokensOpt = None,
    planner_prompt: PlannerPromptOpt = None,
    examples: ExamplesOpt = None,
    executor: ExecutorOpt = "dataflow",
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
    on_failure: OnFailureOpt = "cancel",
    max_concurrency: MaxConcurrencyOpt = None,
    max_elements: MaxElementsOpt = DEFAULT_MAX_ELEMENTS,
    approve: ApproveOpt = False,
    ask: AskOpt = None,
    policy_file: PolicyOpt = None,
    no_wait: NoWaitOpt = False,
    store: StoreOpt = None,
    otel: OtelOpt = False,
    deadline: DeadlineOpt = None,
) -> None:
    """Ask a model for a plan reaching GOAL with the given tools; show it as a table and a
    DAG, save it (--out) or run it (--execute). Exit 3 if no valid plan came back, 2 if the
    model could not be used, 8 if --deadline passed first."""
    if otel:
        configure_otel()
    if not goal.strip():
        raise ConfigError("the goal is empty: say what the plan should achieve")
    if out_file is not None:  # before any model call
        check_output_path(out_file, store, "plan")
    options = RunOptions.of(ctx)  # --executor, --ask...: read from ctx
    registry = load_tools(tools, mcp, skills)
    from ..run import new_run_id
    from ..store import RunStore
    from ..workflows._calls import run_calls

    # Every model call is recorded under the id of the run the plan becomes (with
    # --execute), or would have become: 'dagagent show ID' finds them either way.
    run_store = RunStore(options.store)
    try:
        calls = run_calls(run_store, new_run_id())
        try:
            code = _plan_and_run(
                ctx_options=options,
                calls=calls,
                goal=goal,
                registry=registry,
                model=ModelChoice(model, base_url, timeout, max_tokens, deadline, stream_timeout),
                max_attempts=max_attempts,
                agent_tasks=agent_tasks,
                no_schema=no_schema,
                planner_prompt=planner_prompt,
                examples=examples,
                deadline=deadline,
                json_out=json_out,
                execute=execute,
                out_file=out_file,
            )
        finally:
            _say_calls_recorded(calls, run_store, quiet=json_out)
    finally:
        run_store.close()
    raise typer.Exit(code)


def _say_calls_recorded(calls: SolveCalls, store: Any, *, quiet: bool) -> None:
    """Write every call recorded; say where they are (an error if some could not be)."""
    lost = calls.close()
    if lost is not None:
        err.print(f"error: not recorded: {lost}", markup=False, highlight=False)
        return
    if quiet or not calls.records:
        return
    n = len(calls.records)
    err.print(
        f"{n} model call{'s' if n != 1 else ''} recorded as {calls.run_id} in {store.path} "
        f"(dagagent show {calls.run_id})",
        markup=False,
        highlight=False,
    )


def _plan_and_run(
    *,
    ctx_options: RunOptions,
    calls: SolveCalls,
    goal: str,
    registry: Any,
    model: ModelChoice,
    max_attempts: int,
    agent_tasks: bool,
    no_schema: bool,
    planner_prompt: Path | None,
    examples: Path | None,
    deadline: float | None,
    json_out: bool,
    execute: bool,
    out_file: Path | None,
) -> int:
    """Plan, show and save the plan, and with ``execute`` run it as run ``calls.run_id``;
    the exit code."""
    from .diagram import to_ascii
    from .render import plan_table, print_json, print_warnings
    from .writing import ModelProgress

    options = ctx_options
    progress = ModelProgress(err)
    watching = _Watching(progress, calls.observer("planner"))
    llm, planner = _make_planner(
        model,
        registry,
        max_attempts=max_attempts,
        agent_tasks=agent_tasks,
        structured=not no_schema,
        prompt_file=planner_prompt,
        examples_file=examples,
        watching=watching,
        max_tools=options.max_tools,
    )
    with progress:
        result = _plan(llm, planner, goal, deadline=deadline, watching=watching)
    graph = result.graph
    usage_line = f"planned with {_models(llm, watching)}: {result.summary()}"
    if json_out and not execute:
        # the id its model calls are recorded under: 'dagagent show ID' opens them
        print_json(out, {**planning_summary(result), "calls_recorded_as": calls.run_id})
    elif not json_out:
        out.print(plan_table(graph))
        out.print(to_ascii(graph), markup=False, highlight=False)
        out.print(
            f"{_count(len(graph), 'task')} in {_count(len(graph.levels), 'level')}; {usage_line}",
            markup=False,
            highlight=False,
        )
    else:
        err.print(usage_line, markup=False, highlight=False)
    print_warnings(err, result.warnings)
    if out_file is not None:
        _write(out_file, result.plan.to_json(indent=2) + "\n")
        err.print(f"plan written to {out_file}", markup=False, highlight=False)
    elif not execute:
        err.print(
            "the plan is not saved: add --out FILE to keep it (then 'dagagent run FILE'), "
            "or --execute to run it now",
            markup=False,
            highlight=False,
        )
    if not execute:
        return EXIT_OK
    return run_graph(
        graph,
        registry,
        options,
        as_json=json_out,
        llm=llm if agent_tasks else None,
        calls=calls,
        model=model,
    )
