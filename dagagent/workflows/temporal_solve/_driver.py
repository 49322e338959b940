"""The driver's side of a solve on Temporal: start the solve's workflow, follow its steps,
record them as a local solve records its own.

:func:`solve_on_temporal` (what :func:`dagagent.solve` does with a
:class:`~dagagent.executors.temporal.TemporalExecutor`) starts the workflow of
:mod:`._workflow` and follows it; :func:`attach_solve` follows one already under way (or
finished), after its driver was lost, and records what its driver could not. Following
is reading the workflow's steps (a query, never in its history) and, for each round's run,
following that run's own workflow as the executor follows a plan run: the run store gets
the solve, its rounds, every model call (role, tokens, cost at the driver's prices, what
the model wrote) and each round's run with its tasks, so ``show`` and the viewer read a
solve on Temporal as a local one; the listeners hear the same events.

The workflow does not need the driver: kill it, and the solve goes on on the workers;
:func:`attach_solve` (``dagagent attach SOLVE``) picks it up. Interrupting the driver on
purpose (Ctrl-C, cancelling the call) cancels the workflow, as for a plan run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from ...budget import Prices
from ...errors import ClusterError, ConfigError, JoinerError, LLMError, PlanningError, StoreError
from ...events import (
    JoinerDecided,
    Listener,
    ModelCallFinished,
    RoundFinished,
    RoundStarted,
    RunFinished,
    get_logger,
)
from ...executors.temporal import TemporalExecutor, workflow_id
from ...executors.temporal._connect import has_workers, worker_hint
from ...llm import Usage
from ...plan import Plan
from ...planners import JoinDecision
from ...results import ModelCall, RunResult, SolveStatus
from ...run import execute
from ...settings import RunSettings
from ..solution import Round, Solution, SolveUsage
from ._activities import _run_result
from ._workflow import SOLVE_WORKFLOW, SolveInput

if TYPE_CHECKING:
    from ...graph import PlanGraph
    from ...runner import TaskRunner
    from ...store import RunStore

__all__ = ["attach_solve", "solve_on_temporal", "solve_workflow_id"]

_QUERY_TIMEOUT_S = 5.0


def solve_workflow_id(solve_id: str) -> str:
    """The id of the workflow that runs solve ``solve_id``."""
    return f"dagagent-solve-{solve_id}"


async def solve_on_temporal(
    goal: str,
    *,
    model: dict[str, Any],
    executor: TemporalExecutor,
    settings: RunSettings,
    solve_id: str,
    options: dict[str, Any],
    max_rounds: int,
    max_attempts: int,
    structured: bool,
    store: RunStore | None,
    agent_tasks: bool = False,
    listeners: Sequence[Listener],
    prices: Prices | None,
    deadline_s: float | None = None,
    budget: dict[str, Any] | None = None,
    price: dict[str, float] | None = None,
    planner: dict[str, Any] | None = None,
    discovery: dict[str, Any] | None = None,
    conversation: dict[str, Any] | None = None,
    record_compression: Callable[[str, int], None] | None = None,
) -> Solution:
    """Start solve ``solve_id`` as a workflow and follow it to its end (see the module
    docstring). ``model``: the spec the workers build the model from; ``deadline_s``: the
    whole solve's time, kept by the workflow (workflow time, from its start); ``budget``: what
    it may spend (``Budget`` JSON), its model's calls priced at ``price``. ``planner``,
    ``discovery``, ``conversation``: a planner of one's own, the tool discovery and a
    session's turns as data (:mod:`._planning`); ``record_compression``: what records the
    summary the turn's ``compress`` step makes (default: the session turn the store has for
    the solve)."""
    follower = _Follower(solve_id, executor, settings, store, listeners, prices)
    follower.record_compression = record_compression
    async with executor.session():
        await executor._wait_for_workers()
        client = executor._client()
        retry = settings.retry
        run = {
            "on_failure": settings.on_failure,
            "max_elements": settings.max_elements,
            "retry": {k: float(v) for k, v in asdict(retry).items()},
            "max_concurrency": settings.max_concurrency,
            "max_running": executor.max_running,
            "chunk_elements": executor.chunk_elements,
            "heartbeat_s": executor.heartbeat_s,
            "lost_worker_retries": executor.lost_worker_retries,
            "history_events": executor.history_events,
        }
        inp = SolveInput(
            solve_id=solve_id,
            goal=goal,
            model=model,
            max_rounds=max_rounds,
            max_attempts=max_attempts,
            structured=structured,
            run=run,
            task_queue=executor.task_queue,
            heartbeat_s=executor.heartbeat_s,
            lost_worker_retries=executor.lost_worker_retries,
            agent_tasks=agent_tasks,
            deadline_s=deadline_s,
            budget=budget,
            price=price,
            planner=planner,
            discovery=discovery,
            conversation=conversation,
        )
        await follower.write("start_solve", goal=goal, options=options)
        wid = solve_workflow_id(solve_id)
        try:
            handle: WorkflowHandle[Any, list[dict[str, Any]]] = await client.start_workflow(
                SOLVE_WORKFLOW, inp, id=wid, task_queue=executor.task_queue, result_type=list
            )
        except WorkflowAlreadyStartedError:
            raise ClusterError(
                f"a workflow {wid} already runs on the Temporal server at {executor.address}: "
                "solve ids are not reused"
            ) from None
        executor.workflow_id = wid
        return await follower.follow(handle, cancel_on_stop=True)


async def attach_solve(
    solve_id: str,
    *,
    executor: TemporalExecutor,
    store: RunStore | None = None,
    listeners: Sequence[Listener] = (),
    prices: Prices | None = None,
    settings: RunSettings | None = None,
) -> Solution:
    """Follow solve ``solve_id`` on Temporal (under way, or finished) to its end, recording
    what its record lacks; its :class:`Solution`. No tools are needed: the workers run them.
    Stopping this call leaves the solve running. Raises
    :class:`~dagagent.errors.ClusterError` when the server has no such solve."""
    follower = _Follower(solve_id, executor, settings or RunSettings(), store, listeners, prices)
    async with executor.session():
        client = executor._client()
        wid = solve_workflow_id(solve_id)
        handle: WorkflowHandle[Any, list[dict[str, Any]]] = client.get_workflow_handle(
            wid, result_type=list
        )
        try:
            await handle.describe()
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise ClusterError(
                    f"no solve {solve_id} on the Temporal server at {executor.address} "
                    f"(namespace {executor.namespace!r}): no workflow {wid}"
                ) from None
            raise ClusterError(f"cannot ask the Temporal server about {wid}: {exc}") from None
        executor.workflow_id = wid
        return await follower.follow(handle, cancel_on_stop=False)


class _RunFollower(TemporalExecutor):
    """The executor of a round's run: follows the run workflow the solve's workflow started,
    instead of starting one."""

    def __init__(self, base: TemporalExecutor) -> None:
        self.__dict__.update(base.__dict__)

    async def prepare(self, graph: PlanGraph, runner: TaskRunner) -> None:
        return None  # the solve's workflow runs the plan: nothing to refuse or wait for here

    async def run(self, graph: PlanGraph, runner: TaskRunner, on_failure: Any) -> None:
        handle: WorkflowHandle[Any, list[dict[str, Any]]] = self._client().get_workflow_handle(
            workflow_id(runner.run_id), result_type=list
        )
        await _started(handle, self.worker_timeout_s + 60.0)
        await self._follow(handle, runner, 0)


async def _started(handle: WorkflowHandle[Any, Any], within_s: float) -> None:
    """Until the workflow ``handle`` names exists (a child is started just after the step
    that announces it)."""
    with anyio.move_on_after(within_s):
        while True:
            try:
                await handle.describe()
                return
            except RPCError as exc:
                if exc.status is not RPCStatusCode.NOT_FOUND:
                    raise _unreachable(handle.id, exc) from None
            await anyio.sleep(0.05)
    raise ClusterError(f"the run workflow {handle.id} did not start within {within_s:g} s")


class _Follower:
    """Reads a solve workflow's steps and records them (see the module docstring)."""

    def __init__(
        self,
        solve_id: str,
        executor: TemporalExecutor,
        settings: RunSettings,
        store: RunStore | None,
        listeners: Sequence[Listener],
        prices: Prices | None,
    ) -> None:
        self.solve_id = solve_id
        self.executor = executor
        self.settings = settings
        self.store = store
        self.listeners = tuple(listeners)
        self.prices = prices or Prices()
        self.goal = ""
        self.rounds: list[Round] = []
        self.calls: list[ModelCall] = []
        self.not_recorded: list[str] = []
        self.solution: Solution | None = None
        self.log = get_logger(solve_id=solve_id)
        #: Records a turn's summary (``None``: in the session turn the store has for it).
        self.record_compression: Callable[[str, int], None] | None = None

    def emit(self, event: Any) -> None:
        for listener in self.listeners:
            listener(event)

    async def write(self, what: str, **values: Any) -> None:
        """Write to the store (in a thread); a failed write is noted, never fatal."""
        if self.store is None:
            return
        call: Callable[[], Any] = (
            partial(getattr(self.store, what), self.solve_id, **values)
            if what != "record_model_calls"
            else partial(self.store.record_model_calls, values["calls"])
        )
        try:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(call)
        except StoreError as exc:
            self.log.warning("solve.not_recorded", what=what, error=str(exc))
            self.not_recorded.append(f"{what.replace('_', ' ')} ({exc})")

    # -- following ---------------------------------------------------------------------------

    async def follow(
        self, handle: WorkflowHandle[Any, list[dict[str, Any]]], *, cancel_on_stop: bool
    ) -> Solution:
        seen = 0
        try:
            while self.solution is None:
                steps = await self._steps(handle, seen)
                for step in steps:
                    await self._apply(step)
                    seen += 1
                if not steps and self.solution is None:
                    await anyio.sleep(self.executor.poll_s)
        except BaseException as exc:
            if cancel_on_stop and not isinstance(exc, ClusterError):
                with (
                    anyio.CancelScope(shield=True),
                    anyio.move_on_after(_QUERY_TIMEOUT_S),
                ):
                    with contextlib.suppress(Exception):  # gone already: nothing to stop
                        await handle.cancel()  # interrupted: the solve stops on the workers
                    await self._stopped()
            raise
        return self.solution

    async def _stopped(self) -> None:
        if self.rounds and not self.rounds[-1].outcome:
            rnd = self.rounds[-1]
            await self.write(
                "record_round",
                round=rnd.number,
                run_id=rnd.run_id,
                outcome="cancelled",
                reason="the solve was stopped",
                feedback=rnd.feedback,
            )
        await self.write("finish_solve", status="cancelled", reason="the solve was stopped")

    async def _steps(
        self, handle: WorkflowHandle[Any, list[dict[str, Any]]], seen: int
    ) -> list[dict[str, Any]]:
        """The steps from number ``seen`` on: by a query while the workflow runs, from its
        result once it has ended."""
        unanswered_since: float | None = None
        while True:
            try:
                answer: dict[str, Any] = await handle.query(
                    "steps", seen, rpc_timeout=timedelta(seconds=_QUERY_TIMEOUT_S)
                )
                steps: list[dict[str, Any]] = answer["steps"]
                return steps
            except Exception:  # no worker answered, or the workflow is over
                pass
            try:
                described = await handle.describe()
            except RPCError as exc:
                raise _unreachable(handle.id, exc) from None
            status = described.status
            if status is not None and status is not WorkflowExecutionStatus.RUNNING:
                if status is WorkflowExecutionStatus.COMPLETED:
                    return (await handle.result())[seen:]
                name = status.name.lower()
                raise ClusterError(
                    f"the solve's workflow {handle.id} on the Temporal server at "
                    f"{self.executor.address} ended without finishing the solve ({name})"
                )
            now = time.monotonic()
            unanswered_since = unanswered_since or now
            ex = self.executor
            if now - unanswered_since >= ex.worker_timeout_s and not await has_workers(
                ex._client(), ex.task_queue
            ):
                raise ClusterError(
                    f"no worker serves task queue {ex.task_queue!r} any more (none answered "
                    f"for {ex.worker_timeout_s:g} s); the solve's workflow {handle.id} stays "
                    f"on the Temporal server at {ex.address} and goes on when a worker comes "
                    f"({worker_hint(ex.address, ex.task_queue)}); then follow it with "
                    f"dagagent attach {self.solve_id}"
                )
            await anyio.sleep(ex.poll_s)

    # -- the steps ---------------------------------------------------------------------------

    async def _apply(self, step: dict[str, Any]) -> None:
        kind = step["step"]
        if kind == "start":
            self.goal = step["goal"]
            if self.store is not None and not await self._solve_recorded():
                await self.write("start_solve", goal=self.goal, options={"executor": "temporal"})
        elif kind == "round":
            n = step["round"]
            self.emit(
                RoundStarted(
                    self.solve_id, n, self.goal, time.time(), step["parent_id"], step["feedback"]
                )
            )
            self.rounds.append(Round(number=n, feedback=step["feedback"]))
            await self.write(
                "record_round",
                round=n,
                run_id=step["run_id"],
                outcome="running",
                feedback=step["feedback"],
            )
        elif kind == "calls":
            records = [self._priced(ModelCall.model_validate(c)) for c in step["calls"]]
            self.calls.extend(records)
            await self.write("record_model_calls", calls=records)
            for record in records:
                self.emit(ModelCallFinished(self.solve_id, record))
        elif kind == "planned":
            rnd = self._round(step["round"])
            rnd.plan = Plan.model_validate(step["plan"])
            if step["run_id"] is not None:
                rnd.result = await self._run(rnd.plan, step["run_id"], step.get("parent_id"))
        elif kind == "joined":
            rnd = self._round(step["round"])
            decision = rnd.decision = JoinDecision.model_validate(step["decision"])
            self.emit(
                JoinerDecided(
                    self.solve_id,
                    rnd.number,
                    step["run_id"],
                    decision.action,
                    decision.answer,
                    tuple(decision.cites),
                    decision.feedback,
                )
            )
        elif kind == "closed":
            rnd = self._round(step["round"])
            rnd.outcome, rnd.reason = step["outcome"], step["reason"]
            await self.write(
                "record_round",
                round=rnd.number,
                run_id=rnd.run_id or step["run_id"],
                outcome=rnd.outcome,
                reason=rnd.reason,
                decision=rnd.decision.to_json_dict() if rnd.decision is not None else None,
                feedback=rnd.feedback,
            )
            self.emit(
                RoundFinished(self.solve_id, rnd.number, step["run_id"], rnd.outcome, rnd.reason)
            )
        elif kind == "compressed":
            await self._compressed(step["summary"], int(step["upto"]))
        elif kind == "not_compressed":  # the turn goes on with the conversation whole
            self.log.warning("solve.not_compressed", error=step["error"])
        elif kind == "end":
            await self._end(step)

    async def _compressed(self, summary: str, upto: int) -> None:
        """The turn's compression: recorded with the turn, so that a resume reads it rather
        than asking the model again (a failed write is noted, as a local turn notes it)."""
        record, store = self.record_compression, self.store
        try:
            with anyio.CancelScope(shield=True):
                if record is None and store is not None:
                    found = await anyio.to_thread.run_sync(store.session_of_solve, self.solve_id)
                    if found is not None:
                        record = partial(store.record_compression, *found)
                if record is not None:
                    await anyio.to_thread.run_sync(record, summary, upto)
        except StoreError as exc:
            self.log.warning("solve.not_recorded", what="compression", error=str(exc))
            self.not_recorded.append(f"the conversation's summary ({exc})")

    def _round(self, n: int) -> Round:
        return next(r for r in self.rounds if r.number == n)

    def _priced(self, record: ModelCall) -> ModelCall:
        """``record`` with its cost at the driver's prices."""
        cost = self.prices.cost(
            record.model, record.provider, record.input_tokens, record.output_tokens
        )
        return record.model_copy(update={"cost_usd": cost})

    async def _solve_recorded(self) -> bool:
        store = self.store
        assert store is not None
        try:
            await anyio.to_thread.run_sync(store.get_solve, self.solve_id)
        except StoreError:
            return False
        return True

    async def _run(self, plan: Plan, run_id: str, parent_id: str | None) -> RunResult:
        """Round's run ``run_id``: followed and recorded as it goes (as ``execute`` records a
        run), or, when a driver before this one recorded part of it, taken whole from its
        workflow and recorded as it ended."""
        store = self.store
        if store is not None and await anyio.to_thread.run_sync(store.exists, run_id):
            return await self._catch_up_run(plan, run_id)
        settings = RunSettings(
            executor=_RunFollower(self.executor),
            on_failure=self.settings.on_failure,
            max_elements=self.settings.max_elements,
            retry=self.settings.retry,
        )
        # No registry: the workers checked the plan against their tools and run them; this
        # process only records what they did.
        return await execute(
            plan,
            None,
            settings=settings,
            run_id=run_id,
            parent_id=parent_id,
            store=store,
            listeners=self.listeners,
        )

    async def _catch_up_run(self, plan: Plan, run_id: str) -> RunResult:
        from ...store import RunRecorder

        store = self.store
        assert store is not None
        record = await anyio.to_thread.run_sync(store.get_run, run_id)
        if record.status.value not in ("running", "interrupted"):
            return record.as_result()  # recorded whole by the driver before
        handle: WorkflowHandle[Any, list[dict[str, Any]]] = (
            self.executor._client().get_workflow_handle(workflow_id(run_id), result_type=list)
        )
        docs = await handle.result()
        result = _run_result(run_id, plan, docs).model_copy(
            update={"parent_id": record.parent_id, "started_at": record.started_at or time.time()}
        )
        recorder = RunRecorder(store, run_id, resumed=True)
        recorder.start()
        try:
            for r in result.tasks.values():
                recorder.record(r)
            recorder(RunFinished(run_id, result))
        finally:
            await anyio.to_thread.run_sync(recorder.close)
        return result

    async def _end(self, step: dict[str, Any]) -> None:
        status = SolveStatus(step["status"])
        decision = JoinDecision.model_validate(step["decision"]) if step.get("decision") else None
        error: Exception | None = None
        failure = step.get("error")
        if failure is not None:
            kind, message = failure.get("kind"), failure["error"]
            error = (
                PlanningError(message)
                if kind == "planning"
                else JoinerError(message)
                if kind == "joining"
                else LLMError(message)
                if kind == "model"
                else ClusterError(message)  # no worker could make the step
            )
        usage = SolveUsage(
            planner=_usage(self.calls, "planner", "replanner"),
            agents=_usage(self.calls, "agent"),
            joiner=_usage(self.calls, "joiner"),
            compress=_usage(self.calls, "compress"),
        )
        solution = Solution(
            solve_id=self.solve_id,
            goal=self.goal,
            status=status,
            reason=step["reason"],
            answer=decision.answer if decision is not None else None,
            cites=list(decision.cites) if decision is not None else [],
            rounds=self.rounds,
            usage=usage,
            calls=list(self.calls),
            error=error,
        )
        await self.write(
            "finish_solve",
            status=status.value,
            reason=solution.reason,
            answer=solution.answer,
            cites=solution.cites,
            run_id=solution.run_id,
            usage=usage.to_json_dict(),
        )
        lost = [
            f"run {r.run_id}: {r.result.record_loss}"
            for r in self.rounds
            if r.result is not None and r.result.record_loss is not None
        ]
        solution.not_recorded = [*self.not_recorded, *lost]
        self.solution = solution


def _unreachable(workflow: str, exc: RPCError) -> ClusterError:
    """The server did not answer about ``workflow``: the solve goes on without this driver."""
    return ClusterError(
        f"the Temporal server did not answer about workflow {workflow}: "
        f"{' '.join(str(exc).split()) or type(exc).__name__}; the solve goes on on the workers "
        "if the server does (dagagent attach follows it again)"
    )


def _usage(calls: Sequence[ModelCall], *roles: str) -> Usage:
    return sum((c.usage for c in calls if c.role in roles), Usage())


def refuse_unsupported(**given: Any) -> None:
    """A :class:`ConfigError` naming the first option a solve on Temporal cannot honour."""
    reasons = {
        "confirm": "confirming each plan (--approve): the workers run the rounds unattended",
        "interceptors": "interceptors and approval rules (--ask, --policy, --approve): the "
        "tool calls run on the workers, which this process's interceptors cannot reach",
        "budget": "a budget of tool calls (--max-tool-calls), nor a budget with agent tasks "
        "(--agent-tasks): a round's run on the workers does not spend it yet",
        "sub_solves": "sub-solves (--sub-solves): the workers do not run a solve inside a task",
    }
    for name, why in reasons.items():
        if given.get(name):
            raise ConfigError(
                f"a solve on the temporal executor cannot take {why}; run without it, or "
                "choose another executor"
            )
