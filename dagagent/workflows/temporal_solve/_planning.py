"""How a solve on Temporal plans, as data: a planner of one's own, the tool discovery and a
session's conversation travel in the solve's workflow input, and each worker's planner,
replanner and joiner are made from them as a local solve makes its own.

- **A planner of one's own** (:class:`~dagagent.planners.LLMPlanner` with a system prompt,
  few-shot examples, options): ``{"system_prompt", "examples", "max_attempts", "strict",
  "structured", "max_tasks", "settings"}``. Its examples are checked against the worker's
  tools as the driver checked them against its own; a model of its own travels as a spec
  (the workers' key), with its price. A planner that is not an ``LLMPlanner`` itself (a
  subclass may plan in code of its own), or whose model no spec names, cannot be described
  so and is refused.
- **The tool discovery**: ``{"threshold", "limit"}``; the workers rank the tools with the
  same BM25 code. An ``embed`` function cannot travel, and is refused.
- **A conversation** (a turn of a :class:`~dagagent.Session`): the earlier turns (question,
  answer, outputs), the summary of the older ones, and whether this turn must compress
  first (decided by the driver, made by the workflow's ``compress`` step, recorded with the
  turn). The worker shows its model the same ``earlier_turn`` tool a session adds to its
  registry, and a plan's ``turnN`` tasks are settled as reused from the conversation's
  outputs before the run starts: nothing of an earlier turn runs again. The turn's run
  carries the conversation to the activities of its tasks that may read it (its agent
  tasks, a call of ``earlier_turn``), whose workers add the tool over it (:func:`conversing`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError
from ...planners import LLMPlanner
from ...planners.conversation import EARLIER_TURN, Conversation, Turn, earlier_turn_tool
from ...tools import ToolDiscovery

if TYPE_CHECKING:
    from ...budget import Prices
    from ...tools import Registry

__all__ = [
    "conversation_data",
    "conversation_of",
    "conversing",
    "discovery_data",
    "discovery_of",
    "own_planner",
    "planner_data",
    "planning_registry",
]


def _refused(what: str) -> ConfigError:
    return ConfigError(
        f"a solve on the temporal executor cannot take {what}; run without it, or choose "
        "another executor"
    )


# -- the driver's side: what travels ----------------------------------------------------------


def planner_data(
    planner: LLMPlanner, model: dict[str, Any], prices: Prices | None = None
) -> dict[str, Any]:
    """A planner of one's own as the workers make it again (see the module docstring);
    ``model``: the solve's model spec. A planner with a model of its own has it (a spec, its
    key from the workers' environment) and its price at ``prices``, which its calls are
    costed at. A :class:`ConfigError` when it cannot travel."""
    from ...budget import Prices
    from ...llm import MeteredLLM
    from ...llm._described import model_of

    if type(planner) is not LLMPlanner:
        raise _refused(
            f"a planner of class {type(planner).__name__}: the workers make an LLMPlanner "
            "from its system prompt, examples and options, and code of its own cannot travel "
            "to them (give an LLMPlanner with the prompt and examples of your choice)"
        )
    try:
        own = model_of(planner.llm, planner.settings, what="a planner of your own")
    except ConfigError as exc:
        raise _refused(f"this planner: {exc}") from None
    data: dict[str, Any] = {}
    if (own["spec"], own["base_url"]) != (model["spec"], model["base_url"]):
        llm = planner.llm
        while isinstance(llm, MeteredLLM):
            llm = llm.llm
        price = (prices or Prices()).price(
            str(getattr(llm, "model", "") or ""), str(getattr(llm, "provider_name", "") or "")
        )
        data = {"model": own, "price": price.model_dump() if price is not None else None}
    return {
        **data,
        "system_prompt": planner.own_prompt,
        "examples": [
            {"goal": e.goal, "plan": json.loads(e.plan.model_dump_json(exclude_defaults=True))}
            for e in planner.examples
        ],
        "max_attempts": planner.max_attempts,
        "strict": planner._strict_option,
        "structured": planner.response_format is not None,
        "max_tasks": planner.max_tasks,
        "settings": own["settings"],
    }


def discovery_data(discovery: ToolDiscovery | None) -> dict[str, Any] | None:
    """``{"threshold", "limit"}`` of ``discovery`` (``None``: the default one); a
    :class:`ConfigError` for one with an ``embed`` function."""
    if discovery is None or (discovery == ToolDiscovery() and discovery.embed is None):
        return None
    if discovery.embed is not None:
        raise _refused(
            "an embed function for tool discovery (ToolDiscovery(embed=...)): a function "
            "cannot travel to the workers; give the discovery without one (the workers rank "
            "the tools by BM25, with its threshold and limit)"
        )
    return {"threshold": discovery.threshold, "limit": discovery.limit}


def conversation_data(conversation: Conversation) -> dict[str, Any]:
    """The turns before this one and how they are shown (see the module docstring), with
    ``compress``: whether the turn summarises the older ones first (as a local turn would)."""
    return {
        "turns": [
            {
                "number": t.number,
                "question": t.question,
                "answer": t.answer,
                "outputs": dict(t.outputs),
                "status": t.status,
            }
            for t in conversation.turns
        ],
        "summary": conversation.summary,
        "summarized": conversation.summarized,
        "max_tokens": conversation.max_tokens,
        "keep": conversation.keep,
        "output_chars": conversation.output_chars,
        "compress": conversation.needs_compression,
    }


# -- the worker's side: what is made of it ------------------------------------------------------


def discovery_of(data: dict[str, Any] | None) -> ToolDiscovery | None:
    """The :class:`ToolDiscovery` :func:`discovery_data` describes (``None``: the default)."""
    if data is None:
        return None
    return ToolDiscovery(threshold=data.get("threshold"), limit=data.get("limit"))


def conversation_of(data: dict[str, Any] | None) -> Conversation | None:
    """The :class:`Conversation` :func:`conversation_data` describes (without a ``record``:
    the driver records a compression)."""
    if data is None:
        return None
    return Conversation(
        turns=tuple(
            Turn(
                number=int(t["number"]),
                question=t["question"],
                answer=t.get("answer"),
                outputs=dict(t.get("outputs") or {}),
                status=t.get("status", "answered"),
            )
            for t in data["turns"]
        ),
        summary=data.get("summary"),
        summarized=int(data.get("summarized") or 0),
        max_tokens=data.get("max_tokens"),
        keep=int(data.get("keep", 2)),
        output_chars=int(data.get("output_chars", 200)),
    )


def planning_registry(registry: Registry, conversation: Conversation | None) -> Registry:
    """The tools a turn plans with: ``registry``'s and, in a conversation, the reader of
    earlier turns' outputs a session adds to its own (``registry`` alone otherwise)."""
    if conversation is None:
        return registry
    if EARLIER_TURN in registry:
        raise ConfigError(
            f"the worker's registry has a tool named {EARLIER_TURN!r}: a turn of a session "
            "needs that name for the tool that reads earlier turns' outputs"
        )
    tools = registry.subset(registry.names)
    turns = conversation.turns
    tools.add(earlier_turn_tool(lambda: turns, "this conversation"))
    return tools


def conversing(registry: Registry, data: Mapping[str, Any]) -> Registry:
    """The tools of a turn's run on a worker (:data:`~dagagent.executors.temporal.
    _activities.Conversing`): ``registry`` with the ``earlier_turn`` tool over the turns of
    the conversation ``data`` describes, so that an agent task of the turn reads earlier
    outputs as a local turn's does."""
    return planning_registry(registry, conversation_of(dict(data)))


def own_planner(
    data: dict[str, Any], llm: Any, registry: Registry, planning: Registry, **options: Any
) -> LLMPlanner:
    """The planner of one's own ``data`` describes, for the worker's ``registry`` (checking
    plans against ``planning``, a session's tools, as a session's own planner does);
    ``options``: ``agent_tasks`` and ``discovery``."""
    from ...llm._described import settings_of

    try:
        planner = LLMPlanner(
            llm,
            registry,
            system_prompt=data.get("system_prompt"),
            examples=data.get("examples") or (),
            max_attempts=int(data["max_attempts"]),
            strict=data.get("strict"),
            structured=bool(data["structured"]),
            max_tasks=int(data["max_tasks"]),
            settings=settings_of({"settings": data.get("settings") or {}}),
            **options,
        )
    except ConfigError as exc:
        raise ConfigError(f"the worker cannot make the planner of your own: {exc}") from None
    return planner.for_registry(planning) if planning is not registry else planner
