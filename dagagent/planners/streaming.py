"""Streamed planning: tasks start while the model is still writing the plan.

::

    round_ = await plan_and_execute_streamed(planner, goal, registry)
    round_.plan, round_.result, round_.planning   # the final plan, its RunResult, how planned

**The seam** (one call, one round of planning and running)::

    async def plan_and_execute_streamed(
        planner, goal, registry, *, llm=None, replan_of=None, feedback=None, reuse=None,
        settings=None, interceptors=(), listeners=(), store=None, policy=None,
        parent_id=None, run_id=None, max_tasks=DEFAULT_MAX_TASKS, max_task_chars=20_000,
        max_repeats=1,
    ) -> StreamedRound

``planner`` is an :class:`~dagagent.planners.LLMPlanner`, or an
:class:`~dagagent.planners.LLMReplanner` with ``replan_of`` (a record of the run to revise:
``.plan``, ``.tasks``, ``.id``) and ``feedback``. ``reuse`` and ``parent_id`` are passed to
the run as :func:`dagagent.execute` takes them; ``policy`` is only read (to hold tasks, see
below): give it in ``interceptors`` as well to have it decide. Returns a
:class:`StreamedRound`; raises :class:`~dagagent.errors.PlanningError` when no attempt gave
a valid plan (every run of those attempts is in the store), and model errors as themselves.

**How it goes.** The planner's model is asked for a streamed completion. The answer is read
as it grows (:class:`~dagagent.planners.incremental.JsonTaskStream`: the text, or the first
tool call's argument deltas when the model answers with a tool call) and each task is
checked the moment it is complete (:class:`~dagagent.graph.PlanChecker`: its tool exists,
its arguments fit, it depends only on tasks before it). A valid task goes straight into the
run's :class:`~dagagent.graph.GrowingGraph`, which the executor is already running; a
:class:`~dagagent.events.TaskParsed` event tells listeners (with the seconds since planning
began). When the answer ends and every task was valid, the plan is complete.

**Held tasks.** A task whose tool declares ``side_effects=True``, that ``policy`` would ask
about or deny (or might, depending on arguments not known yet), an agent task that may use
such a tool, and any task depending on a held task, waits until the whole plan has
validated: a plan rejected halfway never sent the e-mail. Held tasks join the plan in the
order they came, after the tasks that were not held.

**An invalid task** stops the stream at once (the connection is closed): the run stops as a
failure would stop it (``on_failure``: ``cancel`` cancels what runs, ``continue`` lets it
finish), held tasks never run, and the healing loop sends the issues back to the model with
the tasks that already ran and their outputs, asking for the rest of the plan only. The
next attempt is a new run (a child of the one before) in which those tasks are reused, not
run again; a task of the new answer identical to one of them (same id and call) is taken
as that task.

**Bounded output.** The request asks for at most ``planner.max_tokens`` output tokens
(default :func:`default_max_tokens`, enough for a plan of ``max_tasks`` tasks), and the plan
schema bounds the tasks to ``max_tasks``. Each of these ends the attempt with an issue as
soon as it shows, instead of after a timeout: a task that repeats an earlier one (same tool,
arguments and dependencies) more than ``max_repeats`` times (``repeated_task``), more than
``max_tasks`` tasks (``too_many_tasks``), one task (or the prose before the plan) running
past ``max_task_chars`` characters (``runaway``), invalid JSON (``not_json``).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from .. import telemetry
from ..errors import ConfigError, Issue, PlanningError
from ..events import Listener, get_logger
from ..graph import GrowingGraph
from ..llm import (
    AssistantMessage,
    Message,
    ResponseFormat,
    UserMessage,
)
from ..plan import Plan, Task, ToolTask, task_fingerprint
from ..results import RunResult, TaskStatus
from ..run import execute, new_run_id
from ..text import shorten as shorten_text
from ._answer import StreamedAnswer, StreamStop
from .heal import HealingPlanner, PlanAttempt, PlanningResult
from .planner import LLMPlanner
from .prompts import feedback_prompt, shorten
from .replan import LLMReplanner, replan_warnings

if TYPE_CHECKING:
    from ..approval import Policy
    from ..runner import Interceptor
    from ..settings import RunSettings
    from ..store import RunStore
    from ..tools import Registry

__all__ = [
    "DEFAULT_MAX_TASKS",
    "StreamedRound",
    "default_max_tokens",
    "plan_and_execute_streamed",
]

DEFAULT_MAX_TASKS = 50
"""The most tasks a streamed plan may have unless told otherwise."""

_TOKENS_PER_TASK = 200  # a task of a plan: id, tool, a few arguments, dependencies
_TOKENS_OVERHEAD = 500  # the plan around its tasks, and a sentence of prose


def default_max_tokens(max_tasks: int) -> int:
    """Output tokens enough for a plan of ``max_tasks`` tasks (about 200 per task)."""
    return _TOKENS_OVERHEAD + _TOKENS_PER_TASK * max_tasks


@dataclass(frozen=True)
class StreamedRound:
    """One round of streamed planning and running: the final ``plan``, the ``result`` of its
    run, and ``planning`` (attempts, issues, usage). ``runs``: the run of every attempt, the
    last one being ``result`` (earlier ones stopped at an invalid task)."""

    plan: Plan
    result: RunResult
    planning: PlanningResult
    runs: tuple[RunResult, ...]


def _bounded(fmt: ResponseFormat, max_tasks: int) -> ResponseFormat:
    """The plan format with at most ``max_tasks`` tasks (``maxItems``)."""
    schema = copy.deepcopy(fmt.schema)
    tasks = schema.get("properties", {}).get("tasks")
    if isinstance(tasks, dict):
        tasks["maxItems"] = max_tasks
    return ResponseFormat(fmt.name, schema, strict=fmt.strict)


class _Streamer:
    """The options of one streamed round, and what its attempts share."""

    def __init__(
        self,
        planner: HealingPlanner,
        registry: Registry,
        *,
        replan_of: Any,
        policy: Policy | None,
        listeners: tuple[Listener, ...],
        max_tasks: int,
        max_task_chars: int,
        max_repeats: int,
    ) -> None:
        self.llm = planner.llm
        self.registry = registry
        self.agent_tasks = planner.agent_tasks
        self.strict = planner.strict
        self.max_attempts = planner.max_attempts
        self.temperature = planner.temperature
        self.replan_of = replan_of
        self.policy = policy
        self.listeners = listeners
        self.max_tasks = max_tasks
        self.max_task_chars = max_task_chars
        self.max_repeats = max_repeats
        self.max_tokens = planner.max_tokens or default_max_tokens(max_tasks)
        fmt = planner.response_format
        self.response_format = _bounded(fmt, max_tasks) if fmt is not None else None
        self.began = time.monotonic()
        self.run_id_now = ""  # the run of the attempt being read (for TaskParsed)

    def emit(self, event: Any) -> None:
        for listener in self.listeners:
            try:
                listener(event)
            except Exception as exc:  # a broken listener must not break planning
                get_logger().warning("listener.failed", error=repr(exc), event_kind=event.kind)


async def plan_and_execute_streamed(
    planner: LLMPlanner | LLMReplanner,
    goal: str,
    registry: Registry,
    *,
    llm: Any = None,
    replan_of: Any = None,
    feedback: str | None = None,
    reuse: Mapping[str, tuple[str, Any]] | None = None,
    settings: RunSettings | None = None,
    interceptors: Sequence[Interceptor] = (),
    listeners: Sequence[Listener] = (),
    store: RunStore | str | Path | None = None,
    policy: Policy | None = None,
    parent_id: str | None = None,
    run_id: str | None = None,
    max_tasks: int = DEFAULT_MAX_TASKS,
    max_task_chars: int = 20_000,
    max_repeats: int = 1,
) -> StreamedRound:
    """Plan ``goal`` with a streamed answer and run each task as soon as it is valid (see
    the module docstring)."""
    goal = (goal or (replan_of.plan.goal if replan_of is not None else "")).strip()
    if not goal:
        raise ConfigError("the goal is empty: say what the plan should achieve")
    if max_tasks < 1:
        raise ConfigError(f"max_tasks must be at least 1, not {max_tasks}")
    owner = _Streamer(
        planner,
        registry,
        replan_of=replan_of,
        policy=policy,
        listeners=tuple(listeners),
        max_tasks=max_tasks,
        max_task_chars=max_task_chars,
        max_repeats=max_repeats,
    )
    log = get_logger(planner="streamed")
    history = _first_messages(planner, goal, replan_of, feedback)
    reused: dict[str, tuple[str, Any]] = dict(reuse or {})
    seeded: dict[str, Task] = {}
    attempts: list[PlanAttempt] = []
    runs: list[RunResult] = []
    run_id = run_id or new_run_id()
    run_options: dict[str, Any] = {
        "settings": settings,
        "interceptors": interceptors,
        "listeners": owner.listeners,
        "llm": llm,
        "reuse": reused,
        "store": store,
    }
    for n in range(1, owner.max_attempts + 1):
        owner.run_id_now = run_id
        graph = GrowingGraph(goal)
        attempt = StreamedAnswer(owner, graph, seeded)
        options = {**run_options, "run_id": run_id, "parent_id": parent_id}
        issues, result = await _attempt_and_run(owner, attempt, history, registry, options)
        runs.append(result)
        attempts.append(
            PlanAttempt(attempt.raw, tuple(issues), attempt.usage, attempt.finish_reason)
        )
        if not issues:
            log.info("streamed planning succeeded", attempt=n, tasks=len(graph))
            warnings: tuple[Issue, ...] = ()
            if replan_of is not None:
                warnings = tuple(replan_warnings(replan_of.plan, graph.plan, replan_of.tasks))
            planning = PlanningResult(graph.plan, graph, tuple(attempts), warnings)
            return StreamedRound(graph.plan, result, planning, tuple(runs))
        log.info(
            "streamed planning attempt rejected", attempt=n, issues=[str(i) for i in issues[:5]]
        )
        ran = _carry_over(graph, result, seeded, reused)
        echo = shorten_text(attempt.raw, 12_000, one_line=False, fit=False)
        history.append(AssistantMessage(echo or "(empty answer)"))
        history.append(UserMessage(_feedback(issues, ran, result)))
        parent_id, run_id = run_id, new_run_id()
    raise PlanningError(
        f"no valid plan after {len(attempts)} attempt{'s' if len(attempts) != 1 else ''}"
        f" (goal: {shorten(goal, 80)}); the tasks that ran are in runs "
        + ", ".join(r.run_id for r in runs),
        attempts=[(a.raw, list(a.issues)) for a in attempts],
    )


async def _attempt_and_run(
    owner: _Streamer,
    attempt: StreamedAnswer,
    history: list[Message],
    registry: Registry,
    options: dict[str, Any],
) -> tuple[list[Issue], RunResult]:
    """Stream one answer into the attempt's graph while the graph runs; the answer's issues
    (none: the plan is whole and valid) and the run's result."""
    graph = attempt.graph
    issues: list[Issue] = []
    result: RunResult | None = None
    # Errors leave the task group as themselves (not wrapped in an exception group), once
    # the run has ended: a model that fails mid-answer stops the run as a failure would.
    failure: Exception | None = None

    async with anyio.create_task_group() as tg:

        async def run() -> None:
            nonlocal result, failure
            try:
                result = await execute(graph, registry, **options)
            except Exception as exc:  # e.g. a tool Dask cannot ship: planning stops too
                failure = exc
                tg.cancel_scope.cancel()

        tg.start_soon(run)
        try:
            with telemetry.operation("plan planner", telemetry.PLANNING, role="planner"):
                events = owner.llm.stream(
                    history,
                    response_format=owner.response_format,
                    max_tokens=owner.max_tokens,
                    temperature=owner.temperature,
                )
                await attempt.read(events)
        except StreamStop as stop:
            issues = stop.issues
            graph.close(aborted=True)
        except Exception as exc:
            failure = failure or exc
            graph.close(aborted=True)
        except BaseException:
            graph.close(aborted=True)
            raise
        else:
            for check in attempt.held:
                graph.add(check)
            graph.close()
    if failure is not None:
        raise failure
    assert result is not None
    return issues, result


def _first_messages(
    planner: LLMPlanner | LLMReplanner, goal: str, replan_of: Any, feedback: str | None
) -> list[Message]:
    if replan_of is not None:
        if not isinstance(planner, LLMReplanner):
            raise ConfigError("revising a run (replan_of=...) needs an LLMReplanner")
        return list(planner.messages(goal, replan_of.plan, replan_of.tasks, feedback=feedback))
    if not isinstance(planner, LLMPlanner):
        raise ConfigError("planning a goal needs an LLMPlanner (an LLMReplanner revises runs)")
    messages = list(planner.messages(goal))
    if feedback:
        messages.append(UserMessage(f"Keep in mind: {feedback}"))
    return messages


def _carry_over(
    graph: GrowingGraph,
    result: RunResult,
    seeded: dict[str, Task],
    reused: dict[str, tuple[str, Any]],
) -> list[str]:
    """Keep the tasks of a stopped attempt that succeeded, for the next attempt to reuse;
    returns their ids."""
    ran = []
    for tid, r in result.tasks.items():
        task = graph.tasks[tid]
        if r.status.ok and isinstance(task, ToolTask):
            seeded[tid] = task
            if r.status is TaskStatus.SUCCEEDED:
                reused[tid] = (task_fingerprint(task, r.args), r.output)
            ran.append(tid)
    return ran


def _feedback(issues: list[Issue], ran: list[str], result: RunResult) -> str:
    text = feedback_prompt(issues)
    done = [r for r in result.tasks.values() if r.status.ok and r.task_id in ran]
    failed = [
        r for r in result.tasks.values() if r.status in (TaskStatus.FAILED, TaskStatus.DENIED)
    ]
    parts = [text]
    if done:
        lines = [f"- {r.task_id}: output {shorten(r.output, 200)}" for r in done]
        parts.append(
            "These tasks of your plan already ran: do not plan them again; use their outputs "
            "with ${id} references:\n" + "\n".join(lines)
        )
    if failed:
        lines = [f"- {r.task_id}: {shorten(r.error or r.status.value, 200)}" for r in failed]
        parts.append("These tasks ran and failed:\n" + "\n".join(lines))
    if done:
        parts.append("Answer with the JSON plan of the remaining tasks only.")
    return "\n\n".join(parts)
