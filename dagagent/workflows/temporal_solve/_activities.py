"""The model steps of a solve on Temporal, as activities on a worker.

:class:`SolveActivities` holds a worker's registry. Each activity builds the solve's model
client from the spec the workflow carries (``openai:gpt-4o``, a base URL, the request
settings: never a key, which the worker reads from its own environment:
``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY``), runs one step as a local
solve runs it, and returns what it got with a record of each model call it made:

- ``dagagent.solve.plan``: the planner (:class:`~dagagent.planners.LLMPlanner`), and the
  plan run workflow's input for the plan (checked against the worker's tools);
- ``dagagent.solve.replan``: the replanner, from the previous round's plan and results, and
  the input of the run of the revised plan, which reuses the previous round's successes (the
  reuse a local solve's revision computes, with the same code);
- ``dagagent.solve.join``: the joiner (:class:`~dagagent.planners.Joiner`);
- ``dagagent.solve.carve`` (of a run's workflow): a sub-solve's budget, carved from what its
  parent has left (:meth:`~dagagent.workflows._spending.Spending.carve`).

A solve given sub-solves plans at its depth (``solve_depth``), with the tools its task gave
it (``tools``; else the worker's).

A planning or joining failure (no valid answer, a model that cannot be reached) is an
answer (``{"error": ..., "kind": ...}``), not a failed activity: the solve ends ``failed``
with it, as a local one would. The activity heartbeats while the model writes, so a worker
lost under a call is noticed at the heartbeat timeout and the step runs on another worker.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import anyio
from temporalio import activity
from temporalio.client import WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from ... import telemetry
from ...budget import Budget, Prices
from ...errors import (
    BudgetExceededError,
    ConfigError,
    JoinerError,
    LLMAuthError,
    LLMError,
    PlanningError,
)
from ...executors.temporal import TemporalExecutor, workflow_id
from ...executors.temporal._activities import worker_identity
from ...executors.temporal._executor import _facts, _tasks_known, reuse_by_reference
from ...executors.temporal._workflow import PLAN_COMPLETE
from ...llm import MeteredLLM
from ...llm.spec import from_spec
from ...plan import AgentTask, Plan, ToolTask, task_fingerprint
from ...planners import Joiner, LLMPlanner, LLMReplanner
from ...planners.conversation import EARLIER_TURN
from ...planners.streaming import plan_and_execute_streamed
from ...results import ModelCall, ModelRole, RunResult, RunStatus, TaskResult
from ...review import diff_plans, reuse_map
from ...run import new_run_id
from ...runner import TaskRunner
from ...settings import RunSettings, TaskRetryPolicy
from .._calls import SolveCalls
from .._spending import Spending
from ..replan import record_of, revise_run
from ..solve import COMPRESS_TOKENS, replanner_of, with_earlier
from ._model import settings_of
from ._planning import conversation_of, discovery_of, own_planner, planning_registry
from ._workflow import ATTEMPT, CARVE, COMPRESS, JOIN, PLAN, REPLAN

if TYPE_CHECKING:
    from ...graph import PlanGraph
    from ...llm import LLM
    from ...store import RunRecord
    from ...tools import Registry

__all__ = ["SolveActivities"]

# How often a step's heartbeat looks for a model call that started or ended (seconds).
_CALLS_LOOK_S = 0.05


class SolveActivities:
    """The model steps of solves, for a worker serving ``registry``."""

    def __init__(self, registry: Registry, *, prices: Prices | None = None) -> None:
        self.registry = registry
        self.prices = prices or Prices()

    def definitions(self) -> list[Any]:
        return [self.plan, self.replan, self.join, self.carve, self.compress]

    # -- the activities ----------------------------------------------------------------------

    @activity.defn(name=PLAN)
    async def plan(
        self, ask: dict[str, Any], conversation: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        ask = _with_conversation(ask, conversation)

        async def step(llm: Callable[[ModelRole], LLM], calls: SolveCalls) -> dict[str, Any]:
            planner = self._planner(ask, llm("planner"))
            if ask.get("stream_to"):
                return await self._streamed(ask, planner)
            planning = await planner.plan_with_report(ask["goal"])
            return await self._planned(ask, planning.plan, planning.graph)

        return await self._step(ask, step, planning=True)

    @activity.defn(name=REPLAN)
    async def replan(
        self, ask: dict[str, Any], conversation: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        ask = _with_conversation(ask, conversation)

        async def step(llm: Callable[[ModelRole], LLM], calls: SolveCalls) -> dict[str, Any]:
            previous = ask["previous"]
            plan = Plan.model_validate(previous["plan"])
            result = _run_result(previous["run_id"], plan, previous["results"])
            # as a local solve makes its replanner: from its planner, for its tools
            planner = self._planner(ask, llm("replanner"))
            replanner = replanner_of(planner, planner.registry, planner.llm)
            replanner = replanner.with_conversation(planner.conversation)
            record = record_of(plan, result)
            if ask.get("stream_to"):  # as round 1's, reusing the round before's successes
                answer = await self._streamed(
                    ask,
                    replanner,
                    replan_of=record,
                    feedback=ask.get("feedback"),
                    reuse=with_earlier(conversation_of(ask.get("conversation")), reuse_map(record)),
                )
                # a local streamed round gives up after its run when nothing changed
                diff = diff_plans(plan, Plan.model_validate(answer["plan"]))
                answer["unchanged"] = not (diff.added or diff.removed or diff.changed)
                return answer
            revision = await revise_run(
                record,
                planner.registry,
                replanner=replanner,
                feedback=ask.get("feedback"),
                goal=ask["goal"],
            )
            if revision.unchanged:
                return {"unchanged": True, "plan": _plan_json(revision.plan)}
            # the round before's successes, as a local solve's revision reuses them
            return await self._planned(ask, revision.plan, revision.graph, revision.reuse_map())

        return await self._step(ask, step, planning=True)

    @activity.defn(name=JOIN)
    async def join(
        self, ask: dict[str, Any], conversation: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        ask = _with_conversation(ask, conversation)

        async def step(llm: Callable[[ModelRole], LLM], calls: SolveCalls) -> dict[str, Any]:
            joiner = Joiner(
                llm("joiner"),
                max_attempts=ask["max_attempts"],
                structured=ask["structured"],
                settings=settings_of(ask["model"]),
            )
            joiner.conversation = conversation_of(ask.get("conversation"))
            plan = Plan.model_validate(ask["plan"])
            results = {d["task_id"]: _task_result(d) for d in ask["results"]}
            report = await joiner.join(
                ask["goal"], plan, results, must_finish=bool(ask["must_finish"])
            )
            return {"decision": report.decision.to_json_dict()}

        return await self._step(ask, step)

    @activity.defn(name=CARVE)
    async def carve(self, ask: dict[str, Any]) -> dict[str, Any]:
        """The budget of a sub-solve starting now: ``{"budget": ...}``, carved from
        ``ask["budget"]`` with ``ask["spent"]`` spent of it (its model priced at
        ``ask["price"]``, as the solve's steps price it), or ``{"error": ...}``, why
        nothing is left for one."""
        spending = _spending(
            {"budget": ask["budget"], "spent": ask["spent"]}, self.prices, ask.get("price")
        )
        try:
            carved = spending.carve()
        except BudgetExceededError as exc:
            return {"error": str(exc)}
        if carved is None:
            return {"budget": None}
        return {"budget": carved.model_dump(mode="json", exclude_defaults=True)}

    @activity.defn(name=COMPRESS)
    async def compress(
        self, ask: dict[str, Any], conversation: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """A turn's older turns summarised (as :meth:`dagagent.Session.ask`'s turn does
        locally): ``{"summary", "upto"}``, or an error the turn goes on without."""
        ask = _with_conversation(ask, conversation)

        async def step(llm: Callable[[ModelRole], LLM], calls: SolveCalls) -> dict[str, Any]:
            turns = conversation_of(ask["conversation"])
            assert turns is not None
            upto = turns.compress_upto()
            response = await llm("compress").complete(
                turns.compress_messages(), max_tokens=COMPRESS_TOKENS
            )
            summary = response.content.strip()
            if not summary:
                return {"error": "the model wrote no summary", "kind": "model"}
            return {"summary": summary, "upto": upto}

        return await self._step(ask, step)

    def _planner(self, ask: dict[str, Any], llm: LLM) -> LLMPlanner:
        """The planner a local solve would plan ``ask``'s goal with: the built-in one, or the
        one of one's own ``ask`` describes, for this worker's tools (and, in a turn of a
        session, the reader of earlier turns' outputs), showing the turns before it."""
        conversation = conversation_of(ask.get("conversation"))
        try:
            base = self._tools(ask)  # a sub-solve's task's tools, else all
            tools = planning_registry(base, conversation)
            options: dict[str, Any] = {
                "agent_tasks": bool(ask.get("agent_tasks")),
                "discovery": discovery_of(ask.get("discovery")),
                "solve_depth": ask.get("solve_depth"),
            }
            own = ask.get("planner")
            planner = (
                own_planner(own, llm, base, tools, **options)
                if own is not None
                else LLMPlanner(
                    llm,
                    tools,
                    max_attempts=ask["max_attempts"],
                    structured=ask["structured"],
                    settings=settings_of(ask["model"]),
                    **options,
                )
            )
        except ConfigError as exc:  # a step no worker like this one can make
            raise _Unusable(f"worker {worker_identity()}: {exc}") from None
        return planner.with_conversation(conversation)

    # -- how -----------------------------------------------------------------------------------

    def _tools(self, ask: dict[str, Any]) -> Registry:
        """The tools a solve plans with: its task's (a sub-solve's ``tools``), else all."""
        tools = ask.get("tools")
        return self.registry.subset(tools) if tools is not None else self.registry

    async def _step(
        self,
        ask: dict[str, Any],
        step: Callable[[Callable[[ModelRole], LLM], SolveCalls], Awaitable[dict[str, Any]]],
        *,
        planning: bool = False,
    ) -> dict[str, Any]:
        """Run ``step`` with the solve's model (``planning``: the planner's, when a planner of
        one's own has a model of its own), metered per role; its answer with the record of
        each model call (numbered from ``ask["seq"]``)."""
        model, price = ask["model"], ask.get("price")
        own = ask.get("planner") or {}
        if planning and own.get("model") is not None:
            model, price = own["model"], own.get("price")
        try:
            client = from_spec(
                model["spec"], base_url=model.get("base_url"), settings=settings_of(model)
            )
        except ConfigError as exc:
            raise ApplicationError(
                f"the worker cannot build the solve's model: {exc}",
                type="ConfigError",
                non_retryable=True,
            ) from None
        spending = _spending(ask, self.prices, price)
        calls = SolveCalls(ask["solve_id"], spending=spending, emit=lambda _event: None)
        calls.round, calls.run_id = ask.get("round"), ask.get("run_id")
        calls.final = bool(ask.get("final"))
        info = activity.info()
        # The calls the step's earlier attempts had under way when their workers were lost
        # (their last heartbeats said): recorded as cut off, and spent, as a local solve
        # spends a call cut off.
        lost = _lost_before(info.heartbeat_details)
        for doc in lost:
            record = ModelCall.model_validate(doc)
            spending.spend(record.usage, record.cost_usd)
        step_name = {PLAN: "planner", REPLAN: "replanner", JOIN: "joiner"}.get(
            info.activity_type, info.activity_type
        )
        why = (
            f"its worker {worker_identity()} was lost while the call was under way "
            f"(attempt {info.attempt} of the {step_name}'s step); the provider may have "
            "charged it"
        )

        def lost_now() -> list[dict[str, Any]]:
            return [*lost, *(r.model_dump(mode="json") for r in calls.cut_off(why))]

        def llm(role: ModelRole) -> LLM:
            return MeteredLLM(client, observer=calls.observer(role))

        async def traced(llm: Callable[[ModelRole], LLM], calls: SolveCalls) -> dict[str, Any]:
            # with OpenTelemetry on here, the step's spans (the planner's or the joiner's,
            # with their model calls) join the solve's trace (``ask["trace"]``, when its
            # driver traces)
            with telemetry.attached(ask.get("trace")):
                return await step(llm, calls)

        answer: dict[str, Any]
        async with client, anyio.create_task_group() as tg:
            tg.start_soon(_heartbeat, calls, lost_now)
            try:
                answer = await traced(llm, calls)
            except PlanningError as exc:
                answer = {"error": " ".join(str(exc).split()), "kind": "planning"}
            except JoinerError as exc:
                answer = {"error": " ".join(str(exc).split()), "kind": "joining"}
            except _Unusable as exc:  # the workflow ends the solve with it
                answer = {"error": " ".join(str(exc).split()), "kind": "worker"}
            except BudgetExceededError as exc:  # the workflow decides what follows
                answer = {"error": " ".join(str(exc).split()), "kind": "budget", "what": exc.what}
            except LLMError as exc:
                message = " ".join(str(exc).split())
                if isinstance(exc, LLMAuthError):  # the worker's key, not the driver's
                    where = getattr(client, "api_key_env", None) or "the provider's variable"
                    message += (
                        f" (the workers call the model with the API key of their own "
                        f"environment: check {where} on worker {worker_identity()})"
                    )
                answer = {"error": message, "kind": "model"}
            tg.cancel_scope.cancel()
        answer["spent"] = {
            "tokens": spending.tokens,
            "cost": spending.cost,
            "model_calls": spending.model_calls,
        }
        first = int(ask["seq"])
        made = [*lost, *(r.model_dump(mode="json") for r in calls.records)]
        answer["calls"] = [{**doc, "seq": first + i} for i, doc in enumerate(made)]
        return answer

    async def _streamed(
        self,
        ask: dict[str, Any],
        planner: LLMPlanner | LLMReplanner,
        *,
        replan_of: RunRecord | None = None,
        feedback: str | None = None,
        reuse: dict[str, tuple[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Plan with a streamed answer, as a local streamed solve plans
        (:func:`~dagagent.planners.streaming.plan_and_execute_streamed`): each task goes to
        the attempt's run, a child workflow of the solve started with no task, the moment it
        is written and valid. A later round's replanner (``planner``, revising ``replan_of``
        with ``feedback``) streams its revised plan so too: the tasks whose earlier output
        ``reuse`` holds are settled as they arrive (see ``TemporalExecutor._reused_now``),
        the others start. An attempt rejected halfway stops its run (followed here to
        its end: the next attempt reuses what succeeded); the next attempt's run is asked of
        the solve's workflow (signal :data:`ATTEMPT`). Once an attempt's plan is whole and
        valid, its run is the solve's to follow: the step ends with the plan and the run of
        each attempt."""
        run = ask["run"]
        executor = _IntoRound(
            ask,
            client=activity.client(),
            task_queue=ask["task_queue"],
            max_running=run["max_running"],
            chunk_elements=run["chunk_elements"],
            heartbeat_s=run["heartbeat_s"],
            lost_worker_retries=run["lost_worker_retries"],
            history_events=run["history_events"],
            # the limits of the solve's rules: its run counts the calls they limit
            approval={"rules": {"limits": ask["limits"]}} if ask.get("limits") else None,
        )
        settings = RunSettings(
            executor=executor,
            on_failure=run["on_failure"],
            max_elements=run["max_elements"],
            max_concurrency=run.get("max_concurrency"),
            retry=TaskRetryPolicy(**run["retry"]),
        )
        run_id = ask["run_id"]
        parent_id = replan_of.run_id if replan_of is not None else None
        if activity.info().attempt > 1:  # an earlier attempt's worker was lost
            earlier = await _earlier(executor, ask)
            if isinstance(earlier, dict):
                return earlier  # it had handed its run over: the plan is whole
            if earlier is not None:  # its last run stops; the next one reuses what ran
                executor.runs, ran = earlier
                reuse = {**(reuse or {}), **ran}
                parent_id, run_id = executor.runs[-1], new_run_id()
        try:
            await plan_and_execute_streamed(
                planner,
                ask["goal"],
                planner.registry,
                replan_of=replan_of,
                feedback=feedback,
                settings=settings,
                run_id=run_id,
                parent_id=parent_id,
                reuse=reuse,
            )
        except _HandedOver as over:
            return {"plan": _plan_json(over.plan), "runs": executor.runs, "run_input": over.input}
        raise AssertionError("a streamed round's valid plan is handed over to the solve")

    async def _planned(
        self,
        ask: dict[str, Any],
        plan: Plan,
        graph: PlanGraph,
        reuse: dict[str, tuple[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """The plan, and the input of the workflow that runs it (from this worker's tools),
        reusing what a local solve's round reuses (:func:`~..solve.with_earlier`): ``reuse``
        (a revision's: the round before's successes) and, in a turn of a session, the
        earlier turns' outputs. The tasks that may be reused now (their upstream tasks too)
        are settled here: the run starts with them finished and never calls anything for
        them; the workers reuse the others that turn out unchanged once their upstream
        outputs are known (as :func:`dagagent.execute` with ``reuse=`` does)."""
        conversation = conversation_of(ask.get("conversation"))
        reuse = with_earlier(conversation, reuse)
        run = ask["run"]
        executor = TemporalExecutor(
            task_queue=ask["task_queue"],
            max_running=run["max_running"],
            chunk_elements=run["chunk_elements"],
            heartbeat_s=run["heartbeat_s"],
            lost_worker_retries=run["lost_worker_retries"],
            history_events=run["history_events"],
            # the limits of the solve's rules: its run counts the calls they limit
            approval={"rules": {"limits": ask["limits"]}} if ask.get("limits") else None,
        )
        runner = TaskRunner(
            graph,
            self.registry,
            run_id=ask["run_id"],
            retry=TaskRetryPolicy(**run["retry"]),
            on_failure=run["on_failure"],
            max_concurrency=run.get("max_concurrency"),
            max_elements=run["max_elements"],
            reuse=reuse,
        )
        settled = [
            found
            for task_id in graph.order
            if reuse and (found := runner.reuse_now(task_id)) is not None
        ]
        run_input = executor._input(graph, runner, run["on_failure"], settled)
        # a map's reuse in the payload store, once: its chunks get the reference
        await reuse_by_reference(activity.client().data_converter, run_input, runner.reuse)
        run_input.tools = ask.get("tools")  # a sub-solve's: its agents are offered those
        if conversation is not None:  # what reads the earlier turns (given by the workflow)
            done = {r.task_id for r in settled}
            run_input.conversing = [
                t.id
                for t in plan.tasks
                if t.id not in done
                and (
                    (isinstance(t, AgentTask) and not t.solve)
                    or (isinstance(t, ToolTask) and t.tool == EARLIER_TURN)
                )
            ]
        if ask.get("agent_tasks"):  # their model, where its calls belong, what they are shown
            run_input.model = {**ask["model"], "solve_id": ask["solve_id"], "round": ask["round"]}
            if ask.get("discovery") is not None:
                run_input.model["discovery"] = ask["discovery"]
        return {"plan": _plan_json(plan), "run_input": _dataclass_json(run_input)}


class _HandedOver(Exception):
    """An attempt's plan is whole and valid: its run goes on under the solve's workflow."""

    def __init__(self, plan: Plan, run_input: dict[str, Any]) -> None:
        super().__init__("the plan is whole")
        self.plan = plan
        #: the run's input as if it had started with the whole plan (a run that pauses goes
        #: on from it)
        self.input = run_input


class _IntoRound(TemporalExecutor):
    """The executor of a streamed round's attempts: each attempt's run streams into a child
    workflow of the solve (the first one started with the planner's step, each later one
    asked for by signal :data:`ATTEMPT`), as a plan written while it runs streams into its
    own workflow. A rejected attempt's run is followed to its end; a valid one's is handed
    over (:class:`_HandedOver`)."""

    #: Its runs are traced by the solve's driver, which follows them (their tasks' spans
    #: are their workers'): the planner's step makes no run span, nor task metrics, here.
    traced_here = False

    def __init__(self, ask: dict[str, Any], **options: Any) -> None:
        super().__init__(**options)
        self.ask = ask
        self.runs: list[str] = []  # the attempts' runs, in order

    async def prepare(self, graph: PlanGraph, runner: TaskRunner) -> None:
        return None  # the workers are here; the solve's workflow starts the runs

    async def run(self, graph: PlanGraph, runner: TaskRunner, on_failure: Any) -> None:
        client, run_id = self._client(), runner.run_id
        if run_id != self.ask["run_id"]:  # a later attempt: the solve starts its run, with
            # the tasks it has already (an earlier attempt's that ran: reused here)
            solve = client.get_workflow_handle(self.ask["solve_workflow"])
            given = _facts(graph, runner, list(graph.plan.tasks), self._limits())
            given.finished = self._reused_now(runner, list(graph.plan.tasks))
            await self._by_reference(given, runner)
            wanted = {"run_id": run_id, "parent_id": self.runs[-1], "given": asdict(given)}
            await solve.signal(ATTEMPT, wanted)
        self.runs.append(run_id)
        handle = client.get_workflow_handle(workflow_id(run_id), result_type=list)
        await _exists(handle)
        known = await _tasks_known(handle, 0)  # an earlier attempt of this step sent those
        # each task as it is accepted, then the plan's end (or its rejection)
        await self._stream(graph, runner, handle, known)
        if graph.complete and not graph.aborted:
            whole = self._input(graph, runner, on_failure, [])
            whole.streaming = False
            await self._by_reference(whole, runner)
            raise _HandedOver(graph.plan, _dataclass_json(whole))
        await self._follow(handle, runner, 0)


async def _earlier(
    executor: _IntoRound, ask: dict[str, Any]
) -> dict[str, Any] | tuple[list[str], dict[str, tuple[str, Any]]] | None:
    """What an earlier attempt of a streamed planner's step, whose worker was lost, left:
    nothing (``None``: its run has no task, start afresh); its answer, when its last run
    was handed over whole (the plan is that run's); else the runs of its attempts and what
    succeeded in the last one (which is stopped here, as a plan rejected halfway), for the
    next attempt's run to reuse."""
    client = executor._client()
    solve = client.get_workflow_handle(ask["solve_workflow"])
    runs: list[str] = await solve.query("attempts")
    handle = client.get_workflow_handle(workflow_id(runs[-1]), result_type=list)
    tasks: list[dict[str, Any]] = []
    while True:
        batch = await handle.query("plan_tasks", len(tasks))
        tasks.extend(batch["tasks"])
        if not batch["tasks"] or len(tasks) >= batch["total"]:
            break
    if not tasks and batch["streaming"]:
        return None
    if not batch["streaming"] and not batch["aborted"]:
        plan = Plan.model_validate({"goal": ask["goal"], "tasks": tasks})
        return {"plan": _plan_json(plan), "runs": runs}
    with contextlib.suppress(RPCError):  # (it may have ended already)
        await handle.signal(PLAN_COMPLETE, True)
    docs = await handle.result()
    plan = Plan.model_validate({"goal": ask["goal"], "tasks": tasks})
    by_id = {t.id: t for t in plan.tasks}
    reuse = {
        d["task_id"]: (task_fingerprint(by_id[d["task_id"]], d.get("args")), d.get("output"))
        for d in docs
        if d["status"] in ("succeeded", "reused") and d["task_id"] in by_id
    }
    return runs, reuse


async def _exists(handle: WorkflowHandle[Any, Any]) -> None:
    """Until the workflow ``handle`` names exists (the solve starts it on a signal)."""
    while True:
        try:
            await handle.describe()
            return
        except RPCError as exc:
            if exc.status is not RPCStatusCode.NOT_FOUND:
                raise
        await anyio.sleep(0.05)


def _with_conversation(ask: dict[str, Any], conversation: dict[str, Any] | None) -> dict[str, Any]:
    """``ask`` with the turn's conversation (an argument of its own; ``None``: not a turn)."""
    return ask if conversation is None else {**ask, "conversation": conversation}


class _Unusable(Exception):
    """What the step needs cannot be made on this worker (a planner of one's own whose
    examples do not fit its tools, say)."""


def _spending(ask: dict[str, Any], prices: Prices, price: dict[str, Any] | None) -> Spending:
    """The ledger of one step: the solve's budget with what the steps before it spent, its
    model priced as the driver priced it (``price``, from the workflow's input), so that
    every worker reserves, cuts off and refuses a call as the local solve would."""
    budget = ask.get("budget")
    if budget is not None:
        prices = Prices({"*": price} if price is not None else {}, defaults=False)
    spending = Spending(Budget.model_validate(budget) if budget else None, prices)
    spent = ask.get("spent") or {}
    spending.tokens = int(spent.get("tokens", 0))
    spending.cost = float(spent.get("cost", 0.0))
    spending.model_calls = int(spent.get("model_calls", 0))
    spending.tool_calls = int(spent.get("tool_calls", 0))
    return spending


def _plan_json(plan: Plan) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(plan.to_json(indent=None))
    return doc


def _dataclass_json(value: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(value)


def _task_result(doc: dict[str, Any]) -> TaskResult:
    return TaskResult.validate({k: v for k, v in doc.items() if k not in ("duration_s", "ledger")})


def _run_result(run_id: str, plan: Plan, docs: list[dict[str, Any]]) -> RunResult:
    """A round's run as the replanner reviews it, from its workflow's results."""
    tasks = {d["task_id"]: _task_result(d) for d in docs}
    ok = all(r.status.ok or r.skipped_by_condition for r in tasks.values())
    now = time.time()
    started = [r.started_at for r in tasks.values() if r.started_at is not None]
    return RunResult(
        run_id=run_id,
        status=RunStatus.SUCCEEDED if ok else RunStatus.FAILED,
        goal=plan.goal,
        executor="temporal",
        tasks=tasks,
        started_at=min(started) if started else now,
        finished_at=now,
    )


def _lost_before(details: Sequence[Any]) -> list[dict[str, Any]]:
    """The records of the calls lost with the workers of a step's earlier attempts, from
    the last heartbeat's details (see :func:`_heartbeat`)."""
    if details and isinstance(details[0], list):
        return [d for d in details[0] if isinstance(d, dict) and "call_id" in d]
    return []


async def _heartbeat(calls: SolveCalls, lost: Callable[[], list[dict[str, Any]]]) -> None:
    """Tell the server the worker is alive, four times per heartbeat timeout, until
    cancelled, and at once when a model call starts or ends: each heartbeat carries the
    records the calls under way would have if the worker were lost now (with those lost
    before), so that the next attempt, or the workflow, records them."""
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        return
    every = max(0.05, timeout.total_seconds() / 4)
    told: tuple[str, ...] | None = None
    since = 0.0
    while True:
        await anyio.sleep(min(every, _CALLS_LOOK_S))
        since += min(every, _CALLS_LOOK_S)
        flying = tuple(f.call.id for f in calls.running())
        if flying != told or since >= every:
            activity.heartbeat(lost())
            told, since = flying, 0.0
