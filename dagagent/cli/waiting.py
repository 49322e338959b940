"""``dagagent approvals``, ``approve`` and ``resume``: the calls a paused run leaves for a
person, a person's decision about one, and the run continued with the decisions.

``approve`` only records (who, when, why; edited arguments checked against the tool's
schema): nothing runs. ``resume`` continues the run in place through
:func:`dagagent.resume`, with the tools and approval rules the run was recorded with; a run
that is a round of a paused solve (``dagagent ask``), or the solve's id, continues the solve
through :func:`dagagent.resume_solve` (the run, then the joiner and the rounds after it),
printed as ``ask`` prints it.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import IN_DOUBT_RULE, WORKFLOW_ENDED, ConfigError, StoreError
from ..executors import IN_PROCESS_EXECUTORS
from ..tools import DEFAULT_THRESHOLD
from ._app import EXIT_RECORD, Interrupted, app, err, guard, out
from .ask import AskProgress, exit_code_of, report_solution, solve_interrupted
from .options import (
    BaseUrlOpt,
    BudgetOptions,
    ExamplesOpt,
    McpOpt,
    ModelChoice,
    ModelOpt,
    NoWaitOpt,
    PayloadStoreOpt,
    PlannerPromptOpt,
    PricesOpt,
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
    discovery_of,
    temporal_options,
    temporal_security,
)
from .replan import registry_for
from .rules import recorded_rules
from .run import agent_calls, print_result

if TYPE_CHECKING:
    from ..store import ApprovalRecord, EffectRecord, RunRecord, RunStore

__all__: list[str] = []

RunId = typer.Argument(
    ..., metavar="RUN", help="Run id (12 hex digits, or a unique prefix of at least 4)."
)


EditOpt = Annotated[
    Path | None,
    typer.Option(
        "--edit",
        metavar="ARGS.json",
        help="Allow it with these arguments: a JSON object whose keys replace the call's "
        "(checked against the tool's schema); - reads it from stdin.",
    ),
]


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def _args_text(value: Any, width: int = 60) -> str:
    from ..text import printable, shorten

    return str(printable(shorten(json.dumps(value, ensure_ascii=False, default=str), width)))


def _state(r: ApprovalRecord) -> str:
    from ..text import printable

    if r.state == "decided":
        return f"{r.decision} by {printable(r.decided_by or '?')} (resume uses it)"
    return r.state


@app.command("approvals")
@guard
def approvals_cmd(
    run: str | None = typer.Option(
        None, "--run", metavar="RUN", help="Only the calls of this run (id or prefix)."
    ),
    store: StoreOpt = None,
    json_out: bool = typer.Option(False, "--json", help="Print them as JSON."),
) -> None:
    """List the calls waiting for a person's decision (and the decisions a resume has not
    used yet): run, task, tool, arguments, the rule that asked, when; and the calls in
    doubt of runs that ended (nothing resumes them): their keys and why they are in doubt."""
    from rich.table import Table

    from ..store import RunStore
    from ..text import printable
    from .render import print_json

    with RunStore(store, create=False) as st:
        rows = st.approvals(run)
        keys, whys = _doubt_keys(st, rows)
        doubts = st.in_doubt_of_ended(run)
        ended = {e.run_id: st.get_run(e.run_id).status.value for e in doubts}
    if json_out:
        print_json(
            out,
            {
                "approvals": [
                    {
                        **r.to_json_dict(),
                        "keys": keys.get((r.run_id, r.task_id), []),
                        "why": whys.get((r.run_id, r.task_id)),
                    }
                    if r.rule == IN_DOUBT_RULE
                    else r.to_json_dict()
                    for r in rows
                ],
                "in_doubt": [
                    {**e.to_json_dict(), "run_status": ended[e.run_id], "why": _why_in_doubt(e)}
                    for e in doubts
                ],
            },
        )
        return
    if not rows and not doubts:
        where = f" in run {run}" if run else ""
        out.print(f"nothing waits for a decision{where}", markup=False, highlight=False)
        return
    if doubts:
        _print_ended_doubts(doubts, ended)
    if not rows:
        return
    table = Table(title="waiting for a decision")
    for name in ("run", "task", "tool", "arguments", "rule", "asked", "state"):
        table.add_column(name)
    for r in rows:
        table.add_row(
            r.run_id,
            printable(r.task_id),
            printable(r.tool) + (" (agent)" if r.source == "agent" else ""),
            _args_text(r.args),
            printable(r.rule or "-"),
            _when(r.asked_at),
            _state(r),
        )
    out.print(table)
    for r in rows:
        if r.rule == IN_DOUBT_RULE and r.state == "waiting":
            shown = ", ".join(keys.get((r.run_id, r.task_id), [])) or "-"
            why = whys.get((r.run_id, r.task_id), "its process ended during the call")
            out.print(
                f"in doubt: task {printable(r.task_id)!r} of run {r.run_id} called "
                f"{printable(r.tool)} (idempotency key {shown}) and {printable(why)}: check "
                "whether it took effect, then --happened [--output JSON], "
                "--allow (made again, same key) or --deny",
                markup=False,
                highlight=False,
            )
    first = rows[0]
    options = (
        "--happened [--output JSON] | --allow | --deny [--key KEY] [--reason TEXT]"
        if first.rule == IN_DOUBT_RULE
        else "--allow | --deny [--reason TEXT] [--edit ARGS.json]"
    )
    out.print(
        f"decide: dagagent approve {first.run_id} {printable(first.task_id)} {options}; then: "
        f"dagagent resume {first.run_id}",
        markup=False,
        highlight=False,
    )


def _why_in_doubt(e: EffectRecord) -> str:
    """Why call ``e`` (of a run that ended) is in doubt, in words."""
    from ..text import shorten

    if e.state == "started":
        return "its process ended during the call"
    error = e.error or ""
    if error.startswith(WORKFLOW_ENDED):  # a call a Temporal workflow left: why, in words
        return error.removeprefix(WORKFLOW_ENDED)
    if "deadline exceeded" in error:
        return "it was cut off during the call by its timeout"
    if error.startswith("CancelledError"):
        return "it was cut off during the call: the run was stopped"
    return "it was cut off during the call" + (f" ({shorten(error, 120)})" if error else "")


def _print_ended_doubts(doubts: list[EffectRecord], ended: dict[str, str]) -> None:
    """The calls in doubt of runs that ended (nothing resumes them): a person says what
    became of each, so that a revision of the run takes it over, makes it again or not."""
    from rich.table import Table

    from ..text import printable

    table = Table(title="calls in doubt of runs that ended (whether they took effect is unknown)")
    table.add_column("run", no_wrap=True, min_width=12)
    for name in ("task", "tool", "arguments"):
        table.add_column(name)
    table.add_column("idempotency key", no_wrap=True, min_width=36)  # whole: it is looked up
    table.add_column("started")
    table.add_column("why")
    for e in doubts:
        where = printable(e.task_id) + (f" [{e.element}]" if e.element is not None else "")
        table.add_row(
            e.run_id,
            where,
            printable(e.tool) + (" (agent)" if e.source == "agent" else ""),
            _args_text(e.args),
            e.key,
            _when(e.started_at),
            printable(f"{_why_in_doubt(e)} (the run {ended[e.run_id]})"),
        )
    out.print(table)
    first = doubts[0]
    out.print(
        "check with the service by the key whether each took effect, then: dagagent approve "
        f"{first.run_id} {printable(first.task_id)} --happened [--output JSON] | --allow (a "
        "revision makes it again, same key) | --deny (a revision denies its task) "
        "[--key KEY] [--reason TEXT]; then: dagagent replan "
        f"{first.run_id} --execute",
        markup=False,
        highlight=False,
    )


#: The most an ``--edit`` file of arguments may hold.
MAX_EDIT_BYTES = 1024 * 1024


def _doubt_keys(
    st: RunStore, rows: list[ApprovalRecord]
) -> tuple[dict[tuple[str, str], list[str]], dict[tuple[str, str], str]]:
    """The idempotency keys of the calls in doubt that ``rows`` wait on, by run and task,
    and why they are in doubt (that of the first call of each task)."""
    keys: dict[tuple[str, str], list[str]] = {}
    whys: dict[tuple[str, str], str] = {}
    for run_id in sorted({r.run_id for r in rows if r.rule == IN_DOUBT_RULE}):
        for e in st.effects(run_id):
            if e.state in ("started", "cancelled") and e.resolution is None:
                keys.setdefault((run_id, e.task_id), []).append(e.key)
                whys.setdefault((run_id, e.task_id), _why_in_doubt(e))
    return keys, whys


def _read_edit(path: Path) -> dict[str, Any]:
    from ..text import read_bounded

    try:
        if str(path) != "-":
            text = read_bounded(path, MAX_EDIT_BYTES, what="--edit file")
        elif (stream := getattr(sys.stdin, "buffer", None)) is not None:
            text = read_bounded(stream, MAX_EDIT_BYTES, what="--edit file")
        else:  # a text stream put in its place
            text = sys.stdin.read(MAX_EDIT_BYTES + 1)
            if len(text) > MAX_EDIT_BYTES:
                raise ValueError(f"larger than {MAX_EDIT_BYTES:,} characters")
    except OSError as exc:
        raise ConfigError(f"--edit: cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # too large, or not UTF-8
        raise ConfigError(f"--edit: cannot read {path}: {exc}") from None
    try:
        given = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"--edit: {path} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    if not isinstance(given, dict):
        raise ConfigError(
            f'--edit: {path} must hold a JSON object of arguments, e.g. {{"to": "ann"}}'
        )
    return given


@app.command("approve")
@guard
def approve_cmd(
    run: str = RunId,
    task: str = typer.Argument(..., metavar="TASK", help="The waiting task's id."),
    allow: bool = typer.Option(
        False, "--allow", help="Let the call run (a call in doubt: made again, same key)."
    ),
    deny: bool = typer.Option(False, "--deny", help="Refuse it: the task becomes denied."),
    happened: bool = typer.Option(
        False,
        "--happened",
        help="A call in doubt took effect: it is not made again, and the task succeeds "
        "(with --output as its output).",
    ),
    output: str | None = typer.Option(
        None,
        "--output",
        metavar="JSON",
        help="With --happened: the call's output, as JSON (- reads it from stdin).",
    ),
    key: str | None = typer.Option(
        None,
        "--key",
        metavar="KEY",
        help="Only the call in doubt with this idempotency key (one element of a map, one "
        "call of an agent); see 'dagagent approvals'.",
    ),
    reason: str | None = typer.Option(None, "--reason", metavar="TEXT", help="Why."),
    edit: EditOpt = None,
    by: str | None = typer.Option(
        None,
        "--by",
        metavar="NAME",
        help="Who decides. Default: $DAGAGENT_USER, else the login name.",
    ),
    tools: ToolsOpt = None,
    mcp: McpOpt = None,
    skills: SkillsOpt = None,
    store: StoreOpt = None,
    json_out: bool = typer.Option(False, "--json", help="Print the recorded decision as JSON."),
) -> None:
    """Record a decision about a waiting task of a paused run (who, when, why). Nothing runs:
    'dagagent resume RUN' continues the run and uses each decision once. Of a run that
    ended (it is not resumed), record what became of a call in doubt ('dagagent approvals'
    lists them): --happened (a revision takes its --output over), --allow (it did not: a
    revision makes it again, same key) or --deny (a revision denies its task); exit 7 when
    the task (or --key) has no call in doubt."""
    from ..store import RunStore
    from ..text import printable
    from ..workflows.resume import decider
    from .render import print_json

    if sum((allow, deny, happened)) != 1 and not (edit is not None and not (deny or happened)):
        raise ConfigError(
            "give one of --allow or --deny (--edit allows with new arguments; --happened says "
            "a call in doubt took effect)"
        )
    if edit is not None and (deny or happened):
        raise ConfigError(
            "--edit allows the call with new arguments: it goes with neither --deny nor --happened"
        )
    if output is not None and not happened:
        raise ConfigError("--output is the output of a call that happened: it goes with --happened")
    with RunStore(store, create=False) as st:
        record = st.get_run(run)
        who = decider(by)
        if record.status.value in _ENDED and (
            happened or key is not None or _had_doubts(st, record.run_id, task)
        ):
            if edit is not None:
                raise ConfigError(
                    f"run {record.run_id} is {record.status.value}: --edit applies to a call "
                    "waiting for approval; a call in doubt is made again as it was, or not "
                    "(--happened, --allow or --deny)"
                )
            found = "happened" if happened else "denied" if deny else "not_happened"
            value = _read_output(output) if output is not None else None
            resolved = st.resolve_in_doubt(
                record.run_id, task, found, by=who, reason=reason, output=value, key=key
            )
            _say_resolved(record.run_id, resolved, who, reason, json_out)
            return
        if happened:
            value = _read_output(output) if output is not None else None
            decided = st.decide(
                record.run_id, task, "happened", by=who, reason=reason, output=value, key=key
            )
        elif deny:
            decided = st.decide(record.run_id, task, "deny", by=who, reason=reason, key=key)
        elif edit is None:
            decided = st.decide(record.run_id, task, "allow", by=who, reason=reason, key=key)
        else:
            given = _read_edit(edit)
            _, _, registry = registry_for(record, tools, mcp, skills)

            def check(tool: str, args: dict[str, Any]) -> Any:
                if tool not in registry:
                    raise ConfigError(
                        f"--edit: tool {tool!r} of task {task!r} is not among the loaded tools; "
                        "pass --tools MODULE:ATTR or --mcp NAME=... to check the arguments"
                    )
                return registry.get(tool).validate_args(args)

            decided = st.decide(
                record.run_id, task, "edit", by=who, reason=reason, edit_args=given, check=check
            )
    if json_out:
        print_json(out, {"ok": True, "decisions": [r.to_json_dict() for r in decided]})
        return
    for r in decided:
        args = f" with {_args_text(r.edit_args)}" if r.edit_args is not None else ""
        out.print(
            f"recorded: {r.decision} the call of {printable(r.tool)} by task "
            f"{printable(r.task_id)!r} of run {r.run_id}{args}, decided by "
            f"{printable(who)}" + (f" ({printable(reason)})" if reason else ""),
            markup=False,
            highlight=False,
        )
    err.print(
        f"nothing ran: 'dagagent resume {record.run_id}' continues the run",
        markup=False,
        highlight=False,
    )


#: The states of a run that ended: it is never resumed (its calls in doubt are resolved by
#: a person's finding alone, for its revisions).
_ENDED = ("succeeded", "failed", "cancelled")


def _had_doubts(st: RunStore, run_id: str, task: str) -> bool:
    """Whether task ``task`` of run ``run_id`` made a call that is (or was) in doubt: a
    decision about it is about that call, not about a waiting approval."""
    return any(
        e.task_id == task and (e.in_doubt or e.resolution is not None) for e in st.effects(run_id)
    )


def _say_resolved(
    run_id: str, resolved: list[EffectRecord], who: str, reason: str | None, json_out: bool
) -> None:
    from ..text import printable
    from .render import print_json

    if json_out:
        print_json(out, {"ok": True, "resolved": [e.to_json_dict() for e in resolved]})
        return
    words = {
        "happened": "took effect: a revision takes its output over",
        "not_happened": "did not take effect: a revision makes it again, with its key",
        "denied": "is not to be made: a revision denies its task",
    }
    for e in resolved:
        out.print(
            f"recorded: the call of {printable(e.tool)} by {printable(e.where)} of run "
            f"{run_id} (key {e.key}) {words[e.resolution or 'happened']}; decided by "
            f"{printable(who)}" + (f" ({printable(reason)})" if reason else ""),
            markup=False,
            highlight=False,
        )
    err.print(
        f"nothing ran: run {run_id} ended and is not resumed; 'dagagent replan {run_id} "
        "--execute' runs a revision",
        markup=False,
        highlight=False,
    )


def _read_output(text: str) -> Any:
    if text == "-":
        text = sys.stdin.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"--output: not valid JSON: {exc.msg} (column {exc.colno}); a text is given in "
            "quotes, e.g. --output '\"sent\"'"
        ) from None


@app.command("resume")
@guard
def resume_cmd(
    ctx: typer.Context,
    run: str = RunId,
    tools: ToolsOpt = None,
    mcp: McpOpt = None,
    skills: SkillsOpt = None,
    executor: str | None = typer.Option(
        None,
        "--executor",
        "-e",
        metavar="|".join(IN_PROCESS_EXECUTORS),
        help="When tasks start. Default: the executor the run was started with (a run on "
        "Temporal goes on there: its workflow is followed if it still runs or finished).",
    ),
    on_failure: str | None = typer.Option(
        None,
        "--on-failure",
        metavar="cancel|continue",
        help="cancel: stop the run at the first failure; continue: run independent branches "
        "to the end. Default: the policy the run was started with (or last resumed with).",
    ),
    max_concurrency: int | None = typer.Option(
        None,
        "--max-concurrency",
        "-j",
        min=1,
        help="At most N tasks at once. Default: the run's own limit (none if it had none).",
    ),
    max_elements: int | None = typer.Option(
        None,
        "--max-elements",
        min=0,
        metavar="N",
        help="The longest list a map task (for_each) may expand. Default: the run's own.",
    ),
    temporal_address: TemporalAddressOpt = None,
    task_queue: TaskQueueOpt = None,
    temporal_namespace: TemporalNamespaceOpt = None,
    payload_store: PayloadStoreOpt = None,
    temporal_api_key: TemporalApiKeyOpt = None,
    temporal_tls: TemporalTlsOpt = None,
    temporal_tls_cert: TemporalTlsCertOpt = None,
    temporal_tls_key: TemporalTlsKeyOpt = None,
    temporal_tls_ca: TemporalTlsCaOpt = None,
    no_wait: NoWaitOpt = False,
    in_doubt: str | None = typer.Option(
        None,
        "--in-doubt",
        metavar="ask|retry|deny",
        help="A call with side effects that may or may not have happened, that no reconciler "
        "and no person decided about: ask a person (the task waits; on Temporal, the resume "
        "is refused, exit 7), retry it (same idempotency key) or deny it (not made). "
        "Default: the run's own policy (ask, unless it was started otherwise).",
    ),
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    stream_timeout: StreamTimeoutOpt = None,
    max_tools: int | None = typer.Option(
        None,
        "--max-tools",
        min=0,
        metavar="N",
        help="Past N tools, an agent task without a tools list is shown only the N most "
        "relevant (0: every tool). Default: the run's own --max-tools.",
    ),
    prices: PricesOpt = None,
    planner_prompt: PlannerPromptOpt = None,
    examples: ExamplesOpt = None,
    store: StoreOpt = None,
    json_out: bool = typer.Option(False, "--json", help="Print only the result, as JSON."),
) -> None:
    """Continue a paused run with the decisions taken about it: approved calls run (with
    their edited arguments), denied ones make their task denied, calls nobody decided about
    wait again, and nothing that succeeded runs again. Exit as 'run' does (6: paused again).
    A run of a paused 'ask' (or the solve's id) continues the solve: the run, then the
    joiner and the rounds after it, with --model; exit as 'ask' does. --prices costs the
    model calls it makes, as for 'ask'. A solve goes on with the planner of its own it was
    asked with (--planner-prompt, --examples: a round planned anew and every sub-solve plan
    with it); given here, they replace those, for this resume and the next ones. A run on
    Temporal whose driver died (interrupted) follows its workflow and records what it did,
    or runs the rest if the workflow ended without finishing (what it did read from its
    history: a call with side effects that may have happened there refuses the resume, exit
    7, unless --in-doubt says what to do); the server is the one the run recorded, or
    --temporal-address."""
    from ..graph import validate
    from ..plan import AgentTask
    from ..store import RunStore
    from ..tools._loop import run_own_loop
    from ..workflows._calls import run_calls
    from ..workflows.resume import recorded_settings, resume, resumed_executor
    from .approve import rules_to_workers, run_interceptors
    from .progress import progress_for
    from .recording import say_recorded
    from .signals import stoppable

    price_table = BudgetOptions(prices_file=prices).prices()  # a bad file: before anything
    if in_doubt is not None and in_doubt not in ("ask", "retry", "deny"):
        raise ConfigError(f"--in-doubt must be ask, retry or deny, not {in_doubt!r}")
    if on_failure is not None and on_failure not in ("cancel", "continue"):
        raise ConfigError(f"--on-failure must be cancel or continue, not {on_failure!r}")
    # the settings given here; the others are the run's own (its record keeps them)
    changed = {
        name: value
        for name, value in (
            ("on_failure", on_failure),
            ("max_concurrency", max_concurrency),
            ("max_elements", max_elements),
            ("in_doubt", in_doubt),
        )
        if value is not None
    }
    with RunStore(store, create=False) as st:
        try:
            record = st.get_run(run)
        except StoreError:
            try:
                st.get_solve(run)
            except StoreError:
                raise StoreError(f"no run {run} (nor solve) in {st.path}") from None
            _no_settings_for_solves({**changed, "max_tools": max_tools})
            code = _resume_solve(
                st, run, tools, mcp, model, base_url, stream_timeout, executor, no_wait,
                json_out, price_table, skills, planner_prompt, examples,
                (temporal_address, temporal_namespace, task_queue, payload_store),
                temporal_security(ctx, temporal=True),
            )  # fmt: skip
            raise typer.Exit(code) from None
        solve = st.solve_of_run(record.run_id)
        if solve is not None and solve.status in ("paused", "interrupted"):
            _no_settings_for_solves({**changed, "max_tools": max_tools})
            code = _resume_solve(
                st, record.run_id, tools, mcp, model, base_url, stream_timeout, executor,
                no_wait, json_out, price_table, skills, planner_prompt, examples,
                (temporal_address, temporal_namespace, task_queue, payload_store),
                temporal_security(ctx, temporal=True),
            )  # fmt: skip
            raise typer.Exit(code)
        if planner_prompt is not None or examples is not None:
            option = "--planner-prompt" if planner_prompt is not None else "--examples"
            raise ConfigError(
                f"{option} is for resuming a solve, which plans with it: run {record.run_id} "
                "is not a round of a paused or interrupted solve, and plans nothing when it "
                "goes on"
            )
        chosen = executor or record.executor
        given = temporal_options(temporal_address, temporal_namespace, task_queue, payload_store)
        if given and chosen != "temporal":
            option = {
                "address": "--temporal-address",
                "namespace": "--temporal-namespace",
                "task_queue": "--task-queue",
                "payloads": "--payload-store",
            }[next(iter(given))]
            raise ConfigError(
                f"{option} needs a run on Temporal (run {record.run_id} ran on "
                f"{record.executor or 'an unknown executor'}) or --executor temporal"
            )
        _, _, registry = registry_for(record, tools, mcp, skills)
        rules = recorded_rules(record)
        graph = validate(record.plan, registry)
        security = temporal_security(ctx, temporal=chosen == "temporal")
        going_on = resumed_executor(chosen, record.context, **given, **security)
        interceptors = rules_to_workers(
            going_on,
            rules,
            run_interceptors(graph, registry, approve=False, rules=rules, no_wait=no_wait),
            no_wait=no_wait,
        )
        settings = recorded_settings(record, executor=going_on, **changed)
        llm = None
        agent_runner: dict[str, Any] = {}
        agents = any(isinstance(t, AgentTask) for t in record.plan.tasks)
        if agents:
            # the model the run was started with (never its key), unless --model says
            choice = ModelChoice.recorded(record.context, model, base_url, stream_timeout)
            llm = choice.client_if_named()
            agent_runner = _agent_runner(record, max_tools)
        progress = progress_for(graph, out, live=not rules) if not json_out else None
        # The agent tasks' model calls are the run's, after those on record before.
        calls = run_calls(st, record.run_id, prices=price_table, interceptors=interceptors)
        calls.seed([c for c in st.model_calls(run_id=record.run_id) if c.solve_id is None])

        with agent_calls(llm, st.path, calls) as (metered, _):

            async def main() -> Any:
                return await stoppable(
                    resume(
                        record.run_id,
                        registry,
                        store=st,
                        interceptors=interceptors,
                        listeners=(progress,) if progress is not None else (),
                        settings=settings,
                        llm=metered,
                        **agent_runner,
                    )
                )

            try:
                if progress is None:
                    result = run_own_loop(main)
                else:
                    with progress:
                        result = run_own_loop(main)
            finally:
                lost = calls.close()
                if lost is not None:
                    err.print(f"error: not recorded: {lost}", markup=False, highlight=False)
        if max_tools is not None and agents:
            # the run went on with these: its next resume does too (as with its settings)
            st.update_context(
                record.run_id, {"max_tools": None if max_tools == DEFAULT_THRESHOLD else max_tools}
            )
    code = print_result(result, as_json=json_out, graph=graph)
    if not say_recorded(result, store, detail="resumed", quiet=json_out):
        code = EXIT_RECORD
    raise typer.Exit(code)


def _agent_runner(record: RunRecord, max_tools: int | None) -> dict[str, Any]:
    """``{"agent_runner": ...}`` showing the agent tasks of run ``record`` the tools
    ``--max-tools`` says, else those the run's own ``--max-tools`` said (empty: the
    default)."""
    if max_tools is None:
        kept = record.context.get("max_tools")
        max_tools = kept if isinstance(kept, int) and kept >= 0 else DEFAULT_THRESHOLD
    if max_tools == DEFAULT_THRESHOLD:
        return {}
    from ..agent import make_agent_runner

    return {"agent_runner": make_agent_runner(discovery=discovery_of(max_tools))}


def _no_settings_for_solves(changed: Mapping[str, Any]) -> None:
    """A solve goes on with the settings it was asked with: the options of a run's resume
    (``changed``: those given, by name) are refused, not ignored."""
    if changed.get("in_doubt", "ask") != "ask":
        raise ConfigError(
            "--in-doubt applies to resuming a run, not a solve: a solve's calls in doubt wait "
            "for a person (dagagent approvals, then approve --happened, --allow or --deny)"
        )
    given = [
        _RUN_OPTIONS[name]
        for name, value in changed.items()
        if name != "in_doubt" and value is not None
    ]
    if given:
        raise ConfigError(
            f"{' and '.join(given)} appl{'y' if len(given) > 1 else 'ies'} to resuming a run, "
            "not a solve: a solve goes on with the settings it was asked with (its rounds' "
            "runs too)"
        )


#: The options of ``resume`` that change what a run was recorded with: its settings, and
#: the tools its agent tasks are shown.
_RUN_OPTIONS = {
    "on_failure": "--on-failure",
    "max_concurrency": "--max-concurrency",
    "max_elements": "--max-elements",
    "in_doubt": "--in-doubt",
    "max_tools": "--max-tools",
}


def _a_run_of(st: RunStore, solve: Any) -> RunRecord | None:
    """The latest run of ``solve`` on record (its tools, model and rules are the solve's)."""
    for r in reversed(solve.rounds):
        if r.run_id is not None and st.exists(r.run_id):
            return st.get_run(r.run_id)
    return None


def _resume_solve(
    st: RunStore,
    ref: str,
    tools: str | None,
    mcp: list[str] | None,
    model: str | None,
    base_url: str | None,
    stream_timeout: float | None,
    executor: str | None,
    no_wait: bool,
    json_out: bool,
    prices: Any,
    skills: Path | None = None,
    planner_prompt: Path | None = None,
    examples: Path | None = None,
    temporal: tuple[Any, Any, Any, Any] | None = None,
    security: Mapping[str, Any] | None = None,
) -> int:
    """``resume`` of a paused solve: its round's run goes on with the tools and approval
    rules it was recorded with, then the joiner and the rounds after it; progress on stderr,
    the answer on stdout (``--json``: the solution), as ``ask`` prints them; its model calls
    are costed at ``prices`` (``--prices``). Its later rounds plan with the planner of one's
    own it was recorded with, or the one ``planner_prompt`` and ``examples`` make (then
    recorded in its place). A solve on Temporal goes on there, as ``attach`` does
    (``temporal``: the server options given; ``security``: how it is reached, see
    :func:`~.options.temporal_security`). The exit code."""
    import asyncio

    from ..approval import Policy
    from ..text import printable
    from ..tools._loop import run_own_loop
    from ..workflows import Solution, resume_solve
    from ..workflows.solve_resume import resumable_solve
    from .approve import run_interceptors
    from .render import print_json
    from .signals import stoppable

    solve, last = resumable_solve(st, ref)
    if (solve.options or {}).get("executor") == "temporal":
        if planner_prompt is not None or examples is not None:
            option = "--planner-prompt" if planner_prompt is not None else "--examples"
            raise ConfigError(
                f"{option}: solve {solve.solve_id} runs on Temporal, whose workflow plans its "
                "later rounds as it was asked to; resume it without the option"
            )
        # its workflow waits on the server: the decisions on record go to it there
        from .ask import attach_and_report, solve_executor

        address, namespace, queue, payloads = temporal or (None, None, None, None)
        going_on = solve_executor(st, solve.solve_id, address, namespace, queue, payloads, security)
        return attach_and_report(solve.solve_id, going_on, st, json_out, prices)
    record = _a_run_of(st, solve)
    if record is None:
        raise ConfigError(
            f"solve {solve.solve_id} stopped before any of its rounds had a run on record: its "
            "tools and model are not known; ask again (dagagent ask)"
        )
    _, _, registry = registry_for(record, tools, mcp, skills)
    rules = recorded_rules(record)
    policies = run_interceptors(None, registry, approve=False, rules=rules, no_wait=no_wait)
    # the runs of the rounds after it are recorded with the same tools and rules, so that
    # one of them that pauses resumes with them too
    st.context = dict(record.context)
    first = policies[0] if policies and isinstance(policies[0], Policy) else None
    choice = ModelChoice.recorded(record.context, model, base_url, stream_timeout)
    round_ = last.round if last is not None else 1
    if not choice.configured:
        raise ConfigError(
            f"run {record.run_id} is round {round_} of solve {solve.solve_id}, which is "
            f"{solve.status}: after its run the joiner decides, so resuming it needs the model "
            "(--model SPEC or DAGAGENT_MODEL)"
        )
    llm = choice.client()
    planner = _recorded_planner(st, solve, record, llm, registry, choice, planner_prompt, examples)
    progress = AskProgress()
    progress.solve_id, progress.round, progress.run_id = solve.solve_id, round_, record.run_id
    if last is not None and last.run_id == record.run_id:
        where = f"round {round_}'s run {record.run_id} goes on"
    else:
        where = f"from round {round_}"
    err.print(
        f"resuming solve {solve.solve_id}: {where}"
        + (" (its process had ended)" if solve.status == "interrupted" else ""),
        markup=False,
        highlight=False,
    )

    async def main() -> Solution:
        async with llm:
            return await stoppable(
                resume_solve(
                    solve.solve_id,
                    registry,
                    llm,
                    store=st,
                    policy=first,
                    interceptors=policies[1:] if first is not None else policies,
                    listeners=[progress],
                    executor=executor,
                    prices=prices,
                    planner=planner,
                )
            )

    try:
        solution = run_own_loop(main)
    except (KeyboardInterrupt, asyncio.CancelledError):  # see guard: 3.10 gives the latter
        raise Interrupted(solve_interrupted(progress, st.path, st)) from None
    report_solution(solution, st.path)
    if json_out:
        print_json(out, solution.to_json_dict())
    elif solution.ok:
        out.print(printable(solution.answer_text, lines=True), markup=False, highlight=False)
    return exit_code_of(solution)


def _recorded_planner(
    st: RunStore,
    solve: Any,
    record: RunRecord,
    llm: Any,
    registry: Any,
    choice: Any,
    planner_prompt: Path | None,
    examples: Path | None,
) -> Any:
    """The planner of one's own a resumed solve plans with: ``--planner-prompt`` and
    ``--examples`` given to the resume (recorded then, in place of those before, for the
    runs of its later rounds and for the run a later resume reads), else those its run
    ``record`` was recorded with; ``None``: the built-in planner. With the solve's recorded
    options (agent tasks, attempts, schema, sub-solves, tool discovery)."""
    from ..tools import ToolDiscovery
    from ..workflows.solve_resume import recorded_options
    from .solving import PLANNER_KEYS, own_planner, planner_context

    given = planner_context(planner_prompt, examples)
    files = {k: given.get(k, record.context.get(k)) for k in PLANNER_KEYS}
    options = recorded_options(solve)
    shown = options.get("discovery")
    discovery = (
        ToolDiscovery(threshold=shown.get("threshold"), limit=shown.get("limit"))
        if isinstance(shown, dict)
        else ToolDiscovery()
    )
    try:
        planner = own_planner(
            llm,
            registry,
            choice,
            planner_prompt=Path(files["planner_prompt"]) if files["planner_prompt"] else None,
            examples=Path(files["examples"]) if files["examples"] else None,
            agent_tasks=bool(options["agent_tasks"]),
            max_attempts=int(options["max_attempts"]),
            structured=bool(options["structured"]),
            sub_solves=bool(options.get("sub_solves", False)),
            discovery=discovery,
        )
    except ConfigError as exc:
        if given:
            raise
        raise ConfigError(
            f"{exc}; solve {solve.solve_id} was asked with it (recorded with run "
            f"{record.run_id}): give it again with --planner-prompt FILE / --examples FILE"
        ) from None
    resumable = solve.parent is None and st.session_of_solve(solve.solve_id) is None
    if given and resumable:  # recorded: the runs of later rounds, and the run a resume reads
        st.context.update(given)
        st.update_context(record.run_id, given)
    return planner
