"""Resuming a solve (:func:`resume_solve`): a paused one (its round's run waited for a
person) or an interrupted one (its process died, in any phase: planning, running, joining,
between rounds) goes on from its records, as the solve would have gone on had nothing
stopped it.

Everything the rest of the solve needs is rebuilt from the solve's records in the store, not
from memory: its options (rounds, failure policy, agent tasks...), the goal, every earlier
round (its run's plan and results, the joiner's decision, the feedback) and the round that
was under way:

- its run was paused, or was running when the process died: it continues **in place** (same
  run id) exactly as :func:`dagagent.resume` continues a run: what succeeded stands, a call
  with side effects that took effect is not made again and one in doubt is resolved (see
  :mod:`dagagent.runner._effects`), then the joiner decides;
- its run had ended (the process died before the joiner's decision was recorded): the
  joiner decides about it;
- it was being planned (no run with a plan on record): it is planned again (the model call
  that was cut short never completed);
- the joiner had asked for another round: the next round is planned, with its feedback;
- the solve's last round had ended it (answered, gave up...) but the solve's own end was
  not recorded: it ends so.

**Sub-solves** (tasks with ``"solve": true``) are resumed by their parent, never on their
own: when the parent's run goes on, a sub-solve that was under way goes on from its records,
within the parent's budget, and one that had answered gives its recorded answer (see
:mod:`dagagent.workflows.subsolve`). What the sub-solves spent before counts for the parent
again, and so do the tool calls every run made before (the guardrails count on).

Model calls that completed are not made again: each round that ended keeps its plan, run and
decision, and a step that runs again because what it decided was not recorded (a plan whose
run had not started, a joiner's decision not yet written) gets the answers its calls had on
record instead of asking the model again (see :mod:`._replay`; a call whose record is not
faithful, cut to its bound or redacted, is made again).

::

    solution = await dagagent.solve(goal, registry, llm, policy=policy, store="runs.db")
    # solution.status is paused (or the process was killed); then, from any process:
    solution = await dagagent.resume_solve(solution.solve_id, registry, llm,
                                           store="runs.db", policy=policy)
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from ..approval import Approval
from ..budget import Prices
from ..errors import DecisionError, StoreError
from ..graph import validate
from ..planners import JoinDecision
from ..planners.conversation import Conversation
from ..results import RunResult, RunStatus
from ..runner import recorded_calls
from ..settings import RunSettings
from ..store import RoundRecord, RunRecord, RunStore, SolveRecord
from ..tools import ToolDiscovery, connected
from .resume import continue_claimed, record_decision
from .solution import Round, Solution
from .solve import SOLVE_SETTINGS, Confirm, Resumed, new_state
from .subsolve import recorded_below

if TYPE_CHECKING:
    from ..approval import Policy
    from ..events import Listener
    from ..llm import LLM, ModelSettings
    from ..planners import LLMPlanner
    from ..runner import CallLedger, Interceptor
    from ..tools import Registry

__all__ = [
    "paused_solve",
    "recorded_options",
    "resumable_solve",
    "resume_solve",
    "resume_solve_sync",
]

#: The options of a solve recorded before solves recorded theirs: :func:`solve`'s defaults.
_DEFAULTS: dict[str, Any] = {
    "max_rounds": 3,
    "stream": True,
    "agent_tasks": False,
    "max_attempts": 3,
    "structured": True,
    **SOLVE_SETTINGS.to_record(),
}


def recorded_options(record: SolveRecord) -> dict[str, Any]:
    """The options solve ``record`` was started with (rounds, agent tasks, attempts,
    sub-solves, tool discovery...), with :func:`~dagagent.solve`'s defaults for those a solve
    recorded before it recorded them."""
    return {**_DEFAULTS, **(record.options or {})}


def resumable_solve(store: RunStore, ref: str) -> tuple[SolveRecord, RoundRecord | None]:
    """The solve ``ref`` names (its id, or the id or a unique prefix of one of its rounds'
    runs), paused or interrupted (its process died), and its last round (``None``: it died
    before its first round was recorded). Raises :class:`~dagagent.errors.StoreError` when
    there is no such solve and :class:`~dagagent.errors.DecisionError` when it is neither
    paused nor interrupted."""
    try:
        record = store.get_solve(ref)
    except StoreError:
        run_id = store.resolve(ref)  # no solve of that id: one of its runs, then
        found = store.solve_of_run(run_id)
        if found is None:
            raise StoreError(
                f"run {run_id} is not a round of a solve: resume it with dagagent.resume "
                f"(dagagent resume {run_id})"
            ) from None
        record = found
    if record.status not in ("paused", "interrupted"):
        raise DecisionError(
            f"solve {record.solve_id} is {record.status}, not paused or interrupted: there is "
            "nothing to resume"
        )
    last = record.rounds[-1] if record.rounds else None
    if record.status == "paused" and (
        last is None or last.outcome != "paused" or last.run_id is None
    ):
        raise DecisionError(
            f"solve {record.solve_id} is paused but its record names no paused round: it "
            "cannot be resumed"
        )
    return record, last


def paused_solve(store: RunStore, ref: str) -> tuple[SolveRecord, RoundRecord]:
    """:func:`resumable_solve` for a solve with a round to go on with."""
    record, last = resumable_solve(store, ref)
    if last is None:
        raise DecisionError(
            f"solve {record.solve_id} stopped before its first round: resuming it plans anew"
        )
    return record, last


def _earlier_round(store: RunStore, r: RoundRecord) -> Round:
    """A round before the paused one, from its record and its run's."""
    run = store.get_run(r.run_id) if r.run_id is not None else None
    decision = JoinDecision.model_validate(r.decision) if r.decision is not None else None
    return Round(
        number=r.round,
        plan=run.plan if run is not None else None,
        result=run.as_result() if run is not None else None,
        decision=decision,
        feedback=r.feedback,
        outcome=r.outcome,
        reason=r.reason,
    )


async def resume_solve(
    ref: str,
    registry: Registry,
    llm: LLM,
    *,
    store: RunStore | str | Path | None = None,
    decisions: Mapping[str, Approval] | None = None,
    decided_by: str | None = None,
    policy: Policy | str | Path | None = None,
    interceptors: Sequence[Interceptor] = (),
    listeners: Sequence[Listener] = (),
    executor: str | Any | None = None,
    confirm: Confirm | None = None,
    model_settings: ModelSettings | None = None,
    planner: LLMPlanner | None = None,
    prices: Prices | str | Path | None = None,
    conversation: Conversation | None = None,
    discovery: ToolDiscovery | None = None,
) -> Solution:
    """Continue the paused or interrupted solve ``ref`` (its id, or one of its rounds' run
    ids) recorded in ``store`` (see the module docstring). Returns its :class:`Solution`:
    every round, those before the pause included, and the usage of the whole solve.

    ``decisions``: ``{task id: Approval}`` about the paused run's waiting calls, recorded
    first (as ``dagagent approve`` would); decisions recorded earlier are used too.
    ``policy`` and ``interceptors`` should be the solve's again (the policy hands each
    decision to its call). The other options (rounds, failure policy, agent tasks,
    executor...) are those the solve was started with; ``executor`` overrides the
    executor, ``confirm`` is :func:`~dagagent.solve`'s, for the rounds after the paused one,
    and so are ``model_settings``, ``planner`` and ``prices`` (the
    :class:`~dagagent.Prices` the resumed solve's calls are costed at, or a prices file over
    the defaults, as for :func:`~dagagent.solve`; not recorded: give them again).
    ``conversation``: a session's turn's (:meth:`dagagent.Session.resume` gives it).
    ``discovery``: how a large registry is shown (default: the threshold and limit the solve
    recorded; an ``embed`` function is not recorded: give it again).

    Raises :class:`~dagagent.errors.StoreError` if there is no such solve and
    :class:`~dagagent.errors.DecisionError` if it is neither paused nor interrupted (running,
    perhaps resumed by another process, or finished) or a decision is refused; nothing runs
    then.
    """
    if prices is not None and not isinstance(prices, Prices):
        prices = Prices.load(prices)  # a bad file is a ConfigError before anything is opened
    opened = store if isinstance(store, RunStore) else RunStore(store)
    try:
        record, last = resumable_solve(opened, ref)
        if (record.options or {}).get("executor") == "temporal":
            raise DecisionError(
                f"solve {record.solve_id} runs on Temporal: its workflow goes on (or waits for "
                "decisions) on the server, not in this process; follow it there with "
                "dagagent.workflows.temporal_solve.attach_solve (dagagent attach "
                f"{record.solve_id}), which hands it the decisions on record"
            )
        turn = opened.session_of_solve(record.solve_id)
        if turn is not None and conversation is None:
            raise DecisionError(
                f"solve {record.solve_id} is turn {turn[1]} of session {turn[0]!r}: resume it "
                f"as a turn, with the conversation it was asked in (Session.resume(), or "
                f"'dagagent chat --session {turn[0]}')"
            )
        if record.parent is not None:
            p = record.parent
            raise DecisionError(
                f"solve {record.solve_id} is a sub-solve of {p.describe()}: resume solve "
                f"{p.solve_id}, which resumes it within its budget (dagagent resume "
                f"{p.solve_id})"
            )
        return await _resume(
            opened,
            record,
            last,
            registry,
            llm,
            decisions=decisions,
            decided_by=decided_by,
            executor=executor,
            policy=policy,
            interceptors=interceptors,
            listeners=listeners,
            confirm=confirm,
            model_settings=model_settings,
            planner=planner,
            prices=prices,
            conversation=conversation,
            discovery=discovery,
        )
    finally:
        if opened is not store:
            opened.close()


async def resume_recorded(
    store: RunStore, solve_id: str, registry: Registry, llm: LLM, **options: Any
) -> Solution:
    """Resume sub-solve ``solve_id`` (paused or interrupted) from its records, within its
    parent's run: ``options`` are those of :func:`~.solve.new_state` that a parent passes on
    (its policy, interceptors, prices, ledger, the child's depth and deadline, and the
    parent's ledger of spending, ``above``). The tools' connections are the parent's."""
    record, last = resumable_solve(store, solve_id)
    return await _resume(store, record, last, registry, llm, connect=False, **options)


async def _resume(
    opened: RunStore,
    record: SolveRecord,
    last: RoundRecord | None,
    registry: Registry,
    llm: LLM,
    *,
    decisions: Mapping[str, Approval] | None = None,
    decided_by: str | None = None,
    executor: Any = None,
    connect: bool = True,
    listeners: Sequence[Listener] = (),
    **state_options: Any,
) -> Solution:
    """The resume of solve ``record`` whose last round is ``last``: see the module
    docstring. ``connect``: a top solve's resume, which opens the tools' connections and
    counts on its ledger the tool calls its runs and its sub-solves' made; a sub-solve's
    (``False``) has its parent's connections and ledger, which counted them already."""
    options = recorded_options(record)
    run = _round_run(opened, last)
    if run is not None:
        validate(run.plan, registry)  # before anything is claimed: the tools are there
    state = new_state(
        record.goal,
        registry,
        llm,
        solve_id=record.solve_id,
        options=options,
        settings=RunSettings.from_record(
            options, **({"executor": executor} if executor is not None else {})
        ),
        listeners=listeners,
        store=opened,
        **{"interceptors": (), "policy": None, "confirm": None, **state_options},
    )
    state.calls.seed(record.calls, record.usage)  # what the rounds before used
    # The planner's, replanner's and joiner's answers on record are given again, not
    # asked for again, where the step they were for runs again (see _replay).
    state.recorded.load(record.calls, faithful=not state.calls.redaction)
    if record.children:  # and what its sub-solves used
        state.spending.spend_below(recorded_below(opened, record.solve_id))
    if connect:  # a top solve: its guardrails count on from every call its runs made
        _restore_calls(opened, record, registry, state.ledger)
    going_on = last is not None and last.outcome in ("paused", "running", "interrupted")
    done = [r for r in record.rounds if not (going_on and r is last)]
    earlier = [_earlier_round(opened, r) for r in done]
    outputs: dict[str, Any] = {}  # every success of the rounds before: task id -> output
    for rnd in earlier:
        if rnd.result is not None:
            outputs.update(rnd.result.outputs)
    state.rounds.extend(earlier)
    if run is not None:
        for task_id, approval in (decisions or {}).items():
            record_decision(opened, run.run_id, task_id, approval, registry, by=decided_by)
    # The tools' servers, each opened once (all at the same time) for every round left.
    async with connected(registry) if connect else _nothing():
        opened.claim_solve(record.solve_id)
        try:
            if last is not None and not going_on:  # it ended, and its solve did not
                return await _finish_ended(state, earlier[-1], last)
            resumed = _resumed(opened, record, last, run, earlier, outputs, registry, state)
        except BaseException:
            opened.release_solve(record.solve_id)
            raise
        return await state.run(resumed)


def _restore_calls(
    store: RunStore, record: SolveRecord, registry: Registry, ledger: CallLedger
) -> None:
    """Count on ``ledger`` the tool calls of every run of solve ``record`` and of its
    sub-solves (their ledger is the solve's), as their records say."""
    for r in record.rounds:
        if r.run_id is None:
            continue
        try:
            run = store.get_run(r.run_id)
        except StoreError:
            continue  # planned, never started
        ledger.restore(recorded_calls(run.plan.tasks, run.tasks, registry))
    for child in record.children:
        _restore_calls(store, store.get_solve(child.solve_id), registry, ledger)


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


def _round_run(store: RunStore, last: RoundRecord | None) -> RunRecord | None:
    """The run of the round the solve goes on with, if it got as far as having one with a
    plan (a round killed while it was being planned has none)."""
    if last is None or last.run_id is None:
        return None
    if last.outcome not in ("paused", "running", "interrupted"):
        return None
    try:
        run = store.get_run(last.run_id)
    except StoreError:
        return None  # planned, not started: its run was never recorded
    return run if run.plan.tasks else None


def _resumed(
    store: RunStore,
    record: SolveRecord,
    last: RoundRecord | None,
    run: RunRecord | None,
    earlier: list[Round],
    outputs: dict[str, Any],
    registry: Registry,
    state: Any,
) -> Resumed:
    """Where the rounds go on: the round's run, if it has one (paused, interrupted or
    ended before the joiner decided); else a round planned anew (it was being planned), or
    the round after the last one (the joiner asked for another)."""
    previous = earlier[-1] if earlier else None
    if last is None:  # it died before its first round was recorded
        return Resumed(round=None, previous=None, outputs=outputs, first=1)
    if run is None:  # the round was being planned: planned again
        return Resumed(
            round=None, previous=previous, outputs=outputs, first=last.round, feedback=last.feedback
        )
    return Resumed(
        round=Round(number=last.round, plan=run.plan, feedback=last.feedback),
        previous=previous,
        outputs=outputs,
        run_id=run.run_id,
        go_on=_going_on(store, run, registry, state, None),
    )


async def _finish_ended(state: Any, rnd: Round, last: RoundRecord) -> Solution:
    """The solve's last round ended (and is on record) but the solve's end is not: it ends
    as its last round did."""
    from ..results import SolveStatus

    outcome = last.outcome
    if outcome == "replan":  # the joiner asked for another round: it comes now
        return await state.run(  # type: ignore[no-any-return]
            Resumed(
                round=None,
                previous=rnd,
                outputs={
                    k: v
                    for r in state.rounds
                    if r.result is not None
                    for k, v in r.result.outputs.items()
                },
                first=last.round + 1,
                feedback=rnd.decision.feedback if rnd.decision is not None else None,
            )
        )
    status = {
        "answered": SolveStatus.ANSWERED,
        "gave_up": SolveStatus.GAVE_UP,
        "budget_exhausted": SolveStatus.BUDGET_EXHAUSTED,
        "timed_out": SolveStatus.TIMED_OUT,
        "cancelled": SolveStatus.CANCELLED,
    }.get(outcome, SolveStatus.FAILED)
    decision = rnd.decision if status is SolveStatus.ANSWERED else None
    reason = last.reason or (f"answered in round {last.round}" if decision else outcome)
    return await state.end(status, reason, decision=decision)  # type: ignore[no-any-return]


def _going_on(
    store: RunStore, run: RunRecord, registry: Registry, state: Any, executor: Any
) -> Callable[[], Awaitable[RunResult]]:
    """How the paused round's run goes on: claimed now (its decisions used once), continued
    when the rounds start again. A run that was resumed on its own since (``dagagent.resume``)
    and has ended is taken as it ended."""
    if run.status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED):
        ended = run.as_result()  # the round's run ended before the joiner decided

        async def as_it_ended() -> RunResult:
            return ended

        return as_it_ended
    run_id, answers = store.claim_resume(run.run_id)  # DecisionError: not paused
    # The executor the run was started with, unless one was given.
    settings = state.settings if executor is not None else None

    async def go_on() -> RunResult:
        return await continue_claimed(
            store,
            run_id,
            answers,
            registry,
            settings=settings or state.settings.but(executor=run.executor),
            interceptors=state.interceptors,
            listeners=state.run_listeners,
            llm=state.agent_llm,
            agent_runner=state.agent_runner,
            ledger=state.ledger,
        )

    return go_on


def resume_solve_sync(ref: str, registry: Registry, llm: LLM, **options: Any) -> Solution:
    """:func:`resume_solve` for scripts: runs its own event loop (do not call it from async
    code)."""

    async def main() -> Solution:
        return await resume_solve(ref, registry, llm, **options)

    return anyio.run(main)
