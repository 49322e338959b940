"""What the command line shows while a model writes (``dagagent.cli.writing``): the line about
the calls under way, a plain line now and then without a terminal, rejected attempts, and the
joiner's answer streamed to a terminal's stdout as it is written (escaped, never twice)."""

from __future__ import annotations

import io
import json

from rich.console import Console

from dagagent.cli._app import TerminalConsole
from dagagent.cli.writing import ModelProgress, who
from dagagent.llm import LiveCall, LLMRequest, LLMResponse


def call_of(*pieces: str) -> LiveCall:
    call = LiveCall.of(object(), LLMRequest.build("q", stream=True))
    for piece in pieces:
        call.wrote(piece)
    return call


def console(*, terminal: bool) -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return TerminalConsole(file=buffer, force_terminal=terminal, width=200), buffer


def test_the_line_says_who_writes_how_much_and_how_fast() -> None:
    err, _ = console(terminal=False)
    progress = ModelProgress(err)
    assert progress.line() is None
    progress.started(call_of(), "planner", 1, None)
    assert progress.line() is not None and "waiting for the first token" in (progress.line() or "")
    writing = call_of("x" * 400)
    progress.started(writing, "agent", 2, "note")
    line = progress.line() or ""
    assert "agent task note writing: 400 chars (~100 tokens)" in line and "tok/s" in line
    progress.ended(writing.id)
    assert "agent task" not in (progress.line() or "")
    assert who("joiner", 3) == "round 3: the joiner"


def test_without_a_terminal_a_line_comes_every_few_seconds() -> None:
    err, buffer = console(terminal=False)
    progress = ModelProgress(err, plain_every_s=5)
    progress.started(call_of('{"tasks": ['), "planner", 1, None)
    progress.tick(100.0)
    progress.tick(104.9)
    assert buffer.getvalue() == ""  # not yet
    progress.tick(105.0)
    assert buffer.getvalue().count("round 1: the planner writing: 11 chars") == 1
    progress.tick(106.0)
    assert buffer.getvalue().count("\n") == 1


def test_a_rejected_attempt_is_printed_with_its_issues_escaped() -> None:
    err, buffer = console(terminal=False)
    ModelProgress(err).rejected("planner", 1, None, ["[not_json] it begins: '\x1b[31mred'"])
    text = buffer.getvalue()
    assert "round 1: the planner's plan was rejected:" in text
    assert "\\x1b[31mred" in text and "\x1b[31m" not in text


def test_the_joiners_answer_streams_to_a_terminal_as_it_is_written() -> None:
    err, _ = console(terminal=False)
    out, printed = console(terminal=True)
    progress = ModelProgress(err, answer_to=out)
    answer = "Tokyo is warmer \x1b[2J than Paris."
    text = json.dumps({"action": "finish", "answer": answer, "cites": ["a"]})
    call = call_of()
    progress.started(call, "joiner", 1, None)
    for i in range(0, len(text), 7):
        call.wrote(text[i : i + 7])
        progress.tick(0.0)  # what the ticking thread does, a few times a second
    call.end("answered", LLMResponse(content=text))
    progress.ended(call.id)
    assert progress.streamed == answer  # the command does not print it again
    shown = printed.getvalue()
    assert "Tokyo is warmer \\x1b[2J than Paris." in shown and "\x1b[2J" not in shown


def test_a_replan_or_a_rejected_answer_is_not_taken_for_the_answer() -> None:
    err, errors = console(terminal=False)
    out, printed = console(terminal=True)
    progress = ModelProgress(err, answer_to=out)
    call = call_of(json.dumps({"action": "replan", "feedback": "more"}))
    progress.started(call, "joiner", 1, None)
    progress.ended(call.id)
    assert progress.streamed is None and printed.getvalue() == ""
    call = call_of('{"action": "finish", "answer": "half an ans')
    progress.started(call, "joiner", 1, None)
    progress.tick(0.0)
    progress.rejected("joiner", 1, None, ["[no_cites] the answer cites nothing"])
    assert progress.streamed is None  # printed, then taken back: the command prints the answer
    assert "(that answer was rejected)" in errors.getvalue()


def test_a_sub_solves_joiner_is_shown_as_its_own_and_never_streamed_as_the_answer() -> None:
    err, errors = console(terminal=False)
    out, printed = console(terminal=True)
    progress = ModelProgress(err, answer_to=out)
    text = json.dumps({"action": "finish", "answer": "Tokyo: 24.5 C", "cites": ["t"]})
    call = call_of(text)
    progress.started(call, "joiner", 1, None, within="  [tokyo] ")
    assert (progress.line() or "").startswith("[tokyo] round 1: the joiner writing: ")
    progress.tick(0.0)
    progress.rejected("joiner", 1, None, ["[no_cites] nothing"], within="  [tokyo] ")
    progress.ended(call.id)
    assert printed.getvalue() == "" and progress.streamed is None
    assert "  [tokyo] round 1: the joiner's answer was rejected:" in errors.getvalue()
    assert "  [tokyo]   [no_cites] nothing" in errors.getvalue()
