"""Approval rules: allow, deny or ask before a tool is called.

A :class:`Policy` is an interceptor (see :class:`~dagagent.runner.ToolInvocation`): give it to
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

- a string: a glob matched against the whole value as the tool receives it (a path as its text,
  a number or a list as its JSON text);
- ``{"path": "..."}``: a glob matched against the file a path names (absolute, with ``.``,
  ``..``, repeated slashes and symbolic links resolved; see ``normal_path`` in ``_matchers``);
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
  With :func:`ask_later` (a callback returning :meth:`Approval.later`) nobody is asked now:
  the task waits (status ``waiting``, recorded with its arguments and the rule), the run
  goes on as far as it can and ends ``paused``; a person decides later (``dagagent approve``)
  and the run is resumed (``dagagent resume``, :func:`dagagent.resume`). A resumed run hands
  each recorded decision to the call it was made about: the policy does not ask again.

Every decision taken by a rule or a callback is recorded: it is appended to the task's
``TaskResult.decisions`` (a :class:`~dagagent.results.CallDecision`: ``tool``, ``decision``
— ``allow`` / ``deny`` / ``edit`` —, ``decided_by``, ``reason``, ``args``, ``at``, ``rule``,
``source``) and emitted as a
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

**Limits.** A policy may also bound how often tools are called, across the run (or the
solve, across its rounds): ``Policy(rules, limits=[Limit(tool="send_*", max_calls=3,
action="ask")])``, or in a file ``"limits": [{"tool": "send_*", "max_calls": 3, "cooldown_s":
60, "action": "ask"}]``. A call the rules let through that would cross a limit is denied
(``action="deny"``, the default) or asked about (``"ask"``: the ``ask`` callback decides
whether this one call may go beyond it; with :func:`ask_later` the task waits for a
person). A tool's own ``max_calls`` / ``cooldown_s`` are checked whatever the policies say.

The parts: the matcher language (``_matchers``), :class:`Rule` (``_rules``), asking
(``_asking``: :class:`ApprovalRequest`, :class:`Approval`), :class:`Limit` (``_limits``), policy
files (``_files``), the :class:`Policy` interceptor (``_policy``) and a run's rules on the
workers of another machine (``_workers``: :func:`run_policies`).
"""

from __future__ import annotations

from ._asking import Approval, ApprovalRequest, AskCallback, AskResult, ask_later
from ._files import read_policy_file
from ._limits import LIMIT_ACTIONS, Limit, LimitAction
from ._policy import Policy, load_policy
from ._rules import ACTIONS, Action, ArgsPredicate, Rule
from ._workers import run_policies

__all__ = [
    "ACTIONS",
    "LIMIT_ACTIONS",
    "Action",
    "Approval",
    "ApprovalRequest",
    "ArgsPredicate",
    "AskCallback",
    "AskResult",
    "Limit",
    "LimitAction",
    "Policy",
    "Rule",
    "ask_later",
    "load_policy",
    "read_policy_file",
    "run_policies",
]
