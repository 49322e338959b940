"""Agent tasks in plans: the ReAct agent fills a task that has an ``instruction``.

``execute(plan, registry, llm=...)`` runs such tasks with :func:`run_agent_node` (tools
mode, default :class:`~dagagent.agent.AgentLimits`). For another mode or limits pass your own
runner: ``execute(..., agent_runner=make_agent_runner(mode="text", limits=AgentLimits(...)))``.

The task runner has already resolved the references in the instruction, limited the tools
to the task's ``tools`` and collected the outputs of the task's dependencies; the agent
sees them as context. Its tool calls go through the run's interceptors (approval rules: a
denied call is an observation for the model, not a task failure) and invoker. The answer
becomes the task's output and the steps (:class:`~dagagent.results.AgentStep`) are kept in
``TaskResult.steps``. A run that stops without an answer because it ran out of time, turns or
tokens, or went round in circles, gives its best answer so far when it has one (its last
thought and what its calls returned: ``AgentLimits(best_so_far=False)`` turns this off): the
task succeeds with it, marked partial (``TaskResult.partial``; ``error`` says why it stopped).
Otherwise a run that stops without an answer fails the task with
:class:`AgentStoppedError`, whose message names the stop reason and sums up the last steps
(``.steps`` has them all). A model error (:class:`~dagagent.errors.LLMError`) is raised as it
is — the task's ``retries`` apply. Whenever the agent does not answer (it stopped, its model
failed, the task timed out or was cancelled), the task's record keeps the steps taken so far:
the agent runner reports them through ``node.steps_so_far``. When the run has listeners,
each thing the agent does reaches them as it happens (a
:class:`~dagagent.events.TaskAgentEvent`, reported through ``node.on_event``).

**Large registries.** An agent task without ``tools`` may use any tool. When the registry
has more tools than the discovery's threshold (:class:`~dagagent.tools.ToolDiscovery`,
``make_agent_runner(discovery=...)``, 30 by default), the agent is offered the tools most
relevant to its instruction and ``find_tools``, which searches the others; what it finds it
may call (see :class:`~dagagent.agent.ReActAgent`'s ``catalogue``). Its model calls carry
the selection (``options["tool_selection"]``). A task with ``tools`` gets those, and no
search: the plan said what it may use.

A call an approval rule leaves for a person (:class:`~dagagent.errors.TaskWaitingError`)
pauses the agent and its task waits; when the run resumes, the agent continues from the
task's recorded steps (``node.resume_steps``), making the call that waited first.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any, cast

from dagagent.errors import AgentError, AgentStoppedError
from dagagent.events import get_logger
from dagagent.llm import LLM, ModelSettings
from dagagent.llm.observe import noting
from dagagent.results import AgentStep, PartialAnswer
from dagagent.runner import AgentNode, AgentTaskRunner
from dagagent.text import jsonable, shorten
from dagagent.tools import ToolDiscovery, select_tools

from .limits import AgentLimits
from .react import ReActAgent
from .state import AgentResult, Mode

__all__ = ["AgentStoppedError", "make_agent_runner", "run_agent_node"]


def _stopped(task_id: str, result: AgentResult) -> AgentStoppedError:
    """The error for an agent run that stopped without an answer: the stop reason, and a
    summary of the last steps."""
    steps = list(result.steps)
    n = len(steps)
    summary = _summary(steps[-3:])
    return AgentStoppedError(
        f"agent task {task_id!r} stopped without an answer ({result.stop_reason}): "
        f"{result.detail}; {n} step{'s' if n != 1 else ''}, "
        f"{result.usage.total_tokens} tokens" + (f"; last steps: {summary}" if summary else ""),
        task_id=task_id,
        stop_reason=result.stop_reason,
        detail=result.detail,
        steps=steps,
        result=result,
    )


def _summary(steps: list[AgentStep]) -> str:
    parts = []
    for s in steps:
        if s.error:
            parts.append(f"#{s.step} error: {shorten(s.error, 120, one_line=False)}")
        for c in s.calls:
            args = shorten(json.dumps(jsonable(c.args), ensure_ascii=False), 80, one_line=False)
            seen = c.observation
            parts.append(
                f"#{s.step} {c.tool}({args})"
                + (f" -> {shorten(seen, 80, one_line=False)}" if seen is not None else " (not run)")
            )
    return "; ".join(parts)


def make_agent_runner(
    *,
    mode: Mode = "tools",
    limits: AgentLimits | None = None,
    instructions: str | None = None,
    max_observation_chars: int = 4000,
    settings: ModelSettings | None = None,
    discovery: ToolDiscovery | None = None,
) -> AgentTaskRunner:
    """An ``agent_runner`` for :func:`dagagent.execute` with these agent settings (those of
    :class:`~dagagent.agent.ReActAgent`; ``settings``, a :class:`~dagagent.llm.ModelSettings`,
    for its model calls: ``max_tokens`` per turn, ``temperature``, ``tool_choice``,
    ``parallel_tool_calls``); ``discovery``: how an agent task without ``tools`` is shown a
    large registry (see the module docstring)."""
    if mode not in ("tools", "text"):
        raise AgentError(f"agent mode must be 'tools' or 'text', not {mode!r}")
    limits = limits if limits is not None else AgentLimits()
    discovery = discovery if discovery is not None else ToolDiscovery()

    async def run(node: AgentNode) -> tuple[Any, list[AgentStep] | None]:
        if node.task.solve:  # a solve's agent runner takes these; a plain run's cannot
            raise AgentError(
                f"task {node.task.id!r} is a sub-solve ('solve': true): it runs only in a solve "
                "given sub_solves=True (dagagent ask --sub-solves), not by the ReAct agent"
            )
        tools, catalogue, notes = node.tools, None, {}
        if node.task.tools is None:  # any tool: a large registry is shown by relevance
            selection = await select_tools(node.tools, node.instruction, discovery)
            if selection is not None:
                tools, catalogue = node.tools.subset(selection.names), node.tools
                notes = {"tool_selection": selection.as_json()}
        agent = ReActAgent(
            cast(LLM, node.llm),  # what execute(llm=...) was given; the runner does not look
            tools,
            mode=mode,
            limits=limits,
            call_tool=node.call_tool,
            instructions=instructions,
            max_observation_chars=max_observation_chars,
            settings=settings,
            logger=get_logger(run_id=node.run_id, task_id=node.task.id),
            catalogue=catalogue,
        )
        # If the agent does not answer (a model error, a stop, a timeout or a cancellation of
        # the task), the task's record keeps what it did so far.
        node.steps_so_far = lambda: list(agent.state.steps) if agent.state else None
        node.best_so_far = limits.best_so_far
        with noting(**notes):
            return await _run(agent, node, limits)

    return run


async def _run(
    agent: ReActAgent, node: AgentNode, limits: AgentLimits
) -> tuple[Any, list[AgentStep] | None]:
    report = node.on_event
    if report is None:
        result = await agent.run(
            node.instruction, context=node.context or None, steps=node.resume_steps
        )
    else:  # the run has listeners: each thing the agent does reaches them as it happens
        events = agent.stream(
            node.instruction, context=node.context or None, steps=node.resume_steps
        )
        async with aclosing(events) as stream:
            async for e in stream:
                report(
                    e.kind,
                    e.step,
                    text=e.text,
                    tool=e.tool,
                    call_id=e.call_id,
                    args=e.args,
                    is_error=e.is_error,
                    stop_reason=e.stop_reason,
                )
        assert agent.result is not None
        result = agent.result
    if not result.ok:
        partial = result.best_so_far if limits.best_so_far else None
        if partial is None:
            raise _stopped(node.task.id, result)
        why = f"the agent stopped before answering ({result.stop_reason}: {result.detail})"
        return PartialAnswer(partial, why), list(result.steps)
    return result.answer, list(result.steps)


_default_runner = make_agent_runner()


async def run_agent_node(node: AgentNode) -> tuple[Any, list[AgentStep] | None]:
    """Fill one agent task with the ReAct agent (tools mode, default limits)."""
    return await _default_runner(node)
