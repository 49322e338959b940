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
:mod:`dagagent.workflows.solution`. With ``sub_solves=True``, a task of a plan may reach its
sub-goal with a solve of its own, a child of this one (:mod:`dagagent.workflows.subsolve`).

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
from ..budget import Budget, Prices
from ..errors import (
    BudgetExceededError,
    ConfigError,
    JoinerError,
    LLMError,
    PlanningError,
    StoreError,
    TaskDeniedError,
)
from ..events import (
    JoinerDecided,
    Listener,
    RoundFinished,
    RoundStarted,
    RunFinished,
    RunStarted,
    TaskFinished,
    TaskStarted,
    get_logger,
)
from ..graph import PlanGraph
from ..llm import MeteredLLM, ModelSettings
from ..plan import Plan
from ..planners import JoinDecision, Joiner, JoinReport, LLMPlanner, LLMReplanner
from ..planners.conversation import Conversation
from ..planners.streaming import plan_and_execute_streamed
from ..results import MODEL_ROLES, RoundOutcome, RunResult, RunStatus, SolveStatus, TaskStatus
from ..run import execute, new_run_id
from ..runner import AgentTaskRunner, CallLedger, CallNext, Interceptor, ToolInvocation
from ..settings import RunSettings
from ..store import RunStore
from ..text import jsonable, shorten
from ..tools import ToolDiscovery, connected
from ._calls import SolveCalls
from ._replay import RecordedAnswers, ReplayingLLM
from ._spending import Spending
from .replan import record_of, revise_run
from .solution import Round, Solution, SolveUsage

if TYPE_CHECKING:
    from ..approval import Policy
    from ..llm import LLM
    from ..results import ModelRole
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

#: The output limit of a compression call (a summary of about 200 words, with room to spare).
COMPRESS_TOKENS = 600

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
    """A solve taken up again from its records (see :mod:`dagagent.workflows.solve_resume`):
    the round whose run goes on (number, plan, feedback), its run and how it goes on (its
    result, once it has ended again); or, with ``round=None``, the round to plan next
    (``first``, with ``feedback``). ``previous``: the round before; ``outputs``: every
    success of the rounds before."""

    round: Round | None
    previous: Round | None
    outputs: dict[str, Any]
    run_id: str | None = None
    go_on: Callable[[], Awaitable[RunResult]] | None = None
    first: int = 1
    feedback: str | None = None


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
        model_settings: ModelSettings | None = None,
        planner: LLMPlanner | None = None,
        budget: Budget | None = None,
        prices: Prices | None = None,
        deadline_s: float | None = None,
        ledger: CallLedger | None = None,
        conversation: Conversation | None = None,
        sub_solves: bool = False,
        depth: int = 0,
        above: Spending | None = None,
        discovery: ToolDiscovery | None = None,
    ) -> None:
        self.goal = goal
        self.llm = llm
        self.agent_tasks = agent_tasks
        self.max_attempts = max_attempts
        self.structured = structured
        self.model_settings = model_settings
        #: Whether its plans may hold sub-solves, and how deep it is (0: no task started it).
        self.sub_solves = sub_solves
        self.depth = depth
        #: When the whole solve must end (``anyio.current_time()``), once it runs.
        self.deadline_at = float("inf")
        #: The tool calls of the whole solve, which the tools' guardrails count.
        self.ledger = ledger if ledger is not None else CallLedger(scope="solve")
        self.policy = policy
        self.store = store
        self.registry = registry
        self.solve_id = solve_id
        self.max_rounds = max_rounds
        self.stream = stream and confirm is None
        self.settings = settings
        self.listeners = tuple(listeners)
        self.confirm = confirm
        self.deadline_s = deadline_s
        self.log = get_logger(solve_id=solve_id)
        self.spending = Spending(budget, prices or Prices(), parent=above)
        self.spending.check_prices(
            str(getattr(llm, "model", "") or ""), str(getattr(llm, "provider_name", "") or "")
        )
        # Tool calls spend the budget first of all: a call it cannot pay for asks nobody.
        gate = (
            (_BudgetGate(self.spending),)
            if self.spending.budget is not None or above is not None
            else ()
        )
        #: The policy and interceptors it was given (its sub-solves get them too).
        self.chain = tuple(interceptors)
        self.interceptors = (*gate, *interceptors)
        self.calls = SolveCalls(
            solve_id,
            spending=self.spending,
            emit=self.emit,
            store=store,
            interceptors=self.interceptors,
        )
        solve_depth = depth if sub_solves else None
        #: The planner of one's own it was given (``None``: the built-in one), which its
        #: sub-solves plan with too (see :meth:`~dagagent.planners.LLMPlanner.for_sub_solve`).
        self.own_planner = planner
        if planner is None:
            planner = LLMPlanner(
                llm,
                registry,
                agent_tasks=agent_tasks,
                max_attempts=max_attempts,
                structured=structured,
                settings=model_settings,
                solve_depth=solve_depth,
                discovery=discovery,
            )
        else:
            _check_planner(planner, registry, agent_tasks, solve_depth)
        #: A resumed solve's planner, replanner and joiner answers on record: the calls that
        #: completed before its process died are not made again (see :mod:`._replay`).
        self.recorded = RecordedAnswers()
        self.planner = planner.with_llm(self._replaying(planner.llm, "planner"))
        self.replanner = replanner_of(planner, registry, self._replaying(planner.llm, "replanner"))
        self.joiner = Joiner(
            self._replaying(llm, "joiner"),
            max_attempts=max_attempts,
            structured=structured,
            settings=model_settings,
        )
        self.agent_llm = (
            MeteredLLM(llm, observer=self.calls.observer("agent"))
            if agent_tasks or self.planner.sub_solves
            else None
        )
        self.agent_runner: AgentTaskRunner | None = None
        if agent_tasks and (model_settings is not None or planner.discovery != ToolDiscovery()):
            from ..agent import make_agent_runner  # the agents see a large registry as planned

            self.agent_runner = make_agent_runner(
                settings=model_settings, discovery=planner.discovery
            )
        self.conversation: Conversation | None = None
        self.converse(conversation)
        if self.planner.sub_solves:  # its runs' sub-solve tasks come through the agent seam
            from ..agent import run_agent_node
            from .subsolve import SubSolves

            self.agent_runner = SubSolves(self, self.agent_runner or run_agent_node)
        self.rounds: list[Round] = []
        self.running: str | None = None  # the id of the round's run, once it is chosen
        self.round_span: Any = None  # the round's span, with OpenTelemetry on
        self.not_recorded: list[str] = []  # what the store could not write (Solution says)
        self.ended_runs: dict[str, RunResult] = {}  # each run of the solve, once it ended
        self.started_tasks: dict[str, set[str]] = {}  # run id -> tasks started and not ended
        # The solve's own listener goes first: it keeps what a deadline must not lose.
        self.run_listeners: tuple[Listener, ...] = (self._watch, *self.listeners)

    def _replaying(self, llm: LLM, role: ModelRole) -> Any:
        """``llm`` for ``role``: metered, and answering from :attr:`recorded` first."""
        metered = MeteredLLM(llm, observer=self.calls.observer(role))
        return ReplayingLLM(metered, self.recorded, role, lambda: self.calls.round)

    def emit(self, event: Any) -> None:
        for listener in self.listeners:
            listener(event)

    # -- a turn of a session: the conversation its models see ------------------------------

    def converse(self, conversation: Conversation | None) -> None:
        """Show ``conversation`` (the turns before this one) to the planner, the replanner
        and the joiner; their plans may then reference earlier turns' outputs."""
        self.conversation = conversation
        self.planner = self.planner.with_conversation(conversation)
        self.replanner = self.replanner.with_conversation(conversation)
        self.joiner.conversation = conversation

    async def compress(self) -> None:
        """Summarise the conversation's older turns when it is past its token limit (one
        model call, role ``compress``), and have the summary recorded (its ``record``
        callback) before the turn plans: a resume finds it there. A compression that fails
        leaves the conversation whole (the turn goes on; the failure is logged)."""
        conversation = self.conversation
        if conversation is None or not conversation.needs_compression:
            return
        upto = conversation.compress_upto()
        llm = MeteredLLM(self.llm, observer=self.calls.observer("compress"))
        try:
            response = await llm.complete(
                conversation.compress_messages(), max_tokens=COMPRESS_TOKENS
            )
        except (LLMError, BudgetExceededError) as exc:
            self.log.warning("solve.not_compressed", error=str(exc))
            return
        summary = response.content.strip()
        if not summary:
            self.log.warning("solve.not_compressed", error="the model wrote no summary")
            return
        compressed = conversation.compressed(summary, upto)
        if conversation.record is not None:
            record = partial(conversation.record, compressed.summary or "", upto)
            try:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(record)
            except StoreError as exc:
                self.log.warning("solve.not_recorded", what="compression", error=str(exc))
                self.not_recorded.append(f"the conversation's summary ({exc})")
        self.converse(compressed)

    def _last_run(self) -> RunResult | None:
        """The round's latest run (a streamed plan's last attempt), as it ended."""
        for run_id in (self.calls.run_id, self.running):
            if run_id is not None and run_id in self.ended_runs:
                return self.ended_runs[run_id]
        return None

    def _watch(self, event: Any) -> None:
        """What the solve keeps of its runs' events: each run's result as it ended (a run
        stopped by the deadline too) and the tasks under way."""
        kind = type(event)
        if kind is TaskStarted:
            self.started_tasks.setdefault(event.run_id, set()).add(event.task_id)
        elif kind is TaskFinished:
            self.started_tasks.get(event.run_id, set()).discard(event.result.task_id)
        elif kind is RunFinished:
            self.ended_runs[event.run_id] = event.result
        elif kind is RunStarted and self.calls.round is not None:
            self.calls.run_id = event.run_id  # the round's run now (a streamed plan's attempt)

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
        calls = self.calls
        return SolveUsage(
            planner=calls.usage("planner", "replanner"),
            agents=calls.usage("agent"),
            joiner=calls.usage("joiner"),
            compress=calls.usage("compress"),
            sub_solves=self.spending.below,
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
        lost_calls = self.calls.close()  # every model call on record before the solve's end
        if lost_calls is not None:
            self.not_recorded.append(lost_calls)
        solution = Solution(
            solve_id=self.solve_id,
            goal=self.goal,
            status=status,
            reason=reason,
            answer=decision.answer if decision is not None else None,
            cites=list(decision.cites) if decision is not None else [],
            rounds=self.rounds,
            usage=self.usage,
            calls=list(self.calls.records),
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

    async def close_round(
        self, rnd: Round, outcome: RoundOutcome, reason: str = "", *, run_id: str | None = None
    ) -> None:
        """Record how ``rnd`` ended; ``run_id``: the run it left when it has no result (a
        streamed round whose planning failed left the run of its first attempt)."""
        rnd.outcome, rnd.reason = outcome, reason
        run_id = rnd.run_id or run_id
        span, self.round_span = self.round_span, None
        if span is not None:
            span.set_attribute(telemetry.ROUND_OUTCOME, outcome)
            _usage_attributes(span, self.calls.usage(round=rnd.number))
            for role in MODEL_ROLES:
                used = self.calls.usage(role, round=rnd.number)
                if used.calls:
                    _usage_attributes(span, used, role)
            if run_id:
                span.set_attribute(telemetry.RUN_ID, run_id)
            span.end()
        await self.record(
            "record_round",
            round=rnd.number,
            run_id=run_id,
            outcome=outcome,
            reason=reason,
            decision=jsonable(rnd.decision.to_json_dict()) if rnd.decision is not None else None,
            feedback=rnd.feedback,
        )
        self.emit(RoundFinished(self.solve_id, rnd.number, run_id, outcome, reason))

    async def run(self, resumed: Resumed | None = None) -> Solution:
        """The rounds, from the first (or, ``resumed``, from a paused round whose run goes
        on), as a span, within the deadline, recording a solve that is stopped as such."""
        attributes = {**_SOLVE, telemetry.SOLVE_ID: self.solve_id}
        try:
            with telemetry.operation("invoke_workflow dagagent.solve", attributes) as span:
                solution: Solution | None = None
                deadline = self.deadline_at = (
                    anyio.current_time() + self.deadline_s
                    if self.deadline_s is not None
                    else float("inf")
                )
                with anyio.CancelScope(deadline=deadline) as scope:
                    solution = await self._rounds(resumed)
                if solution is None or (scope.cancelled_caught and not solution.ok):
                    solution = await self._timed_out()
                if span is not None:
                    span.set_attribute(telemetry.SOLVE_STATUS, solution.status.value)
                    span.set_attribute("dagagent.solve.rounds", len(solution.rounds))
                    _usage_attributes(span, solution.usage.total)
                    for role in MODEL_ROLES:
                        used = self.calls.usage(role)
                        if used.calls:
                            _usage_attributes(span, used, role)
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
            self.calls.close()
            await self.record("finish_solve", status="cancelled", reason="the solve was stopped")
            raise

    async def _timed_out(self) -> Solution:
        """The deadline passed: what ran was cancelled; the round under way ends with what it
        got, and the message says what was running."""
        running = self.calls.cancelled
        parts = [f.describe() for f in running]
        rnd = self.rounds[-1] if self.rounds else None
        if rnd is not None and rnd.result is None:
            rnd.result = self._last_run()  # the run, as the deadline left it
        if rnd is not None and rnd.result is not None:
            stopped = [
                tid
                for tid, r in rnd.result.tasks.items()
                if r.status is TaskStatus.CANCELLED and r.started_at is not None
            ]
            if stopped:
                shown = ", ".join(stopped[:8]) + (", ..." if len(stopped) > 8 else "")
                parts.append(f"task{'s' if len(stopped) != 1 else ''} {shown} of run {rnd.run_id}")
        what = "; cancelled: " + "; ".join(parts) if parts else ""
        where = f" in round {rnd.number}" if rnd is not None else ""
        kept = sum(
            1
            for r in self.rounds
            if r.result is not None
            for t in r.result.tasks.values()
            if t.status.ok
        )
        reason = (
            f"the deadline passed{where} ({self.deadline_s:.1f} s into the solve){what}; kept "
            f"what finished ({kept} task{'s' if kept != 1 else ''} with an output)"
        )
        if rnd is not None and not rnd.outcome:
            await self.close_round(rnd, "timed_out", reason)
        return await self.end(SolveStatus.TIMED_OUT, reason)

    def _start_round(self, n: int) -> None:
        self.round_span = telemetry.start_span(
            "dagagent.round", {telemetry.SOLVE_ID: self.solve_id, telemetry.ROUND: n}
        )

    async def _rounds(self, resumed: Resumed | None = None) -> Solution:
        await self.compress()
        previous: Round | None = None
        feedback: str | None = None
        outputs: dict[str, Any] = {}  # every success so far: task id -> output
        first = 1
        if resumed is not None and resumed.round is None:  # the rounds go on from a new one
            previous, outputs = resumed.previous, resumed.outputs
            feedback, first = resumed.feedback, resumed.first
        elif resumed is not None:  # the round's run goes on, then the rounds after it
            assert resumed.round is not None and resumed.go_on is not None
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
            except BudgetExceededError as exc:  # planning was refused, or cut off
                if rnd.result is None:
                    rnd.result = self._last_run()  # what its tasks did
                return await self._out_of_budget(rnd, previous, outputs, exc)
            except (PlanningError, LLMError) as exc:
                what = "no valid plan" if n == 1 else "no valid revised plan"
                reason = (
                    f"round {n}: {what}: {exc}"
                    if isinstance(exc, PlanningError)
                    else f"round {n}: the model could not be used: {' '.join(str(exc).split())}"
                )
                # A streamed round ran its plan as it came: its first attempt's run is on
                # record (with nothing, or what ran before the plan was rejected).
                left = self.running if self.stream else None
                await self.close_round(rnd, "failed", reason, run_id=left)
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
        self.calls.round, self.calls.run_id = n, result.run_id  # the joiner's calls
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
        if self.spending.low is not None:  # the budget ran low during the round
            return await self._out_of_budget(rnd, previous, outputs)
        if previous is not None and not _new_successes(result, outputs):
            reason = f"round {n} added no new success ({_failure_summary(result)})"
            await self.close_round(rnd, "gave_up", reason)
            return await self.end(SolveStatus.GAVE_UP, reason)
        outputs.update(result.outputs)
        last = n == self.max_rounds
        try:
            with telemetry.within(self.round_span):
                report = await self.joiner.join(self.goal, rnd.plan, result.tasks, must_finish=last)
        except BudgetExceededError as exc:
            return await self._out_of_budget(rnd, previous, outputs, exc)
        except (JoinerError, LLMError) as exc:
            reason = (
                f"round {n}: {exc}"
                if isinstance(exc, JoinerError)
                else f"round {n}: the joiner's model could not be used: "
                f"{' '.join(str(exc).split())}"
            )
            await self.close_round(rnd, "failed", reason)
            return await self.end(SolveStatus.FAILED, reason, error=exc)
        return await self._decided(rnd, report)

    async def _decided(self, rnd: Round, report: JoinReport, *, last: str = "") -> Solution | None:
        """The joiner decided about ``rnd``: the solution when it answered (``last``: why this
        was its last answer), ``None`` when it asked for another round."""
        n, result = rnd.number, rnd.result
        assert result is not None
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
            await self.close_round(rnd, "answered", last)
            reason = f"answered in round {n}" + (f" ({last})" if last else "")
            return await self.end(SolveStatus.ANSWERED, reason, decision=decision)
        await self.close_round(rnd, "replan")
        return None

    async def _out_of_budget(
        self,
        rnd: Round,
        previous: Round | None,
        outputs: dict[str, Any],
        refused: BudgetExceededError | None = None,
    ) -> Solution:
        """The budget ran low in ``rnd``: the joiner is asked once, within the reserve kept for
        it, to answer from the results so far (this round's, or the round's before); without
        results, or without an answer, the solve ends ``budget_exhausted``, every result
        kept."""
        why = self.spending.low or (str(refused) if refused is not None else "the budget ran out")
        source = rnd if rnd.plan is not None and rnd.result is not None else previous
        if source is not None and source.plan is not None and source.result is not None:
            results = source.result.tasks
            if source is rnd:
                outputs.update(source.result.outputs)
            self.calls.final = True
            try:
                with telemetry.within(self.round_span):
                    report = await self.joiner.join(
                        self.goal, source.plan, results, must_finish=True
                    )
            except (BudgetExceededError, JoinerError, LLMError) as exc:
                why = f"{why}; the joiner's last answer within the reserve failed: {exc}"
            else:
                if source is rnd:
                    done = await self._decided(
                        rnd, report, last="from what it had when the budget ran low: " + why
                    )
                    assert done is not None  # must_finish: the joiner answered
                    return done
                rnd.joining = report
                decision = rnd.decision = report.decision
                reason = (
                    f"answered from round {source.number}'s results when the budget ran low "
                    f"in round {rnd.number}: {why}"
                )
                await self.close_round(rnd, "answered", reason)
                return await self.end(SolveStatus.ANSWERED, reason, decision=decision)
        reason = f"round {rnd.number}: the budget ran out ({self.spending.spent()}): {why}"
        await self.close_round(rnd, "budget_exhausted", reason)
        return await self.end(SolveStatus.BUDGET_EXHAUSTED, reason)

    def _with_earlier(
        self, reuse: dict[str, tuple[str, Any]] | None
    ) -> dict[str, tuple[str, Any]] | None:
        """``reuse`` and the earlier turns' outputs (a session's turn): a ``${turnN...}``
        task is reused from the record, never run."""
        return with_earlier(self.conversation, reuse)

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
        self.calls.round, self.calls.run_id = rnd.number, run_id
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
                reuse=self._with_earlier(_reuse_of(record)),
                parent_id=record.run_id if record is not None else None,
                run_id=run_id,
                listeners=self.run_listeners,
                policy=self.policy,
                settings=self.settings,
                interceptors=self.interceptors,
                store=self.store,
                agent_runner=self.agent_runner,
                ledger=self.ledger,
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
            agent_runner=self.agent_runner,
            reuse=self._with_earlier(reuse),
            parent_id=record.run_id if record is not None else None,
            run_id=run_id,
            listeners=self.run_listeners,
            settings=self.settings,
            interceptors=self.interceptors,
            store=self.store,
            ledger=self.ledger,
        )
        return None


def replanner_of(planner: LLMPlanner, registry: Registry, llm: LLM) -> LLMReplanner:
    """The replanner of a solve whose plans ``planner`` makes: with its model's settings and
    its options, asking ``llm`` (its model, metered), for ``registry``'s tools."""
    return LLMReplanner(
        llm,
        registry,
        agent_tasks=planner.agent_tasks,
        max_attempts=planner.max_attempts,
        structured=planner.response_format is not None,
        strict=planner.strict if planner.response_format is not None else None,
        max_tasks=planner.max_tasks,
        settings=planner.settings,
        solve_depth=planner.solve_depth,
        discovery=planner.discovery,
    )


def _check_planner(
    planner: Any, registry: Registry, agent_tasks: bool, solve_depth: int | None
) -> None:
    """A planner of one's own must plan for the solve's tools and agree on agent tasks."""
    if not isinstance(planner, LLMPlanner):
        raise ConfigError(
            f"planner must be an LLMPlanner (with the prompt, examples and settings of your "
            f"choice), not {type(planner).__name__}"
        )
    if planner.registry.names != registry.names:
        raise ConfigError(
            "the planner plans for other tools than the solve runs: build it with the same "
            "registry (LLMPlanner(llm, registry, ...))"
        )
    if planner.agent_tasks != agent_tasks:
        raise ConfigError(
            f"the planner {'plans' if planner.agent_tasks else 'does not plan'} agent tasks but "
            f"solve(agent_tasks={agent_tasks}) {'runs none' if not agent_tasks else 'would'}: "
            "give both the same agent_tasks"
        )
    if planner.solve_depth != solve_depth:
        want = "solve_depth=None" if solve_depth is None else f"solve_depth={solve_depth}"
        raise ConfigError(
            f"the planner {'plans' if planner.sub_solves else 'does not plan'} sub-solves but "
            f"the solve {'runs them' if solve_depth is not None else 'runs none'}: build it with "
            f"{want} (LLMPlanner(llm, registry, {want}, ...))"
        )


def _usage_attributes(span: Any, usage: Any, role: str | None = None) -> None:
    """What the model calls of a round or a solve used (of one ``role``: under
    ``dagagent.usage.ROLE.*``), on its span."""
    names: tuple[str, ...]
    if role is None:
        names = (
            telemetry.MODEL_CALLS,
            telemetry.INPUT_TOKENS,
            telemetry.OUTPUT_TOKENS,
            telemetry.ESTIMATED,
            telemetry.COST,
        )
    else:
        names = tuple(
            f"dagagent.usage.{role}.{what}"
            for what in ("calls", "input_tokens", "output_tokens", "estimated", "cost_usd")
        )
    values = (usage.calls, usage.input_tokens, usage.output_tokens, usage.estimated)
    for name, value in zip(names, values, strict=False):
        span.set_attribute(name, value)
    if usage.cost_usd is not None:
        span.set_attribute(names[4], usage.cost_usd)


class _BudgetGate:
    """The interceptor that spends a solve's tool-call budget: outside every other one, it
    counts each call and denies the one past the budget (a denied task, as an approval rule
    would deny it)."""

    def __init__(self, spending: Spending) -> None:
        self.spending = spending

    async def __call__(self, call: ToolInvocation, call_next: CallNext) -> Any:
        try:
            self.spending.tool_call(call.tool.name, call.task_id)
        except BudgetExceededError as exc:
            call.decide("deny", "budget", str(exc))
            raise TaskDeniedError(str(exc), decided_by="budget") from None
        return await call_next(call)


def with_earlier(
    conversation: Conversation | None, reuse: dict[str, tuple[str, Any]] | None
) -> dict[str, tuple[str, Any]] | None:
    """What a round's run reuses: ``reuse`` (the round before's successes) and, in a turn of
    a session (``conversation``), the earlier turns' outputs. A solve on Temporal gives its
    rounds' runs the same (its replanner's worker computes it)."""
    if conversation is None or not conversation.turns:
        return reuse
    return {**conversation.reuse(), **(reuse or {})}


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
    model_settings: ModelSettings | None = None,
    planner: LLMPlanner | None = None,
    budget: Budget | None = None,
    prices: Prices | str | Path | None = None,
    deadline_s: float | None = None,
    ledger: CallLedger | None = None,
    conversation: Conversation | None = None,
    sub_solves: bool = False,
    discovery: ToolDiscovery | None = None,
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
    - ``model_settings``: a :class:`~dagagent.llm.ModelSettings` for every model call of the
      solve (the planner's, the replanner's, the joiner's, the agent tasks'): its
      ``max_tokens`` is the output limit of each call, instead of each role's own (see
      :mod:`dagagent.limits`); ``temperature``, and for the agents ``tool_choice`` and
      ``parallel_tool_calls``, too.
    - ``planner``: an :class:`~dagagent.planners.LLMPlanner` of one's own (a system prompt,
      few-shot ``examples``, settings, another model) for the plans of the solve; the
      revisions of later rounds are made with its model, settings and options. It must plan
      for ``registry`` and agree with ``agent_tasks`` (:class:`~dagagent.errors.ConfigError`
      otherwise); ``model_settings``, ``max_attempts`` and ``structured`` then apply to the
      joiner and the agents.
    - ``budget``: what the solve may spend (a :class:`~dagagent.Budget`: tokens, cost, model
      calls, tool calls), reserved before each call: a call that could cross it is refused.
      When it runs low, the joiner is asked once, within the reserve kept for it, to answer
      from the results so far; without an answer the solve ends ``budget_exhausted``.
    - ``prices``: the :class:`~dagagent.Prices` model calls are costed at (or a prices file
      over the defaults); a model without a price has no cost (``None``), never a guessed one.
    - ``deadline_s``: the whole solve's time, model calls and streams included. When it
      passes, what runs is cancelled, what finished is kept (and recorded), and the solve
      ends ``timed_out`` with a reason that says what was running.
    - ``ledger``: the tool calls the tools' guardrails (``max_calls``, ``cooldown_s``) and a
      policy's limits count, across every round (default: a new
      :class:`~dagagent.runner.CallLedger` for the solve; give one to choose its clock).
    - ``conversation``: the turns before this one, when the solve is a turn of a
      :class:`~dagagent.Session` (which gives it; see :mod:`dagagent.planners.conversation`).
    - ``sub_solves``: plans may hold sub-solves, tasks whose sub-goal (``instruction``) is
      reached by a solve of its own (``"solve": true``), recorded as a child of this one,
      within what this one's budget and deadline have left, nested at most
      :data:`~dagagent.limits.MAX_SOLVE_DEPTH` deep (see :mod:`dagagent.workflows.subsolve`).
    - ``discovery``: how a large registry is shown to the planner, the replanner and agent
      tasks (a :class:`~dagagent.tools.ToolDiscovery`; default: past 30 tools, the 30 most
      relevant to the goal by BM25). Its threshold and limit are recorded with the solve, so
      a resume shows the same (an ``embed`` function must be given again).

    Every model call is a :class:`~dagagent.results.ModelCall` in ``Solution.calls`` (and,
    with a store, in the solve's record): role, round, task, model, options, what the model
    wrote, its tokens (reported or estimated), cost and times.

    Raises :class:`~dagagent.errors.ConfigError` for a bad option before anything runs;
    cancelling the caller cancels the solve (the running round's run is recorded as
    cancelled).
    """
    if not goal.strip():
        raise ConfigError("the goal is empty: say what the answer should be about")
    if deadline_s is not None and not deadline_s > 0:
        raise ConfigError(f"deadline_s must be a positive number of seconds, not {deadline_s!r}")
    if prices is not None and not isinstance(prices, Prices):
        prices = Prices.load(prices)
    settings = settings or SOLVE_SETTINGS
    chosen = settings.executor
    durable = (chosen if isinstance(chosen, str) else getattr(chosen, "name", None)) == "temporal"
    options = {
        "max_rounds": max_rounds,
        "stream": stream,
        "agent_tasks": agent_tasks,
        "max_attempts": max_attempts,
        "structured": structured,
        **settings.to_record(),
    }
    if budget is not None and budget.limited:  # a resume of the solve spends the same budget
        options["budget"] = budget.model_dump(mode="json", exclude_defaults=True)
    if deadline_s is not None:
        options["deadline_s"] = deadline_s
    if sub_solves:
        options["sub_solves"] = True
    if discovery is not None and discovery != ToolDiscovery():
        options["discovery"] = {"threshold": discovery.threshold, "limit": discovery.limit}
    if durable:  # the whole solve as a Temporal workflow: see dagagent.workflows.temporal_solve
        return await _solve_on_temporal(
            goal.strip(),
            registry,
            llm,
            settings=settings,
            options=options,
            solve_id=solve_id or new_run_id(),
            store=store,
            listeners=listeners,
            prices=prices,
            model_settings=model_settings,
            confirm=confirm,
            policy=policy,
            refused={
                "interceptors": bool(interceptors)
                or (policy is not None and not isinstance(policy, (str, Path))),
            },
            planner=planner,
            conversation=conversation,
            discovery=discovery,
        )
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
            model_settings=model_settings,
            planner=planner,
            budget=budget,
            prices=prices,
            deadline_s=deadline_s,
            ledger=ledger,
            conversation=conversation,
            discovery=discovery,
        )
        # The tools' servers (MCP), each opened once, all at the same time, and kept for
        # every round: a round's run finds them open instead of opening them again. One that
        # cannot be opened is a configuration error before anything is recorded.
        async with connected(registry):
            await state.record("start_solve", goal=state.goal, options=options)
            return await state.run()
    finally:
        if opened is not None and opened is not store:
            opened.close()


async def _solve_on_temporal(
    goal: str,
    registry: Registry,
    llm: LLM,
    *,
    settings: RunSettings,
    options: dict[str, Any],
    solve_id: str,
    store: RunStore | str | Path | None,
    listeners: Sequence[Listener],
    prices: Prices | None,
    model_settings: ModelSettings | None,
    refused: dict[str, bool],
    confirm: Confirm | None = None,
    policy: Policy | str | Path | None = None,
    planner: LLMPlanner | None = None,
    conversation: Conversation | None = None,
    discovery: ToolDiscovery | None = None,
) -> Solution:
    """:func:`solve` on the temporal executor: its rounds on the workers, followed and
    recorded here (:mod:`dagagent.workflows.temporal_solve`). A policy file (``policy``)
    travels with each round's run as data, with the executor's own ``approval`` rules; a
    planner of one's own, the tool discovery and a session's conversation travel as data
    (see its ``_planning``)."""
    from ..executors import get_executor
    from ..executors.temporal import TemporalExecutor
    from .temporal_solve import model_of, refuse_unsupported, solve_on_temporal, with_policy_file
    from .temporal_solve._planning import conversation_data, discovery_data, planner_data

    refuse_unsupported(**refused)
    if not isinstance(options["max_rounds"], int) or options["max_rounds"] < 1:
        raise ConfigError(f"max_rounds must be at least 1, not {options['max_rounds']}")
    executor = get_executor(settings.executor)
    assert isinstance(executor, TemporalExecutor)
    approval = executor.approval  # the rules each round's run carries to the workers
    if isinstance(policy, (str, Path)):  # a policy file's too
        approval = with_policy_file(approval, Path(policy))
    # where the workflow runs: 'dagagent resume' and 'attach' of the solve find it there
    options = {**options, "executor": "temporal", "temporal": executor.reach()}
    model = model_of(llm, model_settings)
    own: dict[str, Any] | None = None
    if planner is not None:  # checked as a local solve checks it, then described
        _check_planner(planner, registry, bool(options["agent_tasks"]), None)
        own = planner_data(planner, model, prices)
        discovery = planner.discovery  # a local solve's planner and replanner show its own
    shown = discovery_data(discovery)
    budget = options.get("budget")
    name = str(getattr(llm, "model", "") or "")
    provider = str(getattr(llm, "provider_name", "") or "")
    if budget is not None:  # a cost budget needs the model's price, as a local solve does
        Spending(Budget.model_validate(budget), prices or Prices()).check_prices(name, provider)
    price = (prices or Prices()).price(name, provider)
    opened: RunStore | None = None
    if store is not None:
        opened = store if isinstance(store, RunStore) else RunStore(store)
    try:
        # the solve's span, here; its steps' and its rounds' tasks' spans, made on the
        # workers, join its trace (its context travels in the workflow's input)
        attributes = {**_SOLVE, telemetry.SOLVE_ID: solve_id}
        with telemetry.operation("invoke_workflow dagagent.solve", attributes) as span:
            solution = await solve_on_temporal(
                goal,
                model=model,
                executor=executor,
                settings=settings,
                solve_id=solve_id,
                options=options,
                max_rounds=int(options["max_rounds"]),
                max_attempts=int(options["max_attempts"]),
                structured=bool(options["structured"]),
                agent_tasks=bool(options["agent_tasks"]),
                store=opened,
                listeners=listeners,
                prices=prices,
                deadline_s=options.get("deadline_s"),
                budget=options.get("budget"),
                price=price.model_dump() if price is not None else None,
                confirm=confirm,
                registry=registry,
                approval=approval,
                sub_solves=bool(options.get("sub_solves")),
                planner=own,
                discovery=shown,
                conversation=conversation_data(conversation) if conversation is not None else None,
                record_compression=conversation.record if conversation is not None else None,
                trace=telemetry.carrier() if span is not None else None,
            )
            if span is not None:
                span.set_attribute(telemetry.SOLVE_STATUS, solution.status.value)
                span.set_attribute("dagagent.solve.rounds", len(solution.rounds))
                _usage_attributes(span, solution.usage.total)
            return solution
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
    model_settings: ModelSettings | None = None,
    planner: LLMPlanner | None = None,
    budget: Budget | None = None,
    prices: Prices | None = None,
    deadline_s: float | None = None,
    ledger: CallLedger | None = None,
    conversation: Conversation | None = None,
    depth: int = 0,
    above: Spending | None = None,
    discovery: ToolDiscovery | None = None,
) -> _Solve:
    """The state of a solve with ``options`` (those :func:`solve` records with it, checked
    here) and run ``settings``, for :func:`solve` and for the resume of a paused solve; a
    sub-solve's at ``depth``, spending on its parent's ledger too (``above``)."""
    max_rounds = options["max_rounds"]
    if not isinstance(max_rounds, int) or max_rounds < 1:
        raise ConfigError(f"max_rounds must be at least 1, not {max_rounds}")
    if budget is None and isinstance(options.get("budget"), dict):  # a resumed solve's
        budget = Budget.model_validate(options["budget"])
    if discovery is None and isinstance(options.get("discovery"), dict):  # a resumed solve's
        recorded = options["discovery"]
        discovery = ToolDiscovery(threshold=recorded.get("threshold"), limit=recorded.get("limit"))
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
        model_settings=model_settings,
        planner=planner,
        budget=budget,
        prices=prices,
        deadline_s=deadline_s,
        ledger=ledger,
        conversation=conversation,
        sub_solves=bool(options.get("sub_solves", False)),
        depth=depth,
        above=above,
        discovery=discovery,
    )


def solve_sync(goal: str, registry: Registry, llm: LLM, **options: Any) -> Solution:
    """:func:`solve` for scripts: runs its own event loop (do not call it from async code)."""

    async def main() -> Solution:
        return await solve(goal, registry, llm, **options)

    return anyio.run(main)
