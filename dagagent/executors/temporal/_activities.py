"""What runs on the workers: one task through the task runner, as an activity.

:class:`Activities` holds a worker's registry. Its activity ``dagagent.run_task`` gets the
call (which task of which run; for a map, which window of its elements), the plan (its JSON
text) and the output of each dependency; it reads and validates the plan (once per plan and
worker; each task checks its own tools against the worker's), makes a
:class:`~dagagent.runner.TaskRunner` that knows those outputs, and runs the task with it:
references, argument validation, retries and their spacing, the timeout, the map's
elements, the result record: all as in a local run. The result goes back as the JSON of
:meth:`TaskResult.to_json_dict <dagagent.results.TaskResult.to_json_dict>`.

A map's window: the elements outside it stand as placeholders and those the window finished
before its worker was lost stand as they were reported (see ``_window_prior``), so the
runner runs only the rest (the same road as a resumed run's waiting elements). Finished
elements are reported in the activity's heartbeats.

A task run again after its worker was lost (``in_doubt``), whose tool has side effects and
a reconciler: the calls it had not finished are in doubt, and the reconciler decides about
each (``Effects.lost_during`` in the runner).

Each call goes through the worker's interceptors (approval rules, redaction, tracing),
with the decisions a person took about the calls that waited (a resumed run's answers);
the result names the worker that ran it (``worker``, ``pid@host``), and each element of a
map the worker that ran its chunk.

A worker whose registry lacks a tool of the plan (or has one whose arguments differ) fails
the task at once, saying what the worker serves: the error is not retried.
"""

from __future__ import annotations

import json
import os
import socket
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import anyio
from temporalio import activity
from temporalio.exceptions import ApplicationError

from ...conditions import parse_condition
from ...errors import ConfigError, PlanValidationError
from ...events import Event, TaskElementFinished
from ...graph import validate
from ...plan import AgentTask
from ...references import Template
from ...results import ApprovalAnswer, TaskResult, TaskStatus
from ...runner import Redaction, TaskRunner, ToolCalls
from ...settings import TaskRetryPolicy
from ._workflow import COUNT_ELEMENTS, RUN_TASK

if TYPE_CHECKING:
    from ...graph import PlanGraph
    from ...runner import Interceptor
    from ...tools import Registry

__all__ = ["Activities", "AgentModels", "RunPolicies", "worker_identity"]

#: How a worker gets the model of a run's agent tasks: called with the run's model spec
#: (``RunInput.model``), an async context manager whose value has ``llm`` and
#: ``agent_runner`` (for the task runner), ``records()``, the JSON of each model call made,
#: and ``redaction``, set to what the worker's redacting interceptors hide, which the
#: records' texts then hide too (``dagagent.workflows.temporal_solve`` provides it; this
#: layer knows no model).
AgentModels = Callable[[dict[str, Any]], AbstractAsyncContextManager[Any]]

RunPolicies = Callable[[Mapping[str, Any]], Sequence["Interceptor"]]
"""``(a run's approval rules as data) -> interceptors``: see
:func:`dagagent.approval.run_policies`."""

# Plans validated on this worker (the most recent), by their JSON text.
_GRAPHS_KEPT = 32


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
    ) -> None:
        self.registry = registry
        self.task_queue = task_queue
        self.identity = identity or worker_identity()
        self.agents = agents
        self.interceptors = tuple(interceptors)
        for i in self.interceptors:
            if getattr(i, "limits", None):
                raise ConfigError(
                    f"worker interceptor {i!r} has limits, which count a run's calls "
                    "together: a worker sees one task's calls at a time, so it cannot keep "
                    "them; give the worker rules without limits"
                )
        self.run_policies = run_policies
        self._redaction = Redaction(self.interceptors)
        self._policies: dict[str, tuple[Interceptor, ...]] = {}
        self._graphs: OrderedDict[str, PlanGraph] = OrderedDict()

    def definitions(self) -> list[Any]:
        return [self.run_task, self.count_elements]

    # -- the activities ----------------------------------------------------------------------

    @activity.defn(name=RUN_TASK)
    async def run_task(self, call: dict[str, Any], plan: str, *outputs: Any) -> Any:
        """Run one task (or a window of a map's elements) of ``plan`` (its JSON text) and
        return its result's JSON; an agent task's model calls under ``model_calls`` (see
        :data:`AgentModels`)."""
        model = call.get("model")
        graph = self._graph(plan)
        task = graph.tasks.get(call["task_id"])
        if (
            model is None
            or self.agents is None
            or call.get("assemble")
            or not isinstance(task, AgentTask)  # no model call: no client to open
        ):
            return await self._run_task(call, graph, outputs, None)
        async with self.agents(model) as agent_model:
            agent_model.redaction = self._redaction
            doc = await self._run_task(call, graph, outputs, agent_model)
            doc["model_calls"] = agent_model.records()
            return doc

    async def _run_task(
        self, call: dict[str, Any], graph: PlanGraph, outputs: Sequence[Any], model: Any
    ) -> Any:
        runner = self._runner(call, graph, outputs, model)
        task_id = call["task_id"]
        if call.get("in_doubt"):
            # run again after its worker was lost: a call not known to have ended is in
            # doubt, its reconciler's to decide; nobody can be asked here, so a call it
            # cannot decide about is not made (the task is denied)
            runner.calls.effects.lost_during(task_id)
            runner.calls.effects.in_doubt = "deny"
        window = call.get("window")
        reported: list[dict[str, Any]] = list(call.get("done") or ())
        if window is not None:
            start, stop = window

            def keep(event: Event) -> None:
                if isinstance(event, TaskElementFinished) and start <= event.index < stop:
                    reported.append({**event.result.to_json_dict(), "worker": self.identity})

            runner.emit = keep
        async with anyio.create_task_group() as tg:
            tg.start_soon(_heartbeat, reported)
            r = await runner.run_task(task_id)
            tg.cancel_scope.cancel()
        doc = r.to_json_dict()
        if window is not None:
            doc["elements"] = doc["elements"][start:stop] if doc.get("elements") else []
        return self._where(doc, ran_here=not call.get("assemble"))

    @activity.defn(name=COUNT_ELEMENTS)
    async def count_elements(
        self, call: dict[str, Any], plan: str, *outputs: Any
    ) -> dict[str, Any]:
        """How many elements a map task's list has: ``{"n": ...}``, or ``{"result": ...}``,
        the task's failure, when it has no list (or one too long) to map over."""
        runner = self._runner(call, self._graph(plan), outputs)
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

    # -- how -----------------------------------------------------------------------------------

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
    ) -> TaskRunner:
        task_id = call["task_id"]
        prior = self._prior(graph, call)
        answers: dict[str, list[ApprovalAnswer]] = {}
        for key, given in (call.get("answers") or {}).items():
            answers[key] = [ApprovalAnswer.model_validate(a) for a in given]
        interceptors = self.interceptors
        if call.get("approval"):  # the run's own rules, after the worker's interceptors
            interceptors = (*interceptors, *self._run_policies(call["approval"]))
        runner = TaskRunner(
            graph,
            self.registry,
            run_id=call["run_id"],
            calls=ToolCalls(call["run_id"], self.registry, interceptors, answers=answers),
            redaction=self._redaction,
            retry=TaskRetryPolicy(**call["retry"]),
            on_failure=call["on_failure"],
            max_elements=call["max_elements"],
            prior=prior,
            llm=model.llm if model is not None else None,
            agent_runner=model.agent_runner if model is not None else None,
            reuse={t: (fp, out) for t, (fp, out) in (call.get("reuse") or {}).items()},
        )
        runner.outputs.update(zip(call["deps"], outputs, strict=True))
        task = graph.tasks.get(task_id)
        if task is None:
            raise ApplicationError(f"task {task_id!r} is not in the plan", non_retryable=True)
        for name in task.tool_names or ():
            if name not in self.registry:
                served = ", ".join(sorted(self.registry.names)) or "none"
                raise ApplicationError(
                    f"the worker {self.identity} on task queue {self.task_queue!r} does not "
                    f"serve tool {name!r} (it serves: {served}); start workers with the same "
                    "tools as the driver",
                    type="UnknownToolError",
                    non_retryable=True,
                )
        return runner

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

    def _graph(self, plan: str) -> PlanGraph:
        """The plan whose JSON text is ``plan``, read and validated once per worker: every
        activity of a run carries the same text."""
        graph = self._graphs.get(plan)
        if graph is not None:
            self._graphs.move_to_end(plan)
            return graph
        try:  # its shape only: each task checks its own tool (see _runner)
            graph = validate(json.loads(plan))
        except PlanValidationError as exc:
            issues = "; ".join(str(i) for i in exc.issues)
            raise ApplicationError(
                f"the worker {self.identity} cannot read the plan: {issues}",
                type="PlanValidationError",
                non_retryable=True,
            ) from None
        self._graphs[plan] = graph
        if len(self._graphs) > _GRAPHS_KEPT:
            self._graphs.popitem(last=False)
        return graph


def _holds(when: str, outputs: dict[str, Any]) -> bool:
    """Whether a task's condition holds on ``outputs``; ``True`` for a condition on each
    element (``${@item}``), which the chunks decide element by element."""
    try:
        return bool(parse_condition(when).decide(outputs))
    except Exception:
        return "@" in when  # an element's condition cannot be decided here; else: settled there


def _record(doc: dict[str, Any]) -> dict[str, Any]:
    """A result's JSON as :meth:`TaskResult.validate` takes it."""
    return {k: v for k, v in doc.items() if k != "duration_s"}


async def _heartbeat(reported: list[dict[str, Any]]) -> None:
    """Tell the server the worker is alive (and which elements it finished) four times per
    heartbeat timeout, until cancelled. Local activities have no heartbeat."""
    info = activity.info()
    timeout = info.heartbeat_timeout
    if info.is_local or not timeout:
        return
    every = max(0.05, timeout.total_seconds() / 4)
    while True:  # a call shorter than ``every`` never heartbeats: no request for nothing
        await anyio.sleep(every)
        activity.heartbeat(list(reported))
