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

**Sub-solves.** A round's run whose sub-solve tasks started child solves (the run's
workflow lists them: its query ``sub_solves``): each is followed as the solve itself is, by a
follower of its own, and recorded as a local sub-solve is: a solve of its own linked to its
task (:class:`~dagagent.store.SolveLink`) at its depth, whose events reach the listeners
wrapped in :class:`~dagagent.events.InSubSolve`, between ``SubSolveStarted`` and
``SubSolveFinished``. The run is over for the driver once its sub-solves are recorded.

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
import anyio.abc
import anyio.to_thread
from temporalio.client import WorkflowExecutionStatus, WorkflowHandle
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from ...budget import Prices
from ...errors import ClusterError, ConfigError, JoinerError, LLMError, PlanningError, StoreError
from ...events import (
    InSubSolve,
    JoinerDecided,
    Listener,
    ModelCallFinished,
    RoundFinished,
    RoundStarted,
    RunFinished,
    SubSolveFinished,
    SubSolveStarted,
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
from ...store import SolveLink
from ..solution import Round, Solution, SolveUsage
from ._activities import _run_result
from ._workflow import SOLVE_WORKFLOW, SOLVE_WORKFLOW_PREFIX, SolveInput

if TYPE_CHECKING:
    from ...graph import PlanGraph
    from ...runner import TaskRunner
    from ...store import RunStore

__all__ = ["attach_solve", "solve_on_temporal", "solve_workflow_id"]

_QUERY_TIMEOUT_S = 5.0


def solve_workflow_id(solve_id: str) -> str:
    """The id of the workflow that runs solve ``solve_id``."""
    return f"{SOLVE_WORKFLOW_PREFIX}{solve_id}"


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
    sub_solves: bool = False,
) -> Solution:
    """Start solve ``solve_id`` as a workflow and follow it to its end (see the module
    docstring). ``model``: the spec the workers build the model from; ``deadline_s``: the
    whole solve's time, kept by the workflow (workflow time, from its start); ``budget``: what
    it may spend (``Budget`` JSON), its model's calls priced at ``price``; ``sub_solves``:
    its plans may hold sub-solves, each a child solve workflow."""
    follower = _Follower(solve_id, executor, settings, store, listeners, prices)
    follower.options = dict(options)
    follower.stopping = True
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
            sub_solves=sub_solves,
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
        if store is not None:  # what its sub-solves are recorded with
            with contextlib.suppress(StoreError):
                recorded = await anyio.to_thread.run_sync(store.get_solve, solve_id)
                follower.options = dict(recorded.options or {})
        return await follower.follow(handle, cancel_on_stop=False)


class _RunFollower(TemporalExecutor):
    """The executor of a round's run: follows the run workflow the solve's workflow started,
    instead of starting one."""

    def __init__(self, base: TemporalExecutor, below: _SubSolves | None = None) -> None:
        self.__dict__.update(base.__dict__)
        self.below = below

    async def prepare(self, graph: PlanGraph, runner: TaskRunner) -> None:
        return None  # the solve's workflow runs the plan: nothing to refuse or wait for here

    async def run(self, graph: PlanGraph, runner: TaskRunner, on_failure: Any) -> None:
        handle: WorkflowHandle[Any, list[dict[str, Any]]] = self._client().get_workflow_handle(
            workflow_id(runner.run_id), result_type=list
        )
        await _started(handle, self.worker_timeout_s + 60.0)
        await self._follow(handle, runner, 0)

    async def _before_recording(self, doc: dict[str, Any]) -> None:
        if self.below is not None:  # a task's sub-solves end on record before it does
            await self.below.ended(doc.get("sub_solves") or ())


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
        #: The options the solve was started with (its sub-solves are recorded with them).
        self.options: dict[str, Any] = {}
        #: Whether stopping this driver stops the solve (and its sub-solves) on the workers.
        self.stopping = False
        #: The run each round started (by round number), once it started.
        self.runs_started: dict[int, str] = {}
        #: Its sub-solves, as they ended (what they used counts for it).
        self.below: list[Solution] = []

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
                run_id=rnd.run_id or self.runs_started.get(rnd.number),
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
            if step.get("sub_solves"):  # its runs' sub-solves are followed too
                self.options["sub_solves"] = True
            if self.store is not None and not await self._solve_recorded():
                options = {"executor": "temporal", **self.options}
                await self.write("start_solve", goal=self.goal, options=options)
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
                self.runs_started[rnd.number] = step["run_id"]
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
        elif kind == "end":
            await self._end(step)

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
        """Round's run ``run_id`` and the sub-solves its tasks started, each followed and
        recorded (see :meth:`_the_run` and :class:`_SubSolves`)."""
        if not self.options.get("sub_solves") or not any(
            getattr(t, "solve", False) for t in plan.tasks
        ):
            return await self._the_run(plan, run_id, parent_id)
        async with anyio.create_task_group() as tg:
            below = _SubSolves(self, run_id, tg)
            watching = anyio.CancelScope()
            tg.start_soon(below.watch, watching)
            try:
                result = await self._the_run(plan, run_id, parent_id, below)
            except anyio.get_cancelled_exc_class():
                if self.stopping:  # those under way stop with the solve
                    await below.stopped()
                raise
            watching.cancel()
            await below.last()  # those the watch had not seen yet; then each to its end
        return result

    async def _the_run(
        self, plan: Plan, run_id: str, parent_id: str | None, below: _SubSolves | None = None
    ) -> RunResult:
        """Round's run ``run_id``: followed and recorded as it goes (as ``execute`` records a
        run), or, when a driver before this one recorded part of it, taken whole from its
        workflow and recorded as it ended."""
        store = self.store
        if store is not None and await anyio.to_thread.run_sync(store.exists, run_id):
            return await self._catch_up_run(plan, run_id)
        settings = RunSettings(
            executor=_RunFollower(self.executor, below),
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
            sub_solves=sum((s.usage.total for s in self.below), Usage()),
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


class _SubSolves:
    """The sub-solves of run ``run_id`` of ``owner``'s solve: each followed and recorded as
    a solve of its own, linked to its task (see the module docstring)."""

    def __init__(self, owner: _Follower, run_id: str, tg: anyio.abc.TaskGroup) -> None:
        self.owner = owner
        self.tg = tg
        self.seen: set[str] = set()
        self.done: dict[str, anyio.Event] = {}  # each followed one's end, on record
        self.handle: WorkflowHandle[Any, list[dict[str, Any]]] = (
            owner.executor._client().get_workflow_handle(workflow_id(run_id), result_type=list)
        )

    async def watch(self, scope: anyio.CancelScope) -> None:
        """Follow each sub-solve the run's workflow says it started, until ``scope`` is
        cancelled (the run is over)."""
        with scope:
            while True:
                try:
                    started: list[dict[str, Any]] = await self.handle.query(
                        "sub_solves", 0, rpc_timeout=timedelta(seconds=_QUERY_TIMEOUT_S)
                    )
                except Exception:  # not started yet, or no worker answered: asked again
                    started = []
                for child in started:
                    self._follow(child)
                await anyio.sleep(self.owner.executor.poll_s)

    async def last(self) -> None:
        """The run is over: the sub-solves its results name (those the watch missed, or
        all of them when it had ended before this driver came) are followed too."""
        try:
            docs = await self.handle.result()
        except Exception:  # it ended without results: its sub-solves were cancelled with it
            return
        for doc in docs:
            for child in doc.get("sub_solves") or ():
                self._follow(child)

    def _follow(self, child: dict[str, Any]) -> None:
        if child["solve_id"] not in self.seen:
            self.seen.add(child["solve_id"])
            self.done[child["solve_id"]] = anyio.Event()
            self.tg.start_soon(self._child, child)

    async def ended(self, children: Sequence[dict[str, Any]]) -> None:
        """Until each of ``children`` (a task's sub-solves, ended on the workers) has ended
        on record too."""
        for child in children:
            self._follow(child)
        for child in children:
            await self.done[child["solve_id"]].wait()

    async def _begin(self, child: dict[str, Any]) -> tuple[_Follower, dict[str, Any]]:
        """The follower of sub-solve ``child``, its start recorded (linked to its task), and
        where it comes from (the fields of its events)."""
        owner = self.owner
        child_id = child["solve_id"]
        link = SolveLink(
            solve_id=owner.solve_id,
            run_id=child["run_id"],
            task_id=child["task_id"],
            element=child["element"],
        )
        where: dict[str, Any] = {
            "solve_id": link.solve_id,
            "run_id": link.run_id,
            "task_id": link.task_id,
            "element": link.element,
        }
        depth = int(child["depth"])

        def forward(event: Any) -> None:
            if isinstance(event, (SubSolveStarted, SubSolveFinished, InSubSolve)):
                owner.emit(event)  # from further below: it says whose it is already
            else:
                owner.emit(InSubSolve(**where, child_id=child_id, depth=depth, event=event))

        follower = _Follower(
            child_id,
            owner.executor,
            owner.settings,
            owner.store,
            (forward,) if owner.listeners else (),
            owner.prices,
        )
        follower.options = {**owner.options, "sub_solves": True}
        follower.stopping = owner.stopping
        for gone in ("budget", "deadline_s", "tools"):
            follower.options.pop(gone, None)
        for kept in ("budget", "deadline_s", "tools"):
            if child.get(kept) is not None:
                follower.options[kept] = child[kept]
        if owner.store is not None and not await follower._solve_recorded():
            await follower.write(
                "start_solve",
                goal=child["goal"],
                options=follower.options,
                parent=link,
                depth=depth,
            )
        return follower, where

    async def stopped(self) -> None:
        """The driver stops the solve while the run is under way: the sub-solves the run
        started that the watch had not seen yet are recorded, stopped with it."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(_QUERY_TIMEOUT_S):
            try:
                started: list[dict[str, Any]] = await self.handle.query(
                    "sub_solves", 0, rpc_timeout=timedelta(seconds=_QUERY_TIMEOUT_S)
                )
            except Exception:  # no worker answered: they are not recorded
                return
            for child in started:
                if child["solve_id"] not in self.seen:
                    self.seen.add(child["solve_id"])
                    self.done[child["solve_id"]] = ended = anyio.Event()
                    follower, _ = await self._begin(child)
                    await follower._stopped()
                    ended.set()

    async def _child(self, child: dict[str, Any]) -> None:
        try:
            await self._followed(child)
        finally:
            self.done[child["solve_id"]].set()

    async def _followed(self, child: dict[str, Any]) -> None:
        owner = self.owner
        child_id = child["solve_id"]
        depth = int(child["depth"])
        follower, where = await self._begin(child)
        owner.emit(SubSolveStarted(**where, child_id=child_id, goal=child["goal"], depth=depth))
        owner.log.info("solve.sub_solve", task_id=child["task_id"], child=child_id)
        handle: WorkflowHandle[Any, list[dict[str, Any]]] = (
            owner.executor._client().get_workflow_handle(
                solve_workflow_id(child_id), result_type=list
            )
        )
        try:
            await _started(handle, owner.executor.worker_timeout_s + 60.0)
            solution = await follower.follow(handle, cancel_on_stop=False)
        except ClusterError as exc:
            if not await _ended(handle, owner.executor.worker_timeout_s):
                raise  # no worker, or no server: it goes on without this driver
            # stopped with its task (a deadline, a cancelled run), as a local sub-solve
            # stopped with its parent
            owner.log.warning("solve.sub_solve_stopped", child=child_id, error=str(exc))
            await follower._stopped()
            status, reason = "cancelled", "the solve was stopped"
        except anyio.get_cancelled_exc_class():
            if owner.stopping:  # the driver stops the solve, and so this one with it
                with anyio.CancelScope(shield=True):
                    await follower._stopped()
            raise
        else:
            owner.below.append(solution)
            owner.not_recorded.extend(f"sub-solve {child_id}: {n}" for n in solution.not_recorded)
            status, reason = solution.status.value, solution.reason
        owner.emit(SubSolveFinished(**where, child_id=child_id, status=status, reason=reason))


async def _ended(handle: WorkflowHandle[Any, Any], within_s: float) -> bool:
    """Whether the workflow ``handle`` names has ended (waiting up to ``within_s`` for a
    workflow that is being stopped to end)."""
    with anyio.move_on_after(within_s), contextlib.suppress(Exception):
        await handle.result()  # its end, however it ended
    try:
        described = await handle.describe()
    except RPCError:
        return False
    return described.status not in (None, WorkflowExecutionStatus.RUNNING)


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
        "planner": "a planner of your own (--planner-prompt, --examples): the workers plan with "
        "the default planner",
        "conversation": "a turn of a conversation (--session): the workers plan without the "
        "turns before it",
        "discovery": "a tool discovery of your own (--max-tools, an embed function): the "
        "workers show tools to the model as the default discovery does",
    }
    for name, why in reasons.items():
        if given.get(name):
            raise ConfigError(
                f"a solve on the temporal executor cannot take {why}; run without it, or "
                "choose another executor"
            )
