"""dagagent: plan-and-execute DAG orchestration for LLM agents.

A plan (tasks with dependencies) is validated as a graph, then run concurrently by an
executor that hands each task to one shared task runner.

    import dagagent

    registry = dagagent.Registry()

    @registry.tool
    async def get_weather(city: str) -> dict: ...

    result = await dagagent.execute(plan, registry, executor="dataflow")
"""

import importlib
import importlib.util
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agent import (
        AgentResult,
        AgentState,
        Budget,
        ReActAgent,
        make_agent_runner,
    )
    from .api import (
        execute,
        execute_sync,
        new_run_id,
    )
    from .approval import (
        Approval,
        ApprovalRequest,
        Policy,
        Rule,
        ask_later,
        load_policy,
    )
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
    from .events import (
        Event,
        Listener,
    )
    from .graph import (
        PlanGraph,
        validate,
    )
    from .plan import (
        AgentTask,
        Plan,
        Task,
        ToolTask,
        load_plan,
    )
    from .planners import (
        LLMPlanner,
        LLMReplanner,
        PlanningResult,
        parse_llmcompiler,
    )
    from .results import (
        AgentStep,
        ApprovalAnswer,
        CallDecision,
        RunResult,
        RunStatus,
        TaskResult,
        TaskResults,
        TaskStatus,
    )
    from .review import (
        diff_plans,
        reuse_map,
        review_run,
    )
    from .runner import (
        Interceptor,
        TaskRetryPolicy,
        ToolInvocation,
    )
    from .schema_tools import (
        SchemaTool,
    )
    from .store import (
        RunRecord,
        RunStore,
    )
    from .tools import (
        Registry,
        Tool,
        tool,
    )

    # mypy counts the submodule dagagent.workflows.solve as a second 'solve' here
    from .workflows import (  # type: ignore[no-redef]
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
    "TaskResults",
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

# Each public name, with the module it comes from. They are imported on first use (PEP 562), so
# that ``import dagagent`` (and every command of the CLI) loads only the modules it needs: the
# whole package at once takes about a second to import.
_LAZY: dict[str, str] = {
    "AgentResult": ".agent",
    "AgentState": ".agent",
    "Budget": ".agent",
    "ReActAgent": ".agent",
    "make_agent_runner": ".agent",
    "execute": ".api",
    "execute_sync": ".api",
    "new_run_id": ".api",
    "Approval": ".approval",
    "ApprovalRequest": ".approval",
    "Policy": ".approval",
    "Rule": ".approval",
    "ask_later": ".approval",
    "load_policy": ".approval",
    "AgentError": ".errors",
    "AgentStoppedError": ".errors",
    "ConfigError": ".errors",
    "DagagentError": ".errors",
    "DecisionError": ".errors",
    "Issue": ".errors",
    "JoinerError": ".errors",
    "LLMAuthError": ".errors",
    "LLMBadRequestError": ".errors",
    "LLMConnectionError": ".errors",
    "LLMError": ".errors",
    "LLMRateLimitError": ".errors",
    "LLMResponseError": ".errors",
    "LLMServerError": ".errors",
    "LLMTimeoutError": ".errors",
    "MapError": ".errors",
    "MCPConnectError": ".errors",
    "MCPServerLostError": ".errors",
    "MCPToolError": ".errors",
    "PlanError": ".errors",
    "PlanLoadError": ".errors",
    "PlanningError": ".errors",
    "PlanValidationError": ".errors",
    "ReActFormatError": ".errors",
    "ReferenceResolutionError": ".errors",
    "RunFailedError": ".errors",
    "ScriptError": ".errors",
    "SolveError": ".errors",
    "StoreError": ".errors",
    "TaskDeniedError": ".errors",
    "TaskError": ".errors",
    "TaskTimeoutError": ".errors",
    "TaskWaitingError": ".errors",
    "ToolArgumentsError": ".errors",
    "ToolDefinitionError": ".errors",
    "ToolError": ".errors",
    "UnknownToolError": ".errors",
    "WorkerLostError": ".errors",
    "Event": ".events",
    "Listener": ".events",
    "PlanGraph": ".graph",
    "validate": ".graph",
    "AgentTask": ".plan",
    "Plan": ".plan",
    "Task": ".plan",
    "ToolTask": ".plan",
    "load_plan": ".plan",
    "LLMPlanner": ".planners",
    "LLMReplanner": ".planners",
    "PlanningResult": ".planners",
    "parse_llmcompiler": ".planners",
    "AgentStep": ".results",
    "ApprovalAnswer": ".results",
    "CallDecision": ".results",
    "RunResult": ".results",
    "RunStatus": ".results",
    "TaskResult": ".results",
    "TaskResults": ".results",
    "TaskStatus": ".results",
    "diff_plans": ".review",
    "reuse_map": ".review",
    "review_run": ".review",
    "Interceptor": ".runner",
    "TaskRetryPolicy": ".runner",
    "ToolInvocation": ".runner",
    "SchemaTool": ".schema_tools",
    "RunRecord": ".store",
    "RunStore": ".store",
    "Registry": ".tools",
    "Tool": ".tools",
    "tool": ".tools",
    "Solution": ".workflows",
    "SolveStatus": ".workflows",
    "replan_run": ".workflows",
    "resume": ".workflows",
    "resume_solve": ".workflows",
    "resume_solve_sync": ".workflows",
    "resume_sync": ".workflows",
    "revise_run": ".workflows",
    "solve": ".workflows",
    "solve_sync": ".workflows",
}

_RENAMED = {"RetryPolicy": "TaskRetryPolicy", "ToolCall": "ToolInvocation"}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use; a submodule
    (``dagagent.store``); or an old name, kept for one release with a DeprecationWarning (see
    CHANGELOG.md)."""
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value
    new = _RENAMED.get(name)
    if new is not None:
        warnings.warn(f"dagagent.{name} is deprecated; use dagagent.{new}", DeprecationWarning, 2)
        return __getattr__(new)
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
