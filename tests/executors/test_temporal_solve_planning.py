"""Solves on Temporal that plan as the user chose: a planner of one's own (its prompt and
few-shot examples), a tool discovery of one's own, and turns of a session (the conversation so
far shown to the workers' models, earlier outputs reused, older turns summarised), on a real
development server with ``dagagent worker`` processes and a loopback model server the workers
call (see ``test_temporal_solve``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

import dagagent
from dagagent.errors import ConfigError
from dagagent.planners import LLMPlanner
from dagagent.settings import RunSettings
from dagagent.tools import ToolDiscovery

pytest.importorskip("temporalio")

import temporal_tools  # the workers import it too
from llm_server import LLMTestServer, Recorded, Reply, SSEReply

from dagagent.executors.temporal import TemporalExecutor, workflow_id
from dagagent.llm import OpenAIChat, wire
from dagagent.workflows.temporal_solve import solve_workflow_id

from .temporal_fixtures import ROOT, TOOLS, Workers
from .test_temporal_solve import (
    DRIVER_KEY,
    FAST_RETRY,
    FINISH,
    REPLAN,
    ROUND1,
    ROUND2,
    client_of,
    executor,
    history_of,
    model_server,
    replay,
)

__all__ = ["model_server"]

pytestmark = [pytest.mark.slow, pytest.mark.asyncio_only("Temporal's client runs on asyncio")]

PROMPT = "You plan for the arithmetic lab. Its tools:\n{tools}\nAnswer with one JSON plan."
EXAMPLES = [
    {
        "goal": "add 2 and 2",
        "plan": {"tasks": [{"id": "s", "tool": "add", "args": {"a": 2, "b": 2}}]},
    }
]


class Talk:
    """The model of a conversation: each request answered by its kind (``plan``, ``join``,
    ``compress``) from the answers given for that kind, in order; each request kept with its
    kind."""

    def __init__(self, **answers: list[Any]) -> None:
        self.answers = {k: list(v) for k, v in answers.items()}
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def __call__(self, request: Recorded) -> Reply | SSEReply:
        body = request.json
        name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
        first = str(body["messages"][0].get("content") or "")
        kind = (
            "plan"
            if "plan" in name
            else "join"
            if "join" in name
            else "compress"
            if first.startswith("You summarise")
            else "other"
        )
        with self.lock:
            self.seen.append((kind, body))
            answer = self.answers[kind].pop(0)
            n = len(self.seen)
        text = answer if isinstance(answer, str) else json.dumps(answer)
        reply = wire.openai_text(text, input_tokens=100 + n, output_tokens=20 + n)
        return SSEReply(wire.openai_events(reply)) if body.get("stream") else Reply(json=reply)

    def texts(self, kind: str) -> list[str]:
        """What each request of ``kind`` sent, its messages' texts joined."""
        return [
            "\n".join(str(m.get("content") or "") for m in body["messages"])
            for k, body in self.seen
            if k == kind
        ]


@pytest.mark.anyio
async def test_a_planner_of_one_s_own_and_its_tool_discovery_plan_on_the_workers(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """The workers plan with the planner's prompt, examples, discovery and model (another
    than the solve's): the planner's request is the one a local solve sends, word for word,
    and shows only the tools the discovery chose (recorded with each planning call); the
    replanner gets the planner's model, discovery and options, as locally."""
    talk = Talk(plan=[ROUND1, ROUND2], join=[REPLAN, FINISH])
    model_server.responder = talk
    store = tmp_path / "runs.db"
    goal = "double 1 + 2"
    ex = executor(workers)
    plans_with = OpenAIChat("gpt-plan", base_url=f"{model_server.url}/v1", api_key=DRIVER_KEY)
    async with client_of(model_server) as llm, plans_with:
        planner = LLMPlanner(
            plans_with,  # a model of its own: the workers build it too, with their key
            temporal_tools.registry,
            system_prompt=PROMPT,
            examples=EXAMPLES,
            max_attempts=2,
            discovery=ToolDiscovery(threshold=3, limit=2),
        )
        solution = await dagagent.solve(
            goal,
            temporal_tools.registry,
            llm,
            settings=RunSettings(executor=ex, retry=FAST_RETRY),
            store=store,
            planner=planner,
        )
        local = planner.messages(goal, await planner.select_tools(goal))
    assert solution.status.value == "answered", solution.reason
    [(_, first), (_, second)] = [(k, b) for k, b in talk.seen if k == "plan"]
    assert [m["content"] for m in first["messages"]] == [m.content for m in local]
    assert "You plan for the arithmetic lab." in first["messages"][0]["content"]
    assert "add 2 and 2" in first["messages"][1]["content"]  # the example's turn
    selection = solution.calls[0].options["tool_selection"]
    shown = {t["name"] for t in selection["shown"]}
    assert selection["threshold"] == 3 and selection["limit"] == 2
    # the tool the goal names, the example's, and the 2 best of the rest
    assert {"double", "add"} <= shown and len(shown) == 4 < selection["total"]
    # the response format holds the shown tools only
    schema = json.dumps(first["response_format"])
    assert all(f'"{name}"' not in schema for name in ("hold_paid", "tally_effect"))
    # the replanner: the planner's discovery (its own prompt is the built-in one's, as locally)
    assert [(c.role, c.model) for c in solution.calls] == [
        ("planner", "gpt-plan"),
        ("joiner", "gpt-test"),
        ("replanner", "gpt-plan"),
        ("joiner", "gpt-test"),
    ]
    assert [b["model"] for _, b in talk.seen] == ["gpt-plan", "gpt-test", "gpt-plan", "gpt-test"]
    assert solution.calls[2].options["tool_selection"]["threshold"] == 3
    assert "You plan for the arithmetic lab." not in second["messages"][0]["content"]
    shown_cmd = CliRunner().invoke(
        dagagent.cli.app, ["show", solution.solve_id, "--store", str(store)]
    )
    assert shown_cmd.exit_code == 0, shown_cmd.output
    assert "call 1 (planner) was shown" in shown_cmd.output
    with dagagent.RunStore(store) as runs:
        [recorded, *_] = runs.model_calls(solve_id=solution.solve_id)
        assert recorded.options["tool_selection"] == selection
    # a worker taking the solve over decides as the first did, with the planner in its input
    _, history = await history_of(ex, solve_workflow_id(solution.solve_id))
    await replay(ex, history)


class _OwnPlanner(LLMPlanner):
    """A planner with code of its own: it cannot travel to the workers."""


@pytest.mark.anyio
async def test_a_planner_or_discovery_that_cannot_travel_is_refused_saying_why(
    model_server: LLMTestServer,
) -> None:
    ex = TemporalExecutor("127.0.0.1:9")  # refused before the server is asked anything
    on_temporal = RunSettings(executor=ex)
    registry = temporal_tools.registry
    async with client_of(model_server) as llm:
        with pytest.raises(ConfigError, match="a planner of class _OwnPlanner"):
            await dagagent.solve(
                "g", registry, llm, settings=on_temporal, planner=_OwnPlanner(llm, registry)
            )
        other = dagagent.llm.ScriptedLLM(["{}"])
        with pytest.raises(ConfigError, match=r"this planner: .*not ScriptedLLM"):
            await dagagent.solve(
                "g", registry, llm, settings=on_temporal, planner=LLMPlanner(other, registry)
            )
        embedded = ToolDiscovery(embed=lambda texts: [[1.0] for _ in texts])
        with pytest.raises(ConfigError, match="an embed function for tool discovery"):
            await dagagent.solve(
                "g",
                registry,
                llm,
                settings=on_temporal,
                planner=LLMPlanner(llm, registry, discovery=embedded),
            )
    assert model_server.requests == []


def test_turns_of_a_session_on_temporal_reuse_earlier_outputs_and_compress(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """Three turns of one session on the workers: ``ask --session --executor temporal``, then
    ``chat --executor temporal`` (each with a planner prompt of one's own and --max-tools),
    then ``Session.ask``. The
    workers' models see the conversation so far; turn 2's ``${turn1.t}`` is reused, its tool
    never called again (the effect is counted outside the workers); turn 3 summarises turn 1
    first (one ``compress`` step, recorded with the turn) and plans with the summary; turn 4's
    compression gets no summary and the turn goes on with the conversation whole (and its
    second round's replanner and joiner see it too). Each turn
    is on record in the session as a local turn is."""
    tally = {"name": "n", "where": str(tmp_path)}
    summary = "The person counted once; the count was 1."
    talk = Talk(
        plan=[
            {"tasks": [{"id": "t", "tool": "tally_effect", "args": tally}]},
            {"tasks": [{"id": "d", "tool": "double", "args": {"x": "${turn1.t}"}}]},
            {"tasks": [{"id": "e", "tool": "add", "args": {"a": "${turn2.d}", "b": 1}}]},
            {"tasks": [{"id": "f", "tool": "echo", "args": {"value": "${turn3.e}"}}]},
            {
                "tasks": [
                    {"id": "f", "tool": "echo", "args": {"value": "${turn3.e}"}},
                    {"id": "g", "tool": "add", "args": {"a": "${turn3.e}", "b": 10}},
                ]
            },
        ],
        join=[
            {"action": "finish", "answer": "counted 1", "cites": ["t"]},
            {"action": "finish", "answer": "doubled: 2", "cites": ["d"]},
            {"action": "finish", "answer": "plus one: 3", "cites": ["e"]},
            {"action": "replan", "feedback": "add ten too"},
            {"action": "finish", "answer": "3 and 13", "cites": ["f", "g"]},
        ],
        compress=[summary, "  "],  # the second compression gets no summary
    )
    model_server.responder = talk
    store = tmp_path / "runs.db"
    prompt = tmp_path / "planner.txt"
    prompt.write_text("You plan for the counting lab.\n{tools}")
    temporal = [
        "--executor",
        "temporal",
        "--temporal-address",
        workers.address,
        "--task-queue",
        workers.queue,
        "--payload-store",
        str(workers.payloads),
    ]
    common = ["--session", "talk", "--tools", TOOLS, "--model", "openai:gpt-test"]
    common += ["--base-url", f"{model_server.url}/v1", "--store", str(store)]
    common += ["--planner-prompt", str(prompt), "--max-tools", "4", *temporal]
    env = {"OPENAI_API_KEY": DRIVER_KEY}
    result = CliRunner().invoke(dagagent.cli.app, ["ask", *common, "--json", "count once"], env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["answer"] == "counted 1"
    result = CliRunner().invoke(dagagent.cli.app, ["chat", *common], input="double that\n", env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "doubled: 2"
    effects = (tmp_path / "n.effects").read_text().splitlines()
    assert len(effects) == 1  # turn 2 reused turn 1's output: the tool ran once
    plans = talk.texts("plan")
    assert "You plan for the counting lab." in plans[0] and "the 4 of" in plans[0]
    assert "The conversation so far" not in plans[0]
    assert "The conversation so far" in plans[1] and "${turn1.t}: <output>1</output>" in plans[1]
    assert "Turn 1:" in talk.texts("join")[1]  # the joiner sees the conversation too
    with dagagent.RunStore(store) as runs:
        session = runs.get_session("talk")
        assert session is not None
        assert [(t.turn, t.status.value, t.answer) for t in session.turns] == [
            (1, "answered", "counted 1"),
            (2, "answered", "doubled: 2"),
        ]
        second = runs.get_solve(session.turns[1].solve_id)
        run = runs.get_run(second.run_id or "")
        assert {t: (r.status.value, r.output) for t, r in run.tasks.items()} == {
            "turn1": ("reused", {"t": 1}),
            "d": ("succeeded", 2),
        }
        # the discovery chose the tools each planning call saw, and the record says which
        [planned] = [c for c in runs.model_calls(solve_id=second.solve_id) if c.role == "planner"]
        assert planned.options["tool_selection"]["threshold"] == 4

    async def last_turns() -> tuple[dagagent.Solution, dagagent.Solution]:
        ex = executor(workers)
        async with (
            client_of(model_server) as llm,
            dagagent.Session(
                "talk",
                temporal_tools.registry,
                llm,
                store=store,
                max_tokens=1,
                keep=1,
                settings=RunSettings(executor=ex),
            ) as chat,
        ):
            solution = await chat.ask("add one to the double")
            assert [t.number for t in chat.turns] == [1, 2, 3]
            assert chat.turns[2].outputs == {"e": 3}
            # a compression without a summary: the turn goes on with the conversation whole
            fourth = await chat.ask("echo it")
            for solved in (solution, fourth):  # each compress step replays to its decisions
                _, history = await history_of(ex, solve_workflow_id(solved.solve_id))
                await replay(ex, history)
            return solution, fourth

    solution, fourth = anyio.run(last_turns)
    assert solution.status.value == "answered", solution.reason
    assert solution.answer == "plus one: 3"
    assert [c.role for c in solution.calls] == ["compress", "planner", "joiner"]
    assert solution.usage.compress.calls == 1
    assert len((tmp_path / "n.effects").read_text().splitlines()) == 1
    third = talk.texts("plan")[2]
    assert "Summary of turns 1-1:" in third and "The person counted once" in third
    assert "Turn 1:\n" not in third and "Turn 2:" in third  # turn 1 is in the summary now
    with dagagent.RunStore(store) as runs:
        session = runs.get_session("talk")
        assert session is not None
        last = session.turns[2]
        assert (last.status.value, last.summary, last.summarized) == ("answered", summary, 1)
        [compressed] = [
            c for c in runs.model_calls(solve_id=solution.solve_id) if c.role == "compress"
        ]
        assert compressed.text == summary
        assert (session.turns[3].status.value, session.turns[3].summary) == ("answered", None)
    assert fourth.answer == "3 and 13"
    roles = [c.role for c in fourth.calls]
    assert roles == ["compress", "planner", "joiner", "replanner", "joiner"]
    planned, replanned = talk.texts("plan")[3:]
    assert "Summary of turns 1-1:" in planned and "Turn 2:" in planned
    # the replanner and the joiner of a later round are shown the conversation too
    assert "Summary of turns 1-1:" in replanned and "${turn3.e}: <output>3</output>" in replanned
    assert "Summary of turns 1-1:" in talk.texts("join")[-1]
    assert len((tmp_path / "n.effects").read_text().splitlines()) == 1


class Reader(Talk):
    """A :class:`Talk` whose agent first calls ``earlier_turn(1)``, then answers with what the
    call returned; ``offered`` keeps the tools each agent request offered, ``read`` what the
    call returned (the tool message the agent's second request carries)."""

    def __init__(self, **answers: list[Any]) -> None:
        super().__init__(**answers)
        self.offered: list[list[str]] = []
        self.read: list[Any] = []

    def __call__(self, request: Recorded) -> Reply | SSEReply:
        body = request.json
        if body.get("response_format") is not None:  # a planner's or joiner's
            return super().__call__(request)
        with self.lock:
            self.offered.append(sorted(t["function"]["name"] for t in body.get("tools") or ()))
        said = [m for m in body["messages"] if m["role"] == "tool"]
        if not said:
            reply = wire.openai_tool_calls([("earlier_turn", {"turn": 1})])
        else:
            self.read.extend(m["content"] for m in said)
            reply = wire.openai_text(f"turn 1 counted: {said[-1]['content']}")
        return Reply(json=reply)


@pytest.mark.anyio
async def test_an_agent_task_of_a_turn_on_temporal_reads_an_earlier_turn(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """Turn 2 of a session on Temporal plans an agent task, which calls the session's
    ``earlier_turn`` tool on its worker, as a local turn's agent can (and a tool task of
    that tool): it gets turn 1's outputs from the conversation, and turn 1's tool is not
    run again."""
    tally = {"name": "n", "where": str(tmp_path)}
    talk = Reader(
        plan=[
            {"tasks": [{"id": "t", "tool": "tally_effect", "args": tally}]},
            {
                "tasks": [
                    {"id": "look", "instruction": "Say what turn 1 counted."},
                    {"id": "again", "tool": "earlier_turn", "args": {"turn": 1}},
                ]
            },
        ],
        join=[
            {"action": "finish", "answer": "counted 1", "cites": ["t"]},
            {"action": "finish", "answer": "it counted 1", "cites": ["look"]},
        ],
    )
    model_server.responder = talk
    ex = executor(workers)
    async with (
        client_of(model_server) as llm,
        dagagent.Session(
            "reads",
            temporal_tools.registry,
            llm,
            store=tmp_path / "runs.db",
            settings=RunSettings(executor=ex, retry=FAST_RETRY),
            agent_tasks=True,
        ) as chat,
    ):
        first = await chat.ask("count once")
        assert first.status.value == "answered", first.reason
        second = await chat.ask("what did it count?")
        assert second.status.value == "answered", second.reason
        [rnd] = second.rounds
        assert rnd.result is not None
        look = rnd.result.tasks["look"]
        assert (look.status.value, look.output) == ("succeeded", 'turn 1 counted: {"t": 1}')
        # a task of the plan may call the tool too, as in a local turn
        assert rnd.result.tasks["again"].output == {"t": 1}
        _, history = await history_of(ex, solve_workflow_id(second.solve_id))
        await replay(ex, history)
        # the conversation reaches both tasks as one payload of its own (the same for each:
        # stored once, by reference when large), after the call (which carries its task)
        _, ran = await history_of(ex, workflow_id(rnd.run_id or ""))
        inputs = [
            list(e.activity_task_scheduled_event_attributes.input.payloads)
            for e in ran.events
            if e.HasField("activity_task_scheduled_event_attributes")
        ]
        assert len(inputs) == 2 and all(len(i) == 2 for i in inputs)
        assert inputs[0][1].SerializeToString() == inputs[1][1].SerializeToString()
        await replay(ex, ran)
    assert [json.loads(r) for r in talk.read] == [{"t": 1}]
    assert "earlier_turn" in talk.offered[0]
    # turn 1's tool ran once: the agent read its output, nothing ran it again
    assert len((tmp_path / "n.effects").read_text().splitlines()) == 1


def test_a_turn_whose_driver_died_is_followed_on_the_workers_before_the_next(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """SIGKILL ``ask --session --executor temporal`` while its turn's run holds a tool: the
    next ``ask --session`` follows that turn to its end on the workers (as ``dagagent
    attach`` would) and records it, instead of running it again here; then asks its own
    question, which reuses the first turn's output."""
    talk = Talk(
        plan=[
            {
                "tasks": [
                    {"id": "wait", "tool": "hold", "args": {"name": "w", "where": str(tmp_path)}},
                    {"id": "then", "tool": "add", "args": {"a": 1, "b": 2}, "depends_on": ["wait"]},
                ]
            },
            {"tasks": [{"id": "d", "tool": "double", "args": {"x": "${turn1.then}"}}]},
        ],
        join=[
            {"action": "finish", "answer": "3", "cites": ["then"]},
            {"action": "finish", "answer": "6", "cites": ["d"]},
        ],
    )
    model_server.responder = talk
    store = tmp_path / "runs.db"
    common = ["--session", "talk", "--tools", TOOLS, "--model", "openai:gpt-test"]
    common += ["--base-url", f"{model_server.url}/v1", "--store", str(store)]
    common += ["--executor", "temporal", "--temporal-address", workers.address]
    common += ["--task-queue", workers.queue, "--payload-store", str(workers.payloads)]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DAGAGENT_", "OPENAI_"))},
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "OPENAI_API_KEY": DRIVER_KEY,
    }
    driver = subprocess.Popen(
        [sys.executable, "-m", "dagagent", "ask", *common, "add 1 and 2"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )
    try:
        while not temporal_tools.started(tmp_path, "w"):
            assert driver.poll() is None, "the driver ended before the run held its tool"
    finally:
        driver.kill()
        driver.wait()
    (tmp_path / "w.go").touch()
    result = CliRunner().invoke(
        dagagent.cli.app,
        ["ask", *common, "--json", "and doubled?"],
        env={"OPENAI_API_KEY": DRIVER_KEY},
    )
    assert result.exit_code == 0, result.output
    assert "resuming turn 1 of session talk (interrupted)" in result.stderr
    assert "turn 1 answered: 3" in result.stderr
    assert json.loads(result.stdout)["answer"] == "6"
    assert len(temporal_tools.started(tmp_path, "w")) == 1  # turn 1 ran once, on the workers
    assert (
        len(talk.texts("plan")) == 2
        and "${turn1.then}: <output>3</output>" in (talk.texts("plan")[1])
    )
    with dagagent.RunStore(store) as runs:
        session = runs.get_session("talk")
        assert session is not None
        assert [(t.turn, t.status.value, t.answer) for t in session.turns] == [
            (1, "answered", "3"),
            (2, "answered", "6"),
        ]


@pytest.mark.anyio
async def test_a_follower_without_the_turn_s_callback_records_its_summary_in_the_session(
    tmp_path: Path,
) -> None:
    """``dagagent attach`` (or a session's resume) follows a turn with no conversation at
    hand: the summary its compress step made is recorded with the turn the store has for the
    solve, so that the next turns read it rather than asking again."""
    from dagagent.workflows.temporal_solve._driver import _Follower

    with dagagent.RunStore(tmp_path / "runs.db") as store:
        store.start_turn("talk", "0123456789ab", "first?", after=0)
        store.start_turn("talk", "0123456789ac", "second?", after=1)
        follower = _Follower(
            "0123456789ac", TemporalExecutor("127.0.0.1:9"), RunSettings(), store, (), None
        )
        await follower._apply({"step": "compressed", "summary": "one question", "upto": 1})
        session = store.get_session("talk")
        assert session is not None
        assert [(t.summary, t.summarized) for t in session.turns] == [
            (None, 0),
            ("one question", 1),
        ]
        assert follower.not_recorded == []


@pytest.mark.anyio
async def test_a_turn_whose_temporal_server_cannot_be_reached_is_not_taken(
    model_server: LLMTestServer, tmp_path: Path
) -> None:
    """Nothing of the turn began: the session stays as it was, and the next question is
    asked as the next turn, not as the resume of one that never started."""
    from .temporal_fixtures import _free_port

    ex = TemporalExecutor(f"127.0.0.1:{_free_port()}")  # nothing listens there
    async with (
        client_of(model_server) as llm,
        dagagent.Session(
            "talk",
            temporal_tools.registry,
            llm,
            store=tmp_path / "runs.db",
            settings=RunSettings(executor=ex),
        ) as session,
    ):
        for _ in range(2):
            with pytest.raises(dagagent.ClusterError, match="cannot reach the Temporal server"):
                await session.ask("g")
            assert session.turns == [] and session.unfinished is None
    assert model_server.requests == []
