"""The run as one Temporal workflow: deterministic scheduling, each task an activity.

The workflow decides *when* (the dataflow executor's rule: a task starts as soon as its own
dependencies have succeeded; ``on_failure`` as everywhere else); each task runs on a worker
through the same :class:`~dagagent.runner.TaskRunner` a local run uses (see
:mod:`._activities`), so references, validation, retries, timeouts and maps mean there what
they mean here. The workflow holds the plan and the results as JSON and never imports a tool.

**Bounded.** At most ``max_running`` activities are pending at once (Temporal allows 2,000
per workflow); a map wider than ``chunk_elements`` runs in chunks of that many elements, one
activity each, and its result is put together by one more; values over the inline
limit travel by reference (:mod:`._payloads`); when the history passes ``history_events``
(or Temporal suggests it), the workflow lets the running tasks end, starts none, and
continues as new with the results so far: each run's own results go on as an argument of
their own, the same payload in every later run, so a long run stores each result once.

**A plan being written.** The workflow starts with the tasks accepted so far
(``RunInput.streaming``); each later task comes as a signal (:data:`ADD_TASKS`) and runs as
soon as its dependencies have succeeded, and the plan's end comes as another
(:data:`PLAN_COMPLETE`; a plan rejected while it was written stops the run as a failure
would under ``on_failure="cancel"``). Signals are recorded in the history, so a replay
decides the same.

**Lost workers.** Each activity heartbeats. A worker that dies (or stops answering) under
a task is noticed at the heartbeat timeout: a task whose tool has no side effects runs again
on another worker (at most ``lost_worker_retries`` times; the elements a map chunk finished
and reported are not run again). One whose tool has side effects runs again *in doubt*:
there, a call not known to have ended is its reconciler's to decide (it happened: its
output; it did not: it is made, with the same key); one nothing decides (no reconciler, or
it cannot tell) goes by the run's ``in_doubt`` policy: ``ask`` (the default) names it and
its task waits for a person, as a call an approval rule holds (the run goes on, and
pauses), ``deny`` does not make it, ``retry`` makes it with the same key. Its heartbeats
name its worker, which the call's record then names.

**Sub-solves.** In a round of a solve whose plans may hold sub-solves (``RunInput.sub_solve``),
a task with ``"solve": true`` is reached by a child solve workflow per goal: an activity
resolves its instruction (each element's, for a map; its ``when``, as for any task), each
goal's solve runs as a child workflow of this one, and a second activity makes the task's
result from their answers, through the same task runner (see ``_sub_solve``). With a
budget, the sub-solves of a run start one at a time, each carved what the solve has left then.
A sub-solve whose tools count against limits (``RunInput.limited``) counts on the run's
counts, as a local one counts on its parent's ledger: it holds those limits while it runs,
as an activity does (see ``_counted``), its solve starts from the counts so far, and what it
counted comes back with its end, for the run and the solve.

**No local activities.** Every step on a worker is a regular activity on the run's task
queue, fast tools' calls included (see ``_NO_LOCAL``): a local activity's result may reach the
workflow a workflow task later than the one whose completion recorded it, and a replay, which
follows the record, would then decide in another order. Runs started before keep theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import json
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import timedelta
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    TimeoutError,
    TimeoutType,
)
from temporalio.workflow import ParentClosePolicy

from ...limits import DEFAULT_ELEMENT_CONCURRENCY

__all__ = [
    "ADD_TASKS",
    "PLAN_COMPLETE",
    "QUERY_BATCH",
    "RUN_TASK",
    "SUB_SOLVE_GOALS",
    "SUB_SOLVE_SETTLE",
    "Arrived",
    "RunInput",
    "RunWorkflow",
]

WORKFLOW = "dagagent.run"
RUN_TASK = "dagagent.run_task"
COUNT_ELEMENTS = "dagagent.count_elements"
#: The activities of a sub-solve task: its goals (resolved instructions), then its
#: result from the answers of their solves.
SUB_SOLVE_GOALS = "dagagent.sub_solve.goals"
SUB_SOLVE_SETTLE = "dagagent.sub_solve.settle"
#: Signals of a plan being written: more tasks (an :class:`Arrived`), then its end (whether
#: it was rejected).
ADD_TASKS = "add_tasks"
PLAN_COMPLETE = "plan_complete"
#: The ``in_doubt_policy`` of a workflow started by a driver whose run's workflow ended under
#: it: the workers name each call in doubt (its key, for the run's record) and make none.
IN_DOUBT_RECORD = "record"
#: A query of the run's progress returns at most this many results.
QUERY_BATCH = 200

_OK = ("succeeded", "reused")
#: The ``error_type`` of a task a condition skipped (``dagagent.results.CONDITION_FALSE``).
CONDITION_FALSE = "ConditionFalse"
#: The patch under which a task with side effects whose worker was lost runs again in doubt
#: under the run's ``in_doubt`` policy (``ask``: a call nothing decides waits for a person),
#: with or without a reconciler (a run started before failed the task without one, and
#: denied it when its reconciler could not tell).
_LOST_ASKS = "lost-calls-ask"
#: The patch under which a map's elements on a worker take the run's and the task's
#: concurrency slots (a run started before ran each chunk's elements at the chunk's width).
_ELEMENT_SLOTS = "element-slots"
#: The patch under which a sub-solve counts on the run's limits (a run started before gave
#: each child solve none of its counts, and took none of the child's back).
_SUB_SOLVE_COUNTS = "sub-solve-counts"
#: The change after which a run continues as new with what it added as an argument of its
#: own (the results it finished, the tasks that reached it, where it left the run), after
#: the earlier runs' as they came and the run's first input, unchanged (see ``_carry``):
#: each is stored once. Before it, the new run's input carried every result so far (and a
#: run stopped by a failure under ``on_failure="cancel"`` continued as new all the same).
_CARRIES_RUNS = "dagagent-run-carries-runs"
#: The patch under which the workflow runs no local activity: its own steps (a map's element
#: count and assembly, a sub-solve's goals and result, a budget's carve) and the calls of
#: fast tools are activities on the run's task queue. A local activity's result can reach
#: the workflow one workflow task later than the task whose completion recorded it; a
#: replay delivers it where it was recorded, so the workflow decides in another order and
#: its history no longer replays (see ``docs/temporal.md``). A run started before keeps
#: running its local activities, as its history says.
_NO_LOCAL = "no-local-activities"
#: The patch under which an activity carries its task alone (in its call: ``task``), not the
#: plan: a worker needs no other task to run one, and every payload of a scheduled activity
#: costs the workflow and the worker (a plan past the inline limit went through the payload
#: store for each). A run started before keeps sending the plan's JSON text, which the
#: workers still read (see ``Activities._graph``).
_TASK_ALONE = "dagagent-run-task-alone"
#: The patch under which a task's activities find its reuse by task (indexed once, not
#: looked for among every entry of the run's) and a map task whose reuse went to the payload
#: store (``RunInput.reuse_refs``) gives its activities the reference alone: each chunk of a
#: wide map carried the whole of it, and the workflow task that scheduled the chunks spent
#: seconds writing them out. A run started before builds each activity's reuse as it did.
_REUSE_REFS = "reuse-by-reference"
# Activities are attempted once by Temporal: retries are the task runner's (on the worker)
# and the workflow's own, for lost workers (see _call).
_ONCE = RetryPolicy(maximum_attempts=1)
# A task without a timeout of its own: Temporal needs a bound; the heartbeat notices a lost
# worker long before this.
_UNBOUNDED = timedelta(days=7)
_LOCAL_BOUND = timedelta(minutes=10)
# The workflow's own steps (see _step): quick, without side effects, so run again when their
# worker is lost, at once.
_STEP_BOUND = timedelta(minutes=10)


@dataclass
class RunInput:
    """What the workflow needs to run a plan (see :meth:`TemporalExecutor._input`)."""

    run_id: str
    plan: dict[str, Any]
    order: list[str]
    dependencies: dict[str, list[str]]
    maps: list[str]
    #: Tasks whose tool declares no side effects and that it never blocks: local activities
    #: in a run started before ``_NO_LOCAL`` (activities as any other's since).
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
    #: Map tasks whose reuse (their elements', their own, their dependencies') is one payload
    #: in the payload store, by task: a reference each of their activities gets in its place
    #: (see ``dagagent.executors.temporal._payloads.stored``); their elements' entries are not
    #: in ``reuse``.
    reuse_refs: dict[str, str] = field(default_factory=dict)
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
    #: What the workers do with a call in doubt (of ``in_doubt``, or cut off with a lost
    #: worker) that neither a person's answer nor a reconciler decides: the run's
    #: ``in_doubt`` policy (``ask``: its task waits for a person; ``IN_DOUBT_RECORD``: named
    #: for the run's record, neither made nor reconciled); ``None``: ``ask`` after a lost
    #: worker, else it is not made (the task is denied).
    in_doubt_policy: str | None = None
    #: Tasks whose calls count against a limit of the run (a tool's ``max_calls`` or
    #: ``cooldown_s``: ``tool:NAME``; a limit of the run's approval rules: ``limit:N``, the
    #: N-th of its ``limits``): the keys each counts on (see :meth:`RunWorkflow._counted`).
    limited: dict[str, list[str]] = field(default_factory=dict)
    #: The calls in doubt on the run's record of a resumed run's tasks (an earlier resume
    #: left them for a person, who may have decided since), as JSON, by task: the task's
    #: worker decides about each by its record, under ``in_doubt_policy``.
    effects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: What the runs a revision revises have on record about the calls of its tasks (calls
    #: that took effect, calls in doubt a person resolved), as JSON, by task: the task's
    #: worker takes over, makes with their keys, or denies the same calls.
    revised: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: The calls counted so far on each key: ``[calls, start of the last one (Unix time)]``
    #: (a resumed run's record; then those carried over by continue-as-new).
    ledger: dict[str, list[Any]] = field(default_factory=dict)
    #: When the run must stop (a solve's deadline), in seconds since the epoch of workflow
    #: time: the tasks under way are cancelled, those not started are not run, and the run
    #: ends with what finished. ``None``: no deadline.
    deadline_at: float | None = None
    #: What the run may spend of a solve's budget (a solve on Temporal gives it): ``limits``
    #: (``Budget`` JSON), ``price`` (its model's), ``spent`` (what the solve spent before the
    #: run). The workflow counts the tool calls and holds what each activity may make (see
    #: :meth:`RunWorkflow._grant`); ``None``: nothing is limited.
    budget: dict[str, Any] | None = None
    #: The most attempts each tool task makes (its retries and one): the tool calls the
    #: workflow holds for it under a budget of tool calls (a task not named: one).
    attempts: dict[str, int] = field(default_factory=dict)
    #: The solve this run is a round of, when its plans may hold sub-solves: ``input`` (the
    #: solve workflow's input, which each child's is made from), ``workflow`` (the name of
    #: the solve workflow), ``id_prefix`` (of a solve's workflow id), ``carve`` (the
    #: activity that carves a child's budget) and ``spent`` (what the solve had spent when
    #: the run started). ``None``: a sub-solve task fails, as in a run of its own.
    sub_solve: dict[str, Any] | None = None
    #: The tools the run's tasks may use, of the worker's (a sub-solve's: its task's
    #: ``tools``): an agent task is offered those alone; ``None``: all the worker's.
    tools: list[str] | None = None
    #: What the limits count the calls of (``"run"``, or ``"solve"``: a round's run, whose
    #: ``ledger`` is the solve's so far), as the workers' messages say it.
    ledger_scope: str = "run"
    #: The run's ``max_concurrency``: at most this many tasks and map elements run at once
    #: (a chunk of a map holds a slot for each element it runs at once); ``None``: no bound
    #: but ``max_running`` activities.
    max_concurrency: int | None = None
    #: A turn of a session: its conversation as data (the earlier turns and their outputs),
    #: which the workers' tools of the turn read (the ``earlier_turn`` tool a session adds);
    #: given to the activities of the tasks in ``conversing`` (an agent task, a call of that
    #: tool) as an argument of its own, one payload for them all. ``None``: not a turn.
    conversation: dict[str, Any] | None = None
    #: The tasks whose activities get ``conversation``.
    conversing: list[str] = field(default_factory=list)
    #: The W3C trace context of the run's span on its driver (``traceparent``, ...), when
    #: the driver traces: each task's activity gets it (``call["trace"]``), and its worker's
    #: spans of the task join the run's trace. ``None``: not traced.
    trace: dict[str, str] | None = None


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
    #: Those of ``tasks`` whose reuse is in the payload store (see ``RunInput.reuse_refs``).
    reuse_refs: dict[str, str] = field(default_factory=dict)
    #: Those of ``side_effects`` whose tool has a reconciler (see ``RunInput.reconciled``).
    reconciled: list[str] = field(default_factory=list)
    #: The most attempts of each tool task (see ``RunInput.attempts``).
    attempts: dict[str, int] = field(default_factory=dict)
    #: The limits each task's calls count against (see ``RunInput.limited``).
    limited: dict[str, list[str]] = field(default_factory=dict)
    #: Results of ``tasks`` the sender settled without a call (reused from an earlier
    #: run): finished the moment they arrive.
    finished: list[dict[str, Any]] = field(default_factory=list)


def _grow(inp: RunInput, arrived: Arrived) -> None:
    """Add the tasks of ``arrived`` (and what it says of them) to ``inp``'s plan; the
    run's order is the workflow's (see ``RunWorkflow._arrived``)."""
    inp.plan["tasks"].extend(arrived.tasks)
    inp.dependencies.update(arrived.dependencies)
    inp.maps.extend(arrived.maps)
    inp.local.extend(arrived.local)
    inp.side_effects.extend(arrived.side_effects)
    inp.reconciled.extend(arrived.reconciled)
    inp.bounds.update(arrived.bounds)
    inp.allow_partial.extend(arrived.allow_partial)
    inp.reuse.update(arrived.reuse)
    inp.reuse_refs.update(arrived.reuse_refs)
    inp.attempts.update(arrived.attempts)
    inp.limited.update(arrived.limited)


def _run_input(given: dict[str, Any], earlier: list[dict[str, Any]]) -> RunInput:
    """The run as this workflow begins it: ``given`` (the input of the run's first
    workflow, or of one continued as new before ``_CARRIES_RUNS``, as JSON: the workflow's
    arguments after the first make Temporal hand every argument over as plain JSON), with
    what each earlier run added (see ``RunWorkflow._carry``): its results, the tasks that
    reached it, and, from the last, where it left the run. ``given`` is left as it came."""
    names = {f.name for f in fields(RunInput)}
    inp = RunInput(**{k: v for k, v in copy.deepcopy(given).items() if k in names})
    known = set(inp.order)
    for run in earlier:
        inp.finished.extend(run["finished"])
        for doc in run["arrived"]:
            arrived = Arrived(**doc)
            _grow(inp, arrived)
            inp.order.extend(t["id"] for t in arrived.tasks if t["id"] not in known)
            known.update(t["id"] for t in arrived.tasks)
    if earlier:
        left = earlier[-1]["left"]
        inp.generation = left["generation"]
        inp.streaming = left["streaming"]
        inp.ledger = left["ledger"]
        if inp.budget is not None:
            inp.budget = {**inp.budget, "spent": left["spent"]}
    return inp


def _index_reuse(index: dict[str, dict[str, list[Any]]], reuse: dict[str, list[Any]]) -> None:
    """Add the entries of ``reuse`` to ``index``, under the task each is for (a map
    element's, ``task@fingerprint``, under its task: ``@`` is never part of a task id)."""
    for key, entry in reuse.items():
        index.setdefault(key.partition("@")[0], {})[key] = entry


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
    def __init__(self, given: RunInput | dict[str, Any], *earlier: dict[str, Any]) -> None:
        # here, not in run: a signal handled before run starts finds the run's state
        #: The input of the run's first workflow (or of one continued as new before
        #: _CARRIES_RUNS), passed on unchanged; then what each run before this one added
        #: (see _carry), as it came.
        self.given: dict[str, Any] = given if isinstance(given, dict) else asdict(given)
        self.earlier: list[dict[str, Any]] = list(earlier)
        self.inp = inp = _run_input(self.given, self.earlier)
        self.first = len(inp.finished)  # the results this run started with
        self.arrived: list[dict[str, Any]] = []  # the tasks that reached this run (signals)
        self.done = False
        self.generation = inp.generation
        self.finished: list[dict[str, Any]] = list(inp.finished)
        self.results: dict[str, dict[str, Any]] = {r["task_id"]: r for r in self.finished}
        self.outputs = {t: r.get("output") for t, r in self.results.items() if r["status"] in _OK}
        self.slots = asyncio.Semaphore(max(1, inp.max_running))
        # A chunk of a map takes its slots together (see _slots); a map task with a bound of
        # its own (its ``max_concurrency``) has slots of its own, shared by its chunks.
        self.taking = asyncio.Lock()
        self.element_slots: dict[str, tuple[asyncio.Lock, asyncio.Semaphore]] = {}
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
        # A solve's budget (``RunInput.budget``): what the run's activities spent, what the
        # running ones hold, and whether an agent task holds all that is left.
        self.spent: dict[str, Any] = dict((inp.budget or {}).get("spent") or {})
        self.held_tool_calls = 0
        self.leased = False
        self.ledger: dict[str, list[Any]] = {k: list(v) for k, v in inp.ledger.items()}
        # One task at a time counts on a key (see _counted).
        self.counting: dict[str, asyncio.Lock] = {}
        #: The sub-solves started (those of tasks finished before a continue-as-new too).
        self.children = [s for r in self.finished for s in r.get("sub_solves") or ()]
        self.one_at_a_time = asyncio.Lock()  # sub-solves carved from a budget
        #: Whether the run uses no local activity (patch ``_NO_LOCAL``, decided when it starts)
        self.no_local = False
        # the tasks of ``running`` that have ended, in the order they did
        self.ended: list[asyncio.Task[dict[str, Any]]] = []
        #: Whether each activity carries its task alone (patch ``_TASK_ALONE``, decided when
        #: the run starts); before, the plan as every activity got it: its JSON text, made
        #: when first needed (and again after tasks arrive)
        self.task_alone = False
        self.plan_text: str | None = None
        self.task_docs: dict[str, dict[str, Any]] = {}
        for t in inp.plan["tasks"]:
            self.task_docs.setdefault(t["id"], t)
        #: the run's reuse by the task it is for (a map task's elements' under it too): each
        #: activity finds its task's at once (see _args)
        self.reuse_of: dict[str, dict[str, list[Any]]] = {}
        _index_reuse(self.reuse_of, inp.reuse)
        #: whether the run finds reuse by task, by reference (patch _REUSE_REFS; ``None``:
        #: not asked yet, which only a task with reuse asks)
        self.reuse_by_ref: bool | None = None
        #: a plan written while the run ran was rejected halfway (see :data:`PLAN_COMPLETE`)
        self.plan_aborted = bool(self.earlier and self.earlier[-1]["left"].get("aborted"))
        #: the tasks the run started with (then, of a plan being written, those to come)
        self.initial = len(inp.plan["tasks"]) if inp.generation == 0 else 0

    @workflow.query(name="sub_solves")
    def sub_solves(self, since: int) -> list[dict[str, Any]]:
        """The sub-solves started, from number ``since`` on: each one's ``solve_id``,
        ``run_id``, ``task_id``, ``element``, ``goal``, ``depth``, ``tools``, ``budget`` and
        ``deadline_s`` (and, once it ended, what it ``spent``)."""
        return self.children[since:]

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

    @workflow.query(name="plan_tasks")
    def plan_tasks(self, since: int) -> dict[str, Any]:
        """The plan's tasks from number ``since`` on (at most :data:`QUERY_BATCH`), how many
        it has, and whether more may come (a plan being written)."""
        tasks = self.inp.plan["tasks"]
        return {
            "tasks": tasks[since : since + QUERY_BATCH],
            "total": len(tasks),
            "streaming": self.inp.streaming,
            "aborted": self.plan_aborted,
            "initial": self.initial,
        }

    @workflow.signal(name=ADD_TASKS)
    def add_tasks(self, arrived: Arrived) -> None:
        """Tasks of the plan being written: each runs once its dependencies have succeeded
        (at once if they have), is skipped if one of them did not; those the sender settled
        (``finished``: reused) are finished at once."""
        inp = self.inp
        _grow(inp, arrived)
        _index_reuse(self.reuse_of, arrived.reuse)
        self.arrived.append(asdict(arrived))  # for the next run, should this one carry on
        self.plan_text = None
        for task in arrived.tasks:
            self.task_docs.setdefault(task["id"], task)
        for r in arrived.finished:
            if r["task_id"] not in self.results:
                self._finish(r)
        for task in arrived.tasks:
            self._arrived(task["id"])

    @workflow.signal(name=PLAN_COMPLETE)
    def plan_complete(self, aborted: bool) -> None:
        """No task will follow (``aborted``: the plan was rejected while it was written,
        which stops the run as a failure would under ``on_failure="cancel"``)."""
        self.inp.streaming = False
        self.plan_aborted = aborted
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
    async def run(
        self, given: RunInput | dict[str, Any], *earlier: dict[str, Any]
    ) -> list[dict[str, Any]]:
        inp = self.inp
        # once per run, before any step: a run started before this patch keeps its local
        # activities to the end (its history has them), one started after has none
        self.no_local = workflow.patched(_NO_LOCAL)
        self.task_alone = workflow.patched(_TASK_ALONE)
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
            if not workflow.patched(_CARRIES_RUNS):  # as the run carried on when it ran
                self.done = True  # this run's part: the driver follows the next
                budget = {**inp.budget, "spent": self.spent} if inp.budget else None
                workflow.continue_as_new(
                    replace(
                        inp,
                        finished=self.finished,
                        generation=inp.generation + 1,
                        budget=budget,
                        ledger=self.ledger,
                    )
                )
            if self.stop_cause is None:  # a run stopped ends here: nothing more starts
                self._carry()
        self._finish_unstarted()
        self.done = True
        return self.finished

    def _carry(self) -> NoReturn:
        """Continue as new: the run's first input and the earlier runs' arguments as they
        came, then this run's own: the results it finished, the tasks that reached it, and
        where it leaves the run (``left``: how many times it continued as new, whether its
        plan is still being written or was rejected, what it spent of a solve's budget,
        what its limits counted). Each argument is the same payload in every later run, so
        each result is stored once however often the run continues as new."""
        self.done = True  # this run's part: the driver follows the next
        left: dict[str, Any] = {
            "generation": self.inp.generation + 1,
            "streaming": self.inp.streaming,
            "aborted": self.plan_aborted,
            "spent": self.spent if self.inp.budget else None,
            "ledger": self.ledger,
        }
        own = {"finished": self.finished[self.first :], "arrived": self.arrived, "left": left}
        workflow.continue_as_new(args=[self.given, *self.earlier, own])

    def _woken(self, more: bool) -> bool:
        """Whether the run has something to do: a task ended, or (``more``: a plan being
        written) tasks arrived, the plan ended or the run stops."""
        return bool(self.ended) or (
            more and (bool(self.ready) or not self.inp.streaming or self.stop_cause is not None)
        )

    # -- results ---------------------------------------------------------------------------

    def _finish(self, r: dict[str, Any]) -> None:
        keys = self.inp.limited.get(r["task_id"])
        if keys:  # what the run counted on its limits by then (a solve counts on from it)
            r["ledger"] = {k: list(self.ledger[k]) for k in keys if k in self.ledger}
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
            if self.inp.sub_solve is not None and self._task_json(task_id).get("solve"):
                return await self._sub_solve(task_id)
            if task_id in self.inp.maps:
                return await self._map(task_id)
            return await self._call(task_id)
        except asyncio.CancelledError:
            return _result(task_id, "cancelled", self._cancelled_why())

    def _args(self, task_id: str, call: dict[str, Any]) -> list[Any]:
        """An activity's arguments: the call (with its task, ``task``), then each
        dependency's output, each a payload of its own (so that a large one is stored once,
        whoever reads it); in a run started before ``_TASK_ALONE``, the plan's JSON text
        after the call."""
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
        if inp.tools is not None:  # the run's part of the worker's tools
            call["tools"] = inp.tools
        if inp.trace:  # the run's trace context: the worker's spans of the task join it
            call["trace"] = inp.trace
        answers = {
            k: a for k, a in inp.answers.items() if k == task_id or k.startswith(f"{task_id}[")
        }
        if answers:  # decisions a person took about its calls that waited
            call["answers"] = answers
        if inp.approval:
            call["approval"] = inp.approval
        if task_id in inp.effects:  # its calls in doubt on record, and what became of them
            call["effects"] = inp.effects[task_id]
            call["in_doubt_policy"] = inp.in_doubt_policy
        if task_id in inp.revised:  # what the runs it revises did with its calls
            call["revised"] = inp.revised[task_id]
        ref = inp.reuse_refs.get(task_id)
        own = self.reuse_of.get(task_id)
        if (ref is not None or own) and self._reuse_by_ref():
            if ref is not None:  # in the payload store: its workers read it once each
                call["reuse_ref"] = ref
            elif own:  # its earlier output (or its elements'), and those of its dependencies
                call["reuse"] = {**own, **{d: inp.reuse[d] for d in deps if d in inp.reuse}}
        elif own:  # (a run started before _REUSE_REFS, as it ran)
            own = {
                k: v for k, v in inp.reuse.items() if k == task_id or k.startswith(f"{task_id}@")
            }
            call["reuse"] = {**own, **{d: inp.reuse[d] for d in deps if d in inp.reuse}}
        outputs = [self.outputs[d] for d in deps]
        if self.task_alone:
            call["task"] = self.task_docs[task_id]
            return [call, *outputs]
        if self.plan_text is None:
            self.plan_text = _plan_text(inp.plan)
        return [call, self.plan_text, *outputs]

    def _reuse_by_ref(self) -> bool:
        """Whether the run finds its tasks' reuse by task, and a map's by reference (patch
        ``_REUSE_REFS``), asked once, when the first task with reuse starts."""
        if self.reuse_by_ref is None:
            self.reuse_by_ref = workflow.patched(_REUSE_REFS)
        return self.reuse_by_ref

    async def _call(
        self,
        task_id: str,
        window: tuple[int, int] | None = None,
        *,
        size: int = 1,
        **extra: Any,
    ) -> dict[str, Any]:
        """Run ``task_id`` (or the elements ``window`` of a map, ``size`` of them) in one
        activity; run it again on another worker when its worker is lost, if its tool has no
        side effects (or has a reconciler: then in doubt, see the module docstring). Under a
        solve's budget, each attempt holds what it may spend (:meth:`_grant`), and the result
        says what the task spent (``budget``)."""
        inp = self.inp
        lost = 0
        done_elements: list[dict[str, Any]] = []
        bound = inp.bounds.get(task_id)
        spent: dict[str, Any] | None = None
        lost_calls: list[dict[str, Any]] = []  # an agent's, under way when a worker was lost
        if task_id in inp.in_doubt:  # its call may have happened in the run's ended workflow
            extra = {**extra, "in_doubt": inp.in_doubt_policy or True}
        while True:
            call = {
                "window": list(window) if window else None,
                "done": done_elements,
                "size": size,
                **extra,
            }
            grant = await self._grant(task_id, size) if inp.budget is not None else None
            if grant is not None:
                call["grant"] = grant
            try:
                async with self._counted(task_id, call):
                    r = await self._activity(task_id, call, bound)
                used = r.pop("budget", None)
                if grant is not None:
                    r["budget"] = _added(spent or {}, self._settle(grant, used))
                if lost_calls:
                    r["model_calls"] = [*lost_calls, *(r.get("model_calls") or ())]
                return r
            except ActivityError as exc:
                cause = exc.cause
                left = _left_behind(
                    cause.last_heartbeat_details if isinstance(cause, TimeoutError) else ()
                )
                lost_calls.extend(left.get("model_calls") or ())
                if grant is not None:  # what it spent before it ended without a result
                    spent = _added(spent or {}, self._settle(grant, left.get("budget")))
                if isinstance(cause, CancelledError):  # this workflow cancelled it
                    raise asyncio.CancelledError from None
                if isinstance(cause, TimeoutError):
                    what = _timeout_what(cause.type, inp.heartbeat_s)
                    # (a workflow started before lost calls were asked about replays as it ran:
                    # then one without a reconciler failed, and one it could not tell denied)
                    asks = (
                        task_id in inp.side_effects
                        and lost < inp.lost_worker_retries
                        and workflow.patched(_LOST_ASKS)
                    )
                    if asks:  # run again in doubt: its reconciler decides, else a person
                        extra = {
                            **extra,
                            "in_doubt": extra.get("in_doubt") or inp.in_doubt_policy or "ask",
                            "lost": _lost_why(cause, left, inp.heartbeat_s),
                        }
                    elif task_id in inp.side_effects and not (
                        task_id in inp.reconciled and lost < inp.lost_worker_retries
                    ):
                        return _with_spent(
                            _result(
                                task_id,
                                "failed",
                                f"{what}; its tool has side effects, so it is not run again "
                                "(they may or may not have happened)",
                                error_type="WorkerLostError",
                                attempts=1,
                            ),
                            spent,
                            lost_calls,
                        )
                    lost += 1
                    if lost > inp.lost_worker_retries:
                        return _with_spent(
                            _result(
                                task_id,
                                "failed",
                                f"{what}, {lost} times: not run again",
                                error_type="WorkerLostError",
                                attempts=lost,
                            ),
                            spent,
                            lost_calls,
                        )
                    done_elements = _reported(cause, done_elements)
                    if task_id in inp.side_effects:  # its calls cut off are in doubt there
                        extra = {**extra, "in_doubt": extra.get("in_doubt") or True}
                    continue
                return _with_spent(_failed(task_id, exc), spent, lost_calls)
            except BaseException:  # cancelled: what it held counts as made (it may have been)
                if grant is not None:
                    self._settle(grant, None)
                raise

    # -- a solve's budget ------------------------------------------------------------------

    async def _grant(self, task_id: str, size: int) -> dict[str, Any] | None:
        """What one activity of ``task_id`` (``size`` elements of a map) may spend of the
        solve's budget, held until it ends (:meth:`_settle`); ``None``: nothing to hold.

        A tool task holds a tool call for each element and attempt, once the budget has that
        many left that no other activity holds, or all that is left once no other activity
        holds any: so a call is refused on the worker only when the budget is used up, as in
        a local solve. An agent task (its model calls and tool calls unknown in advance)
        holds all the budget has left, alone, and spends it on its worker as a local agent
        spends the solve's ledger."""
        budget = self.inp.budget
        assert budget is not None
        limits = budget.get("limits") or {}
        tool_limit = limits.get("tool_calls")
        task = self.task_docs.get(task_id, {})
        if "instruction" in task:
            await workflow.wait_condition(lambda: not self.leased and not self.held_tool_calls)
            self.leased = True
            left = None if tool_limit is None else max(0, tool_limit - self._tool_calls())
            return {
                "lease": True,
                "limits": limits,
                "price": budget.get("price"),
                "spent": dict(self.spent),
                "tool_calls": left,
                "held": left or 0,
            }
        if tool_limit is None:
            return None
        need = size * max(1, int(self.inp.attempts.get(task_id, 1)))
        await workflow.wait_condition(
            lambda: not self.leased and (self._tool_left() >= need or not self.held_tool_calls)
        )
        allowed = max(0, min(need, self._tool_left()))
        self.held_tool_calls += allowed
        return {"tool_calls": allowed, "limit": tool_limit, "held": allowed}

    def _tool_calls(self) -> int:
        return int(self.spent.get("tool_calls", 0))

    def _tool_left(self) -> int:
        limit = int((self.inp.budget or {}).get("limits", {}).get("tool_calls") or 0)
        return limit - self._tool_calls() - self.held_tool_calls

    def _settle(self, grant: dict[str, Any], used: dict[str, Any] | None) -> dict[str, Any]:
        """An activity that held ``grant`` ended, having spent ``used`` (``None``: not known,
        and every tool call it held counts as made); what it spent, now counted."""
        self.held_tool_calls -= int(grant.get("held") or 0)
        if grant.get("lease"):
            self.leased = False
        if used is None:
            used = {"tool_calls": int(grant.get("held") or 0)}
        self.spent = _added(self.spent, {k: v for k, v in used.items() if k != "low"})
        return used

    async def _activity(
        self, task_id: str, call: dict[str, Any], bound: float | None
    ) -> dict[str, Any]:
        """One activity of ``task_id`` (in a run started before ``_NO_LOCAL``, a local one for
        a task that never blocks)."""
        inp = self.inp
        pools = self._pools(task_id, call)
        args = self._args(task_id, call)
        if inp.conversation is not None and task_id in inp.conversing:
            # last, a payload of its own: the same for every task, stored once
            args[0]["conversation"] = True
            args.append(inp.conversation)
        async with self._slots(pools):
            if not self.no_local and task_id in inp.local and call.get("window") is None:
                r: dict[str, Any] = await workflow.execute_local_activity(
                    RUN_TASK,
                    args=args,
                    start_to_close_timeout=(timedelta(seconds=bound) if bound else _LOCAL_BOUND),
                    retry_policy=_ONCE,
                )
            else:
                r = await workflow.execute_activity(
                    RUN_TASK,
                    args=args,
                    task_queue=inp.task_queue,
                    start_to_close_timeout=(timedelta(seconds=bound) if bound else _UNBOUNDED),
                    heartbeat_timeout=timedelta(seconds=inp.heartbeat_s),
                    retry_policy=_ONCE,
                )
        counted = r.pop("ledger", None)
        if counted is not None:  # what it counted against the run's limits (see _counted)
            call["counted"] = counted
        return r

    def _pools(self, task_id: str, call: dict[str, Any]) -> list[tuple[Any, Any, int]]:
        """The slots an activity of ``task_id`` holds while it runs, as ``(lock, pool,
        count)``: one of the run's, or for a map's elements (``call["size"]`` of them, taken
        out of ``call``) one per element it runs at once, as many as the task's own
        ``max_concurrency`` (else the default), the run's ``max_concurrency`` and their
        number allow: its worker runs that many at once (``call["element_concurrency"]``),
        and its chunks together no more than the task's bound. So a map runs as many
        elements at once as in a local run, however it is cut into chunks."""
        size = int(call.pop("size", 1))
        if task_id not in self.inp.maps:
            return [(None, self.slots, 1)]
        m, own = self.inp.max_concurrency, self._own_bound(task_id)
        if (m is None and own is None) or not workflow.patched(_ELEMENT_SLOTS):
            return [(None, self.slots, 1)]
        width = max(1, min(size, own or DEFAULT_ELEMENT_CONCURRENCY, m or size))
        call["element_concurrency"] = width
        pools: list[tuple[Any, Any, int]] = []
        if own is not None and call.get("window") is not None:  # its chunks share its bound
            lock, pool = self.element_slots.setdefault(
                task_id, (asyncio.Lock(), asyncio.Semaphore(own))
            )
            pools.append((lock, pool, width))
        pools.append((self.taking, self.slots, width if m is not None else 1))
        return pools

    @contextlib.asynccontextmanager
    async def _slots(self, pools: list[tuple[Any, Any, int]]) -> AsyncIterator[None]:
        """Hold ``pools`` (see :meth:`_pools`) while the block runs: the task's own slots
        first, then the run's, each pool's all at once (under its lock: no two activities
        hold part of a pool each while waiting for the rest)."""
        held: list[asyncio.Semaphore] = []
        try:
            for lock, pool, count in pools:
                if lock is None:
                    await pool.acquire()
                    held.append(pool)
                    continue
                async with lock:
                    for _ in range(count):
                        await pool.acquire()
                        held.append(pool)
            yield
        finally:
            for pool in held:
                pool.release()

    def _own_bound(self, task_id: str) -> int | None:
        """A map task's own ``max_concurrency``, if it has one."""
        bound = self._task_json(task_id).get("max_concurrency")
        return bound if isinstance(bound, int) and bound > 0 else None

    @contextlib.asynccontextmanager
    async def _counted(self, task_id: str, call: dict[str, Any]) -> AsyncIterator[None]:
        """Around an activity of ``task_id`` whose calls count against limits of the run
        (``RunInput.limited``): one activity at a time per limit (its locks taken in the
        same order everywhere), told the calls counted so far on each (``call["ledger"]``),
        where its worker's runner checks and counts them as a run in one process does; what
        it reports counted (``ledger`` in its result) stands for the next. An activity that
        ends without a report (its worker lost) counts as one call on each: the limits fail
        closed. Tasks without limits pass straight through."""
        keys = sorted(set(self.inp.limited.get(task_id) or ()))
        if not keys:
            yield
            return
        locks = [self.counting.setdefault(k, asyncio.Lock()) for k in keys]
        taken: list[asyncio.Lock] = []
        try:
            for lock in locks:
                await lock.acquire()
                taken.append(lock)
            call["ledger"] = {k: list(self.ledger.get(k) or (0, None)) for k in keys}
            if self.inp.ledger_scope != "run":
                call["ledger_scope"] = self.inp.ledger_scope
            try:
                yield
            except ActivityError as exc:
                if isinstance(exc.cause, (TimeoutError, CancelledError)):
                    self._unknown(keys)  # its worker was lost, or it was stopped, under it
                raise  # else its worker could not run it: no call was made
            except asyncio.CancelledError:
                self._unknown(keys)
                raise
            counted = call.pop("counted", None)
            for k in keys:
                if isinstance(counted, dict) and isinstance(counted.get(k), list):
                    self.ledger[k] = counted[k]
        finally:
            for lock in reversed(taken):
                lock.release()

    def _unknown(self, keys: list[str]) -> None:
        """An activity that counted on ``keys`` ended without saying what it counted: at
        least one call on each, now (the limits fail closed)."""
        now = workflow.now().timestamp()
        for k in keys:
            calls, _ = self.ledger.get(k) or (0, None)
            self.ledger[k] = [int(calls) + 1, now]

    async def _step(self, name: str, args: list[Any]) -> dict[str, Any]:
        """One of the workflow's own steps on a worker (a map's element count or assembly, a
        sub-solve's goals or result, a budget's carve): an activity on the run's task queue,
        holding one of the run's slots while it is pending (so that the run's activities
        stay under Temporal's limit), run again on another worker when its worker is lost
        (each is quick and has no side effect); a local activity in a run started before
        (``_NO_LOCAL``)."""
        if not self.no_local:
            done: dict[str, Any] = await workflow.execute_local_activity(
                name, args=args, start_to_close_timeout=_LOCAL_BOUND, retry_policy=_ONCE
            )
            return done
        inp = self.inp
        async with self.slots:  # pending as a task's activity is (max_running)
            result: dict[str, Any] = await workflow.execute_activity(
                name,
                args=args,
                task_queue=inp.task_queue,
                start_to_close_timeout=_STEP_BOUND,
                heartbeat_timeout=timedelta(seconds=inp.heartbeat_s),
                retry_policy=RetryPolicy(
                    maximum_attempts=1 + inp.lost_worker_retries,
                    initial_interval=timedelta(milliseconds=100),
                ),
            )
        return result

    async def _map(self, task_id: str) -> dict[str, Any]:
        """A map task: in one activity when its list is short, else in chunks of
        ``chunk_elements`` elements (an activity each), put together at the end."""
        inp = self.inp
        try:
            counted = await self._step(COUNT_ELEMENTS, self._args(task_id, {}))
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
            return await self._call(task_id, size=n)
        windows = [(i, min(i + size, n)) for i in range(0, n, size)]
        chunks = {
            asyncio.create_task(self._call(task_id, w, size=w[1] - w[0], n=n)): w for w in windows
        }
        cancel_siblings = inp.on_failure == "cancel" and task_id not in inp.allow_partial
        elements: dict[int, dict[str, Any]] = {}
        model_calls: list[dict[str, Any]] = []  # agent elements': they go with the task
        asked: list[dict[str, Any]] = []  # calls in doubt left for a person: the driver's
        spent: dict[str, Any] | None = None  # under a budget: what the chunks spent
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
                    asked.extend(r.pop("in_doubt_calls", None) or ())
                    if "budget" in r:
                        spent = _added(spent or {}, r.pop("budget"))
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
                **({"budget": spent} if spent is not None else {}),
                **({"in_doubt_calls": asked} if asked else {}),
            }
        try:
            whole = await self._step(
                RUN_TASK,
                self._args(
                    task_id,
                    {"window": None, "assemble": True, "done": [elements[i] for i in range(n)]},
                ),
            )
        except ActivityError as exc:
            if isinstance(exc.cause, CancelledError):
                raise asyncio.CancelledError from None
            return _failed(task_id, exc)
        whole["started_at"] = first_start
        whole["model_calls"] = model_calls
        if asked:
            whole["in_doubt_calls"] = asked
        if spent is not None:
            whole["budget"] = spent
        return whole

    # -- a sub-solve task ------------------------------------------------------------------

    def _task_json(self, task_id: str) -> dict[str, Any]:
        return self.task_docs[task_id]

    async def _sub_solve(self, task_id: str) -> dict[str, Any]:
        """A task reached by a child solve per goal (one per element of a map): its goals
        resolved on a worker, their solves run as child workflows, and its result made from
        their answers (on a worker, by the task runner, as a local sub-solve's)."""
        try:
            found = await self._step(SUB_SOLVE_GOALS, self._args(task_id, {}))
            if "result" in found:  # settled without a solve: a condition, a reference
                r: dict[str, Any] = found["result"]
                return r
            goals: list[dict[str, Any]] = found["goals"]
            started = len(self.children)
            outcomes = await asyncio.gather(*(self._child(task_id, g) for g in goals))
            settled = await self._step(
                SUB_SOLVE_SETTLE, self._args(task_id, {"outcomes": list(outcomes)})
            )
        except ActivityError as exc:
            if isinstance(exc.cause, CancelledError):
                raise asyncio.CancelledError from None
            return _failed(task_id, exc)
        # its solves go with its result: what they spent counts for the solve of this run
        settled["sub_solves"] = [c for c in self.children[started:] if c["task_id"] == task_id]
        return settled

    async def _child(self, task_id: str, goal: dict[str, Any]) -> dict[str, Any]:
        """The outcome of the solve of ``goal`` (``element``, ``goal``, ``tools``): its
        ``answer``, or the ``error`` its task fails with (and its ``status``)."""
        ctx = self.inp.sub_solve
        assert ctx is not None
        parent: dict[str, Any] = ctx["input"]
        budget = parent.get("budget")
        outcome: dict[str, Any] = {"element": goal["element"]}
        wait = self.one_at_a_time if budget else contextlib.nullcontext()
        # the limits its calls may count on: it holds them while it runs, and counts on
        # from the run's counts (see _counted); what it counted comes back with its end
        counts: dict[str, Any] = {}
        counting: Any = contextlib.nullcontext()
        if self.inp.limited.get(task_id) and workflow.patched(_SUB_SOLVE_COUNTS):
            counting = self._counted(task_id, counts)
        async with wait, counting:
            outcome["started_at"] = workflow.now().timestamp()
            refused = f"sub-solve of task {task_id!r} did not start"
            if budget:
                spent = dict(ctx.get("spent") or {})
                for c in self.children:  # what the sub-solves before this one spent
                    for k, v in (c.get("spent") or {}).items():
                        spent[k] = spent.get(k, 0) + v
                carved = await self._step(
                    ctx["carve"], [{"budget": budget, "spent": spent, "price": parent.get("price")}]
                )
                if "error" in carved:
                    why = f"{refused}: {carved['error']}"
                    return {**outcome, "error": why, "status": "budget_exhausted"}
                budget = carved["budget"]
            left = self._child_deadline(task_id)
            if left is not None and left <= 0:
                why = f"{refused}: the solve's deadline has passed"
                return {**outcome, "error": why, "status": "timed_out"}
            child_id = workflow.uuid4().hex[:12]
            depth = int(parent.get("depth") or 0) + 1
            tools = goal["tools"] if goal.get("own_tools") else None  # else: all
            mine = {
                "solve_id": child_id,
                "run_id": self.inp.run_id,
                "task_id": task_id,
                "element": goal["element"],
                "goal": goal["goal"],
                "depth": depth,
                "tools": goal.get("tools"),
                "budget": budget,
                "deadline_s": left,
            }
            self.children.append(mine)
            child = {
                **parent,
                "solve_id": child_id,
                "goal": goal["goal"],
                "depth": depth,
                "tools": tools,
                "budget": budget,
                "deadline_s": left,
            }
            if "ledger" in counts:
                child["ledger"] = counts["ledger"]
            try:
                async with self.slots:  # a child is pending as an activity is (max_running)
                    steps: list[dict[str, Any]] = await workflow.execute_child_workflow(
                        ctx["workflow"],
                        child,
                        id=f"{ctx['id_prefix']}{child_id}",
                        task_queue=self.inp.task_queue,
                        result_type=list,
                        parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                    )
            except ChildWorkflowError as exc:
                if isinstance(exc.cause, CancelledError):  # this run cancelled it
                    raise asyncio.CancelledError from None
                if "ledger" in counts:  # what it counted is not known: one call each
                    self._unknown(sorted(counts["ledger"]))
                why = f"sub-solve {child_id} of task {task_id!r} ended without finishing: "
                return {**outcome, "solve_id": child_id, "error": why + str(exc.cause or exc)}
            end = steps[-1]
            if "ledger" in counts:
                counts["counted"] = end.get("ledger")
            mine["spent"] = end.get("spent")  # for the next one's carve
            outcome.update(solve_id=child_id, spent=end.get("spent"), status=end["status"])
            if end["status"] == "answered":
                return {**outcome, "answer": (end.get("decision") or {}).get("answer")}
            why = f"sub-solve {child_id} of task {task_id!r} ended {end['status']}: "
            return {**outcome, "error": why + end["reason"]}

    def _child_deadline(self, task_id: str) -> float | None:
        """A child's time in seconds: the task's ``timeout_s``, never past the run's
        deadline (``None``: neither)."""
        timeout = self._task_json(task_id).get("timeout_s")
        left = None
        if self.inp.deadline_at is not None:
            left = self.inp.deadline_at - workflow.now().timestamp()
        if timeout is None:
            return left
        return float(timeout) if left is None else min(float(timeout), left)


def _added(spent: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """What ``spent`` and ``more`` spent together (``tool_calls``, ``tokens``, ``cost``,
    ``model_calls``); the first ``low`` (why the budget ran low) of the two."""
    total = dict(spent)
    for key, value in more.items():
        if key == "low":
            total["low"] = total.get("low") or value
        elif value:
            total[key] = total.get(key, 0) + value
    return total


def _with_spent(
    r: dict[str, Any], spent: dict[str, Any] | None, lost_calls: list[dict[str, Any]]
) -> dict[str, Any]:
    """``r`` with what its task spent of a solve's budget and its agent's calls lost with
    a worker."""
    if spent is not None:
        r["budget"] = spent
    if lost_calls:
        r["model_calls"] = lost_calls
    return r


def _left_behind(details: Any) -> dict[str, Any]:
    """What a lost activity's last heartbeat said it leaves behind: ``budget``, what it had
    spent of a solve's budget, ``model_calls``, its agent's calls under way, cut off."""
    if details and len(details) > 1 and isinstance(details[1], dict):
        left: dict[str, Any] = details[1]
        return left
    return {}


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


def _lost_why(cause: TimeoutError, left: dict[str, Any], heartbeat_s: float) -> str:
    """Why the calls of an activity whose worker was lost are in doubt, in words: which
    worker it was (its heartbeats named it, ``left["worker"]``) and how it was noticed."""
    worker = left.get("worker")
    where = f"worker {worker}" if isinstance(worker, str) and worker else "a worker"
    if cause.type is TimeoutType.HEARTBEAT:
        how = f"no heartbeat for {heartbeat_s:g} s"
    elif cause.type is TimeoutType.START_TO_CLOSE:
        how = "it did not finish within the task's time bound"
    else:
        how = f"its activity timed out on the server, {cause.type.name if cause.type else '?'}"
    return f"its call started on {where} and the worker was lost ({how})"


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
