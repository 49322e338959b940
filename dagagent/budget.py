"""What a solve may spend, and what model calls cost: :class:`Budget` and :class:`Prices`.

::

    budget = Budget(tokens=50_000, cost_usd=0.25, model_calls=20, tool_calls=100)
    solution = await dagagent.solve(goal, registry, llm, budget=budget)
    solution.status            # "budget_exhausted" when it ran out before an answer

A budget bounds a whole solve: every model call of every role (planner, replanner, agent
tasks, joiner) and every tool call of every round. It fails closed: before each model call
the engine reserves the call's worst case (its prompt, estimated, plus its output limit, and
their price) and refuses the call when that could cross the budget; so a budget is overshot
by at most what calls in flight used beyond their reservation (an estimate that fell short).
A share of it (``reserve``) is kept for the joiner: when the rest runs out, the joiner is
asked once, within the reserve, to answer from the results so far (see
:func:`dagagent.solve`).

**Prices** are US dollars per million tokens, input and output, by model: a small table
(:data:`DEFAULT_PRICES`, list prices as published when it was written) that a user extends or
overrides (``Prices.load(file)``, ``dagagent ask --prices FILE``)::

    {"openai:gpt-4o-mini": {"input": 0.15, "output": 0.60},
     "my-local-model": {"input": 0, "output": 0}}

A key is ``provider:model`` or a model name, either of which may hold ``*`` globs
(``claude-sonnet-4-5*`` prices its dated versions too). A model the table does not name has
no cost: it is left blank, never guessed, and a cost budget refuses to start with it.

The agent's own stop conditions (turns, tokens of one agent run, its wall time, its loops)
are another concept: :class:`~dagagent.agent.AgentLimits`.
"""

from __future__ import annotations

import fnmatch
import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ConfigError

__all__ = ["DEFAULT_PRICES", "Budget", "Price", "Prices"]


def _toml(text: str, path: Path) -> Any:
    if sys.version_info >= (3, 11):
        import tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"the prices file {path} is not valid TOML: {exc}") from None
    raise ConfigError(f"{path}: TOML prices files need Python 3.11+; use JSON")


class Budget(BaseModel):
    """What a solve may spend (``None``: no limit on that).

    - ``tokens``: input + output tokens over every model call.
    - ``cost_usd``: dollars over every model call, at :class:`Prices`.
    - ``model_calls``: model calls (each attempt of a planner or joiner, each turn of an
      agent; an HTTP retry inside a call is not another call).
    - ``tool_calls``: tool calls (each task's call, each element of a map, each call an
      agent makes).
    - ``reserve``: the share of ``tokens`` and ``cost_usd`` (and one model call) kept for the
      joiner's last answer when the rest runs out.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tokens: int | None = Field(default=None, ge=1)
    cost_usd: float | None = Field(default=None, gt=0)
    model_calls: int | None = Field(default=None, ge=1)
    tool_calls: int | None = Field(default=None, ge=0)
    reserve: float = Field(default=0.2, ge=0, lt=1)

    @property
    def limited(self) -> bool:
        """Whether anything is limited."""
        return any(
            v is not None for v in (self.tokens, self.cost_usd, self.model_calls, self.tool_calls)
        )

    def describe(self) -> str:
        """``"50,000 tokens, $0.25, 20 model calls"``: the limits set."""
        parts = []
        if self.tokens is not None:
            parts.append(f"{self.tokens:,} tokens")
        if self.cost_usd is not None:
            parts.append(f"${self.cost_usd:g}")
        if self.model_calls is not None:
            parts.append(f"{self.model_calls} model call{'s' if self.model_calls != 1 else ''}")
        if self.tool_calls is not None:
            parts.append(f"{self.tool_calls} tool call{'s' if self.tool_calls != 1 else ''}")
        return ", ".join(parts) or "no limit"


def tool_calls_refused(tool: str, task_id: str, limit: int) -> str:
    """Why the call of ``tool`` by task ``task_id`` is not made: the budget of ``limit`` tool
    calls is used up (the denied task's error, wherever the solve runs)."""
    return (
        f"the call of {tool} by task {task_id!r} was refused: the budget of "
        f"{limit} tool call{'s' if limit != 1 else ''} is used up"
    )


class Price(BaseModel):
    """US dollars per million tokens of input and of output."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


#: List prices in USD per million tokens (input, output), as the providers published them in
#: 2025. Prices change: extend or override them with :meth:`Prices.load` / ``--prices``.
DEFAULT_PRICES: dict[str, Price] = {
    "openai:gpt-4o": Price(input=2.50, output=10.00),
    "openai:gpt-4o-2024-*": Price(input=2.50, output=10.00),
    "openai:gpt-4o-mini*": Price(input=0.15, output=0.60),
    "openai:gpt-4.1": Price(input=2.00, output=8.00),
    "openai:gpt-4.1-2025-*": Price(input=2.00, output=8.00),
    "openai:gpt-4.1-mini*": Price(input=0.40, output=1.60),
    "openai:gpt-4.1-nano*": Price(input=0.10, output=0.40),
    "openai:o3-mini*": Price(input=1.10, output=4.40),
    "openai:o4-mini*": Price(input=1.10, output=4.40),
    "anthropic:claude-3-5-haiku*": Price(input=0.80, output=4.00),
    "anthropic:claude-haiku-4-5*": Price(input=1.00, output=5.00),
    "anthropic:claude-3-7-sonnet*": Price(input=3.00, output=15.00),
    "anthropic:claude-sonnet-4*": Price(input=3.00, output=15.00),
    "anthropic:claude-opus-4*": Price(input=15.00, output=75.00),
}


class Prices:
    """A price table (see the module docstring): ``Prices()`` is :data:`DEFAULT_PRICES`;
    ``Prices(table, defaults=False)`` only ``table``; :meth:`load` reads a file over the
    defaults."""

    def __init__(
        self, table: Mapping[str, Price | Mapping[str, Any]] | None = None, *, defaults: bool = True
    ) -> None:
        merged: dict[str, Price] = dict(DEFAULT_PRICES) if defaults else {}
        for key, value in (table or {}).items():
            if not isinstance(key, str) or not key.strip():
                raise ConfigError(f"a price table's keys are model names, not {key!r}")
            try:
                merged[key.strip()] = (
                    value if isinstance(value, Price) else Price.model_validate(value)
                )
            except ValidationError as exc:
                problem = "; ".join(e["msg"] for e in exc.errors())
                raise ConfigError(
                    f'the price of {key!r} must be {{"input": N, "output": N}} in US dollars '
                    f"per million tokens: {problem}"
                ) from None
        self._table = merged

    @classmethod
    def load(cls, path: str | Path, *, defaults: bool = True) -> Prices:
        """The prices of a JSON file (``{"model": {"input": N, "output": N}}``, dollars per
        million tokens; TOML on Python 3.11+), over the defaults."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"cannot read the prices file {path}: {exc.strerror or exc}"
            ) from None
        data: Any
        if path.suffix.lower() == ".toml":
            data = _toml(text, path)
        else:
            try:
                data = json.loads(text)
            except ValueError as exc:
                raise ConfigError(f"the prices file {path} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(
                f"the prices file {path} must hold an object of prices by model name, not "
                f"{type(data).__name__}"
            )
        return cls(data, defaults=defaults)

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def price(self, model: str, provider: str = "") -> Price | None:
        """The price of ``model`` served by ``provider`` (``None``: not in the table). An exact
        key wins over a glob; ``provider:model`` over ``model``."""
        names = [f"{provider}:{model}", model] if provider else [model]
        for name in names:
            if name in self._table:
                return self._table[name]
        for name in names:
            for key, price in self._table.items():
                if "*" in key and fnmatch.fnmatchcase(name, key):
                    return price
        return None

    def cost(
        self, model: str, provider: str, input_tokens: int, output_tokens: int
    ) -> float | None:
        """What the tokens cost in US dollars, or ``None`` when the price is unknown."""
        price = self.price(model, provider)
        return None if price is None else price.cost(input_tokens, output_tokens)
