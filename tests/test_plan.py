from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

import dagagent
from dagagent import Plan, load_plan
from dagagent.cli import app
from dagagent.errors import PlanLoadError, PlanValidationError, ReferenceResolutionError
from dagagent.plan import AgentTask, ToolTask
from dagagent.references import Template
from dagagent.runner import AgentNode
from dagagent.settings import RunSettings


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


def test_no_refs_is_identity() -> None:
    lit = {"x": "cost is ${", "y": ["$", "{"]}
    t = Template(lit)
    assert not t.has_refs
    assert t.resolve({}) is lit


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"x": "cost is $${price}"}, {"x": "cost is ${price}"}),
        ({"x": ["a", {"y": "$${b}$${c}"}]}, {"x": ["a", {"y": "${b}${c}"}]}),
        ("say $${hi}", "say ${hi}"),
    ],
)
def test_an_escape_means_the_same_with_or_without_a_reference(value: Any, expected: Any) -> None:
    assert Template(value).resolve({}) == expected
    assert Template(value).literal == expected
    t2 = Template({"x": "cost is $${price} for ${a}"})
    assert t2.resolve({"a": "me"}) == {"x": "cost is ${price} for me"}


@pytest.mark.parametrize("executor", ["serial", "dataflow"])
def test_a_tool_gets_an_escaped_literal_in_a_task_without_references(executor: str) -> None:
    reg = _refs_registry()
    plan = {
        "tasks": [
            {"id": "plain", "tool": "echo", "args": {"value": "cost is $${price}"}},
            {"id": "a", "tool": "echo", "args": {"value": 1}},
            {"id": "mixed", "tool": "echo", "args": {"value": "cost is $${price} for ${a}"}},
        ]
    }
    result = dagagent.execute_sync(plan, reg, settings=RunSettings(executor=executor))
    assert result.outputs["plain"] == "cost is ${price}"
    assert result.outputs["mixed"] == "cost is ${price} for 1"
    assert result.tasks["plain"].args == {"value": "cost is ${price}"}


def test_an_agent_gets_an_escaped_literal_in_an_instruction_without_references() -> None:
    seen: list[str] = []

    async def agent_runner(node: AgentNode) -> Any:
        seen.append(node.instruction)
        return "done", None

    plan = {"tasks": [{"id": "n", "instruction": "write $${x} literally"}]}
    result = dagagent.execute_sync(plan, _refs_registry(), llm=object(), agent_runner=agent_runner)
    assert result.tasks["n"].status == "succeeded", result.tasks["n"].error
    assert seen == ["write ${x} literally"]


@pytest.mark.parametrize("segment", ["-1", "1_0", "\u0663", "+1", "0x1", "\uff11"])
def test_a_list_index_is_plain_ascii_digits(segment: str) -> None:
    outputs = {"a": list(range(20))}
    with pytest.raises(ReferenceResolutionError, match="not an index"):
        Template("${a." + segment + "}").resolve(outputs)


def test_plain_digit_indexes_still_read_lists() -> None:
    outputs = {"a": list(range(20))}
    assert Template("${a.0}").resolve(outputs) == 0
    assert Template("${a.019}").resolve(outputs) == 19
    assert Template("${a.1}").resolve({"a": ("x", "y")}) == "y"


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


# ----------------------------------------------------------------------------------------------
# Plans a user keeps aside to break dagagent: each must end in a clear error naming the task
# and the problem, never a traceback; and references must read data, never internals.
# ----------------------------------------------------------------------------------------------


runner = CliRunner()


def _cli(tmp_path: Path, content: str | bytes, *args: str) -> Any:
    p = tmp_path / "plan.json"
    if isinstance(content, str):
        content = content.encode("utf-8", "surrogatepass")
    p.write_bytes(content)
    return runner.invoke(app, [*args, str(p)])


def _codes(exc: PlanValidationError) -> set[tuple[str, str | None]]:
    return {(i.code, i.task_id) for i in exc.issues}


def test_an_id_with_a_trailing_newline_is_invalid() -> None:
    plan = {"tasks": [{"id": "a\n", "tool": "echo", "args": {"value": 1}}]}
    with pytest.raises(PlanValidationError) as info:
        dagagent.validate(plan)
    assert ("invalid_id", "a\n") in _codes(info.value)


@pytest.mark.parametrize("tid", ["0", "_", "a-b", "A" * 64, "_-_"])
def test_edge_ids_are_valid(tid: str) -> None:
    dagagent.validate({"tasks": [{"id": tid, "tool": "x"}]})


@pytest.mark.parametrize("tid", ["a" * 65, "-a", "a.b", "é", "", "a b"])
def test_bad_ids_are_reported(tid: str) -> None:
    with pytest.raises(PlanValidationError) as info:
        dagagent.validate({"tasks": [{"id": tid, "tool": "x"}]})
    assert ("invalid_id", tid) in _codes(info.value)


@pytest.mark.parametrize("cmd", ["validate", "run"])
def test_an_integer_too_long_to_parse_is_a_clear_error(tmp_path: Path, cmd: str) -> None:
    number = "9" * 5000
    text = '{"tasks": [{"id": "a", "tool": "calculate", "args": {"expression": ' + number + "}}]}"
    r = _cli(tmp_path, text, cmd)
    assert r.exit_code == 2, r.output
    assert not isinstance(r.exception, ValueError)
    assert "error:" in r.stderr and "4300" in r.stderr  # the limit, in any Python's wording


@pytest.mark.parametrize("cmd", ["validate", "run"])
def test_arguments_nested_too_deeply_name_the_task(tmp_path: Path, cmd: str) -> None:
    deep = "[" * 150 + "]" * 150
    text = '{"tasks": [{"id": "ok", "tool": "lookup", "args": {"entity": "x"}},'
    text += ' {"id": "deep", "tool": "lookup", "args": {"entity": ' + deep + "}}]}"
    r = _cli(tmp_path, text, cmd)
    assert r.exit_code == 2, r.output
    assert "[bad_arguments] task 'deep': arguments are nested more than 100" in r.stderr


def test_a_utf8_bom_is_accepted(tmp_path: Path) -> None:
    r = _cli(
        tmp_path,
        '\ufeff{"tasks": [{"id": "a", "tool": "lookup", "args": {"entity": "Paris"}}]}',
        "validate",
    )
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("cmd", ["validate", "run"])
def test_a_lone_surrogate_escape_is_refused_naming_the_task(tmp_path: Path, cmd: str) -> None:
    text = '{"tasks": [{"id": "ok", "tool": "lookup", "args": {"entity": "\\ud83d\\ude00"}},'
    text += ' {"id": "broken", "tool": "lookup", "args": {"entity": "half \\ud83d"}}]}'
    r = _cli(tmp_path, text, cmd)
    assert r.exit_code == 2, r.output
    assert "task 'broken'" in r.stderr and "surrogate" in r.stderr


def test_a_full_surrogate_pair_is_fine() -> None:
    plan = dagagent.Plan.load('{"goal": "\\ud83d\\ude00", "tasks": [{"id": "a", "tool": "x"}]}')
    assert plan.goal == "😀"


# -- references read data, not internals --------------------------------------------------


class Weather(BaseModel):
    temp_c: float = 21.5
    tags: list[str] = ["warm"]


@dataclasses.dataclass
class Point:
    x: int = 3

    @property
    def double(self) -> int:
        return self.x * 2

    def method(self) -> int:  # pragma: no cover - must not be reachable
        return 0


def _refs_registry() -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool
    def model() -> Weather:
        return Weather()

    @reg.tool
    def point() -> Point:
        return Point()

    @reg.tool
    def echo(value: Any) -> Any:
        return value

    return reg


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        ("${m.temp_c}", 21.5),
        ("${m.tags.0}", "warm"),
        ("${p.x}", 3),
        ("${p.double}", 6),
        ("t=${m.temp_c} x=${p.x}", "t=21.5 x=3"),
    ],
)
def test_references_walk_into_models_and_dataclasses(ref: str, expected: Any) -> None:
    plan = {
        "tasks": [
            {"id": "m", "tool": "model"},
            {"id": "p", "tool": "point"},
            {"id": "e", "tool": "echo", "args": {"value": ref}},
        ]
    }
    result = dagagent.execute_sync(plan, _refs_registry())
    assert result.tasks["e"].status == "succeeded", result.tasks["e"].error
    assert result.outputs["e"] == expected


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("${p.__class__.__init__.__globals__}", "private attribute"),
        ("${m.__dict__}", "private attribute"),
        ("${m._secret}", "private attribute"),
        ("${p.method}", "is a method, not data"),
        ("${m.model_dump}", "is a method, not data"),
    ],
)
def test_references_cannot_reach_private_attributes_or_methods(ref: str, message: str) -> None:
    plan = {
        "tasks": [
            {"id": "m", "tool": "model"},
            {"id": "p", "tool": "point"},
            {"id": "e", "tool": "echo", "args": {"value": ref}},
        ]
    }
    result = dagagent.execute_sync(plan, _refs_registry())
    e = result.tasks["e"]
    assert e.status == "failed"
    assert e.error_type == "ReferenceResolutionError"
    assert message in (e.error or "")
    assert ref in (e.error or "")


def test_a_mapping_key_starting_with_underscore_is_still_data() -> None:
    reg = _refs_registry()

    @reg.tool
    def d() -> dict[str, int]:
        return {"_id": 7}

    plan = {
        "tasks": [
            {"id": "d", "tool": "d"},
            {"id": "e", "tool": "echo", "args": {"value": "${d._id}"}},
        ]
    }
    assert dagagent.execute_sync(plan, reg).outputs["e"] == 7


# ---------------------------------------------------------------------------------------------
# The two kinds of task


def test_a_task_parses_to_the_class_of_its_kind() -> None:
    from dagagent.plan import AgentTask, ToolTask

    plan = load_plan(
        {
            "tasks": [
                {"id": "a", "tool": "t", "args": {"x": 1}},
                {"id": "b", "instruction": "sum up ${a}", "tools": ["t"]},
                {"id": "c", "tool": "t", "instruction": None, "tools": None},  # null: not given
                {"id": "d", "tool": None, "instruction": "go", "args": {}},
            ]
        }
    )
    a, b, c, d = plan.tasks
    assert isinstance(a, ToolTask) and (a.tool, a.args, a.label) == ("t", {"x": 1}, "t")
    assert isinstance(b, AgentTask) and (b.instruction, b.tools, b.label) == (
        "sum up ${a}",
        ["t"],
        "agent",
    )
    assert isinstance(c, ToolTask) and isinstance(d, AgentTask)
    assert a.template_source == {"x": 1} and b.template_source == "sum up ${a}"
    # the file format is unchanged: no kind key, the keys in their usual order
    assert json.loads(plan.to_json())["tasks"][:2] == [
        {"id": "a", "tool": "t", "args": {"x": 1}},
        {"id": "b", "instruction": "sum up ${a}", "tools": ["t"]},
    ]
    text = Plan(
        tasks=[ToolTask(id="x", tool="t", args={"k": 1}, depends_on=["y"], description="d")]
    ).to_json(indent=None)
    assert text == (
        '{"tasks":[{"id":"x","tool":"t","args":{"k":1},"depends_on":["y"],"description":"d"}]}'
    )
    assert Plan.model_validate_json(plan.to_json()) == plan


@pytest.mark.parametrize(
    ("task", "code"),
    [
        ({"id": "y", "tool": "add", "instruction": "do"}, "tool_and_instruction"),
        ({"id": "y", "instruction": "do", "args": {"q": 1}}, "agent_args"),
        ({"id": "y", "tool": "add", "tools": ["add"]}, "tool_tools"),
    ],
)
def test_a_task_mixing_the_kinds_is_one_issue_of_that_task(task: dict[str, Any], code: str):
    import pydantic

    import dagagent

    with pytest.raises(PlanValidationError) as v:
        dagagent.validate({"tasks": [task, {"id": "z", "tool": "add", "depends_on": ["nope"]}]})
    assert [(i.code, i.task_id) for i in v.value.issues] == [
        (code, "y"),
        ("missing_dependency", "z"),
    ]
    with pytest.raises(PlanLoadError) as loaded:
        load_plan({"tasks": [task]})
    assert loaded.value.issues == v.value.issues[:1]
    assert f"[{code}] task 'y'" in str(loaded.value)
    with pytest.raises(pydantic.ValidationError) as direct:
        Plan.model_validate({"tasks": [task]})
    assert [e["type"] for e in direct.value.errors()] == [code]


def test_an_agent_task_without_instruction_loads_and_fails_validation() -> None:
    import dagagent

    assert load_plan({"tasks": [{"id": "x"}]}).tasks[0].instruction == ""
    with pytest.raises(PlanValidationError) as v:
        dagagent.validate({"tasks": [{"id": "x", "instruction": "  "}]})
    assert [(i.code, i.task_id) for i in v.value.issues] == [("missing_instruction", "x")]


def test_schema_issues_name_the_task_and_the_field_not_the_kind() -> None:
    with pytest.raises(PlanLoadError) as ei:
        load_plan({"tasks": [{"id": "a", "tool": "t", "depends_on": "b"}, None, {"id": "c"}]})
    assert [(i.code, i.task_id, i.message) for i in ei.value.issues] == [
        ("schema", "a", "tasks[0].depends_on: Input should be a valid list"),
        ("schema", None, "tasks[1]: Input should be a valid dictionary or instance of Task"),
    ]
    with pytest.raises(PlanLoadError) as unreadable:
        load_plan('{"tasks": [')
    assert unreadable.value.issues == []


def test_fingerprints_are_those_recorded_by_earlier_versions() -> None:
    """A parent run's fingerprints are compared with new ones: the payload must not drift."""
    import hashlib

    from dagagent.plan import AgentTask, ToolTask, task_fingerprint

    def sha(payload: str) -> str:
        return hashlib.sha256(payload.encode()).hexdigest()

    tool = ToolTask(id="a", tool="t", args={"x": "${b}"})
    agent = AgentTask(id="n", instruction="go", tools=["t"])
    assert task_fingerprint(tool, {"x": 1}) == sha(
        '{"id":"a","input":{"x":1},"tool":"t","tools":null}'
    )
    assert task_fingerprint(agent, "go") == sha('{"id":"n","input":"go","tool":null,"tools":["t"]}')


def test_same_call_is_the_fingerprint_of_the_task_as_written() -> None:
    from dagagent.plan import AgentTask, ToolTask, same_call

    a = ToolTask(id="a", tool="t", args={"n": 1}, description="one")
    assert same_call(a, ToolTask(id="a", tool="t", args={"n": 1}, retries=3))
    assert not same_call(a, ToolTask(id="a", tool="t", args={"n": 1.0}))  # 1.0 runs again
    assert not same_call(a, ToolTask(id="a", tool="u", args={"n": 1}))
    assert not same_call(AgentTask(id="a", instruction="x"), AgentTask(id="a", instruction="y"))


def test_compact_plan_json_is_what_pydantic_writes_without_defaults() -> None:
    """Plan.to_json(indent=None) writes the run store's plan column by hand, fast; it must be
    the text model_dump_json(exclude_defaults=True) gives, for every way a field can be set."""
    plan = Plan.model_validate(
        {
            "goal": "every field",
            "tasks": [
                {"id": "a", "tool": "t"},
                {"id": "b", "tool": "t", "args": {"x": [1, {"y": None}], "é": "☃"}},
                {"id": "c", "tool": "t", "depends_on": [], "retries": None, "args": {}},
                {"id": "d", "tool": "t", "depends_on": ["a"], "retries": 2, "timeout_s": 1.5},
                {"id": "e", "tool": "t", "description": "why", "allow_partial": False},
                {"id": "f", "tool": "t", "for_each": "${a}", "max_concurrency": 2},
                {"id": "g", "tool": "t", "for_each": [1, 2], "allow_partial": True},
                {"id": "h", "instruction": "think about ${a}", "tools": ["t"]},
                {"id": "i", "instruction": "anything", "tools": None, "retries": 0},
            ],
        }
    )
    late = ToolTask(id="j", tool="t")
    late.depends_on.append("a")  # changed in place, never set
    late.args["k"] = 1
    plan.tasks.append(late)
    plan.tasks.append(ToolTask.model_construct(id="k", tool="t", retries=1))
    built = AgentTask(id="l", instruction="x")
    built.timeout_s = 3.0  # set after construction
    plan.tasks.append(built)
    expected = plan.model_dump_json(exclude_defaults=True)
    assert plan.to_json(indent=None) == expected
    assert Plan.model_validate_json(expected) == plan
    for empty in (Plan(), Plan(goal="only a goal"), Plan(tasks=[ToolTask(id="x", tool="t")])):
        assert empty.to_json(indent=None) == empty.model_dump_json(exclude_defaults=True)
    assert plan.to_json() == plan.model_dump_json(indent=2, exclude_defaults=True)


@pytest.mark.parametrize(
    ("text", "refs", "resolved"),
    [
        ("${a}", ["${a}"], {"k": [1, 2]}),
        ("${a.k.1}", ["${a.k.1}"], 2),
        ("${@item}", ["${@item}"], None),
        ("${a}}", ["${a}"], '{"k": [1, 2]}}'),
        (" ${a.k.0}", ["${a.k.0}"], " 1"),
        ("${a.k.0} ", ["${a.k.0}"], "1 "),
        ("${a}${a.k.0}", ["${a}", "${a.k.0}"], '{"k": [1, 2]}1'),
        ("$${a}", [], "${a}"),
        ("${a.}", [], "${a.}"),
    ],
)
def test_a_string_that_is_one_reference_keeps_the_value_and_any_other_is_text(
    text: str, refs: list[str], resolved: Any
) -> None:
    t = Template({"x": text})
    assert [r.text for r in t.refs] == refs
    if refs and refs[0] == "${@item}":
        assert t.refs[0].element and t.refs[0].path == ()
        return
    assert t.resolve({"a": {"k": [1, 2]}}) == {"x": resolved}
