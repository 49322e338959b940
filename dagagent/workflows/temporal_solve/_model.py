"""The solve's model as the workers build it: a spec without a secret (see
:mod:`dagagent.llm._described`, which a run's agent tasks on Temporal use too)."""

from __future__ import annotations

from ...llm._described import model_of, settings_of

__all__ = ["model_of", "settings_of"]
