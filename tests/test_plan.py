from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dagagent import Plan, load_plan
from dagagent.errors import PlanLoadError, PlanValidationError, ReferenceResolutionError
from dagagent.plan import Template


def test_load_from_dict_json_string_and_file(tmp_path: Path) -> None:
    data = {"goal": "g", "tasks": [{"id": "a", "tool": "t", "args": {"x": 1}}]}
    p = tmp_path / "plan.json"
    p.write_text(json.dumps(data))
    for src in (data, json.dumps(data), p, str(p)):
        plan = load_plan(src)
        assert plan.goal == "g"
        assert plan.tasks[0].args == {"x": 1}


def test_unknown_fields_are_rejected_and_named() -> None:
    with pytest.raises(PlanLoadError) as ei:
        load_plan({"tasks": [{"id": "a", "tool": "t", "argz": {}}, {"id": "b", "tol": "x"}]})
    issues = ei.value.issues  # type: ignore[attr-defined]
    assert {i.task_id for i in issues} == {"a", "b"}
    assert "argz" in str(ei.value) and "tol" in str(ei.value)


def test_load_errors_are_clear(tmp_path: Path) -> None:
    scalar = tmp_path / "scalar.json"
    scalar.write_text("42")
    with pytest.raises(PlanLoadError, match="not valid JSON"):
        load_plan('{"tasks": [')
    with pytest.raises(PlanLoadError, match="not found"):
        load_plan("/nonexistent/plan.json")
    with pytest.raises(PlanLoadError, match="JSON object"):  # a bare list is a task list
        load_plan(scalar)
    assert load_plan("[]").tasks == []
    with pytest.raises(PlanLoadError, match=r"tasks\[0\].retries"):
        load_plan({"tasks": [{"id": "a", "tool": "t", "retries": -1}]})


def test_whole_reference_keeps_type() -> None:
    t = Template({"a": "${x}", "b": "${x.items.1}", "c": ["${y.n}"]})
    out = t.resolve({"x": {"items": [1, {"k": True}]}, "y": {"n": 3.5}})
    assert out == {"a": {"items": [1, {"k": True}]}, "b": {"k": True}, "c": [3.5]}
    assert {r.task_id for r in t.refs} == {"x", "y"}


def test_embedded_references_interpolate() -> None:
    t = Template("${a} and ${b.c} and ${d}")
    assert t.resolve({"a": 1, "b": {"c": "two"}, "d": [1, 2]}) == "1 and two and [1, 2]"


def test_escape_and_no_refs_is_identity() -> None:
    lit = {"x": "cost is $${price}"}
    t = Template(lit)
    assert not t.has_refs
    assert t.resolve({}) == {"x": "cost is $${price}"} or t.resolve({}) is lit
    t2 = Template({"x": "cost is $${price} for ${a}"})
    assert t2.resolve({"a": "me"}) == {"x": "cost is ${price} for me"}


def test_missing_paths_raise_clear_errors() -> None:
    outputs = {"a": {"k": [1, 2]}, "s": "text"}
    with pytest.raises(ReferenceResolutionError, match="has no key 'nope'"):
        Template("${a.nope}").resolve(outputs)
    with pytest.raises(ReferenceResolutionError, match="out of range"):
        Template("${a.k.5}").resolve(outputs)
    with pytest.raises(ReferenceResolutionError, match="not an index"):
        Template("${a.k.x}").resolve(outputs)
    with pytest.raises(ReferenceResolutionError, match="has no output"):
        Template("${zz}").resolve(outputs)
    with pytest.raises(ReferenceResolutionError, match="cannot look up"):
        Template("${s.len}").resolve(outputs)


def test_malformed_reference_is_noted() -> None:
    t = Template({"x": "${not closed", "y": "${}"})
    assert len(t.malformed) == 2


def test_plan_round_trips_to_json() -> None:
    plan = Plan.load({"goal": "g", "tasks": [{"id": "a", "tool": "t"}]})
    again = Plan.load(plan.to_json())
    assert again == plan


def test_deeply_nested_arguments_are_refused_clearly() -> None:
    import dagagent

    deep: Any = "x"
    for _ in range(600):
        deep = [deep]
    with pytest.raises(PlanValidationError) as info:
        dagagent.validate({"tasks": [{"id": "a", "tool": "t", "args": {"v": deep}}]})
    assert [(i.code, i.task_id) for i in info.value.issues] == [("bad_arguments", "a")]
    assert "nested more than 100 levels" in info.value.issues[0].message
    text = (
        '{"tasks": [{"id": "a", "tool": "t", "args": {"v": ' + "[" * 100000 + "]" * 100000 + "}}]}"
    )
    with pytest.raises(PlanLoadError, match="nested too deeply"):
        load_plan(text)


def test_retries_are_bounded() -> None:
    with pytest.raises(PlanLoadError, match=r"tasks\[0\].retries"):
        load_plan({"tasks": [{"id": "a", "tool": "t", "retries": 10**20}]})
    assert load_plan({"tasks": [{"id": "a", "tool": "t", "retries": 100}]}).tasks[0].retries == 100
