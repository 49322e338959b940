"""The solve as one Temporal workflow: rounds of plan → run → join as workflow state.

Each model step is an activity on the task queue (:mod:`._activities`): the planner's
(round 1), the replanner's (later rounds) and the joiner's, each with the model calls it
made as records. Each round's run is a child workflow, the plan run workflow of
:mod:`dagagent.executors.temporal` (whose tool calls are activities of their own). The
decisions between rounds (give up when a revised plan is the same, or a round adds no new
success; the last round must answer) are the local solve's, made here on plain JSON, so
that a worker replaying the workflow makes the same ones. A turn of a session past its size
first has its older turns summarised (the ``compress`` step, before round 1, as a local turn
does: a step ``compressed``, or ``not_compressed``, that the driver records with the turn).

What the driver needs to record the solve is a list of **steps** (a round began, model calls
were made, a plan is ready and its run starts, the run ended, the joiner decided, a round
ended, the solve ended): the query ``steps`` returns them from a position on (never in the
history), and the workflow's result is all of them. Plans, results and model texts travel
as payloads, by reference when large (the executor's payload store), so the history holds
a few events per round, not the conversation.

**Long solves.** Between two rounds, when the history has passed ``history_events`` (or the
server suggests it), the workflow continues as new: the next run of the same workflow id
starts with what the rules between rounds need (the round it begins with, the last round's
plan and results, the joiner's feedback, what was spent, the model calls' numbering, the
deadline as an instant) as its input, and after it one more argument per run before it:
that run's own steps and the outputs its rounds added. Each argument is a payload of its
own (by reference, in the payload store, when large), passed on unchanged by every later
run: the store, which keeps a value once by its content, holds each step once, however many
runs carry it (storage grows with the solve, not with its square). Steps keep their numbers
across runs, so a driver reading them by query from the workflow id (never a run id) goes on
where it was; the last run's result is every step of the solve. A round's run (a child
workflow) is never under way when the workflow continues as new.
**A person's word** waits in the workflow, durably, within the deadline (query
``waiting`` says for what): with ``confirm``, each plan waits for an answer (signal
:data:`PLAN_ANSWER`; a refusal ends the solve ``gave_up``); a round's run that paused (the
approval rules it carries held calls) waits for the decisions (signal :data:`DECISIONS`),
then goes on in place, on a new workflow under the same id.

A lost worker under a model step: the server notices at the heartbeat timeout and gives the
activity to another worker (a model call has no side effect); a finished step is in the
history and never runs again.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import asdict, dataclass, fields, replace
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
)
from temporalio.workflow import ParentClosePolicy

from ...executors.temporal import workflow_id
from ...executors.temporal._workflow import (
    PLAN_COMPLETE,
    WORKFLOW as RUN_WORKFLOW,
    RunInput,
)

__all__ = [
    "ATTEMPT",
    "CARVE",
    "COMPRESS",
    "DECISIONS",
    "JOIN",
    "PLAN",
    "PLAN_ANSWER",
    "REPLAN",
    "SOLVE_WORKFLOW",
    "SOLVE_WORKFLOW_PREFIX",
    "STEPS_BATCH",
    "SolveInput",
    "SolveWorkflow",
]

SOLVE_WORKFLOW = "dagagent.solve"
PLAN = "dagagent.solve.plan"
REPLAN = "dagagent.solve.replan"
JOIN = "dagagent.solve.join"
#: Signals of a person's word: about a round's plan (``{"round", "approved"}``), and the
#: decisions about the calls a paused round's run held (``{"run_id", "answers"}``, the
#: answers by task as ``ApprovalAnswer`` JSON).
PLAN_ANSWER = "plan_answer"
DECISIONS = "decisions"
#: Signal of a streamed round's planner step: its next attempt's run (``{"run_id",
#: "parent_id"}``), which the workflow starts as a child, with no task, for the step to
#: stream into.
ATTEMPT = "attempt"
#: The activity (of a run's workflow) that carves a sub-solve's budget from its parent's.
CARVE = "dagagent.solve.carve"
#: A solve's workflow id is this and the solve's id.
SOLVE_WORKFLOW_PREFIX = "dagagent-solve-"
COMPRESS = "dagagent.solve.compress"
#: A query of the solve's steps returns at most this many.
STEPS_BATCH = 50

_OK = ("succeeded", "reused")
#: The change after which a round's run that paused pauses the solve (before it, the joiner
#: was asked): the workflows started before it replay as they ran.
_PAUSES = "dagagent-solve-pauses"
#: The change after which a run continues as new with its own steps (and the outputs its
#: rounds added) as an argument of their own, after the earlier runs' (``_carry``): the runs
#: before it carried every step and output so far in their input.
_CARRIES_RUNS = "dagagent-solve-carries-runs"
#: The change after which a later round's revised plan streams into its run (as round 1's
#: plan does, see ``SolveInput.stream``): the workflows before it had it written whole.
_REVISIONS_STREAM = "dagagent-solve-revisions-stream"
# A model step is bounded by its client's timeouts and retries; Temporal needs a bound too.
_STEP_BOUND = timedelta(hours=2)


@dataclass
class SolveInput:
    """What the workflow needs to solve a goal (see :func:`~.solve_on_temporal`)."""

    solve_id: str
    goal: str
    #: The model the workers build: ``{"spec", "base_url", "settings"}``, never a key.
    model: dict[str, Any]
    max_rounds: int
    max_attempts: int
    structured: bool
    #: How each round's run runs: ``on_failure``, ``max_elements``, ``retry``,
    #: ``max_concurrency`` and the executor's options (``max_running``, ...).
    run: dict[str, Any]
    task_queue: str
    heartbeat_s: float = 10.0
    lost_worker_retries: int = 3
    #: Plans may hold agent tasks, run on the workers with the solve's model.
    agent_tasks: bool = False
    #: The whole solve's time in seconds (workflow time, from the workflow's start): when it
    #: passes, what runs is cancelled and the solve ends ``timed_out``. ``None``: no limit.
    deadline_s: float | None = None
    #: What the solve may spend (``Budget`` JSON: ``tokens``, ``cost_usd``, ``model_calls``,
    #: ``reserve``); ``None``: nothing is limited. Each model step gets it with what the
    #: steps before it spent, and reserves each call against it on its worker as a local
    #: solve does.
    budget: dict[str, Any] | None = None
    #: The price of the solve's model (``{"input", "output"}``, US dollars per million
    #: tokens) as the driver's price table gives it: the cost of every call, on every worker
    #: and in every replay. ``None``: the model has no price.
    price: dict[str, float] | None = None
    #: The history length at which the workflow continues as new, between two rounds (it
    #: does so too when the server suggests it).
    history_events: int = 10_000
    #: Where the runs of the workflow before this one left the solve, when it continued as
    #: new (see :meth:`SolveWorkflow._carry`; their steps come as arguments of their own);
    #: ``None``: the solve's first run.
    carried: dict[str, Any] | None = None
    #: A sub-solve's: the calls its parent's run counted so far on each limit its calls may
    #: count against (``RunInput.ledger``); it counts on from them, and its end step says
    #: what it counted (``ledger``), which counts for the parent. ``None``: from zero.
    ledger: dict[str, list[Any]] | None = None
    #: The approval rules every round's run carries to the workers (``TemporalExecutor.
    #: approval``): a call they hold makes its task wait, and the solve waits for decisions
    #: (signal :data:`DECISIONS`). ``None``: no rules.
    approval: dict[str, Any] | None = None
    #: Each round's plan waits for a person's answer (signal :data:`PLAN_ANSWER`) before it
    #: runs; a refusal ends the solve ``gave_up``.
    confirm: bool = False
    #: Plans may hold sub-solves (``"solve": true``): each runs as a child solve workflow of
    #: the round's run, ``depth`` below this one (a top solve is at depth 0), down to
    #: ``MAX_SOLVE_DEPTH``.
    sub_solves: bool = False
    depth: int = 0
    #: The tools the solve may plan with (a sub-solve task's ``tools``); ``None``: all.
    tools: list[str] | None = None
    #: A planner of one's own, as data (``_planning.planner_data``): the workers' planner
    #: and replanner are made from it. ``None``: the built-in planner.
    planner: dict[str, Any] | None = None
    #: The tool discovery's ``{"threshold", "limit"}``; ``None``: the default one.
    discovery: dict[str, Any] | None = None
    #: A turn of a session: the turns before it as data (``_planning.conversation_data``),
    #: shown to the planner, the replanner and the joiner; with ``compress``, the older
    #: ones are summarised first (step ``compress``). ``None``: not a turn.
    conversation: dict[str, Any] | None = None
    #: Each round's plan is streamed (without ``confirm``): its run's workflow starts first,
    #: with no task, and the planner's step (a later round's: the replanner's) hands it each
    #: task the moment it is written and valid (signals ``add_tasks``, then
    #: ``plan_complete``), as a local streamed solve starts its tasks while the model
    #: writes; a revised plan's tasks unchanged from the round before are reused as they
    #: arrive.
    stream: bool = False
    #: The W3C trace context of the solve's span on its driver, when the driver traces: its
    #: model steps and each round's run carry it to the workers, whose spans (the planner's,
    #: the joiner's, the tasks', their model calls) join the solve's trace. ``None``: not
    #: traced.
    trace: dict[str, str] | None = None


class _Expired(Exception):
    """The solve's deadline passed; ``what`` was cancelled by it (``""``: nothing ran)."""

    def __init__(self, what: str = "") -> None:
        super().__init__(what)
        self.what = what


def _ok_outputs(results: list[dict[str, Any]]) -> dict[str, Any]:
    return {r["task_id"]: r.get("output") for r in results if r["status"] in _OK}


def _paused(results: list[dict[str, Any]]) -> bool:
    """Whether a run with ``results`` paused: tasks wait for a person's decision and none
    failed or was denied (then the run failed, and what waits cannot be approved any more:
    the joiner decides, as after a local run)."""
    statuses = {r["status"] for r in results}
    return "waiting" in statuses and not statuses & {"failed", "denied"}


def _failure_summary(results: list[dict[str, Any]], limit: int = 3) -> str:
    failed = [r for r in results if r["status"] in ("failed", "denied", "skipped")]
    failed = [r for r in failed if r["status"] != "skipped" or r.get("error_type") is None]
    if not failed:
        counts: dict[str, int] = {}
        for r in results:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        return ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no task ran"
    parts = []
    for r in failed[:limit]:
        detail = " ".join(str(r.get("error") or "no error message").split())
        detail = detail if len(detail) <= 120 else detail[:119] + "…"
        parts.append(f"{r['task_id']} {r['status']}: {detail}")
    more = len(failed) - limit
    return "; ".join(parts) + (f"; {more} more" if more > 0 else "")


def _solve_input(given: SolveInput | dict[str, Any]) -> SolveInput:
    """The workflow's input as :class:`SolveInput`. Its arguments after the first (the
    earlier runs', see :meth:`SolveWorkflow._carry`) make Temporal hand every argument over
    as plain JSON, so the input comes as a dict (its fields, as :func:`dataclasses.asdict`
    gives them)."""
    if isinstance(given, SolveInput):
        return given
    names = {f.name for f in fields(SolveInput)}
    return SolveInput(**{k: v for k, v in given.items() if k in names})


@workflow.defn(name=SOLVE_WORKFLOW)
class SolveWorkflow:
    @workflow.init
    def __init__(self, given: SolveInput | dict[str, Any], *earlier: dict[str, Any]) -> None:
        # here, not in run: a query that reaches a run continued as new finds its steps
        self.inp = inp = _solve_input(given)
        carried = inp.carried or {}
        #: What each run before this one carried on: its own steps and the outputs its
        #: rounds added (``{"steps", "outputs"}``), passed on as they came.
        self.earlier: list[dict[str, Any]] = list(earlier)
        if "steps" in carried:  # continued as new before _CARRIES_RUNS: all in the input
            self.earlier.append({"steps": carried["steps"], "outputs": carried["outputs"]})
        self.steps: list[dict[str, Any]] = [s for run in self.earlier for s in run["steps"]]
        self.first = len(self.steps)  # this run's first step
        #: The outputs of the tasks that succeeded in the rounds so far (by task id).
        self.outputs: dict[str, Any] = {}
        for run in self.earlier:
            self.outputs.update(run["outputs"])
        self.carried_outputs = dict(self.outputs)  # those of the runs before this one
        #: a turn's (see SolveInput), with its summary once compressed (a run continued as
        #: new starts with the compressed one)
        self.conversation: dict[str, Any] | None = inp.conversation
        self.seq: int = carried.get("seq", 1)  # the next model call's place in the solve
        #: seconds since the epoch, workflow time (from the solve's first run)
        self.deadline_at: float | None = carried.get("deadline_at")
        self.round: tuple[int, str | None] | None = None  # the round under way, its run
        self.kept: int = carried.get("kept", 0)  # tasks with an output, over the runs ended
        self.stopped: list[str] = []  # the tasks the deadline cancelled while they ran
        #: What the model steps spent (as their workers' ledgers counted it).
        self.spent: dict[str, Any] = carried.get("spent") or {
            "tokens": 0,
            "cost": 0.0,
            "model_calls": 0,
        }
        #: The calls the solve's runs counted on each limit (``RunInput.ledger``): each
        #: round's run counts on from the rounds before, as a local solve's ledger does.
        self.ledger: dict[str, list[Any]] = dict(carried.get("ledger") or inp.ledger or {})
        #: What the solve waits for from a person (query ``waiting``): ``{"kind": "plan",
        #: "round", "run_id"}`` or ``{"kind": "decisions", "round", "run_id", "tasks"}``.
        self.waiting: dict[str, Any] | None = None
        self.plan_answers: dict[int, bool] = {}  # round -> whether its plan was approved
        self.decisions: dict[str, dict[str, Any]] = {}  # run id -> answers by task
        #: run id -> the records of its calls in doubt a person decided about (a lost
        #: worker's), by task, as ``RunInput.effects`` holds them
        self.decided_calls: dict[str, dict[str, list[dict[str, Any]]]] = {}
        #: the runs of a streamed round's attempts, by run id (see :data:`ATTEMPT`)
        self.attempt_runs: dict[str, Any] = {}

    @workflow.query(name="waiting")
    def waiting_for(self) -> dict[str, Any] | None:
        """What the solve waits for from a person, if anything."""
        return self.waiting

    @workflow.signal(name=PLAN_ANSWER)
    def plan_answer(self, answer: dict[str, Any]) -> None:
        """A person's answer about round ``answer["round"]``'s plan; the first one counts."""
        self.plan_answers.setdefault(int(answer["round"]), bool(answer["approved"]))

    @workflow.signal(name=DECISIONS)
    def decisions_given(self, given: dict[str, Any]) -> None:
        """The decisions about the held calls of run ``given["run_id"]`` (``effects``: the
        records of its calls in doubt, with what a person found); the first ones count."""
        run_id = str(given["run_id"])
        if run_id not in self.decisions:
            self.decided_calls[run_id] = dict(given.get("effects") or {})
        self.decisions.setdefault(run_id, dict(given.get("answers") or {}))

    @workflow.query(name="attempts")
    def attempts(self) -> list[str]:
        """The runs of the streamed round's attempts so far, in the order they started."""
        return list(self.attempt_runs)

    @workflow.signal(name=ATTEMPT)
    async def attempt(self, wanted: dict[str, Any]) -> None:
        """The planner's step of the round under way wants its next attempt's run."""
        run_id = str(wanted["run_id"])
        if self.round is None or run_id in self.attempt_runs:
            return
        n = self.round[0]
        given = wanted.get("given")
        self.attempt_runs[run_id] = await self._start_streamed(run_id, n, given)
        self._step("streaming", round=n, run_id=run_id, parent_id=wanted.get("parent_id"))

    async def _wait_for(self, what: dict[str, Any], until: Any, doing: str) -> None:
        """Wait for a person (``what`` says for what, ``until`` tells when it came), within
        the deadline (``doing``: what the deadline cut short)."""
        self.waiting = what
        try:
            left = self._left()
            if left is None:
                await workflow.wait_condition(until)
            else:
                try:
                    await workflow.wait_condition(until, timeout=left)
                except asyncio.TimeoutError:
                    raise _Expired(doing) from None
        finally:
            self.waiting = None

    @workflow.query(name="steps")
    def steps_since(self, since: int) -> dict[str, Any]:
        """The steps from number ``since`` on (at most :data:`STEPS_BATCH`) and how many
        there are."""
        return {"steps": self.steps[since : since + STEPS_BATCH], "total": len(self.steps)}

    def _step(self, kind: str, **values: Any) -> None:
        self.steps.append({"step": kind, **values})

    def _close(self, n: int, run_id: str | None, outcome: str, reason: str = "") -> None:
        self._step("closed", round=n, run_id=run_id, outcome=outcome, reason=reason)

    def _end(self, status: str, reason: str, **more: Any) -> list[dict[str, Any]]:
        if self.ledger:  # what its limits counted (a sub-solve's count for its parent)
            more["ledger"] = dict(self.ledger)
        self._step("end", status=status, reason=reason, spent=dict(self.spent), **more)
        return self.steps

    @workflow.run
    async def run(
        self, given: SolveInput | dict[str, Any], *earlier: dict[str, Any]
    ) -> list[dict[str, Any]]:
        inp = self.inp
        if inp.deadline_s is not None and inp.carried is None:  # from the solve's start
            self.deadline_at = workflow.now().timestamp() + inp.deadline_s
        try:
            return await self._rounds(inp)
        except _Expired as exc:
            return self._timed_out(exc.what)

    def _timed_out(self, what: str) -> list[dict[str, Any]]:
        """The deadline passed: the round under way ends ``timed_out`` with what it got, and
        the reason says what was cancelled (as a local solve's)."""
        parts = [what] if what else []
        n, run_id = self.round if self.round is not None else (None, None)
        if self.stopped:
            shown = ", ".join(self.stopped[:8]) + (", ..." if len(self.stopped) > 8 else "")
            parts.append(f"task{'s' if len(self.stopped) != 1 else ''} {shown} of run {run_id}")
        cancelled = "; cancelled: " + "; ".join(parts) if parts else ""
        where = f" in round {n}" if n is not None else ""
        reason = (
            f"the deadline passed{where} ({self.inp.deadline_s:.1f} s into the solve)"
            f"{cancelled}; kept what finished ({self.kept} task{'s' if self.kept != 1 else ''} "
            "with an output)"
        )
        if n is not None:
            self._close(n, run_id, "timed_out", reason)
        return self._end("timed_out", reason)

    def _left(self) -> float | None:
        """The seconds the deadline leaves (``None``: no deadline); :class:`_Expired` once
        it has passed."""
        if self.deadline_at is None:
            return None
        left = self.deadline_at - workflow.now().timestamp()
        if left <= 0:
            raise _Expired()
        return left

    async def _compress(self) -> None:
        """A turn whose conversation is past its size: the older turns summarised by one
        model step (as a local turn does before it plans), a step the driver records with
        the turn; without a summary, the turn goes on with the conversation whole."""
        conversation = self.conversation
        assert conversation is not None
        done = await self._model_step(COMPRESS, None, {"round": None, "run_id": None})
        if "error" in done:
            self._step("not_compressed", error=done["error"])
            return
        summary, upto = done["summary"], done["upto"]
        self.conversation = {**conversation, "summary": summary, "summarized": upto}
        self.conversation["compress"] = False
        self._step("compressed", summary=summary, upto=upto)

    async def _rounds(self, inp: SolveInput) -> list[dict[str, Any]]:
        carried = inp.carried
        if carried is None:
            self._step(
                "start",
                solve_id=inp.solve_id,
                goal=inp.goal,
                max_rounds=inp.max_rounds,
                sub_solves=inp.sub_solves,
            )
            if self.conversation is not None and self.conversation.get("compress"):
                await self._compress()
        outputs = self.outputs
        previous: dict[str, Any] | None = carried["previous"] if carried else None
        feedback: str | None = carried["feedback"] if carried else None
        first: int = carried["round"] if carried else 1
        for n in range(first, inp.max_rounds + 1):
            if n > first and self._long():  # between two rounds: nothing runs
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._carry(n, outputs, previous, feedback)
            run_id = workflow.uuid4().hex[:12]
            parent_id = previous["run_id"] if previous is not None else None
            self._step("round", round=n, run_id=run_id, parent_id=parent_id, feedback=feedback)
            self.round = (n, None)
            ask: dict[str, Any] = {"round": n, "run_id": run_id}
            streamed: Any = None  # the round's run, started before its plan is written
            if previous is not None:
                ask.update(previous=previous, feedback=feedback)
            # (a later round's revised plan was written whole before _REVISIONS_STREAM: the
            # workflows started before it replay as they ran)
            if self._streams() and (previous is None or workflow.patched(_REVISIONS_STREAM)):
                streamed = await self._start_streamed(run_id, n)
                self.attempt_runs = {run_id: streamed}
                self.round = (n, run_id)
                # started: the driver follows the run as its plan is written
                self._step("streaming", round=n, run_id=run_id, parent_id=parent_id)
                ask["stream_to"] = workflow_id(run_id)
                ask["solve_workflow"] = workflow.info().workflow_id
            planned = await self._model_step(PLAN if previous is None else REPLAN, n, ask)
            if streamed is not None:  # the attempts' runs; the last one is the round's
                runs = list(self.attempt_runs)  # in the order they started
                for earlier in runs[:-1]:  # stopped when their plans were rejected
                    await self._ended_quietly(self.attempt_runs[earlier])
                if "error" in planned:  # no task will follow: what started runs to its end
                    last = self.attempt_runs[runs[-1]]
                    with contextlib.suppress(Exception):  # (ended already, as a rule)
                        await last.signal(PLAN_COMPLETE, True)
                    await self._ended_quietly(last)
                else:
                    if len(runs) > 1:
                        parent_id, run_id = runs[-2], runs[-1]
                    streamed = self.attempt_runs[run_id]
            if planned.get("kind") == "budget":  # answer from the round before, if any
                return await self._out_of_budget(n, None, previous, planned["error"])
            if "error" in planned:
                what = "no valid plan" if n == 1 else "no valid revised plan"
                kind = planned.get("kind")
                reason = (
                    f"round {n}: {what}: {planned['error']}"
                    if kind == "planning"
                    else f"round {n}: the model could not be used: {planned['error']}"
                    if kind == "model"
                    else f"round {n}: no worker could plan: {planned['error']}"
                )
                self._close(n, None, "failed", reason)
                return self._end("failed", reason, error=planned)
            if planned.get("unchanged") and streamed is None:
                reason = (
                    f"round {n}: the revised plan is the same as round {n - 1}'s; running it "
                    "again would change nothing"
                )
                self._step("planned", round=n, run_id=None, plan=planned["plan"])
                self._close(n, None, "gave_up", reason)
                return self._end("gave_up", reason)
            plan = planned["plan"]
            if streamed is None:
                self._left()  # a run never starts after the deadline
            if inp.confirm and streamed is None:  # a person approves the plan first
                self._step("confirm", round=n, run_id=run_id, plan=plan)
                await self._wait_for(
                    {"kind": "plan", "round": n, "run_id": run_id},
                    lambda n=n: n in self.plan_answers,
                    f"the wait for a person's answer about round {n}'s plan",
                )
                if not self.plan_answers[n]:
                    reason = f"round {n}: the plan was not approved; nothing of it ran"
                    self._step("planned", round=n, run_id=None, plan=plan)
                    self._close(n, None, "gave_up", reason)
                    return self._end("gave_up", reason)
            self._step(
                "planned",
                round=n,
                run_id=run_id,
                plan=plan,
                parent_id=parent_id,
                **({"streamed": True} if streamed is not None else {}),
            )
            self.round = (n, run_id)
            ran = await self._run_round(
                n, run_id, self._dressed(planned["run_input"]), started=streamed
            )
            if isinstance(ran, str):
                self._step("ran", round=n, run_id=run_id)
                self._close(n, run_id, "failed", ran)
                return self._end("failed", ran)
            results = ran
            self._sub_solves_spent(results)
            low = self._run_spent(results)
            self._step("ran", round=n, run_id=run_id)
            self.kept += sum(1 for r in results if r["status"] in _OK)
            try:
                self._left()
            except _Expired:
                self.stopped = [
                    r["task_id"]
                    for r in results
                    if r["status"] == "cancelled"
                    and str(r.get("error") or "").startswith("cancelled while running")
                ]
                raise
            if planned.get("unchanged"):  # a streamed revision: it ran as it came, as locally
                reason = (
                    f"round {n}: the revised plan is the same as round {n - 1}'s; running it "
                    "again would change nothing"
                )
                self._close(n, run_id, "gave_up", reason)
                return self._end("gave_up", reason)
            if low is not None:  # the budget ran low during the round: the last answer
                here = {"round": n, "run_id": run_id, "plan": plan, "results": results}
                return await self._out_of_budget(n, run_id, here, low)
            ok = _ok_outputs(results)
            fresh = [
                r["task_id"]
                for r in results
                if r["status"] == "succeeded"
                and not (r["task_id"] in outputs and outputs[r["task_id"]] == r.get("output"))
            ]
            if previous is not None and not fresh:
                reason = f"round {n} added no new success ({_failure_summary(results)})"
                self._close(n, run_id, "gave_up", reason)
                return self._end("gave_up", reason)
            outputs.update(ok)
            last = n == inp.max_rounds
            joined = await self._model_step(
                JOIN,
                n,
                {
                    "round": n,
                    "run_id": run_id,
                    "plan": plan,
                    "results": results,
                    "must_finish": last,
                },
            )
            if joined.get("kind") == "budget":  # the last answer, from this round's results
                here = {"round": n, "run_id": run_id, "plan": plan, "results": results}
                return await self._out_of_budget(n, run_id, here, joined["error"])
            if "error" in joined:
                kind = joined.get("kind")
                reason = (
                    f"round {n}: {joined['error']}"
                    if kind == "joining"
                    else f"round {n}: the joiner's model could not be used: {joined['error']}"
                    if kind == "model"
                    else f"round {n}: no worker could join: {joined['error']}"
                )
                self._close(n, run_id, "failed", reason)
                return self._end("failed", reason, error=joined)
            decision = joined["decision"]
            self._step("joined", round=n, run_id=run_id, decision=decision)
            if decision["action"] == "finish":
                self._close(n, run_id, "answered")
                return self._end("answered", f"answered in round {n}", decision=decision)
            self._close(n, run_id, "replan")
            previous = {"round": n, "run_id": run_id, "plan": plan, "results": results}
            feedback = decision.get("feedback") or ""
        raise ApplicationError("the last round always finishes", non_retryable=True)

    def _long(self) -> bool:
        """Whether the history is long enough to continue as new."""
        info = workflow.info()
        return (
            info.get_current_history_length() >= self.inp.history_events
            or info.is_continue_as_new_suggested()
        )

    def _carry(
        self,
        n: int,
        outputs: dict[str, Any],
        previous: dict[str, Any] | None,
        feedback: str | None,
    ) -> NoReturn:
        """Continue as new, to begin with round ``n``, carrying what the rules between
        rounds need, then the earlier runs' arguments as they came and this run's own: its
        steps (their numbers stay what the driver knows) and the outputs its rounds added.
        Each run's argument is the same payload in every later run, stored once."""
        carried: dict[str, Any] = {
            "round": n,
            "previous": previous,
            "feedback": feedback,
            "seq": self.seq,
            "deadline_at": self.deadline_at,
            "kept": self.kept,
            "spent": self.spent,
            "ledger": self.ledger,
        }
        if not workflow.patched(_CARRIES_RUNS):  # as the run carried on when it ran
            carried.update(outputs=outputs, steps=self.steps)
            workflow.continue_as_new(
                replace(self.inp, carried=carried, conversation=self.conversation)
            )
        before = self.carried_outputs
        own = {
            "steps": self.steps[self.first :],
            "outputs": {k: v for k, v in outputs.items() if k not in before or before[k] != v},
        }
        inp = replace(self.inp, carried=carried, conversation=self.conversation)
        workflow.continue_as_new(args=[inp, *self.earlier, own])

    def _dressed(self, doc: dict[str, Any]) -> RunInput:
        """The input of a round's run from its planner's (``doc``), with what the solve gives
        every run: the deadline, the approval rules, what its limits counted so far, the
        budget, the turn's conversation, the sub-solves."""
        inp = self.inp
        run_input = replace(  # the run keeps the deadline itself: it ends with what
            RunInput(**doc),  # finished by then
            deadline_at=self.deadline_at,
            approval=inp.approval,
            ledger=dict(self.ledger),  # the solve's limits count across its rounds
            ledger_scope="solve",
            # a call a lost worker left in doubt that nothing decides: the solve's policy
            # (``ask``, unless given: its task waits, the solve pauses)
            in_doubt_policy=inp.run.get("in_doubt"),
            trace=inp.trace,  # its tasks' spans join the solve's trace
            **self._run_budget(),
        )
        if run_input.conversing:  # its tasks that read earlier turns (agents, say)
            run_input.conversation = self.conversation
        if inp.sub_solves:  # its sub-solve tasks: child solves of the run's workflow
            run_input.sub_solve = {
                # a child starts afresh (none of this run's carried state is its own)
                # and unattended, outside the conversation, as a local sub-solve
                "input": {
                    **asdict(inp),
                    "carried": None,
                    "confirm": False,
                    "conversation": None,
                    "ledger": None,  # the run gives each child the counts when it starts
                },
                "workflow": SOLVE_WORKFLOW,
                "id_prefix": SOLVE_WORKFLOW_PREFIX,
                "carve": CARVE,
                "spent": dict(self.spent),
            }
        return run_input

    def _streams(self) -> bool:
        """Whether each round's plan is streamed into its run (see ``SolveInput.stream``): not
        when a person approves each plan first, in a turn of a session, with sub-solves,
        nor when agent tasks would spend a model budget while the planner's call, in
        flight, holds its share of it on another worker (their runs would not see it)."""
        inp = self.inp
        budget = inp.budget or {}
        shared = inp.agent_tasks and any(
            budget.get(k) is not None for k in ("tokens", "cost_usd", "model_calls")
        )
        return (
            inp.stream
            and not inp.confirm
            and self.conversation is None
            and not inp.sub_solves
            and not shared
        )

    async def _start_streamed(
        self, run_id: str, n: int, given: dict[str, Any] | None = None
    ) -> Any:
        """An attempt's run of round ``n``, started with no task, or with the tasks ``given``
        (``Arrived`` JSON: an earlier attempt's that ran): the planner's (or replanner's)
        step streams the others to it."""
        inp, run = self.inp, self.inp.run
        max_running = run["max_running"]
        if run.get("max_concurrency") is not None:
            max_running = min(max_running, run["max_concurrency"])
        doc: dict[str, Any] = {
            "run_id": run_id,
            "plan": {"goal": inp.goal, "tasks": []},
            "order": [],
            "dependencies": {},
            "maps": [],
            "local": [],
            "side_effects": [],
            "bounds": {},
            "allow_partial": [],
            "on_failure": run["on_failure"],
            "max_elements": run["max_elements"],
            "retry": run["retry"],
            "task_queue": inp.task_queue,
            "max_running": max_running,
            "chunk_elements": run["chunk_elements"],
            "heartbeat_s": run["heartbeat_s"],
            "lost_worker_retries": run["lost_worker_retries"],
            "history_events": run["history_events"],
            "streaming": True,
        }
        if given:
            doc["plan"]["tasks"] = list(given["tasks"])
            doc["order"] = [t["id"] for t in given["tasks"]]
            doc.update((k, v) for k, v in given.items() if k != "tasks")
        if inp.agent_tasks:
            doc["model"] = {**inp.model, "solve_id": inp.solve_id, "round": n}
            if inp.discovery is not None:
                doc["model"]["discovery"] = inp.discovery
        self._left()  # a run never starts after the deadline
        return await workflow.start_child_workflow(
            RUN_WORKFLOW,
            self._dressed(doc),
            id=workflow_id(run_id),
            task_queue=inp.task_queue,
            result_type=list,
            parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
        )

    async def _ended_quietly(self, child: Any) -> None:
        """Wait for a streamed run whose plan was rejected to end (its results are on the
        run's own record)."""
        with contextlib.suppress(ChildWorkflowError):
            await child

    async def _run_round(
        self, n: int, run_id: str, run_input: RunInput, started: Any = None
    ) -> list[dict[str, Any]] | str:
        """Round ``n``'s run as a child workflow: its results, or why it ended without them.
        A run that paused (calls the approval rules held wait for a person) pauses the solve:
        it waits for the decisions (signal :data:`DECISIONS`), then the run goes on in
        place, on a new workflow of the same id, with what succeeded kept and the decisions
        handed to the calls, as ``dagagent resume`` continues a run. ``started``: the run's
        workflow, started before its plan was written (``run_input``: as if with the whole
        plan)."""
        try:
            results: list[dict[str, Any]] = (
                await started
                if started is not None
                else await workflow.execute_child_workflow(
                    RUN_WORKFLOW,
                    run_input,
                    id=workflow_id(run_id),
                    task_queue=self.inp.task_queue,
                    result_type=list,
                    parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                )
            )
            self._agent_calls(n, results)
            self._counted(results)
            # (a solve started before solves paused went on to the joiner: its replay still
            # does, see _PAUSES)
            while _paused(results) and workflow.patched(_PAUSES):
                waiting = [r["task_id"] for r in results if r["status"] == "waiting"]
                shown = ", ".join(waiting[:10]) + (", ..." if len(waiting) > 10 else "")
                reason = (
                    f"round {n}: run {run_id} paused: {len(waiting)} task"
                    f"{'s' if len(waiting) != 1 else ''} wait{'s' if len(waiting) == 1 else ''} "
                    f"for a person's decision ({shown})"
                )
                self._step("paused", round=n, run_id=run_id, reason=reason)
                await self._wait_for(
                    {"kind": "decisions", "round": n, "run_id": run_id, "tasks": waiting},
                    lambda: run_id in self.decisions,
                    f"the wait for a person's decisions about run {run_id}",
                )
                kept = [r for r in results if r["status"] in _OK]
                run_input = replace(
                    run_input,
                    finished=kept,
                    answers=self.decisions.pop(run_id),
                    generation=0,
                    ledger=dict(self.ledger),  # what the run counted before it paused
                    # its calls in doubt (a lost worker's), each as a person found it: taken
                    # over, made again with its key, or denied, on the task's worker
                    effects=self.decided_calls.pop(run_id, {}),
                )
                child = await workflow.start_child_workflow(
                    RUN_WORKFLOW,
                    run_input,
                    id=workflow_id(run_id),
                    task_queue=self.inp.task_queue,
                    result_type=list,
                    parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                )
                # started: the driver finds this run's new workflow under its id
                self._step("resumed", round=n, run_id=run_id, kept=len(kept))
                results = await child
                self._agent_calls(n, results)
                self._counted(results)
        except ChildWorkflowError as exc:
            if isinstance(exc.cause, CancelledError):  # with this solve (a sub-solve's
                raise asyncio.CancelledError from None  # parent was stopped, say)
            cause = exc.cause or exc
            return f"round {n}: run {run_id} ended without finishing: {cause}"
        return results

    async def _out_of_budget(
        self, n: int, run_id: str | None, source: dict[str, Any] | None, why: str
    ) -> list[dict[str, Any]]:
        """The budget ran low in round ``n`` (``why``: the refusal): the joiner is asked once,
        within the reserve kept for it, to answer from ``source``'s results (this round's, or
        the round's before); without results, or without an answer, the solve ends
        ``budget_exhausted`` (as a local solve's)."""
        if source is not None:
            ask = {
                "round": n,
                "run_id": run_id or source["run_id"],
                "plan": source["plan"],
                "results": source["results"],
                "must_finish": True,
            }
            joined = await self._model_step(JOIN, n, ask, final=True)
            if "error" in joined:
                why = f"{why}; the joiner's last answer within the reserve failed: "
                why += joined["error"]
            else:
                decision = joined["decision"]
                self._step("joined", round=n, run_id=run_id, decision=decision)
                if source["round"] == n:
                    last = "from what it had when the budget ran low: " + why
                    self._close(n, run_id, "answered", last)
                    reason = f"answered in round {n} ({last})"
                else:
                    reason = (
                        f"answered from round {source['round']}'s results when the budget "
                        f"ran low in round {n}: {why}"
                    )
                    self._close(n, run_id, "answered", reason)
                return self._end("answered", reason, decision=decision)
        reason = f"round {n}: the budget ran out ({self._spent()}): {why}"
        self._close(n, run_id, "budget_exhausted", reason)
        return self._end("budget_exhausted", reason)

    def _run_budget(self) -> dict[str, Any]:
        """What a round's run gets of a budget of tool calls, or of any budget when its plan
        may hold agent tasks (``RunInput.budget``): nothing else is spent in a run."""
        b = self.inp.budget
        if not b or (b.get("tool_calls") is None and not self.inp.agent_tasks):
            return {}
        return {"budget": {"limits": b, "price": self.inp.price, "spent": dict(self.spent)}}

    def _run_spent(self, results: list[dict[str, Any]]) -> str | None:
        """Count what the run's tasks spent (each result's ``budget``, taken out of it); why
        the budget ran low in the run, if it did (the first task's refusal to end)."""
        low: str | None = None
        for r in results:
            used = r.pop("budget", None)
            if not used:
                continue
            for key in ("tool_calls", "tokens", "cost", "model_calls"):
                if used.get(key):
                    self.spent[key] = self.spent.get(key, 0) + used[key]
            low = low or used.get("low")
        return low

    def _spent(self) -> str:
        """``"1,234 of 5,000 tokens, 3 of 10 model calls"``: what was spent of each limit."""
        b, used = self.inp.budget or {}, self.spent
        parts = []
        if b.get("tokens") is not None:
            parts.append(f"{used['tokens']:,} of {b['tokens']:,} tokens")
        if b.get("cost_usd") is not None:
            parts.append(f"${used['cost']:.4f} of ${b['cost_usd']:g}")
        if b.get("model_calls") is not None:
            parts.append(f"{used['model_calls']} of {b['model_calls']} model calls")
        if b.get("tool_calls") is not None:
            parts.append(f"{used.get('tool_calls', 0)} of {b['tool_calls']} tool calls")
        return ", ".join(parts)

    def _lost_calls(self, n: int | None, details: Any) -> None:
        """The calls a model step had under way when the last worker it was given was lost
        (its last heartbeat's records, cut off): a step, and spent, as a local solve spends
        a call cut off."""
        lost = [
            d
            for d in (details[0] if details and isinstance(details[0], list) else ())
            if isinstance(d, dict) and "call_id" in d
        ]
        if not lost:
            return
        calls = [{**c, "seq": self.seq + i} for i, c in enumerate(lost)]
        self.seq += len(calls)
        spent = dict(self.spent)
        for c in calls:
            spent["tokens"] = spent.get("tokens", 0) + c.get("input_tokens", 0)
            spent["tokens"] += c.get("output_tokens", 0)
            spent["cost"] = spent.get("cost", 0.0) + (c.get("cost_usd") or 0.0)
            spent["model_calls"] = spent.get("model_calls", 0) + 1
        self.spent = spent
        self._step("calls", round=n, calls=calls)

    def _agent_calls(self, n: int, results: list[dict[str, Any]]) -> None:
        """The model calls of the round's agent tasks (they came with their results), in
        the order they started, numbered on from the solve's calls: a step."""
        calls = [c for r in results for c in r.pop("model_calls", None) or ()]
        if not calls:
            return
        calls.sort(key=lambda c: (c.get("started_at") or 0, c.get("seq") or 0))
        calls = [{**c, "seq": self.seq + i} for i, c in enumerate(calls)]
        self.seq += len(calls)
        self._step("calls", round=n, calls=calls)

    def _counted(self, results: list[dict[str, Any]]) -> None:
        """What a run counted on its limits (each limited task's result says it, taken out
        of it): the solve's ledger, on which the next run counts on. Counts and starts only
        grow, so the larger of each stands, whatever order the results come in."""
        for r in results:
            for key, (calls, last_at) in (r.pop("ledger", None) or {}).items():
                had_calls, had_last = self.ledger.get(key) or (0, None)
                starts = [t for t in (had_last, last_at) if t is not None]
                self.ledger[key] = [max(int(had_calls), int(calls)), max(starts, default=None)]

    def _sub_solves_spent(self, results: list[dict[str, Any]]) -> None:
        """What the round's sub-solves spent (they came with their tasks' results): spent by
        this solve too."""
        for r in results:
            for child in r.pop("sub_solves", None) or ():
                for k, v in (child.get("spent") or {}).items():
                    self.spent[k] = self.spent.get(k, 0) + v

    async def _model_step(
        self, name: str, n: int | None, ask: dict[str, Any], *, final: bool = False
    ) -> dict[str, Any]:
        """One model step as an activity; its calls become a step. A step that fails on
        every worker it was given is an error the solve ends with. ``final``: the joiner's
        last answer, which may spend the budget's reserve."""
        inp = self.inp
        ask = {
            **ask,
            "solve_id": inp.solve_id,
            "goal": inp.goal,
            "model": inp.model,
            "max_attempts": inp.max_attempts,
            "structured": inp.structured,
            "agent_tasks": inp.agent_tasks,
            "run": inp.run,
            "task_queue": inp.task_queue,
            "seq": self.seq,
            "budget": inp.budget,
            "price": inp.price,
            "spent": dict(self.spent),
            "final": final,
            "solve_depth": inp.depth if inp.sub_solves else None,
            "tools": inp.tools,
        }
        rules = (inp.approval or {}).get("rules")
        limits = rules.get("limits") if isinstance(rules, dict) else None
        if limits and name in (PLAN, REPLAN):  # the run counts the calls they limit
            ask["limits"] = limits
        planning = {"planner": inp.planner, "discovery": inp.discovery}
        ask.update((k, v) for k, v in planning.items() if v is not None)
        if inp.trace:  # the solve's trace context: the step's spans on the worker join it
            ask["trace"] = inp.trace
        # A turn's conversation goes as an argument of its own: the same payload for every
        # step, which the payload store keeps once however many steps carry it.
        args = [ask] if self.conversation is None else [ask, self.conversation]
        left = self._left()
        step = workflow.start_activity(
            name,
            args=args,
            task_queue=inp.task_queue,
            start_to_close_timeout=_STEP_BOUND,
            heartbeat_timeout=timedelta(seconds=inp.heartbeat_s),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=100),
                maximum_attempts=inp.lost_worker_retries + 1,
            ),
        )
        if left is not None:
            try:
                await workflow.wait_condition(step.done, timeout=left)
            except asyncio.TimeoutError:
                step.cancel()  # the worker's call is cancelled at its next heartbeat
                with contextlib.suppress(ActivityError, asyncio.CancelledError):
                    await step
                role = {PLAN: "planner", REPLAN: "replanner", JOIN: "joiner"}.get(name)
                what = f"the {role}'s step (round {n})" if role else "the turn's compression"
                raise _Expired(f"{what}, its model calls unrecorded") from None
        try:
            answer: dict[str, Any] = await step
        except ActivityError as exc:
            cause = exc.cause
            if isinstance(cause, TimeoutError):  # the calls lost with its last worker
                self._lost_calls(n, cause.last_heartbeat_details)
            message = cause.message if isinstance(cause, ApplicationError) else str(cause or exc)
            return {"error": " ".join(message.split()), "kind": "worker", "calls": []}
        calls = answer.pop("calls", None) or []
        self.spent = {**self.spent, **(answer.pop("spent", None) or {})}
        if calls:
            self.seq += len(calls)
            self._step("calls", round=n, calls=calls)
        return answer
