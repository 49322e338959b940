"""Resuming a paused solve (:func:`resume_solve`): the round whose run waited for a person
goes on with the decisions taken, then the joiner and the rounds after it, as the solve would
have gone on had nobody needed to decide.

A solve pauses when its round's run pauses (an ``ask`` rule's question left for a person,
see :func:`dagagent.resume`). Everything the rest of the solve needs is rebuilt from the
solve's records in the store, not from memory: its options (rounds, failure policy, agent
tasks...), the goal, every earlier round (its run's plan and results, the joiner's decision,
the feedback) and the paused round's run, which continues in place (same run id) exactly as
:func:`dagagent.resume` continues a run. The model is called again only for what comes after
the paused round's run: the joiner, and the plans of later rounds.

::

    solution = await dagagent.solve(goal, registry, llm, policy=policy, store="runs.db")
    # solution.status is paused; a person decides (dagagent approve RUN TASK --allow), then,
    # from any process:
    solution = await dagagent.resume_solve(solution.solve_id, registry, llm,
                                           store="runs.db", policy=policy)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from ..approval import Approval
from ..errors import DecisionError, StoreError
from ..graph import validate
from ..planners import JoinDecision
from ..results import RunResult, RunStatus
from ..settings import RunSettings
from ..store import RoundRecord, RunRecord, RunStore, SolveRecord
from ..tools import connected
from .resume import continue_claimed, record_decision
from .solution import Round, Solution
from .solve import SOLVE_SETTINGS, Confirm, Resumed, new_state

if TYPE_CHECKING:
    from ..approval import Policy
    from ..events import Listener
    from ..llm import LLM, ModelSettings
    from ..planners import LLMPlanner
    from ..runner import Interceptor
    from ..tools import Registry

__all__ = ["paused_solve", "resume_solve", "resume_solve_sync"]

#: The options of a solve recorded before solves recorded theirs: :func:`solve`'s defaults.
_DEFAULTS: dict[str, Any] = {
    "max_rounds": 3,
    "stream": True,
    "agent_tasks": False,
    "max_attempts": 3,
    "structured": True,
    **SOLVE_SETTINGS.to_record(),
}


def paused_solve(store: RunStore, ref: str) -> tuple[SolveRecord, RoundRecord]:
    """The paused solve ``ref`` names (its id, or the id or a unique prefix of one of its
    rounds' runs) and its paused round. Raises :class:`~dagagent.errors.StoreError` when
    there is no such solve and :class:`~dagagent.errors.DecisionError` when it is not
    paused."""
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
    if record.status != "paused":
        raise DecisionError(
            f"solve {record.solve_id} is {record.status}, not paused: there is nothing to resume"
        )
    last = record.rounds[-1] if record.rounds else None
    if last is None or last.outcome != "paused" or last.run_id is None:
        raise DecisionError(
            f"solve {record.solve_id} is paused but its record names no paused round: it "
            "cannot be resumed"
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
) -> Solution:
    """Continue the paused solve ``ref`` (its id, or one of its rounds' run ids) recorded in
    ``store`` (see the module docstring). Returns its :class:`Solution`: every round, those
    before the pause included, and the usage of the whole solve.

    ``decisions``: ``{task id: Approval}`` about the paused run's waiting calls, recorded
    first (as ``dagagent approve`` would); decisions recorded earlier are used too.
    ``policy`` and ``interceptors`` should be the solve's again (the policy hands each
    decision to its call). The other options (rounds, failure policy, agent tasks,
    executor...) are those the solve was started with; ``executor`` overrides the
    executor, ``confirm`` is :func:`~dagagent.solve`'s, for the rounds after the paused one,
    and so are ``model_settings`` and ``planner`` (not recorded: give them again).

    Raises :class:`~dagagent.errors.StoreError` if there is no such solve and
    :class:`~dagagent.errors.DecisionError` if it is not paused (running, perhaps resumed by
    another process, or finished) or a decision is refused; nothing runs then.
    """
    opened = store if isinstance(store, RunStore) else RunStore(store)
    try:
        record, paused = paused_solve(opened, ref)
        assert paused.run_id is not None
        options = {**_DEFAULTS, **(record.options or {})}
        run = opened.get_run(paused.run_id)
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
            interceptors=interceptors,
            listeners=listeners,
            store=opened,
            policy=policy,
            confirm=confirm,
            model_settings=model_settings,
            planner=planner,
        )
        state.calls.seed(record.calls, record.usage)  # what the rounds before used
        earlier = [_earlier_round(opened, r) for r in record.rounds[:-1]]
        outputs: dict[str, Any] = {}  # every success of the rounds before: task id -> output
        for rnd in earlier:
            if rnd.result is not None:
                outputs.update(rnd.result.outputs)
        state.rounds.extend(earlier)
        for task_id, approval in (decisions or {}).items():
            record_decision(opened, run.run_id, task_id, approval, registry, by=decided_by)
        # The tools' servers, each opened once (all at the same time) for every round left.
        async with connected(registry):
            opened.claim_solve(record.solve_id)
            try:
                go_on = _going_on(opened, run, registry, state, executor)
            except BaseException:
                opened.release_solve(record.solve_id)
                raise
            resumed = Resumed(
                round=Round(number=paused.round, plan=run.plan, feedback=paused.feedback),
                previous=earlier[-1] if earlier else None,
                outputs=outputs,
                run_id=run.run_id,
                go_on=go_on,
            )
            return await state.run(resumed)
    finally:
        if opened is not store:
            opened.close()


def _going_on(
    store: RunStore, run: RunRecord, registry: Registry, state: Any, executor: Any
) -> Callable[[], Awaitable[RunResult]]:
    """How the paused round's run goes on: claimed now (its decisions used once), continued
    when the rounds start again. A run that was resumed on its own since (``dagagent.resume``)
    and has ended is taken as it ended."""
    if run.status in (RunStatus.SUCCEEDED, RunStatus.FAILED):
        ended = run.as_result()

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
        )

    return go_on


def resume_solve_sync(ref: str, registry: Registry, llm: LLM, **options: Any) -> Solution:
    """:func:`resume_solve` for scripts: runs its own event loop (do not call it from async
    code)."""

    async def main() -> Solution:
        return await resume_solve(ref, registry, llm, **options)

    return anyio.run(main)
