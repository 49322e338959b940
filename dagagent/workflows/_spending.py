"""A solve's budget as it is spent: :class:`Spending`, the ledger every model call and tool
call of a solve goes through (see :mod:`dagagent.budget` for what a budget is).

**Reservations.** Before a model call is sent, its worst case is reserved: the prompt's
tokens (estimated, with a margin: :data:`PROMPT_MARGIN`) plus the call's output limit, and
what they cost. A call without an output limit reserves everything the budget has left, and
is cut off if it writes past that. The call is refused (:class:`~dagagent.errors.
BudgetExceededError`) if its reservation, with what was used and what calls in flight hold,
could cross the budget. Once the call is over, its reservation is released and what it really
used (the provider's usage, or the estimate) is spent. So the budget is crossed by at most
what calls in flight used beyond their reservations (a prompt estimate that fell short).

**The joiner's reserve.** Calls other than the joiner's last answer may spend only the part
of each limit outside the reserve (``Budget.reserve`` of the tokens and the cost, one model
call); the first refusal marks the budget as running low (:attr:`Spending.low`). The solve
then asks the joiner once, as the ``final`` call, to answer from what it has: that call may
spend the reserve too.

Tool calls are counted as they are made (:meth:`Spending.tool_call`); one past
``Budget.tool_calls`` is denied.

**A sub-solve's budget** is carved from its parent's (:meth:`Spending.carve`): what the
parent has left outside its joiner's reserve when the sub-solve starts. The sub-solve's ledger
is chained to its parent's (``parent=``): each of its calls is reserved, spent and counted on
both, so a sub-solve never spends more than its parent has left, sub-solves running at once
share what is left, and what they spend counts for the parent (and its parent's parent).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..budget import Budget, Price, Prices, tool_calls_refused
from ..errors import BudgetExceededError, ConfigError
from ..llm import LiveCall, Usage

__all__ = ["PROMPT_MARGIN", "Reservation", "Spending"]

#: A prompt's estimated tokens are reserved with this margin (estimates run short on text
#: that tokenises densely: code, numbers, other languages).
PROMPT_MARGIN = 1.25


@dataclass(frozen=True)
class Reservation:
    """What one model call holds while it runs: ``tokens`` (``output`` of them for its
    answer) and ``cost``."""

    tokens: int
    output: int
    cost: float
    final: bool
    #: What the parent's ledger holds for the call (a sub-solve's call).
    parent: Reservation | None = None


class Spending:
    """The ledger of one solve's ``budget`` (``None``: nothing is limited, only counted),
    pricing calls with ``prices`` (see the module docstring)."""

    def __init__(
        self, budget: Budget | None, prices: Prices, *, parent: Spending | None = None
    ) -> None:
        self.budget = budget if budget is not None and budget.limited else None
        self.prices = prices
        #: The ledger of the solve this one's is a sub-solve of: it spends there too.
        self.parent = parent
        self.tokens = 0
        self.cost = 0.0
        self.model_calls = 0
        self.tool_calls = 0
        self.held_tokens = 0
        self.held_cost = 0.0
        self.held_calls = 0
        #: Why the budget ran low: the first call it refused (``None``: it has not).
        self.low: str | None = None
        #: What the calls of sub-solves (at any depth below) used, all spent here too.
        self.below = Usage()

    def check_prices(self, model: str, provider: str) -> None:
        """A cost budget needs the price of the model: :class:`ConfigError` without it."""
        if self.budget is None or self.budget.cost_usd is None:
            return
        if self.prices.price(model, provider) is None:
            name = f"{provider}:{model}" if provider else model
            raise ConfigError(
                f"a cost budget needs the price of the model, and {name!r} has none in the "
                'price table: give one ({"' + name + '": {"input": N, "output": N}} in US '
                "dollars per million tokens) with --prices FILE, or prices= in Python"
            )

    # -- model calls ---------------------------------------------------------------------

    def reserve(self, call: LiveCall, *, label: str = "", final: bool = False) -> Reservation:
        """Hold ``call``'s worst case, or refuse it (:class:`BudgetExceededError`, whose
        message names the call as ``label``: "the planner's call"). A sub-solve's call is held
        on its parent's ledger first (never within the parent's joiner's reserve)."""
        above = None
        if self.parent is not None:
            what = f"{label or 'a model call'} (in a sub-solve)"
            above = self.parent.reserve(call, label=what, final=False)
        try:
            own = self._reserve(call, label, final)
        except BudgetExceededError:
            if above is not None and self.parent is not None:
                self.parent.release(above)
            raise
        return own if above is None else replace(own, parent=above)

    def _reserve(self, call: LiveCall, label: str, final: bool) -> Reservation:
        b = self.budget
        if b is None:
            return Reservation(0, 0, 0.0, final)
        share = 1.0 if final else 1.0 - b.reserve
        price = self.prices.price(call.model, call.provider)
        prompt = math.ceil(call.prompt_tokens * PROMPT_MARGIN)
        output = (
            call.max_tokens if call.max_tokens is not None else self._room(share, prompt, price)
        )
        tokens = prompt + output
        cost = price.cost(prompt, output) if price is not None else 0.0
        what = label or "a model call"
        if b.model_calls is not None:
            allowed = b.model_calls if final or b.reserve == 0 else b.model_calls - 1
            if self.model_calls + self.held_calls + 1 > allowed:
                self._refuse(
                    "model_calls",
                    f"{what} was refused: the budget of {b.model_calls} model calls is used up "
                    f"({self.model_calls} made"
                    + (
                        ", one kept for the joiner's last answer)"
                        if allowed < b.model_calls
                        else ")"
                    ),
                    final,
                )
        if b.tokens is not None:
            limit = math.floor(b.tokens * share)
            if self.tokens + self.held_tokens + tokens > limit:
                self._refuse(
                    "tokens",
                    f"{what} was refused: its worst case, {tokens:,} tokens (~{prompt:,} prompt "
                    f"+ {output:,} output limit), could cross the budget of {b.tokens:,} tokens "
                    f"({self.tokens:,} used, {self.held_tokens:,} held by calls in flight"
                    + (
                        f", {b.tokens - limit:,} kept for the joiner's last answer)"
                        if not final
                        else ")"
                    ),
                    final,
                )
        if b.cost_usd is not None:
            limit_cost = b.cost_usd * share
            if price is None or self.cost + self.held_cost + cost > limit_cost + 1e-12:
                worst = f"${cost:.4f}" if price is not None else "an unknown cost"
                self._refuse(
                    "cost_usd",
                    f"{what} was refused: its worst case, {worst}, could cross the budget of "
                    f"${b.cost_usd:g} (${self.cost:.4f} spent, ${self.held_cost:.4f} held by "
                    "calls in flight"
                    + (
                        f", ${b.cost_usd - limit_cost:.4f} kept for the joiner's last answer)"
                        if not final
                        else ")"
                    ),
                    final,
                )
        self.held_tokens += tokens
        self.held_cost += cost
        self.held_calls += 1
        return Reservation(tokens, output, cost, final)

    def _room(self, share: float, prompt: int, price: Price | None) -> int:
        """The output a call without an output limit may write: what the budget has left."""
        b = self.budget
        assert b is not None
        room: list[float] = []
        if b.tokens is not None:
            room.append(math.floor(b.tokens * share) - self.tokens - self.held_tokens - prompt)
        if b.cost_usd is not None and price is not None and price.output > 0:
            left = b.cost_usd * share - self.cost - self.held_cost - price.cost(prompt, 0)
            room.append(left * 1_000_000 / price.output)
        return max(0, math.floor(min(room))) if room else 0

    def _refuse(self, what: str, message: str, final: bool) -> None:
        if self.low is None and not final:
            self.low = message
        raise BudgetExceededError(message, what=what)

    def overdrawn(self, reservation: Reservation, call: LiveCall) -> bool:
        """Whether ``call`` has written past what its reservation holds for its answer (it is
        then cut off). Never, without a budget on tokens or cost."""
        if (
            reservation.parent is not None
            and self.parent is not None
            and self.parent.overdrawn(reservation.parent, call)
        ):
            return True
        b = self.budget
        if b is None or (b.tokens is None and b.cost_usd is None):
            return False
        return call.output_tokens_so_far > reservation.output

    def settle(self, reservation: Reservation, usage: Usage, cost: float | None) -> None:
        """A call is over: release its reservation and spend what it used (``usage``, whose
        ``calls`` is 0 for a call that was never sent), here and on the parent's ledger."""
        self.release(reservation)
        self.spend(usage, cost)
        if reservation.parent is not None and self.parent is not None:
            self.parent.settle(reservation.parent, usage, cost)
            self.parent.below_spent(usage, cost)

    def below_spent(self, usage: Usage, cost: float | None) -> None:
        """Count in :attr:`below` what a call of a sub-solve (at any depth below) used."""
        self.below += usage.model_copy(update={"cost_usd": cost})

    def spend_below(self, usage: Usage) -> None:
        """What the sub-solves of a resumed solve used before (their records'): spent here,
        and counted in :attr:`below`."""
        self.spend(usage, usage.cost_usd)
        self.below += usage

    def release(self, reservation: Reservation) -> None:
        """Let go of what ``reservation`` holds here (not on the parent's ledger)."""
        if self.budget is not None:
            self.held_tokens -= reservation.tokens
            self.held_cost -= reservation.cost
            self.held_calls -= 1

    def spend(self, usage: Usage, cost: float | None) -> None:
        """Count what a call used (one that held no reservation: a resumed solve's earlier
        calls, or its sub-solves'), here only."""
        self.model_calls += usage.calls
        self.tokens += usage.total_tokens
        self.cost += cost or 0.0

    # -- tool calls ------------------------------------------------------------------------

    def tool_call(self, tool: str, task_id: str) -> None:
        """Count a tool call about to be made, or refuse it (:class:`BudgetExceededError`):
        on the parent's ledger too, for a sub-solve's."""
        if self.parent is not None:
            self.parent.tool_call(tool, task_id)
        try:
            self._tool_call(tool, task_id)
        except BudgetExceededError:
            if self.parent is not None:
                self.parent.uncount_tool_call()
            raise

    def uncount_tool_call(self) -> None:
        """A tool call counted here was refused below: it is not made (nor on the parents)."""
        self.tool_calls -= 1
        if self.parent is not None:
            self.parent.uncount_tool_call()

    def _tool_call(self, tool: str, task_id: str) -> None:
        b = self.budget
        if b is not None and b.tool_calls is not None and self.tool_calls + 1 > b.tool_calls:
            message = tool_calls_refused(tool, task_id, b.tool_calls)
            if self.low is None:
                self.low = message
            raise BudgetExceededError(message, what="tool_calls")
        self.tool_calls += 1

    # -- what is left ----------------------------------------------------------------------

    def carve(self) -> Budget | None:
        """The budget of a sub-solve starting now: what this budget has left outside its
        joiner's reserve (and outside what calls in flight hold), with the same ``reserve``
        share for the sub-solve's own joiner; ``None`` without a budget. Raises
        :class:`BudgetExceededError` when nothing is left of a limit."""
        b = self.budget
        if b is None:
            return None
        share = 1.0 - b.reserve
        left: dict[str, Any] = {"reserve": b.reserve}
        if b.tokens is not None:
            left["tokens"] = math.floor(b.tokens * share) - self.tokens - self.held_tokens
        if b.cost_usd is not None:
            left["cost_usd"] = b.cost_usd * share - self.cost - self.held_cost
        if b.model_calls is not None:
            allowed = b.model_calls if b.reserve == 0 else b.model_calls - 1
            left["model_calls"] = allowed - self.model_calls - self.held_calls
        if b.tool_calls is not None:
            left["tool_calls"] = b.tool_calls - self.tool_calls
        for what, value in left.items():
            if what != "reserve" and value <= (0 if what != "tool_calls" else -1):
                raise BudgetExceededError(
                    f"a sub-solve cannot start: the solve's budget has nothing left of its "
                    f"{what.replace('_', ' ')} outside the joiner's reserve ({self.spent()})",
                    what=what,
                )
        return Budget(**left)

    def spent(self) -> str:
        """``"1,234 of 5,000 tokens, 3 of 10 model calls"``: what was spent of each limit."""
        b = self.budget
        parts = [f"{self.tokens:,} tokens", f"{self.model_calls} model calls"]
        if b is None:
            return ", ".join(parts)
        parts = []
        if b.tokens is not None:
            parts.append(f"{self.tokens:,} of {b.tokens:,} tokens")
        if b.cost_usd is not None:
            parts.append(f"${self.cost:.4f} of ${b.cost_usd:g}")
        if b.model_calls is not None:
            parts.append(f"{self.model_calls} of {b.model_calls} model calls")
        if b.tool_calls is not None:
            parts.append(f"{self.tool_calls} of {b.tool_calls} tool calls")
        return ", ".join(parts)
