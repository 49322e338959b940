"""Tools defined by a JSON schema: arguments checked by jsonschema, messages like a Python
tool's, schemas that cannot be used refused when the tool is made."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

import dagagent
from dagagent import PlanValidationError, Registry, SchemaTool, ToolDefinitionError
from dagagent.errors import ToolArgumentsError

pytestmark = pytest.mark.anyio

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "Where."},
        "days": {"type": "integer", "minimum": 1},
        "where": {"$ref": "#/definitions/Point"},
    },
    "required": ["city"],
    "definitions": {
        "Point": {
            "type": "object",
            "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
            "required": ["lat", "lon"],
        }
    },
}


async def echo(**arguments: Any) -> dict[str, Any]:
    return arguments


def forecast(**options: Any) -> SchemaTool:
    return SchemaTool(echo, name="forecast", parameters=SCHEMA, **options)


async def test_arguments_are_checked_by_the_schema_and_passed_as_given() -> None:
    tool = forecast()
    assert await tool.run({"city": "Oslo", "days": 2}) == {"city": "Oslo", "days": 2}
    with pytest.raises(ToolArgumentsError) as info:
        tool.validate_args({"days": "2", "town": "Oslo", "where": {"lat": 1}})
    assert sorted(info.value.errors) == [
        "city: required argument is missing",
        "days: '2' is not of type 'integer'",  # no coercion: values are passed as given
        "town: unexpected argument",
        "where: 'lon' is a required property",
    ]


def test_the_schema_is_shown_as_given_with_unknown_names_closed() -> None:
    schema = forecast().parameters_schema
    assert schema["additionalProperties"] is False
    assert schema["properties"]["where"] == {"$ref": "#/$defs/Point"}  # one spelling for all
    assert "Point" in schema["$defs"] and "definitions" not in schema
    open_schema = {**SCHEMA, "additionalProperties": True}
    tool = SchemaTool(echo, name="open", parameters=open_schema)
    assert tool.validate_args({"city": "Oslo", "extra": 1}) == {"city": "Oslo", "extra": 1}


def test_plans_check_literal_arguments_and_leave_references_for_later() -> None:
    registry = Registry([forecast()])
    dagagent.validate(
        {
            "goal": "g",
            "tasks": [
                {"id": "a", "tool": "forecast", "args": {"city": "Oslo"}},
                {"id": "b", "tool": "forecast", "args": {"city": "${a.city}", "days": 3}},
            ],
        },
        registry,
    )
    with pytest.raises(PlanValidationError) as info:
        dagagent.validate(
            {"goal": "g", "tasks": [{"id": "a", "tool": "forecast", "args": {"days": 0}}]},
            registry,
        )
    assert "days: 0 is less than the minimum of 1" in str(info.value)
    assert "city: required argument is missing" in str(info.value)


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "array"}, "must describe an object"),
        ({"type": "object", "properties": {"n": {"type": "integr"}}}, "not valid JSON Schema"),
        ({"type": "object", "properties": {"n": {"$ref": "#/$defs/Nope"}}}, "not in the schema"),
        ("{}", "must be a JSON object"),
    ],
)
def test_a_schema_that_cannot_be_used_is_refused_when_the_tool_is_made(
    schema: Any, expected: str
) -> None:
    with pytest.raises(ToolDefinitionError, match=expected):
        SchemaTool(echo, name="bad", parameters=schema)


def test_retries_only_on_a_retryable_tool() -> None:
    with pytest.raises(ToolDefinitionError, match="not retryable"):
        forecast(retries=2, retryable=False)
    registry = Registry([forecast(retryable=False)])
    with pytest.raises(PlanValidationError, match="not_retryable"):
        dagagent.validate(
            {
                "goal": "g",
                "tasks": [{"id": "a", "tool": "forecast", "args": {"city": "x"}, "retries": 1}],
            },
            registry,
        )


def test_a_schema_tool_pickles_with_its_schema() -> None:
    tool = pickle.loads(pickle.dumps(forecast(side_effects=True)))
    assert isinstance(tool, SchemaTool)
    assert tool.side_effects and tool.parameters_schema == forecast().parameters_schema
