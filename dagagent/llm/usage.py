"""Token usage: what one model call used (:class:`Usage`), and a running total
(:class:`UsageTracker`)."""

from __future__ import annotations

import threading

from pydantic import BaseModel, ConfigDict

__all__ = ["Usage", "UsageTracker", "format_cost"]


def format_cost(usd: float) -> str:
    """``$0.0042``, ``$1.25``: dollars with the digits that matter."""
    if usd == 0:
        return "$0"
    if usd >= 1:
        return f"${usd:,.2f}"
    digits = 8 if usd < 0.0001 else 4
    return f"${usd:.{digits}f}".rstrip("0").rstrip(".")


class Usage(BaseModel):
    """Tokens used by one model call, or added up over many (then ``calls`` says how many
    calls; the usage of one response leaves it at 0).

    ``cost_usd`` is what they cost in US dollars when the price of the model is known
    (``None``: unknown; a sum is unknown as soon as one of its calls' cost is), and
    ``estimated`` says that some of the tokens were estimated rather than reported by the
    provider (see :mod:`dagagent.llm.observe`)."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # its schema on first use

    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    cost_usd: float | None = None
    estimated: bool = False

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def empty(self) -> bool:
        """No call and no token: adding it changes nothing (its unknown cost neither)."""
        return not (self.calls or self.input_tokens or self.output_tokens)

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        if other.empty and other.cost_usd is None:
            cost = self.cost_usd
        elif self.empty and self.cost_usd is None:
            cost = other.cost_usd
        elif self.cost_usd is None or other.cost_usd is None:
            cost = None
        else:
            cost = self.cost_usd + other.cost_usd
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            calls=self.calls + other.calls,
            cost_usd=cost,
            estimated=self.estimated or other.estimated,
        )

    def to_json_dict(self) -> dict[str, int | float | bool | None]:
        """``calls``, ``input_tokens``, ``output_tokens``, ``total_tokens``, ``cost_usd``
        (``None``: unknown), ``estimated``."""
        return {
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
            "cost_usd": self.cost_usd,
            "estimated": self.estimated,
        }

    def summary(self) -> str:
        """``"3 model calls, 1,812 input + 230 output tokens (estimated), $0.0042"``."""
        text = (
            f"{self.calls} model call{'s' if self.calls != 1 else ''}, "
            f"{self.input_tokens:,} input + {self.output_tokens:,} output tokens"
        )
        if self.estimated:
            text += " (some estimated)"
        if self.cost_usd is not None:
            text += f", {format_cost(self.cost_usd)}"
        return text

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
        self._estimated = False

    def record(self, usage: Usage) -> None:
        """Count one call that used ``usage``."""
        with self._lock:
            self.calls += 1
            self.input_tokens += usage.input_tokens
            self.output_tokens += usage.output_tokens
            self._estimated = self._estimated or usage.estimated

    @property
    def total(self) -> Usage:
        """Everything recorded so far, ``calls`` included (no cost: a tracker knows no
        prices)."""
        with self._lock:
            return Usage(
                input_tokens=self.input_tokens,
                output_tokens=self.output_tokens,
                calls=self.calls,
                estimated=self._estimated,
            )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def reset(self) -> None:
        with self._lock:
            self.calls = self.input_tokens = self.output_tokens = 0
            self._estimated = False

    def __repr__(self) -> str:
        return (
            f"UsageTracker(calls={self.calls}, input_tokens={self.input_tokens}, "
            f"output_tokens={self.output_tokens})"
        )
