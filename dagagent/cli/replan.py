"""``dagagent replan``: review a recorded run, compare it with a revised plan (``--from FILE`` or
``--model SPEC``) and run that plan, reusing every unchanged success. What each step means lives
in :mod:`dagagent.review` and :mod:`dagagent.workflows.replan`; this module shows it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import ConfigError
from ..limits import DEFAULT_MAX_ELEMENTS
from ..tools import DEFAULT_THRESHOLD
from ._app import EXIT_OK, EXIT_RECORD, Interrupted, app, check_output_path, err, guard, out
from .options import (
    ApproveOpt,
    AskOpt,
    BaseUrlOpt,
    ExecutorOpt,
    LastOpt,
    MaxAttemptsOpt,
    MaxConcurrencyOpt,
    MaxElementsOpt,
    MaxToolsOpt,
    McpOpt,
    ModelChoice,
    ModelOpt,
    NoWaitOpt,
    OnFailureOpt,
    OtelOpt,
    OutOpt,
    PayloadStoreOpt,
    PolicyOpt,
    RunArg,
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
)
from .otel import configure_otel
from .rules import ApprovalRules, recorded_rules
from .run import agent_model, print_result, run_exit_code
from .runs import find_run, open_store
from .tools import load_tools

if TYPE_CHECKING:
    from ..plan import Plan
    from ..review import ReuseDecision, RunReview
    from ..store import RunRecord
    from ..workflows._calls import SolveCalls
    from ..workflows.replan import Revision

__all__ = ["make_model", "replan_cmd"]

FromOpt = Annotated[
    Path | None,
    typer.Option("--from", metavar="FILE", help="The revised plan, edited by hand (JSON)."),
]


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


def make_model(
    model: str,
    base_url: str | None,
    *,
    timeout: float = 60.0,
    stream_timeout: float | None = None,
) -> Any:
    """The model client for ``--model`` (a seam: tests put a scripted model here)."""
    return ModelChoice(model, base_url, timeout, stream_timeout=stream_timeout).client()


def _revise(
    record: RunRecord,
    registry: Any,
    *,
    plan: Plan | None,
    llm: Any,
    agent_llm: Any,
    max_attempts: int,
    quiet: bool,
    calls: SolveCalls | None = None,
    max_tools: int = DEFAULT_THRESHOLD,
) -> Revision:
    """The replan workflow's revision step (:func:`dagagent.workflows.revise_run`); the
    replanner's model calls recorded by ``calls``."""
    from ..planners import LLMReplanner
    from ..workflows.replan import revise_run
    from .render import print_warnings
    from .signals import run_stoppable

    replanner = None
    if llm is not None:
        from ..llm import MeteredLLM

        metered = MeteredLLM(llm, observer=calls.observer("replanner")) if calls else llm
        replanner = LLMReplanner(
            metered, registry, max_attempts=max_attempts, discovery=discovery_of(max_tools)
        )

    async def main() -> Revision:
        if llm is None:
            return await revise_run(record, registry, plan=plan, agent_llm=agent_llm)
        async with llm:
            return await revise_run(record, registry, replanner=replanner, agent_llm=agent_llm)

    # an LLMError is reported by guard: "the model could not be used"
    revision = run_stoppable(main)
    if revision.planning is not None and not quiet:
        err.print(
            f"revised by {getattr(llm, 'model', 'the model')}: {revision.planning.summary()}",
            markup=False,
            highlight=False,
        )
        print_warnings(err, revision.planning.warnings)
    return revision


@app.command("replan")
@guard
def replan_cmd(
    ctx: typer.Context,
    run: RunArg = None,
    last: LastOpt = False,
    from_file: FromOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
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
    mcp: McpOpt = None,
    skills: SkillsOpt = None,
    max_tools: MaxToolsOpt = DEFAULT_THRESHOLD,
    executor: ExecutorOpt = "dataflow",
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
    store: StoreOpt = None,
    json_out: bool = typer.Option(False, "--json", help="Print everything as one JSON object."),
    timeout: TimeoutOpt = 60.0,
    stream_timeout: StreamTimeoutOpt = None,
    otel: OtelOpt = False,
    approve: ApproveOpt = False,
    ask: AskOpt = None,
    policy_file: PolicyOpt = None,
    no_wait: NoWaitOpt = False,
) -> None:
    """Review a run (what failed and why, what it blocked, what waits, what succeeded),
    compare it with a revised plan (--from FILE or --model SPEC) and optionally run that plan
    (--execute), reusing the outputs of every task whose id, tool, arguments and inputs are
    unchanged. The new run applies the approval rules the run was recorded with (--policy
    and --ask replace them). Exit 0 after a review; with --execute, the new run's exit code
    (0 ok, 1 failed, 6 paused); 3 when the model gave no valid plan in --max-attempts."""
    from ..plan import AgentTask, load_plan
    from ..review import format_review, review_run

    if otel:
        configure_otel()
    if from_file is not None and model is not None:
        raise ConfigError("give --from FILE or --model SPEC, not both")
    if base_url is not None and model is None:
        raise ConfigError("--base-url needs --model")
    if not execute_it and (approve or ask or policy_file is not None or no_wait):
        raise ConfigError("--approve, --ask, --policy and --no-wait go with --execute")
    given_rules = ApprovalRules.given(policy_file, ask or ())  # before any model call
    if out_file is not None:  # before any model call
        check_output_path(out_file, store, "plan")
    with open_store(store) as st:
        record = find_run(st, run, last)
        path = st.path
    spec, mcp_specs, registry = registry_for(record, tools, mcp, skills)
    review = review_run(record)
    if not json_out:
        out.print(format_review(review), markup=False, highlight=False)
    llm: Any = None
    edited: Plan | None = load_plan(from_file) if from_file is not None else None
    if model is not None:
        llm = make_model(model, base_url, timeout=timeout, stream_timeout=stream_timeout)
    agent_llm = llm
    if (
        llm is None
        and execute_it
        and any(isinstance(t, AgentTask) for t in (edited or record.plan).tasks)
    ):
        agent_llm = agent_model(None, None, stream_timeout)  # $DAGAGENT_MODEL, as 'run' does
    if not record.plan.tasks and edited is None and llm is None and execute_it:
        raise ConfigError(
            f"run {record.run_id} has no task (no task of its plan was accepted), so there is "
            "nothing to run again: give a plan with --from FILE, or --model SPEC to plan it"
        )
    calls: SolveCalls | None = None
    if llm is not None or (execute_it and agent_llm is not None):
        # The replanner's calls, and the agent tasks' of the new run, are records of the run
        # the revision becomes (with --execute), or would have become.
        from ..run import new_run_id
        from ..store import RunStore
        from ..workflows._calls import run_calls

        calls_store = RunStore(path)
        calls = run_calls(calls_store, new_run_id(), replan_of=record.run_id)
    try:
        return _replan(
            ctx,
            record=record,
            path=path,
            spec=spec,
            mcp_specs=mcp_specs,
            registry=registry,
            review=review,
            llm=llm,
            agent_llm=agent_llm,
            edited=edited,
            calls=calls,
            max_attempts=max_attempts,
            out_file=out_file,
            execute_it=execute_it,
            json_out=json_out,
            given_rules=given_rules,
            approve=approve,
            no_wait=no_wait,
        )
    finally:
        if calls is not None:
            lost = calls.close()
            calls_store.close()
            if lost is not None:
                err.print(f"error: not recorded: {lost}", markup=False, highlight=False)
            elif calls.records and not json_out and not execute_it:
                n = len(calls.records)
                err.print(
                    f"{n} model call{'s' if n != 1 else ''} recorded as {calls.run_id} in "
                    f"{path} (dagagent show {calls.run_id})",
                    markup=False,
                    highlight=False,
                )


def _replan(
    ctx: typer.Context,
    *,
    record: RunRecord,
    path: Path,
    spec: str | None,
    mcp_specs: tuple[str, ...],
    registry: Any,
    review: RunReview,
    llm: Any,
    agent_llm: Any,
    edited: Plan | None,
    calls: SolveCalls | None,
    max_attempts: int,
    out_file: Path | None,
    execute_it: bool,
    json_out: bool,
    given_rules: ApprovalRules,
    approve: bool,
    no_wait: bool,
) -> None:
    """The rest of ``replan``: revise, show, write and run (see :func:`replan_cmd`)."""
    from ..plan import AgentTask
    from ..review import PlanDiff, format_diff
    from .approve import rules_to_workers, run_interceptors
    from .recording import run_recorded, say_recorded
    from .render import print_json, print_warnings
    from .run import agent_calls

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
            calls=calls,
            max_tools=RunOptions.of(ctx).max_tools,
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
    from ..workflows.replan import refuse_in_doubt

    refuse_in_doubt(revision, path)  # resolved by a resume, or by a person (approve)
    print_warnings(err, revision.graph.warnings)
    rules = _rules(record, given_rules)
    if record.status.value == "paused":
        err.print(
            f"note: run {record.run_id} stays paused: a decision about its waiting calls and "
            f"'dagagent resume {record.run_id}' would make them there too",
            markup=False,
            highlight=False,
        )
    interceptors = run_interceptors(
        revision.graph, registry, approve=approve, rules=rules, no_wait=no_wait
    )
    if not json_out:
        out.print("")
        out.print(f"running it as a new run (parent {record.run_id}):", markup=False)
    options = RunOptions.of(ctx, store=path)  # --executor...: read from ctx
    execute_options = {
        **options.execute_options(
            tools_spec=spec, mcp=mcp_specs, skills=skills_for(record, options.skills)
        ),
        "approval": rules.context(),  # what a resume of the new run applies
    }
    interceptors = rules_to_workers(
        execute_options["settings"].executor, rules, interceptors, no_wait=no_wait
    )
    agents = agent_llm if any(isinstance(t, AgentTask) for t in plan.tasks) else None
    try:
        with agent_calls(agents, path, calls, interceptors) as (metered, run_id):
            result = run_recorded(
                revision.graph,
                registry,
                console=None if json_out else out,
                store=path,
                run_id=run_id,
                live=not rules,  # questions on the terminal: no live display over them
                interceptors=interceptors,
                reuse=revision.reuse_map(),
                parent_id=record.run_id,
                llm=metered,
                **execute_options,
            )
    except Interrupted as stopped:  # --json: the review with the stopped run's result
        raise Interrupted(stopped.message, {**doc, "result": stopped.document}) from None
    if json_out:
        doc["result"] = result.to_json_dict()
        print_json(out, doc)
        code = run_exit_code(result)
    else:
        code = print_result(result, as_json=False)
    reused = result.counts.get("reused", 0)
    detail = f"parent {record.run_id}, {reused} reused"
    if not say_recorded(result, path, detail=detail, quiet=json_out):
        code = EXIT_RECORD
    raise typer.Exit(code)


def _rules(record: RunRecord, given: ApprovalRules) -> ApprovalRules:
    """The approval rules the new run applies: those given (``--policy``, ``--ask``), else
    the rules the run was recorded with (as ``resume`` applies them); said on stderr."""
    recorded = recorded_rules(record)
    if given:
        if recorded:
            err.print(
                f"note: {given.describe()} apply instead of the rules run {record.run_id} was "
                f"recorded with ({recorded.describe()})",
                markup=False,
                highlight=False,
            )
        return given
    if recorded:
        err.print(
            f"note: the approval rules run {record.run_id} was recorded with apply "
            f"({recorded.describe()}); --policy or --ask replace them",
            markup=False,
            highlight=False,
        )
    return recorded


def skills_for(record: RunRecord, skills: Path | None) -> Path | None:
    """``--skills`` if given, else the skills folder recorded with the run (``None``: the
    run had none). A recorded folder that is gone is a :class:`ConfigError` saying so."""
    if skills is not None:
        return skills
    recorded = record.context.get("skills")
    if not isinstance(recorded, str) or not recorded:
        return None
    if not Path(recorded).is_dir():
        raise ConfigError(
            f"run {record.run_id} used the skills folder {recorded!r}, which is not there any "
            "more: pass --skills DIR"
        )
    return Path(recorded)


def registry_for(
    record: RunRecord,
    tools: str | None,
    mcp: list[str] | None,
    skills: Path | None = None,
) -> tuple[str | None, tuple[str, ...], Any]:
    """``--tools`` and ``--mcp`` if given, else the tools recorded with the run, else the
    default, with ``--skills``' skills, else those recorded with the run (see
    :func:`skills_for`): ``(tools spec, MCP server specs, registry)``."""
    folder = skills_for(record, skills)
    if tools is not None or mcp:
        return tools, tuple(mcp or ()), load_tools(tools, mcp, folder)
    recorded = record.context.get("tools")
    spec = recorded if isinstance(recorded, str) else None
    listed = record.context.get("mcp")
    servers = tuple(m for m in listed if isinstance(m, str)) if isinstance(listed, list) else ()
    if spec is None and not servers:
        return None, (), load_tools(None, None, folder)
    from ..text import MASK

    hidden = [s.partition("=")[0] for s in servers if MASK in s]
    if hidden:  # a server started with '***' for its token would fail later, or worse
        raise ConfigError(
            f"run {record.run_id} used --mcp {' and '.join(hidden)}: a secret in the command "
            "or URL is not kept by the store, so pass --mcp NAME=... (and --tools) again"
        )
    try:
        return spec, servers, load_tools(spec, servers, folder)
    except ConfigError as exc:
        used = " and ".join(
            ([spec] if spec else []) + [f"--mcp {s.partition('=')[0]}" for s in servers]
        )
        raise ConfigError(
            f"cannot load the tools run {record.run_id} used ({used}): {exc}; "
            "pass --tools MODULE:ATTR or --mcp NAME=..."
        ) from None


def _hint(record: RunRecord, review: RunReview) -> None:
    if review.waiting and record.status.value in ("paused", "interrupted"):
        out.print("")
        out.print(
            f"to decide: dagagent approvals --run {record.run_id}, dagagent approve "
            f"{record.run_id} TASK --allow | --deny; then dagagent resume {record.run_id} "
            "continues this run in place",
            markup=False,
            highlight=False,
        )
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
