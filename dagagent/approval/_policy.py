"""The :class:`Policy`: ordered rules and a default action, as an interceptor."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from ..errors import ConfigError, TaskDeniedError, TaskWaitingError, ToolArgumentsError
from ..results import UNANSWERED, WAIT, Decision
from ._asking import Approval, ApprovalRequest, AskCallback, Asker
from ._files import read_policy_file, rules_from_dict
from ._limits import Limit
from ._rules import ACTIONS, Action, Rule

if TYPE_CHECKING:
    from ..results import ApprovalAnswer
    from ..runner import CallNext, ToolInvocation
    from ..tools import Tool

__all__ = ["Policy", "load_policy"]


class Policy:
    """Ordered approval rules, a default action and an ``ask`` callback; an interceptor.

    - ``rules``: tried in order; the first that matches decides.
    - ``default``: the action when no rule matches (``"allow"`` unless said otherwise).
    - ``default_reason``: the reason recorded (and shown on denial) for the default action.
    - ``ask``: decides ``ask`` calls (sync or async; see :class:`ApprovalRequest`,
      :class:`Approval`). Without it, ``ask`` means deny. :func:`ask_later` (or a callback
      returning :meth:`Approval.later`) makes the task wait for a person's later decision.
      A call a person already decided about (a resumed run) is not asked about again.
    - ``serialize_asks``: one question at a time (default ``True``; turn off only for a
      callback that can handle concurrent questions).
    - ``limits``: :class:`Limit` objects: at most so many calls of some tools (or so many
      seconds between them) across the run or solve; a call the rules let through that would
      cross one is denied, or asked about (``action="ask"``). Counted on the run's (or
      solve's) :class:`~dagagent.runner.CallLedger` when the policy lets a call through.
    """

    def __init__(
        self,
        rules: Iterable[Rule] = (),
        *,
        default: Action = "allow",
        default_reason: str | None = None,
        ask: AskCallback | None = None,
        serialize_asks: bool = True,
        limits: Iterable[Limit] = (),
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
        self.limits: tuple[Limit, ...] = tuple(limits)
        for lim in self.limits:
            if not isinstance(lim, Limit):
                raise ConfigError(f"policy limits must be Limit objects, got {type(lim).__name__}")
        self._limit_labels = tuple((lim, lim.label(i)) for i, lim in enumerate(self.limits, 1))
        # rules that can match a tool, by (name, side effects): computed once per tool
        self._by_tool: dict[tuple[str, bool], tuple[tuple[Rule, str], ...]] = {}
        self._asker = Asker(ask, serialize=serialize_asks)

    def __repr__(self) -> str:
        return f"Policy({len(self.rules)} rules, default={self.default!r})"

    def replace(self, **changes: Any) -> Policy:
        """A copy with some constructor arguments changed (e.g. ``ask=`` or ``rules=``)."""
        options: dict[str, Any] = {
            "rules": self.rules,
            "default": self.default,
            "default_reason": self.default_reason,
            "ask": self.ask,
            "serialize_asks": self._asker.serialize,
            "limits": self.limits,
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
        # Rules see the arguments as the tool will receive them (validated and coerced: a
        # string may become a Path or a number), so the preview matches the same values;
        # when they cannot be validated yet, an argument rule's decision is not known.
        validated: Mapping[str, Any] | None
        try:
            validated = tool.validate_args(literal_args or {})
        except ToolArgumentsError:
            validated = None
        for rule in self.rules:
            if not rule.matches_call(tool, task_id, "plan"):
                continue
            if not rule.looks_at_args:
                return rule.action
            if validated is None:
                return f"{rule.action}?"
            if rule.matches_args(validated):
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
            for name in rule.arg_names:
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
        lines += [f"{lb}: {lim.summary()}" if lim.name else lb for lim, lb in self._limit_labels]
        return lines

    # -- the interceptor ----------------------------------------------------------------------

    async def __call__(self, call: ToolInvocation, call_next: CallNext) -> Any:
        action, rule, label = self.match(call.tool, call.args, call.task_id, call.source)
        if rule is None:
            if action == "allow":
                return await self._within_limits(call, call_next)
            reason = self.default_reason
        else:
            reason = rule.reason
        if action == "allow":
            _decide(call, "allow", label, reason, label)
            return await self._within_limits(call, call_next)
        if action == "deny":
            reason = reason or f"tool {call.tool.name!r} is not allowed"
            _decide(call, "deny", label, reason, label)
            raise TaskDeniedError(reason, decided_by=label)
        answer = call.answer()
        taken = _taken_at(answer)
        if answer is not None:  # a person decided while the run was paused
            approval = Approval.from_answer(answer)
        else:
            try:
                approval = await self._asker(ApprovalRequest(call, rule, label))
            except anyio.get_cancelled_exc_class():
                # the run stopped while the question was open: on record, the task waited
                # for an answer all that time, and its call never started
                _decide(call, UNANSWERED, "nobody", "the run stopped before an answer came", label)
                raise
        if approval.wait:
            why = call.changed_answer_note() or approval.reason or "a person decides later"
            _decide(call, WAIT, label, why, label)
            raise TaskWaitingError(why, tool=call.tool.name, rule=label)
        who = approval.decided_by or self._asker.name or label
        if not approval.approved:
            why = approval.reason or "not approved"
            _decide(call, "deny", who, why, label, at=taken)
            raise TaskDeniedError(why, decided_by=who)
        if approval.args is None:
            _decide(call, "allow", who, approval.reason, label, at=taken)
            return await self._within_limits(call, call_next)
        edited = dict(approval.args)
        try:
            call.tool.validate_args(edited)
        except ToolArgumentsError as exc:
            call.args = edited
            _decide(call, "edit", who, approval.reason, label, at=taken)
            raise ToolArgumentsError(
                call.tool.name, [f"{e} (arguments edited by {who})" for e in exc.errors]
            ) from None
        call.args = edited
        _decide(call, "edit", who, approval.reason, label, at=taken)
        return await self._within_limits(call, call_next)

    async def _within_limits(self, call: ToolInvocation, call_next: CallNext) -> Any:
        """Let a call the rules allowed through, unless it would cross one of the policy's
        limits: then deny it, or ask whether this one call may go beyond. The call is counted
        against every limit it matches in the same step as the last check."""
        if not self.limits:
            return await call_next(call)
        ledger, tool = call.ledger, call.tool
        mine = [(lim, lb) for lim, lb in self._limit_labels if lim.matches(tool)]
        for lim, _ in mine:  # a resumed run's calls before its pause count too
            ledger.carry(lim, lim.matches)
        passed: set[Limit] = set()  # a person let the call go beyond these
        while True:
            crossed = None
            for lim, label in mine:
                if lim in passed:
                    continue
                crossing = ledger.crossing(
                    lim, lim.what(), max_calls=lim.max_calls, cooldown_s=lim.cooldown_s
                )
                if crossing is not None:
                    crossed = (lim, label, crossing.message)
                    break
            if crossed is None:
                break
            lim, label, why = crossed
            if lim.reason:
                why = f"{why} ({lim.reason})"
            if lim.action == "deny":
                _decide(call, "deny", label, why, label)
                raise TaskDeniedError(why, decided_by=label)
            approval, taken = await self._limit_answer(call, label, why)
            if approval.wait:
                reason = call.changed_answer_note() or approval.reason or why
                _decide(call, WAIT, label, reason, label)
                raise TaskWaitingError(reason, tool=tool.name, rule=label)
            who = approval.decided_by or self._asker.name or label
            if not approval.approved:
                reason = approval.reason or "not approved beyond the limit"
                _decide(call, "deny", who, reason, label, at=taken)
                raise TaskDeniedError(reason, decided_by=who)
            said = approval.reason or f"beyond the limit: {why}"
            _decide(call, "allow", who, said, label, at=taken)
            passed.add(lim)  # other limits are checked again: the question took time
        for lim, _ in mine:
            ledger.count(lim)
        return await call_next(call)

    async def _limit_answer(
        self, call: ToolInvocation, label: str, why: str
    ) -> tuple[Approval, float | None]:
        """The answer about a call beyond a limit, and when it was taken if not now."""
        answer = call.answer()
        if answer is not None:  # a person decided while the run was paused
            return Approval.from_answer(answer), _taken_at(answer)
        try:
            return await self._asker(ApprovalRequest(call, None, label, why)), None
        except anyio.get_cancelled_exc_class():
            _decide(call, UNANSWERED, "nobody", "the run stopped before an answer came", label)
            raise

    # -- files ----------------------------------------------------------------------------------

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, ask: AskCallback | None = None, origin: str = "policy"
    ) -> Policy:
        """Build a policy from its file form (see :mod:`dagagent.approval`)."""
        rules, default, default_reason, limits = rules_from_dict(data, origin)
        return cls(rules, default=default, default_reason=default_reason, ask=ask, limits=limits)

    @classmethod
    def from_file(cls, path: str | Path, *, ask: AskCallback | None = None) -> Policy:
        return load_policy(path, ask=ask)


def load_policy(path: str | Path, *, ask: AskCallback | None = None) -> Policy:
    """Read a policy file: JSON, or TOML (``.toml``, Python 3.11+)."""
    data, origin = read_policy_file(path)
    return Policy.from_dict(data, ask=ask, origin=origin)


def _decide(
    call: ToolInvocation,
    decision: Decision,
    by: str,
    reason: str | None,
    rule: str,
    *,
    at: float | None = None,
) -> None:
    call.decide(decision, by, reason, rule=rule, at=at)


def _taken_at(answer: ApprovalAnswer | None) -> float | None:
    """When a person took the recorded decision ``answer`` (``None``: none, or not known):
    its call's record says so, not when the resume came to use it; a call the question
    held up waited for it from the question to the resume, a span the store keeps
    (:func:`~dagagent.store.person_waits`), and no time of its resumed run."""
    return answer.at if answer is not None and answer.at > 0 else None
