"""``solve``: from a goal to an answer, in rounds of plan → run → join.

::

    solution = await dagagent.solve("Which is warmer, Paris or Tokyo?", registry, llm)
    solution.status, solution.answer, solution.cites, solution.usage

Round 1 plans the goal (:class:`~dagagent.planners.LLMPlanner`) and runs the plan. The
joiner (:class:`~dagagent.planners.Joiner`) reads the results and either finishes (the
answer and the tasks it rests on) or asks for another plan with feedback; the next round's
plan then comes from the replanner (:func:`~dagagent.workflows.replan.revise_run`) and runs
as a child of the previous round's run, reusing every unchanged success. The last allowed
round forces a finish. The solve gives up (``gave_up``, with the reason) when a revised plan
is the same as the one before, or when a round adds no new success. Model trouble (no valid
plan, no usable decision, a model that cannot be reached) ends it as ``failed`` with the
error kept in ``Solution.error``; only a bad option raises. A round whose run pauses (an
``ask`` rule's question left for a person) ends it as ``paused``, the joiner not asked yet;
:func:`~dagagent.workflows.resume_solve` continues it from its records
(:mod:`dagagent.workflows.solve_resume`). What a solve returns is in
:mod:`dagagent.workflows.solution`.

About 500 lines for one concern, the round loop: its state, the decisions between rounds
(finish, replan, give up, fail), the records and events it writes, and the two ways a round
is planned and run (streamed, or the whole plan first), next to :func:`solve`'s options.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import anyio
import anyio.to_thread

from .. import telemetry
from ..errors import ConfigError, JoinerError, LLMError, PlanningError, StoreError
from ..events import JoinerDecided, Listener, RoundFinished, RoundStarted, get_logger
from ..graph import PlanGraph
from ..llm import MeteredLLM, UsageTracker
from ..plan import Plan
from ..planners import JoinDecision, Joiner, LLMPlanner, LLMReplanner
from ..planners.streaming import plan_and_execute_streamed
from ..results import RoundOutcome, RunResult, RunStatus, SolveStatus, TaskStatus
from ..run import execute, new_run_id
from ..runner import Interceptor
from ..settings import RunSettings
from ..store import RunStore
from ..text import jsonable, shorten
from .replan import record_of, revise_run
from .solution import Round, Solution, SolveUsage

if TYPE_CHECKING:
    from ..approval import Policy
    from ..llm import LLM
    from ..tools import Registry

__all__ = [
    "SOLVE_SETTINGS",
    "Round",
    "Solution",
    "SolveUsage",
    "new_state",
    "solve",
    "solve_sync",
]

#: How a solve runs its rounds unless told otherwise: as :func:`dagagent.execute` would, but
#: a failure does not stop the other branches (the joiner sees every result it can get).
SOLVE_SETTINGS = RunSettings(on_failure="continue")

Confirm = Callable[[PlanGraph], Union[bool, Awaitable[bool]]]  # noqa: UP007 - runtime alias


# ---------------------------------------------------------------------------- the loop


_SOLVE = {telemetry.OPERATION: "invoke_workflow", telemetry.WORKFLOW_NAME: "dagagent.solve"}


def _new_successes(result: RunResult, before: dict[str, Any]) -> list[str]:
    """Tasks that succeeded in ``result`` with an output no earlier round had for them."""
    return [
        tid
        for tid, r in result.tasks.items()
        if r.status is TaskStatus.SUCCEEDED
        and not (tid in before and jsonable(before[tid]) == jsonable(r.output))
    ]


def _failure_summary(result: RunResult, limit: int = 3) -> str:
    failures = result.failures()
    if not failures:
        counts = ", ".join(f"{n} {s}" for s, n in sorted(result.counts.items()))
        return counts or "no task ran"
    parts = []
    for r in failures[:limit]:
        detail = shorten(r.error or "no error message", 120)
        parts.append(f"{r.task_id} {r.status.value}: {detail}")
    more = len(failures) - limit
    return "; ".join(parts) + (f"; {more} more" if more > 0 else "")


@dataclass
class Resumed:
    """A paused round taken up again (see :mod:`dagagent.workflows.solve_resume`): the
    round (number, plan, feedback), the round before it, every success of the rounds before,
    the round's run and how it goes on (its result, once it has ended again)."""

    round: Round
    previous: Round | None
    outputs: dict[str, Any]
    run_id: str
    go_on: Callable[[], Awaitable[RunResult]]


class _Solve:
    """The state of one solve: its models, options, rounds and what each role used."""

    def __init__(
        self,
        goal: str,
        registry: Registry,
        llm: LLM,
        *,
        solve_id: str,
        max_rounds: int,
        stream: bool,
        settings: RunSettings,
        interceptors: Sequence[Interceptor],
        listeners: Sequence[Listener],
        agent_tasks: bool,
        max_attempts: int,
        structured: bool,
        confirm: Confirm | None,
        policy: Policy | None,
        store: RunStore | None,
    ) -> None:
        self.goal = goal
        self.policy = policy
        self.store = store
        self.registry = registry
        self.solve_id = solve_id
        self.max_rounds = max_rounds
        self.stream = stream and confirm is None
        self.settings = settings
        self.interceptors = tuple(interceptors)
        self.listeners = tuple(listeners)
        self.confirm = confirm
        self.log = get_logger(solve_id=solve_id)
        self.planner_usage = UsageTracker()
        self.agent_usage = UsageTracker()
        self.joiner_usage = UsageTracker()
        planner_llm = MeteredLLM(llm, self.planner_usage)
        self.planner = LLMPlanner(
            planner_llm,
            registry,
            agent_tasks=agent_tasks,
            max_attempts=max_attempts,
            structured=structured,
        )
        self.replanner = LLMReplanner(
            planner_llm,
            registry,
            agent_tasks=agent_tasks,
            max_attempts=max_attempts,
            structured=structured,
        )
        self.joiner = Joiner(
            MeteredLLM(llm, self.joiner_usage), max_attempts=max_attempts, structured=structured
        )
        self.agent_llm = MeteredLLM(llm, self.agent_usage) if agent_tasks else None
        self.rounds: list[Round] = []
        self.running: str | None = None  # the id of the round's run, once it is chosen
        self.round_span: Any = None  # the round's span, with OpenTelemetry on
        self.not_recorded: list[str] = []  # what the store could not write (Solution says)

    def emit(self, event: Any) -> None:
        for listener in self.listeners:
            listener(event)

    async def record(self, what: str, **values: Any) -> None:
        """Write to the run store, if there is one, in a worker thread: a store another
        process holds locked makes the write wait (up to SQLite's busy timeout), never the
        event loop and the round's tasks. A failed write is logged, never fatal (the solution
        is still returned, and the runs are recorded on their own)."""
        if self.store is None:
            return
        write = partial(getattr(self.store, what), self.solve_id, **values)
        try:
            with anyio.CancelScope(shield=True):  # a stopped solve still says so
                await anyio.to_thread.run_sync(write)
        except StoreError as exc:
            self.log.warning("solve.not_recorded", what=what, error=str(exc))
            self.not_recorded.append(f"{what.replace('_', ' ')} ({exc})")

    @property
    def usage(self) -> SolveUsage:
        return SolveUsage(
            planner=self.planner_usage.total,
            agents=self.agent_usage.total,
            joiner=self.joiner_usage.total,
        )

    async def end(
        self,
        status: SolveStatus,
        reason: str,
        *,
        decision: JoinDecision | None = None,
        error: Exception | None = None,
    ) -> Solution:
        self.log.info("solve.finished", status=status.value, rounds=len(self.rounds))
        solution = Solution(
            solve_id=self.solve_id,
            goal=self.goal,
            status=status,
            reason=reason,
            answer=decision.answer if decision is not None else None,
            cites=list(decision.cites) if decision is not None else [],
            rounds=self.rounds,
            usage=self.usage,
            error=error,
        )
        await self.record(
            "finish_solve",
            status=status.value,
            reason=reason,
            answer=jsonable(solution.answer),
            cites=solution.cites,
            run_id=solution.run_id,
            usage=solution.usage.to_json_dict(),
        )
        lost = [
            f"run {r.run_id}: {r.result.record_loss}"
            for r in self.rounds
            if r.result is not None and r.result.record_loss is not None
        ]
        solution.not_recorded = [*self.not_recorded, *lost]  # never claim a missing record
        return solution

    async def close_round(self, rnd: Round, outcome: RoundOutcome, reason: str = "") -> None:
        rnd.outcome, rnd.reason = outcome, reason
        span, self.round_span = self.round_span, None
        if span is not None:
            span.set_attribute(telemetry.ROUND_OUTCOME, outcome)
            if rnd.run_id:
                span.set_attribute(telemetry.RUN_ID, rnd.run_id)
            span.end()
        await self.record(
            "record_round",
            round=rnd.number,
            run_id=rnd.run_id,
            outcome=outcome,
            reason=reason,
            decision=jsonable(rnd.decision.to_json_dict()) if rnd.decision is not None else None,
            feedback=rnd.feedback,
        )
        self.emit(RoundFinished(self.solve_id, rnd.number, rnd.run_id, outcome, reason))

    async def run(self, resumed: Resumed | None = None) -> Solution:
        """The rounds, from the first (or, ``resumed``, from a paused round whose run goes
        on), as a span, recording a solve that is stopped as such."""
        attributes = {**_SOLVE, telemetry.SOLVE_ID: self.solve_id}
        try:
            with telemetry.operation("invoke_workflow dagagent.solve", attributes) as span:
                solution = await self._rounds(resumed)
                if span is not None:
                    span.set_attribute(telemetry.SOLVE_STATUS, solution.status.value)
                    span.set_attribute("dagagent.solve.rounds", len(solution.rounds))
                return solution
        except BaseException:
            if self.round_span is not None:
                self.round_span.end()
            # cancelled (Ctrl-C) or a bug: the record says the solve did not finish
            if self.rounds and not self.rounds[-1].outcome:
                rnd = self.rounds[-1]
                await self.record(
                    "record_round",
                    round=rnd.number,
                    run_id=rnd.run_id or self.running,
                    outcome="cancelled",
                    reason="the solve was stopped",
                    feedback=rnd.feedback,
                )
            await self.record("finish_solve", status="cancelled", reason="the solve was stopped")
            raise

    def _start_round(self, n: int) -> None:
        self.round_span = telemetry.start_span(
            "dagagent.round", {telemetry.SOLVE_ID: self.solve_id, telemetry.ROUND: n}
        )

    async def _rounds(self, resumed: Resumed | None = None) -> Solution:
        previous: Round | None = None
        feedback: str | None = None
        outputs: dict[str, Any] = {}  # every success so far: task id -> output
        first = 1
        if resumed is not None:  # the paused round's run goes on, then the rounds after it
            rnd, previous, outputs = resumed.round, resumed.previous, resumed.outputs
            self.rounds.append(rnd)
            self.running = resumed.run_id
            self._start_round(rnd.number)
            await self.record(
                "record_round",
                round=rnd.number,
                run_id=resumed.run_id,
                outcome="running",
                feedback=rnd.feedback,
            )
            with telemetry.within(self.round_span):
                rnd.result = await resumed.go_on()
            done = await self._judge(rnd, previous, outputs)
            if done is not None:
                return done
            assert rnd.decision is not None
            previous, feedback, first = rnd, rnd.decision.feedback, rnd.number + 1
        for n in range(first, self.max_rounds + 1):
            parent_id = previous.run_id if previous is not None else None
            self.emit(RoundStarted(self.solve_id, n, self.goal, time.time(), parent_id, feedback))
            rnd = Round(number=n, feedback=feedback)
            self.rounds.append(rnd)
            self._start_round(n)
            try:
                with telemetry.within(self.round_span):
                    stop = await self.plan_and_run(rnd, previous, feedback)
            except (PlanningError, LLMError) as exc:
                what = "no valid plan" if n == 1 else "no valid revised plan"
                reason = (
                    f"round {n}: {what}: {exc}"
                    if isinstance(exc, PlanningError)
                    else f"round {n}: the model could not be used: {' '.join(str(exc).split())}"
                )
                await self.close_round(rnd, "failed", reason)
                return await self.end(SolveStatus.FAILED, reason, error=exc)
            if stop is not None:
                await self.close_round(rnd, "gave_up", stop)
                return await self.end(SolveStatus.GAVE_UP, stop)
            done = await self._judge(rnd, previous, outputs)
            if done is not None:
                return done
            assert rnd.decision is not None
            previous, feedback = rnd, rnd.decision.feedback
        raise AssertionError("the last round always finishes")  # pragma: no cover

    async def _judge(
        self, rnd: Round, previous: Round | None, outputs: dict[str, Any]
    ) -> Solution | None:
        """What follows a round whose run has ended: the solve pauses with it, gives up, or
        the joiner answers (the solution) or asks for another round (``None``)."""
        n = rnd.number
        assert rnd.plan is not None and rnd.result is not None
        result = rnd.result
        if result.status is RunStatus.PAUSED:
            waiting = [r.task_id for r in result.waiting()]
            shown = ", ".join(waiting[:10]) + (", ..." if len(waiting) > 10 else "")
            reason = (
                f"round {n}: run {result.run_id} paused: {len(waiting)} task"
                f"{'s' if len(waiting) != 1 else ''} wait{'s' if len(waiting) == 1 else ''} "
                f"for a person's decision ({shown})"
            )
            await self.close_round(rnd, "paused", reason)
            return await self.end(SolveStatus.PAUSED, reason)
        if previous is not None and not _new_successes(result, outputs):
            reason = f"round {n} added no new success ({_failure_summary(result)})"
            await self.close_round(rnd, "gave_up", reason)
            return await self.end(SolveStatus.GAVE_UP, reason)
        outputs.update(result.outputs)
        last = n == self.max_rounds
        try:
            with telemetry.within(self.round_span):
                report = await self.joiner.join(self.goal, rnd.plan, result.tasks, must_finish=last)
        except (JoinerError, LLMError) as exc:
            reason = (
                f"round {n}: {exc}"
                if isinstance(exc, JoinerError)
                else f"round {n}: the joiner's model could not be used: "
                f"{' '.join(str(exc).split())}"
            )
            await self.close_round(rnd, "failed", reason)
            return await self.end(SolveStatus.FAILED, reason, error=exc)
        rnd.joining = report
        decision = rnd.decision = report.decision
        self.emit(
            JoinerDecided(
                self.solve_id,
                n,
                result.run_id,
                decision.action,
                decision.answer,
                tuple(decision.cites),
                decision.feedback,
            )
        )
        self.log.info("solve.joined", round=n, action=decision.action)
        if decision.finished:
            await self.close_round(rnd, "answered")
            return await self.end(SolveStatus.ANSWERED, f"answered in round {n}", decision=decision)
        await self.close_round(rnd, "replan")
        return None

    async def plan_and_run(
        self, rnd: Round, previous: Round | None, feedback: str | None
    ) -> str | None:
        """Plan (or revise) and run one round, filling ``rnd``. Returns why the solve gives
        up before running anything, or ``None``."""
        record = (
            record_of(previous.plan, previous.result)
            if previous is not None and previous.plan is not None and previous.result is not None
            else None
        )
        run_id = self.running = new_run_id()
        # On record from the start, so that a solve killed mid-round still names its run.
        await self.record(
            "record_round",
            round=rnd.number,
            run_id=run_id,
            outcome="running",
            feedback=feedback,
        )
        if self.stream:
            round_ = await plan_and_execute_streamed(
                self.planner if record is None else self.replanner,
                self.goal,
                self.registry,
                llm=self.agent_llm,
                replan_of=record,
                feedback=feedback,
                reuse=_reuse_of(record),
                parent_id=record.run_id if record is not None else None,
                run_id=run_id,
                listeners=self.listeners,
                policy=self.policy,
                settings=self.settings,
                interceptors=self.interceptors,
                store=self.store,
            )
            rnd.plan, rnd.planning, rnd.result = round_.plan, round_.planning, round_.result
            if (
                previous is not None
                and previous.plan is not None
                and _same_tasks(previous.plan, round_.plan)
            ):
                return _same_plan_reason(rnd.number)
            return None
        if record is None:
            planning = await self.planner.plan_with_report(self.goal)
            rnd.plan, rnd.planning = planning.plan, planning
            graph = planning.graph
            reuse = None
        else:
            revision = await revise_run(
                record,
                self.registry,
                replanner=self.replanner,
                feedback=feedback,
                agent_llm=self.agent_llm,
                goal=self.goal,
            )
            rnd.plan, rnd.planning = revision.plan, revision.planning
            if revision.unchanged:
                return _same_plan_reason(rnd.number)
            graph = revision.graph
            reuse = revision.reuse_map()
        if self.confirm is not None:
            answer = self.confirm(graph)
            if inspect.isawaitable(answer):
                answer = await answer
            if not answer:
                return f"round {rnd.number}: the plan was not approved; nothing of it ran"
        rnd.result = await execute(
            graph,
            self.registry,
            llm=self.agent_llm,
            reuse=reuse,
            parent_id=record.run_id if record is not None else None,
            run_id=run_id,
            listeners=self.listeners,
            settings=self.settings,
            interceptors=self.interceptors,
            store=self.store,
        )
        return None


def _reuse_of(record: Any) -> dict[str, tuple[str, Any]] | None:
    if record is None:
        return None
    from ..review import reuse_map

    return reuse_map(record)


def _same_tasks(old: Plan, new: Plan) -> bool:
    from ..review import diff_plans

    diff = diff_plans(old, new)
    return not (diff.added or diff.removed or diff.changed)


def _same_plan_reason(n: int) -> str:
    return (
        f"round {n}: the revised plan is the same as round {n - 1}'s; running it again would "
        "change nothing"
    )


async def solve(
    goal: str,
    registry: Registry,
    llm: LLM,
    *,
    settings: RunSettings | None = None,
    max_rounds: int = 3,
    stream: bool = True,
    interceptors: Sequence[Interceptor] = (),
    listeners: Sequence[Listener] = (),
    store: RunStore | str | Path | None = None,
    policy: Policy | str | Path | None = None,
    agent_tasks: bool = False,
    max_attempts: int = 3,
    structured: bool = True,
    confirm: Confirm | None = None,
    solve_id: str | None = None,
) -> Solution:
    """Answer ``goal`` with the tools of ``registry`` and the model ``llm``: plan, run,
    join, and replan when the joiner asks, for at most ``max_rounds`` rounds (see the module
    docstring). Returns a :class:`Solution`.

    - ``stream``: start tasks while the plan is still being written (see
      :mod:`dagagent.planners.streaming`; with ``confirm``, the whole plan is made first).
    - ``settings`` (default: :data:`SOLVE_SETTINGS`, whose ``on_failure="continue"`` lets
      the joiner see every result it can get), ``interceptors``, ``listeners`` and ``store``:
      as for :func:`dagagent.execute`, for every round's run. The store also records the solve:
      its rounds and the joiner's decisions as they end, and the answer
      (:meth:`~dagagent.store.RunStore.get_solve`). Listeners also get
      :class:`~dagagent.events.RoundStarted`, :class:`~dagagent.events.JoinerDecided` and
      :class:`~dagagent.events.RoundFinished`.
    - ``policy``: an approval :class:`~dagagent.Policy` (or a policy file) checking every
      tool call, before the other interceptors.
    - ``agent_tasks``: plans may hold agent tasks, run by a ReAct agent with ``llm``.
    - ``max_attempts`` / ``structured``: for the planner, replanner and joiner (answers to
      try; ``structured=False`` sends no response format).
    - ``confirm``: called with each round's plan (a :class:`~dagagent.PlanGraph`) before it
      runs; a false answer ends the solve as ``gave_up``.

    Raises :class:`~dagagent.errors.ConfigError` for a bad option before anything runs;
    cancelling the caller cancels the solve (the running round's run is recorded as
    cancelled).
    """
    if not goal.strip():
        raise ConfigError("the goal is empty: say what the answer should be about")
    settings = settings or SOLVE_SETTINGS
    options = {
        "max_rounds": max_rounds,
        "stream": stream,
        "agent_tasks": agent_tasks,
        "max_attempts": max_attempts,
        "structured": structured,
        **settings.to_record(),
    }
    opened: RunStore | None = None
    if store is not None:
        opened = store if isinstance(store, RunStore) else RunStore(store)
    try:
        state = new_state(
            goal.strip(),
            registry,
            llm,
            solve_id=solve_id or new_run_id(),
            options=options,
            settings=settings,
            interceptors=interceptors,
            listeners=listeners,
            store=opened,
            policy=policy,
            confirm=confirm,
        )
        await state.record("start_solve", goal=state.goal, options=options)
        return await state.run()
    finally:
        if opened is not None and opened is not store:
            opened.close()


def new_state(
    goal: str,
    registry: Registry,
    llm: LLM,
    *,
    solve_id: str,
    options: dict[str, Any],
    settings: RunSettings,
    interceptors: Sequence[Interceptor],
    listeners: Sequence[Listener],
    store: RunStore | None,
    policy: Policy | str | Path | None,
    confirm: Confirm | None,
) -> _Solve:
    """The state of a solve with ``options`` (those :func:`solve` records with it, checked
    here) and run ``settings``, for :func:`solve` and for the resume of a paused solve."""
    max_rounds = options["max_rounds"]
    if not isinstance(max_rounds, int) or max_rounds < 1:
        raise ConfigError(f"max_rounds must be at least 1, not {max_rounds}")
    chain = list(interceptors)
    if policy is not None:
        if isinstance(policy, (str, Path)):
            from ..approval import load_policy

            policy = load_policy(policy)
        chain.insert(0, policy)
    return _Solve(
        goal,
        registry,
        llm,
        solve_id=solve_id,
        max_rounds=max_rounds,
        stream=bool(options["stream"]),
        settings=settings,
        interceptors=chain,
        listeners=listeners,
        agent_tasks=bool(options["agent_tasks"]),
        max_attempts=int(options["max_attempts"]),
        structured=bool(options["structured"]),
        confirm=confirm,
        policy=policy,
        store=store,
    )


def solve_sync(goal: str, registry: Registry, llm: LLM, **options: Any) -> Solution:
    """:func:`solve` for scripts: runs its own event loop (do not call it from async code)."""

    async def main() -> Solution:
        return await solve(goal, registry, llm, **options)

    return anyio.run(main)
