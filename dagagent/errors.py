"""Every error a user of dagagent can cause has a class here.

The tree::

    DagagentError
    ├── PlanError                     the plan itself is unusable
    │   ├── PlanLoadError             not JSON / not a plan shape / file unreadable
    │   ├── PlanValidationError       graph or registry issues (``.issues``)
    │   └── ConditionSyntaxError      a task's ``when`` is not a condition (``.position``)
    ├── ToolError                     registry and tool definition problems
    │   ├── ToolDefinitionError       a function cannot become a tool / duplicate name
    │   ├── UnknownToolError          a name not in the registry
    │   └── ToolArgumentsError        arguments do not fit the tool's schema
    ├── TaskError                     raised *inside* a run for one task (kept in TaskResult)
    │   ├── ReferenceResolutionError  ``${id.path}`` could not be resolved
    │   ├── MapError                  a map task's ``for_each`` is not a list, or too long
    │   ├── ConditionError            a task's ``when`` cannot be decided with the outputs
    │   ├── ToolLimitError            a tool's ``max_calls`` or ``cooldown_s`` was crossed
    │   ├── TaskTimeoutError          the task ran past its timeout
    │   ├── TaskDeniedError           an interceptor / approval rule refused the call
    │   ├── TaskWaitingError          an ``ask`` rule waits for a person's later decision
    │   │   ├── CallInDoubtError      a side-effecting call whose outcome is unknown (its
    │   │   │                         process died during it) waits for a person
    │   │   └── SubSolveWaitingError  a sub-solve's run waits for a person (``.solve_id``)
    │   ├── WorkerLostError           the remote worker running the tool died / was lost
    │   ├── MCPToolError              an MCP server answered a call with an error (isError)
    │   └── MCPServerLostError        the MCP server died, or is not connected, mid-call
    ├── RunFailedError                ``RunResult.raise_for_status()`` on a failed run
    ├── LLMError                      talking to a model went wrong
    │   ├── LLMConnectionError        could not reach the server (after retries)
    │   ├── LLMTimeoutError           the server did not answer in time
    │   ├── LLMAuthError              401/403: the key is wrong or missing
    │   ├── LLMRateLimitError         429 after every retry
    │   ├── LLMServerError            5xx after every retry
    │   ├── LLMBadRequestError        400 and friends: the provider's own error text
    │   │   ├── LLMUnsupportedOptionError  the server does not take an option sent (``.option``)
    │   │   └── LLMContextLengthError   the prompt does not fit the model's context window
    │   └── LLMResponseError          the body is not what the wire format promises
    ├── PlanningError                 the planner gave up (``.attempts``)
    ├── JoinerError                   the joiner gave no usable decision (``.attempts``)
    ├── SolveError                    ``Solution.raise_for_status()``: gave up or failed
    ├── BudgetExceededError           a model or tool call was refused: it could cross the
    │                                 solve's budget (``.what``: tokens, cost_usd, ...)
    ├── DeadlineError                 the deadline of a whole ``plan`` / ``ask`` passed
    ├── AgentError                    the ReAct agent cannot run (no llm, bad config)
    │   ├── AgentStoppedError         an agent task stopped without an answer (``.steps``)
    │   ├── SubSolveError             a sub-solve ended without an answer (``.solve_id``,
    │   │                             ``.status``), or could not start
    │   └── ReActFormatError          a reply in none of the ReAct shapes (also a ValueError)
    ├── StoreError                    the run store cannot be used / run not found
    ├── DecisionError                 a decision cannot be recorded, or a run resumed
    │   └── SessionError              a session's next turn cannot start: its last turn has
    │                                 not ended, or another process took the turn
    ├── ClusterError                  the executor's cluster cannot run the plan: a Temporal
    │   │                             server unreachable, no worker on the task queue
    │   └── DriverLostError           the driver lost a run that goes on on the cluster
    │                                 (recorded ``interrupted``: ``resume`` follows it again)
    ├── NoCurrentCallError            ``current_call()`` outside a side-effecting tool's call
    └── ConfigError                   bad option value (executor name, model spec, ...)
        └── MCPConnectError           an MCP server cannot be started, reached or listed

    AssertionError
    └── ScriptError                   a ScriptedLLM was called more or fewer times than
                                      scripted (a failed test, not a dagagent error)

Messages always name the task (when there is one) and the problem. The CLI maps
``PlanError`` / ``ConfigError`` / ``ToolError`` to exit code 2, a failed run to 1 and
``PlanningError`` to 3.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # for annotations only: the modules of these types import this one
    from dagagent.agent import AgentResult
    from dagagent.results import AgentStep, RunResult
    from dagagent.workflows import Solution

__all__ = [
    "AgentError",
    "AgentStoppedError",
    "BudgetExceededError",
    "CallInDoubtError",
    "ClusterError",
    "ConditionError",
    "ConditionSyntaxError",
    "ConfigError",
    "DagagentError",
    "DeadlineError",
    "DecisionError",
    "DriverLostError",
    "Issue",
    "JoinerError",
    "LLMAuthError",
    "LLMBadRequestError",
    "LLMConnectionError",
    "LLMContextLengthError",
    "LLMError",
    "LLMRateLimitError",
    "LLMResponseError",
    "LLMServerError",
    "LLMTimeoutError",
    "LLMUnsupportedOptionError",
    "MCPConnectError",
    "MCPServerLostError",
    "MCPToolError",
    "MapError",
    "NoCurrentCallError",
    "PlanError",
    "PlanLoadError",
    "PlanValidationError",
    "PlanningError",
    "ReActFormatError",
    "ReferenceResolutionError",
    "RunFailedError",
    "ScriptError",
    "SessionError",
    "SolveError",
    "StoreError",
    "SubSolveError",
    "SubSolveWaitingError",
    "TaskDeniedError",
    "TaskError",
    "TaskTimeoutError",
    "TaskWaitingError",
    "ToolArgumentsError",
    "ToolDefinitionError",
    "ToolError",
    "ToolLimitError",
    "UnknownToolError",
    "WorkerLostError",
]


class DagagentError(Exception):
    """Base of every error dagagent raises on purpose."""


class Issue(NamedTuple):
    """One problem found in a plan: a stable ``code``, the task it concerns, a message."""

    code: str
    task_id: str | None
    message: str

    def __str__(self) -> str:
        where = f"task {self.task_id!r}" if self.task_id is not None else "plan"
        return f"[{self.code}] {where}: {self.message}"


class PlanError(DagagentError):
    """The plan cannot be used."""


class PlanLoadError(PlanError):
    """The plan could not be read or parsed into the plan model; ``.issues`` lists the
    problems found in its fields (empty when it could not be read at all)."""

    def __init__(self, message: str, issues: Sequence[Issue] = ()) -> None:
        self.issues = list(issues)
        super().__init__(message)


class PlanValidationError(PlanError):
    """The plan has one or more issues; ``.issues`` lists every one of them."""

    def __init__(self, issues: list[Issue]) -> None:
        self.issues = list(issues)
        lines = "\n".join(f"  {i}" for i in self.issues)
        n = len(self.issues)
        super().__init__(f"plan has {n} issue{'s' if n != 1 else ''}:\n{lines}")


class ConditionSyntaxError(PlanError):
    """A task's ``when`` is not a condition of the predicate language (see
    :mod:`dagagent.conditions`): ``.text`` is the condition, ``.position`` the 0-based
    character where reading it stopped, ``.problem`` what was wrong there."""

    def __init__(self, text: str, position: int, problem: str) -> None:
        self.text = text
        self.position = position
        self.problem = problem
        shown = text if len(text) <= 80 else text[:77] + "..."
        super().__init__(f"condition {shown!r}, at character {position + 1}: {problem}")


class ToolError(DagagentError):
    """Problems with tool definitions or calls."""


class ToolDefinitionError(ToolError):
    """A function cannot be registered as a tool."""


class UnknownToolError(ToolError):
    """The tool name is not in the registry."""

    def __init__(self, name: str, known: list[str] | None = None) -> None:
        self.name = name
        hint = f" (known tools: {', '.join(sorted(known))})" if known else ""
        super().__init__(f"unknown tool {name!r}{hint}")


class ToolArgumentsError(ToolError):
    """Arguments do not fit the tool's schema. ``.errors`` holds one line per problem."""

    def __init__(self, tool: str, errors: list[str]) -> None:
        self.tool = tool
        self.errors = list(errors)
        super().__init__(f"bad arguments for tool {tool!r}: " + "; ".join(self.errors))


class TaskError(DagagentError):
    """Raised while running a single task; ends up in that task's ``TaskResult.error``."""


class ReferenceResolutionError(TaskError):
    """A ``${id.path}`` reference could not be resolved against upstream outputs."""


class MapError(TaskError):
    """A map task's ``for_each`` is not a list at run time, or has more elements than the run
    allows (``max_elements``)."""


class ConditionError(TaskError):
    """A task's ``when`` could not be decided with the outputs it reads: a reference that
    does not resolve, or values its comparison cannot compare (a number with a string)."""


class ToolLimitError(TaskError):
    """A call would cross a tool's guardrail: its ``max_calls`` for the run (or solve) are
    spent, or its ``cooldown_s`` since the last call has not passed. ``.tool`` names the
    tool, ``.limit`` is ``"max_calls"`` or ``"cooldown_s"``. Never retried."""

    def __init__(self, message: str, *, tool: str, limit: str) -> None:
        self.tool = tool
        self.limit = limit
        super().__init__(message)


class TaskTimeoutError(TaskError):
    """The task did not finish within its timeout."""


class TaskDeniedError(TaskError):
    """An interceptor or approval rule refused the call.

    ``decided_by`` says who or what decided (a rule, a person, a policy file).
    """

    def __init__(self, reason: str, *, decided_by: str = "policy") -> None:
        self.reason = reason
        self.decided_by = decided_by
        super().__init__(f"denied by {decided_by}: {reason}")


class TaskWaitingError(TaskError):
    """An approval rule asked about a call and the answer comes later, from a person: the
    task gets the status ``waiting`` (with the call's arguments and the rule that asked), the
    run goes on as far as it can and ends ``paused``; ``dagagent approve`` / ``resume``
    (or :func:`dagagent.resume`) continue it. Never retried; inside an agent task it pauses
    the agent, which continues from its recorded steps on resume."""

    def __init__(self, reason: str, *, tool: str, rule: str) -> None:
        self.reason = reason
        self.tool = tool
        self.rule = rule
        super().__init__(f"waiting for approval of a call of {tool!r} ({rule}): {reason}")


class CallInDoubtError(TaskWaitingError):
    """A call of a tool with side effects was started and its outcome never recorded (the
    process died, or the run was stopped, during it): whether it happened is unknown. It is
    never made again silently: without a reconciler on the tool (or with one that could not
    tell) and without an ``in_doubt`` policy, the task waits for a person (``dagagent
    approvals`` lists it; ``dagagent approve RUN TASK --happened | --allow | --deny``)."""

    def __init__(self, reason: str, *, tool: str, key: str) -> None:
        self.key = key
        super().__init__(reason, tool=tool, rule=IN_DOUBT_RULE)
        self.args = (f"the call of {tool!r} is in doubt (idempotency key {key}): {reason}",)

    def __str__(self) -> str:
        return str(self.args[0])


class SubSolveWaitingError(TaskWaitingError):
    """A sub-solve (a task with ``"solve": true``) paused: a call of its round's run waits
    for a person's decision (``dagagent approvals`` lists it under that run). Its task waits
    too; when the solve is resumed, the sub-solve goes on from its records."""

    def __init__(self, reason: str, *, solve_id: str) -> None:
        self.solve_id = solve_id
        super().__init__(reason, tool="", rule="sub-solve")
        self.args = (f"sub-solve {solve_id} waits for a person: {reason}",)

    def __str__(self) -> str:
        return str(self.args[0])


#: The rule an in-doubt call waits under (``approvals.rule``): what ``dagagent approvals``
#: shows, and how a person's decision finds its way back to the call.
IN_DOUBT_RULE = "in doubt"

#: How the record of a call in doubt that a run's ended Temporal workflow left for a person
#: starts its ``error`` (the rest says why it is in doubt, in words).
WORKFLOW_ENDED = "WorkflowEnded: "


class NoCurrentCallError(DagagentError, LookupError):
    """:func:`dagagent.current_call` was called outside the call of a tool with side effects
    (only such a call has an intent on record, and an idempotency key)."""


class RunFailedError(DagagentError):
    """A run did not succeed (raised by ``RunResult.raise_for_status()``)."""

    def __init__(self, message: str, result: RunResult | None = None) -> None:
        self.result = result
        super().__init__(message)


class LLMError(DagagentError):
    """Talking to a language model went wrong."""


class LLMConnectionError(LLMError):
    """The model server could not be reached (after retries)."""


class LLMTimeoutError(LLMError):
    """The model server did not answer in time."""


class LLMAuthError(LLMError):
    """The server refused the credentials (401/403): the key is wrong or missing."""


class LLMRateLimitError(LLMError):
    """429 Too Many Requests persisted through every retry."""


class LLMServerError(LLMError):
    """5xx persisted through every retry."""


class LLMBadRequestError(LLMError):
    """The provider rejected the request; the message carries the provider's own error text."""


class LLMUnsupportedOptionError(LLMBadRequestError):
    """The server rejected an option of the request that it does not support (a 400 naming
    it): ``option`` is ``"response_format"`` (no ``json_schema`` response formats: vLLM,
    llama.cpp and older servers) or ``"max_tokens"`` (OpenAI's reasoning models take
    ``max_completion_tokens``). The clients and planners fall back on their own where they
    can (see :class:`~dagagent.llm.OpenAIChat` and :mod:`dagagent.planners.heal`)."""

    def __init__(self, message: str, option: str = "") -> None:
        self.option = option
        super().__init__(message)


class LLMContextLengthError(LLMBadRequestError):
    """The provider refused the request because the prompt (with the output limit asked for)
    is longer than the model's context window: OpenAI's ``context_length_exceeded``,
    Anthropic's "prompt is too long", Gemini's "input token count ... exceeds". A model with a
    larger window may take it (see :func:`dagagent.llm.fallback`)."""


class LLMResponseError(LLMError):
    """The response body is not what the provider's wire format promises."""


class PlanningError(DagagentError):
    """The planner could not produce a valid plan within its attempts.

    ``attempts`` is a list of ``(raw_text, issues)`` pairs, one per attempt.
    """

    def __init__(self, message: str, attempts: list[tuple[str, list[Issue]]] | None = None) -> None:
        self.attempts = list(attempts or [])
        super().__init__(message)


class JoinerError(DagagentError):
    """The joiner (who reads a round's results and answers the goal or asks for another
    plan) gave no usable decision within its attempts.

    ``attempts`` is a list of ``(raw_text, issues)`` pairs, one per attempt.
    """

    def __init__(self, message: str, attempts: list[tuple[str, list[Issue]]] | None = None) -> None:
        self.attempts = list(attempts or [])
        super().__init__(message)


class SolveError(DagagentError):
    """A solve ended without an answer (raised by ``Solution.raise_for_status()``); the
    ``solution`` says why and keeps every round."""

    def __init__(self, message: str, solution: Solution | None = None) -> None:
        self.solution = solution
        super().__init__(message)


class BudgetExceededError(DagagentError):
    """A model call or a tool call was refused before it was made: its worst case could cross
    the budget of the solve. ``what`` names the limit (``tokens``, ``cost_usd``,
    ``model_calls``, ``tool_calls``). Raised to the caller of the call (a planner, an agent
    task, a tool call: its task fails); :func:`dagagent.solve` turns it into a last answer
    within the joiner's reserve, or the status ``budget_exhausted``."""

    def __init__(self, message: str, *, what: str) -> None:
        self.what = what
        super().__init__(message)


class DeadlineError(DagagentError):
    """The deadline given for a whole command passed (``dagagent plan --deadline``): what was
    running was cancelled; the message says what it was. A solve that passes its deadline
    ends with the status ``timed_out`` instead."""


class AgentError(DagagentError):
    """The ReAct agent cannot run as configured."""


class AgentStoppedError(AgentError):
    """An agent task's run stopped without an answer. ``stop_reason`` and ``detail`` say
    why, ``steps`` how far it got (the agent's steps, oldest first) and ``result`` is the
    agent's whole result (:class:`dagagent.agent.AgentResult`)."""

    def __init__(
        self,
        message: str,
        *,
        task_id: str,
        stop_reason: str,
        detail: str | None = None,
        steps: Sequence[AgentStep] = (),
        result: AgentResult | None = None,
    ) -> None:
        self.task_id = task_id
        self.stop_reason = stop_reason
        self.detail = detail
        self.steps: list[AgentStep] = list(steps)
        self.result = result
        super().__init__(message)


class SubSolveError(AgentError):
    """A sub-solve (a task with ``"solve": true``) ended without an answer: it gave up,
    failed, ran out of its budget or time (``status``, and the reason in the message), or
    could not start (its parent's budget had nothing left). Its task fails with it; the
    record of the sub-solve (``solve_id``) keeps its rounds."""

    def __init__(self, message: str, *, solve_id: str | None, status: str) -> None:
        self.solve_id = solve_id
        self.status = status
        super().__init__(message)


class ReActFormatError(AgentError, ValueError):
    """A model's reply follows none of the ReAct shapes; the message says what is missing.
    The agent shows it to the model and asks again (a ``ValueError`` too, as it always was).
    """


class StoreError(DagagentError):
    """The run store cannot be used, or a run id is invalid or unknown."""


class ConfigError(DagagentError):
    """An option has a value dagagent does not accept."""


class ClusterError(DagagentError):
    """The cluster an executor runs the plan on cannot run it (the Temporal executor): the
    server cannot be reached, no worker serves the task queue (or the last one left), the
    workflow was terminated on the server. The message names the server, the task queue
    and, once the run started, the workflow to look at."""


class DriverLostError(ClusterError):
    """This driver lost a run that goes on without it on the cluster: no worker serves the
    task queue any more, or the server stopped answering. The run's workflow is left as it
    is (it goes on once a worker, or the server, is back); the run is recorded
    ``interrupted``, its tasks not followed to their end saying so, and ``dagagent resume
    RUN`` (:func:`dagagent.resume`) follows it again."""


class DecisionError(DagagentError):
    """A decision about a waiting task cannot be recorded (the task is not waiting, it was
    decided already, a resume used the decision), or a run cannot be resumed (it is not
    paused, or another process is resuming it). The message names the run and the task."""


class SessionError(DecisionError):
    """A session's next turn cannot start: its last turn has not ended (resume it first),
    or another process continued the session meanwhile. The message names the session and
    the turn."""


class WorkerLostError(TaskError):
    """The remote worker running a tool call died, or the connection to it was lost (Dask
    executor). Retried like any other failure when the task allows retries."""


class MCPConnectError(ConfigError):
    """An MCP server could not be started or reached, did not complete the MCP handshake in
    time, or its tools could not be listed. Raised before anything runs."""


class MCPToolError(TaskError):
    """An MCP server answered a tool call with an error (``isError``, or an MCP error
    response); the message is the server's own."""


class MCPServerLostError(TaskError):
    """The MCP server died or closed the connection while a call was running, or a tool of
    a server that is not connected was called.

    ``mid_call``: the connection went while the call was under way, so whether it took
    effect is unknown (a call of a tool with side effects is then in doubt on record, as one
    whose worker was lost); ``False`` when the server was gone, or not connected, before the
    call, which was never sent."""

    def __init__(self, message: str, *, mid_call: bool = True) -> None:
        self.mid_call = mid_call
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_mcp_server_lost, (str(self), self.mid_call))


def _mcp_server_lost(message: str, mid_call: bool) -> MCPServerLostError:
    """An :class:`MCPServerLostError` again, from a pickle (it crosses to Dask workers)."""
    return MCPServerLostError(message, mid_call=mid_call)


class ScriptError(AssertionError):
    """The code under test called a :class:`~dagagent.llm.ScriptedLLM` more or fewer times
    than scripted. An ``AssertionError``, as it reports a failed test."""
