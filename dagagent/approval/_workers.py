"""A run's approval rules on the workers of another machine: :func:`run_policies`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from ._asking import ask_later
from ._policy import Policy
from ._rules import Rule

__all__ = ["run_policies"]


def run_policies(spec: Mapping[str, Any]) -> list[Policy]:
    """The policies a worker applies to the calls of a run whose approval rules travel with
    it as data (a run on Temporal: ``TemporalExecutor(approval=...)``, set by ``dagagent
    run --policy FILE --ask GLOB``): ``spec["rules"]``, a policy file's rules as
    :meth:`Policy.from_dict` reads them (``spec["policy"]`` names the file), and
    ``spec["ask"]``, globs of tools whose calls ask. Nobody is at a worker to ask: a call
    that asks waits for a person's decision (:func:`ask_later`; the run pauses), or with
    ``spec["no_wait"]`` is denied. Give it to the workers: ``serve(...,
    run_policies=run_policies)`` (``dagagent worker`` does).

    Raises :class:`~dagagent.errors.ConfigError` for rules with limits: a limit counts a
    run's calls together, and each worker sees one task's."""
    ask = None if spec.get("no_wait") else ask_later
    policies: list[Policy] = []
    rules = spec.get("rules")
    if rules is not None:
        origin = f"policy file {spec.get('policy') or '(given)'}"
        policy = Policy.from_dict(rules, ask=ask, origin=origin)
        if policy.limits:
            raise ConfigError(
                f"{origin}: its limits count a run's calls together, which the workers of a "
                "run on Temporal (each seeing one task's calls) cannot do: run it on another "
                "executor, or without limits"
            )
        policies.append(policy)
    globs = spec.get("ask") or ()
    if globs:
        asked = [Rule(action="ask", tool=g, name=f"--ask {g}") for g in globs]
        policies.append(Policy(asked, ask=ask))
    return policies
