"""The model calls ``plan``, ``replan --model`` and ``run --model`` make are records, as a
solve's are: each of the run it planned, revised or ran (the agent task's for an agent's
call), or, for a plan that was not run, of the run id it would have had; ``show`` and
``show --json`` carry them, read back from the store. In process through ``cli_shell``,
against the loopback model server speaking OpenAI's wire format."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from llm_server import LLMTestServer

from .test_ask import GOAL, TOOLS, Model, User, weather

NOTE = "Paris is cooler than Tokyo today."
AGENT_PLAN: dict[str, Any] = {
    "goal": "A note",
    "tasks": [
        {"id": "paris", "tool": "get_weather", "args": {"city": "Paris"}},
        {"id": "note", "instruction": "Compare ${paris.condition} Paris with Tokyo"},
    ],
}


@pytest.fixture
def model(server: LLMTestServer) -> Iterator[Model]:
    m = Model("openai", server)
    yield m
    assert not m.answers, "scripted answers left unused"


@pytest.fixture
def user(tmp_path: Path, model: Model) -> User:
    return User(tmp_path, model.spec)


def rows(user: User) -> list[dict[str, Any]]:
    """The store's model call rows, read directly."""
    with sqlite3.connect(user.dir / "home" / "runs.db") as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM model_calls ORDER BY seq")]


def recorded_as(stderr: str) -> str:
    """The id ``N model calls recorded as ID`` names."""
    return stderr.split("recorded as ")[1].split()[0]


def test_a_plan_not_run_keeps_its_calls_under_the_id_show_opens(user: User, model: Model) -> None:
    model.text("Let me think <about> it.")  # rejected: not JSON
    model.plan(weather("paris", "Paris"))
    proc = user("plan", GOAL, *user.model, "--tools", TOOLS)
    planning = recorded_as(proc.stderr)
    assert "2 model calls recorded as" in proc.stderr and f"dagagent show {planning}" in proc.stderr
    stored = rows(user)
    assert [(r["run_id"], r["role"], r["solve_id"]) for r in stored] == [
        (planning, "planner", None),
        (planning, "planner", None),
    ]
    assert stored[0]["text"] == "Let me think <about> it." and "not_json" in stored[0]["issues"]
    assert stored[1]["input_tokens"] > 0 and stored[1]["status"] == "answered"
    doc = user.json("show", planning)
    assert doc["run"] is None and doc["run_id"] == planning
    assert [c["issues"] != [] for c in doc["calls"]] == [True, False]
    assert doc["spent"]["calls"] == 2
    shown = user("show", planning[:6], "-v").stdout  # a prefix, as for a run
    assert f"{planning}: not run" in shown
    assert "call 1 (planner) was rejected:" in shown and "Let me think <about> it." in shown
    refused = user("show", planning, "--task", "paris", code=2)
    assert "was not run" in refused.stderr
    # --json says nothing on stderr: the document names the id
    model.plan(weather("paris", "Paris"))
    quiet = user.json("plan", GOAL, *user.model, "--tools", TOOLS)
    assert [c["role"] for c in user.json("show", quiet["calls_recorded_as"])["calls"]] == [
        "planner"
    ]


def test_planning_that_fails_keeps_every_attempt(user: User, model: Model) -> None:
    for _ in range(2):
        model.text("no plan here")
    proc = user("plan", GOAL, *user.model, "--tools", TOOLS, "--max-attempts", "2", code=3)
    planning = recorded_as(proc.stderr)
    doc = user.json("show", planning)
    assert [(c["status"], bool(c["issues"])) for c in doc["calls"]] == [("answered", True)] * 2
    assert all(c["text"] == "no plan here" for c in doc["calls"])


def test_plan_execute_records_its_calls_with_the_run_it_became(user: User, model: Model) -> None:
    model.plan(weather("paris", "Paris"), {"id": "note", "instruction": "Say ${paris}"})
    model.text(NOTE)  # the agent task's answer
    proc = user("plan", GOAL, *user.model, "--tools", TOOLS, "--agent-tasks", "--execute")
    run_id = proc.stderr.split("recorded as run ")[1].split()[0]
    assert recorded_as(proc.stderr.split("recorded as run ")[1]) == run_id
    doc = user.json("show", "--last")
    assert doc["run_id"] == run_id
    assert [(c["role"], c["task_id"], c["run_id"]) for c in doc["calls"]] == [
        ("planner", None, run_id),
        ("agent", "note", run_id),
    ]
    assert doc["calls"][1]["text"] == NOTE
    shown = user("show", run_id).stdout
    assert "model calls: 2 model calls" in shown and "(planner 1, agent 1)" in shown
    task = user.json("show", run_id, "--task", "note")
    assert [c["role"] for c in task["calls"]] == ["agent"]
    assert "agent note" in user("show", run_id, "--task", "note").stdout


def test_run_records_its_agent_tasks_calls(user: User, model: Model) -> None:
    model.text(NOTE)
    plan = user.write_plan(AGENT_PLAN)
    user("run", plan, "--tools", TOOLS, *user.model)
    doc = user.json("show", "--last")
    (call,) = doc["calls"]
    assert (call["role"], call["task_id"], call["run_id"]) == ("agent", "note", doc["run_id"])
    assert call["status"] == "answered" and call["output_tokens"] > 0
    assert call["server"].startswith("http://127.0.0.1") and call["model"] == "fake"
    assert doc["tasks"]["note"]["output"] == NOTE


def test_replan_records_the_replanners_calls(user: User, model: Model) -> None:
    model.text(NOTE)
    plan = user.write_plan(AGENT_PLAN)
    user("run", plan, "--tools", TOOLS, *user.model)
    first = user.json("show", "--last")["run_id"]
    revised = {"goal": "A note", "tasks": [weather("paris", "Paris"), weather("tokyo", "Tokyo")]}
    # a review only: the replanner's call is kept under the id the new run would have had
    model.answers.append(json.loads(json.dumps(_text(revised))))
    proc = user("replan", first, *user.model)
    review = recorded_as(proc.stderr)
    assert review != first
    assert [c["role"] for c in user.json("show", review)["calls"]] == ["replanner"]
    # --execute: the replanner's call is the new run's
    model.answers.append(_text(revised))
    doc = user.json("replan", first, *user.model, "--execute")
    run_id = doc["result"]["run_id"]
    shown = user.json("show", run_id)
    assert shown["parent_id"] == first
    assert [(c["role"], c["run_id"]) for c in shown["calls"]] == [("replanner", run_id)]
    # the first run's own calls are untouched: its agent's
    assert [c["role"] for c in user.json("show", first)["calls"]] == ["agent"]


def test_a_revision_not_run_names_the_run_it_reviewed(user: User, model: Model) -> None:
    from ui.conftest import Server

    model.text(NOTE)
    user("run", user.write_plan(AGENT_PLAN), "--tools", TOOLS, *user.model)
    first = user.json("show", "--last")["run_id"]
    revised = {"goal": "A note", "tasks": [weather("paris", "Paris")]}
    model.answers.append(_text(revised))
    review = recorded_as(user("replan", first, *user.model).stderr)
    # the plan not run names the run it revised: in the store, show, show --json
    assert [(r["run_id"], r["role"], r["replan_of"]) for r in rows(user)][-1] == (
        review,
        "replanner",
        first,
    )
    assert user.json("show", review)["replan_of"] == first
    shown = user("show", review).stdout
    assert f"revised the plan of run {first}" in shown and f"dagagent show {first}" in shown
    # ...and the run reviewed names it (a plan made from a goal names no run)
    assert user.json("show", first)["revisions_not_run"] == [review]
    assert f"revised, not run: {review}" in user("show", first).stdout
    model.plan(weather("paris", "Paris"))
    planned = user.json("plan", GOAL, *user.model, "--tools", TOOLS)["calls_recorded_as"]
    assert user.json("show", planned)["replan_of"] is None
    assert user.json("show", first)["revisions_not_run"] == [review]
    # the viewer links them both ways
    with Server(user.dir / "home" / "runs.db") as viewer, httpx.Client(base_url=viewer.url) as web:
        page = web.get(f"/runs/{review}").text
        assert f'data-replan-of="{first}"' in page and f"A revision of run {first}" in page
        assert f'data-revision="{review}"' in web.get(f"/runs/{first}").text
        assert "data-replan-of" not in web.get(f"/runs/{planned}").text
        index = web.get("/").text
        row = index[index.index(f'data-run="{review}"') :].split("</tr>")[0]
        assert "revises <a" in row and first in row


def test_runs_lists_the_plans_not_run_beside_the_runs(user: User, model: Model) -> None:
    model.plan(weather("paris", "Paris"))
    planned = recorded_as(user("plan", GOAL, *user.model, "--tools", TOOLS).stderr)
    model.text(NOTE)
    user("run", user.write_plan(AGENT_PLAN), "--tools", TOOLS, *user.model)
    ran = user.json("show", "--last")["run_id"]
    for _ in range(2):
        model.text("no plan here")
    failed = recorded_as(
        user("plan", GOAL, *user.model, "--tools", TOOLS, "--max-attempts", "2", code=3).stderr
    )
    listed = user("runs").stdout
    lines = {i: line for line in listed.splitlines() for i in (planned, ran, failed) if i in line}
    assert set(lines) == {planned, ran, failed}
    assert "not run" in lines[planned] and "planned" in lines[planned]
    assert (
        "not run" in lines[failed] and "no plan" in lines[failed] and "2 rejected" in lines[failed]
    )
    assert "not run" not in lines[ran] and "succeeded" in lines[ran]
    # newest first, runs and plans not run together
    assert listed.index(failed) < listed.index(ran) < listed.index(planned)
    doc = user.json("runs")
    assert [r["run_id"] for r in doc["runs"]] == [ran]
    unrun = {u["run_id"]: u for u in doc["plans_not_run"]}
    assert list(unrun) == [failed, planned]
    assert unrun[planned]["planned"] and unrun[planned]["calls"] == 1
    assert not unrun[failed]["planned"] and unrun[failed]["rejected"] == 2
    assert unrun[planned]["replan_of"] is None and unrun[planned]["input_tokens"] > 0
    # --limit counts both
    assert [r["run_id"] for r in user.json("runs", "-n", "1")["plans_not_run"]] == [failed]
    assert user.json("runs", "-n", "1")["runs"] == []


def _text(plan: dict[str, Any]) -> dict[str, Any]:
    from dagagent.llm import wire

    return wire.openai_text(json.dumps(plan))


def test_a_resumed_runs_agent_calls_follow_those_before(user: User, model: Model) -> None:
    model.text(NOTE)  # the first agent, before the pause
    model.text("Tokyo is warmer.")  # the second, after the decision
    plan = {
        "goal": "Two notes",
        "tasks": [
            {"id": "first", "instruction": "Say something about Paris"},
            {"id": "tokyo", "tool": "get_weather", "args": {"city": "Tokyo"}},
            {"id": "second", "instruction": "Compare ${first} with ${tokyo}"},
        ],
    }
    name = user.write_plan(plan)
    paused = user.json("run", name, "--tools", TOOLS, *user.model, "--ask", "get_weather", code=6)
    run_id = paused["run_id"]
    user("approve", run_id, "tokyo", "--allow")
    prices = user.dir / "prices.json"  # costs the calls the resume makes, as for ask
    prices.write_text(json.dumps({"openai:fake": {"input": 1.0, "output": 4.0}}))
    user("resume", run_id, *user.model, "--prices", str(prices))
    doc = user.json("show", run_id)
    assert [(c["seq"], c["task_id"]) for c in doc["calls"]] == [(1, "first"), (2, "second")]
    assert doc["calls"][1]["text"] == "Tokyo is warmer."
    before, after = doc["calls"]
    assert before["cost_usd"] is None  # the model is in no built-in table
    assert after["cost_usd"] == pytest.approx(
        (after["input_tokens"] * 1.0 + after["output_tokens"] * 4.0) / 1_000_000
    )


def test_resume_gives_agent_tasks_the_model_and_max_tools_the_run_was_started_with(
    user: User, model: Model, server: LLMTestServer
) -> None:
    """A run with an agent task pauses before the task: its resume, given no --model (and
    no $DAGAGENT_MODEL), asks the model the run was started with, on its server, showing the
    agent the tools --max-tools said."""
    model.text(NOTE)  # the agent task's answer, once the run resumes
    plan = user.write_plan(AGENT_PLAN)
    user("run", plan, "--tools", TOOLS, *user.model, "--ask", "get_weather", "--max-tools", "1",
         code=6)  # fmt: skip
    run = user.json("show", "--last")["run_id"]
    assert server.requests == []  # the agent task waits behind the call
    context = user.json("show", run)["context"]
    assert (context["model"], context["max_tools"]) == (model.spec[1], 1)
    assert "sk-test" not in json.dumps(context)  # never the key
    user("approve", run, "paris", "--allow")
    resumed = user.json("resume", run)
    assert resumed["tasks"]["note"]["output"] == NOTE
    (request,) = server.requests
    shown = [t["function"]["name"] for t in request.json.get("tools", [])]
    assert len(shown) == 2 and "find_tools" in shown  # one tool, and the search for the rest


def test_max_tools_given_to_a_resume_wins_and_the_next_resume_keeps_it(
    user: User, model: Model, server: LLMTestServer
) -> None:
    model.text(NOTE)
    plan = user.write_plan(
        {"goal": "A note", "tasks": [*AGENT_PLAN["tasks"], weather("tokyo", "Tokyo")]}
    )
    user("run", plan, "--tools", TOOLS, *user.model, "--ask", "get_weather", "--max-tools", "1",
         code=6)  # fmt: skip
    run = user.json("show", "--last")["run_id"]
    user("approve", run, "paris", "--allow")  # tokyo still waits
    resumed = user.json("resume", run, "--max-tools", "0", code=6)  # 0: every tool
    assert resumed["tasks"]["note"]["output"] == NOTE
    (request,) = server.requests
    assert len(request.json.get("tools", [])) > 2
    assert user.json("show", run)["context"]["max_tools"] == 0  # for the next resume too
