"""The Temporal executor: the driver's side of a run on Temporal.

``run`` starts the run's workflow (:mod:`._workflow`) on the task queue, follows it (a query
of its progress every ``poll_s``, never recorded in its history) and hands each result to the
run's :class:`~dagagent.runner.TaskRunner` as it comes (:meth:`TaskRunner.ran_elsewhere`),
so the run store, the listeners and the progress display see the run as they see a local
one. The workflow does not need the driver: if the driver dies, the run goes on on the
workers and finishes; a resumed run (``dagagent resume``) follows its workflow if it still
runs or finished, and records what it did; if it ended otherwise (failed, cancelled,
terminated, timed out), the resume reads its history (``_read_ended``) so that no call with
side effects it made, or may have made, is made again unseen. Interrupting the driver
(Ctrl-C, a signal, cancelling ``execute``) cancels the workflow.

A plan still being written starts with the tasks accepted so far; the others reach the
workflow as signals as they are accepted (``_stream``). Tasks a resumed run keeps and
those reused from an earlier run are settled here, before the workflow starts
(``_settle_here``), or, of a plan still being written, as they arrive (``_reused_now``).

Agent tasks run on the workers with the run's model, sent as a spec without its key
(``RunInput.model``); each agent call's record comes back with its task's result, and the
run's model hears of it (``made_elsewhere``: counted in the run's usage, recorded by the
command line's recorder as a local call is).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import anyio
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode, TLSConfig

from ...errors import WORKFLOW_ENDED, ClusterError, ConfigError, DriverLostError
from ...events import get_logger
from ...plan import AgentTask, Task, ToolTask
from ...results import TaskResult, TaskStatus
from ..base import BaseExecutor, Wakeup
from ._connect import (
    DEFAULT_ADDRESS,
    DEFAULT_NAMESPACE,
    DEFAULT_TASK_QUEUE,
    check_address,
    connect,
    has_workers,
    worker_hint,
)
from ._payloads import DEFAULT_INLINE_BYTES, stored
from ._stuck import StuckWatch
from ._workflow import (
    ADD_TASKS,
    IN_DOUBT_RECORD,
    PLAN_COMPLETE,
    RUN_TASK,
    WORKFLOW,
    Arrived,
    RunInput,
)

if TYPE_CHECKING:
    from temporalio.converter import DataConverter, StorageDriver

    from ...graph import PlanGraph
    from ...runner import TaskRunner
    from ...tools import Registry, Tool
    from ..base import FailurePolicy

__all__ = ["TemporalExecutor", "workflow_id"]

_OK = ("succeeded", "reused")

# Why a call a worker named for the record is in doubt, when nothing says more.
_ENDED_FIRST = "its call started on a worker and its workflow ended first"
# Seconds a query of the workflow's progress may take before it counts as unanswered.
_QUERY_TIMEOUT_S = 5.0
# Seconds for which workers seen on the task queue (the server said so, or they just finished
# a run of this executor) stand for workers there: a run started sooner does not ask again.
# A worker gone since is noticed as the run goes (no worker answers its progress queries).
_WORKERS_SEEN_S = 2.0
# Seconds added to a task's own bound (its attempts, their timeouts and the waits between
# them) for the activity's time on the server.
_BOUND_SLACK_S = 60.0


def workflow_id(run_id: str) -> str:
    """The id of the workflow that runs run ``run_id``."""
    return f"dagagent-run-{run_id}"


#: What the server's RPCs fail with when it does not answer (the SDK retried them first).
_UNANSWERED = (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED)


class TemporalExecutor(BaseExecutor):
    """Runs the plan as one Temporal workflow; each task is an activity on ``task_queue``,
    served by ``dagagent worker`` processes (see :func:`~dagagent.executors.temporal.serve`).

    - ``address`` (``HOST:PORT``), ``namespace``: the server; or a connected ``client``
      (its data converter must be :func:`~dagagent.executors.temporal.data_converter`'s).
    - ``tls``: ``True`` (TLS, the system's root certificates) or a ``temporalio.service.
      TLSConfig`` (a CA, a client certificate and key: mTLS); ``api_key``: sent to the
      server as a bearer token (Temporal Cloud), never recorded; with it, TLS unless
      ``tls=False``.
    - ``payloads``: where values over ``inline_bytes`` go instead of the history: a
      directory every worker shares, or any Temporal ``StorageDriver`` (S3, GCS); default
      :func:`~dagagent.executors.temporal.default_payload_dir`.
    - ``worker_timeout_s``: how long a run waits for a worker on the task queue (before it
      starts, and when its workers stop answering) before it fails with
      :class:`~dagagent.errors.ClusterError`.
    - ``approval``: the run's approval rules, as data the workers apply to each call
      (:func:`dagagent.approval.run_policies` says what it holds); a call that asks waits
      for a person and the run pauses.
    - ``max_running``: activities pending at once (Temporal's limit is 2,000);
      ``chunk_elements``: elements of a map per activity; ``heartbeat_s``: how soon a lost
      worker is noticed; ``lost_worker_retries``: how often a task without side effects runs
      again after losing its worker; ``history_events``: the history length at which the
      workflow (a run's, or a solve's between two rounds) continues as new.
    """

    name = "temporal"

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        task_queue: str = DEFAULT_TASK_QUEUE,
        payloads: StorageDriver | str | Path | None = None,
        inline_bytes: int = DEFAULT_INLINE_BYTES,
        client: Client | None = None,
        connect_timeout_s: float = 10.0,
        worker_timeout_s: float = 10.0,
        max_running: int = 1000,
        chunk_elements: int = 100,
        heartbeat_s: float = 10.0,
        lost_worker_retries: int = 3,
        history_events: int = 10_000,
        poll_s: float = 0.2,
        approval: Mapping[str, Any] | None = None,
        tls: bool | TLSConfig | None = None,
        api_key: str | None = None,
    ) -> None:
        self.address = check_address(address)
        if not task_queue or not isinstance(task_queue, str):
            raise ConfigError(
                f"temporal executor: the task queue must be a name, not {task_queue!r}"
            )
        for label, value, low in (
            ("max_running", max_running, 1),
            ("chunk_elements", chunk_elements, 1),
            ("lost_worker_retries", lost_worker_retries, 0),
            ("history_events", history_events, 100),
            ("inline_bytes", inline_bytes, 0),
        ):
            if value < low:
                raise ConfigError(f"temporal executor: {label} must be at least {low}, not {value}")
        if max_running > 2000:
            raise ConfigError(
                f"temporal executor: max_running must be at most 2000 (Temporal's limit of "
                f"pending activities per workflow), not {max_running}"
            )
        for label, seconds in (
            ("connect_timeout_s", connect_timeout_s),
            ("worker_timeout_s", worker_timeout_s),
            ("heartbeat_s", heartbeat_s),
            ("poll_s", poll_s),
        ):
            if seconds <= 0:
                raise ConfigError(f"temporal executor: {label} must be > 0, not {seconds}")
        self.namespace = namespace
        self.task_queue = task_queue
        self.payloads = payloads
        self.inline_bytes = inline_bytes
        self.client = client
        self.connect_timeout_s = connect_timeout_s
        self.worker_timeout_s = worker_timeout_s
        self.max_running = max_running
        self.chunk_elements = chunk_elements
        self.heartbeat_s = heartbeat_s
        self.lost_worker_retries = lost_worker_retries
        self.history_events = history_events
        self.poll_s = poll_s
        #: The run's approval rules, as data its workers apply to every call after their own
        #: interceptors (see :func:`dagagent.approval.run_policies`); ``dagagent run
        #: --policy FILE --ask GLOB`` sets it.
        self.approval = dict(approval) if approval else None
        #: TLS to the server (see :func:`connect`); the API key is kept out of sight (never
        #: in ``repr``, ``reach()``, the run store or the workflow's history).
        self.tls = tls
        self._api_key = api_key or None
        #: The workflow of the last run started (its id), for the server's tools.
        self.workflow_id: str | None = None
        # A resumed run, by run id: the workflow to follow, or what its ended one did.
        self._resumed: dict[str, _Resumed] = {}
        # The model of a run's agent tasks, by run id, as the workers build it (prepare()).
        self._models: dict[str, dict[str, Any]] = {}
        # A resumed run's tasks whose calls in doubt a person decides, by run id: why each
        # is in doubt (the record of a call left for a person says it).
        self._asking: dict[str, dict[str, str]] = {}
        # A resumed run's calls in doubt on record that are made again: their keys, by task
        # and element, by run id (their records get the calls' outcomes).
        self._made_again: dict[str, dict[str, dict[int | None, str]]] = {}
        # The plan of each run whose workflow this driver follows (and its failure policy):
        # if the workflow ends without finishing the run, its history is recorded by them.
        self._following: dict[str, tuple[PlanGraph, FailurePolicy]] = {}
        # The tasks of a plan being written that were settled here as they arrived (their
        # earlier output reused), by run id: on record already when the workflow has them.
        self._settled_arriving: dict[str, set[str]] = {}
        # When workers were last seen on the task queue (time.monotonic()), if ever.
        self._workers_seen: float | None = None
        #: Says when a workflow this driver follows has a workflow task that keeps failing on
        #: the workers (the driver goes on following it: the server tries it again).
        self._stuck = StuckWatch(self.address)

    def reach(self) -> dict[str, str]:
        """How to reach this run's server again (``dagagent resume`` of a run whose driver
        died): its address, namespace, task queue and payload directory (not a
        ``StorageDriver``, which is not a name)."""
        found = {
            "address": self.address,
            "namespace": self.namespace,
            "task_queue": self.task_queue,
        }
        if isinstance(self.payloads, (str, Path)):
            found["payloads"] = str(Path(self.payloads).expanduser().resolve())
        return found

    def __repr__(self) -> str:
        return f"TemporalExecutor({self.address!r}, task_queue={self.task_queue!r})"

    # -- session ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        _require_asyncio()
        if self.client is None:
            self.client = await connect(
                self.address,
                self.namespace,
                self.payloads,
                inline_bytes=self.inline_bytes,
                timeout_s=self.connect_timeout_s,
                tls=self.tls,
                api_key=self._api_key,
            )
        yield

    def _client(self) -> Client:
        if self.client is None:
            raise ConfigError("the temporal executor is used outside its session()")
        return self.client

    async def prepare(self, graph: PlanGraph, runner: TaskRunner) -> None:
        """Refuse what cannot run on the workers (the driver's interceptors; a model for the
        agent tasks that the workers cannot build from a spec), and wait
        (``worker_timeout_s``) for a worker on the task queue."""
        if runner.calls.interceptors:
            raise ConfigError(
                "the temporal executor runs tool calls on its workers, which the interceptors "
                "of this process (approval rules, --ask, --policy, redaction, tracing) cannot "
                "reach: give them to the workers instead (dagagent worker --interceptors "
                "MODULE:ATTR, or serve(..., interceptors=...)), where every call goes through "
                "them and their decisions are recorded; or choose another executor"
            )
        agents = any(isinstance(t, AgentTask) for t in graph.plan.tasks)
        if runner.llm is not None and (agents or not graph.complete):
            # the agent tasks run on the workers, which build the model from its spec with
            # their own key; a model that cannot be a spec is refused here
            self._models[runner.run_id] = _model(runner).spec()
        if runner.prior is not None:  # a resumed run: refused here if its calls are in doubt
            self._resumed[runner.run_id] = await self._resumed_from(graph, runner)
        await self._wait_for_workers()

    async def _wait_for_workers(self) -> None:
        client = self._client()
        seen = self._workers_seen
        if seen is not None and time.monotonic() - seen < _WORKERS_SEEN_S:
            return  # they were there a moment ago (see _WORKERS_SEEN_S)
        with anyio.move_on_after(self.worker_timeout_s):
            while True:  # the server knows: ask it again a few times a second
                if await has_workers(client, self.task_queue):
                    self._workers_seen = time.monotonic()
                    return
                await anyio.sleep(min(0.25, self.worker_timeout_s / 4))
        raise ClusterError(
            f"no worker serves task queue {self.task_queue!r} on the Temporal server at "
            f"{self.address} (waited {self.worker_timeout_s:g} s): "
            f"{worker_hint(self.address, self.task_queue)}"
        )

    # -- run ----------------------------------------------------------------------------------

    async def run(self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy) -> None:
        if graph.complete and graph.aborted:
            return  # nothing runs from a plan that was rejected before it was run
        client = self._client()
        run_id = runner.run_id
        wid = self.workflow_id = workflow_id(run_id)
        known = len(graph.plan.tasks)  # a plan being written: the tasks so far
        handle: WorkflowHandle[Any, list[dict[str, Any]]] | None = None
        running = False  # following a workflow that runs: it may wait for more of its plan
        resumed = self._resumed.pop(run_id, None)
        if runner.prior is not None and resumed is None:  # prepare() was not called
            resumed = await self._resumed_from(graph, runner)
        if resumed is not None:  # a resumed run: its workflow may run, or have ended
            handle, running = resumed.follow, resumed.running
            if running and handle is not None:
                known = await _tasks_known(handle, known)
        seen = 0  # a workflow followed from its start: every result is recorded here
        whole = True  # the workflow has (or had) the whole plan: nothing is to be sent to it
        if handle is None:
            settled = await _settle_here(graph, runner, resumed)
            inp = self._input(graph, runner, on_failure, settled)
            await self._by_reference(inp, runner)
            # what it starts with: tasks added (or the plan's end) since are sent to it
            known, whole = len(inp.order), not inp.streaming
            # what becomes of a call in doubt nothing decides (a lost worker's, say)
            inp.in_doubt_policy = runner.calls.effects.in_doubt
            if resumed is not None:
                inp.in_doubt = list(resumed.reconcile)
                inp.effects = resumed.records
            try:
                handle = await client.start_workflow(
                    WORKFLOW,
                    inp,
                    id=wid,
                    task_queue=self.task_queue,
                    result_type=list,
                    id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                )
            except WorkflowAlreadyStartedError:
                raise ClusterError(
                    f"a workflow {wid} already runs on the Temporal server at {self.address}: "
                    "run ids are not reused"
                ) from None
            seen = len(settled)  # recorded here already
        # should the workflow end without finishing the run, what it did is recorded
        self._following[run_id] = (graph, on_failure)
        try:
            if graph.complete and whole and not running:
                await self._follow(handle, runner, seen)
            else:  # tell it the tasks it lacks (a plan still being written), then the end
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._stream, graph, runner, handle, known)
                    await self._follow(handle, runner, seen)
                    tg.cancel_scope.cancel()  # the run ended before its plan did
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                if not isinstance(exc, DriverLostError):  # (then it goes on without this driver)
                    with anyio.move_on_after(_QUERY_TIMEOUT_S), contextlib.suppress(Exception):
                        await handle.cancel()  # interrupted: the run stops on the workers too
                following = self._following.pop(run_id, None)
                if following is not None and not isinstance(exc, ClusterError):
                    # (a ClusterError: recorded as the workflow ended, or no worker answers)
                    try:
                        await self._record_stopped(handle, runner, *following)
                    except Exception as lost:  # what stopped the run is what it raises
                        get_logger(run_id=run_id).warning(
                            "run.stop_not_recorded", workflow=handle.id, error=repr(lost)
                        )
            raise
        finally:
            self._following.pop(run_id, None)
            self._settled_arriving.pop(run_id, None)

    async def _resumed_from(self, graph: PlanGraph, runner: TaskRunner) -> _Resumed:
        """How a resumed run goes on: following its workflow if it still runs (or finished
        unwatched), else on a new workflow, with what the ended one did (its history, see
        :func:`_read_ended`), and with a person's decisions about the calls in doubt an
        earlier resume left waiting (:func:`_decided`). A call in doubt there that nothing
        decides about is run in doubt on a worker under the run's ``in_doubt`` policy
        (``ask``: its task waits for a person; ``deny``: settled here as denied)."""
        prior = runner.prior or {}
        wid = workflow_id(runner.run_id)
        waited = any(r.status is TaskStatus.WAITING for r in prior.values())
        handle, running = await self._workflow_to_follow(wid, finished_too=not waited)
        found = _Resumed(handle, running)
        if handle is not None:
            return found
        ended = self._client().get_workflow_handle(wid, result_type=list)
        try:
            await _read_ended(ended, self._client().data_converter, graph, runner, found)
        except RPCError as exc:
            if exc.status is not RPCStatusCode.NOT_FOUND:  # NOT_FOUND: none ever started
                raise ClusterError(
                    f"cannot read the history of workflow {wid} on the Temporal server at "
                    f"{self.address}: {' '.join(str(exc).split())}"
                ) from None
        _decided(graph, runner, found)
        policy = runner.calls.effects.in_doubt
        if policy == "ask":  # run in doubt on a worker: the task waits for a person
            found.reconcile.extend(found.doubt)
            found.asking = {t: f"{why} (workflow {wid})" for t, why in found.doubt.items()}
            found.doubt.clear()
            self._asking[runner.run_id] = found.asking
        journal = runner.calls.effects.journal
        if policy != "ask" and journal is not None:  # the policy decides, on the record too
            resolution = "denied" if policy == "deny" else "not_happened"
            why = (
                "not made: the resume was told not to make calls in doubt (in_doubt='deny')"
                if policy == "deny"
                else "made again with the same key (in_doubt='retry')"
            )
            for task_id, keys in found.held.items():
                for element, key in keys.items():
                    await journal.resolved(runner.run_id, key, resolution, by="policy", reason=why)
                    if policy == "retry":
                        found.made_again.setdefault(task_id, {})[element] = key
        if found.made_again:
            self._made_again[runner.run_id] = found.made_again
        if policy == "deny":
            for task_id, why in found.doubt.items():
                found.denied[task_id] = TaskResult(
                    task_id=task_id,
                    status=TaskStatus.DENIED,
                    error=(
                        f"not run again: {why}, so its effect may have happened; the resume "
                        "was told not to make such calls again (in_doubt='deny')"
                    ),
                    error_type="InDoubt",
                )
        return found

    async def _workflow_to_follow(
        self, wid: str, *, finished_too: bool
    ) -> tuple[WorkflowHandle[Any, list[dict[str, Any]]] | None, bool]:
        """The workflow ``wid`` of a resumed run if it still runs (its driver died) or
        (``finished_too``) completed while nobody followed it: following it records its
        results. ``None`` when there is none, or it failed, was cancelled, terminated or
        timed out, or it completed and the run's record has its end (a paused run that
        goes on with decisions about the calls that waited): the rest of the run starts
        anew. With whether it still runs."""
        handle = self._client().get_workflow_handle(wid, result_type=list)
        try:
            described = await handle.describe(rpc_timeout=timedelta(seconds=_QUERY_TIMEOUT_S))
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                return None, False
            raise ClusterError(
                f"cannot read workflow {wid} on the Temporal server at {self.address}: "
                f"{' '.join(str(exc).split())}"
            ) from None
        status = described.status
        if status is WorkflowExecutionStatus.RUNNING:
            return handle, True
        if finished_too and status is WorkflowExecutionStatus.COMPLETED:
            return handle, False
        return None, False

    def _input(
        self,
        graph: PlanGraph,
        runner: TaskRunner,
        on_failure: FailurePolicy,
        settled: list[TaskResult],
    ) -> RunInput:
        plan = graph.plan
        facts = _facts(graph, runner, list(plan.tasks), self._limits())
        max_running = self.max_running
        if runner.max_concurrency is not None:
            max_running = min(max_running, runner.max_concurrency)
        return RunInput(
            run_id=runner.run_id,
            # as plan.to_json() has it, each task as _facts made it
            plan={
                **plan.model_dump(mode="json", exclude_defaults=True, exclude={"tasks"}),
                "tasks": facts.tasks,
            },
            order=[t.id for t in plan.tasks],
            dependencies=facts.dependencies,
            maps=facts.maps,
            local=facts.local,
            side_effects=facts.side_effects,
            reconciled=facts.reconciled,
            bounds=facts.bounds,
            attempts=facts.attempts,
            allow_partial=facts.allow_partial,
            on_failure=on_failure,
            max_elements=runner.max_elements,
            retry={k: float(v) for k, v in asdict(runner.retry).items()},
            task_queue=self.task_queue,
            max_running=max_running,
            chunk_elements=self.chunk_elements,
            heartbeat_s=self.heartbeat_s,
            lost_worker_retries=self.lost_worker_retries,
            history_events=self.history_events,
            finished=[r.to_json_dict() for r in settled],
            reuse=facts.reuse,
            streaming=not graph.complete,
            answers={
                k: [a.model_dump(mode="json") for a in given]
                for k, given in runner.calls.answers.items()
            },
            approval=self.approval,
            model=self._model_of(runner),
            limited=facts.limited,
            ledger=_counted_before(runner, self._limits(), facts.limited),
            revised=_revised_of(runner),
            max_concurrency=runner.max_concurrency,
            trace=runner.telemetry.carrier() if runner.telemetry is not None else None,
        )

    async def _by_reference(self, facts: RunInput | Arrived, runner: TaskRunner) -> None:
        """Put the reuse of each map task of ``facts`` in the payload store, one payload per
        task (its elements' earlier outputs, its own, its dependencies'), and name it by its
        reference alone (``RunInput.reuse_refs``): every chunk of the map gets the reference,
        and each worker reads the payload once, where the workflow would otherwise write the
        whole of it into every chunk's arguments."""
        await reuse_by_reference(self._client().data_converter, facts, runner.reuse)

    def _limits(self) -> list[Mapping[str, Any]]:
        """The limits of the run's approval rules, as their file form has them (the workers
        apply them; the workflow counts the calls they limit)."""
        rules = (self.approval or {}).get("rules") or {}
        limits = rules.get("limits") if isinstance(rules, Mapping) else None
        return [lim for lim in limits or () if isinstance(lim, Mapping)]

    def _model_of(self, runner: TaskRunner) -> dict[str, Any] | None:
        """The spec of the run's model for its agent tasks (``None``: no model)."""
        found = self._models.pop(runner.run_id, None)
        if found is None and runner.llm is not None:  # prepare() was not called
            found = _model(runner).spec()
        return found

    async def _stream(
        self,
        graph: PlanGraph,
        runner: TaskRunner,
        handle: WorkflowHandle[Any, list[dict[str, Any]]],
        known: int,
    ) -> None:
        """Send the workflow the tasks of a plan still being written as they are added
        (after the first ``known``), then its end; until the plan is complete or the
        workflow has ended."""
        wakeup = Wakeup()

        def arrived(_task_id: str | None) -> None:
            wakeup.set()

        graph.watch(arrived)
        try:
            while True:
                tasks = list(graph.plan.tasks)
                complete, aborted = graph.complete, graph.aborted
                if len(tasks) > known:
                    facts = _facts(graph, runner, tasks[known:], self._limits())
                    facts.finished = self._reused_now(runner, tasks[known:])
                    await self._by_reference(facts, runner)
                    await handle.signal(ADD_TASKS, facts)
                    known = len(tasks)
                if complete:
                    await handle.signal(PLAN_COMPLETE, aborted)
                    return
                await wakeup.wait()
        except RPCError:
            return  # the workflow ended (it was stopped, or cancelled): nothing to tell it
        finally:
            graph.unwatch(arrived)

    def _reused_now(self, runner: TaskRunner, tasks: Sequence[Task]) -> list[dict[str, Any]]:
        """Those of ``tasks`` (just added to a plan being written, each after its
        dependencies) whose earlier output may be reused now (:meth:`TaskRunner.reuse_now`:
        a revision's unchanged tasks, say), settled here as they arrive: their results, for
        the workflow to finish them at once, without an activity; the workers reuse the
        others they may."""
        if not runner.reuse:
            return []
        settled = [r for t in tasks if (r := runner.reuse_now(t.id)) is not None]
        self._settled_arriving.setdefault(runner.run_id, set()).update(r.task_id for r in settled)
        return [r.to_json_dict() for r in settled]

    async def _follow(
        self,
        handle: WorkflowHandle[Any, list[dict[str, Any]]],
        runner: TaskRunner,
        seen: int,
        record: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    ) -> None:
        """Record the workflow's results as they come, from number ``seen`` on, until it
        ends (each through ``record``, by default :meth:`_record`). A workflow that ends
        without finishing the run raises :class:`ClusterError`, after what its history
        holds is recorded (:meth:`_record_ended`) when this driver started it."""
        record = record or partial(self._record, runner)
        final: list[list[dict[str, Any]]] = []
        failure: list[BaseException] = []
        ended = anyio.Event()
        unanswered_since: float | None = None

        lost: list[RPCError] = []

        async def wait_for_end() -> None:
            try:
                final.append(await handle.result())
            except WorkflowFailureError as exc:
                failure.append(exc)
            except RPCError as exc:  # the server stopped answering (the SDK retried first)
                (lost if exc.status in _UNANSWERED else failure).append(exc)
            finally:
                ended.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(wait_for_end)
            while not ended.is_set():
                with anyio.move_on_after(self.poll_s):
                    await ended.wait()
                if ended.is_set():
                    break
                await self._stuck.look(self._client(), handle, run_id=runner.run_id)
                try:
                    seen = await self._catch_up(handle, seen, record)
                    unanswered_since = None
                except Exception:  # no workflow worker answered
                    now = time.monotonic()
                    unanswered_since = unanswered_since or now
                    if now - unanswered_since < self.worker_timeout_s:
                        continue
                    try:
                        served = await has_workers(self._client(), self.task_queue)
                    except RPCError as unanswered:
                        lost.append(unanswered)
                        break
                    if not served:
                        tg.cancel_scope.cancel()
                        raise _left(
                            runner,
                            f"no worker serves task queue {self.task_queue!r} any more (none "
                            f"answered for {self.worker_timeout_s:g} s); the workflow "
                            f"{handle.id} stays on the Temporal server at {self.address} and "
                            f"goes on when a worker comes: "
                            f"{worker_hint(self.address, self.task_queue)}; then 'dagagent "
                            f"resume {runner.run_id}' follows it again",
                        ) from None
            tg.cancel_scope.cancel()
        if lost:
            reason = " ".join(str(lost[0]).split()) or type(lost[0]).__name__
            raise _left(
                runner,
                f"the Temporal server at {self.address} stopped answering while this driver "
                f"followed the workflow {handle.id} ({reason}); the run goes on there if the "
                f"server does: 'dagagent resume {runner.run_id}' follows it again",
            )
        if failure:
            exc = failure[0]
            cause = getattr(exc, "cause", None) or exc
            said = (
                f"the workflow {handle.id} on the Temporal server at {self.address} ended "
                f"without finishing the run: {' '.join(str(cause).split()) or type(cause).__name__}"
            )
            following = self._following.pop(runner.run_id, None)
            if following is not None:
                said += await self._record_ended(handle.id, runner, *following)
            raise ClusterError(said)
        self._workers_seen = time.monotonic()  # they just finished the workflow
        for doc in final[0][seen:]:
            await record(doc)
        self._asking.pop(runner.run_id, None)
        self._made_again.pop(runner.run_id, None)

    async def _record(self, runner: TaskRunner, doc: dict[str, Any]) -> None:
        """Record the task result ``doc`` of the workflow, with its calls in doubt (not one
        settled here as it arrived: on record already)."""
        if doc["task_id"] in self._settled_arriving.get(runner.run_id, ()):
            return
        await self._record_doubts(doc, runner)
        await self._before_recording(doc)
        runner.ran_elsewhere(_task_result(doc, runner))

    async def _record_ended(
        self,
        wid: str,
        runner: TaskRunner,
        graph: PlanGraph,
        on_failure: FailurePolicy,
        *,
        within_s: float | None = None,
    ) -> str:
        """The run's workflow ``wid`` ended under this driver (terminated, cancelled, timed
        out) without finishing the run: record what its history holds, as a resume of the
        run reads it (:func:`_read_ended`). The tasks it finished are recorded; the calls
        with side effects it started and did not see end are in doubt: a workflow started
        for this alone runs each of their tasks on a worker, which names the calls (their
        keys, made there as when they were made) and makes none, and they are recorded in
        doubt (``dagagent approvals`` lists them; a revision of the run takes them over,
        makes them with their keys, or denies their tasks, as a person says). What was
        recorded and what to do, for the run's error. ``within_s``: how long the calls'
        naming may take (``None``: as long as a worker answers)."""
        client = self._client()
        ended = client.get_workflow_handle(wid, result_type=list)
        found = _Resumed(None, False)
        done = runner.results
        for task_id in graph.order:  # a resumed run's successes stand as recorded
            prior = (runner.prior or {}).get(task_id)
            if prior is not None and prior.status.ok and task_id not in done:
                await runner.run_task(task_id)
        try:
            how = (await ended.describe(rpc_timeout=timedelta(seconds=_QUERY_TIMEOUT_S))).status
            await _read_ended(ended, client.data_converter, graph, runner, found)
        except Exception as exc:
            unread = f"{' '.join(str(exc).split()) or type(exc).__name__}"
            self._unfinished(  # what became of them is unknown, not "not run"
                graph,
                runner,
                f"unknown: the history of the run's workflow {wid} cannot be read ({unread}); "
                "a call with side effects it started may have taken effect",
            )
            return (
                f"; its history cannot be read ({unread}): calls with side effects it started "
                "may have taken effect, and are not on the run's record"
            )
        for task_id, r in found.finished.items():
            if task_id not in done:
                runner.ran_elsewhere(r)
        what = (
            "ended"
            if how is None
            else "cancelled"
            if how is WorkflowExecutionStatus.CANCELED
            else how.name.lower().replace("_", " ")
        )
        doubt = {
            t: f"{found.why.get(t, 'its call started on a worker')} (workflow {wid} {what})"
            for t in graph.order
            if t in found.why and t not in done
        }
        run_id = runner.run_id
        hint = f"'dagagent replan {run_id} --execute' runs the rest"
        if not doubt:
            self._unfinished(graph, runner, f"not run: the run's workflow {wid} {what} first")
            return f"; what it finished is recorded: {hint}"
        named = await self._name_in_doubt(wid, runner, graph, on_failure, doubt, within_s)
        self._unfinished(graph, runner, f"not run: the run's workflow {wid} {what} first", doubt)
        tasks = ("task " if len(doubt) == 1 else "tasks ") + ", ".join(repr(t) for t in doubt)
        if named is not None:
            for task_id, why in doubt.items():
                if task_id not in done:  # cut off during its call, which may have happened
                    runner.ran_elsewhere(
                        TaskResult(
                            task_id=task_id,
                            status=TaskStatus.CANCELLED,
                            error=f"cut off: {why}; whether its call took effect is unknown, "
                            f"and no worker could name it for the run's record ({named})",
                            error_type="InDoubt",
                        )
                    )
            return (
                f"; what it finished is recorded, but the calls with side effects of "
                f"{tasks} may have taken effect and could not be named for the run's record "
                f"({named}): check with the service before {hint}"
            )
        return (
            f"; what it finished is recorded, and the calls with side effects it left in doubt "
            f"({tasks}) are on the run's record: check with the service whether each took "
            f"effect ('dagagent approvals' lists them with their keys), say so with 'dagagent "
            f"approve {run_id} TASK --happened | --allow | --deny', then {hint}, taking over "
            "those that happened and making those that did not with their keys"
        )

    async def _record_stopped(
        self,
        handle: WorkflowHandle[Any, list[dict[str, Any]]],
        runner: TaskRunner,
        graph: PlanGraph,
        on_failure: FailurePolicy,
    ) -> None:
        """This driver was stopped (Ctrl-C, a signal, its caller cancelled) and cancelled the
        run's workflow ``handle``: record what it did as for a workflow that ended under the
        driver (:meth:`_record_ended`): what it finished, and the calls with side effects
        it left in doubt, named on a worker and put on the run's record. Bounded: up to
        ``worker_timeout_s`` for the workflow to end (then it is terminated, so that it does
        not go on with nobody to record it) and up to ``worker_timeout_s`` for a worker to
        name the calls; calls not named then are said to be so in their tasks' records."""
        final: list[dict[str, Any]] | None = None
        with anyio.move_on_after(self.worker_timeout_s), contextlib.suppress(Exception):
            final = await handle.result()  # its end, however it ended (cancelled, as asked)
        if final is not None:  # it finished the run as the stop came: its results stand
            for doc in final:
                if doc.get("task_id") not in runner.results:
                    await self._record(runner, doc)
            return
        try:
            described = await handle.describe(rpc_timeout=timedelta(seconds=_QUERY_TIMEOUT_S))
            running = described.status in (None, WorkflowExecutionStatus.RUNNING)
        except Exception:
            running = True
        if running:  # no worker took the cancellation in time
            with anyio.move_on_after(_QUERY_TIMEOUT_S), contextlib.suppress(Exception):
                await handle.terminate(
                    f"its driver was stopped, and it did not end within "
                    f"{self.worker_timeout_s:g} s of being cancelled"
                )
        # what to do next is the run's record's to say (its calls in doubt, its tasks)
        await self._record_ended(
            handle.id, runner, graph, on_failure, within_s=self.worker_timeout_s
        )

    @staticmethod
    def _unfinished(
        graph: PlanGraph, runner: TaskRunner, error: str, besides: Collection[str] = ()
    ) -> None:
        """Record the tasks of ``graph`` the run's ended workflow left without a result, but
        those of ``besides``, as cancelled, ``error`` saying why."""
        for task_id in graph.order:
            if task_id not in runner.results and task_id not in besides:
                runner.ran_elsewhere(
                    TaskResult(task_id=task_id, status=TaskStatus.CANCELLED, error=error)
                )

    async def _name_in_doubt(
        self,
        wid: str,
        runner: TaskRunner,
        graph: PlanGraph,
        on_failure: FailurePolicy,
        doubt: dict[str, str],
        within_s: float | None = None,
    ) -> str | None:
        """Run the tasks ``doubt`` (why each is in doubt) on a worker in a workflow of their
        own that makes none of their calls (``IN_DOUBT_RECORD``: a call not known to have
        ended is named, not made nor reconciled), and record each call in doubt and its
        task, cut off. The other tasks stand as recorded, or as not run. ``None``, or why
        the calls could not be named (``within_s``: a worker named none within that many
        seconds)."""
        done = runner.results
        settled = [done[t] for t in graph.order if t in done]
        settled += [
            TaskResult(
                task_id=t,
                status=TaskStatus.CANCELLED,
                error="not run: the run's workflow ended first",
            )
            for t in graph.order
            if t not in done and t not in doubt
        ]
        inp = self._input(graph, runner, on_failure, settled)
        await self._by_reference(inp, runner)
        inp.in_doubt = list(doubt)
        inp.in_doubt_policy = IN_DOUBT_RECORD
        inp.answers = {}  # no decision of a person makes any of them here
        inp.streaming = False
        self._asking[runner.run_id] = doubt

        async def cut_off(doc: dict[str, Any]) -> None:
            await self._record_doubts(doc, runner)
            runner.ran_elsewhere(_cut_off(_task_result(doc, runner), doubt[doc["task_id"]]))

        client = self._client()
        handle: WorkflowHandle[Any, list[dict[str, Any]]] | None = None
        try:
            if not await has_workers(client, self.task_queue):
                return f"no worker serves task queue {self.task_queue!r}"
            handle = await client.start_workflow(
                WORKFLOW,
                inp,
                id=wid,
                task_queue=self.task_queue,
                result_type=list,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            )
            with anyio.fail_after(within_s):
                await self._follow(handle, runner, len(settled), cut_off)
        except TimeoutError:
            if within_s is None:
                raise
            if handle is not None:  # not left to run when a worker comes, with nobody to record
                with anyio.move_on_after(_QUERY_TIMEOUT_S), contextlib.suppress(Exception):
                    await handle.terminate("its driver could not wait longer")
            return f"no worker named them within {within_s:g} s"
        except (ClusterError, RPCError, WorkflowAlreadyStartedError) as exc:
            if handle is not None:  # not left to run when a worker comes, with nobody to record
                with anyio.move_on_after(_QUERY_TIMEOUT_S), contextlib.suppress(Exception):
                    await handle.terminate("its driver could not follow it")
            return " ".join(str(exc).split()) or type(exc).__name__
        finally:
            self._asking.pop(runner.run_id, None)
        return None

    async def _before_recording(self, doc: dict[str, Any]) -> None:
        """What must happen before the result ``doc`` is recorded: nothing here (a solve's
        driver first lets the sub-solves of a task end on record)."""

    async def _catch_up(
        self,
        handle: WorkflowHandle[Any, list[dict[str, Any]]],
        seen: int,
        record: Callable[[dict[str, Any]], Awaitable[None]],
    ) -> int:
        """Record the results the workflow has that are not recorded yet; how many are."""
        while True:
            progress: dict[str, Any] = await handle.query(
                "progress", seen, rpc_timeout=timedelta(seconds=_QUERY_TIMEOUT_S)
            )
            batch = progress["results"]
            for doc in batch:
                await record(doc)
            seen += len(batch)
            if seen >= progress["total"] or not batch:
                return seen

    async def _record_doubts(self, doc: dict[str, Any], runner: TaskRunner) -> None:
        """Record the calls in doubt that a worker left for a person in task result
        ``doc`` (``in_doubt_calls``; its task waits): in the run's store, as a call whose
        outcome is unknown, with its key and why, so that ``dagagent approvals`` lists it,
        ``dagagent approve`` decides about it and the next resume finds the decision."""
        asked = doc.pop("in_doubt_calls", None)
        journal = runner.calls.effects.journal
        if journal is None:  # a run without a store: its result says it all
            return
        again = self._made_again.get(runner.run_id, {}).get(doc["task_id"]) or {}
        elements = doc.get("elements") or []
        for element, key in again.items():
            # a call in doubt on record, made again: its outcome, as a local run records it
            done = (
                doc if element is None else (elements[element] if element < len(elements) else {})
            )
            if done.get("status") == "succeeded":
                output = json.dumps(done.get("output"), ensure_ascii=False, default=str)
                await journal.outcome(runner.run_id, key, "succeeded", output=output, error=None)
        if not asked:
            return
        asking = self._asking.get(runner.run_id, {}).get(doc["task_id"])
        for c in asked:
            # why it is in doubt: the ended workflow's (a resume, a naming), else the lost
            # worker's (which worker, said the workflow)
            why = asking or c.get("why") or _ENDED_FIRST
            await journal.intent(
                runner.run_id,
                c["key"],
                task_id=c["task_id"],
                element=c.get("element"),
                occurrence=c.get("occurrence", 1),
                tool=c["tool"],
                fingerprint=c["fingerprint"],
                source=c.get("source", "plan"),
                args=json.dumps(c.get("args"), ensure_ascii=False),
                attempt=c.get("attempt", 1),
            )
            await journal.outcome(
                runner.run_id, c["key"], "cancelled", output=None, error=f"{WORKFLOW_ENDED}{why}"
            )


class _WorkersModel(Protocol):
    """What the executor asks of a run's model (a :class:`~dagagent.llm.MeteredLLM`, as
    :func:`dagagent.execute` gives the runner): its spec for the workers, and to hear of
    the calls they made with it."""

    def spec(self) -> dict[str, Any]: ...

    def made_elsewhere(self, records: Sequence[dict[str, Any]]) -> None: ...


def _model(runner: TaskRunner) -> _WorkersModel:
    llm = runner.llm
    if not callable(getattr(llm, "spec", None)):
        raise ConfigError(
            f"a run with agent tasks on the temporal executor needs a model its workers can "
            f"build from a spec, not {type(llm).__name__}"
        )
    return cast("_WorkersModel", llm)


@dataclass
class _Resumed:
    """How a resumed run goes on (see :meth:`TemporalExecutor._resumed_from`)."""

    #: Its workflow, to follow (it runs, or finished unwatched); ``None``: a new one.
    follow: WorkflowHandle[Any, list[dict[str, Any]]] | None
    running: bool
    #: Tasks the ended workflow finished with an output, which the record lacks.
    finished: dict[str, TaskResult] = field(default_factory=dict)
    #: Tasks with side effects whose call the ended workflow started and did not see end:
    #: why, by task.
    doubt: dict[str, str] = field(default_factory=dict)
    #: Those of ``doubt`` whose tool has a reconciler: it decides on the worker.
    reconcile: list[str] = field(default_factory=list)
    #: Why the call of each task of ``doubt`` and ``reconcile`` is in doubt.
    why: dict[str, str] = field(default_factory=dict)
    #: Those of ``doubt`` settled as denied (``in_doubt="deny"``), or by a person.
    denied: dict[str, TaskResult] = field(default_factory=dict)
    #: Those of ``doubt`` run in doubt under ``in_doubt="ask"``: why each is in doubt (a
    #: call no reconciler decides waits for a person).
    asking: dict[str, str] = field(default_factory=dict)
    #: Tasks with calls in doubt on the run's record (an earlier resume left them for a
    #: person): those records, as JSON, for the task's worker to decide by.
    records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: Of those, the calls nobody decided about yet: their keys, by task and element.
    held: dict[str, dict[int | None, str]] = field(default_factory=dict)
    #: Of those, the calls made again (a person, or the policy, said they did not happen):
    #: their keys, by task and element, whose records get the outcome.
    made_again: dict[str, dict[int | None, str]] = field(default_factory=dict)


def _left(runner: TaskRunner, why: str) -> DriverLostError:
    """The error of a driver that lost the run it followed, which goes on on the cluster
    (``why``); its tasks not seen to their end are recorded as not followed, saying so."""
    for task_id in runner.tasks:
        if task_id not in runner.results:
            runner.mark(
                task_id,
                TaskStatus.CANCELLED,
                "not followed to its end: this driver lost the run, which goes on on the "
                f"Temporal server; 'dagagent resume {runner.run_id}' follows it again",
            )
    return DriverLostError(why)


async def _read_ended(
    handle: WorkflowHandle[Any, Any],
    converter: DataConverter,
    graph: PlanGraph,
    runner: TaskRunner,
    found: _Resumed,
) -> None:
    """Read the history of the ended workflow of a resumed run into ``found``: the tasks it
    finished that the record lacks (their results, from the activities that returned them,
    or carried over from an earlier part of the run by continue-as-new), and the tasks with
    side effects whose activity it scheduled and did not see end (cancelled, timed out, its
    worker lost, or the workflow ended under it): their call may have happened."""
    kept = {t for t, r in (runner.prior or {}).items() if r.status.ok}
    effects: dict[str, bool] = {}  # task with side effects -> whether its tool reconciles
    for task in graph.plan.tasks:
        if isinstance(task, ToolTask) and task.tool in runner.registry:
            tool = runner.registry.get(task.tool)
            if tool.side_effects:
                effects[task.id] = tool.reconcile is not None
    scheduled: dict[int, tuple[str, bool]] = {}  # event id -> (task, a window of a map)
    open_calls: dict[str, str] = {}  # task -> why its call is in doubt
    chunked: set[str] = set()  # map tasks run in chunks: elements of theirs ran
    finished: dict[str, dict[str, Any]] = {}
    async for event in handle.fetch_history_events(rpc_timeout=timedelta(seconds=_QUERY_TIMEOUT_S)):
        kind = event.WhichOneof("attributes")
        if kind == "workflow_execution_started_event_attributes":
            started = event.workflow_execution_started_event_attributes.input
            # the results an earlier part of the run carried over: in its input, then in
            # one argument per earlier run (with the tasks that reached it)
            carried = await converter.decode(started.payloads, [dict] * len(started.payloads))
            for part in carried:
                for doc in part.get("finished") or ():
                    if doc.get("status") in _OK:
                        finished[doc["task_id"]] = doc
                _with_effects(effects, part)
                for arrived in part.get("arrived") or ():
                    _with_effects(effects, arrived)
        elif kind == "workflow_execution_signaled_event_attributes":
            signaled = event.workflow_execution_signaled_event_attributes
            if signaled.signal_name == ADD_TASKS and signaled.input.payloads:
                [arrived] = await converter.decode(signaled.input.payloads[:1], [dict])
                _with_effects(effects, arrived)
        elif kind == "activity_task_scheduled_event_attributes":
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name != RUN_TASK or not attrs.input.payloads:
                continue
            [call] = await converter.decode(attrs.input.payloads[:1], [dict])
            if call.get("assemble"):
                continue  # a map put together from its chunks: no call of its own
            task_id = call["task_id"]
            window = call.get("window") is not None
            scheduled[event.event_id] = (task_id, window)
            if window:
                chunked.add(task_id)
            open_calls[task_id] = "its call started on a worker and the workflow ended first"
        elif kind == "activity_task_completed_event_attributes":
            done = event.activity_task_completed_event_attributes
            task_id, window = scheduled.get(done.scheduled_event_id, ("", False))
            if not task_id:
                continue
            open_calls.pop(task_id, None)
            if window:
                continue
            try:
                [doc] = await converter.decode(done.result.payloads[:1], [dict])
            except Exception as exc:
                if task_id in effects:  # its call ended, but how is not known here
                    why = " ".join(str(exc).split()) or type(exc).__name__
                    open_calls[task_id] = f"its call ended, but its result cannot be read ({why})"
                continue
            if isinstance(doc, dict) and doc.get("status") in _OK:
                finished[task_id] = doc
        elif kind == "activity_task_failed_event_attributes":
            # the worker could not run the task (no such tool, a plan it cannot read): the
            # activity failed before any call
            failed = event.activity_task_failed_event_attributes
            task_id, _ = scheduled.get(failed.scheduled_event_id, ("", False))
            open_calls.pop(task_id, None)
        elif kind == "activity_task_timed_out_event_attributes":
            lost = event.activity_task_timed_out_event_attributes
            task_id, _ = scheduled.get(lost.scheduled_event_id, ("", False))
            if task_id:
                open_calls[task_id] = "its worker was lost during its call"
        elif kind == "activity_task_canceled_event_attributes":
            gone = event.activity_task_canceled_event_attributes
            task_id, _ = scheduled.get(gone.scheduled_event_id, ("", False))
            if task_id:
                open_calls[task_id] = "its call was cancelled while it ran"
    for task_id in graph.order:
        if task_id in kept:
            continue
        doc = finished.get(task_id)
        if doc is not None:
            found.finished[task_id] = _task_result(doc, runner)
        elif task_id in effects and (task_id in open_calls or task_id in chunked):
            found.doubt[task_id] = open_calls.get(
                task_id, "elements of it made their calls and the workflow ended first"
            )
            if effects[task_id]:
                found.reconcile.append(task_id)
    found.why = dict(found.doubt)
    for task_id in found.reconcile:
        found.doubt.pop(task_id)  # its reconciler decides: nothing to refuse


def _with_effects(effects: dict[str, bool], facts: Mapping[str, Any]) -> None:
    """Add to ``effects`` the tasks with side effects of a workflow's input or of tasks
    sent to it (``facts``: a ``RunInput`` or an ``Arrived``, as JSON), with whether their
    tool reconciles: what the workers knew of the tools, which the driver may not know (a
    solve's driver follows its rounds' runs without the tools)."""
    reconciled = set(facts.get("reconciled") or ())
    for task_id in facts.get("side_effects") or ():
        effects.setdefault(task_id, task_id in reconciled)


def _decided(graph: PlanGraph, runner: TaskRunner, found: _Resumed) -> None:
    """The calls in doubt an earlier resume of the run left waiting for a person, as the
    run's record holds them (with what a person decided since: ``dagagent approve``): each
    task that has some runs on a worker with their records (``found.records``), where its
    runner decides about each call as a resumed run in one process does (``happened``: its
    output, not made; ``not_happened``: made, with its key; ``denied``: the task is denied;
    undecided: the run's ``in_doubt`` policy). Undecided calls are ``found.held``, those
    made again ``found.made_again``, by task and element: their records get the outcome."""
    kept = {t for t, r in (runner.prior or {}).items() if r.status.ok}
    effects = runner.calls.effects
    for task_id in graph.order:
        if task_id in kept or task_id in found.finished:
            continue
        records = effects.in_doubt_of(task_id)
        if not records:
            continue
        if task_id in found.doubt or task_id in found.reconcile:
            # its call was made again in the workflow that just ended, and cut off there:
            # what was found before is not what became of that call, which is in doubt anew
            records = [
                r.model_copy(update={"state": "cancelled", "resolution": None})
                if r.resolution == "not_happened"
                else r
                for r in records
            ]
        found.records[task_id] = [r.model_dump(mode="json") for r in records]
        found.doubt.pop(task_id, None)  # decided on the worker, by these
        if task_id in found.reconcile:  # its records say what is in doubt there
            found.reconcile.remove(task_id)
        for r in records:
            if r.resolution is None and r.state in ("started", "cancelled"):
                found.held.setdefault(task_id, {})[r.element] = r.key
            elif r.resolution == "not_happened":
                found.made_again.setdefault(task_id, {})[r.element] = r.key


def made_again(graph: PlanGraph, runner: TaskRunner) -> dict[str, dict[int | None, str]]:
    """The calls in doubt on the record of a run going on that a person said did not happen
    (made again, with their keys, on the tasks' workers), by task and element: their
    records get the outcomes of the calls made again (see ``_record_doubts``)."""
    kept = {t for t, r in (runner.prior or {}).items() if r.status.ok}
    found: dict[str, dict[int | None, str]] = {}
    for task_id in graph.order:
        if task_id in kept:
            continue
        for r in runner.calls.effects.in_doubt_of(task_id):
            if r.resolution == "not_happened" and r.state in ("started", "cancelled"):
                found.setdefault(task_id, {})[r.element] = r.key
    return found


def _task_result(doc: dict[str, Any], runner: TaskRunner | None = None) -> TaskResult:
    """The result in ``doc``; an agent task's model calls travel with it: in a solve, the
    solve's workflow takes them; in a run, the run's model hears of them (``runner``), to
    count and record them (a call heard again is not counted again)."""
    calls = doc.get("model_calls")
    if calls and runner is not None and runner.llm is not None:
        _model(runner).made_elsewhere(calls)
    return TaskResult.validate(
        {
            k: v
            for k, v in doc.items()
            if k not in ("duration_s", "model_calls", "budget", "in_doubt_calls", "ledger")
        }
    )


def _cut_off(r: TaskResult, why: str) -> TaskResult:
    """Task result ``r`` of a task named in doubt after its run's workflow ended (see
    :meth:`TemporalExecutor._name_in_doubt`): its calls waiting for a person are in doubt on
    the run's record, and the task (each such element) was cut off during them."""
    said = (
        f"cut off: {why}; whether its call took effect is unknown: it is in doubt on the "
        "run's record ('dagagent approvals')"
    )
    if r.status is not TaskStatus.WAITING:
        return r
    elements = [
        replace(e, status=TaskStatus.CANCELLED, error=said) if e.status is TaskStatus.WAITING else e
        for e in r.elements or ()
    ]
    return replace(
        r,
        status=TaskStatus.CANCELLED,
        error=said,
        error_type="InDoubt",
        elements=elements if r.elements is not None else None,
    )


async def _tasks_known(handle: WorkflowHandle[Any, Any], otherwise: int) -> int:
    """How many tasks of the plan a running workflow has: fewer than the run's record when
    its driver died while the plan was being written (the rest, and the plan's end, are
    sent to it then); ``otherwise`` when no worker answers."""
    try:
        progress: dict[str, Any] = await handle.query(
            "progress", 0, rpc_timeout=timedelta(seconds=_QUERY_TIMEOUT_S)
        )
        return int(progress.get("tasks", otherwise))
    except Exception:  # no workflow worker answered: the end of the plan is still sent
        return otherwise


def _facts(
    graph: PlanGraph,
    runner: TaskRunner,
    tasks: list[Task],
    limits: Sequence[Mapping[str, Any]] = (),
) -> Arrived:
    """What the workflow needs of ``tasks``: their JSON, their dependencies (in plan
    order), which map, which are fast (local activities in a workflow started before it ran
    none), which have side effects, how long each may take on a worker, the earlier outputs
    the workers may reuse, and the limits of the run (``limits``: its approval rules') and
    of its tools their calls count against."""
    registry, retry = runner.registry, runner.retry
    position = {t.id: i for i, t in enumerate(graph.plan.tasks)}
    facts = Arrived(
        tasks=[t.model_dump(mode="json", exclude_defaults=True) for t in tasks],
        dependencies={
            t.id: sorted(graph.dependencies[t.id], key=position.__getitem__) for t in tasks
        },
        maps=[t.id for t in tasks if t.for_each is not None],
        local=[],
        side_effects=[],
        bounds={},
        allow_partial=[t.id for t in tasks if getattr(t, "allow_partial", False)],
        reuse=_reuse_of(runner.reuse, {t.id for t in tasks}),
    )
    for task in tasks:
        keys = _limit_keys(registry, task, limits)
        if keys:
            facts.limited[task.id] = keys
    for task in tasks:
        if not isinstance(task, ToolTask) or task.tool not in registry:
            continue
        tool = registry.get(task.tool)
        if tool.side_effects:
            facts.side_effects.append(task.id)
            if tool.reconcile is not None:
                facts.reconciled.append(task.id)
        elif not tool.blocking and tool.connection is None:
            facts.local.append(task.id)  # declared never to block, without side effects
        timeout = task.timeout_s if task.timeout_s is not None else tool.timeout_s
        retries = task.retries if task.retries is not None else tool.retries
        facts.attempts[task.id] = retries + 1
        facts.bounds[task.id] = (
            (timeout + retry.max_delay_s) * (retries + 1) + _BOUND_SLACK_S
            if timeout is not None and task.for_each is None
            else None
        )
    return facts


def _limit_keys(registry: Registry, task: Task, limits: Sequence[Mapping[str, Any]]) -> list[str]:
    """The keys the calls of ``task`` count on (see ``RunInput.limited``): ``tool:NAME``
    for each tool it may call that has a ``max_calls`` or ``cooldown_s`` of its own,
    ``limit:N`` for each of the run's ``limits`` that counts calls of one of them."""
    names = task.tool_names
    keys: set[str] = set()
    for name in registry.names if names is None else names:
        if name not in registry:
            continue
        tool = registry.get(name)
        if tool.max_calls is not None or tool.cooldown_s is not None:
            keys.add(f"tool:{name}")
        keys.update(f"limit:{i}" for i, lim in enumerate(limits, 1) if _limits_tool(lim, tool))
    return sorted(keys)


def _limits_tool(limit: Mapping[str, Any], tool: Tool) -> bool:
    """Whether a limit in its file form counts the calls of ``tool``: its globs match the
    tool's name, and its ``side_effects`` (if given) the tool's (as
    :meth:`dagagent.approval.Limit.matches` decides on the workers)."""
    globs = limit.get("tool", "*")
    globs = [globs] if isinstance(globs, str) else list(globs or ())
    if not any(isinstance(g, str) and fnmatch.fnmatchcase(tool.name, g) for g in globs):
        return False
    wanted = limit.get("side_effects")
    return wanted is None or bool(tool.side_effects) is bool(wanted)


def _counted_before(
    runner: TaskRunner, limits: Sequence[Mapping[str, Any]], limited: Mapping[str, list[str]]
) -> dict[str, list[Any]]:
    """The calls the run's ledger counted before its workflow starts (a resumed run's,
    from its record) on each key of ``limited``: ``{key: [calls, last start]}``; a limit
    of the run's rules counts the calls of every tool it matches, as a policy carries
    them over on resume."""
    ledger, registry = runner.calls.ledger, runner.registry
    out: dict[str, list[Any]] = {}
    for key in sorted({k for keys in limited.values() for k in keys}):
        kind, _, name = key.partition(":")
        tools = (
            [name]
            if kind == "tool"
            else [t.name for t in registry if _limits_tool(limits[int(name) - 1], t)]
        )
        calls = sum(ledger.calls(t) for t in tools)
        starts = [at for t in tools if (at := ledger.last_at(t)) is not None]
        if calls:
            out[key] = [calls, max(starts) if starts else None]
    return out


def _revised_of(runner: TaskRunner) -> dict[str, list[dict[str, Any]]]:
    """What the runs a revision revises have on record about its tasks' calls (see
    :class:`~dagagent.runner.Effects`), as JSON, by task: the workers that make the calls
    take over those that took effect, and make those found not to have happened with the
    keys they had (or deny them), as a run in one process does."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in runner.calls.effects.revised:
        out.setdefault(r.task_id, []).append(r.model_dump(mode="json"))
    return out


def _reuse_of(reuse: Mapping[str, tuple[str, Any]], tasks: set[str]) -> dict[str, list[Any]]:
    """The entries of a reuse map (:func:`dagagent.review.reuse_map`) for ``tasks``: each
    task's own (those of a task settled here too: a later task compares its upstream outputs
    with them) and those of a map task's elements (``task@fingerprint``)."""
    return {k: list(v) for k, v in reuse.items() if k in tasks or k.partition("@")[0] in tasks}


async def reuse_by_reference(
    converter: DataConverter,
    facts: RunInput | Arrived,
    reuse: Mapping[str, tuple[str, Any]],
) -> None:
    """Move the reuse ``facts`` holds for each of its map tasks to the payload store of
    ``converter`` (see :meth:`TemporalExecutor._by_reference`); ``reuse``: the run's whole
    reuse map, where the tasks' dependencies' entries are."""
    maps = set(facts.maps)
    own: dict[str, dict[str, list[Any]]] = {}
    for key, entry in facts.reuse.items():
        task_id = key.partition("@")[0]
        if task_id in maps:
            own.setdefault(task_id, {})[key] = entry
    for task_id, entries in own.items():
        deps = facts.dependencies[task_id]
        whole = {**entries, **{d: list(reuse[d]) for d in deps if d in reuse}}
        facts.reuse_refs[task_id] = await stored(converter, whole)
        for key in entries:
            if key != task_id:  # its own entry stays: its dependents compare with it
                del facts.reuse[key]


async def _settle_here(
    graph: PlanGraph, runner: TaskRunner, resumed: _Resumed | None = None
) -> list[TaskResult]:
    """The tasks settled in the driver, without an activity, in dataflow order: those a
    resumed run keeps (they succeeded before), those its ended workflow finished (the
    record lacks them) or whose calls in doubt are denied, then those whose earlier
    output is reused (``replan --execute``), each once its dependencies are settled so. The
    workflow starts with them as finished; the workers reuse the others they may (their
    upstream outputs known only there)."""
    kept = {t for t, r in (runner.prior or {}).items() if r.status.ok}
    there = {**resumed.finished, **resumed.denied} if resumed is not None else {}
    settled: list[TaskResult] = []
    for task_id in graph.order:
        if task_id in kept:
            settled.append(await runner.run_task(task_id))  # its record stands: nothing runs
        elif task_id in there:
            settled.append(runner.ran_elsewhere(there[task_id]))  # recorded, not run again
        elif runner.reuse:
            r = runner.reuse_now(task_id)
            if r is not None:
                settled.append(r)
    return settled


def _require_asyncio() -> None:
    """Refuse an event loop other than asyncio's: Temporal's client runs on asyncio."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        trio = sys.modules.get("trio")
        here = "trio" if trio is not None and trio.lowlevel.in_trio_run() else "this event loop"
        raise ConfigError(
            f"the temporal executor runs on asyncio only (Temporal's client is asyncio's), not "
            f"on {here}: run under asyncio (anyio's backend 'asyncio') or choose another executor"
        ) from None
