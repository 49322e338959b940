"""Reading one streamed answer of the planner's model into a growing plan.

:class:`StreamedAnswer` takes the answer's events (text deltas, or the first tool call's
argument deltas), turns them into tasks with :class:`~dagagent.planners.reading.PlanText`
(the reader of every answer, streamed or not), checks each task the moment it is complete,
and adds it to the run's :class:`~dagagent.graph.GrowingGraph`, holds it until the tasks it
uses have come (:meth:`~dagagent.graph.PlanChecker.take`), or holds it until the whole plan
has validated. What it refuses ends the answer with a :class:`StreamStop` carrying the
issues. :mod:`dagagent.planners.streaming` runs the attempts around it.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import Issue, PlanLoadError
from ..events import Listener, TaskParsed
from ..graph import GrowingGraph, PlanChecker, TaskCheck
from ..llm import LLMResponse, StreamEnd, TextDelta, ToolCallDelta, Usage, closing_stream
from ..plan import AgentTask, Task, ToolTask, load_plan
from .conversation import referenced_turns
from .incremental import JsonTaskStream, StreamedPlanError
from .parsing import task_data
from .prompts import shorten
from .reading import PlanText
from .schema import drop_null_optionals

if TYPE_CHECKING:
    from ..approval import Policy
    from ..tools import Registry

__all__ = [
    "StreamSettings",
    "StreamStop",
    "StreamedAnswer",
    "call_key",
]


class StreamSettings(Protocol):
    """What reading an answer needs to know of the round it belongs to."""

    registry: Registry
    agent_tasks: bool
    solve_depth: int | None
    strict: bool
    replan_of: Any
    policy: Policy | None
    listeners: tuple[Listener, ...]
    max_tasks: int
    max_task_chars: int
    max_repeats: int
    began: float
    run_id_now: str
    #: Tasks a plan may reference without writing them (a session's earlier turns).
    given: Mapping[str, Task]

    def emit(self, event: Any) -> None: ...


class StreamStop(Exception):
    """Ends an attempt's stream: these issues reject it."""

    def __init__(self, issues: list[Issue]) -> None:
        super().__init__("; ".join(str(i) for i in issues))
        self.issues = issues


def call_key(task: Task) -> str:
    """What makes two tasks the same call, whatever their ids."""
    call: list[Any]
    if isinstance(task, ToolTask):
        call = [task.tool, None, task.args, None]
    else:
        call = [None, task.instruction, {"solve": True} if task.solve else {}, task.tools]
    return json.dumps([*call, sorted(task.depends_on)], sort_keys=True, default=str)


class StreamedAnswer:
    """One streamed answer: reads it, checks each task, feeds the graph or holds the task."""

    def __init__(
        self,
        owner: StreamSettings,
        graph: GrowingGraph,
        seeded: Mapping[str, Task],
    ) -> None:
        self.owner = owner
        self.graph = graph
        self.checker = PlanChecker(
            owner.registry, agent_tasks=owner.agent_tasks, solve_depth=owner.solve_depth
        )
        self.seeded = seeded
        self.held: list[TaskCheck] = []
        self.held_ids: set[str] = set()
        self.calls: dict[str, int] = {}
        self.count = 0
        self.raw = ""
        self.usage = Usage()
        self.finish_reason: str | None = None
        for task in seeded.values():
            for check in self.checker.take(task)[0]:
                graph.add(check)

    # -- one task -------------------------------------------------------------------------

    def take(self, raw: Any) -> None:
        """A complete task from the stream (a parsed JSON object, or a task read from an
        LLMCompiler line): check it, then run or hold it."""
        owner = self.owner
        index = self.count
        task = raw if isinstance(raw, (ToolTask, AgentTask)) else self._load(raw, index)
        seeded = self.seeded.get(task.id)
        if seeded is not None and call_key(seeded) == call_key(task):
            return  # a task that ran in an earlier attempt, planned again: it is that task
        given = self.owner.given.get(task.id)
        if given is not None and call_key(given) == call_key(task):
            if task.id not in self.checker.ids:
                for check in self.checker.take(given)[0]:
                    self.graph.add(check)
            return  # an earlier turn's outputs, written out: the given task itself
        self.count += 1
        if self.count > owner.max_tasks:
            raise StreamStop(
                [
                    Issue(
                        "too_many_tasks",
                        task.id,
                        f"the plan has more than {owner.max_tasks} tasks: plan fewer, larger steps",
                    )
                ]
            )
        key = call_key(task)
        seen = self.calls.get(key, 0) + 1
        self.calls[key] = seen
        if seen > owner.max_repeats + 1:
            raise StreamStop(
                [
                    Issue(
                        "repeated_task",
                        task.id,
                        f"the same call ({task.label} with the same arguments) is "
                        f"planned {seen} times: the plan repeats itself; plan each call once",
                    )
                ]
            )
        self._take_given(task)
        accepted, issues = self.checker.take(task)
        if issues:
            raise StreamStop(issues)
        for check in accepted:  # the task, and the tasks that waited for it (none: it waits)
            self._add(check)

    def _take_given(self, task: Task) -> None:
        """Put the given tasks ``task`` references (an earlier turn's ``${turnN...}``) in
        the plan before it, once each, unless the plan defines them itself."""
        given = self.owner.given
        if not given:
            return
        source = task.model_dump(mode="json", exclude_defaults=True)
        for tid in referenced_turns(source, given):
            if tid in self.checker.ids:
                continue
            accepted, issues = self.checker.take(given[tid])
            if issues:  # pragma: no cover - a given task is valid for the session's tools
                raise StreamStop(issues)
            for check in accepted:
                self.graph.add(check)

    def _add(self, check: TaskCheck) -> None:
        """Run a task that passed its check, or hold it until the plan is whole."""
        owner = self.owner
        held = self._must_hold(check)
        tid = check.task.id
        owner.emit(
            TaskParsed(owner.run_id_now, tid, check.task, time.monotonic() - owner.began, held)
        )
        if held:
            self.held.append(check)
            self.held_ids.add(tid)
        else:
            self.graph.add(check)

    def _load(self, raw: Any, index: int) -> Task:
        if not isinstance(raw, dict):
            raise StreamStop(
                [Issue("schema", None, f"tasks[{index}] is not a JSON object: {shorten(raw, 80)}")]
            )
        value: dict[str, Any] = {"goal": "", "tasks": [task_data(raw)]}
        drop_null_optionals(value, self.owner.registry, keep_nullable=not self.owner.strict)
        try:
            return load_plan(value).tasks[0]
        except PlanLoadError as exc:
            found = exc.issues or [Issue("schema", None, str(exc))]
            tid = raw.get("id") if isinstance(raw.get("id"), str) else None
            raise StreamStop(
                [
                    Issue(
                        i.code, i.task_id or tid, i.message.replace("tasks[0]", f"tasks[{index}]")
                    )
                    for i in found
                ]
            ) from None

    def _must_hold(self, check: TaskCheck) -> bool:
        if any(d in self.held_ids for d in check.dependencies):
            return True
        task = check.task
        registry, policy = self.owner.registry, self.owner.policy
        if isinstance(task, AgentTask):
            names = task.tool_names
            tools = [registry.get(n) for n in names or registry.names if n in registry]
            if any(t.side_effects for t in tools):
                return True
            return policy is not None and any(
                policy.preview(t, None, task.id) != "allow" for t in tools
            )
        tool = registry.get(task.tool)
        if tool.side_effects:
            return True
        if policy is None:
            return False
        literal = check.template.literal_keys() if check.template.refs else check.template.literal
        return policy.preview(tool, literal, task.id) != "allow"

    # -- the stream -----------------------------------------------------------------------

    async def read(self, events: AsyncIterator[Any]) -> None:
        """Read the answer, taking each task as it completes; raise :class:`StreamStop`."""
        text = PlanText(self.owner.registry, max_task_chars=self.owner.max_task_chars)
        call = JsonTaskStream(max_task_chars=self.owner.max_task_chars)
        final: LLMResponse | None = None
        after = 0  # characters the model wrote after the plan's JSON ended
        try:
            async with closing_stream(events) as stream:
                async for event in stream:
                    if text.closed or call.closed:
                        if isinstance(event, StreamEnd):
                            final = event.response
                            break
                        after += len(getattr(event, "text", "") or getattr(event, "arguments", ""))
                        if after > self.owner.max_task_chars:
                            break  # the plan is whole; what the model adds is not read
                        continue
                    if isinstance(event, TextDelta):
                        tasks = text.feed(event.text)
                        if call.started:
                            tasks = []
                    elif isinstance(event, ToolCallDelta):
                        if event.index != 0:
                            continue
                        tasks = call.feed(event.arguments)
                        if text.started:
                            tasks = []
                    elif isinstance(event, StreamEnd):
                        final = event.response
                        continue
                    else:
                        continue
                    for raw in tasks:
                        self.take(raw)
        except StreamedPlanError as exc:
            self.raw = text.text or call.text
            raise StreamStop([exc.issue]) from None
        finally:
            self.raw = (call.text if call.started and not text.started else text.text) or call.text
        if final is not None:
            self.usage = final.usage
            self.finish_reason = final.finish_reason
        if final is not None and final.finish_reason == "length":
            raise StreamStop(
                [
                    Issue(
                        "truncated",
                        None,
                        "the answer was cut off by the output token limit (finish_reason "
                        "'length'): plan fewer or more compact tasks",
                    )
                ]
            )
        source = call if call.started and not text.started else text
        try:
            rest = source.finish()
        except StreamedPlanError as exc:
            raise StreamStop([exc.issue]) from None
        for raw in rest:
            self.take(raw)
        waiting = self.checker.finish()
        if waiting:
            raise StreamStop(waiting)
        if not self.graph.tasks and not self.held:
            raise StreamStop([Issue("empty_plan", None, "the plan has no tasks")])
