"""Policy files: reading JSON (or TOML on Python 3.11+) and checking their form, with
messages that name the file, the rule and the key."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError
from ..text import read_bounded
from ._limits import Limit, LimitAction
from ._rules import Action, Rule

__all__ = ["MAX_POLICY_BYTES", "read_policy_file", "rules_from_dict"]

#: The most a policy file may hold (rules are a few lines each).
MAX_POLICY_BYTES = 16 * 1024 * 1024


def read_policy_file(path: str | Path) -> tuple[dict[str, Any], str]:
    """The object a policy file holds, and how messages name the file."""
    p = Path(path)
    origin = f"policy file {str(p)!r}"
    try:
        text = read_bounded(p, MAX_POLICY_BYTES, what="policy file")  # --policy /dev/zero
    except OSError as exc:
        raise ConfigError(f"{origin}: cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:  # too large, or not UTF-8
        raise ConfigError(f"{origin}: cannot read it: {exc}") from None
    data: Any
    if p.suffix.lower() == ".toml":
        data = _load_toml(text, origin)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{origin}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
            ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: must be an object with 'rules' and 'default'")
    return data, origin


def rules_from_dict(
    data: Mapping[str, Any], origin: str = "policy"
) -> tuple[list[Rule], Action, str | None, list[Limit]]:
    """The rules, default action, default reason and limits of a policy in its file form."""
    try:
        spec = _PolicySpec.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{origin}: {_spec_problems(exc, 'policy')}") from None
    rules: list[Rule] = []
    for i, raw in enumerate(spec.rules, 1):
        where = f"{origin}: {_rule_name(raw, i)}"
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: must be an object with an 'action', not {raw!r}")
        try:
            r = _RuleSpec.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(f"{where}: {_spec_problems(exc, 'rule')}") from None
        try:
            rules.append(
                Rule(
                    action=r.action,
                    tool=r.tool,
                    args=r.args,
                    side_effects=r.side_effects,
                    task=r.task,
                    source=r.source,
                    reason=r.reason,
                    name=r.name,
                )
            )
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    limits: list[Limit] = []
    for i, raw in enumerate(spec.limits, 1):
        where = f"{origin}: {_rule_name(raw, i, 'limit')}"
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: must be an object with 'max_calls' or 'cooldown_s'")
        try:
            lim = _LimitSpec.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(f"{where}: {_spec_problems(exc, 'limit')}") from None
        try:
            limits.append(Limit(**lim.model_dump()))
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return rules, spec.default, spec.default_reason, limits


def _load_toml(text: str, origin: str) -> Any:
    if sys.version_info >= (3, 11):
        import tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{origin}: not valid TOML: {exc}") from None
    raise ConfigError(f"{origin}: TOML policy files need Python 3.11+; use JSON")


class _RuleSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    action: Action
    tool: str | list[str] = "*"
    args: dict[str, Any] | None = None
    side_effects: bool | None = None
    task: str | None = None
    source: Literal["plan", "agent"] | None = None
    reason: str | None = None
    name: str | None = None


class _LimitSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    tool: str | list[str] = "*"
    max_calls: int | None = None
    cooldown_s: float | None = None
    action: LimitAction = "deny"
    side_effects: bool | None = None
    reason: str | None = None
    name: str | None = None


class _PolicySpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    default: Action = "allow"
    default_reason: str | None = None
    rules: list[Any] = Field(default_factory=list)  # each checked as a _RuleSpec, by position
    limits: list[Any] = Field(default_factory=list)  # each checked as a _LimitSpec


_RULE_KEYS = tuple(_RuleSpec.model_fields)
_KEYS = {
    "rule": _RULE_KEYS,
    "limit": tuple(_LimitSpec.model_fields),
    "policy": tuple(_PolicySpec.model_fields),
}


def _spec_problems(exc: ValidationError, where: str) -> str:
    """Pydantic's errors in words: ``key 'reson' is not a rule key (...)``."""
    out = []
    for e in exc.errors():
        loc = ".".join(str(p) for p in e["loc"] if not str(p).startswith(("list[", "str")))
        if e["type"] == "extra_forbidden":
            keys = _KEYS[where]
            out.append(f"{loc!r} is not a {where} key (keys: {', '.join(keys)})")
        elif loc:
            out.append(f"{loc}: {e['msg']}")
        else:
            out.append(e["msg"])
    return "; ".join(dict.fromkeys(out))


def _rule_name(raw: Any, position: int, what: str = "rule") -> str:
    name = raw.get("name") if isinstance(raw, dict) else None
    return f"{what} #{position}" + (f" ({name!r})" if isinstance(name, str) and name else "")
