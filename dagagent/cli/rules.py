"""The approval rules of a command-line run (``--policy FILE``, ``--ask TOOL``), kept with it.

A run is recorded with the rules it was started with: the policy file's rules as they were
read then (not only its path) and the ``--ask`` globs (``context["approval"]``). ``resume``
applies those same rules, and so does ``replan --execute`` unless it is given rules of its
own: a policy file edited between the pause and the resume does not change what was denied
(the change is reported, and the rules kept with the run apply).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..approval import AskCallback, Policy, read_policy_file
from ..errors import ConfigError
from ._app import err

if TYPE_CHECKING:
    from ..store import RunRecord

__all__ = ["ApprovalRules", "recorded_rules"]


def _digest(document: Mapping[str, Any]) -> str:
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ApprovalRules:
    """A policy file (its path and its rules as read, once) and ``--ask`` globs.

    ``policy`` is the file's rules in file form (what :func:`dagagent.load_policy` reads),
    read when the rules were given: the run applies them, and is recorded with them."""

    policy_file: Path | None = None
    policy: Mapping[str, Any] | None = None
    asks: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.policy_file is not None or bool(self.asks)

    @classmethod
    def given(cls, policy_file: Path | None, asks: Iterable[str] = ()) -> ApprovalRules:
        """The rules given on the command line; the policy file is read now (a
        :class:`~dagagent.errors.ConfigError` naming it when it cannot be used)."""
        for pattern in asks:
            if not pattern.strip():
                raise ConfigError("--ask needs a tool name or glob, e.g. --ask 'write_*'")
        if policy_file is None:
            return cls(asks=tuple(asks))
        document, origin = read_policy_file(policy_file)
        Policy.from_dict(document, origin=origin)  # its mistakes now, naming the file
        return cls(Path(policy_file).resolve(), document, tuple(asks))

    @classmethod
    def recorded(cls, record: RunRecord) -> tuple[ApprovalRules, list[str]]:
        """The rules ``record`` was started with, and what to tell the user about them: a
        policy file changed since (the rules kept with the run apply all the same), or a
        run recorded before its rules were kept (the file as it is now applies)."""
        spec = record.context.get("approval")
        if not isinstance(spec, dict):
            return cls(), []
        path = spec.get("policy")
        asks = spec.get("ask")
        kept = tuple(a for a in asks if isinstance(a, str)) if isinstance(asks, list) else ()
        if not isinstance(path, str):
            return cls(asks=kept), []
        policy_file = Path(path)
        document = spec.get("rules")
        if not isinstance(document, dict):  # recorded before the rules were kept
            rules = cls.given(policy_file, kept)
            return rules, [
                f"run {record.run_id} was recorded with the policy file {path} but not its "
                "rules (an older dagagent): the file as it is now applies"
            ]
        rules = cls(policy_file, document, kept)
        return rules, [note] if (note := rules.changed(record.run_id)) else []

    def changed(self, run_id: str) -> str | None:
        """A note when the policy file no longer holds the rules kept with run ``run_id``."""
        if self.policy_file is None or self.policy is None:
            return None
        try:
            now, _ = read_policy_file(self.policy_file)
        except ConfigError:
            now = None
        if now is not None and _digest(now) == _digest(self.policy):
            return None
        what = "has changed" if now is not None else "cannot be read any more"
        return (
            f"the policy file {self.policy_file} {what} since run {run_id} was started: "
            "the rules it had then apply (they are kept with the run)"
        )

    def policy_with(self, ask: AskCallback) -> Policy | None:
        """The policy file's rules as a :class:`~dagagent.Policy` asking with ``ask``."""
        if self.policy is None:
            return None
        return Policy.from_dict(self.policy, ask=ask, origin=f"policy file {self.policy_file}")

    def describe(self) -> str:
        """``policy file PATH and --ask a, --ask b``."""
        parts = [f"policy file {self.policy_file}"] if self.policy_file is not None else []
        parts += [f"--ask {a}" for a in self.asks]
        return " and ".join(parts) or "no approval rules"

    def context(self) -> dict[str, Any] | None:
        """What the run is recorded with (``context["approval"]``): the policy file's path and
        rules, and the ``--ask`` globs; ``None`` without rules."""
        if not self:
            return None
        spec: dict[str, Any] = {}
        if self.policy_file is not None:
            spec["policy"] = str(self.policy_file)
            spec["rules"] = dict(self.policy or {})
        if self.asks:
            spec["ask"] = list(self.asks)
        return spec


def recorded_rules(record: RunRecord) -> ApprovalRules:
    """The approval rules ``record`` was started with (kept with it), saying on stderr when
    its policy file changed since (the kept rules apply)."""
    rules, notes = ApprovalRules.recorded(record)
    for note in notes:
        err.print(f"note: {note}", markup=False, highlight=False)
    return rules
