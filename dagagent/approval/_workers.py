"""A run's approval rules on the workers of another machine: :func:`run_policies`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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

    Their ``limits`` count the calls of the whole run: the run's workflow counts them and
    tells each task's worker the calls counted so far (each task's calls are checked and
    counted there as in a run in one process)."""
    ask = None if spec.get("no_wait") else ask_later
    policies: list[Policy] = []
    rules = spec.get("rules")
    if rules is not None:
        origin = f"policy file {spec.get('policy') or '(given)'}"
        policies.append(Policy.from_dict(rules, ask=ask, origin=origin))
    globs = spec.get("ask") or ()
    if globs:
        asked = [Rule(action="ask", tool=g, name=f"--ask {g}") for g in globs]
        policies.append(Policy(asked, ask=ask))
    return policies
