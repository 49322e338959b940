"""How long a task waits between its attempts, and which failures are not worth another."""

from __future__ import annotations

import random
from dataclasses import dataclass

from ..errors import (
    AgentError,
    ReferenceResolutionError,
    TaskDeniedError,
    TaskWaitingError,
    ToolArgumentsError,
    UnknownToolError,
)

__all__ = ["NOT_RETRIED", "TaskRetryPolicy"]


@dataclass(frozen=True)
class TaskRetryPolicy:
    """The wait before a task's next attempt: ``base_delay_s * 2**(attempt-1)``, capped at
    ``max_delay_s``, with ±``jitter`` (a fraction). How many attempts a task gets is its own
    business (``retries`` in the plan, else its tool's); this only spaces them out.

    Not to be confused with :class:`dagagent.llm.HTTPRetryPolicy`, which retries one HTTP
    request of a model client."""

    base_delay_s: float = 0.2
    max_delay_s: float = 30.0
    jitter: float = 0.5

    def delay(self, attempt: int) -> float:
        d: float = min(self.max_delay_s, self.base_delay_s * 2.0 ** (attempt - 1))
        if self.jitter:
            d *= 1 + random.uniform(-self.jitter, self.jitter)
        return max(0.0, d)


#: Failures another attempt would only repeat: the task's input or its permission is wrong.
NOT_RETRIED = (
    ToolArgumentsError,
    ReferenceResolutionError,
    TaskDeniedError,
    TaskWaitingError,
    UnknownToolError,
    AgentError,
)
