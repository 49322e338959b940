"""Keeping secrets out of what leaves the runner: the one boundary where a task's record, its
events and its spans are redacted.

The redacting interceptors (:class:`~dagagent.runner.ArgumentRedactor`, such as
:func:`dagagent.interceptors.redacting`) rewrite a call's arguments on its way to the tool and
record the redaction as a decision. What never reached them must be redacted all the same: a
task that failed before its call (its arguments did not validate, an earlier interceptor
refused it), an agent's calls whose arguments did not fit, error messages and tracebacks that
quote a secret. :class:`Redaction` does that for every result, event and span, in one place.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any, cast

from ..conditions import condition_references
from ..graph import dependencies_of
from ..plan import Plan, Task, ToolTask
from ..references import ITEM, Template
from ..results import REDACT, AgentStep, CallDecision
from ..text import jsonable
from ._calls import ArgumentRedactor, Interceptor

__all__ = ["Redaction"]

#: The name under which a map task's list of elements is shown to the redacting interceptors
#: (as if it were one argument: a secret name inside an element is still found).
_ITEMS = "for_each"

#: A path into a map's element, as a reference walks it (``${@item.cfg.0}``: ``("cfg", "0")``).
_Path = tuple[str, ...]
#: What a hidden part of an element is replaced with when the redaction's own replacement
#: cannot be read off (a pattern ate the probe only in part).
_HIDDEN = "[redacted]"


class _ElementUse:
    """Where a map task's arguments put its element: the parts of the element that only ever
    go where a redacting interceptor hides them (``{"api_key": "${@item}"}``,
    ``{"auth": "Bearer ${@item.token}"}``), and what the redaction puts there.

    Found with a probe: each argument string that reads the element is replaced with a marker
    of its own, the redacting interceptors rewrite those arguments, and a marker that did not
    come through marks a hidden place. A part of the element that is read anywhere else too
    (an argument left as it is, the task's ``when``) is not hidden: the tool, or the
    condition, gets it as it is, so the record of the element's call shows it anyway, and the
    stored plan must give a resume what the run had."""

    __slots__ = ("hidden", "replacement", "visible")

    def __init__(self, redaction: Redaction, task: ToolTask) -> None:
        self.hidden: list[_Path] = []
        self.visible: list[_Path] = [r.path for r in condition_references(task.when) if _item(r)]
        self.replacement = _HIDDEN
        probes: dict[str, tuple[tuple[Any, ...], list[_Path]]] = {}
        tag = uuid.uuid4().hex

        def probe(value: Any, where: tuple[Any, ...]) -> Any:
            if isinstance(value, str):
                paths = [r.path for r in Template(value).refs if _item(r)]
                if not paths:
                    return value
                marker = f"\x00{tag}:{len(probes)}\x00"
                probes[marker] = (where, paths)
                return marker
            if isinstance(value, dict):
                return {k: probe(v, (*where, k)) for k, v in value.items()}
            if isinstance(value, list):
                return [probe(v, (*where, i)) for i, v in enumerate(value)]
            return value

        probed = probe(task.args, ())
        if not probes:
            return
        after = redaction.args(task.tool, probed)
        text = json.dumps(after, default=str)
        for marker, (where, paths) in probes.items():
            if json.dumps(marker)[1:-1] in text:
                self.visible.extend(paths)
                continue
            self.hidden.extend(paths)
            put = _at(after, where)
            if isinstance(put, str) and tag not in put:
                self.replacement = put

    def __bool__(self) -> bool:
        return bool(self.hidden)

    def redact(self, items: list[Any], found: list[str]) -> list[Any]:
        """``items`` with the parts of each that only go to hidden places replaced; the
        strings (and numbers) replaced are added to ``found``."""
        return [self._element(v, (), found) for v in items]

    def _element(self, value: Any, path: _Path, found: list[str]) -> Any:
        n = len(path)
        if any(v == path[: len(v)] for v in self.visible):
            return value  # read as it is somewhere: kept whole
        if any(h == path[: len(h)] for h in self.hidden) and not any(
            len(v) > n and v[:n] == path for v in self.visible
        ):
            return self._all(value, found)
        if not any(len(p) > n and p[:n] == path for p in self.hidden):
            return value
        if isinstance(value, dict):
            return {k: self._element(v, (*path, str(k)), found) for k, v in value.items()}
        if isinstance(value, list):
            return [self._element(v, (*path, str(i)), found) for i, v in enumerate(value)]
        return value

    def _all(self, value: Any, found: list[str]) -> Any:
        if isinstance(value, (str, bytes)) or (
            isinstance(value, (int, float)) and not isinstance(value, bool)
        ):
            if value != self.replacement:
                text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
                found.append(str(text))
            return self.replacement
        if isinstance(value, dict):
            return {k: self._all(v, found) for k, v in value.items()}
        if isinstance(value, list):
            return [self._all(v, found) for v in value]
        return value


def _item(ref: Any) -> bool:
    return bool(ref.task_id == ITEM)


def _at(value: Any, where: tuple[Any, ...]) -> Any:
    for key in where:
        within = isinstance(value, list) and isinstance(key, int) and key < len(value)
        if not (within or (isinstance(value, dict) and key in value)):
            return None
        value = value[key]
    return value


class Redaction:
    """The redacting interceptors of a run, applied to what leaves its runner."""

    def __init__(self, interceptors: Sequence[Interceptor]) -> None:
        self.redactors: tuple[ArgumentRedactor, ...] = tuple(
            cast(ArgumentRedactor, i)  # mypy does not narrow a Callable by a Protocol
            for i in interceptors
            if isinstance(i, ArgumentRedactor)
        )

    def __bool__(self) -> bool:
        return bool(self.redactors)

    def args(self, tool: str, args: Any) -> Any:
        """``args`` of a call of ``tool`` as the redacting interceptors would pass them on."""
        if not isinstance(args, dict):
            return args
        for redactor in self.redactors:
            hidden = redactor.redact_args(tool, args)
            if hidden is not None:
                args = hidden
        return args

    def plan(self, plan: Plan) -> Plan:
        """``plan`` as the run store keeps it: each tool task's arguments, and each element
        of a literal ``for_each`` list, as the redacting interceptors would pass them on to
        the tool (the same object when they change nothing). A reference a redaction hid
        becomes an explicit ``depends_on``, so that the recorded graph keeps its edges.

        The tool of such a task gets the same arguments whether they come from this plan or
        from the one given, so a resume or a replan of the record runs it as the run did."""
        if not self.redactors:
            return plan
        tasks: list[Task] = []
        changed = False
        for task in plan.tasks:
            new = self._task(task) if isinstance(task, ToolTask) else task
            changed = changed or new is not task
            tasks.append(new)
        return Plan.model_construct(goal=plan.goal, tasks=tasks) if changed else plan

    def items(self, task: ToolTask, items: list[Any], found: list[str] | None = None) -> list[Any]:
        """A map task's list of elements as the store keeps it: what the redacting
        interceptors hide in the elements themselves (a secret name inside one, a pattern),
        and each part of an element that the task's arguments only put where they hide it
        (a bare secret ``"for_each": ["sk-...", ...]`` given as ``{"api_key": "${@item}"}``).
        The same object when nothing is hidden. ``found``: where to add the values hidden
        for the task's arguments (to take out of text about the task)."""
        new = self.args(task.tool, {_ITEMS: items})[_ITEMS]
        use = _ElementUse(self, task)
        if use:
            hidden = use.redact(new, [] if found is None else found)
            if hidden != new:
                new = hidden
        return items if new == items else new

    def _task(self, task: ToolTask) -> ToolTask:
        args = self.args(task.tool, task.args)
        for_each = task.for_each
        if isinstance(for_each, list):
            for_each = self.items(task, for_each)
        if args == task.args and for_each == task.for_each:
            return task
        update: dict[str, Any] = {"args": args, "for_each": for_each}
        new = task.model_copy(update=update)
        before = dependencies_of(task, Template(task.template_source))
        after = dependencies_of(new, Template(new.template_source))
        lost = [d for d in before if d not in after]
        if lost:
            new = new.model_copy(update={"depends_on": [*task.depends_on, *lost]})
        return new

    def text(self, tool: str, args: Any, text: str) -> str:
        """``text`` about a call of ``tool`` with ``args`` without the values they hide."""
        if not isinstance(args, dict):
            return text
        for redactor in self.redactors:
            text = redactor.redact_text(tool, args, text)
        return text

    def record(
        self,
        tool: str,
        args: Any,
        error: str | None,
        traceback: str | None,
        decisions: list[CallDecision],
        task: ToolTask | None = None,
    ) -> tuple[str | None, str | None]:
        """What a task's (or an element's) record keeps of a call of ``tool`` with ``args``
        (a dict; for a map task, its list of elements): its error and traceback without the
        values the redacting interceptors hide, and, in ``decisions``, the arguments of every
        decision as they pass them on (a policy outside them saw the secrets). When the call
        did not reach them (the task failed before it, a map task's own list), the arguments
        they would have passed on are added as a redaction, which the run store keeps instead
        of ``args``. ``task``: the map task whose list ``args`` is (its arguments say which
        parts of an element go where the interceptors hide them)."""
        if not self.redactors:
            return error, traceback
        for i, d in enumerate(decisions):
            if d.decision != REDACT and isinstance(d.args, dict):
                hidden_args = self.args(d.tool, d.args)
                if hidden_args is not d.args:
                    decisions[i] = d.model_copy(update={"args": jsonable(hidden_args)})
        view = {_ITEMS: args} if isinstance(args, list) else args  # a map task's elements
        if not isinstance(view, dict):
            return error, traceback
        if error is not None:
            error = self.text(tool, view, error)
        if traceback is not None:
            traceback = self.text(tool, view, traceback)
        if view is not args and task is not None:
            found: list[str] = []
            items = self.items(task, cast(list[Any], args), found)
            hidden = view if items is args else {_ITEMS: items}
            for secret in sorted(set(found), key=len, reverse=True):
                if len(secret) >= 4:  # shorter ones would blank out ordinary words
                    error = None if error is None else error.replace(secret, _HIDDEN)
                    traceback = None if traceback is None else traceback.replace(secret, _HIDDEN)
        else:
            hidden = self.args(tool, view)
        if hidden is not view and not any(d.redacts_task_call for d in decisions):
            decisions.append(
                CallDecision(
                    tool=tool,
                    decision=REDACT,
                    decided_by="redacting",
                    reason="redacted for the record"
                    + (" (its call did not reach the redaction)" if view is args else ""),
                    args=jsonable(hidden[_ITEMS] if view is not args else hidden),
                    at=time.time(),
                    source="plan",
                )
            )
        return error, traceback

    def steps(self, steps: list[AgentStep]) -> list[AgentStep]:
        """An agent's steps with each call's arguments as the interceptors would pass them on,
        and an error it saw back without the values they hide: every call, also one that
        never reached them (its arguments did not fit the tool, the tool is unknown)."""
        if not self.redactors:
            return steps
        out: list[AgentStep] = []
        for step in steps:
            calls = []
            for c in step.calls:
                args = self.args(c.tool, c.args)
                observation = c.observation
                if observation is not None and c.is_error:
                    observation = self.text(c.tool, c.args, observation)
                if args is c.args and observation == c.observation:
                    calls.append(c)
                else:
                    calls.append(c.model_copy(update={"args": args, "observation": observation}))
            changed = any(a is not b for a, b in zip(calls, step.calls, strict=True))
            out.append(step.model_copy(update={"calls": calls}) if changed else step)
        return out
