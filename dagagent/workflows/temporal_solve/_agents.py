"""The model of a solve's agent tasks on a worker (``RunInput.model``).

:func:`agent_models` is what a worker running a round's run gives the task runner for an
agent task: the solve's model, built from its spec with the worker's own key, metered per
call as the local solve meters an agent's calls (role ``agent``, the task, the run, the
round), and the records of those calls, which travel back with the task's result; the solve's
workflow numbers them and the driver records them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from ...budget import Budget, Prices
from ...errors import ConfigError
from ...llm import LLM, MeteredLLM
from ...llm.spec import from_spec
from ...runner import AgentTaskRunner, Redaction
from .._calls import SolveCalls
from .._spending import Spending
from ._model import settings_of
from ._planning import discovery_of

__all__ = ["AgentModel", "agent_models"]


@dataclass
class AgentModel:
    """What the task runner of an agent task gets: ``llm``, ``agent_runner``, and the
    records of the calls made (:meth:`records`)."""

    llm: LLM
    agent_runner: AgentTaskRunner
    calls: SolveCalls

    @property
    def redaction(self) -> Redaction:
        """What the records' texts hide (the worker's redacting interceptors)."""
        return self.calls.redaction

    @redaction.setter
    def redaction(self, redaction: Redaction) -> None:
        self.calls.redaction = redaction

    #: What the solve had spent when the task started (``tokens``, ``cost``, ``model_calls``).
    before: dict[str, Any] = field(default_factory=dict)

    def records(self) -> list[dict[str, Any]]:
        return [r.model_dump(mode="json") for r in self.calls.records]

    def cut_off(self, why: str) -> list[dict[str, Any]]:
        """The records of the calls under way, as if cut off now (``why``)."""
        return [r.model_dump(mode="json") for r in self.calls.cut_off(why)]

    def spent(self) -> dict[str, Any]:
        """What the task's model calls spent of the solve's budget (what its ledger counts
        past ``before``), and why the budget ran low, if it did."""
        ledger = self.calls.spending
        return {
            "tokens": ledger.tokens - int(self.before.get("tokens", 0)),
            "cost": ledger.cost - float(self.before.get("cost", 0.0)),
            "model_calls": ledger.model_calls - int(self.before.get("model_calls", 0)),
            "low": ledger.low,
        }


@contextlib.asynccontextmanager
async def agent_models(model: dict[str, Any]) -> AsyncIterator[AgentModel]:
    """The agent model of spec ``model`` (with ``solve_id`` and ``round``), open while the
    block runs."""
    from ...agent import make_agent_runner

    settings = settings_of(model)
    try:
        client = from_spec(model["spec"], base_url=model.get("base_url"), settings=settings)
    except ConfigError as exc:
        raise ConfigError(f"the worker cannot build the solve's model: {exc}") from None
    ledger = model.get("ledger") or {}
    spending, before = _spending(ledger)
    calls = SolveCalls(model.get("solve_id"), spending=spending, emit=lambda _event: None)
    calls.round = model.get("round")
    async with client:
        yield AgentModel(
            MeteredLLM(client, observer=calls.observer("agent")),
            make_agent_runner(settings=settings, discovery=discovery_of(model.get("discovery"))),
            calls,
            before,
        )


def _spending(ledger: dict[str, Any]) -> tuple[Spending, dict[str, Any]]:
    """The ledger an agent task spends on its worker: the solve's budget (``limits``) with
    what the solve spent before the task (``spent``), its model priced as the driver priced
    it (``price``), so that each call is reserved, cut off or refused as a local agent's;
    without a budget, one that only counts."""
    limits = ledger.get("limits")
    if not limits:
        return Spending(None, Prices()), {}
    price = ledger.get("price")
    prices = Prices({"*": price} if price is not None else {}, defaults=False)
    spending = Spending(Budget.model_validate(limits), prices)
    spent = dict(ledger.get("spent") or {})
    spending.tokens = int(spent.get("tokens", 0))
    spending.cost = float(spent.get("cost", 0.0))
    spending.model_calls = int(spent.get("model_calls", 0))
    spending.tool_calls = int(spent.get("tool_calls", 0))
    return spending, spent
