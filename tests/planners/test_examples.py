"""A planner of one's own: a system prompt (with or without the {tools} marker) and few-shot
plans from Python or from an examples file, checked before any model call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import dagagent
from dagagent.errors import ConfigError
from dagagent.llm import AssistantMessage, ScriptedLLM, SystemMessage, UserMessage
from dagagent.planners import LLMPlanner, PlanExample, load_examples, tool_catalog
from dagagent.planners.streaming import plan_and_execute_streamed

pytestmark = pytest.mark.anyio


def work(tid: str) -> dict[str, Any]:
    return {"id": tid, "tool": "work", "args": {"name": tid}}


EXAMPLES = [
    {"goal": "Do a and b", "plan": {"tasks": [work("a"), work("b")]}},
    {"goal": "Do c", "plan": [work("c")]},  # the list of tasks alone
]


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "examples.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


async def test_examples_go_between_the_prompt_and_the_goal(
    registry: dagagent.Registry, tmp_path: Path
) -> None:
    answer = json.dumps({"goal": "go", "tasks": [work("x")]})
    llm = ScriptedLLM([answer, answer])
    planner = LLMPlanner(llm, registry, examples=write(tmp_path, EXAMPLES))
    await planner.plan("go")
    await plan_and_execute_streamed(planner, "go", registry)
    for request in llm.requests:
        system, *shown, asked = request.messages
        assert isinstance(system, SystemMessage) and "You are a planner." in system.content
        assert [type(m) for m in shown] == [UserMessage, AssistantMessage] * 2
        assert "Goal: Do a and b" in shown[0].content
        first = json.loads(shown[1].content)
        # as lean as the prompt asks the model to be: the goal is not written again
        assert first == {"tasks": [work("a"), work("b")]}
        assert json.loads(shown[3].content) == {"tasks": [work("c")]}
        assert isinstance(asked, UserMessage) and asked.content.startswith("Goal: go")


def test_examples_from_python(registry: dagagent.Registry) -> None:
    from_dicts = load_examples(EXAMPLES, registry)
    assert [e.goal for e in from_dicts] == ["Do a and b", "Do c"]
    again = load_examples(from_dicts, registry)
    assert again == from_dicts and isinstance(again[0], PlanExample)
    assert load_examples([], registry) == []


def test_a_prompt_of_ones_own(registry: dagagent.Registry) -> None:
    marked = LLMPlanner(ScriptedLLM(), registry, system_prompt="Tools:\n{tools}\nBe brief.")
    assert marked.system_prompt() == f"Tools:\n{tool_catalog(registry)}\nBe brief."
    unmarked = LLMPlanner(ScriptedLLM(), registry, system_prompt="Plan carefully.\n")
    assert unmarked.system_prompt() == f"Plan carefully.\n\nTools:\n{tool_catalog(registry)}"
    assert "You are a planner" not in unmarked.messages("go")[0].content
    with pytest.raises(ConfigError, match="system prompt is empty"):
        LLMPlanner(ScriptedLLM(), registry, system_prompt="  \n")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("[{", "is not JSON"),
        ({"goal": "g", "plan": {}}, "must be a JSON array of examples"),
        ('"a string"', "must be a JSON array of examples"),
        ([{"goal": "g"}], r"example 1 must be an object with exactly the keys 'goal' and 'plan'"),
        (
            [{"goal": "g", "plan": [], "x": 1}],
            r"not an object with the keys \['goal', 'plan', 'x'\]",
        ),
        ([3], "example 1 must be an object .* not a int"),
        ([{"goal": " ", "plan": []}], "example 1 has no goal"),
        ([{"goal": "g", "plan": "plan.json"}], r"'plan' must be a plan .* not a str"),
        (
            [EXAMPLES[0], {"goal": "Fly", "plan": [{"id": "f", "tool": "fly", "args": {}}]}],
            r"example 2 \('Fly'\) is not a valid plan for these tools: \[unknown_tool\] task 'f'",
        ),
        (
            [{"goal": "g", "plan": [{"id": "a", "tool": "work", "args": {"nme": 1}}]}],
            r"example 1 \('g'\) is not a valid plan .*\[bad_arguments\] task 'a'",
        ),
        ([{"goal": "g", "plan": {"tasks": "x"}}], r"example 1 \('g'\) is not a valid plan"),
    ],
)
def test_a_bad_examples_file_is_a_clear_error(
    registry: dagagent.Registry, tmp_path: Path, data: Any, message: str
) -> None:
    path = write(tmp_path, data)
    with pytest.raises(ConfigError, match=message) as caught:
        LLMPlanner(ScriptedLLM(), registry, examples=path)
    assert str(caught.value).startswith(("cannot read", "the examples file", "examples file"))
    assert str(path) in str(caught.value)


def test_an_examples_file_that_cannot_be_read(registry: dagagent.Registry, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read the examples file .*missing\.json"):
        load_examples(tmp_path / "missing.json", registry)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00[")
    with pytest.raises(ConfigError, match="cannot read the examples file"):
        load_examples(binary, registry)
