"""The text-mode ReAct parser: what models write, and what it makes of it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dagagent.agent import ReActFormatError, parse_react
from dagagent.agent.parsing import _LABEL_RE, cut_observation, parse_input


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


# ----------------------------------------------------------------------------------------------
# The text-mode parser against replies models really send: markdown in answers, fenced
# JSON holding fences, Python dicts, deep nesting; and fuzzing (it raises only its own error,
# and well-formed replies read back as written).
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("Final Answer: **Paris** is warmer.", "**Paris** is warmer."),
        ("**Final Answer:** **Paris** is warmer.", "**Paris** is warmer."),
        ("Final Answer: *about* 20 C", "*about* 20 C"),
        ("Final Answer: _init_ runs first", "_init_ runs first"),
        ("Final Answer: * one\n* two", "* one\n* two"),
        ("Final Answer: **42**", "42"),  # bold as a whole: the bold goes
        ("**Final Answer: 42**", "42"),
        ("_Final Answer_: my_var_", "my_var_"),
    ],
)
def test_emphasis_in_an_answer_is_kept(text: str, answer: str) -> None:
    assert parse_react(text).final_answer == answer


def test_a_thought_of_one_underscore_is_kept() -> None:
    assert parse_react("Thought: _\nFinal Answer: x").thought == "_"


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("_private", "_private"),
        ("save_", "save_"),
        ("__init__x", "__init__x"),
        ("_search_", "search"),
        ("**search**", "search"),
        ("`search`", "search"),
    ],
)
def test_underscores_of_a_tool_name_stay(line: str, name: str) -> None:
    assert parse_react(f"Action: {line}\nAction Input: {{}}").action == name


def test_fenced_json_whose_strings_hold_fences() -> None:
    args = {"path": "README.md", "text": "# Title\n```python\nprint(1)\n```\n"}
    fenced = "```json\n" + json.dumps(args, indent=2) + "\n```"
    reply = parse_react(f"Action: write_file\nAction Input: {fenced}")
    assert (reply.action_input, reply.input_error) == (args, None)
    inline = '```{"text": "a ``` b"}```'
    assert parse_input(inline) == ({"text": "a ``` b"}, None)


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("{'city': 'Paris'}", {"city": "Paris"}),
        ("{'a': 1, 'b': [True, None]}", {"a": 1, "b": [True, None]}),
        ('{"flag": True}', {"flag": True}),
        ("```python\n{'q': 'x'}\n```", {"q": "x"}),
    ],
)
def test_python_style_dicts_are_read(raw: str, value: Any) -> None:
    assert parse_input(raw) == (value, None)


@pytest.mark.parametrize("raw", ["{'a', 'b'}", "{'a': 1j}", "{'a': 1} (the city)", "{'a': 1e999}"])
def test_python_literals_that_are_not_json_stay_errors(raw: str) -> None:
    value, error = parse_input(raw)
    assert value is None and error is not None and "not valid JSON" in error


@pytest.mark.parametrize("depth", [5_000, 100_000])
def test_deeply_nested_input_is_an_input_error_not_a_crash(depth: int) -> None:
    nested = "[" * depth + "]" * depth
    reply = parse_react(f'Action: echo\nAction Input: {{"x": {nested}}}')
    assert reply.action == "echo" and reply.action_input is None
    assert reply.input_error is not None and "nested too deeply" in reply.input_error
    reply = parse_react(f"Action: echo[{nested}]")
    assert reply.input_error is not None and "nested too deeply" in reply.input_error


# ---------------------------------------------------------------------------- fuzzing

_PIECES = st.sampled_from(
    [
        "Thought:", "Action:", "Action Input:", "Final Answer:", "Observation:",
        "**Action:**", "**Final Answer**:", "## Thought:", "- Action:", "ACTION_INPUT:",
        "```", "```json\n", "{", "}", "[", "]", '"', "'", "(", ")", "\n", " ", "*", "_", "#",
        ":", "\\", "\r", "\u2028", "\x85", "True", "None", "1e999", "[" * 3000,
    ]
)  # fmt: skip
_TEXT = st.lists(st.one_of(_PIECES, st.text(max_size=8)), max_size=30).map("".join)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(_TEXT)
def test_any_text_parses_or_raises_the_parsers_own_error(text: str) -> None:
    try:
        reply = parse_react(text)
    except ReActFormatError:
        return
    assert (reply.action is None) != (reply.final_answer is None)
    if reply.action is not None:
        assert reply.action.strip()
        json.dumps(reply.action_input)  # whatever was read can be stored
    else:
        assert reply.final_answer is not None and reply.final_answer.strip()


_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True).filter(
    lambda n: not (len(n) > 2 and n[0] == n[-1] == "_")  # "_x_" reads as italics
)
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
_FREE = st.text(min_size=1).filter(lambda s: s.strip() and not _LABEL_RE.search(s))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(_FREE, _NAMES, st.dictionaries(st.text(max_size=8), _JSON, max_size=4), st.booleans())
def test_well_formed_actions_read_back(
    thought: str, name: str, args: dict[str, Any], fenced: bool
) -> None:
    text = json.dumps(args, ensure_ascii=False)
    if fenced:
        text = "```json\n" + json.dumps(args, indent=2) + "\n```"
    reply = parse_react(f"Thought: {thought}\nAction: {name}\nAction Input: {text}")
    assert (reply.action, reply.action_input, reply.input_error) == (name, args, None)
    assert reply.thought == thought.strip() and reply.final_answer is None


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(_FREE, _FREE.filter(lambda s: not (s.strip().startswith("**") and s.strip().endswith("**"))))
def test_well_formed_answers_read_back(thought: str, answer: str) -> None:
    reply = parse_react(f"Thought: {thought}\nFinal Answer: {answer}")
    assert reply.final_answer == answer.strip() and reply.thought == thought.strip()
