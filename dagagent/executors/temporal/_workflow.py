"""The run as one Temporal workflow: deterministic scheduling, each task an activity.

The workflow decides *when* (the dataflow executor's rule: a task starts as soon as its own
dependencies have succeeded; ``on_failure`` as everywhere else); each task runs on a worker
through the same :class:`~dagagent.runner.TaskRunner` a local run uses (see
:mod:`._activities`), so references, validation, retries, timeouts and maps mean there what
they mean here. The workflow holds the plan and the results as JSON and never imports a tool.

**Bounded.** At most ``max_running`` activities are pending at once (Temporal allows 2,000
per workflow); a map wider than ``chunk_elements`` runs in chunks of that many elements, one
activity each, and its result is put together by a local activity; values over the inline
limit travel by reference (:mod:`._payloads`); when the history passes ``history_events``
(or Temporal suggests it), the workflow lets the running tasks end, starts none, and
continues as new with the results so far.

**A plan being written.** The workflow starts with the tasks accepted so far
(``RunInput.streaming``); each later task comes as a signal (:data:`ADD_TASKS`) and runs as
soon as its dependencies have succeeded, and the plan's end comes as another
(:data:`PLAN_COMPLETE`; a plan rejected while it was written stops the run as a failure
would under ``on_failure="cancel"``). Signals are recorded in the history, so a replay
decides the same.

**Lost workers.** Each activity heartbeats. A worker that dies (or stops answering) under
a task is noticed at the heartbeat timeout: a task whose tool has no side effects runs again
on another worker (at most ``lost_worker_retries`` times; the elements a map chunk finished
and reported are not run again). One whose tool has side effects and a reconciler runs again
*in doubt*: there, a call not known to have ended is its reconciler's to decide (it happened:
its output; it did not: it is made, with the same key; it cannot tell: it is not made, and the
task is denied). One whose tool has side effects and no reconciler fails with
``WorkerLostError``, since whether its effect happened is unknown.
"""

from __future__ import annotations

import asyncio
import functools
import json
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    TimeoutError,
    TimeoutType,
)

__all__ = [
    "ADD_TASKS",
    "PLAN_COMPLETE",
    "QUERY_BATCH",
    "RUN_TASK",
    "Arrived",
    "RunInput",
    "RunWorkflow",
]

WORKFLOW = "dagagent.run"
RUN_TASK = "dagagent.run_task"
COUNT_ELEMENTS = "dagagent.count_elements"
#: Signals of a plan being written: more tasks (an :class:`Arrived`), then its end (whether
#: it was rejected).
ADD_TASKS = "add_tasks"
PLAN_COMPLETE = "plan_complete"
#: A query of the run's progress returns at most this many results.
QUERY_BATCH = 200

_OK = ("succeeded", "reused")
#: The ``error_type`` of a task a condition skipped (``dagagent.results.CONDITION_FALSE``).
CONDITION_FALSE = "ConditionFalse"
# Activities are attempted once by Temporal: retries are the task runner's (on the worker)
# and the workflow's own, for lost workers (see _call).
_ONCE = RetryPolicy(maximum_attempts=1)
# A task without a timeout of its own: Temporal needs a bound; the heartbeat notices a lost
# worker long before this.
_UNBOUNDED = timedelta(days=7)
_LOCAL_BOUND = timedelta(minutes=10)


@dataclass
class RunInput:
    """What the workflow needs to run a plan (see :meth:`TemporalExecutor._input`)."""

    run_id: str
    plan: dict[str, Any]
    order: list[str]
    dependencies: dict[str, list[str]]
    maps: list[str]
    #: Tasks whose tool declares no side effects and that it never blocks: local activities.
    local: list[str]
    #: Tasks whose tool has side effects: never run again after a lost worker, unless the
    #: tool has a reconciler (``reconciled``).
    side_effects: list[str]
    #: The longest all attempts of a task may take on a worker (``None``: no limit).
    bounds: dict[str, float | None]
    allow_partial: list[str]
    on_failure: str
    max_elements: int
    retry: dict[str, float]
    task_queue: str
    max_running: int = 1000
    chunk_elements: int = 100
    heartbeat_s: float = 10.0
    lost_worker_retries: int = 3
    history_events: int = 10_000
    #: The results so far: those settled before the workflow started (kept by a resumed
    #: run, reused), then those carried over by continue-as-new.
    finished: list[dict[str, Any]] = field(default_factory=list)
    #: An earlier run's outputs the workers may reuse: ``{task id: [fingerprint, output]}``.
    reuse: dict[str, list[Any]] = field(default_factory=dict)
    #: The plan is still being written: more tasks come by signal (:data:`ADD_TASKS`), then
    #: its end (:data:`PLAN_COMPLETE`).
    streaming: bool = False
    #: A resumed run's decisions about calls that waited (``ApprovalAnswer`` JSON), by task
    #: (or map element): the workers' approval rules hand each to its call.
    answers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: The run's approval rules, applied on the workers (``TemporalExecutor.approval``).
    approval: dict[str, Any] | None = None
    #: How many times the run continued as new.
    generation: int = 0
    #: Tasks with side effects whose tool has a reconciler: after a lost worker, run again
    #: in doubt, on another worker, where the reconciler decides whether the call happened.
    reconciled: list[str] = field(default_factory=list)
    #: The model agent tasks use, as the workers build it (a spec without a key, and in a
    #: solve where its calls belong: see ``dagagent.workflows.temporal_solve``); ``None``:
    #: no model.
    model: dict[str, Any] | None = None
    #: Tasks of a resumed run (with side effects and a reconciler) whose call the run's
    #: ended workflow started and did not see end: run in doubt, where the reconciler
    #: decides whether the call happened.
    in_doubt: list[str] = field(default_factory=list)
    #: When the run must stop (a solve's deadline), in seconds since the epoch of workflow
    #: time: the tasks under way are cancelled, those not started are not run, and the run
    #: ends with what finished. ``None``: no deadline.
    deadline_at: float | None = None


@dataclass
class Arrived:
    """Tasks of a plan being written, in an order where each comes after its dependencies
    (signal :data:`ADD_TASKS`): each task's JSON and what :class:`RunInput` says of it."""

    tasks: list[dict[str, Any]]
    dependencies: dict[str, list[str]]
    maps: list[str]
    local: list[str]
    side_effects: list[str]
    bounds: dict[str, float | None]
    allow_partial: list[str]
    reuse: dict[str, list[Any]] = field(default_factory=dict)
    #: Those of ``side_effects`` whose tool has a reconciler (see ``RunInput.reconciled``).
    reconciled: list[str] = field(default_factory=list)


def _result(task_id: str, status: str, error: str | None = None, **more: Any) -> dict[str, Any]:
    return {"task_id": task_id, "status": status, "error": error, **more}


def _by_condition(r: dict[str, Any]) -> bool:
    """Whether a condition skipped the task (its own ``when``, or a task it depends on)."""
    return r["status"] == "skipped" and r.get("error_type") == CONDITION_FALSE


_DEADLINE = "the solve's deadline passed"


def _halts(r: dict[str, Any]) -> bool:
    """Whether ``r`` stops the run under ``on_failure="cancel"``: the task ended without its
    output, and not because it waits for a person or a condition skipped it."""
    return r["status"] not in (*_OK, "waiting") and not _by_condition(r)


# Outside Temporal's sandbox: the sandbox guards workflow code a user writes, and this
# workflow holds none (it schedules activities; the tools run on the workers), while it
# costs every decision and every payload of every task (each runs code through the
# sandbox's importer). Determinism is the replay tests' to check.
@workflow.defn(name=WORKFLOW, sandboxed=False)
class RunWorkflow:
    @workflow.init
    def __init__(self, inp: RunInput) -> None:
        # here, not in run: a signal handled before run starts finds the run's state
        self.inp = inp
        self.done = False
        self.generation = inp.generation
        self.finished: list[dict[str, Any]] = list(inp.finished)
        self.results: dict[str, dict[str, Any]] = {r["task_id"]: r for r in self.finished}
        self.outputs = {t: r.get("output") for t, r in self.results.items() if r["status"] in _OK}
        self.slots = asyncio.Semaphore(max(1, inp.max_running))
        self.stop_cause: str | None = None
        self.position = {t: i for i, t in enumerate(inp.order)}
        deps = inp.dependencies
        self.dependents: dict[str, list[str]] = {t: [] for t in inp.order}
        for t in inp.order:
            for d in deps[t]:
                self.dependents[d].append(t)
        self.waiting = {t: sum(1 for d in deps[t] if d not in self.outputs) for t in inp.order}
        self.ready = [t for t in inp.order if t not in self.results and not self.waiting[t]]
        self.running: dict[asyncio.Task[dict[str, Any]], str] = {}
        # the tasks of ``running`` that have ended, in the order they did
        self.ended: list[asyncio.Task[dict[str, Any]]] = []
        # the plan as every activity gets it: its JSON text, made once (and again when
        # tasks arrive), which a worker reads once per plan (see Activities._graph)
        self.plan_text = _plan_text(inp.plan)

    @workflow.query(name="progress")
    def progress(self, since: int) -> dict[str, Any]:
        """The results from number ``since`` on (at most :data:`QUERY_BATCH`), how many
        there are, whether the run is over (or continuing as new), and how many tasks of
        the plan it has (a plan being written: those that reached it)."""
        return {
            "results": self.finished[since : since + QUERY_BATCH],
            "total": len(self.finished),
            "done": self.done,
            "generation": self.generation,
            "tasks": len(self.inp.order),
        }

    @workflow.signal(name=ADD_TASKS)
    def add_tasks(self, arrived: Arrived) -> None:
        """Tasks of the plan being written: each runs once its dependencies have succeeded
        (at once if they have), is skipped if one of them did not."""
        inp = self.inp
        inp.plan["tasks"].extend(arrived.tasks)
        inp.dependencies.update(arrived.dependencies)
        inp.maps.extend(arrived.maps)
        inp.local.extend(arrived.local)
        inp.side_effects.extend(arrived.side_effects)
        inp.reconciled.extend(arrived.reconciled)
        inp.bounds.update(arrived.bounds)
        inp.allow_partial.extend(arrived.allow_partial)
        inp.reuse.update(arrived.reuse)
        self.plan_text = _plan_text(inp.plan)
        for task in arrived.tasks:
            self._arrived(task["id"])

    @workflow.signal(name=PLAN_COMPLETE)
    def plan_complete(self, aborted: bool) -> None:
        """No task will follow (``aborted``: the plan was rejected while it was written,
        which stops the run as a failure would under ``on_failure="cancel"``)."""
        self.inp.streaming = False
        if aborted and self.inp.on_failure == "cancel" and self.stop_cause is None:
            self.stop_cause = "the run was stopped because the plan being written was rejected"
            for other in self.running:
                other.cancel()

    def _arrived(self, task_id: str) -> None:
        inp = self.inp
        if task_id in self.position:
            return
        self.position[task_id] = len(inp.order)
        inp.order.append(task_id)
        self.dependents[task_id] = []
        deps = inp.dependencies[task_id]
        for d in deps:
            self.dependents[d].append(task_id)
        if task_id in self.results:
            return
        if any(d in self.results and d not in self.outputs for d in deps):
            self._skip(task_id, self._blocker(task_id) or deps[0])  # one did not succeed
            return
        left = sum(1 for d in deps if d not in self.outputs)
        self.waiting[task_id] = left
        if not left:
            self.ready.append(task_id)

    @workflow.run
    async def run(self, inp: RunInput) -> list[dict[str, Any]]:
        if inp.deadline_at is None:
            return await self._run(inp)
        if inp.deadline_at <= workflow.now().timestamp():
            self.stop_cause = _DEADLINE  # passed already: nothing starts
            return await self._run(inp)
        watch = asyncio.create_task(self._deadline(inp.deadline_at))
        try:
            return await self._run(inp)
        finally:
            watch.cancel()

    async def _deadline(self, at: float) -> None:
        """At ``at`` (workflow time), stop the run: the tasks under way are cancelled."""
        await asyncio.sleep(at - workflow.now().timestamp())
        if self.stop_cause is None:
            self.stop_cause = _DEADLINE
            for other in self.running:
                other.cancel()

    async def _run(self, inp: RunInput) -> list[dict[str, Any]]:
        running = self.running
        rolling_over = False
        try:
            while True:
                if self.stop_cause is None and not rolling_over:
                    for t in self.ready:
                        fut = asyncio.create_task(self._task(t))
                        fut.add_done_callback(self.ended.append)
                        running[fut] = t
                    self.ready = []
                more = inp.streaming and self.stop_cause is None and not rolling_over
                if not running and not more:
                    break
                # a task ends, or (a plan being written) the plan grows or ends
                await workflow.wait_condition(functools.partial(self._woken, more))
                done = self.ended[:]  # the callbacks hold this list: emptied, not replaced
                self.ended.clear()
                for fut in sorted(done, key=lambda f: self.position[running[f]]):
                    task_id = running.pop(fut)
                    r = (
                        _result(task_id, "cancelled", self._cancelled_why())
                        if fut.cancelled()
                        else fut.result()
                    )
                    self._finish(r)
                    status = r["status"]
                    if status in _OK:
                        for child in self.dependents[task_id]:
                            self.waiting[child] -= 1
                            if not self.waiting[child] and child not in self.results:
                                self.ready.append(child)
                    elif inp.on_failure == "cancel" and _halts(r):
                        if self.stop_cause is None:
                            self.stop_cause = f"the run was stopped after task {task_id!r} {status}"
                            for other in running:
                                other.cancel()
                    else:
                        self._block_descendants(task_id)
                info = workflow.info()
                if (
                    info.get_current_history_length() >= inp.history_events
                    or info.is_continue_as_new_suggested()
                ):
                    rolling_over = True  # no new task: those running end, then a new run
        except asyncio.CancelledError:  # the run was cancelled (its driver was interrupted)
            self.stop_cause = "the run was interrupted (Ctrl-C, a signal, or its caller)"
            for other in running:
                other.cancel()
            raise
        if rolling_over and (len(self.results) < len(inp.order) or inp.streaming):
            self.done = True  # this run's part: the driver follows the next
            workflow.continue_as_new(
                replace(inp, finished=self.finished, generation=inp.generation + 1)
            )
        self._finish_unstarted()
        self.done = True
        return self.finished

    def _woken(self, more: bool) -> bool:
        """Whether the run has something to do: a task ended, or (``more``: a plan being
        written) tasks arrived, the plan ended or the run stops."""
        return bool(self.ended) or (
            more and (bool(self.ready) or not self.inp.streaming or self.stop_cause is not None)
        )

    # -- results ---------------------------------------------------------------------------

    def _finish(self, r: dict[str, Any]) -> None:
        self.results[r["task_id"]] = r
        self.finished.append(r)
        if r["status"] in _OK:
            self.outputs[r["task_id"]] = r.get("output")

    def _cancelled_why(self) -> str:
        return f"cancelled while running: {self.stop_cause or 'the run was stopped'}"

    def _blocker(self, task_id: str) -> str | None:
        """The dependency that keeps ``task_id`` from running: one that failed, was denied
        or skipped for a failure if there is one, else one a condition skipped, else one
        that was cancelled, else one that has not finished."""
        by_condition = cancelled = pending = None
        for d in self.inp.dependencies[task_id]:
            if d in self.outputs:
                continue
            r = self.results.get(d)
            if r is None:
                pending = pending or d
            elif r["status"] == "cancelled":
                cancelled = cancelled or d
            elif _by_condition(r):
                by_condition = by_condition or d
            else:
                return d
        return by_condition or cancelled or pending

    def _skip(self, task_id: str, upstream: str) -> None:
        """Mark ``task_id`` skipped because of task ``upstream`` (by a condition when
        ``upstream`` was)."""
        r = self.results.get(upstream)
        if r is None:
            self._finish(
                _result(task_id, "skipped", f"not run: upstream task {upstream!r} did not finish")
            )
        elif _by_condition(r):
            why = f"not run: upstream task {upstream!r} was skipped by a condition"
            self._finish(_result(task_id, "skipped", why, error_type=CONDITION_FALSE))
        else:
            why = f"not run: upstream task {upstream!r} {r['status']}"
            self._finish(_result(task_id, "skipped", why))

    def _block_descendants(self, failed: str) -> None:
        """Mark every descendant of ``failed`` not started yet as skipped, naming what keeps
        it from running."""
        stack = list(self.dependents[failed])
        while stack:
            n = stack.pop()
            if n in self.results:
                continue
            self._skip(n, self._blocker(n) or failed)
            stack.extend(self.dependents[n])

    def _finish_unstarted(self) -> None:
        """Give every task without a result its final status, in plan order: skipped when a
        dependency did not succeed, else cancelled (the run stopped first)."""
        for n in self.inp.order:
            if n in self.results:
                continue
            d = self._blocker(n)
            if d is not None and d in self.results and self.results[d]["status"] != "cancelled":
                self._skip(n, d)
            else:
                self._finish(_result(n, "cancelled", f"not run: {self.stop_cause}"))

    # -- one task ----------------------------------------------------------------------------

    async def _task(self, task_id: str) -> dict[str, Any]:
        try:
            if task_id in self.inp.maps:
                return await self._map(task_id)
            return await self._call(task_id)
        except asyncio.CancelledError:
            return _result(task_id, "cancelled", self._cancelled_why())

    def _args(self, task_id: str, call: dict[str, Any]) -> list[Any]:
        """An activity's arguments: the call, the plan, then each dependency's output, each
        a payload of its own (so that a large one is stored once, whoever reads it)."""
        inp = self.inp
        deps = inp.dependencies[task_id]
        call = {
            "run_id": inp.run_id,
            "task_id": task_id,
            "deps": deps,
            "on_failure": inp.on_failure,
            "max_elements": inp.max_elements,
            "retry": inp.retry,
            "model": inp.model,
            **call,
        }
        answers = {
            k: a for k, a in inp.answers.items() if k == task_id or k.startswith(f"{task_id}[")
        }
        if answers:  # decisions a person took about its calls that waited
            call["answers"] = answers
        if inp.approval:
            call["approval"] = inp.approval
        own = {k: v for k, v in inp.reuse.items() if k == task_id or k.startswith(f"{task_id}@")}
        if own:  # its earlier output (or its elements'), and those of its dependencies
            call["reuse"] = {**own, **{d: inp.reuse[d] for d in deps if d in inp.reuse}}
        return [call, self.plan_text, *(self.outputs[d] for d in deps)]

    async def _call(
        self, task_id: str, window: tuple[int, int] | None = None, **extra: Any
    ) -> dict[str, Any]:
        """Run ``task_id`` (or the elements ``window`` of a map) in one activity; run it
        again on another worker when its worker is lost, if its tool has no side effects (or
        has a reconciler: then in doubt, see the module docstring)."""
        inp = self.inp
        lost = 0
        done_elements: list[dict[str, Any]] = []
        bound = inp.bounds.get(task_id)
        if task_id in inp.in_doubt:  # its call may have happened in the run's ended workflow
            extra = {**extra, "in_doubt": True}
        while True:
            call = {"window": list(window) if window else None, "done": done_elements, **extra}
            args = self._args(task_id, call)
            try:
                async with self.slots:
                    if task_id in inp.local and window is None:
                        r: dict[str, Any] = await workflow.execute_local_activity(
                            RUN_TASK,
                            args=args,
                            start_to_close_timeout=(
                                timedelta(seconds=bound) if bound else _LOCAL_BOUND
                            ),
                            retry_policy=_ONCE,
                        )
                    else:
                        r = await workflow.execute_activity(
                            RUN_TASK,
                            args=args,
                            task_queue=inp.task_queue,
                            start_to_close_timeout=(
                                timedelta(seconds=bound) if bound else _UNBOUNDED
                            ),
                            heartbeat_timeout=timedelta(seconds=inp.heartbeat_s),
                            retry_policy=_ONCE,
                        )
                return r
            except ActivityError as exc:
                cause = exc.cause
                if isinstance(cause, CancelledError):  # this workflow cancelled it
                    raise asyncio.CancelledError from None
                if isinstance(cause, TimeoutError):
                    what = _timeout_what(cause.type, inp.heartbeat_s)
                    if task_id in inp.side_effects and not (
                        task_id in inp.reconciled and lost < inp.lost_worker_retries
                    ):
                        return _result(
                            task_id,
                            "failed",
                            f"{what}; its tool has side effects, so it is not run again (they "
                            "may or may not have happened)",
                            error_type="WorkerLostError",
                            attempts=1,
                        )
                    lost += 1
                    if lost > inp.lost_worker_retries:
                        return _result(
                            task_id,
                            "failed",
                            f"{what}, {lost} times: not run again",
                            error_type="WorkerLostError",
                            attempts=lost,
                        )
                    done_elements = _reported(cause, done_elements)
                    if task_id in inp.side_effects:  # its calls cut off are in doubt there
                        extra = {**extra, "in_doubt": True}
                    continue
                return _failed(task_id, exc)

    async def _map(self, task_id: str) -> dict[str, Any]:
        """A map task: in one activity when its list is short, else in chunks of
        ``chunk_elements`` elements (an activity each), put together at the end."""
        inp = self.inp
        try:
            counted: dict[str, Any] = await workflow.execute_local_activity(
                COUNT_ELEMENTS,
                args=self._args(task_id, {}),
                start_to_close_timeout=_LOCAL_BOUND,
                retry_policy=_ONCE,
            )
        except ActivityError as exc:
            if isinstance(exc.cause, CancelledError):
                raise asyncio.CancelledError from None
            return _failed(task_id, exc)
        if "result" in counted:  # the list could not be had: the task's failure
            r: dict[str, Any] = counted["result"]
            return r
        n: int = counted["n"]
        size = max(1, inp.chunk_elements)
        if n <= size:
            return await self._call(task_id)
        windows = [(i, min(i + size, n)) for i in range(0, n, size)]
        chunks = {asyncio.create_task(self._call(task_id, w, n=n)): w for w in windows}
        cancel_siblings = inp.on_failure == "cancel" and task_id not in inp.allow_partial
        elements: dict[int, dict[str, Any]] = {}
        model_calls: list[dict[str, Any]] = []  # agent elements': they go with the task
        failure: dict[str, Any] | None = None
        pending = list(chunks)  # a list: cancelled in the same order on every replay
        try:
            while pending:
                done, _ = await workflow.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                pending = [f for f in pending if f not in done]
                for fut in sorted(done, key=lambda f: chunks[f][0]):
                    if fut.cancelled():
                        continue
                    r = fut.result()
                    model_calls.extend(r.pop("model_calls", None) or ())
                    start, _ = chunks[fut]
                    for i, e in enumerate(r.get("elements") or (), start):
                        elements[i] = e
                    if r["status"] not in (*_OK, "waiting") and failure is None:
                        failure = r
                        if not r.get("elements"):  # the chunk itself failed (a lost worker)
                            start, stop = chunks[fut]
                            failure = {
                                **r,
                                "error": f"elements {start} to {stop - 1}: {r['error']}",
                            }
                        if cancel_siblings:
                            for other in pending:
                                other.cancel()
        except asyncio.CancelledError:
            for other in chunks:
                other.cancel()
            raise
        started = [e["started_at"] for e in elements.values() if e.get("started_at")]
        first_start = min(started) if started else None
        if failure is not None and (cancel_siblings or len(elements) < n):
            why = f"not run: {failure['error']}"
            listed = [
                elements.get(i) or _result(f"{task_id}[{i}]", "cancelled", why) for i in range(n)
            ]
            return {
                **failure,
                "task_id": task_id,
                "elements": listed,
                "output": None,
                "started_at": first_start,
                "attempts": 1,
                "model_calls": model_calls,
            }
        try:
            whole: dict[str, Any] = await workflow.execute_local_activity(
                RUN_TASK,
                args=self._args(
                    task_id,
                    {"window": None, "assemble": True, "done": [elements[i] for i in range(n)]},
                ),
                start_to_close_timeout=_LOCAL_BOUND,
                retry_policy=_ONCE,
            )
        except ActivityError as exc:
            if isinstance(exc.cause, CancelledError):
                raise asyncio.CancelledError from None
            return _failed(task_id, exc)
        whole["started_at"] = first_start
        whole["model_calls"] = model_calls
        return whole


def _plan_text(plan: dict[str, Any]) -> str:
    return json.dumps(plan, separators=(",", ":"), ensure_ascii=False)


def _failed(task_id: str, exc: ActivityError) -> dict[str, Any]:
    """A task whose activity failed without a result of its own (the worker cannot run it)."""
    cause = exc.cause
    if isinstance(cause, ApplicationError):
        return _result(
            task_id, "failed", cause.message, error_type=cause.type or "ApplicationError"
        )
    return _result(task_id, "failed", str(cause or exc), error_type=type(cause or exc).__name__)


def _timeout_what(kind: TimeoutType | None, heartbeat_s: float) -> str:
    if kind is TimeoutType.HEARTBEAT:
        return f"its worker was lost (no heartbeat for {heartbeat_s:g} s)"
    if kind is TimeoutType.START_TO_CLOSE:
        return "its worker did not finish it within the task's time bound (the worker was lost)"
    return f"its activity timed out on the server ({kind.name if kind else 'unknown'})"


def _reported(cause: TimeoutError, before: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The elements a lost chunk had finished and reported in its last heartbeat (with those
    known before): the next attempt does not run them again."""
    details = cause.last_heartbeat_details
    if details and isinstance(details[0], list):
        known = {e["task_id"]: e for e in before}
        for e in details[0]:
            if isinstance(e, dict) and "task_id" in e:
                known[e["task_id"]] = e
        return list(known.values())
    return before
