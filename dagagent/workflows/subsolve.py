"""Sub-solves: a task whose sub-goal is reached by a solve of its own.

::

    {"id": "best", "for_each": "${regions}", "solve": true,
     "instruction": "Find the best supplier of steel in ${@item}"}

In a solve given ``sub_solves=True``, a task with an ``instruction`` and ``"solve": true``
is not filled by the ReAct agent: its instruction (references resolved) is the goal of a
**child solve**, with plan → run → join rounds of its own, through the same machinery as
:func:`dagagent.solve`. The child's answer is the task's output; a child that ends without
one (it gave up, failed, ran out of its budget or time) fails the task with a
:class:`~dagagent.errors.SubSolveError` that says how and why, which the parent's joiner
reads as it reads any failure. A map task (``for_each``) starts one child per element; a
``when`` decides whether it starts at all, as for any task.

What a child gets from its parent:

- **its options**: rounds, streaming, agent tasks, the attempts of its planner and joiner,
  the run settings, the model and its settings, the tool discovery; the parent's planner of
  one's own, if it has one, for its tools and depth
  (:meth:`~dagagent.planners.LLMPlanner.for_sub_solve`); the task's ``tools`` (when given) are its
  tools; the parent's approval policy and interceptors check its tool calls, and the
  parent's :class:`~dagagent.runner.CallLedger` counts them (a tool's ``max_calls`` holds
  across the parent and every child);
- **a budget carved from the parent's** (:meth:`~._spending.Spending.carve`): what the
  parent has left outside its joiner's reserve when the child starts. Each call of the child
  is reserved and spent on both ledgers: a child never spends more than its parent has left
  (children running at once share it), and what it spends counts for the parent
  (``SolveUsage.sub_solves``). A child that runs low asks its own joiner for an answer from
  what it has, as a solve does;
- **a deadline**: the task's ``timeout_s`` when it has one, and never later than the
  parent's own deadline. A child whose deadline passes ends ``timed_out`` (and its task
  fails) with what it kept on record.

A child may hold sub-solves in turn, down to :data:`~dagagent.limits.MAX_SOLVE_DEPTH`: the
plan of a solve that deep may hold none (its planner is not told of them, and validation
refuses one: ``sub_solve_too_deep``).

**Records.** With a store, the child is a solve of its own (``dagagent show CHILD``), linked
to its task: the parent solve, the run, the task and the map element
(:class:`~dagagent.store.SolveLink`; ``SolveRecord.children`` lists a solve's children).
Its model calls are its own records. **Events**: the parent's listeners hear
:class:`~dagagent.events.SubSolveStarted` and ``SubSolveFinished`` of every sub-solve below
it, and each sub-solve's own events (rounds, runs, tasks, model calls) wrapped in
:class:`~dagagent.events.InSubSolve`, which says whose they are (when the parent has no
listener, none is built). **Resuming** the parent (after a pause, or a process
that died while a child ran) resumes each child that was under way from its records, without
making its finished model calls again; a child that had answered gives its recorded answer.
A child that pauses (a call waits for a person) pauses its task
(:class:`~dagagent.errors.SubSolveWaitingError`), and so the parent's run and the parent.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from ..errors import BudgetExceededError, StoreError, SubSolveError, SubSolveWaitingError
from ..events import InSubSolve, SubSolveFinished, SubSolveStarted
from ..results import AgentStep, SolveStatus
from ..run import new_run_id
from ..store import ChildSolve, SolveLink
from ..text import jsonable

if TYPE_CHECKING:
    from ..events import Listener
    from ..planners import LLMPlanner
    from ..runner import AgentNode, AgentTaskRunner
    from ..store import RunStore
    from .solution import Solution
    from .solve import _Solve

__all__ = ["SubSolves", "recorded_below"]


class SubSolves:
    """The agent runner of the runs of a solve whose plans may hold sub-solves (``owner``):
    a sub-solve task is reached by a child solve, any other agent task by ``agents``."""

    def __init__(self, owner: _Solve, agents: AgentTaskRunner) -> None:
        self.owner = owner
        self.agents = agents

    async def __call__(self, node: AgentNode) -> tuple[Any, list[AgentStep] | None]:
        if not node.task.solve:
            return await self.agents(node)
        return await self.solve(node), None

    async def solve(self, node: AgentNode) -> Any:
        """The answer of the child solve of ``node``'s task (a recorded one resumed, or
        taken as it answered; else a new one)."""
        owner = self.owner
        link = SolveLink(
            solve_id=owner.solve_id,
            run_id=node.run_id,
            task_id=node.task.id,
            element=node.element,
        )
        found = await self._recorded(link)
        if found is not None and found.status is SolveStatus.ANSWERED:
            return found.answer  # it answered before its parent's record said so
        if found is not None and found.status in (SolveStatus.PAUSED, SolveStatus.INTERRUPTED):
            self._tell(
                SubSolveStarted(
                    **_where(link),
                    child_id=found.solve_id,
                    goal=found.goal,
                    depth=owner.depth + 1,
                    resumed=True,
                )
            )
            solution = await self._resume(found, node, link)
        else:
            solution = await self._start(node, link)
        self._tell(
            SubSolveFinished(
                **_where(link),
                child_id=solution.solve_id,
                status=solution.status.value,
                reason=solution.reason,
            )
        )
        return _outcome(solution, node.task.id)

    def _tell(self, event: Any) -> None:
        """An event of a sub-solve, to the listeners of its parent (and above)."""
        try:
            self.owner.emit(event)
        except Exception as exc:  # a broken listener must not break the sub-solve
            self.owner.log.warning("listener.failed", error=repr(exc), event_kind=event.kind)

    def listeners(self, link: SolveLink, child_id: str) -> tuple[Listener, ...]:
        """The listeners of child ``child_id`` of ``link``: its events go up to the parent's
        listeners, wrapped in :class:`InSubSolve` (none when the parent has no listener)."""
        if not self.owner.listeners:
            return ()
        where = _where(link)
        depth = self.owner.depth + 1

        def forward(event: Any) -> None:
            if isinstance(event, (SubSolveStarted, SubSolveFinished, InSubSolve)):
                self._tell(event)  # from further below: it says whose it is already
            else:
                self._tell(InSubSolve(**where, child_id=child_id, depth=depth, event=event))

        return (forward,)

    async def _recorded(self, link: SolveLink) -> ChildSolve | None:
        """The latest child solve of ``link`` on record (``None`` without a store)."""
        store = self.owner.store
        if store is None:
            return None
        try:
            mine = await anyio.to_thread.run_sync(
                partial(store.child_solves, link.solve_id, of=link)
            )
        except StoreError:
            return None
        return mine[-1] if mine else None

    def _deadline(self, node: AgentNode) -> float | None:
        """The child's deadline, in seconds from now: the task's ``timeout_s``, never past the
        parent's deadline."""
        left = self.owner.deadline_at - anyio.current_time()
        timeout = node.task.timeout_s
        if timeout is None:
            return left if left != float("inf") else None
        return min(timeout, left)

    async def _start(self, node: AgentNode, link: SolveLink) -> Solution:
        from .solve import new_state

        owner = self.owner
        try:
            budget = owner.spending.carve()
        except BudgetExceededError as exc:
            raise SubSolveError(
                f"sub-solve of task {node.task.id!r} did not start: {exc}",
                solve_id=None,
                status="budget_exhausted",
            ) from None
        deadline_s = self._deadline(node)
        if deadline_s is not None and deadline_s <= 0:
            raise SubSolveError(
                f"sub-solve of task {node.task.id!r} did not start: the solve's deadline has "
                "passed",
                solve_id=None,
                status="timed_out",
            )
        options = _child_options(owner, node)
        if budget is not None:
            options["budget"] = budget.model_dump(mode="json", exclude_defaults=True)
        if deadline_s is not None:
            options["deadline_s"] = deadline_s
        solve_id = new_run_id()
        state = new_state(
            node.instruction.strip(),
            node.tools,
            owner.llm,
            solve_id=solve_id,
            options=options,
            settings=owner.settings,
            interceptors=_interceptors(owner),
            listeners=self.listeners(link, solve_id),
            store=owner.store,
            policy=owner.policy,
            confirm=None,
            model_settings=owner.model_settings,
            planner=_child_planner(owner, node),
            budget=budget,
            prices=owner.spending.prices,
            deadline_s=deadline_s,
            ledger=owner.ledger,
            depth=owner.depth + 1,
            above=owner.spending,
            discovery=owner.planner.discovery,
        )
        await state.record(
            "start_solve", goal=state.goal, options=options, parent=link, depth=state.depth
        )
        self._tell(
            SubSolveStarted(
                **_where(link), child_id=state.solve_id, goal=state.goal, depth=state.depth
            )
        )
        owner.log.info("solve.sub_solve", task_id=node.task.id, child=state.solve_id)
        return await state.run()

    async def _resume(self, found: ChildSolve, node: AgentNode, link: SolveLink) -> Solution:
        from .solve_resume import resume_recorded

        owner = self.owner
        assert owner.store is not None
        return await resume_recorded(
            owner.store,
            found.solve_id,
            node.tools,
            owner.llm,
            policy=owner.policy,
            interceptors=_interceptors(owner),
            model_settings=owner.model_settings,
            planner=_child_planner(owner, node),
            discovery=owner.planner.discovery,
            prices=owner.spending.prices,
            deadline_s=self._deadline(node),
            ledger=owner.ledger,
            depth=owner.depth + 1,
            above=owner.spending,
            listeners=self.listeners(link, found.solve_id),
        )


def _where(link: SolveLink) -> dict[str, Any]:
    return {
        "solve_id": link.solve_id,
        "run_id": link.run_id,
        "task_id": link.task_id,
        "element": link.element,
    }


def _interceptors(owner: _Solve) -> tuple[Any, ...]:
    """The parent's interceptors, its policy apart (a child puts it first again)."""
    return tuple(i for i in owner.chain if i is not owner.policy)


def _child_planner(owner: _Solve, node: AgentNode) -> LLMPlanner | None:
    """The planner of a child: the parent's own (its prompt, examples, model and settings)
    for the child's tools at its depth, when the parent was given one; else ``None`` (the
    built-in planner, as the parent's)."""
    if owner.own_planner is None:
        return None
    return owner.own_planner.for_sub_solve(node.tools, owner.depth + 1)


def _child_options(owner: _Solve, node: AgentNode) -> dict[str, Any]:
    """The options a child is recorded with (those a resume of it rebuilds it from)."""
    return {
        "max_rounds": owner.max_rounds,
        "stream": owner.stream,
        "agent_tasks": owner.agent_tasks,
        "max_attempts": owner.max_attempts,
        "structured": owner.structured,
        **owner.settings.to_record(),
        "sub_solves": True,
        "tools": sorted(node.tools.names),
    }


def _outcome(solution: Solution, task_id: str) -> Any:
    """The task's output: the child's answer; else the error that fails (or pauses) it."""
    if solution.status is SolveStatus.ANSWERED:
        return jsonable(solution.answer)
    if solution.status is SolveStatus.PAUSED:
        raise SubSolveWaitingError(solution.reason, solve_id=solution.solve_id)
    raise SubSolveError(
        f"sub-solve {solution.solve_id} of task {task_id!r} ended {solution.status.value}: "
        f"{solution.reason}",
        solve_id=solution.solve_id,
        status=solution.status.value,
    )


def recorded_below(store: RunStore, solve_id: str) -> Any:
    """What the model calls of every sub-solve below solve ``solve_id`` (its children, theirs,
    ...) used, as recorded: a :class:`~dagagent.llm.Usage`."""
    from ..llm import Usage

    total = Usage()
    for child in store.child_solves(solve_id):
        total += sum((c.usage for c in store.model_calls(solve_id=child.solve_id)), Usage())
        total += recorded_below(store, child.solve_id)
    return total
