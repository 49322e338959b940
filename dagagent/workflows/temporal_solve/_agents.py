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
from dataclasses import dataclass
from typing import Any

from ...budget import Prices
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

    def records(self) -> list[dict[str, Any]]:
        return [r.model_dump(mode="json") for r in self.calls.records]


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
    calls = SolveCalls(
        model.get("solve_id"), spending=Spending(None, Prices()), emit=lambda _event: None
    )
    calls.round = model.get("round")
    async with client:
        yield AgentModel(
            MeteredLLM(client, observer=calls.observer("agent")),
            make_agent_runner(settings=settings, discovery=discovery_of(model.get("discovery"))),
            calls,
        )
