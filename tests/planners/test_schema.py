"""The plan JSON Schema derived from a registry: tool variants, argument schemas, references,
strict mode."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from pydantic import BaseModel

import dagagent
from dagagent.errors import ConfigError
from dagagent.plan import ID_PATTERN
from dagagent.planners import (
    REFERENCE_PATTERN,
    plan_json_schema,
    plan_response_format,
    strict_problems,
)
from dagagent.planners.schema import drop_null_optionals
from dagagent.toolkits.demo import registry as demo


def variants(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    items = schema["properties"]["tasks"]["items"]
    branches = items.get("anyOf", [items])
    out = {}
    for b in branches:
        props = b["properties"]
        name = props["tool"]["enum"][0] if "tool" in props else "<agent>"
        out[name] = b
    return out


def walk(node: Any, path: str = "$"):
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from walk(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, f"{path}[{i}]")


@pytest.fixture
def typed() -> dagagent.Registry:
    """Tools whose every argument has a concrete type: strict mode is possible."""
    reg = dagagent.Registry()

    @reg.tool
    def get_weather(city: str, unit: str = "C") -> dict[str, float]:
        """Current weather for a city.

        Args:
            city: City name.
            unit: C or F.
        """
        return {"temp": 20.0}

    @reg.tool
    def add(a: int, b: int = 0) -> int:
        """Add two integers."""
        return a + b

    @reg.tool
    def mean(values: list[float]) -> float:
        """Mean of numbers."""
        return sum(values) / len(values)

    return reg


def test_one_variant_per_tool_with_the_tools_own_argument_schema(typed: dagagent.Registry):
    schema = plan_json_schema(typed)
    v = variants(schema)
    assert set(v) == {"get_weather", "add", "mean"}
    for name, variant in v.items():
        tool = typed.get(name)
        assert variant["properties"]["tool"] == {"type": "string", "enum": [name]}
        assert variant["additionalProperties"] is False
        assert variant["description"] == tool.description
        args = variant["properties"]["args"]
        assert args["additionalProperties"] is False
        assert set(args["properties"]) == set(tool.parameters_schema["properties"])
        assert args["required"] == tool.parameters_schema.get("required", [])
    # a string argument keeps its plain schema (it can hold interpolated text)
    assert v["get_weather"]["properties"]["args"]["properties"]["city"]["type"] == "string"
    assert schema["additionalProperties"] is False
    assert schema["properties"]["tasks"]["minItems"] == 1


def test_non_string_arguments_may_be_whole_references(typed: dagagent.Registry):
    v = variants(plan_json_schema(typed))
    a = v["add"]["properties"]["args"]["properties"]["a"]
    assert {"type": "integer"} in a["anyOf"]
    ref = [b for b in a["anyOf"] if b.get("pattern") == REFERENCE_PATTERN]
    assert len(ref) == 1 and ref[0]["type"] == "string"
    values = v["mean"]["properties"]["args"]["properties"]["values"]
    array = next(b for b in values["anyOf"] if b.get("type") == "array")
    # list items may be references too: ["${a}", "${b}"]
    assert any(b.get("pattern") == REFERENCE_PATTERN for b in array["items"]["anyOf"])
    pattern = re.compile(REFERENCE_PATTERN)
    for ok in ("${a}", "${paris.temp_c}", "${fetch.items.0}", "${t-1.x}"):
        assert pattern.match(ok), ok
    for bad in ("a", "${a} and ${b}", "x ${a}", "${.a}", "${a.}", "${}", "$a"):
        assert not pattern.match(bad), bad


def test_ids_and_dependencies_follow_the_id_rule(typed: dagagent.Registry):
    v = variants(plan_json_schema(typed))["add"]["properties"]
    assert v["id"]["pattern"] == f"^{ID_PATTERN}$"
    assert v["depends_on"]["items"]["pattern"] == f"^{ID_PATTERN}$"


def test_schema_accepts_real_plans_and_rejects_wrong_ones(typed: dagagent.Registry):
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(plan_json_schema(typed))
    good = {
        "goal": "g",
        "tasks": [
            {"id": "w", "tool": "get_weather", "args": {"city": "Paris"}},
            {"id": "s", "tool": "add", "args": {"a": 1, "b": "${w.temp}"}, "depends_on": []},
            {"id": "m", "tool": "mean", "args": {"values": ["${s}", 2.5]}, "retries": 1},
            {"id": "n", "tool": "mean", "args": {"values": "${w.list}"}},
        ],
    }
    assert list(validator.iter_errors(good)) == []
    bad_cases = [
        {"id": "x", "tool": "teleport", "args": {}},  # unknown tool
        {"id": "x", "tool": "add", "args": {"a": "two"}},  # not an int, not a reference
        {"id": "x", "tool": "add", "args": {"a": 1, "c": 2}},  # unknown argument
        {"id": "x", "tool": "add", "args": {"b": 2}},  # missing argument
        {"id": "x.y", "tool": "add", "args": {"a": 1}},  # bad id
        {"id": "x", "tool": "add", "args": {"a": 1}, "colour": "red"},  # unknown field
        {"id": "x", "tool": "add", "args": {"a": "${x} + 1"}},  # interpolation into an int
    ]
    for task in bad_cases:
        assert list(validator.iter_errors({"tasks": [task]})), task
    assert list(validator.iter_errors({"tasks": []}))  # empty plan


def test_every_object_forbids_extra_properties(typed: dagagent.Registry):
    for path, node in walk(plan_json_schema(typed)):
        if node.get("type") == "object":
            assert node.get("additionalProperties") is False, path


def test_strict_schema_lists_every_property_as_required(typed: dagagent.Registry):
    schema = plan_json_schema(typed, strict=True)
    for path, node in walk(schema):
        if node.get("type") == "object":
            assert node["additionalProperties"] is False, path
            assert sorted(node["required"]) == sorted(node["properties"]), path
        assert "default" not in node and "title" not in node and "const" not in node, path
    args = variants(schema)["get_weather"]["properties"]["args"]["properties"]
    # the optional argument became nullable
    assert {"type": "null"} in args["unit"]["anyOf"]
    assert {"type": "null"} not in args["city"].get("anyOf", [])
    fmt = plan_response_format(typed, strict=True)
    assert fmt.strict is True and fmt.schema == schema
    # not asked for, the format is not strict: a strict one makes the model write every field
    assert plan_response_format(typed).strict is False
    assert "goal" not in schema["properties"]


def test_strict_is_refused_for_free_form_arguments(registry: dagagent.Registry):
    problems = strict_problems(registry)
    assert any("'work'" in p and "'value'" in p and "any JSON value" in p for p in problems)
    assert any("'echo'" in p for p in problems)
    with pytest.raises(ConfigError, match="cannot be strict"):
        plan_json_schema(registry, strict=True)
    fmt = plan_response_format(registry)  # auto: falls back to a non-strict schema
    assert fmt.strict is False
    assert fmt.schema == plan_json_schema(registry)


def test_strict_problems_name_dicts_tuples_and_nested_optionals():
    class Point(BaseModel):
        x: int
        label: str = ""

    reg = dagagent.Registry()

    @reg.tool
    def f(meta: dict[str, Any], pair: tuple[int, str], where: Point) -> None:
        """F."""

    problems = " | ".join(strict_problems(reg))
    assert "'meta'" in problems and "free-form object" in problems
    assert "'pair'" in problems and "prefixItems" in problems
    assert "'Point'" in problems and "optional fields (label)" in problems


def test_models_are_hoisted_into_defs_per_tool():
    class Point(BaseModel):
        x: int
        y: int

    class Other(BaseModel):
        z: str

    reg = dagagent.Registry()

    @reg.tool
    def first(p: Point) -> None:
        """First."""

    @reg.tool
    def second(p: Other) -> None:  # same argument name, different model
        """Second."""

    schema = plan_json_schema(reg)
    assert set(schema["$defs"]) == {"first__Point", "second__Other"}
    v = variants(schema)
    first_p = v["first"]["properties"]["args"]["properties"]["p"]
    assert {"$ref": "#/$defs/first__Point"} in first_p["anyOf"]
    for _, node in walk(schema):
        ref = node.get("$ref")
        if ref is not None:
            assert ref.removeprefix("#/$defs/") in schema["$defs"]
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(schema)
    ok = {"tasks": [{"id": "a", "tool": "first", "args": {"p": {"x": 1, "y": "${b.y}"}}}]}
    assert list(validator.iter_errors(ok)) == []
    wrong = {"tasks": [{"id": "a", "tool": "first", "args": {"p": {"z": "s"}}}]}
    assert list(validator.iter_errors(wrong))


def test_agent_task_variant_only_when_asked(typed: dagagent.Registry):
    assert "<agent>" not in variants(plan_json_schema(typed))
    agent = variants(plan_json_schema(typed, agent_tasks=True))["<agent>"]
    assert agent["required"] == ["id", "instruction"]
    assert agent["properties"]["tools"]["items"]["enum"] == sorted(typed.names)


def test_schema_is_a_fresh_copy(typed: dagagent.Registry):
    a = plan_json_schema(typed)
    snapshot = copy.deepcopy(a)
    for _, node in walk(a):
        node.clear()
    assert plan_json_schema(typed) == snapshot


def test_drop_null_optionals_removes_only_null_optional_arguments(typed: dagagent.Registry):
    data = {
        "tasks": [
            {"id": "w", "tool": "get_weather", "args": {"city": "Paris", "unit": None}},
            {"id": "s", "tool": "add", "args": {"a": None, "b": None}},
            {"id": "t", "tool": "teleport", "args": {"x": None}},
        ]
    }
    drop_null_optionals(data, typed)
    assert data["tasks"][0]["args"] == {"city": "Paris"}
    assert data["tasks"][1]["args"] == {"a": None}  # required: left for validation to report
    assert data["tasks"][2]["args"] == {"x": None}


# ----------------------------------------------------------------------------------------------
# The plan schema against what servers with guided decoding accept.
#
# llama.cpp (and Ollama, which uses its converter) turn a JSON schema into a GBNF grammar:
# a ``pattern`` is translated almost verbatim, and a GBNF character class or literal knows
# only the escapes ``\\ \" \[ \] \t \n \r \xNN \uNNNN \UNNNNNNNN``. A pattern using
# ``\s``, ``\d`` or ``\w`` makes the server fail to build the grammar and reject every
# planning request. The pattern is also matched inside a JSON string, so it must not let the
# decoder write a raw ``"``, a backslash or a control character.
# ----------------------------------------------------------------------------------------------


_GBNF_ESCAPES = set('\\"[]tnrxuU')
_REGEX_META = set("^$.[]()|{}*+?")


def _patterns(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str):
            found.append(node["pattern"])
        for value in node.values():
            found += _patterns(value)
    elif isinstance(node, list):
        for value in node:
            found += _patterns(value)
    return found


def gbnf_problems(pattern: str) -> list[str]:
    """What llama.cpp's schema-to-grammar conversion of ``pattern`` would choke on."""
    problems = []
    if not (pattern.startswith("^") and pattern.endswith("$")):
        problems.append("not anchored with ^...$")
    if "(?" in pattern:
        problems.append("uses (?...) groups")
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            allowed = _GBNF_ESCAPES if in_class else _GBNF_ESCAPES | _REGEX_META
            if nxt not in allowed:
                problems.append(f"escape \\{nxt} (in a {'class' if in_class else 'literal'})")
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        i += 1
    return problems


@pytest.mark.parametrize("strict", [False, True])
def test_every_pattern_converts_to_a_llama_cpp_grammar(strict: bool):
    reg = demo
    if strict:
        from dagagent import Registry

        reg = Registry()

        @reg.tool
        def add(a: int, b: list[float]) -> float:
            """Add."""
            return a + sum(b)

    schema = plan_json_schema(reg, strict=strict)
    patterns = _patterns(schema)
    assert REFERENCE_PATTERN in patterns
    for pattern in set(patterns):
        assert gbnf_problems(pattern) == [], pattern


def test_reference_pattern_cannot_break_out_of_the_json_string():
    ref = re.compile(REFERENCE_PATTERN)
    for good in ("${a}", "${paris.temp_c}", "${a-b.items.0.name}", "${x.é}"):
        assert ref.match(good), good
    for bad in ('${a.b"c}', "${a.b\\c}", "${a.b c}", "${a.b\tc}", "${a.b\nc}", "${a.\x01}"):
        assert not ref.match(bad), bad
    # the pattern survives the JSON round trip of the request body unchanged
    assert json.loads(json.dumps({"p": REFERENCE_PATTERN}))["p"] == REFERENCE_PATTERN


def test_every_task_may_be_mapped_over_a_list(typed: dagagent.Registry):
    jsonschema = pytest.importorskip("jsonschema")
    for strict in (False, True):
        schema = plan_json_schema(typed, strict=strict, agent_tasks=True)
        for name, variant in variants(schema).items():
            assert "for_each" in variant["properties"], (strict, name)
            assert ("max_concurrency" in variant["properties"]) is not strict
        validator = jsonschema.Draft202012Validator(schema)
        mapped = {
            "id": "m",
            "tool": "add",
            "for_each": "${w.values}",
            "args": {"a": "${@item}", "b": "${@index}"},
            "depends_on": [],
        }
        agent = {"id": "n", "instruction": "about ${@item}", "for_each": "${m}", "depends_on": []}
        if strict:
            mapped["args"]["b"] = "${@item.b}"
            agent["tools"] = None
        else:
            mapped["max_concurrency"] = 2
            mapped["allow_partial"] = True
        assert list(validator.iter_errors({"tasks": [mapped, agent]})) == [], strict
        for bad in ("w", "${@item}", "${w} and ${v}"):
            wrong = {**mapped, "for_each": bad}
            assert list(validator.iter_errors({"tasks": [wrong]})), (strict, bad)
    loose = jsonschema.Draft202012Validator(plan_json_schema(typed))
    literal = {"id": "m", "tool": "add", "for_each": [1, 2], "args": {"a": "${@item}"}}
    assert list(loose.iter_errors({"tasks": [literal]})) == []


def test_the_prompt_offers_for_each(typed: dagagent.Registry):
    from dagagent.planners.prompts import system_prompt

    prompt = system_prompt(typed)
    assert '"for_each": "${cities}"' in prompt and '"${@item}"' in prompt
    assert '"allow_partial": true' in prompt and '"max_concurrency"' in prompt
