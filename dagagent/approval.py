"""Approval rules: allow, deny or ask before a tool is called.

A :class:`Policy` is an interceptor (see :class:`~dagagent.runner.ToolCall`): give it to
``execute(..., interceptors=[policy])`` and it checks every tool call of the run, whether the
call comes from a plan task or from a ReAct agent node. Its :class:`Rule` objects are tried in
order and **the first matching rule wins**; when none matches, the policy's ``default`` action
applies.

    policy = Policy(
        [
            Rule(tool="get_weather", action="allow"),
            Rule(tool="delete_*", args={"path": "/etc/*"}, action="deny", reason="system files"),
            Rule(side_effects=True, action="ask"),
        ],
        default="allow",
        ask=confirm,  # sync or async: (ApprovalRequest) -> Approval | bool
    )

A rule matches on the tool name (shell-style globs, one pattern or several), optionally on the
task id (glob), the caller (``source="plan"`` or ``"agent"``), whether the tool declared
``side_effects=True``, and the call's validated arguments: either a predicate
``(args) -> bool`` or a mapping of argument name to matcher, where a matcher is

- a string: a glob matched against the value (non-string values against their JSON text);
- a compiled ``re.Pattern`` or ``{"regex": "..."}``: ``search`` in the value's text;
- ``{"glob": "..."}`` or ``{"equals": value}``: explicit forms (JSON policy files use them);
  any other mapping is an error (a misspelt form would otherwise never match);
- a callable: a predicate on the value;
- anything else: equality.

Actions:

- ``allow``: the call goes ahead;
- ``deny``: the call is refused with the rule's ``reason``; the task gets status ``denied``
  (treated like a failure by the failure policy) and an agent node sees the refusal as the
  observation of its step;
- ``ask``: the ``ask`` callback decides, one question at a time (asks are serialized with a
  lock, so that concurrent tasks never prompt over each other): it returns an
  :class:`Approval` — approve, deny with feedback, or edit the arguments (they are validated
  again) — or simply ``True`` / ``False``. Sync callbacks run in a worker thread, so they may
  block (e.g. on ``input()``). Without a callback, ``ask`` denies and says why.

Every decision taken by a rule or a callback is recorded: it is appended to the task's
``TaskResult.decisions`` (``tool``, ``decision`` — ``allow`` / ``deny`` / ``edit`` —,
``decided_by``, ``reason``, ``args``, ``at``, ``rule``) and emitted as a
:class:`~dagagent.events.TaskDecision` event. A call that no rule matched and that the
default allows is not recorded: nothing was decided about it.

Policy files (:func:`load_policy`) are JSON, or TOML on Python 3.11+::

    {"default": "allow",
     "rules": [
       {"tool": "get_weather", "action": "allow"},
       {"tool": "delete_*", "args": {"path": "/etc/*"}, "action": "deny", "reason": "system"},
       {"tool": "calculate", "args": {"expression": {"regex": "\\\\*\\\\*"}}, "action": "ask"},
       {"side_effects": true, "action": "ask", "name": "side-effects"}
     ]}
"""

from __future__ import annotations

import fnmatch
import inspect
import json
import re
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ConfigError, TaskDeniedError, ToolArgumentsError
from .results import jsonable

if TYPE_CHECKING:
    from .runner import CallNext, ToolCall
    from .tools import Tool

__all__ = [
    "ACTIONS",
    "Action",
    "Approval",
    "ApprovalRequest",
    "AskCallback",
    "Policy",
    "Rule",
    "load_policy",
]

Action = Literal["allow", "deny", "ask"]
ACTIONS: tuple[str, ...] = ("allow", "deny", "ask")
_SOURCES = ("plan", "agent")

ArgsPredicate = Callable[[Mapping[str, Any]], bool]
_Matcher = Callable[[Any], bool]


# -- argument matchers ----------------------------------------------------------------------


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    try:
        return json.dumps(jsonable(value), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"bad regular expression {pattern!r}: {exc}") from None


def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(fnmatch.translate(pattern))


_MATCHER_FORMS = ("regex", "glob", "equals")


def _short(value: Any, width: int = 60) -> str:
    text = _text(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _matcher(spec: Any) -> tuple[_Matcher, str]:
    """Compile one argument matcher; return it with a short description."""
    if isinstance(spec, str):
        rx = _glob(spec)
        return (lambda v: rx.match(_text(v)) is not None), spec
    if isinstance(spec, re.Pattern):
        pat: re.Pattern[str] = spec
        return (lambda v: pat.search(_text(v)) is not None), f"/{pat.pattern}/"
    if isinstance(spec, Mapping):
        # Only the explicit forms: a typo such as {"regx": ...} would otherwise compare the
        # argument with that dict, never match, and silently disable a deny rule.
        if len(spec) != 1 or next(iter(spec)) not in _MATCHER_FORMS:
            raise ConfigError(
                f"argument matcher {_short(spec)} is not one of "
                + ", ".join(f'{{"{k}": ...}}' for k in _MATCHER_FORMS)
                + ' (to compare with a dict, use {"equals": {...}})'
            )
        ((kind, val),) = spec.items()
        if kind == "regex":
            if not isinstance(val, str):
                raise ConfigError(f"{{'regex': ...}} needs a string, got {val!r}")
            return _matcher(_regex(val))
        if kind == "glob":
            if not isinstance(val, str):
                raise ConfigError(f"{{'glob': ...}} needs a string, got {val!r}")
            return _matcher(val)
        if kind == "equals":
            return (lambda v: bool(v == val)), f"== {val!r}"
    if callable(spec):
        fn: Callable[[Any], Any] = spec
        name = getattr(fn, "__name__", type(fn).__name__)
        return (lambda v: bool(fn(v))), f"{name}()"
    return (lambda v: bool(v == spec)), f"== {spec!r}"


# -- rules ------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Rule:
    """Match a tool call and say what to do with it (first matching rule of a policy wins).

    - ``action``: ``"allow"``, ``"deny"`` or ``"ask"``.
    - ``tool``: a glob on the tool name, or several (any may match); default every tool.
    - ``args``: a predicate on the validated arguments, or ``{arg name: matcher}`` (all must
      match; an argument the tool does not have never matches). See the module docstring.
    - ``side_effects``: match only tools that declared (``True``) or did not declare
      (``False``) side effects.
    - ``task``: a glob on the task id. ``source``: ``"plan"`` or ``"agent"`` calls only.
    - ``reason``: why (shown when the rule denies; recorded with every decision).
    - ``name``: how records and messages refer to the rule (default: its position).
    """

    action: Action
    tool: str | Sequence[str] = "*"
    args: Mapping[str, Any] | ArgsPredicate | None = None
    side_effects: bool | None = None
    task: str | None = None
    source: str | None = None
    reason: str | None = None
    name: str | None = None
    _tool_rx: re.Pattern[str] = field(init=False, repr=False)
    _task_rx: re.Pattern[str] | None = field(init=False, repr=False)
    _arg_matchers: tuple[tuple[str, _Matcher, str], ...] = field(init=False, repr=False)
    _predicate: ArgsPredicate | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ConfigError(
                f"rule action must be one of {', '.join(ACTIONS)}, not {self.action!r}"
            )
        if self.source is not None and self.source not in _SOURCES:
            raise ConfigError(f"rule source must be 'plan' or 'agent', not {self.source!r}")
        tools = [self.tool] if isinstance(self.tool, str) else list(self.tool)
        if not tools or not all(isinstance(t, str) and t for t in tools):
            raise ConfigError(f"rule tool must be a glob or a list of globs, not {self.tool!r}")
        object.__setattr__(self, "tool", tools[0] if len(tools) == 1 else tuple(tools))
        tool_rx = re.compile("|".join(f"(?:{fnmatch.translate(t)})" for t in tools))
        object.__setattr__(self, "_tool_rx", tool_rx)
        object.__setattr__(self, "_task_rx", _glob(self.task) if self.task else None)
        matchers: list[tuple[str, _Matcher, str]] = []
        predicate: ArgsPredicate | None = None
        if isinstance(self.args, Mapping):
            for name, spec in self.args.items():
                m, desc = _matcher(spec)
                matchers.append((str(name), m, desc))
        elif callable(self.args):
            predicate = self.args
        elif self.args is not None:
            raise ConfigError(
                f"rule args must be a mapping of argument matchers or a predicate, "
                f"not {type(self.args).__name__}"
            )
        object.__setattr__(self, "_arg_matchers", tuple(matchers))
        object.__setattr__(self, "_predicate", predicate)

    # -- matching --------------------------------------------------------------------------

    def matches_tool(self, tool: Tool) -> bool:
        """Whether the tool name and the side-effects flag match."""
        if self._tool_rx.match(tool.name) is None:
            return False
        return self.side_effects is None or bool(tool.side_effects) is self.side_effects

    def matches_context(self, task_id: str = "", source: str = "plan") -> bool:
        """Whether the task id and the caller match."""
        if self._task_rx is not None and self._task_rx.match(task_id) is None:
            return False
        return self.source is None or self.source == source

    def matches_call(self, tool: Tool, task_id: str = "", source: str = "plan") -> bool:
        """Whether the parts of the rule that do not look at arguments match."""
        return self.matches_tool(tool) and self.matches_context(task_id, source)

    @property
    def looks_at_args(self) -> bool:
        return bool(self._arg_matchers) or self._predicate is not None

    def matches_args(self, args: Mapping[str, Any]) -> bool:
        if self._predicate is not None:
            try:
                return bool(self._predicate(args))
            except Exception as exc:
                raise ConfigError(
                    f"{self.summary()}: its args predicate raised {type(exc).__name__}: {exc}"
                ) from exc
        for name, m, _ in self._arg_matchers:
            if name not in args:
                return False
            try:
                if not m(args[name]):
                    return False
            except Exception as exc:
                raise ConfigError(
                    f"{self.summary()}: the matcher for argument {name!r} raised "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        return True

    def matches(
        self, tool: Tool, args: Mapping[str, Any], task_id: str = "", source: str = "plan"
    ) -> bool:
        """Whether this rule applies to a call of ``tool`` with (validated) ``args``."""
        return self.matches_call(tool, task_id, source) and (
            not self.looks_at_args or self.matches_args(args)
        )

    # -- descriptions ----------------------------------------------------------------------

    def summary(self) -> str:
        """One line: ``deny tool delete_* if path=/etc/*``."""
        tools = [self.tool] if isinstance(self.tool, str) else list(self.tool)
        what = "any tool" if tools == ["*"] else "tool " + ",".join(tools)
        parts = [self.action, what]
        if self.side_effects is True:
            parts.append("with side effects")
        elif self.side_effects is False:
            parts.append("without side effects")
        if self.task:
            parts.append(f"in task {self.task}")
        if self.source:
            parts.append(f"called by {self.source}")
        if self._arg_matchers:
            parts.append("if " + ", ".join(f"{n}={d}" for n, _, d in self._arg_matchers))
        elif self._predicate is not None:
            name = getattr(self._predicate, "__name__", "predicate")
            parts.append(f"if {name}(args)")
        return " ".join(parts)

    def label(self, position: int) -> str:
        """How decisions name this rule: ``rule 'name'`` or ``rule #2 (ask tool x)``."""
        if self.name:
            return f"rule {self.name!r}"
        return f"rule #{position} ({self.summary()})"


# -- what an ask callback gets and returns -------------------------------------------------------


@dataclass(frozen=True)
class Approval:
    """The answer of an ``ask`` callback. Build it with :meth:`approve`, :meth:`deny` or
    :meth:`edit`; ``decided_by`` names who decided (default: the callback)."""

    approved: bool
    reason: str | None = None
    args: Mapping[str, Any] | None = None
    decided_by: str | None = None

    @classmethod
    def approve(cls, reason: str | None = None, *, by: str | None = None) -> Approval:
        return cls(True, reason, None, by)

    @classmethod
    def deny(cls, reason: str | None = None, *, by: str | None = None) -> Approval:
        return cls(False, reason, None, by)

    @classmethod
    def edit(
        cls, args: Mapping[str, Any], reason: str | None = None, *, by: str | None = None
    ) -> Approval:
        """Approve the call with these arguments instead (they are validated again)."""
        return cls(True, reason, dict(args), by)


@dataclass(frozen=True)
class ApprovalRequest:
    """What an ``ask`` callback is asked about: the call and the rule that wants the question
    (``None`` when the policy's default is ``ask``)."""

    call: ToolCall
    rule: Rule | None
    rule_label: str

    @property
    def task_id(self) -> str:
        return self.call.task_id

    @property
    def tool(self) -> Tool:
        return self.call.tool

    @property
    def tool_name(self) -> str:
        return self.call.tool.name

    @property
    def args(self) -> dict[str, Any]:
        return self.call.args

    @property
    def source(self) -> str:
        return self.call.source

    def describe(self) -> str:
        who = "an agent step of task" if self.call.source == "agent" else "task"
        return f"{who} {self.call.task_id!r} wants to call {self.call.tool.name!r}"


AskResult = Union[Approval, bool]  # noqa: UP007 - a runtime alias, kept valid on 3.10
AskCallback = Callable[[ApprovalRequest], Union[AskResult, Awaitable[AskResult]]]  # noqa: UP007


# -- the policy ---------------------------------------------------------------------------------


class Policy:
    """Ordered approval rules, a default action and an ``ask`` callback; an interceptor.

    - ``rules``: tried in order; the first that matches decides.
    - ``default``: the action when no rule matches (``"allow"`` unless said otherwise).
    - ``default_reason``: the reason recorded (and shown on denial) for the default action.
    - ``ask``: decides ``ask`` calls (sync or async; see :class:`ApprovalRequest`,
      :class:`Approval`). Without it, ``ask`` means deny.
    - ``serialize_asks``: one question at a time (default ``True``; turn off only for a
      callback that can handle concurrent questions).
    """

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        *,
        default: Action = "allow",
        default_reason: str | None = None,
        ask: AskCallback | None = None,
        serialize_asks: bool = True,
    ) -> None:
        if default not in ACTIONS:
            raise ConfigError(
                f"policy default must be one of {', '.join(ACTIONS)}, not {default!r}"
            )
        self.rules: tuple[Rule, ...] = tuple(rules)
        for r in self.rules:
            if not isinstance(r, Rule):
                raise ConfigError(f"policy rules must be Rule objects, got {type(r).__name__}")
        self.default: Action = default
        self.default_reason = default_reason
        self.ask = ask
        self._labeled = tuple((r, r.label(i)) for i, r in enumerate(self.rules, 1))
        # rules that can match a tool, by (name, side effects): computed once per tool
        self._by_tool: dict[tuple[str, bool], tuple[tuple[Rule, str], ...]] = {}
        self._ask_async = ask is not None and _is_async(ask)
        self._ask_name = _callable_name(ask) if ask is not None else ""
        self._lock = anyio.Lock() if serialize_asks else None

    def __repr__(self) -> str:
        return f"Policy({len(self.rules)} rules, default={self.default!r})"

    def replace(self, **changes: Any) -> Policy:
        """A copy with some constructor arguments changed (e.g. ``ask=`` or ``rules=``)."""
        options: dict[str, Any] = {
            "rules": self.rules,
            "default": self.default,
            "default_reason": self.default_reason,
            "ask": self.ask,
            "serialize_asks": self._lock is not None,
        }
        options.update(changes)
        return Policy(options.pop("rules"), **options)

    # -- matching --------------------------------------------------------------------------

    def match(
        self, tool: Tool, args: Mapping[str, Any], task_id: str = "", source: str = "plan"
    ) -> tuple[Action, Rule | None, str]:
        """``(action, rule, label)`` for a call; ``rule`` is ``None`` for the default."""
        key = (tool.name, bool(tool.side_effects))
        candidates = self._by_tool.get(key)
        if candidates is None:
            candidates = tuple((r, lb) for r, lb in self._labeled if r.matches_tool(tool))
            if len(self._by_tool) < 4096:
                self._by_tool[key] = candidates
        for rule, label in candidates:
            if rule.matches_context(task_id, source) and (
                not rule.looks_at_args or rule.matches_args(args)
            ):
                return rule.action, rule, label
        return self.default, None, "policy default"

    def preview(self, tool: Tool, literal_args: Mapping[str, Any] | None, task_id: str = "") -> str:
        """The action a plan task will meet, before it runs: ``allow`` / ``deny`` / ``ask``,
        or ``"ask?"`` (etc.) when a rule's decision depends on arguments that are not known
        yet (they come from references). ``literal_args``: the arguments known now."""
        for rule in self.rules:
            if not rule.matches_call(tool, task_id, "plan"):
                continue
            if not rule.looks_at_args:
                return rule.action
            known = literal_args or {}
            needed = [n for n, _, _ in rule._arg_matchers]
            if rule._predicate is not None or any(n not in known for n in needed):
                return f"{rule.action}?"
            if rule.matches_args(known):
                return rule.action
        return self.default

    def check(self, tools: Iterable[Tool]) -> list[str]:
        """Mistakes a rule cannot be told from before a run: a rule that looks at an
        argument none of the tools it applies to has (it never matches, so a ``deny`` rule
        denies nothing). One line per problem."""
        tools = list(tools)
        problems = []
        for rule, label in self._labeled:
            applies = [t for t in tools if rule.matches_tool(t)]
            if not applies:
                continue
            for name, _, _ in rule._arg_matchers:
                if not any(name in t.parameters_schema.get("properties", {}) for t in applies):
                    names = ", ".join(t.name for t in applies[:5])
                    more = ", ..." if len(applies) > 5 else ""
                    problems.append(
                        f"{label} looks at argument {name!r}, which no tool it applies to has "
                        f"({names}{more}): it never matches"
                    )
        return problems

    def describe(self) -> list[str]:
        """One line per rule, then the default."""
        lines = [f"{label}: {r.summary()}" if r.name else label for r, label in self._labeled]
        lines.append(f"default: {self.default}")
        return lines

    # -- the interceptor ----------------------------------------------------------------------

    async def __call__(self, call: ToolCall, call_next: CallNext) -> Any:
        action, rule, label = self.match(call.tool, call.args, call.task_id, call.source)
        if rule is None:
            if action == "allow":
                return await call_next(call)
            reason = self.default_reason
        else:
            reason = rule.reason
        if action == "allow":
            _decide(call, "allow", label, reason, label)
            return await call_next(call)
        if action == "deny":
            reason = reason or f"tool {call.tool.name!r} is not allowed"
            _decide(call, "deny", label, reason, label)
            raise TaskDeniedError(reason, decided_by=label)
        approval = await self._ask(ApprovalRequest(call, rule, label))
        who = approval.decided_by or self._ask_name or label
        if not approval.approved:
            why = approval.reason or "not approved"
            _decide(call, "deny", who, why, label)
            raise TaskDeniedError(why, decided_by=who)
        if approval.args is None:
            _decide(call, "allow", who, approval.reason, label)
            return await call_next(call)
        edited = dict(approval.args)
        try:
            call.tool.validate_args(edited)
        except ToolArgumentsError as exc:
            call.args = edited
            _decide(call, "edit", who, approval.reason, label)
            raise ToolArgumentsError(
                call.tool.name, [f"{e} (arguments edited by {who})" for e in exc.errors]
            ) from None
        call.args = edited
        _decide(call, "edit", who, approval.reason, label)
        return await call_next(call)

    async def _ask(self, request: ApprovalRequest) -> Approval:
        if self.ask is None:
            return Approval.deny(
                f"approval needed for tool {request.tool_name!r} but no ask callback was given",
                by=request.rule_label,
            )
        if self._lock is None:
            return await self._call_ask(request)
        async with self._lock:
            return await self._call_ask(request)

    async def _call_ask(self, request: ApprovalRequest) -> Approval:
        ask = self.ask
        assert ask is not None
        answer: Any
        if self._ask_async:
            answer = await ask(request)  # type: ignore[misc]
        else:
            answer = await anyio.to_thread.run_sync(ask, request)
            if inspect.isawaitable(answer):
                answer = await answer
        if isinstance(answer, Approval):
            return answer
        if isinstance(answer, bool):
            return Approval(answer)
        raise ConfigError(
            f"the ask callback {self._ask_name} returned {type(answer).__name__}; "
            "expected an Approval or a bool"
        )

    # -- files ----------------------------------------------------------------------------------

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, ask: AskCallback | None = None, origin: str = "policy"
    ) -> Policy:
        """Build a policy from its file form (see the module docstring)."""
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
        return cls(rules, default=spec.default, default_reason=spec.default_reason, ask=ask)

    @classmethod
    def from_file(cls, path: str | Path, *, ask: AskCallback | None = None) -> Policy:
        return load_policy(path, ask=ask)


def load_policy(path: str | Path, *, ask: AskCallback | None = None) -> Policy:
    """Read a policy file: JSON, or TOML (``.toml``, Python 3.11+)."""
    p = Path(path)
    origin = f"policy file {str(p)!r}"
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{origin}: cannot read it: {exc.strerror or exc}") from None
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
    return Policy.from_dict(data, ask=ask, origin=origin)


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


class _PolicySpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    default: Action = "allow"
    default_reason: str | None = None
    rules: list[Any] = Field(default_factory=list)  # each checked as a _RuleSpec, by position


_RULE_KEYS = tuple(_RuleSpec.model_fields)


def _spec_problems(exc: ValidationError, where: str) -> str:
    """Pydantic's errors in words: ``key 'reson' is not a rule key (...)``."""
    out = []
    for e in exc.errors():
        loc = ".".join(str(p) for p in e["loc"] if not str(p).startswith(("list[", "str")))
        if e["type"] == "extra_forbidden":
            keys = _RULE_KEYS if where == "rule" else ("default", "default_reason", "rules")
            out.append(f"{loc!r} is not a {where} key (keys: {', '.join(keys)})")
        elif loc:
            out.append(f"{loc}: {e['msg']}")
        else:
            out.append(e["msg"])
    return "; ".join(dict.fromkeys(out))


def _rule_name(raw: Any, position: int) -> str:
    name = raw.get("name") if isinstance(raw, dict) else None
    return f"rule #{position}" + (f" ({name!r})" if isinstance(name, str) and name else "")


# -- helpers ------------------------------------------------------------------------------------


def _decide(call: ToolCall, decision: str, by: str, reason: str | None, rule: str) -> None:
    call.decide(decision, by, reason)
    call.decisions[-1]["rule"] = rule


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - objects with an async __call__
    )


def _callable_name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return f"ask callback {name!r}"
