"""Durable solves: the whole solve as one Temporal workflow (``ask --executor temporal``).

The rounds (plan → run → join) are workflow state (:mod:`._workflow`); the planner's,
replanner's and joiner's model calls run on the workers as activities
(:mod:`._activities`), each round's run is the plan run workflow of
:mod:`dagagent.executors.temporal`, and the driver follows and records it all
(:mod:`._driver`). The workers build the model from a spec without a secret
(:mod:`._model`) and read its key from their own environment; a planner of one's own, the
tool discovery and a session's earlier turns travel as data (:mod:`._planning`).

A worker serves solves when it registers :func:`worker_parts`'s workflows and activities
(``dagagent worker`` always does)::

    async with running_worker(registry, **worker_parts(registry)): ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...executors.temporal import INSTALL_HINT
from ._activities import SolveActivities
from ._agents import agent_models
from ._driver import (
    attach_solve,
    refuse_unsupported,
    solve_on_temporal,
    solve_workflow_id,
    with_policy_file,
)
from ._model import model_of
from ._planning import conversing
from ._workflow import SolveWorkflow

if TYPE_CHECKING:
    from ...budget import Prices
    from ...tools import Registry

__all__ = [
    "INSTALL_HINT",
    "SolveActivities",
    "SolveWorkflow",
    "attach_solve",
    "model_of",
    "refuse_unsupported",
    "solve_on_temporal",
    "solve_workflow_id",
    "with_policy_file",
    "worker_parts",
]


def worker_parts(registry: Registry, *, prices: Prices | None = None) -> dict[str, Any]:
    """The keywords of :func:`~dagagent.executors.temporal.running_worker` (and ``serve``)
    that make a worker serve solves too: the solve's workflow, its model steps, the model
    of its agent tasks and the tools of a session's turns."""
    return {
        "workflows": [SolveWorkflow],
        "activities": SolveActivities(registry, prices=prices).definitions(),
        "agents": agent_models,
        "conversing": conversing,
    }
