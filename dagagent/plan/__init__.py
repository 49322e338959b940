"""The plan: typed task models (:mod:`._models`) and reading them from files and JSON
(:mod:`._loading`). Checking a plan as a graph is :mod:`dagagent.graph`; ``${id.path}``
references are :mod:`dagagent.references`."""

from ._loading import MAX_PLAN_BYTES, load_plan, read_plan
from ._models import (
    ID_PATTERN,
    ID_RE,
    MAX_RETRIES,
    AgentTask,
    BaseTask,
    Plan,
    Task,
    ToolTask,
    element_key,
    same_call,
    task_fingerprint,
)

__all__ = [
    "ID_PATTERN",
    "ID_RE",
    "MAX_PLAN_BYTES",
    "MAX_RETRIES",
    "AgentTask",
    "BaseTask",
    "Plan",
    "Task",
    "ToolTask",
    "element_key",
    "load_plan",
    "read_plan",
    "same_call",
    "task_fingerprint",
]
