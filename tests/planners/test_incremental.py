"""Streamed plans, piece by piece: incremental JSON and LLMCompiler parsing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, strategies as st

import dagagent
from dagagent.graph import PlanChecker
from dagagent.plan import Task
from dagagent.planners import parse_llmcompiler
from dagagent.planners.incremental import JsonTaskStream, StreamedPlanError
from dagagent.planners.llmcompiler import LLMCompilerStream

TASKS = [
    {"id": "a", "tool": "add", "args": {"a": 12, "b": 3}},
    {"id": "b", "tool": "echo", "args": {"value": {"nested": [1, {"x": "}]{["}], "n": 1.5}}},
    {"id": "c", "tool": "add", "args": {"a": "${a}", "b": 100}, "depends_on": ["b"]},
]


def feed_all(stream: JsonTaskStream, text: str, size: int) -> list[tuple[int, Any]]:
    """(position after the piece, task) for every task returned, then those of finish()."""
    out = []
    for start in range(0, len(text), size):
        for task in stream.feed(text[start : start + size]):
            out.append((start + size, task))
    out += [(len(text), task) for task in stream.finish()]
    return out


@pytest.mark.parametrize(
    "text",
    [
        json.dumps({"goal": "g", "tasks": TASKS}),
        json.dumps(TASKS, indent=2),
        "Here is the plan [1 of 1]:\n```json\n" + json.dumps({"tasks": TASKS}) + "\n```\nDone.",
        json.dumps({"plan": {"goal": "g", "tasks": TASKS}}),
    ],
    ids=["object", "bare-list", "prose-and-fence", "wrapped"],
)
@pytest.mark.parametrize("size", [1, 2, 7, 64, 10_000])
def test_every_chunking_yields_the_tasks_in_order(text: str, size: int) -> None:
    got = feed_all(JsonTaskStream(), text, size)
    assert [t for _, t in got] == TASKS


@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=80))
def test_streamed_json_tasks_are_never_cut_whatever_the_pieces(cuts: list[int]) -> None:
    text = json.dumps({"goal": "g", "tasks": TASKS})
    stream = JsonTaskStream()
    got: list[Any] = []
    pos = 0
    for n in cuts:
        got += stream.feed(text[pos : pos + n])
        pos += n
    got += stream.feed(text[pos:])
    got += stream.finish()
    assert got == TASKS


def test_a_task_is_returned_only_once_the_next_one_begins_or_the_json_ends() -> None:
    text = json.dumps({"goal": "g", "tasks": TASKS})
    got = feed_all(JsonTaskStream(), text, 1)
    # Task a holds the number 12: after "1" a cut parse would give 1. It comes when b begins.
    begin_b = text.index('{"id": "b"')
    assert got[0] == (begin_b + 1, TASKS[0])
    begin_c = text.index('{"id": "c"')
    assert got[1] == (begin_c + 1, TASKS[1])
    # The last task: when the plan's JSON ends, not before.
    assert got[2] == (len(text), TASKS[2])


def test_the_last_task_comes_when_the_json_closes_even_if_the_model_talks_on() -> None:
    stream = JsonTaskStream()
    text = json.dumps({"tasks": TASKS})
    assert stream.feed(text[:-1]) == TASKS[:2]
    assert stream.feed(text[-1]) == [TASKS[2]]
    assert stream.closed
    assert stream.feed("\nI hope this plan helps! {") == []
    assert stream.finish() == []


def test_an_answer_cut_off_is_truncated_at_the_end() -> None:
    stream = JsonTaskStream()
    text = json.dumps({"tasks": TASKS})
    assert stream.feed(text[:-30]) == TASKS[:2]
    with pytest.raises(StreamedPlanError) as err:
        stream.finish()
    assert err.value.issue.code == "truncated"


@pytest.mark.parametrize(
    ("text", "code"),
    [("", "empty_answer"), ("I cannot plan this.", "not_json"), ('{"steps": []}', "schema")],
)
def test_answers_that_are_no_plan(text: str, code: str) -> None:
    stream = JsonTaskStream()
    with pytest.raises(StreamedPlanError) as err:
        stream.feed(text)
        stream.finish()
    assert err.value.issue.code == code


def test_invalid_json_stops_the_stream_at_once() -> None:
    stream = JsonTaskStream()
    assert stream.feed('{"tasks": [{"id": "a", "tool": "add", "args": {}},') == []
    with pytest.raises(StreamedPlanError) as err:
        stream.feed(' {"id": b}]}')
    assert err.value.issue.code == "not_json"


def test_a_task_that_never_ends_is_cut_off_early() -> None:
    stream = JsonTaskStream(max_task_chars=500)
    assert stream.feed('{"tasks": [{"id": "a", "tool": "echo", "args": {}}, ') == []
    stream.feed('{"id": "b", "tool": "echo", "args": {"value": "')
    with pytest.raises(StreamedPlanError) as err:
        for _ in range(100):
            stream.feed("la la ")
    assert err.value.issue.code == "runaway"
    assert "task 2" in err.value.issue.message
    assert len(stream.text) < 700


def test_prose_that_never_reaches_a_plan_is_cut_off() -> None:
    stream = JsonTaskStream(max_task_chars=300)
    with pytest.raises(StreamedPlanError) as err:
        for _ in range(100):
            stream.feed("thinking about it some more... ")
    assert err.value.issue.code == "runaway"


# ---------------------------------------------------------------------------- LLMCompiler


@pytest.fixture
def reg() -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool
    def search(query: str) -> str:
        """Search."""
        return query

    @reg.tool
    def math(problem: str, context: list[str] | None = None) -> float:
        """Math."""
        return 0.0

    return reg


LLMC = (
    "Thought: both caps first.\n"
    '1. search("Microsoft Market Cap")\n'
    "2. search('Apple Market Cap')\n"
    'Thought: then compare\n3. math("$1 / $2 and $100", ["$1", $2])\n'
    "4. join()<END_OF_PLAN>\n"
    "5. search('never read')\n"
)


@pytest.mark.parametrize("size", [1, 3, 16, 1000])
def test_llmcompiler_lines_stream_into_the_tasks_the_batch_parser_reads(
    reg: dagagent.Registry, size: int
) -> None:
    stream = LLMCompilerStream(reg)
    got: list[Task] = []
    for start in range(0, len(LLMC), size):
        got += stream.feed(LLMC[start : start + size])
    got += stream.finish()
    assert stream.ended
    assert got == parse_llmcompiler(LLMC, reg).tasks
    assert got[2].description == "then compare"
    assert got[2].args == {"problem": "${1} / ${2} and $100", "context": ["${1}", "${2}"]}


def test_a_llmcompiler_task_comes_with_its_line_end(reg: dagagent.Registry) -> None:
    stream = LLMCompilerStream(reg)
    assert stream.feed('1. search("a")') == []
    assert [t.id for t in stream.feed("\n2. sea")] == ["1"]
    with pytest.raises(dagagent.PlanLoadError, match="line 2"):
        stream.finish()  # the answer ended inside line 2: "2. sea" is no task line
    stream = LLMCompilerStream(reg)
    stream.feed('1. search("a")\n2. search("b")')
    assert [t.id for t in stream.finish()] == ["2"]


def test_llmcompiler_forward_references_are_references_for_the_checks(
    reg: dagagent.Registry,
) -> None:
    stream = LLMCompilerStream(reg)
    tasks = stream.feed('1. search("${2} then ${1} for $5")\n2. math($3)\n')
    assert tasks[0].args == {"query": "${2} then ${1} for $5"}
    assert tasks[1].args == {"problem": "${3}"}
    checker = PlanChecker(reg)
    assert checker.take(tasks[1]) == ([], [])  # held until task 3 comes
    accepted, issues = checker.take(tasks[0])
    assert accepted == [] and [i.code for i in issues] == ["self_dependency"]
    (issue,) = checker.finish()
    assert issue.code == "missing_dependency" and issue.task_id == "2"
    assert "unknown task '3': the plan ended without it" in issue.message


def test_a_malformed_llmcompiler_line_names_itself(reg: dagagent.Registry) -> None:
    stream = LLMCompilerStream(reg)
    with pytest.raises(dagagent.PlanLoadError, match="line 3"):
        stream.feed('1. search("a")\nwhat is this: prose, skipped\n2. search "b"\n')


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("", None),
        ("  \n", None),
        ("12", None),
        ("Thou", None),
        ("Here is the plan:", None),
        ("1. search('x')", ("llmcompiler", 0)),
        ("  12) search('x')", ("llmcompiler", 0)),
        ("Thought: first", None),
        ("Thought: first\n1. search('x')", ("llmcompiler", 0)),
        ("Here is my plan.\n\n```\nThought: first\n2. sea", None),
        ("Here is my plan.\n\n```\nThought: first\n2. search(", ("llmcompiler", 22)),
        ('Thought: I will answer in JSON.\n{"tasks"', ("json", 32)),
        ("1. First I search\n2. search('x')", ("llmcompiler", 18)),
        ('1. search({"q": 1})', ("llmcompiler", 0)),
        ('{"tasks"', ("json", 0)),
        ('Here is the plan:\n```json\n{"tasks"', ("json", 26)),
        ('123 apples [1 of 2] {"tasks"', ("json", 20)),
        ("```json\n[\n  {", ("json", 8)),
        ("```json\n[\n  ", None),
    ],
)
def test_the_answer_format_shows_in_its_first_plan_line_or_bracket(
    text: str, found: tuple[str, int] | None
) -> None:
    from dagagent.planners.reading import plan_format

    assert plan_format(text) == found


ANSWERS = {
    "json": 'Sure!\n```json\n{"tasks": [{"id": "a", "tool": "search", "args": {"query": "x"},},'
    ' // one\n{"id": "b", "tool": "math", "args": {"problem": "${a}"}}]}\n```\nDone.',
    "llmcompiler": 'Plan:\nThought: look\n1. search("x")\n2. math("$1")\n3. join()\nDone.',
}


@pytest.mark.parametrize("form", list(ANSWERS))
@pytest.mark.parametrize("size", [1, 5, 10_000])
def test_a_streamed_answer_reads_as_the_whole_answer_does(
    reg: dagagent.Registry, form: str, size: int
) -> None:
    from dagagent.planners.reading import PlanText, read_tasks

    text = ANSWERS[form]
    reader = PlanText(reg)
    got: list[Any] = []
    for start in range(0, len(text), size):
        got += reader.feed(text[start : start + size])
    got += reader.finish()
    assert reader.mode == form and reader.closed
    assert got == read_tasks(text, reg)
    assert len(got) == 2
