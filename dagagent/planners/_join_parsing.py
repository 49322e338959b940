"""Reading the joiner's answer: tolerant of the shapes models write, strict about what the
decision needs.

The JSON may sit in a code fence or after prose; the action may be ``action``, ``decision``,
``type`` or the key of a one-key object (``{"finish": {...}}``, ``{"replan": "what is
missing"}``); an answer given as a tool call named ``finish`` or ``replan`` is read by its name
and arguments; a cite may be written ``${id}``. Problems fed back (each an
:class:`~dagagent.errors.Issue`):

====================  ===========================================================================
``empty_answer``,     as for plans (see :mod:`dagagent.planners.heal`)
``truncated``,
``not_json``
``bad_action``        no action, or one other than ``finish`` / ``replan``
``missing_answer``    ``finish`` without an answer
``bad_cite``          a cite that is not a task of the plan, or a task without an output
``missing_feedback``  ``replan`` without saying what is missing
``must_finish``       ``replan`` on the last round
====================  ===========================================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import Issue
from ..llm import LLMResponse
from ..plan import Plan
from ..results import TaskResult
from ._join_decision import JoinDecision
from .parsing import extract_json

__all__ = ["parse_join_answer"]

_FINISH = ("finish", "answer", "final", "final_answer", "done")
_REPLAN = ("replan", "revise", "plan", "retry", "continue")


def parse_join_answer(
    raw: str,
    plan: Plan,
    results: Mapping[str, TaskResult],
    *,
    response: LLMResponse | None = None,
    must_finish: bool = False,
) -> tuple[JoinDecision | None, list[Issue]]:
    """Read one model answer as a joiner's decision about ``plan`` and its ``results``.

    Returns ``(decision, [])``, or ``(None, issues)`` (the codes of the module docstring)."""
    if response is not None and response.finish_reason == "length":
        return None, [
            Issue(
                "truncated",
                None,
                "the answer was cut off by the output token limit (finish_reason 'length'); "
                "answer again, shorter",
            )
        ]
    value, problem = _as_object(raw, response)
    if value is None:
        return None, [problem] if problem is not None else []
    action, fields = _action_of(value)
    if action in _FINISH:
        return _finish(fields, plan, results)
    if action in _REPLAN:
        if must_finish:
            return None, [
                Issue(
                    "must_finish",
                    None,
                    "this is the last round: no other plan will run; finish with the best "
                    "answer the results allow",
                )
            ]
        feedback = fields.get("feedback", fields.get("reason"))
        if not isinstance(feedback, str) or not feedback.strip():
            return None, [
                Issue(
                    "missing_feedback",
                    None,
                    "'replan' needs 'feedback': what is missing, and what the next plan should do",
                )
            ]
        return JoinDecision(action="replan", feedback=feedback.strip()), []
    shown = "no action" if action is None else f"the action {action[:40]!r}"
    return None, [
        Issue(
            "bad_action",
            None,
            f"{shown}: 'action' must be \"finish\"" + ("" if must_finish else ' or "replan"'),
        )
    ]


def _as_object(
    raw: str, response: LLMResponse | None
) -> tuple[dict[str, Any] | None, Issue | None]:
    """The decision as a JSON object (from a tool call named finish/replan, or the text)."""
    if response is not None and response.tool_calls and not response.content.strip():
        call = response.tool_calls[0]
        name = call.name.strip().lower()
        if name in _FINISH or name in _REPLAN:
            if call.arguments_error is not None:
                return None, Issue(
                    "not_json",
                    None,
                    f"the arguments of {call.name!r} are not JSON: {call.arguments_error}",
                )
            return {"action": name, **call.arguments}, None
    value, problem = extract_json(raw)
    if problem is not None:
        if problem.code == "empty_answer":
            problem = Issue("empty_answer", None, "the answer is empty: expected a JSON object")
        return None, problem
    if not isinstance(value, dict):
        return None, Issue("not_json", None, "expected one JSON object, not a list")
    return value, None


def _action_of(value: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The action and the fields that go with it, from the shapes models use."""
    fields = {str(k).strip().lower(): v for k, v in value.items()}
    for key in ("action", "decision", "type", "kind", "next"):
        action = fields.get(key)
        if isinstance(action, str):
            return action.strip().lower(), fields
    if len(fields) == 1:  # {"finish": {...}} / {"replan": "what is missing"}
        ((key, inner),) = fields.items()
        if key in _FINISH or key in _REPLAN:
            if isinstance(inner, dict):
                return key, {str(k).strip().lower(): v for k, v in inner.items()}
            return key, {"answer" if key in _FINISH else "feedback": inner}
    if "answer" in fields:
        return "finish", fields
    if "feedback" in fields:
        return "replan", fields
    return None, fields


def _finish(
    fields: dict[str, Any], plan: Plan, results: Mapping[str, TaskResult]
) -> tuple[JoinDecision | None, list[Issue]]:
    answer = fields.get("answer")
    if isinstance(answer, str):
        answer = answer.strip()
    issues: list[Issue] = []
    if answer is None or answer == "" or answer == {} or answer == []:
        issues.append(
            Issue("missing_answer", None, "'finish' needs 'answer': the answer to the goal")
        )
    cites_value = fields.get("cites", fields.get("citations", []))
    if cites_value is None:
        cites_value = []
    if isinstance(cites_value, str):
        cites_value = [cites_value]
    cites: list[str] = []
    if not isinstance(cites_value, list):
        issues.append(Issue("bad_cite", None, "'cites' must be a list of task ids"))
    else:
        in_plan = {t.id for t in plan.tasks}
        for cite in cites_value:
            tid = _cite_id(cite)
            if tid not in in_plan:
                issues.append(
                    Issue(
                        "bad_cite",
                        tid[:64] or None,
                        "not a task of the plan; cite the ids of tasks that succeeded",
                    )
                )
            elif tid not in results or not results[tid].status.ok:
                status = results[tid].status.value if tid in results else "did not run"
                issues.append(
                    Issue(
                        "bad_cite",
                        tid,
                        f"this task has no output ({status}); cite only tasks that succeeded",
                    )
                )
            elif tid not in cites:
                cites.append(tid)
    if issues:
        return None, issues
    return JoinDecision(action="finish", answer=answer, cites=cites), []


def _cite_id(cite: Any) -> str:
    text = str(cite).strip()
    if text.startswith("${") and text.endswith("}"):
        text = text[2:-1]
    return text.split(".", 1)[0].strip()
