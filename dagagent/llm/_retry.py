"""When a failed model request is tried again, and for how long.

Retry rules: connection failures, 408, 429 and every 5xx (including Anthropic's 529
"overloaded") are retried, at most ``max_retries`` times and for at most
``max_retry_wait_s`` seconds of waiting in total. 401/403 and other 4xx are never
retried. The client raises :class:`Retryable` for a failure worth another attempt; the
policy decides whether there is one and how long to wait first.
"""

from __future__ import annotations

import email.utils
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

import anyio

from dagagent.errors import LLMError

__all__ = ["HTTPRetryPolicy", "Retryable", "parse_retry_after"]


def parse_retry_after(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """Seconds to wait from ``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms``."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    now = now or datetime.now(timezone.utc)
    return max(0.0, (when - now).total_seconds())


class Retryable(Exception):
    """Internal: a failure worth another attempt. ``kind`` is raised on giving up."""

    def __init__(self, kind: type[LLMError], message: str, retry_after: float | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after = retry_after

    def final(self, note: str) -> LLMError:
        return self.kind(f"{self.message} ({note})")


@dataclass(frozen=True)
class HTTPRetryPolicy:
    """How a model client retries its failed HTTP requests.

    The n-th retry waits ``min(max_delay_s, base_delay_s * 2**n)`` scaled by a random
    factor in [0.5, 1] (jitter), or exactly what ``Retry-After`` says. Giving up happens
    after ``max_retries`` retries or when the next wait would take the total waiting past
    ``max_retry_wait_s``. Read timeouts are retried only with ``retry_timeouts=True``
    (a slow model would otherwise block for ``(max_retries + 1) * timeout``); connect
    timeouts always are. ``sleep`` is the function used to wait (tests replace it).

    (Retrying a failed *task* is the runner's business, not this policy's.)
    """

    max_retries: int = 3
    base_delay_s: float = 0.5
    max_delay_s: float = 20.0
    max_retry_wait_s: float = 60.0
    retry_timeouts: bool = False
    sleep: Callable[[float], Awaitable[None]] = field(
        default=anyio.sleep, repr=False, compare=False
    )

    def backoff(self, retry_number: int) -> float:
        delay = min(self.max_delay_s, self.base_delay_s * (2.0**retry_number))
        return delay * random.uniform(0.5, 1.0)

    def next_delay(self, failure: Retryable, retry_number: int, waited: float) -> float:
        """Seconds to wait before retry ``retry_number`` (0 for the first) after ``waited``
        seconds of waiting so far; raises ``failure``'s final error when giving up."""
        attempts = retry_number + 1
        plural = "s" if attempts != 1 else ""
        if retry_number >= self.max_retries:
            raise failure.final(f"gave up after {attempts} attempt{plural}") from failure.__cause__
        if failure.retry_after is not None:
            delay = failure.retry_after
            if waited + delay > self.max_retry_wait_s:
                raise failure.final(
                    f"the server asked to retry after {delay:.1f}s, past the retry budget "
                    f"of {self.max_retry_wait_s}s; gave up after {attempts} attempt{plural}"
                ) from failure.__cause__
        else:
            delay = self.backoff(retry_number)
            if waited + delay > self.max_retry_wait_s:
                raise failure.final(
                    f"gave up after {attempts} attempt{plural}: retry budget of "
                    f"{self.max_retry_wait_s}s used up"
                ) from failure.__cause__
        return delay
