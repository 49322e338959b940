"""A run's plan as the store keeps it (``run_plans.plan``), and back: the plan's JSON without
its defaults, as a plan file holds it, validated as it comes out."""

from __future__ import annotations

from ..errors import StoreError
from ..plan import Plan

__all__ = ["plan_from_column", "plan_to_column"]


def plan_to_column(plan: Plan) -> str:
    """``plan`` as the store keeps it: :meth:`~dagagent.plan.Plan.to_json` on one line."""
    return plan.to_json(indent=None)


def plan_from_column(text: str | None, run_id: str) -> Plan:
    """The plan of run ``run_id`` from its column, checked; a :class:`StoreError` saying why
    if it is not a plan (or the run has none on record)."""
    if text is None:
        raise StoreError(f"run {run_id}: no plan on record")
    try:
        return Plan.model_validate_json(text)
    except ValueError as exc:
        raise StoreError(f"run {run_id}: the recorded plan cannot be read: {exc}") from None
