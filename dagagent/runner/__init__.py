"""Running ONE task: references → reuse → attempts (retries, timeout) → TaskResult + events.

Executors decide *when* a task starts and call :meth:`TaskRunner.run_task_status` (or
:meth:`TaskRunner.run_task`, which returns the result); everything about
*what* running it means lives here, so that every executor behaves the same.

- :mod:`._task`: :class:`TaskRunner`, the story of one task, top to bottom;
- :mod:`._calls`: the **tool-call seam**: a call as interceptors see it
  (:class:`ToolInvocation`), the interceptor chain, per-tool limits and the **invoker**, which
  performs the call (in-process by default; the Dask executor ships it to a worker). Only the
  tool call travels; references, validation, retries, records and events stay here;
- :mod:`._agent`: the **agent-task seam**: :class:`AgentNode` in, ``(answer, steps)`` out, from
  an :data:`AgentTaskRunner`; the runner knows no agent type;
- :mod:`._record`: the record a task fills while it runs and the
  :class:`~dagagent.results.TaskResult` it becomes, or the values a plain success is held as
  until read (the marked hot path);
- :mod:`._map`: a map task (``for_each``): its list expanded into one element run per element;
- :mod:`._retry`: :class:`TaskRetryPolicy`, the wait between a task's attempts;
- :mod:`._reuse`: when an earlier run's output stands (:func:`task_fingerprint`);
- :mod:`._cancel`: telling a real cancellation from a tool that raised one;
- :mod:`._traceback`: a failing tool's traceback, as its result keeps it;
- :mod:`._telemetry`: a run's OpenTelemetry spans and metrics, when the application has them.
"""

from __future__ import annotations

import warnings
from typing import Any

from ._agent import AgentNode, AgentTaskRunner
from ._calls import CallNext, Interceptor, Invoker, ToolCalls, ToolInvocation, invoke_local
from ._map import DEFAULT_MAX_ELEMENTS
from ._retry import TaskRetryPolicy
from ._reuse import task_fingerprint
from ._task import TaskRunner
from ._telemetry import RunTelemetry

__all__ = [
    "DEFAULT_MAX_ELEMENTS",
    "AgentNode",
    "AgentTaskRunner",
    "CallNext",
    "Interceptor",
    "Invoker",
    "RunTelemetry",
    "TaskRetryPolicy",
    "TaskRunner",
    "ToolCalls",
    "ToolInvocation",
    "invoke_local",
    "task_fingerprint",
]

_RENAMED = {"RetryPolicy": "TaskRetryPolicy", "ToolCall": "ToolInvocation"}


def __getattr__(name: str) -> Any:
    """Old names, kept for one release with a DeprecationWarning (see CHANGELOG.md)."""
    new = _RENAMED.get(name)
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"dagagent.runner.{name} is deprecated; use dagagent.runner.{new}",
        DeprecationWarning,
        stacklevel=2,
    )
    return globals()[new]
