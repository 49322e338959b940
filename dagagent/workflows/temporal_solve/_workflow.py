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

A lost worker under a model step: the server notices at the heartbeat timeout and gives the
activity to another worker (a model call has no side effect); a finished step is in the
history and never runs again.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from temporalio.workflow import ParentClosePolicy

from ...executors.temporal import workflow_id
from ...executors.temporal._workflow import WORKFLOW as RUN_WORKFLOW, RunInput

__all__ = [
    "COMPRESS",
    "JOIN",
    "PLAN",
    "REPLAN",
    "SOLVE_WORKFLOW",
    "STEPS_BATCH",
    "SolveInput",
    "SolveWorkflow",
]

SOLVE_WORKFLOW = "dagagent.solve"
PLAN = "dagagent.solve.plan"
REPLAN = "dagagent.solve.replan"
JOIN = "dagagent.solve.join"
COMPRESS = "dagagent.solve.compress"
#: A query of the solve's steps returns at most this many.
STEPS_BATCH = 50

_OK = ("succeeded", "reused")
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
    #: A planner of one's own, as data (``_planning.planner_data``): the workers' planner
    #: and replanner are made from it. ``None``: the built-in planner.
    planner: dict[str, Any] | None = None
    #: The tool discovery's ``{"threshold", "limit"}``; ``None``: the default one.
    discovery: dict[str, Any] | None = None
    #: A turn of a session: the turns before it as data (``_planning.conversation_data``),
    #: shown to the planner, the replanner and the joiner; with ``compress``, the older
    #: ones are summarised first (step ``compress``). ``None``: not a turn.
    conversation: dict[str, Any] | None = None


class _Expired(Exception):
    """The solve's deadline passed; ``what`` was cancelled by it (``""``: nothing ran)."""

    def __init__(self, what: str = "") -> None:
        super().__init__(what)
        self.what = what


def _ok_outputs(results: list[dict[str, Any]]) -> dict[str, Any]:
    return {r["task_id"]: r.get("output") for r in results if r["status"] in _OK}


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


@workflow.defn(name=SOLVE_WORKFLOW)
class SolveWorkflow:
    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.conversation: dict[str, Any] | None = None  # a turn's (see SolveInput)
        self.seq = 1  # the next model call's place among the solve's calls
        self.deadline_at: float | None = None  # seconds since the epoch, workflow time
        self.round: tuple[int, str | None] | None = None  # the round under way, its run
        self.kept = 0  # tasks with an output, over the runs that ended
        self.stopped: list[str] = []  # the tasks the deadline cancelled while they ran
        #: What the model steps spent (as their workers' ledgers counted it).
        self.spent: dict[str, Any] = {"tokens": 0, "cost": 0.0, "model_calls": 0}

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
        self._step("end", status=status, reason=reason, **more)
        return self.steps

    @workflow.run
    async def run(self, inp: SolveInput) -> list[dict[str, Any]]:
        self.inp = inp
        self.conversation = inp.conversation  # with its summary, once compressed
        if inp.deadline_s is not None:
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
        self._step("start", solve_id=inp.solve_id, goal=inp.goal, max_rounds=inp.max_rounds)
        if self.conversation is not None and self.conversation.get("compress"):
            await self._compress()
        outputs: dict[str, Any] = {}
        previous: dict[str, Any] | None = None
        feedback: str | None = None
        for n in range(1, inp.max_rounds + 1):
            run_id = workflow.uuid4().hex[:12]
            parent_id = previous["run_id"] if previous is not None else None
            self._step("round", round=n, run_id=run_id, parent_id=parent_id, feedback=feedback)
            self.round = (n, None)
            ask: dict[str, Any] = {"round": n, "run_id": run_id}
            if previous is None:
                planned = await self._model_step(PLAN, n, ask)
            else:
                ask.update(previous=previous, feedback=feedback)
                planned = await self._model_step(REPLAN, n, ask)
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
            if planned.get("unchanged"):
                reason = (
                    f"round {n}: the revised plan is the same as round {n - 1}'s; running it "
                    "again would change nothing"
                )
                self._step("planned", round=n, run_id=None, plan=planned["plan"])
                self._close(n, None, "gave_up", reason)
                return self._end("gave_up", reason)
            plan = planned["plan"]
            self._left()  # a run never starts after the deadline
            self._step("planned", round=n, run_id=run_id, plan=plan, parent_id=parent_id)
            self.round = (n, run_id)
            try:
                # the run keeps the deadline itself, and ends with what finished by then
                results: list[dict[str, Any]] = await workflow.execute_child_workflow(
                    RUN_WORKFLOW,
                    replace(RunInput(**planned["run_input"]), deadline_at=self.deadline_at),
                    id=workflow_id(run_id),
                    task_queue=inp.task_queue,
                    result_type=list,
                    parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                )
            except ChildWorkflowError as exc:
                cause = exc.cause or exc
                reason = f"round {n}: run {run_id} ended without finishing: {cause}"
                self._step("ran", round=n, run_id=run_id)
                self._close(n, run_id, "failed", reason)
                return self._end("failed", reason)
            self._agent_calls(n, results)
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
        return ", ".join(parts)

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
        }
        planning = {"planner": inp.planner, "discovery": inp.discovery}
        ask.update((k, v) for k, v in planning.items() if v is not None)
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
            message = cause.message if isinstance(cause, ApplicationError) else str(cause or exc)
            return {"error": " ".join(message.split()), "kind": "worker", "calls": []}
        calls = answer.pop("calls", None) or []
        self.spent = answer.pop("spent", None) or self.spent
        if calls:
            self.seq += len(calls)
            self._step("calls", round=n, calls=calls)
        return answer
