"""``dagagent ask --sub-solves`` end to end, in process, against the loopback model server: a
task of the plan gets a solve of its own, and ``show`` lists it under the task."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from llm_server import LLMTestServer

from cli.test_ask import Model, User, finish, weather


@pytest.fixture
def model(server: LLMTestServer) -> Model:
    return Model("openai", server)


def test_ask_with_sub_solves(tmp_path: Path, model: Model) -> None:
    user = User(tmp_path, model.spec)
    sub: dict[str, Any] = {"id": "tokyo", "instruction": "Find the weather in Tokyo", "solve": True}
    model.plan(weather("paris", "Paris"), sub)  # the solve's plan
    model.plan(weather("t", "Tokyo"))  # the sub-solve's plan
    model.decide(finish({"city": "Tokyo", "temp_c": 24.5}, ["t"]))  # the sub-solve's answer
    model.decide(finish("Tokyo is warmer.", ["paris", "tokyo"]))
    proc = user.ask("--sub-solves", "--json")
    doc = json.loads(proc.stdout)
    assert doc["status"] == "answered" and doc["answer"] == "Tokyo is warmer."
    assert doc["usage"]["sub_solves"]["calls"] == 2
    started = re.search(
        r"  tokyo: starts sub-solve ([0-9a-f]{12}): Find the weather in Tokyo", proc.stderr
    )
    assert started, proc.stderr
    assert f"  tokyo: sub-solve {started.group(1)} answered" in proc.stderr
    # the sub-solve's own steps, between its start and its end, each line saying whose it is
    lines = proc.stderr.splitlines()
    first = lines.index(started.group(0))
    between = lines[first + 1 : lines.index(f"  tokyo: sub-solve {started.group(1)} answered")]
    mine = [line for line in between if line.startswith("  [tokyo] ")]
    # the solve's own task beside it may end meanwhile: its line is its own, unprefixed
    theirs = [line for line in between if not line.startswith("  [tokyo] ")]
    assert all(re.fullmatch(r"  paris succeeded \d+\.\d\ds", line) for line in theirs), theirs
    assert mine[0] == "  [tokyo] round 1: planning"
    assert all(line.startswith("  [tokyo] round 1: ") for line in mine if "[tokyo]   " not in line)
    assert re.search(r"^  \[tokyo\] round 1: run [0-9a-f]{12} runs ", "\n".join(mine), re.M)
    assert any(re.fullmatch(r"  \[tokyo\]   t succeeded \d+\.\d\ds", line) for line in mine)
    assert mine[-1] == "  [tokyo] round 1: the joiner answered (cites t)", mine
    # the solve's own lines are not the sub-solve's: one run of its own, answered at the end
    assert [line for line in lines if line.startswith("round 1: run ")] == [
        f"round 1: run {doc['run_id']} runs tasks as they are planned"
    ]
    (rnd,) = doc["rounds"]
    assert rnd["result"]["tasks"]["tokyo"]["output"] == {"city": "Tokyo", "temp_c": 24.5}
    assert sorted(user.calls()) == ["get_weather Paris", "get_weather Tokyo"]
    # the planner was told, in its system prompt, that it may write sub-solves
    assert '"solve": true' in model.server.requests[0].json["messages"][0]["content"]
    shown = user("show", doc["solve_id"], code=0).stdout
    assert "task tokyo: 1 sub-solve (dagagent show ID)" in shown
    assert "answered: {" in shown and "and its sub-solves': 2 model calls" in shown
    assert not model.answers


def test_ask_without_sub_solves_refuses_a_plan_with_one(tmp_path: Path, model: Model) -> None:
    user = User(tmp_path, model.spec)
    sub = {"id": "tokyo", "instruction": "Find the weather in Tokyo", "solve": True}
    model.plan(weather("paris", "Paris"), sub)
    proc = user.ask("--no-stream", "--max-attempts", "1", code=3)
    assert "[sub_solve] task 'tokyo'" in proc.stderr
    assert "sub_solves=True (dagagent ask --sub-solves)" in proc.stderr


def test_a_planner_prompt_of_ones_own_plans_the_sub_solves_too(
    tmp_path: Path, model: Model
) -> None:
    user = User(tmp_path, model.spec)
    (tmp_path / "prompt.txt").write_text("You plan weather reports for Meteo Inc.\n\n{tools}\n")
    sub: dict[str, Any] = {"id": "tokyo", "instruction": "Find the weather in Tokyo", "solve": True}
    model.plan(sub)
    model.plan(weather("t", "Tokyo"))
    model.decide(finish({"city": "Tokyo", "temp_c": 24.5}, ["t"]))
    model.decide(finish("24.5 C in Tokyo.", ["tokyo"]))
    user.ask("--sub-solves", "--no-stream", "--planner-prompt", str(tmp_path / "prompt.txt"))
    parent, child = (model.server.requests[i].json["messages"][0]["content"] for i in (0, 1))
    assert parent.startswith("You plan weather reports for Meteo Inc.")
    assert child.startswith("You plan weather reports for Meteo Inc.")
    assert "Find the weather in Tokyo" in model.server.requests[1].json["messages"][-1]["content"]
