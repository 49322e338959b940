"""``dagagent ask GOAL``: from a goal to an answer (:func:`dagagent.solve`).

Progress goes to stderr as it happens (rounds, tasks as they are planned and finish, the
joiner's decisions, what the model is writing while it writes, each rejected attempt with its
issues); the answer comes last on stdout, or, on a terminal, as the joiner writes it.
``--json`` prints the whole solution, every model call included, as one JSON object instead.

``--deadline`` bounds the whole solve; ``--max-tokens-total``, ``--max-cost``,
``--max-model-calls`` and ``--max-tool-calls`` are its budget (``--prices FILE`` extends the
price table costs come from).

Exit codes: 0 answered; 1 gave up, or the joiner gave no usable decision; 2 a bad option, no
model configured, or a model that cannot be used; 3 no valid plan; 6 paused (a round's run
waits for a person's decision: ``dagagent approve``, then ``dagagent resume RUN`` continues
the solve); 8 the deadline passed; 9 the budget ran out before an answer; 130 interrupted.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import typer

from ..errors import ConfigError, JoinerError, LLMError, PlanningError
from ..results import FailurePolicy, InDoubtPolicy
from ..settings import RunSettings
from ..tools import DEFAULT_THRESHOLD
from ._app import (
    EXIT_BUDGET,
    EXIT_DEADLINE,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_PAUSED,
    EXIT_PLANNING,
    EXIT_RECORD,
    EXIT_USAGE,
    Interrupted,
    app,
    deadline_left,
    err,
    guard,
    out,
)
from .options import (
    AgentTasksOpt,
    ApproveOpt,
    AskOpt,
    BaseUrlOpt,
    BudgetOptions,
    DeadlineOpt,
    ExamplesOpt,
    ExecutorOpt,
    MaxAttemptsOpt,
    MaxConcurrencyOpt,
    MaxCostOpt,
    MaxModelCallsOpt,
    MaxTokensOpt,
    MaxTokensTotalOpt,
    MaxToolCallsOpt,
    MaxToolsOpt,
    McpOpt,
    ModelChoice,
    ModelOpt,
    NoSchemaOpt,
    NoWaitOpt,
    OtelOpt,
    PayloadStoreOpt,
    PlannerPromptOpt,
    PolicyOpt,
    PricesOpt,
    SkillsOpt,
    StoreOpt,
    StreamTimeoutOpt,
    SubSolvesOpt,
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
    temporal_options,
    temporal_security,
)
from .otel import configure_otel
from .recording import recorded_tools_spec, tools_context
from .run import paused_hint
from .sessions import ContextTokensOpt, KeepTurnsOpt, SessionOpt, session_turn
from .solving import planner_context, solve_setup

if TYPE_CHECKING:
    from ..events import Event
    from ..store import RunStore
    from ..workflows import Solution
    from .writing import ModelProgress

__all__ = [
    "AskProgress",
    "ask_cmd",
    "attach_and_report",
    "exit_code_of",
    "report_solution",
    "solve_executor",
    "solve_interrupted",
    "temporal_executor",
]


def temporal_executor(
    executor: str,
    address: str | None,
    namespace: str | None,
    task_queue: str | None,
    payloads: Path | None,
    security: Mapping[str, Any] | None = None,
) -> Any:
    """The executor ``--executor`` names, the Temporal one made with its options (and
    ``security``'s ``tls`` and ``api_key``, see :func:`~.options.temporal_security`); a
    :class:`ConfigError` for a Temporal option without ``--executor temporal``."""
    given = temporal_options(address, namespace, task_queue, payloads)
    if executor != "temporal":
        names = {
            "address": "--temporal-address",
            "namespace": "--temporal-namespace",
            "task_queue": "--task-queue",
            "payloads": "--payload-store",
        }
        for key in given:
            raise ConfigError(f"{names[key]} needs --executor temporal")
        return executor
    from ..executors import get_executor

    return get_executor("temporal", **given, **(security or {}))


def solve_interrupted(
    progress: AskProgress, store: Path | None, run_store: RunStore | None = None
) -> str:
    """What Ctrl-C during ``ask`` leaves behind: the solve and its last round's run, on
    record as stopped, and the command that shows them; with the calls with side effects
    the stop cut off, in doubt on its runs' records (``run_store``), the command that lists
    them."""
    if progress.solve_id is None:
        return "interrupted before the first round started: nothing was recorded"
    where = f" --store {shlex.quote(str(store))}" if store is not None and str(store) else ""
    if progress.run_id is None:
        return f"interrupted: solve {progress.solve_id} is recorded as cancelled"
    doubts = calls_in_doubt(run_store, progress.solve_id) if run_store is not None else {}
    return "\n".join(
        [
            f"interrupted: solve {progress.solve_id} is recorded as cancelled in round "
            f"{progress.round}",
            f"  see its run: dagagent show {progress.run_id}{where}",
            *in_doubt_lines(doubts, where),
        ]
    )


def calls_in_doubt(store: RunStore, solve_id: str) -> dict[str, int]:
    """The runs of solve ``solve_id``'s rounds with calls with side effects in doubt on
    record (cut off by a stop, or by their workflow's end on Temporal), and how many each
    has; ``{}`` when the store cannot tell."""
    from ..errors import StoreError

    found: dict[str, int] = {}
    try:
        for r in store.get_solve(solve_id).rounds:
            if r.run_id is not None and r.run_id not in found and store.exists(r.run_id):
                n = sum(1 for e in store.effects(r.run_id) if e.in_doubt)
                if n:
                    found[r.run_id] = n
    except StoreError:
        return found
    return found


def in_doubt_lines(doubts: Mapping[str, int], where: str) -> list[str]:
    """The lines that point at each run's calls in doubt (``doubts``, see
    :func:`calls_in_doubt`; ``where``: the ``--store`` option, if any)."""
    return [
        f"  in doubt:    dagagent approvals --run {run}{where}  # {n} call"
        f"{'s' if n != 1 else ''}: check, then approve"
        for run, n in doubts.items()
    ]


class AskProgress:
    """A listener printing one line per step of a solve to stderr: rounds, tasks as they are
    planned (streamed planning) and as they finish, the joiner's decision. A sub-solve's
    steps (:class:`~dagagent.events.InSubSolve`) are printed the same way, indented by its
    depth and prefixed with its task (``  [best[1]] round 1: planning``). Untrusted text
    (ids, outputs, errors, feedback) is shortened and printed with control characters
    escaped and no markup."""

    def __init__(self, model: ModelProgress | None = None) -> None:
        self.round = 0
        self.solve_id: str | None = None
        self.run_id: str | None = None  # the last round's run
        #: Shows the model calls under way (and the joiner's answer as it is written).
        self.model = model
        self._rounds: dict[str, int] = {}  # a sub-solve's id -> its round under way
        self._within: dict[str, str] = {}  # a sub-solve's id -> what its lines begin with

    def _line(self, text: str, within: str = "") -> None:
        from ..text import printable

        err.print(printable(within + text), markup=False, highlight=False)

    def __call__(self, event: Event | Any) -> None:
        from ..events import InSubSolve

        if isinstance(event, InSubSolve):
            where = event.task_id if event.element is None else f"{event.task_id}[{event.element}]"
            within = self._within.setdefault(event.child_id, f"{'  ' * event.depth}[{where}] ")
            self._show(event.event, within, event.child_id)
        else:
            self._show(event, "", None)

    def _show(self, event: Any, within: str, child: str | None) -> None:
        """Print ``event``: the solve's own (``child`` is ``None``), or sub-solve ``child``'s,
        its lines beginning with ``within``."""
        from ..events import (
            JoinerDecided,
            ModelCallFinished,
            ModelCallRejected,
            ModelCallStarted,
            RoundFinished,
            RoundStarted,
            RunStarted,
            SubSolveFinished,
            SubSolveStarted,
            TaskAgentEvent,
            TaskFinished,
            TaskParsed,
            TaskRetrying,
        )
        from ..results import TaskStatus
        from ..text import shorten

        def line(text: str) -> None:
            self._line(text, within)

        if isinstance(event, ModelCallStarted):
            if self.model is not None:
                self.model.started(
                    event.call, event.role, event.round, event.task_id, within=within
                )
        elif isinstance(event, ModelCallFinished):
            self._call_ended(event.record, within)
        elif isinstance(event, ModelCallRejected):
            rec = event.record
            if self.model is not None:
                self.model.rejected(rec.role, rec.round, rec.task_id, rec.issues, within=within)
            else:
                from .writing import who

                line(f"{who(rec.role, rec.round, rec.task_id)}'s answer was rejected:")
                for issue in rec.issues[:8]:
                    line(f"  {shorten(issue, 300)}")
        elif isinstance(event, RoundStarted):
            if child is None:
                self.round = event.round
                self.solve_id = event.solve_id
            else:
                self._rounds[child] = event.round
            if event.parent_id is None:
                line(f"round {event.round}: planning")
            else:
                line(f"round {event.round}: replanning run {event.parent_id}")
        elif isinstance(event, RunStarted):
            if child is None:
                self.run_id = event.run_id
            n = len(event.plan.tasks)
            what = f"{n} task{'s' if n != 1 else ''}" if n else "tasks as they are planned"
            rnd = self.round if child is None else self._rounds.get(child, 0)
            line(f"round {rnd}: run {event.run_id} runs {what}")
        elif isinstance(event, TaskFinished):
            r = event.result
            detail = ""
            if r.status in (TaskStatus.FAILED, TaskStatus.DENIED) and r.error:
                detail = f": {shorten(r.error, 100)}"
            duration = f" {r.duration_s:.2f}s" if r.duration_s is not None else ""
            line(f"  {r.task_id} {r.status.value}{duration}{detail}")
        elif isinstance(event, TaskRetrying):
            line(
                f"  {event.task_id} failed (attempt {event.attempt}): "
                f"{shorten(event.error, 100)}; trying again in {event.delay_s:.1f}s"
            )
        elif isinstance(event, TaskAgentEvent):
            if event.action == "tool_call":
                line(f"  {event.task_id}: calls {event.tool}({shorten(event.args, 80)})")
        elif isinstance(event, JoinerDecided):
            if event.action == "finish":
                cites = f" (cites {', '.join(event.cites)})" if event.cites else ""
                line(f"round {event.round}: the joiner answered{cites}")
            else:
                line(
                    f"round {event.round}: the joiner asks for another plan: "
                    f"{shorten(event.feedback, 160)}"
                )
        elif isinstance(event, RoundFinished):
            if event.outcome in ("gave_up", "failed"):
                line(f"round {event.round}: {event.outcome.replace('_', ' ')}")
        elif isinstance(event, (SubSolveStarted, SubSolveFinished)):
            self._sub_solve(event, shorten)
        elif isinstance(event, TaskParsed):  # streamed planning: a task is ready
            held = " (held until the plan is whole)" if event.held else ""
            line(f"  planned {event.task_id} after {event.since_s:.2f}s{held}")

    def _sub_solve(self, event: Any, shorten: Any) -> None:
        """A sub-solve started or ended: a line under its task, among the lines of the solve
        whose task it is (a sub-solve's sub-solve: among that sub-solve's lines)."""
        from ..events import SubSolveStarted

        where = f"{event.task_id}[{event.element}]" if event.element is not None else event.task_id
        within = self._within.get(event.solve_id, "")  # "" for the solve's own tasks
        if isinstance(event, SubSolveStarted):
            self._within[event.child_id] = f"{'  ' * event.depth}[{where}] "
            what = "resumes" if event.resumed else "starts"
            self._line(
                f"  {where}: {what} sub-solve {event.child_id}: {shorten(event.goal, 100)}", within
            )
            return
        why = f": {shorten(event.reason, 100)}" if event.status != "answered" else ""
        self._line(f"  {where}: sub-solve {event.child_id} {event.status}{why}", within)

    def _call_ended(self, record: Any, within: str = "") -> None:
        """A model call ended: the progress stops showing it; a planner's or joiner's call
        gets a line (who, tokens, time; how it ended when it did not answer)."""
        from ..text import shorten
        from .writing import who

        if self.model is not None:
            self.model.ended(record.call_id)
        if record.role == "agent":
            return
        took = f" in {record.duration_s:.1f} s" if record.duration_s is not None else ""
        est = " (estimated)" if record.estimated else ""
        if record.status == "answered":
            what = f"wrote {record.output_tokens:,} tokens{est}{took}"
        elif record.status == "refused":
            what = f"was not asked: {shorten(record.error or 'refused', 300)}"
        else:
            what = f"{record.status} after {record.output_tokens:,} tokens{est}{took}"
            if record.error and record.status == "failed":
                what += f": {shorten(record.error, 160)}"
        self._line(f"{who(record.role, record.round)} {what}", within)


def exit_code_of(solution: Solution) -> int:
    """0 answered; 3 no valid plan; 2 a model that cannot be used; 5 answered (or paused) but
    not all of it recorded; 6 paused; 8 the deadline passed; 9 the budget ran out; 1
    otherwise."""
    from ..results import SolveStatus

    if (solution.ok or solution.status is SolveStatus.PAUSED) and solution.not_recorded:
        return EXIT_RECORD
    if solution.ok:
        return EXIT_OK
    if solution.status is SolveStatus.PAUSED:
        return EXIT_PAUSED
    if solution.status is SolveStatus.TIMED_OUT:
        return EXIT_DEADLINE
    if solution.status is SolveStatus.BUDGET_EXHAUSTED:
        return EXIT_BUDGET
    if isinstance(solution.error, PlanningError):
        return EXIT_PLANNING
    if isinstance(solution.error, LLMError):
        return EXIT_USAGE
    return EXIT_FAILED


def report_solution(solution: Solution, path: Path) -> None:
    """What stderr says once the solve is over (the answer itself goes to stdout)."""
    from ..results import SolveStatus
    from ..text import printable

    where = f"solve {solution.solve_id} recorded in {path}"
    if solution.not_recorded:  # never claim a record that is not all there
        where = f"the record of solve {solution.solve_id} in {path} is incomplete"
        err.print(
            f"error: {where}: not written: {'; '.join(solution.not_recorded)}",
            markup=False,
            highlight=False,
        )
    if solution.ok:
        n = len(solution.rounds)
        if "budget ran low" in solution.reason:  # the joiner's last answer, within the reserve
            err.print(f"note: {printable(solution.reason)}", markup=False, highlight=False)
        err.print(
            f"answered in {n} round{'s' if n != 1 else ''} (run {solution.run_id}; "
            f"cites {', '.join(solution.cites) or 'no task'}); {solution.usage.summary()}; "
            f"{where}",
            markup=False,
            highlight=False,
        )
        return
    last = solution.rounds[-1].result if solution.rounds else None
    if solution.status is SolveStatus.PAUSED and last is not None:
        paused_hint(last)  # what waits, and the commands that decide and continue
        err.print(
            f"solve {solution.solve_id} is paused in round {len(solution.rounds)}: 'dagagent "
            f"resume {last.run_id}' continues its run, then the joiner and the rounds after "
            f"it; {solution.usage.summary()}; {where}",
            markup=False,
            highlight=False,
        )
        return
    label = {
        SolveStatus.GAVE_UP: "gave up",
        SolveStatus.TIMED_OUT: "timed out",
        SolveStatus.BUDGET_EXHAUSTED: "budget exhausted",
    }.get(solution.status, "error")
    err.print(f"{label}: {printable(solution.reason)}", markup=False, highlight=False)
    doubts: dict[str, int] = {}
    if path.exists():  # calls its runs cut off (a run's workflow ended under it), in doubt
        from ..errors import StoreError
        from ..store import RunStore

        with contextlib.suppress(StoreError), RunStore(path, create=False) as st:
            doubts = calls_in_doubt(st, solution.solve_id)
        for line in in_doubt_lines(doubts, f" --store {shlex.quote(str(path))}"):
            err.print(line, markup=False, highlight=False)
    error = solution.error
    if isinstance(error, (PlanningError, JoinerError)):
        for i, (_raw, issues) in enumerate(error.attempts, 1):
            err.print(f"  attempt {i}:", markup=False)
            for issue in issues:
                err.print(f"    {printable(str(issue))}", markup=False, highlight=False)
    err.print(f"{solution.usage.summary()}; {where}", markup=False, highlight=False)


@app.command("ask")
@guard
def ask_cmd(
    ctx: typer.Context,
    goal: str = typer.Argument(..., help="The question or goal to answer.", metavar="GOAL"),
    tools: ToolsOpt = None,
    mcp: McpOpt = None,
    skills: SkillsOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    max_rounds: int = typer.Option(
        3,
        "--max-rounds",
        min=1,
        help="Rounds of plan, run and join at most (the last one must answer).",
    ),
    no_stream: bool = typer.Option(
        False,
        "--no-stream",
        help="Wait for the whole plan before running any task.",
    ),
    executor: ExecutorOpt = "dataflow",
    on_failure: str = typer.Option(
        "continue",
        "--on-failure",
        help="continue (default): run every branch that can run, so the joiner sees all it "
        "can; cancel: stop a round at its first failure.",
    ),
    max_concurrency: MaxConcurrencyOpt = None,
    max_attempts: MaxAttemptsOpt = 3,
    max_tools: MaxToolsOpt = DEFAULT_THRESHOLD,
    agent_tasks: AgentTasksOpt = False,
    sub_solves: SubSolvesOpt = False,
    no_schema: NoSchemaOpt = False,
    timeout: TimeoutOpt = 60.0,
    stream_timeout: StreamTimeoutOpt = None,
    max_tokens: MaxTokensOpt = None,
    planner_prompt: PlannerPromptOpt = None,
    examples: ExamplesOpt = None,
    approve: ApproveOpt = False,
    ask: AskOpt = None,
    policy_file: PolicyOpt = None,
    no_wait: NoWaitOpt = False,
    store: StoreOpt = None,
    json_out: bool = typer.Option(
        False,
        "--json",
        help="Print the whole solution (answer, rounds, usage, every model call) as JSON.",
    ),
    otel: OtelOpt = False,
    deadline: DeadlineOpt = None,
    max_tokens_total: MaxTokensTotalOpt = None,
    max_cost: MaxCostOpt = None,
    max_model_calls: MaxModelCallsOpt = None,
    max_tool_calls: MaxToolCallsOpt = None,
    prices: PricesOpt = None,
    session: SessionOpt = None,
    context_tokens: ContextTokensOpt = 2000,
    keep_turns: KeepTurnsOpt = 2,
    temporal_address: TemporalAddressOpt = None,
    task_queue: TaskQueueOpt = None,
    temporal_namespace: TemporalNamespaceOpt = None,
    payload_store: PayloadStoreOpt = None,
    temporal_api_key: TemporalApiKeyOpt = None,
    temporal_tls: TemporalTlsOpt = None,
    temporal_tls_cert: TemporalTlsCertOpt = None,
    temporal_tls_key: TemporalTlsKeyOpt = None,
    temporal_tls_ca: TemporalTlsCaOpt = None,
) -> None:
    """Answer GOAL: plan with the model, run the plan, let the model answer from the results
    or plan again (reusing every success), for at most --max-rounds rounds. Progress on
    stderr, the answer on stdout. Exit 0 answered, 1 gave up, 2 model unusable, 3 no valid
    plan, 6 paused (a task waits for a person's decision: dagagent approve, then dagagent
    resume), 8 the deadline passed, 9 the budget ran out. 'dagagent show SOLVE' shows the
    solve and every model call. With --session NAME, GOAL is the next turn of that
    conversation (started when new; a turn that did not end is resumed first). With
    --executor temporal the whole solve runs on 'dagagent worker' processes (exit 10 if the
    server cannot be reached); if this process dies, 'dagagent attach SOLVE' follows it
    again."""
    import asyncio

    from ..store import RunStore, default_store_path
    from ..text import printable
    from ..tools._loop import run_own_loop
    from ..workflows import solve
    from .approve import confirm_plan
    from .render import print_json
    from .signals import stoppable
    from .writing import ModelProgress

    if otel:
        configure_otel()
    run_executor: Any = temporal_executor(
        executor,
        temporal_address,
        temporal_namespace,
        task_queue,
        payload_store,
        temporal_security(ctx, temporal=executor == "temporal"),
    )
    if not goal.strip():
        raise ConfigError("the goal is empty: say what the answer should be about")
    choice = ModelChoice(model, base_url, timeout, max_tokens, deadline, stream_timeout)
    setup = solve_setup(
        choice,
        BudgetOptions(max_tokens_total, max_cost, max_model_calls, max_tool_calls, prices),
        approve=approve,
        tools=tools,
        mcp=mcp,
        skills=skills,
        policy_file=policy_file,
        ask=ask,
        no_wait=no_wait,
        planner_prompt=planner_prompt,
        examples=examples,
        agent_tasks=agent_tasks,
        max_attempts=max_attempts,
        structured=not no_schema,
        sub_solves=sub_solves,
        max_tools=max_tools,
    )
    registry, rules, llm, planner = setup.registry, setup.rules, setup.llm, setup.planner
    first, interceptors = setup.policy, setup.interceptors
    if rules and hasattr(run_executor, "approval"):  # on Temporal: the rules go with the solve
        from .approve import rules_to_workers

        interceptors = rules_to_workers(
            run_executor,
            rules,
            [*([first] if first else []), *interceptors],
            no_wait=no_wait,
            what="solve",
        )
        first = None
    budget, price_table = setup.budget, setup.prices
    path = default_store_path(store)
    spec = recorded_tools_spec(tools, mcp or ())
    context = tools_context(spec, mcp or (), skills)  # replan and resume load them again
    context.update(choice.to_record(llm))  # a resume asks the same model, on the same server
    context.update(planner_context(planner_prompt, examples))  # ... plans with the same planner
    approval = rules.context()
    if approval:  # what 'dagagent resume' asks with
        context["approval"] = approval
        context["on_failure"] = on_failure

    def confirm(graph: Any) -> bool:
        return confirm_plan(graph, registry)

    progress = AskProgress()  # shows what the model writes once the writer is made below
    # on Temporal, a call a lost worker left in doubt waits for a person; with --no-wait
    # nobody decides later: it is not made
    in_doubt: InDoubtPolicy = "deny" if no_wait and hasattr(run_executor, "approval") else "ask"

    with RunStore(path, context=context or None) as run_store:

        async def main() -> Solution:
            async with llm:
                if session is not None:
                    return await stoppable(session_turn(**turn_options))
                return await stoppable(
                    solve(
                        goal,
                        registry,
                        llm,
                        max_rounds=max_rounds,
                        stream=not no_stream,
                        settings=RunSettings(
                            executor=run_executor,
                            on_failure=cast(FailurePolicy, on_failure),  # checked there
                            max_concurrency=max_concurrency,
                            in_doubt=in_doubt,
                        ),
                        policy=first,
                        interceptors=interceptors,
                        listeners=[progress],
                        store=run_store,
                        agent_tasks=agent_tasks,
                        max_attempts=max_attempts,
                        structured=not no_schema,
                        confirm=confirm if approve else None,
                        model_settings=choice.settings(),
                        planner=planner,
                        budget=budget,
                        prices=price_table,
                        deadline_s=deadline_left(deadline),
                        sub_solves=sub_solves,
                        discovery=discovery_of(max_tools),
                    )
                )

        turn_options: dict[str, Any] = {
            "question": goal,
            "name": session or "",
            "registry": registry,
            "llm": llm,
            "store": run_store,
            "max_tokens": context_tokens,
            "keep": keep_turns,
            "rules": rules,
            "no_wait": no_wait,
            "max_rounds": max_rounds,
            "stream": not no_stream,
            "settings": RunSettings(
                executor=run_executor,
                on_failure=cast(FailurePolicy, on_failure),
                max_concurrency=max_concurrency,
                in_doubt=in_doubt,
            ),
            "policy": first,
            "interceptors": interceptors,
            "listeners": [progress],
            "agent_tasks": agent_tasks,
            "max_attempts": max_attempts,
            "structured": not no_schema,
            "confirm": confirm if approve else None,
            "model_settings": choice.settings(),
            "planner": planner,
            "budget": budget,
            "prices": price_table,
            "deadline_s": deadline_left(deadline),
            "sub_solves": sub_solves,
            "discovery": discovery_of(max_tools),
        }
        # What the model writes, while it writes; the joiner's answer to stdout as it is
        # written when stdout is a terminal (--json waits for the whole solution).
        writing = ModelProgress(
            err,
            answer_to=out if out.is_terminal and not json_out else None,
            live=not (approve or ask or policy_file),  # questions on the terminal: plain lines
        )
        progress.model = writing
        try:
            with writing:
                solution = run_own_loop(main)
        except (KeyboardInterrupt, asyncio.CancelledError):  # see guard: 3.10 gives the latter
            raise Interrupted(solve_interrupted(progress, store, run_store)) from None
    report_solution(solution, path)
    if json_out:
        print_json(out, solution.to_json_dict())
    elif solution.ok and writing.streamed != solution.answer_text:  # not printed as written
        out.print(printable(solution.answer_text, lines=True), markup=False, highlight=False)
    raise typer.Exit(exit_code_of(solution))


@app.command("attach")
@guard
def attach_cmd(
    ctx: typer.Context,
    solve: str = typer.Argument(
        ..., help="The solve's id (as 'dagagent ask' printed it).", metavar="SOLVE"
    ),
    store: StoreOpt = None,
    json_out: bool = typer.Option(
        False, "--json", help="Print the whole solution as JSON (as 'ask --json')."
    ),
    prices: PricesOpt = None,
    temporal_address: TemporalAddressOpt = None,
    task_queue: TaskQueueOpt = None,
    temporal_namespace: TemporalNamespaceOpt = None,
    payload_store: PayloadStoreOpt = None,
    temporal_api_key: TemporalApiKeyOpt = None,
    temporal_tls: TemporalTlsOpt = None,
    temporal_tls_cert: TemporalTlsCertOpt = None,
    temporal_tls_key: TemporalTlsKeyOpt = None,
    temporal_tls_ca: TemporalTlsCaOpt = None,
) -> None:
    """Follow solve SOLVE on Temporal (started by 'ask --executor temporal' whose process is
    gone) to its end, and record what its record lacks: its rounds, runs, model calls and
    answer. A plan waiting for approval (ask --approve) is shown and asked about again; a
    paused round goes on with the decisions recorded about its calls (dagagent approve). The
    answer on stdout; exit codes as for 'ask'. Stopping it (Ctrl-C) leaves the solve running
    on the workers. No --tools: the workers run them. The server is the one the solve
    recorded, or --temporal-address."""
    from ..store import RunStore, default_store_path

    price_table = BudgetOptions(None, None, None, None, prices).prices()
    security = temporal_security(ctx, temporal=True)  # its files read, before anything
    path = default_store_path(store)
    with RunStore(path) as run_store:
        solve_id = run_store.resolve_solve(solve) or solve
        executor = solve_executor(
            run_store,
            solve_id,
            temporal_address,
            temporal_namespace,
            task_queue,
            payload_store,
            security,
        )
        code = attach_and_report(solve_id, executor, run_store, json_out, price_table)
    raise typer.Exit(code)


def solve_executor(
    run_store: Any,
    solve_id: str,
    address: str | None,
    namespace: str | None,
    task_queue: str | None,
    payloads: Path | None,
    security: Mapping[str, Any] | None = None,
) -> Any:
    """The Temporal executor of solve ``solve_id``: on the server its record names (``ask``
    keeps it with the solve's options), the options given winning over it (and
    ``security``'s ``tls`` and ``api_key``, which are never recorded)."""
    from ..errors import StoreError
    from ..workflows.resume import resumed_executor

    given = temporal_options(address, namespace, task_queue, payloads)
    try:
        options = run_store.get_solve(solve_id).options or {}
    except StoreError:  # not on record here: the options say where
        options = {}
    recorded = options.get("temporal")
    return resumed_executor(
        "temporal",
        {"temporal": recorded} if isinstance(recorded, dict) else {},
        **given,
        **(security or {}),
    )


def attach_and_report(
    solve_id: str, executor: Any, run_store: Any, json_out: bool, prices: Any
) -> int:
    """Follow solve ``solve_id`` on Temporal to its end (``attach``, and ``resume`` of such a
    solve): a plan waiting for approval is shown and asked about on a terminal, decisions
    recorded about a paused round's calls are handed on; report as ``ask`` does; the exit
    code."""
    from ..text import printable
    from ..tools._loop import run_own_loop
    from ..workflows.temporal_solve import attach_solve
    from .approve import confirm_plan, stdin_is_terminal
    from .render import print_json
    from .signals import stoppable
    from .writing import ModelProgress

    writing = ModelProgress(err, answer_to=None, live=not stdin_is_terminal())
    progress = AskProgress(writing)

    def confirm(graph: Any) -> bool:
        return confirm_plan(graph)

    async def main() -> Solution:
        return await stoppable(
            attach_solve(
                solve_id,
                executor=executor,
                store=run_store,
                listeners=[progress],
                prices=prices,
                confirm=confirm if stdin_is_terminal() else None,
            )
        )

    try:
        with writing:
            solution = run_own_loop(main)
    except KeyboardInterrupt:
        raise Interrupted(
            f"stopped following solve {solve_id}; it goes on on the workers "
            f"(dagagent attach {solve_id} follows it again)"
        ) from None
    report_solution(solution, run_store.path)
    if json_out:
        print_json(out, solution.to_json_dict())
    elif solution.ok:
        out.print(printable(solution.answer_text, lines=True), markup=False, highlight=False)
    return exit_code_of(solution)
