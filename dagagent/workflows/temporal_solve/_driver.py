"""The driver's side of a solve on Temporal: start the solve's workflow, follow its steps,
record them as a local solve records its own.

:func:`solve_on_temporal` (what :func:`dagagent.solve` does with a
:class:`~dagagent.executors.temporal.TemporalExecutor`) starts the workflow of
:mod:`._workflow` and follows it; :func:`attach_solve` follows one already under way (or
finished), after its driver was lost, and records what its driver could not. Following
is reading the workflow's steps (a query, never in its history; by the workflow's id, so
that it goes on in the workflow's next run when a long solve continues as new) and, for each
round's run,
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

**A person's word.** With ``confirm``, the workflow waits after each plan for a person's
answer: the driver shows the plan (``confirm(graph)``) and signals the answer; a driver that
died while it waited leaves the workflow waiting, and the next :func:`attach_solve` asks
again. A round's run whose calls the approval rules held (they travel with the solve, see
:class:`~dagagent.executors.temporal.TemporalExecutor`'s ``approval``) pauses the solve: the
driver records it ``paused`` and returns, the workflow waits; once decisions are recorded
(``dagagent approve``), :func:`attach_solve` claims them (as ``dagagent resume`` claims a
run's: each is used once), hands them to the workflow by a signal, and follows the run as it
goes on in place.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.to_thread
from pydantic import TypeAdapter
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from ...budget import Prices
from ...errors import (
    ClusterError,
    ConfigError,
    DecisionError,
    JoinerError,
    LLMError,
    PlanningError,
    StoreError,
)
from ...events import (
    InSubSolve,
    JoinerDecided,
    Listener,
    ModelCallFinished,
    PlanExtended,
    RoundFinished,
    RoundStarted,
    RunFinished,
    SubSolveFinished,
    SubSolveStarted,
    TaskParsed,
    get_logger,
)
from ...executors.temporal import TemporalExecutor, workflow_id
from ...executors.temporal._connect import has_workers, worker_hint
from ...executors.temporal._executor import _settle_here, made_again
from ...graph import GrowingGraph, PlanChecker, validate
from ...llm import Usage
from ...plan import Plan, Task
from ...planners import JoinDecision
from ...results import ModelCall, RunResult, SolveStatus
from ...run import Resuming, execute
from ...settings import RunSettings
from ...store import SolveLink
from ..solution import Round, Solution, SolveUsage
from ._activities import _run_result
from ._workflow import DECISIONS, PLAN_ANSWER, SOLVE_WORKFLOW, SOLVE_WORKFLOW_PREFIX, SolveInput

if TYPE_CHECKING:
    from collections.abc import Awaitable, Mapping

    from ...approval import Approval
    from ...graph import PlanGraph
    from ...runner import TaskRunner
    from ...store import RunStore
    from ...tools import Registry

    Confirm = Callable[[PlanGraph], bool | Awaitable[bool]]

__all__ = ["attach_solve", "solve_on_temporal", "solve_workflow_id", "with_policy_file"]

_QUERY_TIMEOUT_S = 5.0


_TASK: TypeAdapter[Task] = TypeAdapter(Task)


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
    confirm: Confirm | None = None,
    registry: Registry | None = None,
    approval: Mapping[str, Any] | None = None,
    sub_solves: bool = False,
    planner: dict[str, Any] | None = None,
    discovery: dict[str, Any] | None = None,
    conversation: dict[str, Any] | None = None,
    record_compression: Callable[[str, int], None] | None = None,
    trace: dict[str, str] | None = None,
) -> Solution:
    """Start solve ``solve_id`` as a workflow and follow it to its end, or until it waits
    for a person's decisions (see the module docstring). ``model``: the spec the workers
    build the model from; ``deadline_s``: the whole solve's time, kept by the workflow
    (workflow time, from its start); ``budget``: what it may spend (``Budget`` JSON), its
    model's calls priced at ``price``; ``confirm``: asked about each plan before it runs
    (``registry``: the tools it is shown with); ``approval``: the rules every round's run
    carries to the workers (default: the executor's); ``sub_solves``: its plans may hold
    sub-solves, each a child solve workflow. ``planner``, ``discovery``, ``conversation``:
    a planner of one's own, the tool discovery and a session's turns as data
    (:mod:`._planning`); ``record_compression``: what records the summary the turn's
    ``compress`` step makes (default: the session turn the store has for the solve);
    ``trace``: the W3C trace context of the solve's span (the driver's), which the workers'
    spans of its steps and tasks join."""
    follower = _Follower(
        solve_id, executor, settings, store, listeners, prices, confirm=confirm, registry=registry
    )
    follower.options = dict(options)
    follower.stopping = True
    follower.record_compression = record_compression
    async with executor.session():
        await executor._wait_for_workers()
        client = executor._client()
        retry = settings.retry
        run: dict[str, Any] = {
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
        if settings.in_doubt != "ask":  # a call a lost worker left in doubt is not asked about
            run["in_doubt"] = settings.in_doubt
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
            history_events=executor.history_events,
            approval=dict(approval) if approval is not None else executor.approval,
            confirm=confirm is not None,
            sub_solves=sub_solves,
            planner=planner,
            discovery=discovery,
            conversation=conversation,
            stream=bool(options.get("stream")) and confirm is None,
            trace=trace,
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
        return await _follow_stoppable(follower, handle)


async def attach_solve(
    solve_id: str,
    *,
    executor: TemporalExecutor,
    store: RunStore | None = None,
    listeners: Sequence[Listener] = (),
    prices: Prices | None = None,
    settings: RunSettings | None = None,
    confirm: Confirm | None = None,
    registry: Registry | None = None,
    decisions: Mapping[str, Approval] | None = None,
    decided_by: str | None = None,
) -> Solution:
    """Follow solve ``solve_id`` on Temporal (under way, or finished) to its end, recording
    what its record lacks; its :class:`Solution`. No tools are needed: the workers run them
    (``registry``, if given, only shows a plan with its tools).

    A solve that waits for a person goes on with their word: for a plan to be approved,
    ``confirm`` is asked (without it, :class:`~dagagent.errors.DecisionError`); for decisions
    about the calls its paused round's run holds, those recorded in ``store`` (``dagagent
    approve``; ``decisions``, ``{task id: Approval}``, are recorded first, as by ``decided_by``
    when the approval does not say) are claimed and handed to it, and the run goes on; with
    none recorded, the solution is ``paused`` again. Stopping this call leaves the solve
    running. Raises :class:`~dagagent.errors.ClusterError` when the server has no such
    solve."""
    follower = _Follower(
        solve_id,
        executor,
        settings or RunSettings(),
        store,
        listeners,
        prices,
        confirm=confirm,
        registry=registry,
        decisions=decisions,
        decided_by=decided_by,
    )
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
    instead of starting one.

    Should the run's workflow end under it without finishing (an operator terminated it,
    say), what it did is recorded as for a plan run's (:meth:`TemporalExecutor.
    _record_ended`): what it finished, and the calls with side effects it cut off, named on a
    worker and in doubt on the run's record; the solve's workflow closes the round (failed)
    as its steps say. Not so when the solve itself cancelled it (its parent's deadline, say):
    the solve's own end says what became of it. When the solve's driver is stopped on
    purpose (``stop``), the run is stopped and recorded as a plan run's driver records a
    run it was stopped during (:meth:`TemporalExecutor._record_stopped`)."""

    #: The run's calls with side effects are made on the workers, which report those a lost
    #: worker or a stop left in doubt: the run records them (its journal), though it has no
    #: tools.
    reports_effects = True

    def __init__(
        self,
        base: TemporalExecutor,
        below: _SubSolves | None = None,
        growing: GrowingGraph | None = None,
        joined: Callable[[Task], None] | None = None,
        stop: _DriverStop | None = None,
    ) -> None:
        self.__dict__.update(base.__dict__)
        self.below = below
        #: Whether the solve's driver was stopped on purpose (``None``: it cannot be, as a
        #: driver that attached to the solve, whose stop leaves the solve running).
        self.stop = stop
        self.joined = joined  # told of each task read from the workflow of a growing plan
        #: a plan being written: its tasks are read from the run's workflow as they reach it
        #: (checked there: here only how they depend on each other)
        self.growing = growing
        self._checker = PlanChecker(None)
        self._handle: WorkflowHandle[Any, Any] | None = None
        self._reading = anyio.Lock()

    async def prepare(self, graph: PlanGraph, runner: TaskRunner) -> None:
        return None  # the solve's workflow runs the plan: nothing to refuse or wait for here

    async def run(self, graph: PlanGraph, runner: TaskRunner, on_failure: Any) -> None:
        handle: WorkflowHandle[Any, list[dict[str, Any]]] = self._client().get_workflow_handle(
            workflow_id(runner.run_id), result_type=list
        )
        try:
            # (a stop while the driver waits to see the run's workflow, which its workers may
            # have started already: what the run did is recorded all the same, below)
            await _started(handle, self.worker_timeout_s + 60.0)
            seen = 0
            if runner.prior is not None:  # a paused run going on: what succeeded stands
                # (the workflow starts with the same results: they are recorded once)
                seen = len(await _settle_here(graph, runner))
                again = made_again(graph, runner)  # calls in doubt said not to have happened
                if again:  # their records get the outcomes of the calls made again
                    self._made_again[runner.run_id] = again
            if self.growing is None:
                await self._follow(handle, runner, seen)
                return
            self._handle = handle
            ended: list[ClusterError] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._read_plan, handle)
                try:
                    await self._follow(handle, runner, seen)
                except ClusterError as exc:  # raised below as it is, not in a group
                    ended.append(exc)
                tg.cancel_scope.cancel()
            if ended:
                raise ended[0]
            await self._grow(handle, final=True)  # what the run had when it ended
        except ClusterError as exc:
            if self._stopped_by_driver():  # it ended as its driver stopped the solve
                with anyio.CancelScope(shield=True):
                    await self._record_stop(handle, runner, graph, on_failure)
                raise
            how = await _ended_under_driver(handle, self._client())
            if how == _BY_ITS_SOLVE and await _solve_ended_first(self._client(), handle):
                # its solve's workflow cancelled it as it ended (its deadline passed while
                # the run ran, say): recorded as it ended, and the solve's last steps, which
                # this driver reads next, say how the round and the solve end
                await self._grown_whole(handle)
                await self._record_ended(
                    handle.id, runner, graph, on_failure, within_s=self.worker_timeout_s
                )
                return
            if how is None or how == _BY_ITS_SOLVE:
                raise  # no worker answers (it goes on without this driver), or the solve
                # was cancelled with it (its driver's stop, its parent's deadline): the
                # solve's own end says what became of it
            # recorded as it ended; the solve's workflow closes the round as failed, as a
            # local solve's round whose run failed, and its steps say so
            get_logger(run_id=runner.run_id).warning(
                "solve.round_run_ended", workflow=handle.id, how=how, error=str(exc)
            )
            await self._grown_whole(handle)
            await self._record_ended(
                handle.id, runner, graph, on_failure, within_s=self.worker_timeout_s
            )
        except BaseException:
            if self._stopped_by_driver():  # (the solve's workflow, cancelled, cancels it)
                with anyio.CancelScope(shield=True):
                    await self._record_stop(handle, runner, graph, on_failure)
            raise

    def _stopped_by_driver(self) -> bool:
        """Whether the solve's driver was stopped on purpose (its caller cancelled it, not a
        task beside this one that failed: see :func:`_follow_stoppable`)."""
        return self.stop is not None and self.stop.stopped

    async def _record_stop(
        self,
        handle: WorkflowHandle[Any, list[dict[str, Any]]],
        runner: TaskRunner,
        graph: PlanGraph,
        on_failure: Any,
    ) -> None:
        """The solve's driver was stopped during this run: record what the run did as a
        plan run's driver does when it is stopped (bounded by ``worker_timeout_s``, twice):
        what it finished, and the calls with side effects it cut off, in doubt on its
        record."""
        try:
            await self._grown_whole(handle)
            await self._record_stopped(handle, runner, graph, on_failure)
        except Exception as lost:  # what stopped the solve is what it raises
            get_logger(run_id=runner.run_id).warning(
                "run.stop_not_recorded", workflow=handle.id, error=repr(lost)
            )

    async def _grown_whole(self, handle: WorkflowHandle[Any, Any]) -> None:
        """A plan being written, whose run ended: its tasks the run's workflow had, read
        (within ``worker_timeout_s``), and the plan closed."""
        graph = self.growing
        if graph is None or graph.complete:
            return
        with anyio.move_on_after(self.worker_timeout_s):
            await self._grow(handle, final=True)
        graph.close()  # (when no worker answered in time: with the tasks read so far)

    async def _read_plan(self, handle: WorkflowHandle[Any, Any]) -> None:
        """Add the tasks of the plan being written to the run's graph as they reach its
        workflow, until the plan is complete."""
        while True:  # asked a few times a second, as the run's progress is
            if await self._grow(handle):
                return
            await anyio.sleep(self.poll_s)

    async def _grow(self, handle: WorkflowHandle[Any, Any], *, final: bool = False) -> bool:
        """Add the tasks the run's workflow has that its graph lacks; whether the plan is
        complete (``final``: the run ended, so it is)."""
        graph = self.growing
        assert graph is not None
        async with self._reading:  # one reader at a time: each task is added once
            return await self._grow_now(handle, graph, final)

    async def _grow_now(
        self, handle: WorkflowHandle[Any, Any], graph: GrowingGraph, final: bool
    ) -> bool:
        if graph.complete:
            return True
        while True:
            try:
                known = await handle.query("plan_tasks", len(graph.plan.tasks))
            except Exception:  # no workflow worker answered now: asked again later
                if not final:
                    return False
                known = {"tasks": [], "streaming": False, "total": len(graph.plan.tasks)}
            for doc in known["tasks"]:
                task = _TASK.validate_python(doc)
                graph.add(self._checker.check(task))
                if self.joined is not None:
                    self.joined(task)
            if len(graph.plan.tasks) >= known["total"]:
                break
        if final or not known["streaming"]:
            graph.close(aborted=bool(known.get("aborted")))
            return True
        return False

    async def _before_recording(self, doc: dict[str, Any]) -> None:
        if self.growing is not None and doc["task_id"] not in self.growing.tasks:
            assert self._handle is not None
            await self._grow(self._handle)  # a result before the driver read its task
        if self.below is not None:  # a task's sub-solves end on record before it does
            await self.below.ended(doc.get("sub_solves") or ())


async def _plan_tasks(handle: WorkflowHandle[Any, Any]) -> tuple[list[dict[str, Any]], int]:
    """The tasks a run's workflow has (query ``plan_tasks``, batch by batch), and how many
    it started with."""
    tasks: list[dict[str, Any]] = []
    while True:
        batch = await handle.query("plan_tasks", len(tasks))
        tasks.extend(batch["tasks"])
        if not batch["tasks"] or len(tasks) >= batch["total"]:
            return tasks, int(batch.get("initial", 0))


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
        *,
        confirm: Confirm | None = None,
        registry: Registry | None = None,
        decisions: Mapping[str, Approval] | None = None,
        decided_by: str | None = None,
    ) -> None:
        self.solve_id = solve_id
        self.confirm = confirm
        self.registry = registry
        self.decisions = dict(decisions or {})
        self.decided_by = decided_by
        self.handle: WorkflowHandle[Any, list[dict[str, Any]]] | None = None
        #: Runs whose decisions this driver claimed and handed on: how each goes on.
        self.resuming: dict[str, Resuming] = {}
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
        #: Records a turn's summary (``None``: in the session turn the store has for it).
        self.record_compression: Callable[[str, int], None] | None = None
        #: Whether the driver that started the solve was stopped on purpose (``None``: this
        #: driver attached to the solve, and stopping it leaves the solve running).
        self.stop: _DriverStop | None = None

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
        self.handle = handle
        try:
            while self.solution is None:
                steps = await self._steps(handle, seen)
                for step in steps:
                    seen += 1  # (counted as it starts: a stop during it does not apply it again)
                    await self._apply(step)
                if not steps and self.solution is None:
                    await anyio.sleep(self.executor.poll_s)
        except BaseException as exc:
            # (a ClusterError: no worker answers, or the workflow ended: unless it ended as
            # the driver stopped it)
            stopped = self.stop is not None and self.stop.stopped
            if cancel_on_stop and (stopped or not isinstance(exc, ClusterError)):
                with anyio.CancelScope(shield=True):
                    with anyio.move_on_after(_QUERY_TIMEOUT_S):
                        with contextlib.suppress(Exception):  # gone already: nothing to stop
                            await handle.cancel()  # interrupted: the solve stops on the workers
                    if stopped:
                        await self._unseen(handle, seen)
                    with anyio.move_on_after(_QUERY_TIMEOUT_S):
                        await self._stopped()
            raise
        return self.solution

    async def _unseen(self, handle: WorkflowHandle[Any, list[dict[str, Any]]], seen: int) -> None:
        """The driver was stopped before it read the solve's steps from number ``seen`` on:
        the rounds among them, their model calls, and the runs they had started (which the
        stop cut off) are recorded, each run as a run its driver was stopped during is (what
        it finished, the calls with side effects it cut off in doubt). Bounded: a stop does
        not wait on a cluster that does not answer."""
        ex = self.executor
        steps: list[dict[str, Any]] = []
        with anyio.move_on_after(_QUERY_TIMEOUT_S), contextlib.suppress(Exception):
            steps = await self._steps(handle, seen)
        with anyio.move_on_after(3 * ex.worker_timeout_s + 2 * _QUERY_TIMEOUT_S):
            for step in steps:
                if step["step"] not in ("round", "calls", "planned", "streaming"):
                    continue
                try:
                    await self._apply(step)
                except Exception as exc:  # the run stopped, as its record now says
                    self.log.info("solve.stopped_run", step=step["step"], error=str(exc))

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
        ex = self.executor
        while True:
            # a workflow task that keeps failing on the workers is said, once
            await ex._stuck.look(ex._client(), handle, solve_id=self.solve_id)
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
        elif kind == "streaming":  # the run starts before its plan is written
            rnd = self._round(step["round"])
            self.runs_started[rnd.number] = step["run_id"]
            rnd.result = await self._streamed_run(step["run_id"], step.get("parent_id"))
        elif kind == "planned":
            rnd = self._round(step["round"])
            rnd.plan = Plan.model_validate(step["plan"])
            followed = rnd.result is not None and rnd.result.run_id == step["run_id"]
            if step.get("streamed") and followed:
                pass  # recorded as its plan was written
            elif step["run_id"] is not None:
                self.runs_started[rnd.number] = step["run_id"]
                rnd.result = await self._run(rnd.plan, step["run_id"], step.get("parent_id"))
        elif kind == "confirm":
            await self._confirm(step)
        elif kind == "paused":
            await self._paused(step)
        elif kind == "resumed":
            rnd = self._round(step["round"])
            assert rnd.plan is not None
            rnd.result = await self._resumed(rnd.plan, step["run_id"])
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

    async def _waiting(self) -> dict[str, Any] | None:
        """What the workflow waits for from a person now (``None``: nothing, or it ended)."""
        assert self.handle is not None
        try:
            found: dict[str, Any] | None = await self.handle.query(
                "waiting", rpc_timeout=timedelta(seconds=_QUERY_TIMEOUT_S)
            )
        except Exception:  # ended (or no worker answers): the steps say what follows
            return None
        return found

    async def _confirm(self, step: dict[str, Any]) -> None:
        """Round ``step["round"]``'s plan waits for a person's answer (unless one came
        already): ask ``confirm`` and hand the answer to the workflow."""
        n = step["round"]
        self._round(n).plan = Plan.model_validate(step["plan"])  # the round has it, run or not
        waiting = await self._waiting()
        if waiting is None or waiting.get("kind") != "plan" or waiting.get("round") != n:
            return  # answered already: the steps after this one say how
        if self.confirm is None:
            raise DecisionError(
                f"solve {self.solve_id} waits for a person to approve round {n}'s plan before "
                f"it runs: attach on a terminal to be asked (dagagent attach {self.solve_id}), "
                "or from Python attach_solve(..., confirm=...)"
            )
        graph = validate(step["plan"], self.registry)
        confirm, answered = self.confirm, []
        async with anyio.create_task_group() as tg:

            async def ask() -> None:
                answer = confirm(graph)
                if inspect.isawaitable(answer):
                    answer = await answer
                answered.append(bool(answer))
                tg.cancel_scope.cancel()

            async def watch() -> None:
                # the workflow stops waiting without this answer (its deadline passed, or
                # another driver answered): an async confirm is not waited for any more
                while True:
                    await anyio.sleep(self.executor.poll_s)
                    assert self.handle is not None
                    try:
                        now = await self.handle.query(
                            "waiting", rpc_timeout=timedelta(seconds=_QUERY_TIMEOUT_S)
                        )
                    except Exception:  # no answer now: ask again later
                        continue
                    if not now or now.get("kind") != "plan" or now.get("round") != n:
                        tg.cancel_scope.cancel()

            tg.start_soon(watch)
            tg.start_soon(ask)
        if answered:
            assert self.handle is not None
            with contextlib.suppress(RPCError):  # it ended meanwhile: its steps say how
                await self.handle.signal(PLAN_ANSWER, {"round": n, "approved": answered[0]})

    async def _paused(self, step: dict[str, Any]) -> None:
        """Round ``step["round"]``'s run holds calls for a person's decision. If the workflow
        still waits for them: hand it the decisions on record, claimed (the round goes on);
        with none, the solve is ``paused`` (recorded so) and this driver is done."""
        n, run_id = step["round"], step["run_id"]
        waiting = await self._waiting()
        if waiting is None or waiting.get("kind") != "decisions" or waiting.get("run_id") != run_id:
            return  # the decisions came already: the steps after this one say how
        rnd = self._round(n)
        store = self.store
        if store is not None:
            decided = await anyio.to_thread.run_sync(self._claim, store, run_id)
            if decided is not None:
                assert self.handle is not None
                try:
                    await self.handle.signal(DECISIONS, {"run_id": run_id, **decided})
                except BaseException:
                    with anyio.CancelScope(shield=True):
                        await anyio.to_thread.run_sync(store.release_resume, run_id)
                        await anyio.to_thread.run_sync(store.release_solve, self.solve_id)
                    raise
                await self.write(
                    "record_round", round=n, run_id=run_id, outcome="running", feedback=rnd.feedback
                )
                return
        rnd.outcome, rnd.reason = "paused", step["reason"]
        await self.write(
            "record_round",
            round=n,
            run_id=run_id,
            outcome="paused",
            reason=rnd.reason,
            feedback=rnd.feedback,
        )
        self.emit(RoundFinished(self.solve_id, n, run_id, "paused", rnd.reason))
        await self._end({"status": "paused", "reason": rnd.reason})

    def _claim(self, store: RunStore, run_id: str) -> dict[str, Any] | None:
        """The decisions recorded about run ``run_id``'s held calls (``decisions`` given to
        this driver recorded first), claimed: the solve and the run go from ``paused`` to
        ``running`` and the decisions are used, in this process. ``answers``, by task, and
        ``effects``, the records of its calls in doubt (a lost worker's) with what a person
        found, by task. ``None`` when none are recorded (nothing is claimed)."""
        from ..resume import record_decision

        for task_id, approval in self.decisions.items():
            record_decision(store, run_id, task_id, approval, by=self.decided_by)
        self.decisions = {}
        if not store.approvals(run_id, states=("decided",)):
            return None
        with contextlib.suppress(DecisionError):  # not paused on record (its driver died)
            store.claim_solve(self.solve_id)
        try:
            run, answers = store.claim_resume(run_id)
        except BaseException:  # another process holds the run: the solve stays as it was
            store.release_solve(self.solve_id)
            raise
        record = store.get_run(run)
        prior = {
            t: r for t, r in record.tasks.items() if r.status.ok or r.status.value == "waiting"
        }
        effects = store.effects(run)
        self.resuming[run] = Resuming(prior, answers, effects)
        doubts: dict[str, list[dict[str, Any]]] = {}
        for e in effects:  # as Effects.in_doubt_of finds them, for the tasks' workers
            doubted = e.state in ("started", "cancelled") or e.resolution is not None
            kept = e.task_id in prior and prior[e.task_id].status.ok
            if e.source == "plan" and doubted and not kept:
                doubts.setdefault(e.task_id, []).append(e.model_dump(mode="json"))
        given = {t: [a.model_dump(mode="json") for a in said] for t, said in answers.items()}
        return {"answers": given, "effects": doubts}

    async def _resumed(self, plan: Plan, run_id: str) -> RunResult:
        """Round's run ``run_id`` goes on in place with the decisions handed to it: followed
        and recorded as ``dagagent resume`` records a run it continues (what succeeded
        stands), by the driver that claimed them; another driver takes it as it ends."""
        resuming = self.resuming.pop(run_id, None)
        store = self.store
        if resuming is None:
            if store is not None and await anyio.to_thread.run_sync(store.exists, run_id):
                return await self._catch_up_run(plan, run_id, going_on=True)
            return await self._run(plan, run_id, None)
        assert store is not None
        record = await anyio.to_thread.run_sync(store.get_run, run_id)
        settings = RunSettings(
            executor=_RunFollower(self.executor, stop=self.stop),
            on_failure=self.settings.on_failure,
            max_elements=self.settings.max_elements,
            retry=self.settings.retry,
        )
        # Stopped before it ends, the run stays claimed by this process: once it is gone,
        # the record says interrupted, and the next driver takes the run as it ended.
        return await execute(
            validate(record.plan),
            None,
            settings=settings,
            run_id=run_id,
            parent_id=record.parent_id,
            store=store,
            listeners=self.listeners,
            resuming=resuming,
        )

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
            executor=_RunFollower(self.executor, below, stop=self.stop),
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

    async def _streamed_run(self, run_id: str, parent_id: str | None) -> RunResult:
        """Round's run ``run_id``, whose plan is written while it runs: followed and
        recorded as a local streamed round's run is (each task on record when it joins the
        plan), or taken whole from its workflow when a driver before this one recorded part
        of it."""
        store = self.store
        if store is not None and await anyio.to_thread.run_sync(store.exists, run_id):
            handle = self.executor._client().get_workflow_handle(workflow_id(run_id))
            with contextlib.suppress(Exception):  # its plan is whole once it has ended
                await handle.result()
            tasks, _ = await _plan_tasks(handle)
            plan = Plan.model_validate({"goal": self.goal, "tasks": tasks})
            return await self._catch_up_run(plan, run_id, grown=True)
        graph = GrowingGraph(self.goal)
        began = time.monotonic()

        def parsed(task: Task) -> None:  # as the planner's reader tells a local solve's
            self.emit(TaskParsed(run_id, task.id, task, time.monotonic() - began))

        follower = _RunFollower(self.executor, growing=graph, joined=parsed, stop=self.stop)
        # the tasks it started with (an earlier attempt's that ran) are its plan at its start
        handle = self.executor._client().get_workflow_handle(workflow_id(run_id))
        await _started(handle, self.executor.worker_timeout_s + 60.0)
        tasks, initial = await _plan_tasks(handle)
        for doc in tasks[:initial]:
            graph.add(follower._checker.check(_TASK.validate_python(doc)))
        settings = RunSettings(
            executor=follower,
            on_failure=self.settings.on_failure,
            max_elements=self.settings.max_elements,
            retry=self.settings.retry,
        )
        return await execute(
            graph,
            None,
            settings=settings,
            run_id=run_id,
            parent_id=parent_id,
            store=store,
            listeners=self.listeners,
        )

    async def _catch_up_run(
        self, plan: Plan, run_id: str, *, going_on: bool = False, grown: bool = False
    ) -> RunResult:
        """Run ``run_id`` as its workflow ended, recorded (unless its record has its end
        already; ``going_on``: a paused record is not its end, the run went on since;
        ``grown``: its plan was written while it ran, and its record has the part the driver
        before saw: the rest joins it, each task at its start if nobody saw it join)."""
        from ...store import RunRecorder

        store = self.store
        assert store is not None
        record = await anyio.to_thread.run_sync(store.get_run, run_id)
        pending = ("running", "interrupted", "paused") if going_on else ("running", "interrupted")
        if record.status.value not in pending:
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
            if grown:
                now = time.time()
                joined = {
                    t.id: record.planned_at.get(t.id)
                    or getattr(result.tasks.get(t.id), "started_at", None)
                    or now
                    for t in plan.tasks
                }
                recorder(PlanExtended(run_id, plan, joined))
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
        follower.stop = owner.stop
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


@dataclass
class _DriverStop:
    """Whether the driver of a solve (the caller of :func:`solve_on_temporal`) was stopped on
    purpose (Ctrl-C, a signal, its caller cancelled it): shared by the followers of the
    solve, of its sub-solves and of their rounds' runs."""

    stopped: bool = False


async def _follow_stoppable(
    follower: _Follower, handle: WorkflowHandle[Any, list[dict[str, Any]]]
) -> Solution:
    """``follower.follow(handle)`` for the driver that started the solve, stopped as its
    caller is. The following runs shielded from the caller's cancellation, which is noted
    first (``follower.stop``), then stops the solve's workflow on the server (which cancels
    its round's run), and only then reaches the following: so each round's run followed
    knows that the driver was stopped on purpose, not that a task beside it failed, and
    records what the run did and the calls it cut off (see :class:`_RunFollower`). Each of
    those steps is bounded; a second signal ends the command-line process at once."""
    stop = follower.stop = _DriverStop()
    inner = anyio.CancelScope(shield=True)
    done = anyio.Event()
    found: list[Solution] = []
    failed: list[BaseException] = []

    async def following() -> None:
        try:
            with inner:
                found.append(await follower.follow(handle, cancel_on_stop=True))
        except BaseException as exc:  # raised to the caller, below
            failed.append(exc)
        finally:
            done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(following)
        try:
            await done.wait()
        except BaseException:  # the caller stops the solve
            with anyio.CancelScope(shield=True):
                stop.stopped = True  # (first: a run that ends from now on ended by this stop)
                with anyio.move_on_after(_QUERY_TIMEOUT_S), contextlib.suppress(Exception):
                    await handle.cancel()  # the solve stops on the workers, its run with it
                inner.cancel()
                await done.wait()
            raise
    if failed:
        raise failed[0]
    return found[0]


#: What :func:`_ended_under_driver` says of a run its solve's workflow cancelled.
_BY_ITS_SOLVE = "cancelled by its solve"


async def _ended_under_driver(handle: WorkflowHandle[Any, Any], client: Client) -> str | None:
    """How round's run workflow ``handle`` ended, when it ended without finishing:
    ``"terminated"`` (by an operator, say), ``"cancelled"`` (by a client, not by its solve's
    workflow), ``"timed out"``, ``"failed"``; :data:`_BY_ITS_SOLVE` when its solve's workflow
    cancelled it, or the server did as the solve's workflow closed (its deadline passed, or
    the solve was stopped: by its parent's deadline, say). ``None`` when it runs still (no
    worker answers), or when the server cannot tell (within a few seconds)."""
    try:
        with anyio.fail_after(2 * _QUERY_TIMEOUT_S):
            rpc = timedelta(seconds=_QUERY_TIMEOUT_S)
            described = await handle.describe(rpc_timeout=rpc)
            status = described.status
            if status in (
                None,
                WorkflowExecutionStatus.RUNNING,
                WorkflowExecutionStatus.COMPLETED,
                WorkflowExecutionStatus.CONTINUED_AS_NEW,
            ):
                return None
            if status is not WorkflowExecutionStatus.CANCELED:
                return status.name.lower().replace("_", " ")
            async for event in handle.fetch_history_events(rpc_timeout=rpc):
                if event.HasField("workflow_execution_cancel_requested_event_attributes"):
                    asked = event.workflow_execution_cancel_requested_event_attributes
                    if asked.external_workflow_execution.workflow_id:
                        return _BY_ITS_SOLVE  # its solve's workflow (its parent) cancelled it
                    break
            if described.parent_id:  # a solve that ended (its deadline passed, say) cancels
                # the round's run as it closes, by the server's hand: the solve's end says why
                parent = client.get_workflow_handle(described.parent_id)
                if (await parent.describe(rpc_timeout=rpc)).status not in (
                    None,
                    WorkflowExecutionStatus.RUNNING,
                ):
                    return _BY_ITS_SOLVE
            return "cancelled"
    except Exception:  # the server did not answer: the run's error stands
        return None


async def _solve_ended_first(client: Client, handle: WorkflowHandle[Any, Any]) -> bool:
    """Whether the solve's workflow that cancelled round's run ``handle`` completed (its
    deadline passed: its steps say how the round and the solve ended), rather than being
    cancelled itself; asked for a few seconds while it is still running (it cancels the run
    as it ends). ``False`` when the server cannot tell."""
    try:
        with anyio.fail_after(2 * _QUERY_TIMEOUT_S):
            rpc = timedelta(seconds=_QUERY_TIMEOUT_S)
            described = await handle.describe(rpc_timeout=rpc)
            if not described.parent_id:
                return False
            solve = client.get_workflow_handle(described.parent_id, run_id=described.parent_run_id)
            while True:
                status = (await solve.describe(rpc_timeout=rpc)).status
                if status is not WorkflowExecutionStatus.RUNNING:
                    return status is WorkflowExecutionStatus.COMPLETED
                await anyio.sleep(0.05)
    except Exception:  # the server did not answer: the run's error stands
        return False


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


def with_policy_file(approval: Mapping[str, Any] | None, path: Path) -> dict[str, Any]:
    """``approval`` (a run's rules as data, see :func:`dagagent.approval.run_policies`) with
    the rules of the policy file ``path``, read now, as the workers will apply them. Raises
    :class:`ConfigError` for a file that cannot be used (its mistakes) or when ``approval``
    has a policy's rules already. Its limits count the solve's calls across its rounds, as
    a local solve's do."""
    from ...approval import Policy, read_policy_file

    given = dict(approval or {})
    if given.get("rules") is not None:
        raise ConfigError(
            f"the solve has two policies: the executor's approval rules hold one already, and "
            f"policy file {path} is another; give one (merge their rules)"
        )
    document, origin = read_policy_file(path)
    Policy.from_dict(document, origin=origin)  # its mistakes, said now
    return {**given, "policy": str(path.resolve()), "rules": document}


def refuse_unsupported(**given: Any) -> None:
    """A :class:`ConfigError` naming the first option a solve on Temporal cannot honour."""
    reasons = {
        "interceptors": "interceptors of this process (a Policy object, redaction, tracing): "
        "the tool calls run on the workers, which they cannot reach. Give approval rules as "
        "data, which travel with each round's run (a policy file: policy=PATH, --policy; "
        "TemporalExecutor(approval={'rules': ..., 'ask': [...]}); --ask), or give the "
        "interceptors to the workers (dagagent worker --interceptors MODULE:ATTR, "
        "serve(..., interceptors=...))",
    }
    for name, why in reasons.items():
        if given.get(name):
            raise ConfigError(
                f"a solve on the temporal executor cannot take {why}; or run without them, "
                "or choose another executor"
                if name == "interceptors"
                else f"a solve on the temporal executor cannot take {why}; run without it, or "
                "choose another executor"
            )
