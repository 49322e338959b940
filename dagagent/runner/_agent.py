"""The agent-task seam: what the runner hands an agent, and what it gets back.

The runner knows no agent type. An agent task is run by an :data:`AgentTaskRunner` (the ReAct
agent's is :func:`dagagent.agent.run_agent_node`), a callable that gets an :class:`AgentNode`
and returns the answer with the steps taken. The model is opaque here: the runner passes on
what ``execute(llm=...)`` was given, and the agent runner knows what to do with it.

A sub-solve (an agent task with ``"solve": true``) comes through the same seam: a solve gives
its runs an agent runner that reaches such a task's sub-goal with a solve of its own
(:mod:`dagagent.workflows.subsolve`). Its ``timeout_s`` is that solve's deadline, which it
keeps itself (ending ``timed_out`` with what it got), so the runner does not impose it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..results import AgentStep

if TYPE_CHECKING:
    from ..plan import AgentTask
    from ..tools import Registry, Tool

__all__ = ["AgentNode", "AgentTaskRunner"]


@dataclass
class AgentNode:
    """What an agent task gets: its task, the resolved instruction, the tools it may use,
    the outputs of its dependencies, a way to call tools, and the run's model."""

    run_id: str
    task: AgentTask
    instruction: str
    tools: Registry
    context: dict[str, Any]
    #: ``async (tool, args) -> output``: validates ``args`` and calls ``tool`` through the
    #: run's interceptors and invoker, as a call of this task (``source="agent"``).
    call_tool: Callable[[Tool, dict[str, Any]], Awaitable[Any]]
    llm: object
    #: Set by the agent runner: the steps taken so far. Whenever the agent does not answer
    #: (it fails, times out or is cancelled), the task's record keeps these steps.
    steps_so_far: Callable[[], list[AgentStep] | None] | None = None
    #: Set by the runner when the run has listeners: the agent runner reports each thing the
    #: agent does (``kind``, ``step`` and the fields of a ``TaskAgentEvent``) through it.
    on_event: Callable[..., None] | None = None
    #: Set by the runner when the run resumes a task whose agent waited for a person's
    #: decision: the steps recorded then. The agent continues from them (the calls of the
    #: last step that have no observation yet are made first), not from scratch.
    resume_steps: list[AgentStep] | None = None
    #: Set by the agent runner: whether the task, timed out, succeeds with its agent's best
    #: answer so far when it has one (see :func:`~dagagent.results.best_so_far`), instead
    #: of failing. An agent runner returns a :class:`~dagagent.results.PartialAnswer` for
    #: the stops of its own (its deadline, step or token budget).
    best_so_far: bool = True
    #: A map task's element: its index in the list (``None`` for a task that is not a map).
    element: int | None = None

    def partial_steps(self) -> list[AgentStep] | None:
        """The steps taken so far (``None`` when there are none or they cannot be had)."""
        if self.steps_so_far is None:
            return None
        try:
            return self.steps_so_far() or None
        except Exception:  # a record of the steps must never turn into a second failure
            return None


AgentTaskRunner = Callable[[AgentNode], Awaitable[tuple[Any, list[AgentStep] | None]]]
"""``async (node) -> (answer, steps)``: fills one agent task. An answer that is a
:class:`~dagagent.results.PartialAnswer` is the best so far of an agent that stopped before
answering: the task succeeds with it, marked partial."""
