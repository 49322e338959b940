"""Which failures are not worth another attempt."""

from __future__ import annotations

from ..errors import (
    AgentError,
    ReferenceResolutionError,
    TaskDeniedError,
    TaskWaitingError,
    ToolArgumentsError,
    ToolLimitError,
    UnknownToolError,
)

__all__ = ["NOT_RETRIED"]

#: Failures another attempt would only repeat: the task's input or its permission is wrong.
NOT_RETRIED = (
    ToolArgumentsError,
    ReferenceResolutionError,
    TaskDeniedError,
    TaskWaitingError,
    UnknownToolError,
    AgentError,
    ToolLimitError,
)
