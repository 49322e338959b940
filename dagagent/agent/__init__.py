"""The ReAct micro-agent, and the plan nodes it fills.

    from dagagent.agent import ReActAgent, AgentLimits

    agent = ReActAgent(llm, registry, mode="tools", limits=AgentLimits(max_steps=8))
    result = await agent.run("What is the temperature in Paris plus 3?")
    result.answer, result.stop_reason, result.steps, result.usage

    async for event in agent.stream(goal):      # thought / tool_call / tool_result / ...
        ...

    saved = agent.state.model_dump_json()       # a checkpoint
    result = await agent.resume(AgentState.model_validate_json(saved))

In plans, tasks with an ``instruction`` are run by this agent when ``execute`` gets an
``llm`` (see :mod:`dagagent.agent.node`).
"""

from .limits import STOP_REASONS, AgentLimits
from .node import AgentStoppedError, make_agent_runner, run_agent_node
from .parsing import ReActFormatError, ReActReply, parse_react
from .react import CallTool, ReActAgent
from .state import AgentEvent, AgentResult, AgentState, CallRecord, Step

__all__ = [
    "STOP_REASONS",
    "AgentEvent",
    "AgentLimits",
    "AgentResult",
    "AgentState",
    "AgentStoppedError",
    "CallRecord",
    "CallTool",
    "ReActAgent",
    "ReActFormatError",
    "ReActReply",
    "Step",
    "make_agent_runner",
    "parse_react",
    "run_agent_node",
]
