"""Agent tasks in plans: the ReAct agent fills a task that has an ``instruction``.

``execute(plan, registry, llm=...)`` runs such tasks with :func:`run_agent_node` (tools
mode, default :class:`~dagagent.agent.Budget`). For another mode or budget pass your own
runner: ``execute(..., agent_runner=make_agent_runner(mode="text", budget=Budget(...)))``.

The task runner has already resolved the references in the instruction, limited the tools
to the task's ``tools`` and collected the outputs of the task's dependencies; the agent
sees them as context. Its tool calls go through the run's interceptors (approval rules: a
denied call is an observation for the model, not a task failure) and invoker. The answer
becomes the task's output and the steps are kept in ``TaskResult.steps``; a run that stops
without an answer fails the task with :class:`AgentStoppedError`, whose message names the
stop reason and sums up the last steps (the exception carries them as ``.steps``, and the
runner keeps them in the task's record; a task that times out or is cancelled keeps the
steps taken so far too). A model error
(:class:`~dagagent.errors.LLMError`) is raised as it is — the task's ``retries`` apply —
with the steps taken before it as ``.steps``, so a task it fails keeps them.
"""

from __future__ import annotations

import json
from typing import Any

from dagagent.errors import AgentError, LLMError
from dagagent.events import get_logger
from dagagent.results import jsonable
from dagagent.runner import AgentNode, AgentTaskRunner

from .budget import Budget
from .react import ReActAgent
from .state import AgentResult, Mode

__all__ = ["AgentStoppedError", "make_agent_runner", "run_agent_node"]


class AgentStoppedError(AgentError):
    """An agent task's run stopped without an answer. ``stop_reason``, ``detail`` and the
    ``steps`` (JSON-able dicts) say how far it got."""

    def __init__(self, task_id: str, result: AgentResult) -> None:
        self.task_id = task_id
        self.stop_reason = result.stop_reason
        self.detail = result.detail
        self.steps = result.steps_json()
        self.result = result
        n = len(result.steps)
        summary = _summary(self.steps[-3:])
        super().__init__(
            f"agent task {task_id!r} stopped without an answer ({result.stop_reason}): "
            f"{result.detail}; {n} step{'s' if n != 1 else ''}, "
            f"{result.usage.total_tokens} tokens" + (f"; last steps: {summary}" if summary else "")
        )


def _summary(steps: list[dict[str, Any]]) -> str:
    parts = []
    for s in steps:
        if s.get("error"):
            parts.append(f"#{s['step']} error: {_clip(s['error'], 120)}")
        for c in s.get("calls", []):
            args = _clip(json.dumps(jsonable(c.get("args")), ensure_ascii=False), 80)
            seen = c.get("observation")
            parts.append(
                f"#{s['step']} {c['tool']}({args})"
                + (f" -> {_clip(seen, 80)}" if seen is not None else " (not run)")
            )
    return "; ".join(parts)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def make_agent_runner(
    *,
    mode: Mode = "tools",
    budget: Budget | None = None,
    instructions: str | None = None,
    max_observation_chars: int = 4000,
    temperature: float | None = None,
    max_tokens_per_call: int | None = None,
) -> AgentTaskRunner:
    """An ``agent_runner`` for :func:`dagagent.execute` with these agent settings."""
    if mode not in ("tools", "text"):
        raise AgentError(f"agent mode must be 'tools' or 'text', not {mode!r}")
    budget = budget if budget is not None else Budget()

    async def run(node: AgentNode) -> tuple[Any, list[dict[str, Any]] | None]:
        agent = ReActAgent(
            node.llm,
            node.tools,
            mode=mode,
            budget=budget,
            call_tool=node.call_tool,
            instructions=instructions,
            max_observation_chars=max_observation_chars,
            temperature=temperature,
            max_tokens_per_call=max_tokens_per_call,
            logger=get_logger(run_id=node.run_id, task_id=node.task.id),
        )
        # A timeout or a cancellation of the task keeps what the agent did so far.
        node.steps_so_far = lambda: agent.state.steps_json() if agent.state else None
        try:
            result = await agent.run(node.instruction, context=node.context or None)
        except LLMError as exc:
            # Retried or not by the task's retries, like any model error; if it fails the
            # task, the record keeps what the agent did before the model failed.
            if agent.state is not None and agent.state.steps:
                exc.steps = agent.state.steps_json()  # type: ignore[attr-defined]
            raise
        if not result.ok:
            raise AgentStoppedError(node.task.id, result)
        return result.answer, result.steps_json()

    return run


_default_runner = make_agent_runner()


async def run_agent_node(node: AgentNode) -> tuple[Any, list[dict[str, Any]] | None]:
    """Fill one agent task with the ReAct agent (tools mode, default budget)."""
    return await _default_runner(node)
