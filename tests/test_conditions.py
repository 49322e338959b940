"""The predicate language of a task's ``when``: what it reads, how it decides, and how a
condition that is not one is reported (by validation, naming the task and the character)."""

from __future__ import annotations

import re
from typing import Any

import pytest

import dagagent
from dagagent.conditions import MAX_CONDITION_CHARS, parse_condition
from dagagent.errors import ConditionError, ConditionSyntaxError
from dagagent.plan import Plan

OUTPUTS: dict[str, Any] = {
    "search": {"count": 0, "items": [], "kind": "pdf", "score": 0.5, "meta": {"lang": "en"}},
    "check": {"ok": True, "flag": False, "none": None},
    "many": [1, 2, 3],
    "text": "an error occurred",
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("${search.count} > 0", False),
        ("${search.count} >= 0", True),
        ("${search.count} == 0", True),
        ("${search.count} != 0", False),
        ("${search.score} < 1", True),
        ("${search.score} <= 0.5", True),
        ("not ${check.ok}", False),
        ("not not ${check.ok}", True),
        ("${check.ok}", True),
        ("${check.flag}", False),
        ("${check.none}", False),
        ("${search.items}", False),  # an empty list is false
        ("${many}", True),
        ("${search.kind} == 'pdf'", True),
        ('${search.kind} == "pdf"', True),
        ("${search.kind} < 'q'", True),
        ("${search.kind} in ['pdf', 'html']", True),
        ("${search.kind} not in ['pdf', 'html']", False),
        ("2 in ${many}", True),
        ("'error' in ${text}", True),
        ("'lang' in ${search.meta}", True),
        ("${check.ok} and ${search.count} == 0", True),
        ("${check.flag} or ${search.count} > 0", False),
        ("${check.flag} or ${check.ok} and false", False),  # and binds tighter than or
        ("(${check.flag} or ${check.ok}) and true", True),
        ("${check.none} == null", True),
        ("${check.ok} == 1", False),  # a boolean equals only a boolean
        ("${search.count} == false", False),
        ("${search.count} == 0.0", True),
        ("-1 < ${search.count}", True),
        ("${many} == [1, 2, 3]", True),
        ("${search.meta} == ${search.meta}", True),
        ("True and not None", True),
        ("'it\\'s' == \"it's\"", True),
    ],
)
def test_conditions_decide_as_they_read(text: str, expected: bool) -> None:
    assert parse_condition(text).decide(OUTPUTS) is expected


def test_and_and_or_stop_as_soon_as_the_answer_is_known() -> None:
    # 'count' is never read when ok is false, nor 'missing' when flag already settles it
    assert parse_condition("${check.flag} and ${search.missing} > 0").decide(OUTPUTS) is False
    assert parse_condition("${check.ok} or ${search.missing} > 0").decide(OUTPUTS) is True
    with pytest.raises(ConditionError, match="search has no key 'missing'"):
        parse_condition("${check.ok} and ${search.missing} > 0").decide(OUTPUTS)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("${search.kind} > 1", "compares two numbers or two texts, not a text"),
        ("${check.ok} < 2", "not a boolean"),
        ("${check.none} >= 0", "not null"),
        ("1 in 2", "not a number in a number"),
        ("${nothing} == 1", "task 'nothing' has no output"),
    ],
)
def test_a_condition_that_cannot_be_decided_says_why(text: str, problem: str) -> None:
    with pytest.raises(ConditionError, match=problem) as caught:
        parse_condition(text).decide(OUTPUTS)
    assert text in str(caught.value)


@pytest.mark.parametrize(
    ("text", "position", "problem"),
    [
        ("", 0, "the condition is empty"),
        ("${a} = 1", 5, "write '=='"),
        ("${a} && ${b}", 5, "write 'and'"),
        ("${a} || ${b}", 5, "write 'or'"),
        ("!${a}", 0, "write 'not'"),
        ("1 < ${a} < 3", 9, "comparisons do not chain"),
        ("${a} >", 6, "expected a value, found the end"),
        ("${a} ${b}", 5, "expected 'and', 'or' or the end, found ${b}"),
        ("${a.}", 0, "malformed reference"),
        ("'open", 0, "never closed"),
        ("'\\x'", 1, "unknown escape"),
        ("(${a} > 1", 9, "expected ')' to close the '(' at 1"),
        ("[1, 2", 5, "expected ',' or ']'"),
        ("len(${a}) > 0", 0, "unknown word 'len'"),
        ("__import__('os')", 0, "unknown word '__import__'"),
        ("${a}.__class__", 4, "unexpected character '.'"),
        ("${a} > 1e999", 7, "not a finite number"),
        ("not " * 40 + "true", 132, "nested more than 32 levels"),
    ],
)
def test_a_condition_that_does_not_parse_names_the_character(
    text: str, position: int, problem: str
) -> None:
    with pytest.raises(ConditionSyntaxError, match=re.escape(problem)) as caught:
        parse_condition(text)
    assert caught.value.position == position
    assert f"at character {position + 1}" in str(caught.value)


def test_a_condition_is_bounded_in_length() -> None:
    with pytest.raises(ConditionSyntaxError, match="longer than"):
        parse_condition("true or " * (MAX_CONDITION_CHARS // 8) + "true")
    # a long chain of 'or' is one node, not a deep tree: deciding it cannot recurse deeply
    chain = " or ".join(["false"] * 200) + " or true"
    assert parse_condition(chain).decide({}) is True


def test_explain_shows_the_values_read_shortened() -> None:
    condition = parse_condition("${search.count} > 0 and ${search.kind} == ${search.kind}")
    assert condition.explain(OUTPUTS) == '${search.count} = 0, ${search.kind} = "pdf"'
    long = {"t": {"x": "y" * 500}}
    shown = parse_condition("${t.x}").explain(long)
    assert len(shown) < 100 and shown.startswith('${t.x} = "yyy')


# ---------------------------------------------------------------------------- validation


def _issues(tasks: list[dict[str, Any]]) -> list[dagagent.Issue]:
    with pytest.raises(dagagent.PlanValidationError) as caught:
        dagagent.validate({"tasks": tasks})
    return caught.value.issues


def test_validation_reports_a_bad_condition_naming_the_task_and_the_character() -> None:
    issues = _issues(
        [
            {"id": "a", "tool": "t"},
            {"id": "b", "tool": "t", "when": "${a.n} = 1"},
        ]
    )
    assert [(i.code, i.task_id) for i in issues] == [("bad_condition", "b")]
    assert "at character 8" in issues[0].message and "write '=='" in issues[0].message


def test_a_condition_reference_is_a_dependency() -> None:
    graph = dagagent.validate(
        {"tasks": [{"id": "a", "tool": "t"}, {"id": "b", "tool": "t", "when": "${a.ok}"}]}
    )
    assert graph.dependencies["b"] == ("a",)
    assert graph.levels == [["a"], ["b"]]
    issues = _issues([{"id": "b", "tool": "t", "when": "${ghost.ok}"}])
    assert [(i.code, i.task_id) for i in issues] == [("missing_dependency", "b")]
    assert "condition reference ${ghost.ok}" in issues[0].message
    issues = _issues([{"id": "b", "tool": "t", "when": "${b.ok}"}])
    assert [i.code for i in issues] == ["self_dependency"]


def test_a_condition_that_reads_the_element_needs_a_map() -> None:
    issues = _issues([{"id": "b", "tool": "t", "when": "${@item} > 1"}])
    assert [(i.code, i.task_id) for i in issues] == [("element_outside_map", "b")]
    issues = _issues([{"id": "b", "tool": "t", "for_each": [1], "when": "${@itme} > 1"}])
    assert [i.code for i in issues] == ["unknown_element"]


def test_when_is_part_of_the_plan_format_and_optional() -> None:
    plan = Plan.load(
        {"tasks": [{"id": "a", "tool": "t"}, {"id": "b", "tool": "t", "when": "${a.ok}"}]}
    )
    assert plan.tasks[0].when is None and plan.tasks[1].when == "${a.ok}"
    # written after depends_on, before retries; left out when there is none
    text = Plan.load(
        {"tasks": [{"id": "b", "tool": "t", "retries": 1, "when": "true", "depends_on": []}]}
    ).to_json(indent=None)
    assert text == '{"tasks":[{"id":"b","tool":"t","when":"true","retries":1}]}'
    with pytest.raises(dagagent.PlanLoadError):
        Plan.load({"tasks": [{"id": "b", "tool": "t", "when": 3}]})
