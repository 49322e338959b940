"""``dagagent chat --session``, ``ask --session`` and ``sessions``, in process (stdin fed to
the command), against a loopback model server speaking OpenAI's wire format, with the
counted tools of ``tests/journey_model.py``: a follow-up reuses an earlier turn's output
without calling its tool again, whichever command asks it."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from cli_shell import Shell, tool_starts
from llm_server import LLMTestServer, Recorded, Reply, SSEReply

from dagagent.llm import wire

TOOLS = f"{Path(__file__).resolve().parents[1] / 'journey_model.py'}:registry"


class Model:
    def __init__(self, server: LLMTestServer) -> None:
        self.answers: deque[Any] = deque()
        self.server = server
        server.responder = self.respond

    def respond(self, request: Recorded) -> Reply | SSEReply:
        if not self.answers:
            return Reply(500, json={"error": {"message": "no more answers scripted"}})
        body = self.answers.popleft()
        if isinstance(body, SSEReply):  # a reply of its own (a stream that never ends)
            return body
        if request.json.get("stream"):
            return SSEReply(wire.openai_events(body))
        return Reply(json=body)

    def say(self, value: Any) -> None:
        self.answers.append(wire.openai_text(json.dumps(value)))

    @property
    def spec(self) -> list[str]:
        return ["--model", "openai:fake", "--base-url", self.server.url + "/v1"]


@pytest.fixture
def model(server: LLMTestServer) -> Model:
    return Model(server)


@pytest.fixture
def user(tmp_path: Path) -> Shell:
    shell = Shell(tmp_path, JOURNEY_LOG=str(tmp_path / "calls.log"), OPENAI_API_KEY="sk-test")
    return shell


def weather(tid: str, city: str) -> dict[str, Any]:
    return {"id": tid, "tool": "get_weather", "args": {"city": city}}


def script_two_turns(model: Model) -> None:
    model.say({"tasks": [weather("paris", "Paris")]})
    model.say({"action": "finish", "answer": "Paris: 18 C, cloudy.", "cites": ["paris"]})
    model.say(
        {
            "tasks": [
                weather("tokyo", "Tokyo"),
                {
                    "id": "avg",
                    "tool": "mean",
                    "args": {"values": ["${turn1.paris.temp_c}", "${tokyo.temp_c}"]},
                },
            ]
        }
    )
    model.say({"action": "finish", "answer": "The mean is 21.25 C.", "cites": ["avg"]})


def test_chat_answers_each_line_and_reuses_earlier_outputs(
    user: Shell, model: Model, tmp_path: Path
) -> None:
    script_two_turns(model)
    proc = user(
        "chat",
        "--session",
        "trip",
        *model.spec,
        "--tools",
        TOOLS,
        stdin="Weather in Paris?\nMean of Paris and Tokyo?\n\nnot asked\n",
    )
    assert proc.stdout.splitlines() == ["Paris: 18 C, cloudy.", "The mean is 21.25 C."]
    assert "session trip: 0 earlier turns" in proc.stderr
    # Paris was looked up once: turn 2 used turn 1's output by reference
    assert tool_starts(tmp_path / "calls.log") == [
        "get_weather Paris",
        "get_weather Tokyo",
        "mean",
    ]
    # the second planner request carried the conversation
    second_plan = model.server.requests[2].json["messages"][-1]["content"]
    assert "Weather in Paris?" in second_plan and "${turn1.paris}" in second_plan
    # listed, and shown turn by turn
    listed = user.json("sessions")["sessions"]
    assert [(s["name"], s["turns"], s["last_status"]) for s in listed] == [("trip", 2, "answered")]
    shown = user("sessions", "trip")
    assert "Mean of Paris and Tokyo?" in shown.stdout and "answered" in shown.stdout
    doc = user.json("sessions", "trip")["session"]
    assert [t["question"] for t in doc["turns"]] == [
        "Weather in Paris?",
        "Mean of Paris and Tokyo?",
    ]


def test_ask_with_a_session_continues_it(user: Shell, model: Model, tmp_path: Path) -> None:
    script_two_turns(model)
    base = [*model.spec, "--tools", TOOLS, "--session", "trip"]
    first = user("ask", "Weather in Paris?", *base)
    assert first.stdout.strip() == "Paris: 18 C, cloudy."
    second = user("ask", "Mean of Paris and Tokyo?", *base, "--no-stream")
    assert second.stdout.strip() == "The mean is 21.25 C."
    assert tool_starts(tmp_path / "calls.log").count("get_weather Paris") == 1
    doc = user.json("sessions", "trip")["session"]
    assert [t["status"] for t in doc["turns"]] == ["answered", "answered"]


def test_bad_session_names_and_unknown_sessions(user: Shell, model: Model) -> None:
    proc = user("chat", "--session", "a b", *model.spec, "--tools", TOOLS, code=2)
    assert "cannot name a session" in proc.stderr
    user("sessions")  # nothing recorded yet: says so
    proc = user("sessions", "nope", code=4)
    assert "no run store" in proc.stderr


def test_chat_checks_its_approval_options_before_anything(user: Shell, model: Model) -> None:
    base = ["chat", "--session", "trip", *model.spec, "--tools", TOOLS]
    proc = user(*base, "--approve", code=2)  # stdin is the questions, not a terminal
    assert "--approve needs a terminal" in proc.stderr
    proc = user(*base, "--policy", "missing.json", code=2)
    assert "missing.json" in proc.stderr
    assert not model.server.requests


def test_chat_takes_the_temporal_options_with_the_temporal_executor_only(
    user: Shell, model: Model
) -> None:
    base = ["chat", "--session", "trip", *model.spec, "--tools", TOOLS]
    proc = user(*base, "--task-queue", "q", code=2)
    assert "--task-queue needs --executor temporal" in proc.stderr
    assert not model.server.requests


def test_an_unknown_session_is_named(user: Shell, model: Model) -> None:
    script_two_turns(model)
    user("chat", "--session", "trip", *model.spec, "--tools", TOOLS, stdin="Weather in Paris?\n")
    model.answers.clear()
    proc = user("sessions", "nope", code=4)
    assert "no session 'nope'" in proc.stderr


def test_chat_resumes_a_turn_that_did_not_end_first(
    user: Shell, model: Model, tmp_path: Path
) -> None:
    from dagagent.store import RunStore

    (tmp_path / "home").mkdir(exist_ok=True)
    with RunStore(tmp_path / "home" / "runs.db") as store:  # its process died at once
        store.start_turn("trip", "0123456789ab", "Weather in Paris?", after=0)
    script_two_turns(model)
    proc = user("chat", "--session", "trip", *model.spec, "--tools", TOOLS, stdin="Mean of both?\n")
    assert "resuming turn 1 of session trip (interrupted): Weather in Paris?" in proc.stderr
    assert "turn 1 answered: Paris: 18 C, cloudy." in proc.stderr
    assert proc.stdout.splitlines() == ["Paris: 18 C, cloudy.", "The mean is 21.25 C."]
    assert tool_starts(tmp_path / "calls.log").count("get_weather Paris") == 1


def test_ask_with_a_session_keeps_sub_solves(user: Shell, model: Model) -> None:
    sub = {"id": "tokyo", "instruction": "Find the weather in Tokyo", "solve": True}
    model.say({"tasks": [sub]})
    model.say({"tasks": [weather("t", "Tokyo")]})  # the sub-solve's own plan
    model.say({"action": "finish", "answer": {"temp_c": 24.5}, "cites": ["t"]})
    model.say({"action": "finish", "answer": "Tokyo: 24.5 C.", "cites": ["tokyo"]})
    base = [*model.spec, "--tools", TOOLS, "--session", "trip", "--no-stream", "--sub-solves"]
    doc = user.json("ask", "Weather in Tokyo?", *base)
    assert doc["answer"] == "Tokyo: 24.5 C."
    assert doc["rounds"][0]["result"]["tasks"]["tokyo"]["output"] == {"temp_c": 24.5}


def test_show_says_which_session_turn_a_solve_belongs_to(user: Shell, model: Model) -> None:
    model.say({"tasks": [weather("paris", "Paris")]})
    model.say({"action": "finish", "answer": "Paris: 18 C, cloudy.", "cites": ["paris"]})
    sub = {"id": "tokyo", "instruction": "Find the weather in Tokyo", "solve": True}
    model.say({"tasks": [sub]})  # turn 2 hands Tokyo to a sub-solve
    model.say({"tasks": [weather("t", "Tokyo")]})
    model.say({"action": "finish", "answer": {"temp_c": 24.5}, "cites": ["t"]})
    model.say({"action": "finish", "answer": "Tokyo: 24.5 C.", "cites": ["tokyo"]})
    base = [*model.spec, "--tools", TOOLS, "--session", "trip", "--no-stream"]
    user("ask", "Weather in Paris?", *base)
    second = user.json("ask", "And Tokyo?", *base, "--sub-solves")
    turn2 = second["solve_id"]
    shown = user("show", turn2).stdout
    assert "turn 2 of session trip (dagagent sessions trip)" in shown
    assert user.json("show", turn2)["session"] == {"name": "trip", "turn": 2, "solve_id": turn2}
    (child,) = user.json("show", turn2)["children"]
    below = user("show", child["solve_id"]).stdout
    assert f"turn 2 of session trip, under its solve {turn2}" in below
    assert user.json("show", child["solve_id"])["session"]["turn"] == 2
    run = second["run_id"]  # a turn's run names its turn too
    assert (
        f"round 1 of solve {turn2}, turn 2 of session trip (answered)" in user("show", run).stdout
    )
    assert user.json("show", run)["solve"]["session"]["turn"] == 2
    model.say({"tasks": [weather("paris", "Paris")]})
    model.say({"action": "finish", "answer": "Paris: 18 C.", "cites": ["paris"]})
    alone = user.json("ask", "Weather in Paris?", *model.spec, "--tools", TOOLS)
    assert user.json("show", alone["solve_id"])["session"] is None


def mean_of(*refs: str) -> dict[str, Any]:
    return {"id": "avg", "tool": "mean", "args": {"values": [f"${{{r}.temp_c}}" for r in refs]}}


def test_chat_resumes_a_paused_turn_with_the_rules_it_was_asked_with(
    user: Shell, model: Model, tmp_path: Path
) -> None:
    model.say({"tasks": [weather("paris", "Paris"), mean_of("paris")]})
    base = [*model.spec, "--tools", TOOLS, "--session", "trip", "--no-stream"]
    asked = ["--ask", "get_weather", "--ask", "mean"]
    paused = user("ask", "Mean of Paris?", *base, *asked, code=6)
    assert "waits for a person's decision (paris)" in paused.stderr
    (waiting,) = user.json("approvals")["approvals"]
    user("approve", waiting["run_id"], "paris", "--allow")
    # chat, given no rules, resumes the turn with its own: the mean is asked about in turn
    proc = user("chat", "--session", "trip", *model.spec, "--tools", TOOLS, code=6)
    assert "resuming turn 1 of session trip (paused)" in proc.stderr
    assert tool_starts(tmp_path / "calls.log") == ["get_weather Paris"]
    (waiting,) = [a for a in user.json("approvals")["approvals"] if a["state"] == "waiting"]
    assert waiting["task_id"] == "avg"
    user("approve", waiting["run_id"], "avg", "--allow")
    # given other rules, chat says so and still resumes the turn with its own, and records
    # its next round's run with them (a resume of that run asks what the turn asked)
    model.say({"action": "replan", "feedback": "and the mean of two values"})
    model.say({"tasks": [{"id": "avg2", "tool": "mean", "args": {"values": [1, 2]}}]})
    only_weather = ["--ask", "get_weather"]
    chat = ["chat", "--session", "trip", *model.spec, "--tools", TOOLS]
    proc = user(*chat, *only_weather, code=6)
    assert "turn 1 was asked with --ask get_weather and --ask mean: those apply" in proc.stderr
    (waiting,) = [a for a in user.json("approvals")["approvals"] if a["state"] == "waiting"]
    assert waiting["task_id"] == "avg2"
    context = user.json("show", waiting["run_id"])["context"]
    assert context["approval"] == {"ask": ["get_weather", "mean"]}
    user("approve", waiting["run_id"], "avg2", "--allow")
    model.say({"action": "finish", "answer": "18 C.", "cites": ["avg2"]})
    # chat's own rules check every later turn
    model.say({"tasks": [weather("tokyo", "Tokyo")]})
    proc = user(*chat, *only_weather, stdin="And Tokyo?\n", code=6)
    assert "turn 1 answered: 18 C." in proc.stderr
    assert tool_starts(tmp_path / "calls.log") == ["get_weather Paris", "mean", "mean"]
    assert user.json("sessions", "trip")["session"]["turns"][1]["status"] == "paused"


def test_chat_gives_each_turn_the_budget_afresh(user: Shell, model: Model) -> None:
    script_two_turns(model)  # two model calls a turn: a budget of two holds for each
    base = [*model.spec, "--tools", TOOLS, "--session", "trip", "--max-model-calls", "2"]
    proc = user("chat", *base, stdin="Weather in Paris?\nMean of Paris and Tokyo?\n")
    assert proc.stdout.splitlines() == ["Paris: 18 C, cloudy.", "The mean is 21.25 C."]
    # one call a turn: the planner's; the joiner cannot be asked, and the turn says why
    model.say({"tasks": [weather("rome", "Rome")]})
    model.say({"tasks": [weather("oslo", "Oslo")]})
    base[-1] = "1"
    proc = user("chat", *base, stdin="Weather in Rome?\nWeather in Oslo?\n", code=9)
    assert proc.stdout == ""
    assert proc.stderr.count("budget exhausted: ") == 2, proc.stderr  # the second was asked
    doc = user.json("sessions", "trip")["session"]
    assert [t["status"] for t in doc["turns"]] == [
        "answered",
        "answered",
        "budget_exhausted",
        "budget_exhausted",
    ]


def test_chat_gives_each_turn_the_deadline(user: Shell, model: Model) -> None:
    # wall-clock time: the first turn's planner writes until the deadline passes
    opening = {"choices": [{"index": 0, "delta": {"content": '{"tasks": ['}}]}
    more = {"choices": [{"index": 0, "delta": {"content": " "}}]}
    endless = [("message", opening)] + [("message", more)] * 100_000
    model.answers.append(SSEReply(endless, pause=0.02, pause_from=1))
    model.say({"tasks": [weather("paris", "Paris")]})
    model.say({"action": "finish", "answer": "Paris: 18 C, cloudy.", "cites": ["paris"]})
    base = [*model.spec, "--tools", TOOLS, "--session", "trip", "--deadline", "1"]
    proc = user("chat", *base, stdin="Weather in Rome?\nWeather in Paris?\n", code=8)
    assert "timed out: the deadline passed" in proc.stderr
    assert proc.stdout.splitlines() == ["Paris: 18 C, cloudy."]  # the next turn had its own
    doc = user.json("sessions", "trip")["session"]
    assert [t["status"] for t in doc["turns"]] == ["timed_out", "answered"]


def test_chat_allows_sub_solves(user: Shell, model: Model) -> None:
    sub = {"id": "tokyo", "instruction": "Find the weather in Tokyo", "solve": True}
    model.say({"tasks": [sub]})
    model.say({"tasks": [weather("t", "Tokyo")]})  # the sub-solve's own plan
    model.say({"action": "finish", "answer": {"temp_c": 24.5}, "cites": ["t"]})
    model.say({"action": "finish", "answer": "Tokyo: 24.5 C.", "cites": ["tokyo"]})
    base = [*model.spec, "--tools", TOOLS, "--session", "trip", "--no-stream", "--sub-solves"]
    proc = user("chat", *base, stdin="Weather in Tokyo?\n")
    assert proc.stdout.splitlines() == ["Tokyo: 24.5 C."]
    assert "tokyo: starts sub-solve" in proc.stderr


def test_chat_plans_with_the_planner_prompt(user: Shell, model: Model, tmp_path: Path) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("You plan weather look-ups.\n{tools}", encoding="utf-8")
    script_two_turns(model)
    base = [*model.spec, "--tools", TOOLS, "--session", "trip", "--planner-prompt", str(prompt)]
    proc = user("chat", *base, stdin="Weather in Paris?\nMean of Paris and Tokyo?\n")
    assert proc.stdout.splitlines() == ["Paris: 18 C, cloudy.", "The mean is 21.25 C."]
    planned = [model.server.requests[i].json["messages"][0]["content"] for i in (0, 2)]
    assert all(p.startswith("You plan weather look-ups.\n- get_weather(") for p in planned)
    assert "- mean(" in planned[0]  # every tool listed: as many as --max-tools allows


def test_chat_lists_at_most_max_tools_tools(user: Shell, model: Model) -> None:
    model.say({"tasks": [weather("paris", "Paris")]})
    model.say({"action": "finish", "answer": "Paris: 18 C, cloudy.", "cites": ["paris"]})
    base = [*model.spec, "--tools", TOOLS, "--session", "trip", "--max-tools", "1"]
    proc = user("chat", *base, stdin="Weather in Paris?\n")
    assert proc.stdout.splitlines() == ["Paris: 18 C, cloudy."]
    planned = json.dumps(model.server.requests[0].json["messages"])
    assert "get_weather(" in planned and "- mean(" not in planned
