"""``dagagent chat --session NAME`` and ``dagagent sessions``: conversations
(:class:`dagagent.Session`) on the command line; ``dagagent ask --session NAME GOAL`` (in
:mod:`dagagent.cli.ask`) asks one turn of one.

``chat`` reads one question a line from stdin and answers each as the next turn of the
session (started when new): progress on stderr, each answer on stdout. An empty line or the
end of input ends it; so does ``/exit``. A turn that ends without an answer (gave up, no valid
plan...) is reported and the conversation goes on. A turn that had not ended when the session
was last used (its process died, or it paused for a person's decision) is resumed first.

``--deadline`` and the budget options (``--max-tokens-total``, ``--max-cost``,
``--max-model-calls``, ``--max-tool-calls``) bound each turn afresh, not the conversation: a
turn that runs out is reported and the next line is the next turn.

Exit codes (``chat``): 0 the input ended; 2 a bad option or no model; 4 the store cannot be
used; 6 the last turn is still paused (a task waits for a person's decision: ``dagagent
approve``, then ``dagagent chat`` again); 8 (9) the input ended, and the last turn that ran
out ran out of time (budget); 10 the Temporal server cannot be reached (``--executor
temporal``, where each turn runs on ``dagagent worker`` processes); 130 interrupted (Ctrl-C;
the turn under way is recorded as cancelled).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from ..errors import ConfigError
from ..tools import DEFAULT_THRESHOLD
from ._app import (
    EXIT_BUDGET,
    EXIT_DEADLINE,
    EXIT_OK,
    EXIT_PAUSED,
    Interrupted,
    app,
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
    ExamplesOpt,
    ExecutorOpt,
    MaxAttemptsOpt,
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
    PayloadStoreOpt,
    PlannerPromptOpt,
    PolicyOpt,
    PricesOpt,
    SkillsOpt,
    StoreOpt,
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
    TurnDeadlineOpt,
    discovery_of,
    temporal_security,
)
from .rules import ApprovalRules

if TYPE_CHECKING:
    from ..store import RunStore
    from ..workflows import Solution

__all__ = ["ContextTokensOpt", "KeepTurnsOpt", "SessionOpt", "session_turn"]

SessionOpt = Annotated[
    str | None,
    typer.Option(
        "--session",
        metavar="NAME",
        help="Ask as the next turn of the conversation NAME (started when new): the planner "
        "and the joiner see the earlier turns, and a plan may reuse their outputs as "
        "${turnN.task}. See 'dagagent sessions'.",
    ),
]
ContextTokensOpt = Annotated[
    int,
    typer.Option(
        "--context-tokens",
        min=1,
        metavar="N",
        help="With --session: past about N tokens of earlier turns, the oldest are "
        "summarised by one model call (recorded with the turn).",
    ),
]
KeepTurnsOpt = Annotated[
    int,
    typer.Option(
        "--keep-turns",
        min=1,
        metavar="N",
        help="With --session: the latest N turns a summary leaves word for word.",
    ),
]


async def session_turn(
    *,
    question: str,
    name: str,
    registry: Any,
    llm: Any,
    store: RunStore,
    max_tokens: int,
    keep: int,
    rules: ApprovalRules,
    no_wait: bool,
    **options: Any,
) -> Solution:
    """One turn of session ``name`` (``ask --session``): its last turn first, when it had not
    ended, then ``question``. The resumed turn's answer goes to stderr."""
    from ..workflows import Session

    async with Session(
        name, registry, llm, store=store, max_tokens=max_tokens, keep=keep, **options
    ) as session:
        resumed = await _resume_last(session, rules, no_wait=no_wait)
        if resumed is not None and not resumed.ok:
            return resumed  # still paused (or failed again): the new question waits
        return await session.ask(question)


def _rules_of_turn(session: Any, given: ApprovalRules) -> ApprovalRules:
    """The approval rules the session's last turn was asked with (kept with its runs, as
    ``dagagent resume`` applies them), else ``given`` (a turn asked without rules, or one
    that stopped before its first run was recorded)."""
    from ..errors import StoreError
    from .rules import recorded_rules

    store = session.store
    try:
        solve = store.get_solve(session.record.last.solve_id)
    except StoreError:
        return given
    for rnd in reversed(solve.rounds):
        if rnd.run_id is None:
            continue
        try:
            record = store.get_run(rnd.run_id)
        except StoreError:
            continue
        if "approval" not in record.context:
            return given
        kept = recorded_rules(record)
        if given and given.context() != kept.context():
            err.print(
                f"note: turn {session.unfinished} was asked with {kept.describe()}: those "
                "apply to its resume; the rules given now apply to the turns after it",
                markup=False,
                highlight=False,
            )
        return kept
    return given


async def _resume_last(
    session: Any, given: ApprovalRules, *, no_wait: bool = False
) -> Solution | None:
    """Continue the session's last turn when it had not ended, checked by the approval rules
    it was asked with (``given`` when none are on record); say so on stderr."""
    from ..approval import Policy
    from ..results import SolveStatus
    from ..text import printable
    from .approve import run_interceptors

    waiting = session.unfinished
    if waiting is None:
        return None
    last = session.record.last
    if last.status is SolveStatus.RUNNING:
        raise ConfigError(
            f"turn {waiting} of session {session.name!r} is running in another process "
            f"({last.solve_id}): wait for it, or stop it, before asking the next question"
        )
    err.print(
        f"resuming turn {waiting} of session {session.name} ({last.status.value}): "
        f"{printable(last.question)}",
        markup=False,
        highlight=False,
    )
    rules = _rules_of_turn(session, given)
    checks: dict[str, Any] = {}
    store = session.store
    context = store.context
    if rules is not given:  # the session's own options carry the rules given now
        policies = run_interceptors(
            None, session.registry, approve=False, rules=rules, no_wait=no_wait
        )
        first = policies[0] if policies and isinstance(policies[0], Policy) else None
        checks = {"policy": first, "interceptors": policies[1:] if first else policies}
        # the turn's later rounds' runs are recorded with the rules they run with, so that
        # one of them that pauses is resumed with them too
        store.context = {k: v for k, v in context.items() if k != "approval"}
        if rules:
            store.context["approval"] = rules.context()
    try:
        solution: Solution | None = await session.resume(**checks)
    finally:
        store.context = context
    if solution is not None and solution.ok:
        err.print(
            f"turn {waiting} answered: {printable(solution.answer_text)}",
            markup=False,
            highlight=False,
        )
    return solution


@app.command("chat")
@guard
def chat_cmd(
    ctx: typer.Context,
    session: str = typer.Option(
        ...,
        "--session",
        metavar="NAME",
        help="The conversation: started when new, continued when it is on record.",
    ),
    tools: ToolsOpt = None,
    mcp: McpOpt = None,
    skills: SkillsOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    max_rounds: int = typer.Option(
        3, "--max-rounds", min=1, help="Rounds of plan, run and join at most, per turn."
    ),
    no_stream: bool = typer.Option(
        False, "--no-stream", help="Wait for each whole plan before running any task."
    ),
    max_attempts: MaxAttemptsOpt = 3,
    max_tools: MaxToolsOpt = DEFAULT_THRESHOLD,
    agent_tasks: AgentTasksOpt = False,
    sub_solves: SubSolvesOpt = False,
    no_schema: NoSchemaOpt = False,
    timeout: TimeoutOpt = 60.0,
    max_tokens: MaxTokensOpt = None,
    planner_prompt: PlannerPromptOpt = None,
    examples: ExamplesOpt = None,
    deadline: TurnDeadlineOpt = None,
    max_tokens_total: MaxTokensTotalOpt = None,
    max_cost: MaxCostOpt = None,
    max_model_calls: MaxModelCallsOpt = None,
    max_tool_calls: MaxToolCallsOpt = None,
    prices: PricesOpt = None,
    approve: ApproveOpt = False,
    ask: AskOpt = None,
    policy_file: PolicyOpt = None,
    no_wait: NoWaitOpt = False,
    store: StoreOpt = None,
    context_tokens: ContextTokensOpt = 2000,
    keep_turns: KeepTurnsOpt = 2,
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
) -> None:
    """Talk with the tools: each line of stdin is the next question of the conversation
    --session NAME, answered by a solve that sees the earlier turns (and may reuse their
    outputs). Answers on stdout, progress on stderr; an empty line, /exit or the end of input
    ends it. --ask, --policy and --approve check every turn's tool calls as in 'ask'; a turn
    that had not ended is resumed with the rules it was asked with. --deadline and the
    budget options bound each turn afresh (a turn that runs out is reported, and the next
    line is the next turn). Exit 0 when the input ended, 2 a bad option, 6 a turn is paused
    (a call waits for a person's decision), 8 (9) the input ended and the last turn that ran
    out ran out of time (budget), 10 the Temporal server cannot be reached (--executor
    temporal: each turn runs on 'dagagent worker' processes), 130 interrupted."""
    import asyncio

    import anyio.to_thread

    from ..settings import RunSettings
    from ..store import RunStore, check_session_name, default_store_path
    from ..text import printable
    from ..tools._loop import run_own_loop
    from ..workflows import Session
    from .approve import confirm_plan
    from .ask import AskProgress, exit_code_of, report_solution, temporal_executor
    from .recording import recorded_tools_spec, tools_context
    from .signals import stoppable
    from .solving import solve_setup

    check_session_name(session)
    run_executor = temporal_executor(
        executor,
        temporal_address,
        temporal_namespace,
        task_queue,
        payload_store,
        temporal_security(ctx, temporal=executor == "temporal"),
    )
    # The deadline is each turn's: streamed answers are bounded by it, as in 'ask'.
    choice = ModelChoice(model, base_url, timeout, max_tokens, deadline, None)
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
    budget, price_table = setup.budget, setup.prices
    path = default_store_path(store)
    # What each turn's runs are recorded with, as 'ask' records them: 'approve', 'resume'
    # and a later resume of a turn load the same tools and apply the same rules.
    context = tools_context(recorded_tools_spec(tools, mcp or ()), mcp or (), skills)
    context.update(choice.to_record(llm))
    if rules:
        context["approval"] = rules.context()
    progress = AskProgress()
    stdin = sys.stdin

    def confirm(graph: Any) -> bool:
        return confirm_plan(graph, registry)

    def say(text: str) -> None:
        out.print(printable(text, lines=True), markup=False, highlight=False)

    async def main() -> int:
        async with (
            llm,
            Session(
                session,
                registry,
                llm,
                store=run_store,
                max_tokens=context_tokens,
                keep=keep_turns,
                max_rounds=max_rounds,
                stream=not no_stream,
                agent_tasks=agent_tasks,
                max_attempts=max_attempts,
                structured=not no_schema,
                model_settings=choice.settings(),
                listeners=[progress],
                policy=first,
                interceptors=interceptors,
                confirm=confirm if approve else None,
                planner=planner,
                budget=budget,
                prices=price_table,
                sub_solves=sub_solves,
                discovery=discovery_of(max_tools),
                settings=RunSettings(executor=run_executor, on_failure="continue"),
            ) as chat,
        ):
            ran_out = EXIT_OK  # the exit code of the last turn that ran out of time or budget
            n = len(chat.turns)
            err.print(
                f"session {session}: {n} earlier turn{'s' if n != 1 else ''}; one question a "
                "line, an empty line or /exit ends it",
                markup=False,
                highlight=False,
            )
            resumed = await stoppable(_resume_last(chat, rules, no_wait=no_wait))
            if resumed is not None:
                report_solution(resumed, path)
                if resumed.ok:
                    say(resumed.answer_text)
                elif chat.unfinished is not None:
                    return EXIT_PAUSED  # still waits for a person: nothing else can go on
            while True:
                line = await anyio.to_thread.run_sync(stdin.readline)
                question = line.strip()
                if not question or question in ("/exit", "/quit"):
                    return ran_out
                # Each turn has the whole deadline: it is counted from the turn's start.
                solution = await stoppable(chat.ask(question, deadline_s=deadline))
                report_solution(solution, path)
                code = exit_code_of(solution)
                if solution.ok:
                    say(solution.answer_text)
                elif code == EXIT_PAUSED:
                    return EXIT_PAUSED
                elif code in (EXIT_DEADLINE, EXIT_BUDGET):
                    ran_out = code

    with RunStore(path, context=context or None) as run_store:
        try:
            code = run_own_loop(main)
        except (KeyboardInterrupt, asyncio.CancelledError):
            raise Interrupted(
                f"interrupted: the turn under way in session {session} is recorded as cancelled"
            ) from None
    raise typer.Exit(code)


@app.command("sessions")
@guard
def sessions_cmd(
    name: str | None = typer.Argument(
        None, metavar="[NAME]", help="Show this session's turns instead of the list."
    ),
    limit: int = typer.Option(20, "--limit", "-n", min=1, help="Show at most N sessions."),
    store: StoreOpt = None,
    json_out: bool = typer.Option(
        False,
        "--json",
        help='Print {"store", "sessions"} (or, with NAME, {"store", "session"}: name, created, '
        "options, turns) as JSON.",
    ),
) -> None:
    """List the conversations on record (name, turns, when it last moved, its latest
    question and how that turn ended), or, with NAME, every turn of one: its solve (see
    'dagagent show SOLVE'), question, status and answer."""
    from ..errors import StoreError
    from ..store import check_session_name, locate_store
    from ..text import printable, shorten
    from .render import print_json
    from .runs import _when, open_store

    location = locate_store(store)
    path = location.path
    if name is not None:
        check_session_name(name)
        with open_store(store) as st:
            record = st.get_session(name)
        if record is None:
            raise StoreError(f"no session {name!r} in {path} (see 'dagagent sessions')")
        if json_out:
            print_json(out, {"store": str(path), "session": record.model_dump(mode="json")})
            return
        out.print(
            f"session {record.name} in {path}: {len(record.turns)} turns",
            markup=False,
            highlight=False,
        )
        table = Table(box=box.SIMPLE_HEAD)
        for column in ("turn", "solve", "status", "question", "answer"):
            table.add_column(column, no_wrap=column in ("turn", "solve", "status"))
        for t in record.turns:
            answer = "" if t.answer is None else shorten(t.answer, 60)
            table.add_row(
                str(t.turn),
                t.solve_id,
                Text(t.status.value),
                Text(printable(shorten(t.question, 60))),
                Text(printable(answer)),
            )
        out.print(table)
        return
    listed = []
    if path.exists():
        with open_store(store) as st:
            listed = st.list_sessions(limit)
    if json_out:
        print_json(
            out, {"store": str(path), "sessions": [s.model_dump(mode="json") for s in listed]}
        )
        return
    out.print(
        f"{'sessions' if listed else 'no sessions recorded'} in {path}",
        markup=False,
        highlight=False,
    )
    if not listed:
        return
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("name", "turns", "last", "status", "latest question"):
        table.add_column(column, no_wrap=column != "latest question")
    for s in listed:
        table.add_row(
            Text(s.name),
            str(s.turns),
            _when(s.updated, seconds=False),
            Text(s.last_status.value if s.last_status is not None else "-"),
            Text(printable(shorten(s.last_question, 60))),
        )
    out.print(table)
