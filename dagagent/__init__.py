"""dagagent: plan-and-execute DAG orchestration for LLM agents.

A plan (tasks with dependencies) is validated as a graph, then run concurrently by an
executor that hands each task to one shared task runner.

    import dagagent

    registry = dagagent.Registry()

    @registry.tool
    async def get_weather(city: str) -> dict: ...

    result = await dagagent.execute(plan, registry, executor="dataflow")
"""

import warnings
from typing import Any

from .agent import AgentResult, AgentState, Budget, ReActAgent, make_agent_runner
from .api import execute, execute_sync, new_run_id
from .approval import Approval, ApprovalRequest, Policy, Rule, ask_later, load_policy
from .errors import (
    AgentError,
    AgentStoppedError,
    ConfigError,
    DagagentError,
    DecisionError,
    Issue,
    JoinerError,
    LLMAuthError,
    LLMBadRequestError,
    LLMConnectionError,
    LLMError,
    LLMRateLimitError,
    LLMResponseError,
    LLMServerError,
    LLMTimeoutError,
    MapError,
    MCPConnectError,
    MCPServerLostError,
    MCPToolError,
    PlanError,
    PlanLoadError,
    PlanningError,
    PlanValidationError,
    ReActFormatError,
    ReferenceResolutionError,
    RunFailedError,
    ScriptError,
    SolveError,
    StoreError,
    TaskDeniedError,
    TaskError,
    TaskTimeoutError,
    TaskWaitingError,
    ToolArgumentsError,
    ToolDefinitionError,
    ToolError,
    UnknownToolError,
    WorkerLostError,
)
from .events import Event, Listener
from .graph import PlanGraph, validate
from .plan import AgentTask, Plan, Task, ToolTask, load_plan
from .planners import LLMPlanner, LLMReplanner, PlanningResult, parse_llmcompiler
from .results import (
    AgentStep,
    ApprovalAnswer,
    CallDecision,
    RunResult,
    RunStatus,
    TaskResult,
    TaskStatus,
)
from .review import diff_plans, reuse_map, review_run
from .runner import Interceptor, TaskRetryPolicy, ToolInvocation
from .schema_tools import SchemaTool
from .store import RunRecord, RunStore
from .tools import Registry, Tool, tool
from .workflows import (
    Solution,
    SolveStatus,
    replan_run,
    resume,
    resume_solve,
    resume_solve_sync,
    resume_sync,
    revise_run,
    solve,
    solve_sync,
)

__version__ = "0.1.0"

__all__ = [
    "AgentError",
    "AgentResult",
    "AgentState",
    "AgentStep",
    "AgentStoppedError",
    "AgentTask",
    "Approval",
    "ApprovalAnswer",
    "ApprovalRequest",
    "Budget",
    "CallDecision",
    "ConfigError",
    "DagagentError",
    "DecisionError",
    "Event",
    "Interceptor",
    "Issue",
    "JoinerError",
    "LLMAuthError",
    "LLMBadRequestError",
    "LLMConnectionError",
    "LLMError",
    "LLMPlanner",
    "LLMRateLimitError",
    "LLMReplanner",
    "LLMResponseError",
    "LLMServerError",
    "LLMTimeoutError",
    "Listener",
    "MCPConnectError",
    "MCPServerLostError",
    "MCPToolError",
    "MapError",
    "Plan",
    "PlanError",
    "PlanGraph",
    "PlanLoadError",
    "PlanValidationError",
    "PlanningError",
    "PlanningResult",
    "Policy",
    "ReActAgent",
    "ReActFormatError",
    "ReferenceResolutionError",
    "Registry",
    "Rule",
    "RunFailedError",
    "RunRecord",
    "RunResult",
    "RunStatus",
    "RunStore",
    "SchemaTool",
    "ScriptError",
    "Solution",
    "SolveError",
    "SolveStatus",
    "StoreError",
    "Task",
    "TaskDeniedError",
    "TaskError",
    "TaskResult",
    "TaskRetryPolicy",
    "TaskStatus",
    "TaskTimeoutError",
    "TaskWaitingError",
    "Tool",
    "ToolArgumentsError",
    "ToolDefinitionError",
    "ToolError",
    "ToolInvocation",
    "ToolTask",
    "UnknownToolError",
    "WorkerLostError",
    "__version__",
    "ask_later",
    "diff_plans",
    "execute",
    "execute_sync",
    "load_plan",
    "load_policy",
    "make_agent_runner",
    "new_run_id",
    "parse_llmcompiler",
    "replan_run",
    "resume",
    "resume_solve",
    "resume_solve_sync",
    "resume_sync",
    "reuse_map",
    "review_run",
    "revise_run",
    "solve",
    "solve_sync",
    "tool",
    "validate",
]

_RENAMED = {"RetryPolicy": "TaskRetryPolicy", "ToolCall": "ToolInvocation"}


def __getattr__(name: str) -> Any:
    """Old names, kept for one release with a DeprecationWarning (see CHANGELOG.md)."""
    new = _RENAMED.get(name)
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"dagagent.{name} is deprecated; use dagagent.{new}", DeprecationWarning, 2)
    return globals()[new]
