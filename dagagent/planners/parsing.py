"""Reading a model's answer: the JSON value in it (:func:`extract_json`, tolerant of code fences
and prose around it) and the plan it holds, validated against a registry
(:func:`parse_plan_answer`). The issue codes are those of :mod:`dagagent.planners.heal`."""

from __future__ import annotations

import json
from typing import Any

from ..errors import Issue, PlanLoadError, PlanValidationError
from ..graph import PlanGraph, validate
from ..plan import AgentTask, read_plan
from ..text import shorten
from ..tools import Registry
from .schema import drop_null_optionals

__all__ = ["extract_json", "parse_plan_answer"]

_MAX_DEPTH = 64  # a plan needs a few levels; deeper JSON is refused before anything recurses
_SCAN_BUDGET = 1_000_000  # characters scanned looking for the JSON, plus 4x the answer length


def _value_end(text: str, start: int, budget: int) -> tuple[int | None, int, int]:
    """End (exclusive) of the bracketed value starting at ``start`` (None if it never closes
    within ``budget`` characters), the number of characters scanned, the deepest nesting."""
    depth = deepest = 0
    in_string = False
    escaped = False
    stop = min(len(text), start + budget)
    for i in range(start, stop):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1, i + 1 - start, deepest
    return None, stop - start, deepest


def _looks_like_json(text: str, start: int) -> bool:
    """Whether the bracket at ``start`` opens JSON rather than prose like ``[1 of 3]``."""
    rest = text[start + 1 : start + 200].lstrip()
    if text[start] == "{":
        return rest[:1] in ('"', "}", "")
    return rest[:1] in ("{", "]", "")


def _reject_constant(name: str) -> Any:
    # Python's json reads NaN and Infinity; JSON has no such values, and a plan holding
    # them would be written back out with null in their place.
    raise ValueError(f"{name} is not a JSON value")


def _check_unicode(value: Any) -> None:
    """Refuse strings that are not Unicode text (a ``\\ud800`` escape alone decodes to a
    lone surrogate, which no output, file or database can encode)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end] if isinstance(exc.object, str) else ""
        code = f"U+{ord(bad[0]):04X}" if bad else "a lone surrogate"
        raise ValueError(
            f"a string holds {code}, half of a UTF-16 surrogate pair, not a character"
        ) from None


def extract_json(text: str) -> tuple[Any, Issue | None]:
    """The first JSON object or array in ``text`` (code fences and prose around it are
    fine). Returns ``(value, None)``, or ``(None, issue)`` with code ``empty_answer``,
    ``truncated`` or ``not_json``."""
    if not text.strip():
        return None, Issue("empty_answer", None, "the answer is empty: expected a JSON plan")
    first_error: str | None = None
    pos = 0
    # Bounded work: an answer full of stray brackets must not make the search quadratic.
    budget = _SCAN_BUDGET + 4 * len(text)
    while budget > 0:
        starts = [i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0]
        if not starts:
            break
        start = min(starts)
        end, scanned, deepest = _value_end(text, start, budget)
        budget -= scanned
        if end is None:
            if budget > 0 and _looks_like_json(text, start):
                return None, Issue(
                    "truncated",
                    None,
                    "the JSON never ends (the answer was cut off): brackets opened at "
                    f"character {start} are not closed",
                )
            pos = start + 1
            continue
        if deepest > _MAX_DEPTH and _looks_like_json(text, start):
            return None, Issue(
                "not_json", None, f"the JSON is nested {deepest} levels deep (at most {_MAX_DEPTH})"
            )
        try:
            value = json.loads(text[start:end], parse_constant=_reject_constant)
            _check_unicode(value)
        except (ValueError, RecursionError) as exc:
            if first_error is None and _looks_like_json(text, start):
                first_error = str(exc)
            pos = start + 1 if not _looks_like_json(text, start) else end
            continue
        if isinstance(value, (dict, list)):
            return value, None
        pos = end
    if first_error is not None:
        return None, Issue("not_json", None, f"the plan is not valid JSON: {first_error}")
    excerpt = shorten(text, 80)
    return None, Issue("not_json", None, f"the answer holds no JSON object; it begins: {excerpt!r}")


def parse_plan_answer(
    raw: str,
    registry: Registry,
    *,
    goal: str,
    finish_reason: str | None = None,
    null_optionals: bool = False,
    agent_tasks: bool = False,
) -> tuple[PlanGraph | None, list[Issue]]:
    """Read one model answer as a plan for ``goal`` and validate it against ``registry``.

    Returns ``(graph, [])`` for a valid plan, else ``(None, issues)``. The plan's goal is
    always ``goal`` (the model's restatement is dropped). ``null`` for an optional argument
    that cannot be ``null`` means "not given" (the default); ``null_optionals``: the answer
    followed a strict schema, so every ``null`` optional argument means that.
    """
    if finish_reason == "length":
        return None, [
            Issue(
                "truncated",
                None,
                "the answer was cut off by the output token limit (finish_reason 'length')",
            )
        ]
    value, problem = extract_json(raw)
    if problem is not None:
        return None, [problem]
    if isinstance(value, list):
        value = {"tasks": value}
    elif "tasks" not in value and len(value) == 1:
        (inner,) = value.values()
        if isinstance(inner, dict) and "tasks" in inner:
            value = inner  # {"plan": {...}}
    value["goal"] = goal
    drop_null_optionals(value, registry, keep_nullable=not null_optionals)
    try:
        plan, issues = read_plan(value)  # with the issues of tasks that mix the two kinds
    except PlanLoadError as exc:
        return None, exc.issues or [Issue("schema", None, str(exc))]
    if not agent_tasks:
        issues += [
            Issue(
                "agent_task",
                t.id,
                "the task has no 'tool': every task must call one of the listed tools",
            )
            for t in plan.tasks
            if isinstance(t, AgentTask)
        ]
    flagged = {i.task_id for i in issues}
    try:
        graph = validate(plan, registry)
    except PlanValidationError as exc:
        issues += [
            i for i in exc.issues if not (i.code == "missing_instruction" and i.task_id in flagged)
        ]
        return None, issues
    if issues:
        return None, issues
    return graph, []
