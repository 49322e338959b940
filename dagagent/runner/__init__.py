"""Running ONE task: references → reuse → attempts (retries, timeout) → TaskResult + events.

Executors decide *when* a task starts and call :meth:`TaskRunner.run_task`; everything about
*what* running it means lives here, so that every executor behaves the same.

- :mod:`._task`: :class:`TaskRunner`, the story of one task, top to bottom;
- :mod:`._calls`: the **tool-call seam**: a call as interceptors see it
  (:class:`ToolInvocation`), the interceptor chain, per-tool limits and the **invoker**, which
  performs the call (in-process by default; the Dask executor ships it to a worker). Only the
  tool call travels; references, validation, retries, records and events stay here;
- :mod:`._ledger`: the calls of a run or solve (:class:`CallLedger`), which tools' guardrails
  (``max_calls``, ``cooldown_s``) and policies' limits are checked against;
- :mod:`._condition`: a task's ``when``, decided once or for each element of a map;
- :mod:`._agent`: the **agent-task seam**: :class:`AgentNode` in, ``(answer, steps)`` out, from
  an :data:`AgentTaskRunner`; the runner knows no agent type;
- :mod:`._record`: the record a task fills while it runs;
- :mod:`._redaction`: the one boundary where what leaves the runner is redacted;
- :mod:`._map`: a map task (``for_each``): its list expanded into one element run per element;
- :mod:`._retry`: which failures are not retried;
- :mod:`._effects`: calls with side effects, exactly once: intent and outcome on record,
  replayed or resolved (in doubt) on resume;
- :mod:`._reuse`: when an earlier run's output stands (:func:`task_fingerprint`);
- :mod:`._cancel`: telling a real cancellation from a tool that raised one;
- :mod:`._traceback`: a failing tool's traceback, as its result keeps it;
- :mod:`._telemetry`: a run's OpenTelemetry spans and metrics, when the application has them.
"""

from ._agent import AgentNode, AgentTaskRunner
from ._calls import (
    ArgumentRedactor,
    CallNext,
    Interceptor,
    Invoker,
    ToolCalls,
    ToolInvocation,
    invoke_local,
)
from ._effects import Effects
from ._ledger import CallLedger, Clock, Crossing, recorded_calls
from ._redaction import Redaction
from ._reuse import task_fingerprint
from ._task import TaskRunner
from ._telemetry import RunTelemetry

__all__ = [
    "AgentNode",
    "AgentTaskRunner",
    "ArgumentRedactor",
    "CallLedger",
    "CallNext",
    "Clock",
    "Crossing",
    "Effects",
    "Interceptor",
    "Invoker",
    "Redaction",
    "RunTelemetry",
    "TaskRunner",
    "ToolCalls",
    "ToolInvocation",
    "invoke_local",
    "recorded_calls",
    "task_fingerprint",
]
