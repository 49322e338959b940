"""Token usage: what one model call used (:class:`Usage`), and a running total
(:class:`UsageTracker`)."""

from __future__ import annotations

import threading

from pydantic import BaseModel, ConfigDict

__all__ = ["Usage", "UsageTracker"]


class Usage(BaseModel):
    """Tokens used by one model call, or added up over many (then ``calls`` says how many
    calls; the usage of one response leaves it at 0)."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # its schema on first use

    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            calls=self.calls + other.calls,
        )

    def to_json_dict(self) -> dict[str, int]:
        """``calls``, ``input_tokens``, ``output_tokens``, ``total_tokens``."""
        return {
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
        }

    def __radd__(self, other: int) -> Usage:
        # Lets ``sum(usages)`` work without a start value.
        if other == 0:
            return self
        return NotImplemented


class UsageTracker:
    """Running totals over every call a client made: ``calls``, ``input_tokens``,
    ``output_tokens``. Thread-safe; one tracker may be shared by several clients."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        self.input_tokens = 0
        self.output_tokens = 0

    def record(self, usage: Usage) -> None:
        with self._lock:
            self.calls += 1
            self.input_tokens += usage.input_tokens
            self.output_tokens += usage.output_tokens

    @property
    def total(self) -> Usage:
        """Everything recorded so far, ``calls`` included."""
        with self._lock:
            return Usage(
                input_tokens=self.input_tokens,
                output_tokens=self.output_tokens,
                calls=self.calls,
            )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def reset(self) -> None:
        with self._lock:
            self.calls = self.input_tokens = self.output_tokens = 0

    def __repr__(self) -> str:
        return (
            f"UsageTracker(calls={self.calls}, input_tokens={self.input_tokens}, "
            f"output_tokens={self.output_tokens})"
        )
