"""``ask`` and ``plan`` bounded and budgeted, end to end (in process through
``cli_shell.Shell``): ``--deadline`` against a model that trickles forever, ``--max-tokens-total``
and the other budget options, ``--prices``, the progress a model's writing makes, rejected
attempts printed when they are rejected, and ``show SOLVE`` with every model call.

The trickling model is the shared loopback server answering in OpenAI's server-sent events: a
piece every :data:`PIECE_S` seconds, never finishing."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llm_server import LLMTestServer, Recorded, Reply, SSEReply

from .test_ask import GOAL, TOOLS, Model, User, _ask_policy, finish, weather

PIECE_S = 0.1
OPENING = '{"tasks": [{"id": "a", "tool": "get_weather", "args": {"city": "'


class Trickle:
    """A server whose answers never end: a piece of a plan every :data:`PIECE_S` seconds,
    valid JSON as far as it goes (a string that never closes), however it is cut."""

    def __init__(self, server: LLMTestServer) -> None:
        self.server = server
        server.responder = self.respond

    def respond(self, request: Recorded) -> Reply | SSEReply:
        pieces = [("message", {"choices": [{"index": 0, "delta": {"content": OPENING}}]})]
        pieces += [
            ("message", {"choices": [{"index": 0, "delta": {"content": " word"}}]})
        ] * 100_000
        return SSEReply(pieces, pause=PIECE_S, pause_from=1)

    @property
    def spec(self) -> list[str]:
        return ["--model", "openai:trickle", "--base-url", self.server.url + "/v1"]


@pytest.fixture
def trickle(server: LLMTestServer) -> Trickle:
    return Trickle(server)


def solve_rows(user: User, table: str = "model_calls") -> list[dict[str, Any]]:
    """The rows of ``table`` in the user's store, read directly."""
    with sqlite3.connect(user.dir / "home" / "runs.db") as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute(f"SELECT * FROM {table}")]


def test_a_deadline_stops_a_model_that_never_finishes(tmp_path: Path, trickle: Trickle) -> None:
    # wall-clock time: the command runs its own event loop against a server thread
    user = User(tmp_path, trickle.spec)
    proc = user.ask("--deadline", "3", code=8)
    assert "timed out: the deadline passed" in proc.stderr
    assert "the planner (round 1) had written" in proc.stderr
    (call,) = solve_rows(user)
    assert call["status"] == "cancelled" and call["role"] == "planner"
    assert call["text"].startswith(OPENING + " word") and call["output_tokens"] > 0
    assert call["estimated"] == 1
    (solve,) = solve_rows(user, "solves")
    assert solve["status"] == "timed_out"
    # the id ask prints last opens the solve
    shown = user("show", solve["id"], code=0)
    assert f"solve {solve['id']}: timed_out" in shown.stdout
    assert "planner" in shown.stdout and "cancelled" in shown.stdout


def test_plan_has_a_deadline_too(tmp_path: Path, trickle: Trickle) -> None:
    # wall-clock time: the command runs its own event loop against a server thread
    user = User(tmp_path, trickle.spec)
    proc = user("plan", GOAL, *trickle.spec, "--tools", TOOLS, "--deadline", "2", code=8)
    assert "the deadline of 2 s passed while planning" in proc.stderr
    # the deadline counts from this command's start (not from an earlier one in this process)
    cut = re.search(r"was cancelled after ([\d.]+) s, ([\d,]+) characters written", proc.stderr)
    assert cut is not None and float(cut[1]) >= 1.0 and int(cut[2].replace(",", "")) > 0


def test_a_token_budget_refuses_what_it_cannot_pay_for(tmp_path: Path, trickle: Trickle) -> None:
    user = User(tmp_path, trickle.spec)
    proc = user.ask("--max-tokens-total", "500", code=9)
    assert "budget exhausted" in proc.stderr and "could cross the budget of 500" in proc.stderr
    (call,) = solve_rows(user)
    assert call["status"] == "refused" and call["input_tokens"] == call["output_tokens"] == 0
    assert trickle.server.requests == []  # nothing was sent


def test_budget_options_are_checked_before_anything(tmp_path: Path, trickle: Trickle) -> None:
    user = User(tmp_path, trickle.spec)
    proc = user.ask("--max-cost", "0.5", code=2)
    assert "a cost budget needs the price of the model" in proc.stderr
    assert "'openai:trickle'" in proc.stderr and "--prices FILE" in proc.stderr
    bad = tmp_path / "prices.json"
    bad.write_text("{not json")
    proc = user.ask("--prices", str(bad), code=2)
    assert "prices file" in proc.stderr and "not valid JSON" in proc.stderr
    assert trickle.server.requests == []


@pytest.fixture(params=["openai"])
def model(request: pytest.FixtureRequest, server: LLMTestServer) -> Iterator[Model]:
    m = Model(request.param, server)
    yield m
    assert not m.answers, "scripted answers left unused"


def test_every_call_is_shown_and_a_rejected_attempt_says_why(tmp_path: Path, model: Model) -> None:
    user = User(tmp_path, model.spec)
    model.text("Let me think <about> it.")
    model.plan(weather("paris", "Paris"))
    model.decide(finish("Paris: 18 C", ["paris"]))
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"openai:fake": {"input": 1.0, "output": 4.0}}))
    proc = user.ask("--prices", str(prices), "--max-cost", "1")
    err = proc.stderr
    rejected = err.index("round 1: the planner's plan was rejected:")
    assert "[not_json]" in err[rejected:] and rejected < err.index("paris succeeded")
    assert "round 1: the planner wrote" in err and "round 1: the joiner wrote" in err
    assert proc.stdout.strip() == "Paris: 18 C"
    solve_id = err.strip().split("solve ")[-1].split()[0]
    doc = json.loads(user("show", solve_id, "--json", code=0).stdout)
    assert [c["role"] for c in doc["calls"]] == ["planner", "planner", "joiner"]
    assert doc["calls"][0]["text"] == "Let me think <about> it." and doc["calls"][0]["issues"]
    assert all(c["cost_usd"] is not None for c in doc["calls"])
    assert doc["spent"]["cost_usd"] > 0
    shown = user("show", solve_id, "-v", code=0).stdout
    assert "call 1 (planner, round 1) was rejected:" in shown
    assert "Let me think <about> it." in shown and "answer (cites paris" in shown


def test_resume_of_a_solve_costs_its_calls_at_the_prices_given(
    tmp_path: Path, model: Model
) -> None:
    """``resume SOLVE --prices FILE`` costs the calls the resumed solve makes as ``ask
    --prices`` does (the fake model is in no built-in table: without the file, no cost)."""
    user = User(tmp_path, model.spec)
    model.plan(weather("paris", "Paris"), weather("tokyo", "Tokyo"))
    user.ask("--policy", _ask_policy(user), code=6)  # paused: Tokyo waits for a person
    (waiting,) = json.loads(user("approvals", "--json", code=0).stdout)["approvals"]
    solve_id = json.loads(user("show", waiting["run_id"], "--json", code=0).stdout)["solve"][
        "solve_id"
    ]
    user("approve", waiting["run_id"], "tokyo", "--allow", code=0)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    refused = user("resume", solve_id, "--prices", str(bad), code=2)
    assert "prices file" in refused.stderr and "not valid JSON" in refused.stderr
    assert len(model.server.requests) == 1 and user.calls() == ["get_weather Paris"]

    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"openai:fake": {"input": 1.0, "output": 4.0}}))
    model.decide(finish("Tokyo is warmer.", ["tokyo"]))
    resumed = user("resume", solve_id, "--prices", str(prices), code=0)
    assert resumed.stdout.strip().splitlines()[-1] == "Tokyo is warmer."
    doc = json.loads(user("show", solve_id, "--json", code=0).stdout)
    planner, joiner = doc["calls"]
    assert planner["role"] == "planner" and planner["cost_usd"] is None  # ask had no prices
    assert joiner["role"] == "joiner" and joiner["cost_usd"] is not None
    expected = (joiner["input_tokens"] * 1.0 + joiner["output_tokens"] * 4.0) / 1_000_000
    assert joiner["cost_usd"] == pytest.approx(expected)


def test_ask_json_carries_the_calls(tmp_path: Path, model: Model) -> None:
    user = User(tmp_path, model.spec)
    model.plan(weather("paris", "Paris"))
    model.decide(finish("18 C", ["paris"]))
    doc = json.loads(user.ask("--json").stdout)
    assert [(c["round"], c["role"], c["status"]) for c in doc["calls"]] == [
        (1, "planner", "answered"),
        (1, "joiner", "answered"),
    ]
    assert doc["calls"][0]["options"]["stream"] is True
    assert doc["rounds"][0]["usage"]["calls"] == 2
