"""The public names of dagagent, each with the module it comes from.

This stub is the one list: type checkers read it, and ``dagagent/__init__.py`` derives from it
what ``import dagagent`` offers (``__all__``) and where each name is imported from on first use.
"""

from .agent import (
    AgentLimits as AgentLimits,
    AgentResult as AgentResult,
    AgentState as AgentState,
    ReActAgent as ReActAgent,
    make_agent_runner as make_agent_runner,
)
from .approval import (
    Approval as Approval,
    ApprovalRequest as ApprovalRequest,
    Limit as Limit,
    Policy as Policy,
    Rule as Rule,
    ask_later as ask_later,
    load_policy as load_policy,
)
from .budget import (
    Budget as Budget,
    Price as Price,
    Prices as Prices,
)
from .errors import (
    AgentError as AgentError,
    AgentStoppedError as AgentStoppedError,
    BudgetExceededError as BudgetExceededError,
    CallInDoubtError as CallInDoubtError,
    ClusterError as ClusterError,
    ConditionError as ConditionError,
    ConditionSyntaxError as ConditionSyntaxError,
    ConfigError as ConfigError,
    DagagentError as DagagentError,
    DeadlineError as DeadlineError,
    DecisionError as DecisionError,
    DriverLostError as DriverLostError,
    Issue as Issue,
    JoinerError as JoinerError,
    LLMAuthError as LLMAuthError,
    LLMBadRequestError as LLMBadRequestError,
    LLMConnectionError as LLMConnectionError,
    LLMContextLengthError as LLMContextLengthError,
    LLMError as LLMError,
    LLMRateLimitError as LLMRateLimitError,
    LLMResponseError as LLMResponseError,
    LLMServerError as LLMServerError,
    LLMTimeoutError as LLMTimeoutError,
    LLMUnsupportedOptionError as LLMUnsupportedOptionError,
    MapError as MapError,
    MCPConnectError as MCPConnectError,
    MCPServerLostError as MCPServerLostError,
    MCPToolError as MCPToolError,
    NoCurrentCallError as NoCurrentCallError,
    PlanError as PlanError,
    PlanLoadError as PlanLoadError,
    PlanningError as PlanningError,
    PlanValidationError as PlanValidationError,
    ReActFormatError as ReActFormatError,
    ReferenceResolutionError as ReferenceResolutionError,
    RunFailedError as RunFailedError,
    ScriptError as ScriptError,
    SessionError as SessionError,
    SolveError as SolveError,
    StoreError as StoreError,
    SubSolveError as SubSolveError,
    SubSolveWaitingError as SubSolveWaitingError,
    TaskDeniedError as TaskDeniedError,
    TaskError as TaskError,
    TaskTimeoutError as TaskTimeoutError,
    TaskWaitingError as TaskWaitingError,
    ToolArgumentsError as ToolArgumentsError,
    ToolDefinitionError as ToolDefinitionError,
    ToolError as ToolError,
    ToolLimitError as ToolLimitError,
    UnknownToolError as UnknownToolError,
    WorkerLostError as WorkerLostError,
)
from .events import (
    Event as Event,
    Listener as Listener,
)
from .graph import (
    PlanGraph as PlanGraph,
    validate as validate,
)
from .plan import (
    AgentTask as AgentTask,
    Plan as Plan,
    Task as Task,
    ToolTask as ToolTask,
    load_plan as load_plan,
)
from .planners import (
    LLMPlanner as LLMPlanner,
    LLMReplanner as LLMReplanner,
    PlanningResult as PlanningResult,
    parse_llmcompiler as parse_llmcompiler,
)
from .results import (
    AgentStep as AgentStep,
    ApprovalAnswer as ApprovalAnswer,
    CallDecision as CallDecision,
    ModelCall as ModelCall,
    RunResult as RunResult,
    RunStatus as RunStatus,
    SolveStatus as SolveStatus,
    TaskResult as TaskResult,
    TaskStatus as TaskStatus,
)
from .review import (
    diff_plans as diff_plans,
    reuse_map as reuse_map,
    review_run as review_run,
)
from .run import (
    execute as execute,
    execute_sync as execute_sync,
    new_run_id as new_run_id,
)
from .runner import (
    CallLedger as CallLedger,
    Interceptor as Interceptor,
    ToolInvocation as ToolInvocation,
)
from .settings import (
    RunSettings as RunSettings,
    TaskRetryPolicy as TaskRetryPolicy,
)
from .store import (
    RunRecord as RunRecord,
    RunStore as RunStore,
)
from .tools import (
    CallIdentity as CallIdentity,
    Reconciled as Reconciled,
    Registry as Registry,
    SchemaTool as SchemaTool,
    Skill as Skill,
    Tool as Tool,
    ToolDiscovery as ToolDiscovery,
    current_call as current_call,
    tool as tool,
)
from .workflows import (
    Session as Session,
    Solution as Solution,
    replan_run as replan_run,
    resume as resume,
    resume_solve as resume_solve,
    resume_solve_sync as resume_solve_sync,
    resume_sync as resume_sync,
    revise_run as revise_run,
    solve as solve,
    solve_sync as solve_sync,
)

__version__: str
