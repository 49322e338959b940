"""What runs on the workers: one task through the task runner, as an activity.

:class:`Activities` holds a worker's registry. Its activity ``dagagent.run_task`` gets the
call (which task of which run, the task itself; for a map, which window of its elements) and
the output of each dependency; it reads the task (the driver validated the plan; each task
checks its own tools against the worker's), makes a
:class:`~dagagent.runner.TaskRunner` that knows those outputs, and runs the task with it:
references, argument validation, retries and their spacing, the timeout, the map's
elements, the result record: all as in a local run. The result goes back as the JSON of
:meth:`TaskResult.to_json_dict <dagagent.results.TaskResult.to_json_dict>`.

A map's window: the elements outside it stand as placeholders and those the window finished
before its worker was lost stand as they were reported (see ``_window_prior``), so the
runner runs only the rest (the same road as a resumed run's waiting elements). Finished
elements are reported in the activity's heartbeats. A map's reuse (its elements' earlier
outputs) comes as a reference to the payload store (``call["reuse_ref"]``), read once per
worker and kept for the map's other chunks (see ``_with_reuse``).

A task run again after its worker was lost (``in_doubt``), whose tool has side effects: the
calls it had not finished are in doubt (``Effects.lost_during`` in the runner), and its
reconciler decides about each; one it cannot decide (or without a reconciler) waits for a
person under the run's ``in_doubt`` policy, named for the driver to record
(``in_doubt_calls``), with the worker that was lost (``lost``, which the workflow read from
the lost activity's heartbeats).

Each call goes through the worker's interceptors (approval rules, redaction, tracing),
with the decisions a person took about the calls that waited (a resumed run's answers);
the result names the worker that ran it (``worker``, ``pid@host``), and each element of a
map the worker that ran its chunk.

With OpenTelemetry on in the worker (``dagagent worker --otel``, or the application's own
providers), each attempt of the task is a span made here (``execute_tool TOOL``,
``invoke_agent TASK`` with its model calls), a child of the run's span on the driver when
the driver traces (its W3C trace context comes as ``call["trace"]``).

A sub-solve task (``"solve": true``, in a solve's round) is not run here: ``dagagent.sub_solve.
goals`` resolves its goals through the task runner (its instruction, each element's for a map,
its conditions), the run's workflow reaches each by a child solve, and ``dagagent.sub_solve.
settle`` makes the task's result from their outcomes, through the task runner again (an
answer is the output; a solve without one fails the task with a ``SubSolveError``).

A worker whose registry lacks a tool of the plan (or has one whose arguments differ) fails
the task at once, saying what the worker serves: the error is not retried.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from functools import partial
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from ...budget import tool_calls_refused
from ...conditions import parse_condition
from ...errors import (
    AgentError,
    ConfigError,
    PlanError,
    PlanValidationError,
    SubSolveError,
    TaskDeniedError,
)
from ...events import Event, TaskElementFinished
from ...graph import PlanGraph, check_task, validate
from ...plan import AgentTask, ToolTask, read_plan
from ...references import Template
from ...results import ApprovalAnswer, TaskResult, TaskStatus
from ...runner import CallLedger, Effects, Redaction, RunTelemetry, TaskRunner, ToolCalls
from ...settings import TaskRetryPolicy
from ._payloads import fetched
from ._workflow import (
    COUNT_ELEMENTS,
    IN_DOUBT_RECORD,
    RUN_TASK,
    SUB_SOLVE_GOALS,
    SUB_SOLVE_SETTLE,
)

if TYPE_CHECKING:
    from ...results import AgentStep
    from ...runner import AgentNode, CallNext, Interceptor, ToolInvocation
    from ...tools import Registry

__all__ = ["Activities", "AgentModels", "Conversing", "RunPolicies", "worker_identity"]

#: How a worker gets the model of a run's agent tasks: called with the run's model spec
#: (``RunInput.model``), an async context manager whose value has ``llm`` and
#: ``agent_runner`` (for the task runner), ``records()``, the JSON of each model call made,
#: ``redaction``, set to what the worker's redacting interceptors hide, which the records'
#: texts then hide too, ``spent()``, what its calls spent of a solve's budget, and
#: ``cut_off(why)``, the records of its calls under way as if cut off now
#: (``dagagent.workflows.temporal_solve`` provides it; this layer knows no model).
AgentModels = Callable[[dict[str, Any]], AbstractAsyncContextManager[Any]]

RunPolicies = Callable[[Mapping[str, Any]], Sequence["Interceptor"]]
"""``(a run's approval rules as data) -> interceptors``: see
:func:`dagagent.approval.run_policies`."""

Conversing = Callable[["Registry", Mapping[str, Any]], "Registry"]
"""``(a run's tools, the conversation a turn's run carries) -> the tools of its tasks``: the
run's with those that read the conversation (``dagagent.workflows.temporal_solve`` provides
it: the ``earlier_turn`` tool of a session; this layer knows no conversation)."""

_T = TypeVar("_T")

# How often an activity's heartbeat looks for an agent's model call that started or ended.
_CALLS_LOOK_S = 0.05
# What a resumed run may do with a call in doubt (``RunSettings.in_doubt``).
_IN_DOUBT = ("ask", "retry", "deny")
# Plans validated on this worker (the most recent), by their JSON text.
_GRAPHS_KEPT = 32
# Maps' reuse read from the payload store on this worker (the most recent), by reference.
_REUSE_KEPT = 4


def worker_identity() -> str:
    """``pid@host``: how a worker names itself to the server and in its errors."""
    return f"{os.getpid()}@{socket.gethostname()}"


class Activities:
    """The activities of a worker serving ``registry`` on ``task_queue``."""

    def __init__(
        self,
        registry: Registry,
        task_queue: str,
        identity: str | None = None,
        interceptors: Sequence[Interceptor] = (),
        run_policies: RunPolicies | None = None,
        agents: AgentModels | None = None,
        conversing: Conversing | None = None,
    ) -> None:
        self.registry = registry
        self.task_queue = task_queue
        self.identity = identity or worker_identity()
        self.agents = agents
        self.conversing = conversing
        self.interceptors = tuple(interceptors)
        for i in self.interceptors:
            if getattr(i, "limits", None):
                raise ConfigError(
                    f"worker interceptor {i!r} has limits, which count a run's calls "
                    "together: a worker sees one task's calls at a time, and the run does not "
                    "know its interceptors; give the run its limits instead (dagagent run "
                    "--policy FILE, TemporalExecutor(approval=...)), which its workflow counts"
                )
        self.run_policies = run_policies
        self._redaction = Redaction(self.interceptors)
        self._policies: dict[str, tuple[Interceptor, ...]] = {}
        self._graphs: OrderedDict[str, PlanGraph] = OrderedDict()
        self._reuse: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def definitions(self) -> list[Any]:
        return [self.run_task, self.count_elements, self.sub_solve_goals, self.sub_solve_settle]

    # -- the activities ----------------------------------------------------------------------

    @activity.defn(name=RUN_TASK)
    async def run_task(self, call: dict[str, Any], *given: Any) -> Any:
        """Run one task (or a window of a map's elements), ``call["task"]``, and return its
        result's JSON; an agent task's model calls under ``model_calls`` (see
        :data:`AgentModels`). ``given``: the output of each dependency (see
        :meth:`_graph`); a task of a turn's run that reads its conversation
        (``call["conversation"]``) has it last."""
        call = await self._with_reuse(call)
        graph, outputs = self._graph(call, given)
        conversation: dict[str, Any] | None = None
        if call.get("conversation"):
            *deps, conversation = outputs
            outputs = tuple(deps)
        call = {**call, "conversation": conversation}
        model = call.get("model")
        task = graph.tasks.get(call["task_id"])
        grant = call.get("grant")
        gate = _Allowance(grant) if grant is not None else None
        if (
            model is None
            or self.agents is None
            or call.get("assemble")
            or not isinstance(task, AgentTask)  # no model call: no client to open
        ):
            doc = await self._run_task(call, graph, outputs, None, gate)
            if gate is not None:
                doc["budget"] = gate.spent()
            return doc
        if grant is not None and grant.get("lease"):  # the solve's budget, for its calls
            model = {**model, "ledger": grant}
        async with self.agents(model) as agent_model:
            agent_model.redaction = self._redaction
            doc = await self._run_task(call, graph, outputs, agent_model, gate)
            doc["model_calls"] = agent_model.records()
            if gate is not None:
                doc["budget"] = _spent(gate, agent_model)
            return doc

    async def _run_task(
        self,
        call: dict[str, Any],
        graph: PlanGraph,
        outputs: Sequence[Any],
        model: Any,
        gate: _Allowance | None = None,
    ) -> Any:
        runner = self._runner(call, graph, outputs, model, gate, traced=True)
        task_id = call["task_id"]
        counting = self._counting(call, runner.calls.ledger)
        in_doubt = call.get("in_doubt")
        if in_doubt:
            # run again after its worker was lost, or its workflow ended: a call not known to
            # have ended is in doubt, a person's to decide (their answer comes with the call)
            # or its reconciler's; else the run's policy says (``ask``: the task waits for a
            # person, and the call goes back to the driver to be recorded; ``deny``: not
            # made; ``retry``: made again, same key; a workflow started before lost workers
            # asked says ``True``: not made)
            runner.calls.effects.lost_during(task_id, call.get("lost"))
            if in_doubt == IN_DOUBT_RECORD:  # its workflow ended under its driver: its calls
                # are named (their keys, for the run's record) and none is made or reconciled
                runner.calls.effects.in_doubt = "ask"
                runner.calls.effects.reconciling = False
            else:
                runner.calls.effects.in_doubt = in_doubt if in_doubt in _IN_DOUBT else "deny"
        window = call.get("window")
        reported: list[dict[str, Any]] = list(call.get("done") or ())
        if window is not None:
            start, stop = window

            def keep(event: Event) -> None:
                if isinstance(event, TaskElementFinished) and start <= event.index < stop:
                    reported.append({**event.result.to_json_dict(), "worker": self.identity})

            runner.emit = keep
        # a task whose tool has side effects names this worker in its heartbeats, from the
        # start: should it be lost, a person asked about its call is told where it was made
        named = self.identity if _has_effects(graph, task_id, runner) else None
        with _heartbeats(reported, partial(_if_lost, gate, model), named):
            r = await runner.run_task(task_id)
        doc = r.to_json_dict()
        if counting:  # what it counted against the run's limits: the workflow keeps it
            ledger = runner.calls.ledger
            doc["ledger"] = {k: [ledger.calls(o), ledger.last_at(o)] for k, o in counting.items()}
        if runner.calls.effects.asked:  # calls in doubt left for a person: the driver records
            doc["in_doubt_calls"] = runner.calls.effects.asked
        if window is not None:
            doc["elements"] = doc["elements"][start:stop] if doc.get("elements") else []
        return self._where(doc, ran_here=not call.get("assemble"))

    @activity.defn(name=COUNT_ELEMENTS)
    async def count_elements(self, call: dict[str, Any], *given: Any) -> dict[str, Any]:
        """How many elements a map task's list has: ``{"n": ...}``, or ``{"result": ...}``,
        the task's failure, when it has no list (or one too long) to map over."""
        return await _beating(self._count_elements(call, *self._graph(call, given)))

    async def _count_elements(
        self, call: dict[str, Any], graph: PlanGraph, outputs: Sequence[Any]
    ) -> dict[str, Any]:
        call = await self._with_reuse(call)
        runner = self._runner(call, graph, outputs)
        task = runner.tasks[call["task_id"]]
        if task.when is not None and not _holds(task.when, runner.outputs):
            # a condition on the whole task that is false (or cannot be decided): the runner
            # settles the task without mapping anything
            settled = await runner.run_task(task.id)
            return {"result": self._where(settled.to_json_dict(), ran_here=True)}
        source = task.for_each
        try:
            items = (
                source
                if isinstance(source, list)
                else Template(str(source)).resolve(runner.outputs)
            )
        except Exception:
            items = None
        if not isinstance(items, (list, tuple)) or len(items) > runner.max_elements:
            # not a list to map over: the runner's own reading of it says why, as a result
            r = await runner.run_task(task.id)
            return {"result": self._where(r.to_json_dict(), ran_here=True)}
        return {"n": len(items)}

    @activity.defn(name=SUB_SOLVE_GOALS)
    async def sub_solve_goals(self, call: dict[str, Any], *given: Any) -> dict[str, Any]:
        """A sub-solve task's goals, ``{"goals": [...]}``, one per element of a map that its
        conditions let run (``element``, ``goal``, ``tools``: those its solve may use,
        ``own_tools``: whether the task chose them); or ``{"result": ...}``, the task
        settled without a solve (a condition that is false, a reference that fails)."""
        return await _beating(self._sub_solve_goals(call, *self._graph(call, given)))

    async def _sub_solve_goals(
        self, call: dict[str, Any], graph: PlanGraph, outputs: Sequence[Any]
    ) -> dict[str, Any]:
        call = await self._with_reuse(call)
        goals: dict[int | None, dict[str, Any]] = {}

        async def note(node: AgentNode) -> tuple[Any, list[AgentStep] | None]:
            goals[node.element] = {
                "element": node.element,
                "goal": node.instruction.strip(),
                "tools": sorted(node.tools.names),
                # the task's, or its run's part of the worker's (a sub-solve's sub-solve);
                # else: all the worker's
                "own_tools": node.task.tools is not None or call.get("tools") is not None,
            }
            return None, None

        runner = self._runner(call, graph, outputs, _Seam(note))
        r = await runner.run_task(call["task_id"])
        if not goals:
            return {"result": self._where(r.to_json_dict(), ran_here=True)}
        return {"goals": [goals[k] for k in sorted(goals, key=lambda e: -1 if e is None else e)]}

    @activity.defn(name=SUB_SOLVE_SETTLE)
    async def sub_solve_settle(self, call: dict[str, Any], *given: Any) -> dict[str, Any]:
        """A sub-solve task's result from the ``outcomes`` of its solves (each an
        ``answer``, or the ``error`` that fails it, with its ``status`` and ``solve_id``)."""
        return await _beating(self._sub_solve_settle(call, *self._graph(call, given)))

    async def _sub_solve_settle(
        self, call: dict[str, Any], graph: PlanGraph, outputs: Sequence[Any]
    ) -> dict[str, Any]:
        call = await self._with_reuse(call)
        outcomes = {o["element"]: o for o in call["outcomes"]}

        async def answer(node: AgentNode) -> tuple[Any, list[AgentStep] | None]:
            found = outcomes.get(node.element)
            if found is None:
                raise AgentError("the sub-solve of this task did not run")
            if "error" in found:
                raise SubSolveError(
                    found["error"], solve_id=found.get("solve_id"), status=found["status"]
                )
            return found.get("answer"), None

        runner = self._runner(call, graph, outputs, _Seam(answer))
        doc = (await runner.run_task(call["task_id"])).to_json_dict()
        # each goal's time is its solve's, from its start
        for e in doc.get("elements") or ():
            found = outcomes.get(int(e["task_id"].rsplit("[", 1)[1][:-1]))
            if found is not None:
                e["started_at"] = found["started_at"]
        started = [o["started_at"] for o in outcomes.values()]
        if started:
            doc["started_at"] = min(started)
        return self._where(doc, ran_here=True)

    # -- how -----------------------------------------------------------------------------------

    async def _with_reuse(self, call: dict[str, Any]) -> dict[str, Any]:
        """``call`` with the reuse its reference names (``reuse_ref``: a map's, in the
        payload store), read once and kept for the map's other chunks on this worker."""
        ref = call.get("reuse_ref")
        if ref is None:
            return call
        found = self._reuse.get(ref)
        if found is None:
            found = await fetched(activity.client().data_converter, ref)
            if not isinstance(found, dict):
                raise ApplicationError(
                    f"the reuse of task {call.get('task_id')!r} read from the payload store "
                    "is not a mapping",
                    non_retryable=True,
                )
            self._reuse[ref] = found
            while len(self._reuse) > _REUSE_KEPT:
                self._reuse.popitem(last=False)
        else:
            self._reuse.move_to_end(ref)
        return {**call, "reuse": found}

    def _where(self, doc: dict[str, Any], *, ran_here: bool) -> dict[str, Any]:
        """``doc`` with this worker as the one that ran it (``ran_here``: and each of its
        elements that does not name a worker yet: those it ran; a map put together from its
        chunks keeps the chunks' workers)."""
        doc["worker"] = self.identity
        if ran_here:
            for e in doc.get("elements") or ():
                e.setdefault("worker", self.identity)
        return doc

    def _runner(
        self,
        call: dict[str, Any],
        graph: PlanGraph,
        outputs: Sequence[Any],
        model: Any = None,
        gate: _Allowance | None = None,
        *,
        traced: bool = False,
    ) -> TaskRunner:
        """The task runner of the call's task. ``traced``: with OpenTelemetry on here, its
        attempts' spans join the run's trace (``call["trace"]``, see
        :meth:`RunTelemetry.joined <dagagent.runner.RunTelemetry.joined>`)."""
        task_id = call["task_id"]
        prior = self._prior(graph, call)
        registry = self._tools(call)
        answers: dict[str, list[ApprovalAnswer]] = {}
        for key, given in (call.get("answers") or {}).items():
            answers[key] = [ApprovalAnswer.model_validate(a) for a in given]
        interceptors = self.interceptors
        if call.get("approval"):  # the run's own rules, after the worker's interceptors
            interceptors = (*interceptors, *self._run_policies(call["approval"]))
        if gate is not None:  # a solve's budget of tool calls is spent before anyone is asked
            interceptors = (gate, *interceptors)
        runner = TaskRunner(
            graph,
            registry,
            run_id=call["run_id"],
            calls=ToolCalls(
                call["run_id"],
                registry,
                interceptors,
                answers=answers,
                # a solve's limits count its calls across its rounds: its messages say so
                ledger=CallLedger(scope=str(call.get("ledger_scope") or "run")),
                # keys and records of calls with side effects as a run in one process with
                # these interceptors has them: what the redaction hides, hidden
                effects=Effects(
                    call["run_id"],
                    prior=_effect_records(call.get("effects")),
                    revised=_effect_records(call.get("revised")),
                    in_doubt=call.get("in_doubt_policy") or "ask",
                    redaction=self._redaction,
                ),
            ),
            redaction=self._redaction,
            retry=TaskRetryPolicy(**call["retry"]),
            on_failure=call["on_failure"],
            max_elements=call["max_elements"],
            # a map's elements at once here: the workflow holds a slot of the run (and of the
            # task) for each
            element_concurrency=call.get("element_concurrency"),
            prior=prior,
            llm=model.llm if model is not None else None,
            agent_runner=model.agent_runner if model is not None else None,
            reuse={t: (fp, out) for t, (fp, out) in (call.get("reuse") or {}).items()},
            telemetry=(
                RunTelemetry.joined(
                    graph, call["run_id"], "temporal", self._redaction, call.get("trace")
                )
                if traced
                else None
            ),
        )
        runner.outputs.update(zip(call["deps"], outputs, strict=True))
        task = graph.tasks.get(task_id)
        if task is None:
            raise ApplicationError(f"task {task_id!r} is not in the plan", non_retryable=True)
        for name in task.tool_names or ():
            if name not in registry:
                served = ", ".join(sorted(self.registry.names)) or "none"
                raise ApplicationError(
                    f"the worker {self.identity} on task queue {self.task_queue!r} does not "
                    f"serve tool {name!r} (it serves: {served}); start workers with the same "
                    "tools as the driver",
                    type="UnknownToolError",
                    non_retryable=True,
                )
        return runner

    def _tools(self, call: dict[str, Any]) -> Registry:
        """The tools of the call's run: the worker's, or the part the run may use (a
        sub-solve's, ``call["tools"]``: an agent task is offered those alone, as a local
        sub-solve's), with those that read a turn's conversation (``call["conversation"]``,
        see :data:`Conversing`)."""
        registry = self.registry
        names = call.get("tools")
        if names is not None:  # a name the worker lacks fails its task below, saying so
            registry = registry.subset(n for n in names if n in registry)
        conversation = call.get("conversation")
        if conversation is not None and self.conversing is not None:
            try:
                registry = self.conversing(registry, conversation)
            except ConfigError as exc:
                raise ApplicationError(
                    f"the worker {self.identity} on task queue {self.task_queue!r}: {exc}",
                    type="ConfigError",
                    non_retryable=True,
                ) from None
        return registry

    def _counting(self, call: dict[str, Any], ledger: CallLedger) -> dict[str, Any]:
        """Seed ``ledger`` with the calls the run counted so far on each limit this task's
        calls count against (``call["ledger"]``: ``{key: [calls, last start]}``, from the
        workflow, see ``RunWorkflow._counted``): the runner checks and counts each call as
        in a run in one process, with the same outcomes and messages. The keys, with what
        the ledger counts each by (a tool's name, a policy's :class:`Limit`)."""
        given = call.get("ledger")
        if not given:
            return {}
        limits = [
            lim
            for p in (self._run_policies(call["approval"]) if call.get("approval") else ())
            for lim in getattr(p, "limits", ())
        ]
        counting: dict[str, Any] = {}
        for key, (calls, last_at) in given.items():
            kind, _, name = key.partition(":")
            if kind == "tool":
                counting[key] = name
            elif kind == "limit" and name.isdigit() and 0 < int(name) <= len(limits):
                counting[key] = limits[int(name) - 1]
            else:
                continue
            ledger.seed(counting[key], int(calls), last_at)
        return counting

    def _run_policies(self, approval: dict[str, Any]) -> tuple[Interceptor, ...]:
        """The run's approval rules as this worker's policies (made once per set of rules);
        a task fails, not retried, when the worker cannot make them."""
        key = json.dumps(approval, sort_keys=True)
        found = self._policies.get(key)
        if found is not None:
            return found
        if self.run_policies is None:
            raise ApplicationError(
                f"the worker {self.identity} cannot apply the run's approval rules (--policy, "
                "--ask): start workers with dagagent worker, or serve(..., "
                "run_policies=dagagent.approval.run_policies)",
                type="ConfigError",
                non_retryable=True,
            )
        try:
            made = tuple(self.run_policies(approval))
        except Exception as exc:
            raise ApplicationError(
                f"the worker {self.identity} cannot apply the run's approval rules: {exc}",
                type="ConfigError",
                non_retryable=True,
            ) from None
        self._policies[key] = made
        return made

    def _prior(self, graph: PlanGraph, call: dict[str, Any]) -> dict[str, TaskResult] | None:
        """What the runner takes as already done: for a window of a map (``n`` elements in
        all), every element outside it and those it finished before its worker was lost;
        for a map put together from its chunks (``assemble``), every element."""
        task_id = call["task_id"]
        window = call.get("window")
        if not call.get("assemble") and window is None:
            return None
        finished = {e["task_id"]: TaskResult.validate(_record(e)) for e in call.get("done") or ()}
        if window is None:
            elements = [finished[f"{task_id}[{i}]"] for i in range(len(finished))]
        else:
            start, stop = window
            elements = []
            for i in range(call["n"]):
                name = f"{task_id}[{i}]"
                if name in finished:
                    elements.append(finished[name])
                elif start <= i < stop:  # to run: a waiting element is what a resume runs
                    elements.append(TaskResult(task_id=name, status=TaskStatus.WAITING))
                else:  # another chunk's: stands, unread
                    elements.append(TaskResult(task_id=name, status=TaskStatus.SUCCEEDED))
        return {task_id: TaskResult(task_id=task_id, status=TaskStatus.WAITING, elements=elements)}

    def _graph(self, call: dict[str, Any], given: Sequence[Any]) -> tuple[PlanGraph, Sequence[Any]]:
        """The graph an activity's task runs in, and the outputs of its dependencies (then
        the conversation, see :meth:`run_task`): its task alone, ``call["task"]``, with its
        dependencies, ``call["deps"]``, whose outputs are ``given``; in a run started
        before the workflow's patch ``dagagent-run-task-alone``, the plan's JSON text comes
        first in ``given`` (read and validated once per plan and worker)."""
        doc = call.get("task")
        if doc is not None:
            return self._task_graph(doc, call["deps"]), given
        plan, *outputs = given
        graph = self._graphs.get(plan)
        if graph is not None:
            self._graphs.move_to_end(plan)
            return graph, outputs
        try:  # its shape only: each task checks its own tool (see _runner)
            graph = validate(json.loads(plan))
        except PlanValidationError as exc:
            raise self._unreadable(exc) from None
        self._graphs[plan] = graph
        if len(self._graphs) > _GRAPHS_KEPT:
            self._graphs.popitem(last=False)
        return graph, outputs

    def _task_graph(self, doc: dict[str, Any], deps: Sequence[str]) -> PlanGraph:
        """The graph of one task (its JSON ``doc``) whose dependencies are ``deps``: what
        the task runner reads of a plan to run that task (its template, its dependencies),
        checked as :func:`~dagagent.graph.validate` checks it (its tool, on the worker: see
        :meth:`_runner`). Reading a task costs less than looking it up would."""
        try:
            plan, kind_issues = read_plan({"tasks": [doc]})
            task = plan.tasks[0]
            issues, template, mine = check_task(task, set(deps), None, kind_issues)
        except PlanError as exc:  # PlanLoadError: not a task at all
            raise self._unreadable(exc) from None
        if issues:
            raise self._unreadable(PlanValidationError(issues))
        return PlanGraph(
            plan, {task.id: template}, [], dependencies={task.id: tuple(mine)}, levels=[[task.id]]
        )

    def _unreadable(self, exc: PlanError) -> ApplicationError:
        issues = "; ".join(str(i) for i in getattr(exc, "issues", ())) or str(exc)
        return ApplicationError(
            f"the worker {self.identity} cannot read the plan: {issues}",
            type="PlanValidationError",
            non_retryable=True,
        )


class _Seam:
    """The model seam of a task runner whose agent tasks are sub-solves: no model (a
    sub-solve task's agent runner does not call one), and ``agent_runner``."""

    def __init__(self, agent_runner: Any) -> None:
        self.llm = self  # what the runner checks for: the task has what it needs
        self.agent_runner = agent_runner


def _holds(when: str, outputs: dict[str, Any]) -> bool:
    """Whether a task's condition holds on ``outputs``; ``True`` for a condition on each
    element (``${@item}``), which the chunks decide element by element."""
    try:
        return bool(parse_condition(when).decide(outputs))
    except Exception:
        return "@" in when  # an element's condition cannot be decided here; else: settled there


def _effect_records(docs: Sequence[dict[str, Any]] | None) -> list[Any]:
    """The records of calls a driver sends with a task (a resumed run's calls in doubt, the
    calls of the runs a revision revises: the JSON of the run store's ``EffectRecord``):
    what :class:`~dagagent.runner.Effects` reads of each, by attribute (the worker has no
    run store)."""
    return [SimpleNamespace(**doc) for doc in docs or ()]


def _record(doc: dict[str, Any]) -> dict[str, Any]:
    """A result's JSON as :meth:`TaskResult.validate` takes it."""
    return {k: v for k, v in doc.items() if k != "duration_s"}


@contextmanager
def _heartbeats(
    reported: list[dict[str, Any]],
    if_lost: Callable[[], dict[str, Any] | None],
    named: str | None = None,
) -> Iterator[None]:
    """While the block runs, tell the server the worker is alive (and which elements it
    finished, and what ``if_lost`` says the activity leaves behind if the worker is lost
    now) four times per heartbeat timeout. ``named``: this worker, told at once and in every
    heartbeat (``worker``; a task with side effects: see ``RunWorkflow._call``). Local
    activities have no heartbeat.

    A timer of the activity's event loop (Temporal runs activities on asyncio), not a task
    of its own: a task costs a quick tool's activity more than its call."""
    info = activity.info()
    timeout = info.heartbeat_timeout
    if info.is_local or not timeout:
        yield
        return
    every = max(0.05, timeout.total_seconds() / 4)
    look = min(every, _CALLS_LOOK_S)
    loop = asyncio.get_running_loop()
    told: tuple[str, ...] = ()
    since = 0.0
    timer: asyncio.TimerHandle | None = None
    if named is not None:
        activity.heartbeat(list(reported), {**(if_lost() or {}), "worker": named})

    def beat() -> None:  # in the activity's context (the timer's): heartbeat() knows it
        nonlocal told, since, timer
        timer = loop.call_later(look, beat)
        since += look
        left = if_lost()
        flying = tuple(c["call_id"] for c in (left or {}).get("model_calls") or ())
        if since < every and flying == told:
            return  # at once when an agent's model call starts or ends, else every ``every``
        told, since = flying, 0.0
        if named is not None:
            left = {**(left or {}), "worker": named}
        if left is None:
            activity.heartbeat(list(reported))
        else:
            activity.heartbeat(list(reported), left)

    # a call shorter than ``every`` never heartbeats: no request for nothing
    timer = loop.call_later(look, beat)
    try:
        yield
    finally:
        timer.cancel()  # the last one set


async def _beating(step: Awaitable[_T]) -> _T:
    """``step``'s result, the activity heartbeating while it runs (as ``run_task`` does), so
    that a worker lost under one of the workflow's own steps is noticed at the heartbeat
    timeout, and a slow one is not taken for lost."""
    with _heartbeats([], _nothing_left):
        return await step


def _nothing_left() -> None:
    return None


def _has_effects(graph: PlanGraph, task_id: str, runner: TaskRunner) -> bool:
    """Whether task ``task_id`` calls a tool with side effects."""
    task = graph.tasks.get(task_id)
    if not isinstance(task, ToolTask) or task.tool not in runner.registry:
        return False
    return bool(runner.registry.get(task.tool).side_effects)


def _spent(gate: _Allowance, model: Any, lost: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """What an activity spent of a solve's budget: its tool calls (``gate``), its agent
    model's calls, and the calls ``lost`` under way (as cut off)."""
    spent = {**gate.spent(), **(model.spent() if model is not None else {})}
    spent["low"] = gate.low or spent.get("low")
    if not lost:
        return spent
    spent["model_calls"] = spent.get("model_calls", 0) + len(lost)
    spent["tokens"] = spent.get("tokens", 0) + sum(
        c.get("input_tokens", 0) + c.get("output_tokens", 0) for c in lost
    )
    spent["cost"] = spent.get("cost", 0.0) + sum(c.get("cost_usd") or 0.0 for c in lost)
    return spent


def _if_lost(gate: _Allowance | None, model: Any) -> dict[str, Any] | None:
    """What an activity would leave behind if its worker were lost now: what it spent of a
    solve's budget (``budget``), its agent model's calls under way, as cut off
    (``model_calls``); ``None``: nothing."""
    lost: list[dict[str, Any]] = []
    if model is not None:
        lost = model.cut_off(
            f"its worker {worker_identity()} was lost while the call was under way "
            "(an attempt of the agent task); the provider may have charged it"
        )
    if gate is None and not lost:
        return None
    left: dict[str, Any] = {"model_calls": lost}
    if gate is not None:
        left["budget"] = _spent(gate, model, lost)
    return left


class _Allowance:
    """The interceptor that spends what a solve's budget lets one activity make of tool
    calls (``grant``, held for it by the run's workflow): outside every other one, it counts
    each call and denies the one past the allowance, as the budget's own gate does in a
    local solve (the workflow holds fewer than the task may make only when the budget has no
    more)."""

    def __init__(self, grant: Mapping[str, Any]) -> None:
        held = grant.get("tool_calls")
        self.allowed: int | None = None if held is None else int(held)
        limits = grant.get("limits") or {}
        self.limit = int(grant.get("limit") or limits.get("tool_calls") or 0)
        self.made = 0
        #: Why the budget ran low here: the first call denied (``None``: none was).
        self.low: str | None = None

    async def __call__(self, call: ToolInvocation, call_next: CallNext) -> Any:
        if self.allowed is not None and self.made + 1 > self.allowed:
            message = tool_calls_refused(call.tool.name, call.task_id, self.limit)
            self.low = self.low or message
            call.decide("deny", "budget", message)
            raise TaskDeniedError(message, decided_by="budget")
        self.made += 1
        return await call_next(call)

    def spent(self) -> dict[str, Any]:
        return {"tool_calls": self.made, "low": self.low}
