"""The text-mode ReAct parser: what models write, and what it makes of it."""

from __future__ import annotations

from typing import Any

import pytest

from dagagent.agent import ReActFormatError, parse_react
from dagagent.agent.parsing import cut_observation, parse_input


@pytest.mark.parametrize(
    ("text", "action", "value"),
    [
        ('Thought: look\nAction: search\nAction Input: {"q": "x"}', "search", {"q": "x"}),
        ('thought:look\naction :search\naction input:   {"q": "x"}', "search", {"q": "x"}),
        ('THOUGHT: a\nACTION: search\nACTION INPUT: {"q": "x"}', "search", {"q": "x"}),
        ('**Thought:** a\n**Action:** search\n**Action Input:** {"q": "x"}', "search", {"q": "x"}),
        (
            '**Thought**: a\n**Action**: `search`\n**Action Input**: {"q": "x"}',
            "search",
            {"q": "x"},
        ),
        ('## Thought: a\n- Action: search\n- Action_Input: {"q": "x"}', "search", {"q": "x"}),
        ('Thought 1: a\nAction 1: search\nAction Input 1: {"q": "x"}', "search", {"q": "x"}),
        (
            'Action: search\nAction Input:\n```json\n{\n  "q": "x"\n}\n```\n',
            "search",
            {"q": "x"},
        ),
        ('Action: search\nAction Input: ```{"q": "x"}```', "search", {"q": "x"}),
        ('Action: search\nAction Input: {"q": "x"} (the query)', "search", {"q": "x"}),
        ("Action: search\nAction Input: Paris weather", "search", "Paris weather"),
        ('Action: search\nAction Input: "Paris"', "search", "Paris"),
        ("Action: search\nAction Input: `Paris`", "search", "Paris"),
        ("Action: search[Paris]", "search", "Paris"),
        ('Action: search({"q": "x"})', "search", {"q": "x"}),
        ("Action: now\n", "now", None),
        ("Action: geo.lookup\nAction Input: Paris", "geo.lookup", "Paris"),
    ],
)
def test_actions(text: str, action: str, value: Any) -> None:
    reply = parse_react(text)
    assert (reply.action, reply.action_input, reply.input_error) == (action, value, None)
    assert reply.final_answer is None


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("Thought: easy\nFinal Answer: 42", "42"),
        ("final answer:42", "42"),
        ("**Final Answer:** 42", "42"),
        ("**Final Answer: 42**", "42"),
        ("Final_Answer: line one\nline two", "line one\nline two"),
        ("Final Answer: ```py\nprint(1)\n```", "```py\nprint(1)\n```"),
        # the answer comes first: it wins, the action after it is ignored
        ("Final Answer: 42\nAction: search\nAction Input: {}", "42"),
    ],
)
def test_final_answers(text: str, answer: str) -> None:
    reply = parse_react(text)
    assert reply.final_answer == answer and reply.action is None


def test_action_before_final_answer_wins() -> None:
    # an answer written before seeing the tool's result is made up: run the action
    reply = parse_react('Thought: t\nAction: search\nAction Input: {"q": 1}\nFinal Answer: 7')
    assert reply.action == "search" and reply.final_answer is None
    assert reply.action_input == {"q": 1}


def test_thought_includes_untagged_preamble() -> None:
    reply = parse_react("Let me think.\nThought: use the tool\nAction: search")
    assert reply.thought == "Let me think.\nuse the tool"


def test_hallucinated_observation_is_ignored() -> None:
    text = "Action: search\nAction Input: x\nObservation: it is 20\nFinal Answer: 20"
    reply = parse_react(text)
    assert reply.action == "search" and reply.action_input == "x"
    assert cut_observation(text) == "Action: search\nAction Input: x"
    assert cut_observation("no labels") == "no labels"


def test_labels_inside_words_are_not_labels() -> None:
    reply = parse_react("Thought: Action items: none.\nFinal Answer: done")
    assert reply.final_answer == "done"
    with pytest.raises(ReActFormatError):
        parse_react("Actions: search\nThoughtful: yes")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("I think it is 4.", "neither an 'Action:' line nor a 'Final Answer:'"),
        ("", "the reply is empty"),
        ("Final Answer:   ", "'Final Answer:' is empty"),
        ('Action Input: {"q": 1}', "no 'Action:' naming the tool"),
        ("Action: ``", "does not name a tool"),
    ],
)
def test_format_errors(text: str, problem: str) -> None:
    with pytest.raises(ReActFormatError, match=problem):
        parse_react(text)


def test_bad_json_input_is_reported_not_raised() -> None:
    reply = parse_react('Action: search\nAction Input: {"q": "x",')
    assert reply.action == "search" and reply.action_input is None
    assert reply.input_error is not None
    assert reply.input_error.startswith("Action Input is not valid JSON (")
    assert reply.input_error.endswith('{"q": "x",')


def test_parse_input_values() -> None:
    assert parse_input("") == (None, None)
    assert parse_input("[1, 2]") == ([1, 2], None)
    assert parse_input("12") == ("12", None)  # bare text stays text: the schema coerces it
    assert parse_input('"unterminated') == ("unterminated", None)
