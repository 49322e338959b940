"""Solves on Temporal: the whole solve as a workflow on a real development server, its model
steps and tool calls on ``dagagent worker`` processes, its model a loopback server speaking
OpenAI's wire format (:class:`~llm_server.LLMTestServer`) that the *workers* call, with the
key of their own environment.

Nothing waits on a clock: a test waits for a state (a request reaching the model server, a
tool's start marker, the workflow's end).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

import dagagent
from dagagent.errors import ConfigError
from dagagent.llm import OpenAIChat, wire
from dagagent.settings import RunSettings, TaskRetryPolicy

pytest.importorskip("temporalio")

import temporal_tools  # the workers import it too
from llm_server import LLMTestServer, Recorded, Reply, SSEReply

from dagagent.executors.temporal import TemporalExecutor
from dagagent.workflows.temporal_solve import attach_solve, solve_workflow_id

from .temporal_fixtures import READY_S, ROOT, TOOLS, WORKER_KEY, Workers

pytestmark = [pytest.mark.slow, pytest.mark.asyncio_only("Temporal's client runs on asyncio")]

DRIVER_KEY = "sk-driver-only-secret"
FAST_RETRY = TaskRetryPolicy(base_delay_s=0.01, jitter=0)


class Model:
    """What the model answers: the plans in order (planner, then replanner), the joiner's
    decisions in order. ``hold``: the request number (1-based) that waits for ``release``
    before it is answered (a model call a test catches mid-way). ``usage``: the input tokens
    the answer to a request (by number) says it used (else 100 + its number)."""

    def __init__(
        self,
        plans: list[dict[str, Any]],
        decisions: list[dict[str, Any]],
        hold: int | None = None,
        agents: list[str] = (),  # type: ignore[assignment]
        usage: dict[int, int] | None = None,
    ) -> None:
        self.usage = usage or {}
        self.plans = list(plans)
        self.decisions = list(decisions)
        self.agents = list(agents)
        self.hold = hold
        self.held = threading.Event()
        self.release = threading.Event()
        self.count = 0
        self.lock = threading.Lock()

    def __call__(self, request: Recorded) -> Reply | SSEReply:
        body = request.json
        name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
        with self.lock:
            self.count += 1
            n = self.count
            answer: Any = (
                self.plans.pop(0)
                if "plan" in name
                else self.decisions.pop(0)
                if "join" in name
                else self.agents.pop(0)  # an agent task's turn
            )
        if n == self.hold:
            self.held.set()
            self.release.wait(READY_S)
        text = answer if isinstance(answer, str) else json.dumps(answer)
        used = self.usage.get(n, 100 + n)
        reply = wire.openai_text(text, input_tokens=used, output_tokens=20 + n)
        return SSEReply(wire.openai_events(reply)) if body.get("stream") else Reply(json=reply)


@pytest.fixture
def model_server() -> Iterator[LLMTestServer]:
    with LLMTestServer() as srv:
        yield srv


def executor(workers: Workers, **options: Any) -> TemporalExecutor:
    return TemporalExecutor(
        workers.address, task_queue=workers.queue, payloads=workers.payloads, **options
    )


def client_of(server: LLMTestServer) -> OpenAIChat:
    """The driver's model: the workers make its calls, with their own key."""
    return OpenAIChat("gpt-test", base_url=f"{server.url}/v1", api_key=DRIVER_KEY)


ROUND1 = {
    "goal": "g",
    "tasks": [
        {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
        {"id": "f", "tool": "boom", "args": {"x": 7}},
    ],
}
ROUND2 = {
    "goal": "g",
    "tasks": [
        {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
        {"id": "d", "tool": "double", "args": {"x": "${a}"}},
    ],
}
REPLAN = {"action": "replan", "feedback": "f failed: double a instead"}
FINISH = {"action": "finish", "answer": "a doubled is 6", "cites": ["d"]}


async def history_of(ex: TemporalExecutor, workflow: str) -> tuple[Any, Any]:
    """The server's description of ``workflow`` and its history."""
    assert ex.client is not None
    handle = ex.client.get_workflow_handle(workflow)
    described = await handle.describe()
    return described.raw_description.workflow_execution_info, await handle.fetch_history()


async def replay(ex: TemporalExecutor, history: Any) -> None:
    """Replay a solve's history as a worker taking it over would: Temporal raises if the
    workflow decides differently the second time."""
    from temporalio.worker import Replayer
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from dagagent.workflows.temporal_solve import SolveWorkflow

    assert ex.client is not None
    await Replayer(
        workflows=[SolveWorkflow],
        data_converter=ex.client.data_converter,
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("dagagent")
        ),
    ).replay_workflow(history)


@pytest.mark.anyio
async def test_a_solve_runs_on_the_workers_and_is_recorded_as_a_local_one(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """Two rounds (the joiner asks for another plan, then answers): the planner, replanner
    and joiner calls are made by the workers with their own key, each round's run is a
    child workflow, and the store has the solve, its rounds, its runs and every model call
    as a local solve records them."""
    model_server.responder = Model([ROUND1, ROUND2], [REPLAN, FINISH])
    ex = executor(workers)
    store = tmp_path / "runs.db"
    events: list[Any] = []
    async with client_of(model_server) as llm:
        solution = await dagagent.solve(
            "double 1 + 2",
            temporal_tools.registry,
            llm,
            settings=RunSettings(executor=ex, on_failure="continue", retry=FAST_RETRY),
            store=store,
            listeners=[events.append],
        )
    assert solution.status.value == "answered", solution.reason
    assert solution.answer == "a doubled is 6"
    assert [r.outcome for r in solution.rounds] == ["replan", "answered"]
    first, second = (r.result for r in solution.rounds)
    assert first is not None and second is not None
    assert first.tasks["f"].error == "ValueError: boom 7"
    assert second.tasks["d"].output == 6
    assert second.parent_id == first.run_id
    # the run ran on the workers before the driver saw it: it starts with its first task
    assert second.started_at <= min(r.started_at or 0 for r in second.tasks.values())
    assert [c.role for c in solution.calls] == ["planner", "joiner", "replanner", "joiner"]
    assert [c.seq for c in solution.calls] == [1, 2, 3, 4]
    assert solution.usage.total.input_tokens == 101 + 102 + 103 + 104
    # the workers made every model call, with the key of their environment
    assert {r.headers["authorization"] for r in model_server.requests} == {f"Bearer {WORKER_KEY}"}
    # the listeners heard the solve as they hear a local one
    kinds = [e.kind for e in events]
    assert kinds.count("round.started") == 2 and kinds.count("model_call.finished") == 4
    with dagagent.RunStore(store) as runs:
        record = runs.get_solve(solution.solve_id)
        assert record.status == "answered"
        assert [r.outcome for r in record.rounds] == ["replan", "answered"]
        calls = runs.model_calls(solve_id=solution.solve_id)
        assert [(c.role, c.round, c.input_tokens) for c in calls] == [
            ("planner", 1, 101),
            ("joiner", 1, 102),
            ("replanner", 2, 103),
            ("joiner", 2, 104),
        ]
        assert json.loads(calls[1].text) == REPLAN
        assert runs.get_run(second.run_id).tasks["d"].output == 6
        assert runs.get_run(second.run_id).parent_id == first.run_id
    shown = CliRunner().invoke(dagagent.cli.app, ["show", solution.solve_id, "--store", str(store)])
    assert shown.exit_code == 0, shown.output
    assert "a doubled is 6" in shown.output and "replanner" in shown.output
    # no key in the history; the history replays to the same decisions
    info, history = await history_of(ex, solve_workflow_id(solution.solve_id))
    assert DRIVER_KEY not in history.to_json()
    assert WORKER_KEY not in history.to_json()
    assert info.history_length < 60
    await replay(ex, history)


@pytest.mark.anyio
async def test_a_worker_killed_mid_model_call_the_step_runs_on_another(
    own_workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """SIGKILL the worker whose joiner call is under way: the join runs again on the other
    worker; the planning, which had finished, is not asked again."""
    own_workers.start(2)
    model = Model([ROUND2], [FINISH, FINISH], hold=2)  # request 2: the joiner's first call
    model_server.responder = model
    ex = executor(own_workers, heartbeat_s=1.0)
    solutions: list[dagagent.Solution] = []

    async def solve() -> None:
        async with client_of(model_server) as llm:
            solutions.append(
                await dagagent.solve(
                    "double 1 + 2",
                    temporal_tools.registry,
                    llm,
                    settings=RunSettings(executor=ex, retry=FAST_RETRY),
                    store=tmp_path / "runs.db",
                )
            )

    async with anyio.create_task_group() as tg:
        tg.start_soon(solve)
        await anyio.to_thread.run_sync(model.held.wait, READY_S)
        caller = _worker_of(own_workers, model_server.requests[-1])
        os.kill(caller.pid, signal.SIGKILL)
        caller.wait()
        model.release.set()
    [solution] = solutions
    assert solution.status.value == "answered", solution.reason
    assert solution.answer == FINISH["answer"]
    assert [c.role for c in solution.calls] == ["planner", "joiner"]  # the lost call: unrecorded
    assert model.count == 3  # planned once, joined twice (the second time on the other worker)
    assert len({r.client_port for r in model_server.requests}) >= 2


def _worker_of(workers: Workers, request: Recorded) -> subprocess.Popen[bytes]:
    """The worker process that made ``request`` (the owner of its client socket)."""
    port = request.client_port
    for proc in workers.procs:
        if proc.poll() is None and _has_port(proc.pid, port):
            return proc
    raise AssertionError(f"no live worker holds the connection from port {port}")


def _has_port(pid: int, port: int) -> bool:
    """Whether process ``pid`` has a TCP socket whose local port is ``port`` (Linux)."""
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, inode = fields[1], fields[9]
            if inode in inodes and int(local.rsplit(":", 1)[1], 16) == port:
                return True
    return False


def test_the_driver_killed_the_solve_finishes_and_attach_records_it(
    own_workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """SIGKILL ``dagagent ask --executor temporal`` while its round's run holds a tool: the
    solve finishes on the workers; ``dagagent attach`` follows it and records the rest (the
    run's last task, the joiner's call, the answer)."""
    own_workers.start(1)
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "wait", "tool": "hold", "args": {"name": "w", "where": str(tmp_path)}},
            {"id": "then", "tool": "add", "args": {"a": 1, "b": 2}, "depends_on": ["wait"]},
        ],
    }
    model_server.responder = Model([plan], [{"action": "finish", "answer": "3", "cites": ["then"]}])
    store = tmp_path / "runs.db"
    temporal = [
        "--executor",
        "temporal",
        "--temporal-address",
        own_workers.address,
        "--task-queue",
        own_workers.queue,
        "--payload-store",
        str(own_workers.payloads),
    ]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DAGAGENT_", "OPENAI_"))},
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "OPENAI_API_KEY": DRIVER_KEY,
    }
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dagagent",
            "ask",
            "add 1 and 2",
            "--tools",
            TOOLS,
            "--model",
            "openai:gpt-test",
            "--base-url",
            f"{model_server.url}/v1",
            "--store",
            str(store),
            *temporal,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )
    try:
        while not temporal_tools.started(tmp_path, "w"):
            assert driver.poll() is None, "the driver ended before the run held its tool"
        driver.kill()
    finally:
        driver.kill()
        driver.wait()
    (tmp_path / "w.go").touch()
    with dagagent.RunStore(store) as runs:
        [summary] = runs.list_solves()
        solve_id = summary.solve_id
        assert runs.get_solve(solve_id).status in ("running", "interrupted")
    result = CliRunner().invoke(
        dagagent.cli.app,
        ["attach", solve_id, "--store", str(store), "--json", *temporal[2:]],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["answer"] == "3"
    with dagagent.RunStore(store) as runs:
        record = runs.get_solve(solve_id)
        assert record.status == "answered"
        run = runs.get_run(record.run_id or "")
        assert {t: (r.status.value, r.output) for t, r in run.tasks.items()} == {
            "wait": ("succeeded", {"pid": own_workers.procs[0].pid}),
            "then": ("succeeded", 3),
        }
        assert [c.role for c in runs.model_calls(solve_id=solve_id)] == ["planner", "joiner"]


@pytest.mark.anyio
async def test_what_a_solve_on_temporal_cannot_take_is_refused_before_anything_runs(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    from dagagent.tools import ToolDiscovery

    ex = executor(workers)
    on_temporal = RunSettings(executor=ex)
    async with client_of(model_server) as llm:
        with pytest.raises(ConfigError, match=r"a budget of tool calls \(--max-tool-calls\)"):
            await dagagent.solve(
                "g",
                temporal_tools.registry,
                llm,
                settings=on_temporal,
                budget=dagagent.Budget(tokens=10_000, tool_calls=3),
            )
        with pytest.raises(ConfigError, match=r"nor a budget with agent tasks"):
            await dagagent.solve(
                "g",
                temporal_tools.registry,
                llm,
                settings=on_temporal,
                budget=dagagent.Budget(tokens=10_000),
                agent_tasks=True,
            )
        with pytest.raises(ConfigError, match="a cost budget needs the price of the model"):
            await dagagent.solve(
                "g",
                temporal_tools.registry,
                llm,
                settings=on_temporal,
                budget=dagagent.Budget(cost_usd=1),
            )
        with pytest.raises(ConfigError, match=r"sub-solves \(--sub-solves\)"):
            await dagagent.solve(
                "g", temporal_tools.registry, llm, settings=on_temporal, sub_solves=True
            )
        with pytest.raises(ConfigError, match=r"an embed function for tool discovery"):
            await dagagent.solve(
                "g",
                temporal_tools.registry,
                llm,
                settings=on_temporal,
                discovery=ToolDiscovery(embed=lambda texts: [[1.0] for _ in texts]),
            )
        async with dagagent.Session(
            "talk",
            temporal_tools.registry,
            llm,
            store=tmp_path / "runs.db",
            settings=on_temporal,
            sub_solves=True,
        ) as session:
            with pytest.raises(ConfigError, match=r"sub-solves \(--sub-solves\)"):
                await session.ask("g")
            assert session.turns == []  # the refused turn is not taken
    with pytest.raises(ConfigError, match="needs a model its workers can build"):
        await dagagent.solve(
            "g",
            temporal_tools.registry,
            dagagent.llm.ScriptedLLM(["x"]),
            settings=RunSettings(executor=ex),
        )
    assert model_server.requests == []


@pytest.mark.anyio
async def test_attaching_to_a_solve_the_server_does_not_have_is_a_cluster_error(
    workers: Workers,
) -> None:
    with pytest.raises(dagagent.ClusterError, match="no solve 0123456789ab"):
        await attach_solve("0123456789ab", executor=executor(workers))


@pytest.mark.anyio
async def test_a_model_the_workers_cannot_use_fails_the_solve_saying_so(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """The provider refuses the workers' key: the solve ends ``failed`` with the provider's
    reason, as a local one does, and the refused call is on record."""
    model_server.responder = lambda _request: Reply(
        401, json=wire.openai_error("bad key", type="invalid_api_key")
    )
    async with client_of(model_server) as llm:
        solution = await dagagent.solve(
            "g",
            temporal_tools.registry,
            llm,
            settings=RunSettings(executor=executor(workers)),
            store=tmp_path / "runs.db",
        )
    assert solution.status.value == "failed"
    assert solution.reason.startswith("round 1: the model could not be used:")
    assert "bad key" in solution.reason
    assert "the API key of their own environment: check OPENAI_API_KEY on worker" in (
        solution.reason
    )
    assert isinstance(solution.error, dagagent.errors.LLMError)
    assert [(c.role, c.status) for c in solution.calls] == [("planner", "failed")]
    with dagagent.RunStore(tmp_path / "runs.db") as runs:
        assert runs.get_solve(solution.solve_id).status == "failed"


def test_ask_on_an_unreachable_server_exits_10_and_options_need_the_executor(
    tmp_path: Path,
) -> None:
    from .temporal_fixtures import _free_port

    port = _free_port()  # nothing listens there
    ask = ["ask", "g", "--tools", TOOLS, "--model", "openai:m", "--base-url", "http://127.0.0.1:9"]
    result = CliRunner().invoke(
        dagagent.cli.app,
        [
            *ask,
            "--store",
            str(tmp_path / "runs.db"),
            "--executor",
            "temporal",
            "--temporal-address",
            f"127.0.0.1:{port}",
            "--payload-store",
            str(tmp_path / "p"),
        ],
        env={"OPENAI_API_KEY": "k"},
    )
    assert result.exit_code == 10, result.output
    assert f"cannot reach the Temporal server at 127.0.0.1:{port}" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(dagagent.cli.app, [*ask, "--task-queue", "q"])
    assert result.exit_code == 2
    assert "--task-queue needs --executor temporal" in result.output


@pytest.mark.anyio
async def test_agent_tasks_of_a_solve_run_on_the_workers_their_calls_recorded(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """A plan with an agent task: the agent's model calls are made on a worker (with its
    key), its answer is the task's output, and each call is on record with its task, run and
    round, numbered among the solve's calls."""
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
            {"id": "think", "instruction": "Say what ${a} is.", "depends_on": ["a"]},
        ],
    }
    finish = {"action": "finish", "answer": "a is three", "cites": ["think"]}
    model_server.responder = Model([plan], [finish], agents=["It is three."])
    store = tmp_path / "runs.db"
    async with client_of(model_server) as llm:
        solution = await dagagent.solve(
            "what is a?",
            temporal_tools.registry,
            llm,
            settings=RunSettings(executor=executor(workers), retry=FAST_RETRY),
            agent_tasks=True,
            store=store,
        )
    assert solution.status.value == "answered", solution.reason
    [rnd] = solution.rounds
    assert rnd.result is not None
    assert rnd.result.tasks["think"].output == "It is three."
    assert [(c.role, c.seq, c.task_id) for c in solution.calls] == [
        ("planner", 1, None),
        ("agent", 2, "think"),
        ("joiner", 3, None),
    ]
    assert solution.calls[1].run_id == rnd.run_id
    assert solution.usage.agents.calls == 1
    assert {r.headers["authorization"] for r in model_server.requests} == {f"Bearer {WORKER_KEY}"}
    with dagagent.RunStore(store) as runs:
        calls = runs.model_calls(solve_id=solution.solve_id)
        assert [(c.role, c.round, c.task_id) for c in calls] == [
            ("planner", 1, None),
            ("agent", 1, "think"),
            ("joiner", 1, None),
        ]
        assert runs.get_run(rnd.run_id or "").tasks["think"].output == "It is three."


def test_a_deadline_ends_a_solve_whose_model_never_answers_exit_8(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """``ask --executor temporal --deadline``: the planner's call is held past the deadline;
    the workflow's timer cancels the step on the worker and the solve ends ``timed_out``
    (exit 8), recorded as such, without waiting for the model."""
    model = Model([ROUND2], [FINISH], hold=1)
    model_server.responder = model
    store = tmp_path / "runs.db"
    try:
        result = CliRunner().invoke(
            dagagent.cli.app,
            [
                "ask",
                "double 1 + 2",
                "--tools",
                TOOLS,
                "--model",
                "openai:gpt-test",
                "--base-url",
                f"{model_server.url}/v1",
                "--store",
                str(store),
                "--deadline",
                "1.5",
                "--json",
                "--executor",
                "temporal",
                "--temporal-address",
                workers.address,
                "--task-queue",
                workers.queue,
                "--payload-store",
                str(workers.payloads),
            ],
            env={"OPENAI_API_KEY": DRIVER_KEY},
        )
        assert model.held.is_set() and not model.release.is_set()  # still unanswered
    finally:
        model.release.set()
    assert result.exit_code == 8, result.output
    assert "Traceback" not in result.output
    reason = json.loads(result.stdout)["reason"]
    # the CLI's --deadline counts from the command's start: what is left of it reaches here
    assert re.match(r"the deadline passed in round 1 \(1\.\d s into the solve\)", reason), reason
    assert "cancelled: the planner's step (round 1)" in reason
    assert model.count == 1  # the step was cancelled, not tried again
    with dagagent.RunStore(store) as runs:
        [summary] = runs.list_solves()
        record = runs.get_solve(summary.solve_id)
        assert record.status == "timed_out"
        assert [(r.outcome, r.reason) for r in record.rounds] == [("timed_out", reason)]


@pytest.mark.anyio
async def test_a_deadline_stops_a_round_s_run_keeping_what_finished(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """The deadline passes while the round's run holds a tool: the run workflow cancels it,
    does not start what depends on it, and ends with what finished, which the driver
    records; the joiner is never asked and the solve ends ``timed_out``."""
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
            {"id": "wait", "tool": "hold", "args": {"name": "dl", "where": str(tmp_path)}},
            {"id": "then", "tool": "add", "args": {"a": 1, "b": 2}, "depends_on": ["wait"]},
        ],
    }
    model_server.responder = Model([plan], [FINISH])
    store = tmp_path / "runs.db"
    ex = executor(workers)
    try:
        async with client_of(model_server) as llm:
            solution = await dagagent.solve(
                "add",
                temporal_tools.registry,
                llm,
                settings=RunSettings(executor=ex, retry=FAST_RETRY),
                store=store,
                deadline_s=2.5,
            )
        assert temporal_tools.started(tmp_path, "dl")  # the tool was under way
    finally:
        (tmp_path / "dl.go").touch()  # the worker's thread ends its call
    assert solution.status.value == "timed_out", solution.reason
    assert "cancelled: task wait of run" in solution.reason
    assert solution.reason.endswith("kept what finished (1 task with an output)")
    [rnd] = solution.rounds
    assert rnd.outcome == "timed_out" and rnd.result is not None
    assert {t: r.status.value for t, r in rnd.result.tasks.items()} == {
        "a": "succeeded",
        "wait": "cancelled",
        "then": "cancelled",
    }
    assert [c.role for c in solution.calls] == ["planner"]
    with dagagent.RunStore(store) as runs:
        assert runs.get_solve(solution.solve_id).status == "timed_out"
        run = runs.get_run(rnd.run_id or "")
        assert run.tasks["a"].output == 3
        assert run.tasks["wait"].status.value == "cancelled"
    _, history = await history_of(ex, solve_workflow_id(solution.solve_id))
    await replay(ex, history)  # the deadline is workflow time: a replay decides the same


def test_a_budget_stops_a_solve_on_temporal_before_it_spends_past_it_exit_9(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """``ask --executor temporal --max-tokens-total 15000``: the planner's call fits, and the
    model says it used 14,000 input tokens. The joiner's step gets the budget with what the
    planner's step spent; its worker reserves the call as a local solve does and refuses it
    unsent, then the joiner's last answer within the reserve too: the solve ends
    ``budget_exhausted`` (exit 9), having spent no more than the budget."""
    model = Model([ROUND2], [FINISH, FINISH], usage={1: 14_000})
    model_server.responder = model
    store = tmp_path / "runs.db"
    result = CliRunner().invoke(
        dagagent.cli.app,
        [
            "ask",
            "double 1 + 2",
            "--tools",
            TOOLS,
            "--model",
            "openai:gpt-test",
            "--base-url",
            f"{model_server.url}/v1",
            "--store",
            str(store),
            "--max-tokens-total",
            "15000",
            "--json",
            "--executor",
            "temporal",
            "--temporal-address",
            workers.address,
            "--task-queue",
            workers.queue,
            "--payload-store",
            str(workers.payloads),
        ],
        env={"OPENAI_API_KEY": DRIVER_KEY},
    )
    assert result.exit_code == 9, result.output
    assert "Traceback" not in result.output
    reason = json.loads(result.stdout)["reason"]
    assert reason.startswith("round 1: the budget ran out (14,021 of 15,000 tokens): "), reason
    assert "the joiner's call was refused" in reason
    assert "the joiner's last answer within the reserve failed" in reason
    assert model.count == 1  # only the planner's call was sent
    with dagagent.RunStore(store) as runs:
        [summary] = runs.list_solves()
        record = runs.get_solve(summary.solve_id)
        assert record.status == "budget_exhausted"
        assert [(r.outcome, r.reason) for r in record.rounds] == [("budget_exhausted", reason)]
        calls = runs.model_calls(solve_id=summary.solve_id)
        assert [(c.role, c.status) for c in calls] == [
            ("planner", "answered"),
            ("joiner", "refused"),
            ("joiner", "refused"),
        ]
        assert sum(c.input_tokens + c.output_tokens for c in calls) <= 15_000
        # the round's run ran and is kept
        assert runs.get_run(record.rounds[0].run_id or "").tasks["d"].output == 6


@pytest.mark.anyio
async def test_a_cost_budget_on_temporal_leaves_the_joiner_its_reserve(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """A cost budget of $0.02 at the driver's prices ($1 per million tokens): the planner's
    call costs $0.014 by the model's usage, the joiner's ordinary call would cross what is
    outside the reserve and is refused unsent, and the joiner's last answer, within the
    reserve, answers, as in a local solve. The prices reach the workers through the
    workflow's input, so a replay prices the same."""
    model = Model([ROUND2], [FINISH], usage={1: 14_000})
    model_server.responder = model
    ex = executor(workers)
    async with client_of(model_server) as llm:
        solution = await dagagent.solve(
            "double 1 + 2",
            temporal_tools.registry,
            llm,
            settings=RunSettings(executor=ex, retry=FAST_RETRY),
            store=tmp_path / "runs.db",
            budget=dagagent.Budget(cost_usd=0.02),
            prices=dagagent.Prices({"gpt-test": {"input": 1.0, "output": 1.0}}),
        )
    assert solution.status.value == "answered", solution.reason
    assert solution.answer == FINISH["answer"]
    assert solution.reason.startswith(
        "answered in round 1 (from what it had when the budget ran low: the joiner's call "
        "was refused: its worst case, $0.00"
    ), solution.reason
    assert [(c.role, c.status) for c in solution.calls] == [
        ("planner", "answered"),
        ("joiner", "refused"),
        ("joiner", "answered"),
    ]
    assert model.count == 2  # the refused call was never sent
    assert sum(c.cost_usd or 0 for c in solution.calls) <= 0.02
    assert solution.calls[0].cost_usd == pytest.approx(0.014021)
    _, history = await history_of(ex, solve_workflow_id(solution.solve_id))
    await replay(ex, history)
