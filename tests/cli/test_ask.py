"""``dagagent ask`` end to end (in process through ``cli_shell.Shell``; a real process where a
signal is the point) against a loopback model server speaking the OpenAI or the Anthropic wire
format, with the counted tools of ``tests/journey_model.py``.

The server answers each request from a queue of bodies, as JSON or, when the client asks
for a stream, as the provider's server-sent events, so the same test holds whether the plan
is streamed or not."""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_shell import Shell, tool_starts
from eventually import wait_until
from llm_server import LLMTestServer, Recorded, Reply, SSEReply, record_command_line_sleeps

from dagagent.llm import wire
from dagagent.planners import PLAN_FORMAT_NAME
from dagagent.store import RunStore

TOOLS = f"{Path(__file__).resolve().parents[1] / 'journey_model.py'}:registry"
GOAL = "Which is warmer, Paris or Tokyo?"


class Model:
    """The loopback model: answers queued bodies in the wire format of ``flavor``."""

    def __init__(self, flavor: str, server: LLMTestServer) -> None:
        self.flavor = flavor
        self.answers: deque[dict[str, Any] | Reply] = deque()
        self.server = server
        server.responder = self.respond

    def respond(self, request: Recorded) -> Reply | SSEReply:
        if not self.answers:
            return Reply(500, json={"error": {"message": "no more answers scripted"}})
        body = self.answers.popleft()
        if isinstance(body, Reply):  # an answer as the server sends it: a 503, say
            return body
        if request.json.get("stream"):
            events = wire.openai_events if self.flavor == "openai" else wire.anthropic_events
            return SSEReply(events(body))
        return Reply(json=body)

    # what the model says, in its wire format
    def plan(self, *tasks: dict[str, Any]) -> None:
        plan = {"goal": GOAL, "tasks": list(tasks)}
        if self.flavor == "openai":
            self.answers.append(wire.openai_text(json.dumps(plan)))
        else:
            self.answers.append(wire.anthropic_tool_use([(PLAN_FORMAT_NAME, plan)]))

    def decide(self, decision: dict[str, Any]) -> None:
        if self.flavor == "openai":
            self.answers.append(wire.openai_text(json.dumps(decision)))
        else:
            self.answers.append(wire.anthropic_tool_use([("join_decision", decision)]))

    def text(self, text: str) -> None:
        body = wire.openai_text(text) if self.flavor == "openai" else wire.anthropic_text(text)
        self.answers.append(body)

    @property
    def spec(self) -> list[str]:
        base = self.server.url + ("/v1" if self.flavor == "openai" else "")
        return ["--model", f"{self.flavor}:fake", "--base-url", base]


class User(Shell):
    def __init__(self, tmp_path: Path, model: list[str]) -> None:
        self.log = tmp_path / "calls.log"
        super().__init__(
            tmp_path,
            JOURNEY_LOG=str(self.log),
            OPENAI_API_KEY="sk-test",
            ANTHROPIC_API_KEY="sk-ant-test",
        )
        self.model = model

    def ask(self, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        return self("ask", GOAL, *self.model, "--tools", TOOLS, *args, code=code)

    def calls(self) -> list[str]:
        return tool_starts(self.log)


@pytest.fixture(params=["openai", "anthropic"])
def model(request: pytest.FixtureRequest, server: LLMTestServer) -> Iterator[Model]:
    m = Model(request.param, server)
    yield m
    assert not m.answers, "scripted answers left unused"


@pytest.fixture
def user(tmp_path: Path, model: Model) -> User:
    return User(tmp_path, model.spec)


def weather(tid: str, city: str) -> dict[str, Any]:
    return {"id": tid, "tool": "get_weather", "args": {"city": city}}


def finish(answer: Any, cites: list[str]) -> dict[str, Any]:
    return {"action": "finish", "answer": answer, "cites": cites}


def test_answered_in_one_round(user: User, model: Model) -> None:
    model.plan(weather("paris", "Paris"), weather("tokyo", "Tokyo"))
    model.decide(finish("Tokyo is warmer: 24.5 C against 18 C.", ["paris", "tokyo"]))
    proc = user.ask()
    assert proc.stdout.strip().splitlines()[-1] == "Tokyo is warmer: 24.5 C against 18 C."
    assert "round 1: planning" in proc.stderr
    # the plan was streamed (server-sent events) and its tasks shown as they were parsed
    assert model.server.requests[0].json.get("stream") is True
    assert "planned paris" in proc.stderr and "planned tokyo" in proc.stderr
    assert "paris succeeded" in proc.stderr and "the joiner answered" in proc.stderr
    assert "answered in 1 round" in proc.stderr and "2 model calls" in proc.stderr
    assert user.calls() == ["get_weather Paris", "get_weather Tokyo"]
    # the answer is on record: show prints it in full, --json includes it
    shown = user("show", "--last", code=0)
    assert "answer (cites paris, tokyo):" in shown.stdout
    assert "Tokyo is warmer: 24.5 C against 18 C." in shown.stdout
    doc = json.loads(user("show", "--last", "--json", code=0).stdout)
    assert doc["solve"]["answer"] == "Tokyo is warmer: 24.5 C against 18 C."
    assert doc["solve"]["status"] == "answered"


def test_replan_reuses_what_succeeded(user: User, model: Model) -> None:
    model.plan(weather("paris", "Paris"), weather("tokyo", "Atlantis"))
    model.decide({"action": "replan", "feedback": "Atlantis is not Tokyo: look up Tokyo"})
    model.plan(weather("paris", "Paris"), weather("tokyo2", "Tokyo"))
    model.decide(finish({"warmer": "Tokyo"}, ["paris", "tokyo2"]))
    doc = json.loads(user.ask("--json").stdout)
    assert doc["status"] == "answered" and doc["answer"] == {"warmer": "Tokyo"}
    first, second = doc["rounds"]
    assert first["decision"]["action"] == "replan"
    assert second["parent_id"] == first["run_id"]
    assert second["result"]["tasks"]["paris"]["status"] == "reused"
    assert doc["usage"]["planner"]["calls"] == 2 and doc["usage"]["joiner"]["calls"] == 2
    # Paris was looked up once over both rounds
    assert user.calls() == ["get_weather Atlantis", "get_weather Paris", "get_weather Tokyo"]
    runs = json.loads(user("runs", "--json", code=0).stdout)["runs"]
    assert {r["run_id"] for r in runs} == {first["run_id"], second["run_id"]}


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "no-stream"])
def test_an_llmcompiler_answer_out_of_order_is_read_either_way(
    user: User, model: Model, stream: bool
) -> None:
    model.text(
        "Here is the plan:\n"
        "Thought: the report needs both cities.\n"
        '1. format_report("Paris and Tokyo", ["Paris: ${2.temp_c} C", "Tokyo: ${3.temp_c} C"])\n'
        '2. get_weather("Paris")\n'
        '3. get_weather("Tokyo")\n'
        "4. join()<END_OF_PLAN>"
    )
    model.decide(finish("done", ["1"]))
    proc = user.ask("--json", *([] if stream else ["--no-stream"]))
    doc = json.loads(proc.stdout)
    assert doc["status"] == "answered"
    assert doc["usage"]["planner"]["calls"] == 1  # read at once: not sent back
    (rnd,) = doc["rounds"]
    assert {k: t["status"] for k, t in rnd["result"]["tasks"].items()} == dict.fromkeys(
        ("1", "2", "3"), "succeeded"
    )
    # asked as a stream either way, so the plan shows as it is written
    assert model.server.requests[0].json.get("stream") is True
    assert sorted(user.calls()) == [
        "format_report Paris and Tokyo",
        "get_weather Paris",
        "get_weather Tokyo",
    ]


def test_gave_up_exits_1(user: User, model: Model) -> None:
    model.plan(weather("x", "Atlantis"))
    model.decide({"action": "replan", "feedback": "try again"})
    model.plan(weather("x", "Atlantis"))
    proc = user.ask(code=1)
    assert proc.stdout == ""
    assert "gave up: round 2: the revised plan is the same as round 1's" in proc.stderr


def test_no_valid_plan_exits_3(user: User, model: Model) -> None:
    for _ in range(2):
        model.text("I cannot make a plan.")
    proc = user.ask("--max-attempts", "2", "--no-stream", code=3)
    assert "no valid plan after 2 attempts" in proc.stderr
    assert "attempt 2:" in proc.stderr and "[not_json]" in proc.stderr
    assert user.calls() == []


def test_untrusted_answer_is_shown_as_text(user: User, model: Model) -> None:
    model.plan(weather("paris", "Paris"))
    model.decide(finish("[/INST] [bold]18 C[/bold] \x1b[2J\x1b[31mred\rover", ["paris"]))
    proc = user.ask()
    last = proc.stdout.strip().splitlines()[-1]
    assert last == "[/INST] [bold]18 C[/bold] \\x1b[2J\\x1b[31mred\\rover"
    assert "\x1b" not in proc.stdout


def test_model_unreachable_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    waits = record_command_line_sleeps(monkeypatch)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    user = User(tmp_path, ["--model", "openai:fake", "--base-url", f"http://127.0.0.1:{port}/v1"])
    proc = user.ask("--timeout", "5", code=2)
    assert "the model could not be used" in proc.stderr
    assert "gave up after 4 attempts" in proc.stderr
    assert len(waits.delays) == 3  # refused connections are retried, after a back-off each


def test_no_model_configured_exits_2(tmp_path: Path) -> None:
    proc = User(tmp_path, []).ask(code=2)
    assert "no model configured" in proc.stderr


def _wait_for(proc: subprocess.Popen[str], condition: Callable[[], object], what: str) -> None:
    try:
        wait_until(
            condition, what, unless=lambda: None if proc.poll() is None else "the process ended"
        )
    except AssertionError as exc:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"{exc}\n{out}\n{err}") from None


def _round_two_on_record(store: Path) -> bool:
    """Whether the store holds round 2's run, with the result it reused (a SIGKILL loses what
    the store had not written yet)."""
    if not store.exists():
        return False
    with RunStore(store, create=False) as st:
        runs = st.list_runs()
        second = [r.run_id for r in runs if r.parent_id is not None]
        return bool(second) and "paris" in st.get_run(second[0]).tasks


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_killed_mid_solve_keeps_what_ended(user: User, model: Model, sig: str) -> None:
    """Round 1 ends (the joiner asks for more); round 2 blocks in a slow tool and the process
    is stopped (SIGTERM: exit 130, recorded as cancelled) or killed (SIGKILL: shown as
    interrupted). The store keeps round 1 whole and names round 2's run."""
    flag = user.dir / "slow.flag"
    flag.write_text("x")
    user.env["JOURNEY_SLOW"] = str(flag)
    model.plan(weather("paris", "Paris"))
    model.decide({"action": "replan", "feedback": "also Tokyo, slowly"})
    model.plan(
        weather("paris", "Paris"), {"id": "wait", "tool": "slow", "args": {"name": "slow-1"}}
    )
    proc = subprocess.Popen(
        user.argv("ask", GOAL, *model.spec, "--tools", TOOLS),
        cwd=user.dir,
        env=user.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(proc, lambda: "slow slow-1" in user.calls(), "the slow tool started")
        if sig == "SIGKILL":
            store = user.dir / "home" / "runs.db"
            _wait_for(proc, lambda: _round_two_on_record(store), "round 2 on record")
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    flag.unlink()
    assert "Traceback" not in out + err
    runs = json.loads(user("runs", "--json", code=0).stdout)["runs"]
    first_id = next(r["run_id"] for r in runs if r["parent_id"] is None)
    second_id = next(r["run_id"] for r in runs if r["parent_id"] is not None)
    first = json.loads(user("show", first_id, "--json", code=0).stdout)
    solve = first["solve"]
    assert [(r["round"], r["run_id"]) for r in solve["rounds"]] == [
        (1, first_id),
        (2, second_id),
    ]
    assert solve["rounds"][0]["decision"] == {
        "action": "replan",
        "feedback": "also Tokyo, slowly",
    }
    second = json.loads(user("show", second_id, "--json", code=0).stdout)
    if sig == "SIGTERM":
        assert proc.returncode == 130 and "interrupted" in err
        # the message names the solve and the run it stopped, and how to see it
        assert f"interrupted: solve {solve['solve_id']} is recorded as cancelled in round 2" in err
        assert f"see its run: dagagent show {second_id}" in err
        assert solve["status"] == "cancelled"
        assert solve["rounds"][1]["outcome"] == "cancelled"
        assert second["status"] == "cancelled"
        assert second["tasks"]["wait"]["status"] == "cancelled"
    else:
        assert proc.returncode == -signal.SIGKILL
        assert solve["status"] == "interrupted"
        assert solve["rounds"][1]["outcome"] == "interrupted"
        assert second["status"] == "interrupted"
    assert second["tasks"]["paris"]["status"] == "reused"


def _round_two_ran(store: Path, task: str) -> bool:
    """Whether the store holds round 2's run with ``task`` succeeded (and written: a SIGKILL
    loses what the store had not written yet)."""
    if not store.exists():
        return False
    with RunStore(store, create=False) as st:
        second = [r.run_id for r in st.list_runs() if r.parent_id is not None]
        if not second:
            return False
        done = st.get_run(second[0]).tasks.get(task)
        return done is not None and done.status.value == "succeeded"


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_a_solve_killed_mid_round_resumes_from_the_command_line(user: User, model: Model) -> None:
    """``dagagent ask`` is killed (SIGKILL) in round 2, with one of its tasks done and one
    running; ``dagagent resume SOLVE`` (another process) finishes the round and the solve: no
    model call made again (the planner is not asked again, the joiner once), no success run
    again, the rounds kept with their numbers and runs."""
    flag = user.dir / "slow.flag"
    flag.write_text("x")
    user.env["JOURNEY_SLOW"] = str(flag)
    model.plan(weather("paris", "Paris"))
    model.decide({"action": "replan", "feedback": "also Tokyo"})
    model.plan(
        weather("paris", "Paris"),
        weather("tokyo", "Tokyo"),
        {"id": "wait", "tool": "slow", "args": {"name": "slow-1"}},
    )
    proc = subprocess.Popen(
        user.argv("ask", GOAL, *model.spec, "--tools", TOOLS),
        cwd=user.dir,
        env=user.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    store = user.dir / "home" / "runs.db"
    try:
        _wait_for(proc, lambda: "slow slow-1" in user.calls(), "the slow tool started")
        _wait_for(proc, lambda: _round_two_ran(store, "tokyo"), "round 2's tokyo on record")
        proc.kill()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -signal.SIGKILL, err
    flag.unlink()  # the slow tool, called again, now answers at once
    assert len(model.server.requests) == 3  # plan, decide, plan
    runs = json.loads(user("runs", "--json", code=0).stdout)["runs"]
    first_id = next(r["run_id"] for r in runs if r["parent_id"] is None)
    second_id = next(r["run_id"] for r in runs if r["parent_id"] is not None)
    solve = json.loads(user("show", first_id, "--json", code=0).stdout)["solve"]
    assert solve["status"] == "interrupted"
    solve_id = solve["solve_id"]

    model.decide(finish("Tokyo is warmer: 24.5 C against 18 C.", ["paris", "tokyo"]))
    resumed = user("resume", solve_id, code=0)  # its tools and model are on record
    assert resumed.stdout.strip().splitlines()[-1] == "Tokyo is warmer: 24.5 C against 18 C."
    assert f"resuming solve {solve_id}: round 2's run {second_id} goes on" in resumed.stderr
    assert "answered in 2 rounds" in resumed.stderr
    assert "Traceback" not in resumed.stdout + resumed.stderr
    assert len(model.server.requests) == 4  # only the joiner's decision was asked for
    # every tool call once, but the one the kill cut short (a pure tool: run again)
    assert sorted(user.calls()) == [
        "get_weather Paris",
        "get_weather Tokyo",
        "slow slow-1",
        "slow slow-1",
    ]
    solve = json.loads(user("show", first_id, "--json", code=0).stdout)["solve"]
    assert solve["status"] == "answered"
    assert solve["answer"] == "Tokyo is warmer: 24.5 C against 18 C."
    assert [(r["round"], r["run_id"]) for r in solve["rounds"]] == [
        (1, first_id),
        (2, second_id),
    ]
    assert solve["rounds"][1]["decision"]["action"] == "finish"
    second = json.loads(user("show", second_id, "--json", code=0).stdout)
    assert second["status"] == "succeeded"
    assert {t: v["status"] for t, v in second["tasks"].items()} == {
        "paris": "reused",
        "tokyo": "succeeded",
        "wait": "succeeded",
    }
    assert second["tasks"]["wait"]["output"] == "SLOW-1"


def test_a_policy_file_decides_every_call(user: User, model: Model) -> None:
    (user.dir / "policy.json").write_text(
        json.dumps(
            {
                "rules": [
                    {
                        "tool": "get_weather",
                        "args": {"city": "Tokyo"},
                        "action": "deny",
                        "reason": "no Tokyo today",
                    }
                ]
            }
        )
    )
    model.plan(weather("paris", "Paris"), weather("tokyo", "Tokyo"))
    model.decide(finish("Only Paris is known: 18 C.", ["paris"]))
    doc = json.loads(user.ask("--policy", "policy.json", "--json").stdout)
    tasks = doc["rounds"][0]["result"]["tasks"]
    assert tasks["tokyo"]["status"] == "denied" and "no Tokyo today" in tasks["tokyo"]["error"]
    assert doc["answer"] == "Only Paris is known: 18 C."
    assert user.calls() == ["get_weather Paris"]


def test_approve_without_a_terminal_exits_2_before_anything(tmp_path: Path) -> None:
    user = User(tmp_path, ["--model", "openai:fake", "--base-url", "http://127.0.0.1:9/v1"])
    proc = user.ask("--approve", code=2)
    assert "--approve needs a terminal" in proc.stderr
    assert user.calls() == []


def test_a_solve_the_store_could_not_write_is_never_reported_as_recorded(
    user: User, model: Model
) -> None:
    model.plan(weather("paris", "Paris"))
    model.decide(finish("18 C.", ["paris"]))
    user.ask()  # the store exists, with one solve
    store = user.dir / "home" / "runs.db"
    with sqlite3.connect(store) as conn:  # damage the solves table, and only it
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'solves'").fetchone()
    conn.close()
    with open(store, "r+b") as f:
        f.seek((root[0] - 1) * page)
        f.write(b"\xff" * page)
    model.plan(weather("paris", "Paris"))
    model.decide(finish("18 C.", ["paris"]))
    proc = user.ask(code=5)
    assert proc.stdout.strip().splitlines()[-1] == "18 C."  # the answer is still given
    assert "recorded in" not in proc.stderr
    assert "is incomplete: not written: start solve" in proc.stderr
    assert "malformed" in proc.stderr


def _ask_policy(user: User) -> str:
    (user.dir / "policy.json").write_text(
        json.dumps({"rules": [{"tool": "get_weather", "args": {"city": "Tokyo"}, "action": "ask"}]})
    )
    return "policy.json"


def test_a_paused_solve_is_approved_and_resumed_without_planning_again(
    user: User, model: Model
) -> None:
    """ask → paused (exit 6) → approve → resume → answer: each tool runs once, and the model
    is asked for the plan once and, after the resume, only by the joiner."""
    policy = _ask_policy(user)
    model.plan(
        weather("paris", "Paris"),
        weather("tokyo", "Tokyo"),
        {"id": "avg", "tool": "mean", "args": {"values": ["${paris.temp_c}", "${tokyo.temp_c}"]}},
    )
    paused = user.ask("--policy", policy, code=6)
    assert paused.stdout == ""
    assert "paused: 1 task waits for a person's decision (tokyo)" in paused.stderr
    assert user.calls() == ["get_weather Paris"]
    assert len(model.server.requests) == 1  # the planner; the joiner was not asked
    (waiting,) = json.loads(user("approvals", "--json", code=0).stdout)["approvals"]
    run_id = waiting["run_id"]
    assert (waiting["task_id"], waiting["args"]) == ("tokyo", {"city": "Tokyo"})
    assert f"dagagent resume {run_id}" in paused.stderr
    solve = json.loads(user("show", run_id, "--json", code=0).stdout)["solve"]
    assert solve["status"] == "paused" and solve["rounds"][0]["outcome"] == "paused"

    shown = user("show", run_id, code=0).stdout
    assert "paused: round 1: run" in shown and f"dagagent resume {run_id}" in shown
    user("approve", run_id, "tokyo", "--allow", "--by", "ann", code=0)
    assert user.calls() == ["get_weather Paris"]  # approving runs nothing
    # the joiner decides what follows the run: the resume asks the model and server the ask
    # was given (on record, without the key, which comes from the environment as always)
    context = json.loads(user("show", run_id, "--json", code=0).stdout)["context"]
    assert context["model"] == user.model[1] and context["base_url"] == user.model[3]
    assert "sk-" not in json.dumps(context)

    model.decide(finish("Tokyo is warmer; the mean is 21.25 C.", ["avg", "tokyo"]))
    resumed = user("resume", solve["solve_id"], code=0)  # the solve, named by its id
    assert resumed.stdout.strip().splitlines()[-1] == "Tokyo is warmer; the mean is 21.25 C."
    assert f"resuming solve {solve['solve_id']}: round 1's run {run_id} goes on" in resumed.stderr
    assert "the joiner answered" in resumed.stderr
    # every tool ran once over the whole solve; Paris was not looked up again
    assert user.calls() == ["get_weather Paris", "get_weather Tokyo", "mean"]
    assert len(model.server.requests) == 2  # the joiner only: the round was not planned again
    joiner = json.dumps(model.server.requests[1].json)
    assert "join_decision" in joiner
    solve = json.loads(user("show", run_id, "--json", code=0).stdout)["solve"]
    assert (
        solve["status"] == "answered" and solve["answer"] == "Tokyo is warmer; the mean is 21.25 C."
    )
    assert [r["outcome"] for r in solve["rounds"]] == ["answered"]
    assert solve["usage"]["planner"]["calls"] == 1 and solve["usage"]["joiner"]["calls"] == 1
    # the decision was used: nothing is left to resume
    again = user("resume", run_id, *user.model, code=7)
    assert "is answered, not paused" in again.stderr or "not paused" in again.stderr
    assert user.calls() == ["get_weather Paris", "get_weather Tokyo", "mean"]


def test_ask_no_wait_denies_without_a_terminal(user: User, model: Model) -> None:
    policy = _ask_policy(user)
    model.plan(weather("paris", "Paris"), weather("tokyo", "Tokyo"))
    model.decide(finish("Only Paris is known: 18 C.", ["paris"]))
    doc = json.loads(user.ask("--policy", policy, "--no-wait", "--json").stdout)
    tokyo = doc["rounds"][0]["result"]["tasks"]["tokyo"]
    assert tokyo["status"] == "denied" and "no terminal is attached" in tokyo["error"]
    assert doc["status"] == "answered" and user.calls() == ["get_weather Paris"]


@pytest.mark.parametrize("stream", [[], ["--no-stream"]])
def test_every_call_is_bounded(user: User, model: Model, stream: list[str]) -> None:
    model.plan(weather("paris", "Paris"))
    model.decide(finish("18 C", ["paris"]))
    user.ask(*stream)
    planned, joined = (r.json for r in model.server.requests)
    assert 1_000 < planned["max_tokens"] < 10_500  # from the tools: no fixed 10,500, never none
    assert 2_000 < joined["max_tokens"] < 4_000  # room for an answer of 8,000 characters


def test_max_tokens_prompt_and_examples_of_ones_own(
    user: User, model: Model, tmp_path: Path
) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("You plan weather look-ups.\n{tools}", encoding="utf-8")
    examples = tmp_path / "examples.json"
    example = {"goal": "How warm is Oslo?", "plan": [weather("oslo", "Oslo")]}
    examples.write_text(json.dumps([example]), encoding="utf-8")
    model.plan(weather("paris", "Paris"))
    model.decide(finish("18 C", ["paris"]))
    args = ["--max-tokens", "700", "--planner-prompt", str(prompt), "--examples", str(examples)]
    proc = user.ask(*args)
    assert proc.stdout.strip().splitlines()[-1] == "18 C"
    planned, joined = (r.json for r in model.server.requests)
    assert planned["max_tokens"] == joined["max_tokens"] == 700
    system = planned["system"] if model.flavor == "anthropic" else planned["messages"][0]["content"]
    assert system.startswith("You plan weather look-ups.\n- get_weather(")
    assert "How warm is Oslo?" in json.dumps(planned["messages"])


def test_a_bad_examples_file_exits_2_before_any_call(user: User, model: Model, tmp_path: Path):
    examples = tmp_path / "examples.json"
    examples.write_text('{"goal": "not a list"}', encoding="utf-8")
    proc = user.ask("--examples", str(examples), code=2)
    assert "must be a JSON array of examples" in proc.stderr
    assert model.server.requests == []


@pytest.mark.slow
def test_a_streamed_answer_trickling_forever_stops_at_the_stream_timeout(tmp_path: Path) -> None:
    """``--timeout`` bounds each wait for the next piece, which a server sending a space every
    0.2 s never exceeds; ``--stream-timeout`` bounds the whole streamed answer, and the message
    names it (not a Python setting the command line does not have)."""
    from llm_server import RawReply

    from dagagent.llm.wire import encode_sse

    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    events = wire.openai_events(wire.openai_text(" "))
    first = next(i for i, (_, data) in enumerate(events) if '" "' in json.dumps(data))
    prelude, space = encode_sse(events[:first]), encode_sse([events[first]])

    def trickle(request: Recorded) -> RawReply:
        def parts() -> Iterator[bytes | float]:
            yield head + prelude
            for _ in range(3000):  # ten minutes of spaces at most: then the server gives up
                yield space
                yield 0.2

        return RawReply(parts())  # type: ignore[arg-type]  # any iterable of parts does

    with LLMTestServer(trickle) as server:
        user = Shell(tmp_path)
        proc = user(
            "ask", GOAL, "--tools", TOOLS, "--model", "openai:fake",
            "--base-url", server.url + "/v1", "--timeout", "5", "--stream-timeout", "3",
            code=None,
        )  # fmt: skip
    # without the bound the stream would have lasted ten minutes, and the message named
    # settings the command line does not have
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "lasted longer than 3 s" in proc.stderr and "--stream-timeout" in proc.stderr
    assert "max_response_bytes" not in proc.stderr


def test_the_project_file_names_the_model_its_server_and_the_tools(
    user: User, model: Model
) -> None:
    (user.dir / ".dagagent").mkdir()
    spec, url = user.model[1], user.model[3]
    (user.dir / ".dagagent" / "config.toml").write_text(
        f'model = "{spec}"\nbase_url = "{url}"\ntools = "{TOOLS}"\ntimeout = 30\n'
    )
    model.plan(weather("paris", "Paris"))
    model.decide(finish("18 C in Paris.", ["paris"]))
    proc = user("ask", GOAL, code=0)  # no --model, --base-url nor --tools
    assert proc.stdout.strip().splitlines()[-1] == "18 C in Paris."
    assert user.calls() == ["get_weather Paris"] and "demo tools" not in proc.stderr


def test_a_model_request_tried_again_is_one_line_of_progress(user: User, model: Model) -> None:
    model.answers.append(Reply(503, json={"error": {"message": "overloaded, try later"}}))
    model.plan(weather("paris", "Paris"))
    model.decide(finish("18 C.", ["paris"]))
    proc = user.ask()
    assert proc.stdout.strip().splitlines()[-1] == "18 C."
    (line,) = [ln for ln in proc.stderr.splitlines() if "trying again" in ln]
    assert line.startswith("warning: the model did not answer (") and "(retry 1)" in line
    assert "overloaded" in line
    # no log record beside the progress: no time stamps, no fields
    assert "llm.retry" not in proc.stderr and "[warning" not in proc.stderr


def test_a_task_tried_again_is_one_line_of_progress(capsys: pytest.CaptureFixture[str]) -> None:
    from dagagent.cli.ask import AskProgress
    from dagagent.events import TaskRetrying

    AskProgress()(TaskRetrying("r", "paris", 1, "ConnectionError: \x1b[31mreset", 0.4))
    err = capsys.readouterr().err
    assert (
        err == "  paris failed (attempt 1): ConnectionError: \\x1b[31mreset; trying again in 0.4s\n"
    )


def test_a_rate_limited_first_model_falls_back_and_the_record_says_so(
    tmp_path: Path, model: Model
) -> None:
    limited = Reply(429, json=wire.openai_error("slow down"), headers={"retry-after": "0"})
    with LLMTestServer(lambda request: limited) as down:
        base = model.server.url + ("/v1" if model.flavor == "openai" else "")
        user = User(tmp_path, ["--model", f"openai:down,{model.flavor}:fake"])
        user.env["DAGAGENT_BASE_URL"] = down.url + "/v1"  # the first model's server
        user.env[f"{model.flavor.upper()}_BASE_URL"] = base  # the fallback's
        model.plan(weather("paris", "Paris"))
        model.decide(finish("18 C in Paris.", ["paris"]))
        proc = user.ask()
        assert proc.stdout.strip().splitlines()[-1] == "18 C in Paris."
        assert len(down.requests) == 2 * 4  # planner and joiner: each a try and 3 retries
    doc = json.loads(user("show", "--last", "--json", code=0).stdout)
    calls = doc["solve"]["calls"]
    assert [(c["role"], c["model"], c["provider"]) for c in calls] == [
        ("planner", "fake", model.flavor),
        ("joiner", "fake", model.flavor),
    ]
    for call in calls:
        (gave_up,) = call["options"]["fallback"]
        assert gave_up["model"] == "openai:down" and gave_up["reason"] == "rate_limit"


def test_a_resumed_solve_plans_with_the_planner_it_was_asked_with_or_one_given(
    user: User, model: Model, tmp_path: Path
) -> None:
    """``resume SOLVE`` plans with the ``--planner-prompt`` and ``--examples`` the solve was
    asked with (here its sub-solves, which plan with their parent's planner); given to a
    resume, they replace those, for it and for the resumes after it. The solve pauses on
    each Tokyo look-up: before its first sub-solve, then in each of the first two."""
    if model.flavor != "openai":
        pytest.skip("the planner's own prompt reaches both wire formats alike: once is enough")
    policy = _ask_policy(user)
    files = {}
    for n, city in ((1, "Oslo"), (2, "Lima")):
        prompt, examples = tmp_path / f"prompt{n}.txt", tmp_path / f"examples{n}.json"
        prompt.write_text(f"Planner {n} plans weather look-ups.\n{{tools}}", encoding="utf-8")
        example = {"goal": f"How warm is {city}?", "plan": [weather("w", city)]}
        examples.write_text(json.dumps([example]), encoding="utf-8")
        files[n] = ["--planner-prompt", str(prompt), "--examples", str(examples)]

    def sub_solve(n: int) -> dict[str, Any]:
        after = "tokyo" if n == 1 else f"best{n - 1}"
        return {"id": f"best{n}", "solve": True, "instruction": f"Tokyo, look {n}",
                "depends_on": [after]}  # fmt: skip

    def approve_and_resume(*given: str, code: int = 6) -> None:
        (waiting,) = json.loads(user("approvals", "--json", code=0).stdout)["approvals"]
        runs.append(waiting["run_id"])
        user("approve", waiting["run_id"], waiting["task_id"], "--allow", code=0)
        user("resume", solve_id, *given, code=code)

    def planned_with(n: int, request: int) -> None:
        body = model.server.requests[request].json
        assert body["messages"][0]["content"].startswith(f"Planner {n} plans weather"), n
        said = json.dumps(body["messages"])
        assert ("How warm is Oslo?" in said, "How warm is Lima?" in said) == (n == 1, n == 2)

    runs: list[str] = []
    model.plan(weather("tokyo", "Tokyo"), sub_solve(1), sub_solve(2), sub_solve(3))
    user.ask("--policy", policy, "--sub-solves", *files[1], code=6)
    solve_id = json.loads(user("show", "--last", "--json", code=0).stdout)["solve"]["solve_id"]
    model.plan(weather("tokyo_a", "Tokyo"))  # the first sub-solve's plan, which pauses
    approve_and_resume()  # the planner it was asked with, on record
    planned_with(1, -1)
    model.decide(finish("21 C", ["tokyo_a"]))  # the first sub-solve answers
    model.plan(weather("tokyo_b", "Tokyo"))  # the second's plan, which pauses
    approve_and_resume(*files[2])  # another planner, given
    planned_with(2, -1)
    refused = user("resume", solve_id, "--examples", str(tmp_path / "none.json"), code=2)
    assert "none.json" in refused.stderr  # a file that cannot be read: nothing runs
    model.decide(finish("21 C", ["tokyo_b"]))
    model.plan(weather("paris", "Paris"))  # the third's
    model.decide(finish("18 C", ["paris"]))
    model.decide(finish("Tokyo is warmer.", ["best1", "best2", "best3"]))
    approve_and_resume(code=0)  # the planner given to the resume before, on record since
    planned_with(2, -3)
    plain = user("resume", runs[0], *files[1], code=2)  # the solve's run, which plans nothing
    assert "--planner-prompt is for resuming a solve, which plans with it" in plain.stderr
