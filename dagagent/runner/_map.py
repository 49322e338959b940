"""Running a map task: its ``for_each`` list, resolved at run time, expanded into one element
run per element.

Each element run is the story of a task in small: resolve the arguments (``${@item}``,
``${@index}``), reuse an earlier output if its input is unchanged, attempt it with the task's
retries and timeout, record it. The elements share the run's ``max_concurrency`` slots (an
element takes one, the map task itself none) and the task's own ``max_concurrency``, which is
:data:`~dagagent.limits.DEFAULT_ELEMENT_CONCURRENCY` when the task sets none (each element in
flight costs a worker; a bound keeps a map of a million elements to the memory of its
results).

- **Output.** The list of the elements' outputs, in the order of the list; an empty list
  gives ``[]`` and the task succeeds.
- **Failure.** Under the run's ``on_failure="cancel"`` the first failed element fails the
  task and cancels the elements still running or waiting; under ``"continue"`` every element
  runs and the task fails if one did. With ``allow_partial`` every element runs and the task
  succeeds unless all failed: its output holds ``None`` for each failed element.
- **Records.** Every element has a :class:`~dagagent.results.TaskResult` (task id
  ``"<task>[<index>]"``) in the map task's ``elements``, in order; each is announced by a
  :class:`~dagagent.events.TaskElementFinished` when it ends.
- **Reuse.** An element is reused when the run being reused has an element of the same task
  with the same fingerprint (its resolved input), wherever it stood in the list, and the
  task's other dependencies have the outputs they had. The reuse map holds those elements
  under ``"<task>@<fingerprint>"`` (see :func:`dagagent.review.reuse_map`); ``@`` is never part
  of a task id.
- **Waiting.** An element whose call an ``ask`` rule leaves for a person (see
  :func:`dagagent.resume`) is ``waiting``, not failed; when no element failed and one waits,
  the map task is ``waiting`` (its waiting calls are its approvals). A resumed run keeps
  every other element as it was recorded and runs only the waiting ones again (an agent
  element from its recorded steps, as an agent task that waited).
- **Conditions.** A ``when`` that reads the element (``${@item}``, ``${@index}``) is decided
  for each element before it starts: an element whose condition is false is ``skipped``
  (its record says why) and ``None`` in the output, in its place; it is no failure. A
  ``when`` that does not read the element is decided once, before the list expands (see
  :meth:`~dagagent.runner.TaskRunner.run_task`).
- **Cap.** A list longer than the run's ``max_elements`` (default
  :data:`~dagagent.limits.DEFAULT_MAX_ELEMENTS`) fails the task with
  :class:`~dagagent.errors.MapError` before any element starts.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from ..conditions import Condition, parse_condition
from ..errors import MapError, TaskWaitingError
from ..events import TaskElementFinished
from ..limits import DEFAULT_ELEMENT_CONCURRENCY
from ..plan import ToolTask, element_key
from ..references import ElementScope, Template
from ..results import CONDITION_FALSE, PARTIAL_ANSWER, TaskResult, TaskStatus
from ._cancel import IGNORED_CANCEL, cancel_ignored
from ._condition import condition_false, element_condition
from ._effects import TookEffect
from ._record import TaskRun, describe
from ._reuse import same_upstream
from ._slot import Slot

if TYPE_CHECKING:
    from ..plan import Task
    from ._task import Attempt, TaskRunner

__all__ = ["run_map"]


_SUCCEEDED = TaskStatus.SUCCEEDED
_REUSED = TaskStatus.REUSED
_FAILED = TaskStatus.FAILED
_DENIED = TaskStatus.DENIED
_CANCELLED = TaskStatus.CANCELLED
_WAITING = TaskStatus.WAITING
_SKIPPED = TaskStatus.SKIPPED


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    return f"a {type(value).__name__}"


class MapRun:
    """One map task while it runs: its elements' results fill in as they end."""

    def __init__(self, runner: TaskRunner, task: Task, run: TaskRun) -> None:
        self.runner = runner
        self.task = task
        self.run = run
        self.items: list[Any] = []
        self.results: list[TaskResult | None] = []
        self.first_failure: int | None = None
        #: A resumed run: the elements recorded before the pause (those that did not wait
        #: stand as they were; a list of another length means nothing stands).
        self.prior: list[TaskResult] | None = runner.resume_elements.pop(task.id, None)
        #: A ``when`` that reads the element: decided for each element before it starts.
        self.condition: Condition | None = None
        if task.when is not None:
            condition = parse_condition(task.when)
            if element_condition(condition):
                self.condition = condition

    def expand(self) -> list[Any]:
        """The list, resolved now; :class:`MapError` if it is not a list or too long."""
        task, runner = self.task, self.runner
        source = task.for_each
        if isinstance(source, list):
            items: Any = source
        else:
            items = Template(source).resolve(runner.outputs)
        if isinstance(items, tuple):
            items = list(items)
        if not isinstance(items, list):
            raise MapError(f"for_each {source} is {_kind(items)}, not a list")
        if len(items) > runner.max_elements:
            raise MapError(
                f"for_each {source if isinstance(source, str) else 'list'} has "
                f"{len(items):,} elements, more than this run allows ({runner.max_elements:,}; "
                "raise it with max_elements, or --max-elements on the command line)"
            )
        return items

    async def __call__(self) -> tuple[TaskStatus, Any, str | None, str | None]:
        """Run every element (see the module docstring): the task's status, output, error
        and error type. ``self.results`` holds what each element did."""
        runner, task = self.runner, self.task
        self.items = items = self.expand()
        self.run.args = items
        n = len(items)
        self.results = [None] * n
        prior = self.prior
        if prior is not None and len(prior) == n:
            for i, before in enumerate(prior):
                if before.status is not _WAITING:
                    self.results[i] = before
                    if not before.settled and self.first_failure is None:
                        self.first_failure = i  # allow_partial: a failure stands too
                    if runner.emit is not None:
                        runner.emit(TaskElementFinished(runner.run_id, task.id, i, before))
            following_ids = [i for i, r in enumerate(self.results) if r is None]
        else:
            following_ids = list(range(n))
        if not n:
            return _SUCCEEDED, [], None, None
        attempt, retries = runner.attempt_for(task)
        cancel_siblings = runner.on_failure == "cancel" and not task.allow_partial
        width = max(1, len(following_ids))
        # Each element in flight holds a worker (an anyio task, a few kB): a list of a million
        # elements with no bound of its own takes DEFAULT_ELEMENT_CONCURRENCY at a time.
        own = (
            task.max_concurrency
            if task.max_concurrency is not None
            else DEFAULT_ELEMENT_CONCURRENCY
        )
        for bound in (own, runner.element_concurrency, runner.max_concurrency):
            if bound is not None:
                width = min(width, bound)
        following = iter(following_ids)
        source_task = _for_each_task(task)
        upstream = tuple(d for d in runner.graph.dependencies[task.id] if d != source_task)

        async with anyio.create_task_group() as tg:

            async def worker() -> None:
                for i in following:
                    r = await self._element(i, attempt, retries, upstream)
                    # a waiting element is no failure: its siblings go on
                    if not r.settled and r.status is not _WAITING and self.first_failure is None:
                        self.first_failure = i
                        if cancel_siblings:
                            tg.cancel_scope.cancel()

            for _ in range(width):
                tg.start_soon(worker)
        return self._outcome(cancel_siblings)

    def finish_unstarted(self, why: str) -> list[TaskResult]:
        """Every element's result, those that never started marked cancelled."""
        out = []
        for i, r in enumerate(self.results):
            if r is None:
                done = self._took_effect(i)
                if done is not None and isinstance(self.task, ToolTask):
                    # not run now: its call took effect before
                    runner, task = self.runner, self.task
                    args = done.args_of(runner.registry.get(task.tool), partial(self._args, i))
                    r = TaskResult(
                        task_id=f"{task.id}[{i}]",
                        status=_SUCCEEDED,
                        output=done.output,
                        attempts=done.attempt,
                        finished_at=time.time(),
                        args=runner.redaction.args(task.tool, args) if runner.redaction else args,
                        decisions=[done.decision],
                    )
                else:
                    r = TaskResult(task_id=f"{self.task.id}[{i}]", status=_CANCELLED, error=why)
                self.results[i] = r
            out.append(r)
        return out

    def _args(self, i: int) -> Any:
        """Element ``i``'s arguments, resolved now."""
        runner = self.runner
        return runner.resolve_args(self.task, ElementScope(runner.outputs, self.items[i], i))

    def _took_effect(self, i: int) -> TookEffect | None:
        """The call of element ``i`` that took effect (see
        :meth:`~dagagent.runner.Effects.took_effect`); ``None`` for an agent element."""
        if not isinstance(self.task, ToolTask):
            return None
        return self.runner.calls.effects.took_effect(self.task.id, i)

    def _outcome(self, cancel_siblings: bool) -> tuple[TaskStatus, Any, str | None, str | None]:
        n = len(self.items)
        first = self.first_failure
        if first is None:
            done = self.finish_unstarted("not run")
            if any(r.status is _WAITING for r in done):
                return self._waiting(done)
            everything_reused = all(r.status is _REUSED for r in done)
            return (
                (_REUSED if everything_reused else _SUCCEEDED),
                [r.output for r in done],
                None,
                None,
            )
        failed = self.results[first]
        assert failed is not None
        done = self.finish_unstarted(f"not run: element {first} {failed.status.value}")
        bad = [r for r in done if not r.settled and r.status is not _CANCELLED]
        if self.task.allow_partial and any(r.status is _WAITING for r in done):
            return self._waiting(done)
        if self.task.allow_partial and len(bad) < n:
            return _SUCCEEDED, [r.output if r.status.ok else None for r in done], None, None
        if not cancel_siblings:
            # Every element ran: name the first failure in the list's order, not in time, so
            # that the message does not depend on which element happened to end first.
            first = next(
                i
                for i, r in enumerate(done)
                if not r.settled and r.status is not _CANCELLED and r.status is not _WAITING
            )
            failed = done[first]
        status = _DENIED if failed.status is _DENIED else _FAILED
        what = f"element {first} ({_shown(self.items[first])}) {failed.status.value}"
        if cancel_siblings:
            error = f"{what}: {failed.error}"
        else:
            error = f"{len(bad)} of {n} elements failed; {what}: {failed.error}"
        return status, None, error, failed.error_type

    def _waiting(self, done: list[TaskResult]) -> tuple[TaskStatus, Any, str, str]:
        n = len(done)
        waiting = [i for i, r in enumerate(done) if r.status is _WAITING]
        shown = ", ".join(str(i) for i in waiting[:10]) + (", ..." if len(waiting) > 10 else "")
        error = (
            f"{len(waiting)} of {n} element{'s' if n != 1 else ''} wait for a person's "
            f"decision (element{'s' if len(waiting) != 1 else ''} {shown})"
        )
        return _WAITING, None, error, TaskWaitingError.__name__

    async def _element(
        self, i: int, attempt: Attempt, retries: int, upstream: tuple[str, ...]
    ) -> TaskResult:
        runner, task = self.runner, self.task
        async with Slot(runner.slots):
            run = TaskRun(task.id, time.time(), [] if runner.calls.intercepted else None)
            run.element = i
            prior = self.prior
            if prior is not None and len(prior) == len(self.items) and prior[i].steps:
                run.resume_steps = list(prior[i].steps or ())  # an agent that waited goes on
            status, output, error, error_type, traceback = _FAILED, None, None, None, None
            try:
                scope = ElementScope(runner.outputs, self.items[i], i)
                condition = self.condition
                if condition is not None and not condition.decide(scope):
                    status, error_type = _SKIPPED, CONDITION_FALSE
                    error = condition_false(condition, scope)
                else:
                    run.args = runner.resolve_args(task, scope)
                    key = element_key(task.id, task.fingerprint(run.args))
                    before = runner.reuse.get(key)
                    if before is not None and same_upstream(upstream, runner.outputs, runner.reuse):
                        status, output = _REUSED, before[1]
                    else:
                        output = await runner.attempts(run, attempt, retries)
                        if cancel_ignored():  # caught the run's cancellation, returned anyway
                            output, error = None, f"{IGNORED_CANCEL}: {runner.stop_cause()}"
                            await runner.cancelled_again()
                        status = _SUCCEEDED
            except BaseException as exc:
                ending = runner.ending(exc)
                if ending is None:
                    done = self._took_effect(i)
                    if done is not None:  # stopped after its call took effect
                        status, output = _SUCCEEDED, done.output
                    else:
                        status, error = _CANCELLED, error or "cancelled while running"
                    raise
                status, error, error_type = ending.status, ending.error, ending.error_type
                traceback = ending.traceback
            finally:
                if runner.redaction:  # an element's record, as a task's (see Redaction)
                    tool = getattr(task, "tool", None)
                    if isinstance(tool, str):
                        decisions = run.decisions if run.decisions is not None else []
                        error, traceback = runner.redaction.record(
                            tool, run.args, error, traceback, decisions
                        )
                        run.decisions = decisions or None
                    if run.steps:
                        run.steps = runner.redaction.steps(run.steps)
                partial = status is _SUCCEEDED and run.partial is not None
                r = TaskResult(
                    task_id=f"{task.id}[{i}]",
                    status=status,
                    output=output if status.ok else None,
                    error=f"partial answer: {run.partial}" if partial else error,
                    error_type=PARTIAL_ANSWER if partial else error_type,
                    attempts=run.attempts,
                    started_at=run.started_at,
                    finished_at=time.time(),
                    args=run.args,
                    steps=run.steps,
                    decisions=run.decisions or None,
                    traceback=traceback,
                )
                self.results[i] = r
                if runner.emit is not None:
                    runner.emit(TaskElementFinished(runner.run_id, task.id, i, r))
        return r


def _for_each_task(task: Task) -> str | None:
    """The task whose output the list is (``None``: a literal list)."""
    if not isinstance(task.for_each, str):
        return None
    refs = Template(task.for_each).refs
    return refs[0].task_id if refs else None


def _shown(item: Any) -> str:
    from ..text import shorten

    return shorten(item, 40)


async def run_map(runner: TaskRunner, task: Task, run: TaskRun) -> TaskResult:
    """Run map task ``task`` (see the module docstring) and record its result."""
    mapping = MapRun(runner, task, run)
    run.attempts = 1
    try:
        status, output, error, error_type = await mapping()
    except anyio.get_cancelled_exc_class():
        why = runner.stop_cause()
        elements = mapping.finish_unstarted(f"not run: {why}")
        runner.finish(run, _CANCELLED, error=f"cancelled while running: {why}", elements=elements)
        raise
    except MapError as exc:
        return runner.finish(run, _FAILED, error=str(exc), error_type="MapError", elements=[])
    except Exception as exc:  # the list's reference could not be resolved
        return runner.finish(
            run, _FAILED, error=describe(exc), error_type=type(exc).__name__, elements=[]
        )
    elements = [r for r in mapping.results if r is not None]
    first = mapping.first_failure
    return runner.finish(
        run,
        status,
        output,
        error=error,
        error_type=error_type,
        elements=elements,
        # where the element the error names failed (its tool's own code)
        traceback=elements[first].traceback if error is not None and first is not None else None,
    )
