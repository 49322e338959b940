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
import uuid
from collections.abc import Iterator
from functools import partial
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
from eventually import until
from llm_server import LLMTestServer, Recorded, Reply, SSEReply

from dagagent.executors.temporal import TemporalExecutor, workflow_id
from dagagent.workflows.temporal_solve import attach_solve, solve_workflow_id

from .temporal_fixtures import EXTRA, READY_S, ROOT, TOOLS, WORKER_KEY, Workers

pytestmark = [pytest.mark.slow, pytest.mark.asyncio_only("Temporal's client runs on asyncio")]

DRIVER_KEY = "sk-driver-only-secret"
FAST_RETRY = TaskRetryPolicy(base_delay_s=0.01, jitter=0)
#: The heartbeat timeout of the tests that SIGKILL a worker under a step (how soon it is taken
#: for lost). A live worker on a loaded machine missed 1 and 2 s: its model step was then
#: taken for lost and made its call again on the other worker, which the scripted model had
#: no answer for (the step failed, and the test waited for a call that never came).
HEARTBEAT_S = 4.0


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
        self.held_request: Recorded | None = None
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
            self.held_request = request
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

    from dagagent.executors.temporal import RunWorkflow
    from dagagent.workflows.temporal_solve import SolveWorkflow

    assert ex.client is not None
    await Replayer(
        workflows=[SolveWorkflow, RunWorkflow],
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
    worker; the planning, which had finished, is not asked again. The lost call is on
    record (cut off, naming the killed worker) and spends the budget as a call cut off does:
    with it, the budget of three model calls has only the joiner's reserve left, so the
    join runs again as the joiner's last answer."""
    own_workers.start(2)
    model = Model([ROUND2], [FINISH, FINISH], hold=2)  # request 2: the joiner's first call
    model_server.responder = model
    ex = executor(own_workers, heartbeat_s=HEARTBEAT_S)
    solutions: list[dagagent.Solution] = []
    solve_id = uuid.uuid4().hex[:12]
    store = tmp_path / "runs.db"

    async def solve() -> None:
        try:
            async with client_of(model_server) as llm:
                solutions.append(
                    await dagagent.solve(
                        "double 1 + 2",
                        temporal_tools.registry,
                        llm,
                        settings=RunSettings(executor=ex, retry=FAST_RETRY),
                        store=store,
                        solve_id=solve_id,
                        budget=dagagent.Budget(model_calls=3),
                    )
                )
        finally:
            model.held.set()  # wakes _held: the solve ended

    async with anyio.create_task_group() as tg:
        tg.start_soon(solve)
        await _held(model, solutions)
        try:
            await _call_reported(ex, solve_workflow_id(solve_id))
            assert model.held_request is not None
            caller = _worker_of(own_workers, model.held_request)
            os.kill(caller.pid, signal.SIGKILL)
            caller.wait()
        finally:
            model.release.set()
    [solution] = solutions
    assert solution.status.value == "answered", solution.reason
    assert solution.answer == FINISH["answer"]
    assert [(c.role, c.status) for c in solution.calls] == [
        ("planner", "answered"),
        ("joiner", "cut"),
        ("joiner", "refused"),  # counted: the reserve is the joiner's last answer's
        ("joiner", "answered"),
    ]
    lost = solution.calls[1]
    assert lost.round == 1 and lost.estimated and lost.input_tokens > 0
    assert f"its worker {caller.pid}@" in (lost.error or "")
    assert "was lost while the call was under way" in (lost.error or "")
    assert solution.usage.joiner.calls == 2  # the refused call sent nothing
    assert "when the budget ran low" in solution.reason
    assert model.count == 3  # planned once, joined twice (the second time on the other worker)
    assert len({r.client_port for r in model_server.requests}) >= 2
    shown = CliRunner().invoke(
        dagagent.cli.app, ["show", solve_id, "--store", str(store), "--json"]
    )
    assert shown.exit_code == 0, shown.output
    assert lost.call_id in shown.output and "was lost while the call was under way" in shown.output
    async with ex.session():
        _, history = await history_of(ex, solve_workflow_id(solve_id))
        await replay(ex, history)


@pytest.mark.anyio
async def test_a_model_step_lost_with_its_last_worker_the_workflow_records_the_call(
    own_workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """No retry left for a lost worker (``lost_worker_retries=0``): SIGKILL the worker under
    the joiner's call; the solve fails saying no worker could join, and the workflow itself
    records the lost call from the step's last heartbeat."""
    own_workers.start(2)
    model = Model([ROUND2], [FINISH], hold=2)
    model_server.responder = model
    ex = executor(own_workers, heartbeat_s=HEARTBEAT_S, lost_worker_retries=0)
    solutions: list[dagagent.Solution] = []
    solve_id = uuid.uuid4().hex[:12]

    async def solve() -> None:
        try:
            async with client_of(model_server) as llm:
                solutions.append(
                    await dagagent.solve(
                        "double 1 + 2",
                        temporal_tools.registry,
                        llm,
                        settings=RunSettings(executor=ex, retry=FAST_RETRY),
                        store=tmp_path / "runs.db",
                        solve_id=solve_id,
                    )
                )
        finally:
            model.held.set()  # wakes _held: the solve ended

    async with anyio.create_task_group() as tg:
        tg.start_soon(solve)
        await _held(model, solutions)
        try:
            await _call_reported(ex, solve_workflow_id(solve_id))
            assert model.held_request is not None
            caller = _worker_of(own_workers, model.held_request)
            os.kill(caller.pid, signal.SIGKILL)
            caller.wait()
        finally:
            model.release.set()
    [solution] = solutions
    assert solution.status.value == "failed"
    assert solution.reason.startswith("round 1: no worker could join"), solution.reason
    assert [(c.role, c.status) for c in solution.calls] == [
        ("planner", "answered"),
        ("joiner", "cut"),
    ]
    assert f"its worker {caller.pid}@" in (solution.calls[1].error or "")
    assert model.count == 2
    with dagagent.RunStore(tmp_path / "runs.db") as runs:
        assert [c.status for c in runs.model_calls(solve_id=solve_id)] == ["answered", "cut"]
    async with ex.session():
        _, history = await history_of(ex, solve_workflow_id(solve_id))
        await replay(ex, history)


async def _call_reported(ex: TemporalExecutor, workflow: str, at: int = 0) -> None:
    """Until an activity pending in ``workflow`` has heartbeated a model call under way (in
    its details' item ``at``: what is recorded of it if its worker is lost)."""
    client = ex.client
    assert client is not None
    handle = client.get_workflow_handle(workflow)

    async def reported() -> bool:
        described = await handle.describe()
        for pending in described.raw_description.pending_activities:
            details = list(pending.heartbeat_details.payloads)
            if len(details) > at:
                said = (await client.data_converter.decode(details))[at]
                if said.get("model_calls") if isinstance(said, dict) else said:
                    return True
        return False

    await until(reported, f"a model call under way heartbeated in {workflow}", timeout=READY_S)


async def _held(model: Model, solutions: list[dagagent.Solution]) -> Recorded:
    """The request ``model`` holds, once it holds it. The solve's task wakes this wait as it
    ends (``model.held``): a solve that ended before the held call was made (a call before
    it failed, say) fails the test at once, saying how, instead of holding it until the
    suite's timeout ends its process."""
    await anyio.to_thread.run_sync(model.held.wait, READY_S)
    if model.held_request is None:
        how = f"{solutions[0].status.value}: {solutions[0].reason}" if solutions else "no solution"
        raise AssertionError(f"no model call held (request {model.hold}); the solve: {how}")
    return model.held_request


@pytest.mark.anyio
async def test_a_worker_killed_mid_agent_call_the_lost_call_is_recorded(
    own_workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """SIGKILL the worker whose agent task's model call is under way: the task runs again on
    the other worker, and the lost call is on record with its task, cut off, naming the
    killed worker."""
    own_workers.start(2)
    plan = {"goal": "g", "tasks": [{"id": "think", "instruction": "Say what 1 + 2 is."}]}
    finish = {"action": "finish", "answer": "three", "cites": ["think"]}
    model = Model([plan], [finish], hold=2, agents=["It is three.", "It is three."])
    model_server.responder = model
    ex = executor(own_workers, heartbeat_s=HEARTBEAT_S)
    solutions: list[dagagent.Solution] = []
    solve_id = uuid.uuid4().hex[:12]

    async def solve() -> None:
        try:
            async with client_of(model_server) as llm:
                solutions.append(
                    await dagagent.solve(
                        "what is 1 + 2?",
                        temporal_tools.registry,
                        llm,
                        settings=RunSettings(executor=ex, retry=FAST_RETRY),
                        agent_tasks=True,
                        solve_id=solve_id,
                        store=tmp_path / "runs.db",
                    )
                )
        finally:
            model.held.set()  # wakes _held: the solve ended

    async with anyio.create_task_group() as tg:
        tg.start_soon(solve)
        await _held(model, solutions)
        try:
            assert ex.client is not None
            handle = ex.client.get_workflow_handle(solve_workflow_id(solve_id))
            steps = await handle.query("steps", 0)
            [run_id] = [s["run_id"] for s in steps["steps"] if s["step"] == "round"]
            await _call_reported(ex, workflow_id(run_id), at=1)
            assert model.held_request is not None
            caller = _worker_of(own_workers, model.held_request)
            os.kill(caller.pid, signal.SIGKILL)
            caller.wait()
        finally:
            model.release.set()
    [solution] = solutions
    assert solution.status.value == "answered", solution.reason
    assert [(c.role, c.status, c.task_id) for c in solution.calls] == [
        ("planner", "answered", None),
        ("agent", "cut", "think"),
        ("agent", "answered", "think"),
        ("joiner", "answered", None),
    ]
    lost = solution.calls[1]
    assert lost.run_id == run_id and lost.round == 1 and lost.estimated
    assert f"its worker {caller.pid}@" in (lost.error or "")
    assert solution.usage.agents.calls == 2
    with dagagent.RunStore(tmp_path / "runs.db") as runs:
        recorded = runs.model_calls(solve_id=solve_id)
        assert [(c.role, c.status) for c in recorded][1] == ("agent", "cut")


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
        with pytest.raises(ConfigError, match="a cost budget needs the price of the model"):
            await dagagent.solve(
                "g",
                temporal_tools.registry,
                llm,
                settings=on_temporal,
                budget=dagagent.Budget(cost_usd=1),
            )
        with pytest.raises(ConfigError, match=r"an embed function for tool discovery"):
            await dagagent.solve(
                "g",
                temporal_tools.registry,
                llm,
                settings=on_temporal,
                discovery=ToolDiscovery(embed=lambda texts: [[1.0] for _ in texts]),
            )
        # approval rules travel as data; an object of this process cannot
        with pytest.raises(ConfigError, match=r"interceptors of this process .*policy=PATH"):
            await dagagent.solve(
                "g",
                temporal_tools.registry,
                llm,
                settings=on_temporal,
                policy=dagagent.Policy([dagagent.Rule(tool="echo", action="ask")]),
            )
        with pytest.raises(ConfigError, match="dagagent worker --interceptors"):
            await dagagent.solve(
                "g",
                temporal_tools.registry,
                llm,
                settings=on_temporal,
                interceptors=[dagagent.Policy([])],
            )
        wrong = tmp_path / "wrong.json"
        wrong.write_text(json.dumps({"rules": [], "limits": [{"tool": "add"}]}))
        with pytest.raises(ConfigError, match="a limit needs max_calls, cooldown_s or both"):
            await dagagent.solve(
                "g", temporal_tools.registry, llm, settings=on_temporal, policy=wrong
            )
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
                "2.5",
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
    # the CLI's --deadline counts from the command's start: what is left of it when the
    # solve started reaches here (under load, the command's start can take a good part)
    passed = re.match(r"the deadline passed in round 1 \((\d+\.\d) s into the solve\)", reason)
    assert passed is not None, reason
    assert 0 < float(passed.group(1)) <= 2.5
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


HELD = {
    "goal": "g",
    "tasks": [
        {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
        {"id": "asked", "tool": "echo", "args": {"value": "hi"}},
        {"id": "then", "tool": "add", "args": {"a": "${a}", "b": 1}, "depends_on": ["asked"]},
        {"id": "no", "tool": "big", "args": {"i": "${then}", "n": 2}},
    ],
}


def _where(workers: Workers) -> list[str]:
    return [
        "--executor", "temporal", "--temporal-address", workers.address,
        "--task-queue", workers.queue, "--payload-store", str(workers.payloads),
    ]  # fmt: skip


def test_ask_and_policy_on_a_solve_pause_it_then_approve_and_resume_go_on(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """``ask --executor temporal --ask echo --policy FILE``: the rules travel with the
    round's run to the workers; the call ``--ask`` holds pauses the solve (exit 6, the joiner
    not asked). ``approve`` records the decision; ``resume`` hands it to the waiting
    workflow, the run goes on in place (what succeeded stands, the rules still apply: the
    file denies a call), and the joiner answers, seeing the denial as a local solve's joiner
    does."""
    from dagagent.store import RunStore

    model = Model([HELD], [{"action": "finish", "answer": "hi, 4", "cites": ["asked", "then"]}])
    model_server.responder = model
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps(
            {"default": "allow", "rules": [{"tool": "big", "action": "deny", "reason": "no"}]}
        )
    )
    db = str(tmp_path / "runs.db")
    cli = CliRunner()
    env = {"OPENAI_API_KEY": DRIVER_KEY}
    paused = cli.invoke(
        dagagent.cli.app,
        ["ask", "echo hi", "--tools", TOOLS, "--model", "openai:gpt-test",
         "--base-url", f"{model_server.url}/v1", "--store", db, "--ask", "echo",
         "--policy", str(rules), *_where(workers)],
        env=env,
    )  # fmt: skip
    assert paused.exit_code == 6, paused.output
    assert "Traceback" not in paused.output
    assert "paused: 1 task waits for a person's decision (asked)" in paused.output
    assert model.count == 1  # planned; the joiner is not asked about a paused round
    with RunStore(db, create=False) as st:
        [summary] = st.list_solves()
        solve = st.get_solve(summary.solve_id)
        assert solve.status == "paused"
        [rnd] = solve.rounds
        assert rnd.outcome == "paused" and rnd.run_id is not None
        run_id = rnd.run_id
        [waiting] = st.approvals(run_id, states=("waiting",))
        before = st.get_run(run_id)
    assert (waiting.task_id, waiting.tool, waiting.rule) == ("asked", "echo", "rule '--ask echo'")
    assert before.status.value == "paused"
    assert before.tasks["no"].status is dagagent.TaskStatus.SKIPPED
    assert before.tasks["a"].output == 3
    # nothing decided yet: attach (on the server the solve recorded) finds it paused still
    still = cli.invoke(dagagent.cli.app, ["attach", summary.solve_id, "--store", db], env=env)
    assert still.exit_code == 6, still.output
    assert f"solve {summary.solve_id} is paused in round 1" in still.output

    async def resume_here() -> None:  # the workflow waits on the server: not resumed here
        await dagagent.resume_solve(
            run_id, temporal_tools.registry, dagagent.llm.ScriptedLLM([]), store=db
        )

    with pytest.raises(dagagent.errors.DecisionError, match="runs on Temporal"):
        anyio.run(resume_here)
    decided = cli.invoke(
        dagagent.cli.app, ["approve", run_id, "asked", "--allow", "--by", "ann", "--store", db]
    )
    assert decided.exit_code == 0, decided.output
    resumed = cli.invoke(dagagent.cli.app, ["resume", run_id, "--store", db, "--json"], env=env)
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["answer"] == "hi, 4"
    assert model.count == 2  # the joiner, once; the plan was not asked for again
    joined = json.dumps(model_server.requests[-1].json)
    assert "denied by rule #1 (deny tool big)" in joined  # the joiner saw the denial
    with RunStore(db, create=False) as st:
        solve = st.get_solve(summary.solve_id)
        run = st.get_run(run_id)
        assert st.approvals(run_id) == []  # the decision was used
    assert solve.status == "answered"
    assert [r.outcome for r in solve.rounds] == ["answered"]
    assert {t: (r.status.value, r.output) for t, r in run.tasks.items()} == {
        "a": ("succeeded", 3),
        "asked": ("succeeded", "hi"),
        "no": ("denied", None),
        "then": ("succeeded", 4),
    }
    assert run.tasks["a"].finished_at == before.tasks["a"].finished_at  # kept, not run again
    assert "ann" in [d.decided_by for d in run.tasks["asked"].decisions or ()]
    assert [c.role for c in st_calls(db, summary.solve_id)] == ["planner", "joiner"]
    # a second resume finds nothing to do
    again = cli.invoke(dagagent.cli.app, ["resume", run_id, "--store", db], env=env)
    assert again.exit_code == 7, again.output
    # the history (a pause, a signal, the run again under the same id) replays the same
    # and stays small: a pause adds a signal and the run's second start, a few events
    assert anyio.run(replay_solve, executor(workers), summary.solve_id) < 60
    # --no-wait: the call is denied on the worker instead of waiting, as a local ask's
    model.plans, model.decisions = [HELD], [{"action": "finish", "answer": "no", "cites": []}]
    denied = cli.invoke(
        dagagent.cli.app,
        ["ask", "echo hi", "--tools", TOOLS, "--model", "openai:gpt-test",
         "--base-url", f"{model_server.url}/v1", "--store", db, "--ask", "echo",
         "--no-wait", "--json", *_where(workers)],
        env=env,
    )  # fmt: skip
    assert denied.exit_code == 0, denied.output
    [rnd] = json.loads(denied.stdout)["rounds"]
    with RunStore(db, create=False) as st:
        asked = st.get_run(rnd["run_id"]).tasks["asked"]
    assert asked.status is dagagent.TaskStatus.DENIED
    assert "approval needed for tool 'echo'" in (asked.error or "")
    # and a call a lost worker would leave in doubt is not made either: nobody decides later
    run_input = anyio.run(started_with, executor(workers), workflow_id(rnd["run_id"]))
    assert run_input["in_doubt_policy"] == "deny"


async def started_with(ex: TemporalExecutor, wid: str) -> dict[str, Any]:
    """The input workflow ``wid`` started with."""
    async with ex.session():
        assert ex.client is not None
        handle = ex.client.get_workflow_handle(wid)
        async for event in handle.fetch_history_events():
            started = event.workflow_execution_started_event_attributes
            [given] = await ex.client.data_converter.decode(started.input.payloads[:1], [dict])
            return dict(given)
    raise AssertionError(f"workflow {wid} has no history")


async def replay_solve(ex: TemporalExecutor, solve_id: str) -> int:
    """Replay solve ``solve_id``'s history; its length."""
    async with ex.session():
        info, history = await history_of(ex, solve_workflow_id(solve_id))
        await replay(ex, history)
    return int(info.history_length)


def st_calls(db: str, solve_id: str) -> list[Any]:
    with dagagent.RunStore(db, create=False) as st:
        return st.model_calls(solve_id=solve_id)


def test_approve_on_temporal_the_solve_waits_for_each_plan_and_attach_asks_again(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """``ask --approve --executor temporal`` on a terminal: the solve's workflow waits after
    the plan for the person's answer. The driver killed while it asks, the solve waits on
    the server, nothing of the plan run; ``attach`` without a terminal does not answer for
    the person (exit 7, saying what waits); ``attach_solve(confirm=...)`` shows the plan
    again and, approved, the solve goes on to its answer. A refusal ends a solve
    ``gave_up`` with nothing of its plan run, as locally; both histories replay."""
    model = Model([ROUND2, ROUND2], [FINISH])
    model_server.responder = model
    db = tmp_path / "runs.db"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DAGAGENT_", "OPENAI_"))},
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "OPENAI_API_KEY": DRIVER_KEY,
    }
    terminal, its_end = os.openpty()  # the driver asks on a terminal
    driver = subprocess.Popen(
        [sys.executable, "-m", "dagagent", "ask", "double 1 + 2", "--tools", TOOLS,
         "--model", "openai:gpt-test", "--base-url", f"{model_server.url}/v1",
         "--store", str(db), "--approve", *_where(workers)],
        stdin=its_end, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        cwd=tmp_path,
    )  # fmt: skip
    os.close(its_end)
    ex = executor(workers)
    try:
        solve_id = anyio.run(_asked_about_a_plan, ex, db, driver)
    finally:
        driver.kill()
        driver.wait()
        os.close(terminal)
    assert model.count == 1  # planned; the run waits for the answer
    refused = CliRunner().invoke(
        dagagent.cli.app, ["attach", solve_id, "--store", str(db), *_where(workers)[2:]]
    )
    assert refused.exit_code == 7, refused.output
    assert f"solve {solve_id} waits for a person to approve round 1's plan" in refused.output
    shown: list[Any] = []

    def confirm(graph: Any) -> bool:
        shown.append([t.id for t in graph.plan.tasks])
        return True

    solution = anyio.run(_attach, ex, solve_id, db, confirm)
    assert shown == [["a", "d"]]
    assert solution.status.value == "answered", solution.reason
    assert solution.answer == FINISH["answer"]
    assert [c.role for c in solution.calls] == ["planner", "joiner"]  # not planned again
    with dagagent.RunStore(db) as runs:
        record = runs.get_solve(solve_id)
        assert record.status == "answered"
        assert runs.get_run(record.run_id or "").tasks["d"].output == 6

    async def refuse() -> tuple[dagagent.Solution, Any, Any]:
        async with client_of(model_server) as llm:
            no = await dagagent.solve(
                "double 1 + 2",
                temporal_tools.registry,
                llm,
                settings=RunSettings(executor=ex, retry=FAST_RETRY),
                confirm=lambda _graph: False,
                store=db,
            )
        async with ex.session():
            _, answered = await history_of(ex, solve_workflow_id(solve_id))
            info, history = await history_of(ex, solve_workflow_id(no.solve_id))
            await replay(ex, answered)
            await replay(ex, history)
        return no, info, history

    no, info, _ = anyio.run(refuse)
    assert no.status.value == "gave_up"
    assert no.reason == "round 1: the plan was not approved; nothing of it ran"
    [rnd] = no.rounds
    assert rnd.result is None and rnd.plan is not None
    assert model.count == 3  # its planner only
    assert info.history_length < 30


async def _asked_about_a_plan(
    ex: TemporalExecutor, db: Path, driver: subprocess.Popen[bytes]
) -> str:
    """The solve the driver started, once its workflow waits for the answer about round 1's
    plan (the driver asks it on its terminal)."""
    solve_id = None
    async with ex.session():
        assert ex.client is not None
        while True:
            assert driver.poll() is None, "the driver ended before it asked"
            if solve_id is None and await anyio.Path(db).exists():
                with dagagent.RunStore(db) as runs:
                    solves = runs.list_solves()
                solve_id = solves[0].solve_id if solves else None
            if solve_id is not None:
                handle = ex.client.get_workflow_handle(solve_workflow_id(solve_id))
                try:
                    waiting = await handle.query("waiting")
                except Exception:  # not started yet
                    waiting = None
                if waiting is not None and waiting["kind"] == "plan":
                    return solve_id
            await anyio.sleep(0.05)


async def _attach(ex: TemporalExecutor, solve_id: str, db: Path, confirm: Any) -> Any:
    with dagagent.RunStore(db) as runs:
        return await attach_solve(solve_id, executor=ex, store=runs, confirm=confirm)


@pytest.mark.anyio
async def test_a_deadline_passes_while_a_plan_waits_for_its_answer(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """The solve's workflow waits for the answer about its plan within the deadline: when it
    passes, the solve ends ``timed_out`` saying what it waited for, nothing of the plan run,
    and the driver stops asking (an async ``confirm`` is cancelled, not waited for)."""
    model_server.responder = Model([ROUND2], [FINISH])
    asked = anyio.Event()

    async def never(_graph: Any) -> bool:
        asked.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async with client_of(model_server) as llm:
        solution = await dagagent.solve(
            "double 1 + 2",
            temporal_tools.registry,
            llm,
            settings=RunSettings(executor=executor(workers), retry=FAST_RETRY),
            confirm=never,
            deadline_s=1.5,
            store=tmp_path / "runs.db",
        )
    assert asked.is_set()
    assert solution.status.value == "timed_out", solution.reason
    assert "cancelled: the wait for a person's answer about round 1's plan" in solution.reason
    [rnd] = solution.rounds
    assert rnd.result is None and rnd.outcome == "timed_out" and rnd.plan is not None


BUDGETED = {
    "goal": "g",
    "tasks": [
        {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
        {"id": "m", "tool": "add", "for_each": [1, 2, 3], "args": {"a": "${@item}", "b": 1}},
    ],
}
PARTIAL = {"action": "finish", "answer": "a is 3; m got cut short", "cites": ["a"]}


def ask_args(server: LLMTestServer, store: Path, *more: str) -> list[str]:
    return [
        "ask",
        "what are a and m?",
        "--tools",
        TOOLS,
        "--model",
        "openai:gpt-test",
        "--base-url",
        f"{server.url}/v1",
        "--store",
        str(store),
        "--json",
        *more,
    ]


def on_temporal(workers: Workers) -> list[str]:
    return [
        "--executor",
        "temporal",
        "--temporal-address",
        workers.address,
        "--task-queue",
        workers.queue,
        "--payload-store",
        str(workers.payloads),
    ]


def _budgeted_ask(
    server: LLMTestServer, store: Path, decisions: list[Any], *options: str
) -> tuple[int, dict[str, Any], Any]:
    """``ask`` the goal of :data:`BUDGETED` with ``options``: its exit code, its JSON, and
    its round's run as recorded."""
    server.responder = Model([BUDGETED], decisions)
    result = CliRunner().invoke(
        dagagent.cli.app,
        ask_args(server, store, "--on-failure", "continue", *options),
        env={"OPENAI_API_KEY": WORKER_KEY},
    )
    assert "Traceback" not in result.output
    doc = json.loads(result.stdout)
    [run_id] = [r["run_id"] for r in doc["rounds"]]
    with dagagent.RunStore(store) as runs:
        return result.exit_code, doc, runs.get_run(run_id)


def test_a_tool_call_budget_is_spent_in_the_workflow_as_a_local_solve_spends_it(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """``ask --max-tool-calls 3`` with a task and a map of three: on Temporal the workflow
    counts the calls it lets the workers make, the third element's call is not made (denied
    by the budget, with the local message), and the joiner answers from what the round had,
    exactly as the same solve run locally; ``show`` reads the denial. When the joiner's last
    answer cannot be had within the reserve, the solve ends ``budget_exhausted`` (exit 9) as
    locally."""
    outcomes = {}
    for where, more in (("local", []), ("temporal", on_temporal(workers))):
        store = tmp_path / f"{where}.db"
        code, doc, run = _budgeted_ask(
            model_server, store, [PARTIAL], "--max-tool-calls", "3", *more
        )
        assert code == 0, doc
        elements = run.tasks["m"].elements or []
        outcomes[where] = (
            doc["status"],
            doc["reason"],
            run.tasks["a"].status.value,
            run.tasks["m"].status.value,
            [(e.status.value, e.error) for e in elements],
            [d.decided_by for e in elements for d in e.decisions or ()],
        )
        shown = CliRunner().invoke(dagagent.cli.app, ["show", run.run_id, "--store", str(store)])
        assert shown.exit_code == 0 and "denied" in shown.output, shown.output
        # one model call for the planner, the reserve for the joiner, whose answer is no
        # answer: nothing is left to ask it again
        code, doc, _ = _budgeted_ask(
            model_server,
            tmp_path / f"{where}-out.db",
            ["not a decision"],
            "--max-tool-calls",
            "3",
            "--max-model-calls",
            "2",
            *more,
        )
        outcomes[where + " exhausted"] = (code, doc["status"], doc["reason"])
    assert outcomes["temporal"] == outcomes["local"]
    status, reason, a, m, elements, deciders = outcomes["temporal"]
    assert status == "answered"
    refused = "the call of add by task 'm' was refused: the budget of 3 tool calls is used up"
    assert reason == f"answered in round 1 (from what it had when the budget ran low: {refused})"
    assert (a, m) == ("succeeded", "denied")
    assert [e[0] for e in elements] == ["succeeded", "succeeded", "denied"]
    assert elements[2][1] == f"denied by budget: {refused}"
    assert deciders == ["budget"]
    assert outcomes["temporal exhausted"] == outcomes["local exhausted"]
    code, status, reason = outcomes["temporal exhausted"]
    assert (code, status) == (9, "budget_exhausted"), reason
    assert reason.startswith("round 1: the budget ran out (")
    assert "3 of 3 tool calls" in reason and refused in reason


@pytest.mark.anyio
async def test_agent_tasks_spend_the_solve_budget_on_the_workers_as_locally(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """A budget of two model calls (and five tool calls) with an agent task: the planner
    spends one, the agent's call is refused on its worker (one call is kept for the joiner's
    last answer), the task fails saying so, and the joiner answers within the reserve: the
    same calls, statuses and reason as the same solve run locally. The solve's and its run's
    histories replay to the same decisions."""
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
            {"id": "think", "instruction": "Say what ${a} is.", "depends_on": ["a"]},
        ],
    }
    finish = {"action": "finish", "answer": "a is three", "cites": ["a"]}
    seen = {}
    for where in ("local", "temporal"):
        model_server.responder = Model([plan], [finish], agents=["It is three."])
        ex = executor(workers) if where == "temporal" else None
        async with client_of(model_server) as llm:
            solution = await dagagent.solve(
                "what is a?",
                temporal_tools.registry,
                llm,
                settings=RunSettings(executor=ex or "dataflow", retry=FAST_RETRY),
                agent_tasks=True,
                budget=dagagent.Budget(model_calls=2, tool_calls=5),
                store=tmp_path / f"{where}.db",
            )
            if ex is not None:
                async with ex.session():
                    [rnd] = solution.rounds
                    for wid in (solve_workflow_id(solution.solve_id), workflow_id(rnd.run_id)):
                        _, history = await history_of(ex, wid)
                        await replay(ex, history)
        [rnd] = solution.rounds
        assert rnd.result is not None
        think = rnd.result.tasks["think"]
        seen[where] = (
            solution.status.value,
            solution.reason,
            think.status.value,
            think.error,
            [(c.role, c.status) for c in solution.calls],
            solution.usage.agents.calls,
        )
    assert seen["temporal"] == seen["local"]
    status, reason, think_status, think_error, calls, agent_calls = seen["temporal"]
    assert status == "answered", reason
    assert "when the budget ran low" in reason and "refused" in reason
    assert think_status == "failed" and "refused" in (think_error or "")
    assert calls == [("planner", "answered"), ("agent", "refused"), ("joiner", "answered")]
    assert agent_calls == 0  # refused: nothing sent


LIMITED_1 = {"goal": "g", "tasks": [{"id": "a", "tool": "add", "args": {"a": 1, "b": 2}}]}
LIMITED_2 = {
    "goal": "g",
    "tasks": [
        {"id": "b", "tool": "add", "args": {"a": 2, "b": 3}},
        {"id": "d", "tool": "double", "args": {"x": 3}},
    ],
}


def test_a_policy_s_limit_counts_the_calls_of_the_whole_solve_as_locally(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """``ask --policy FILE`` whose limit lets ``add`` be called once: round 1's run uses it
    up, so round 2's call of ``add`` is denied by the limit, on Temporal as in a local solve
    (the same outcome, the same message: counted across the solve), and the joiner answers
    from what round 2 had. The solve's history replays."""
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps({"default": "allow", "rules": [], "limits": [{"tool": "add", "max_calls": 1}]})
    )
    decisions = [
        {"action": "replan", "feedback": "add 2 and 3 too"},
        {"action": "finish", "answer": "6", "cites": ["d"]},
    ]
    outcomes = {}
    solves = {}
    for where, more in (("local", []), ("temporal", on_temporal(workers))):
        store = tmp_path / f"{where}.db"
        model_server.responder = Model([LIMITED_1, LIMITED_2], list(decisions))
        result = CliRunner().invoke(
            dagagent.cli.app,
            ask_args(model_server, store, "--on-failure", "continue", "--policy", str(rules))
            + more,
            env={"OPENAI_API_KEY": WORKER_KEY},
        )
        assert "Traceback" not in result.output
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        solves[where] = doc["solve_id"]
        with dagagent.RunStore(store) as runs:
            first, second = (runs.get_run(r["run_id"]) for r in doc["rounds"])
        outcomes[where] = (
            doc["status"],
            doc["answer"],
            {t: (r.status.value, r.error) for t, r in first.tasks.items()},
            {t: (r.status.value, r.error) for t, r in second.tasks.items()},
        )
    assert outcomes["temporal"] == outcomes["local"]
    status, answer, first_tasks, second_tasks = outcomes["temporal"]
    assert (status, answer) == ("answered", "6")
    assert first_tasks == {"a": ("succeeded", None)}
    assert second_tasks["d"] == ("succeeded", None)
    b_status, b_error = second_tasks["b"]
    assert b_status == "denied"
    assert "at most 1 time in a solve" in (b_error or ""), b_error
    assert anyio.run(replay_solve, executor(workers), solves["temporal"]) > 0


def _metered_plan(where: Path, name: str, calls: list[str], note: str) -> dict[str, Any]:
    tasks: list[dict[str, Any]] = [
        {"id": c, "tool": "metered", "args": {"name": name, "where": str(where)}} for c in calls
    ]
    tasks.append({"id": f"note_{note}", "tool": "echo", "args": {"value": note}})
    return {"goal": "g", "tasks": tasks}


def test_a_tool_s_max_calls_counts_the_calls_of_the_whole_solve_as_locally(
    own_workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """A tool that may be called twice (``max_calls=2``), called twice in round 1 and once
    in round 2: round 2's call fails its task with ``ToolLimitError``, on Temporal as in the
    local solve, with the same message (counted across the solve); the tool ran twice."""
    from .temporal_fixtures import EXTRA

    own_workers.start(1, tools=EXTRA)
    decisions = [
        {"action": "replan", "feedback": "once more"},
        {"action": "finish", "answer": "done", "cites": []},
    ]
    outcomes = {}
    for where, more in (
        ("local", []),
        ("temporal", [
            "--executor", "temporal", "--temporal-address", own_workers.address,
            "--task-queue", own_workers.queue, "--payload-store", str(own_workers.payloads),
        ]),
    ):  # fmt: skip
        model_server.responder = Model(
            [
                _metered_plan(tmp_path, where, ["m1", "m2"], "one"),
                _metered_plan(tmp_path, where, ["m3"], "two"),
            ],
            list(decisions),
        )
        store = tmp_path / f"{where}.db"
        args = ask_args(model_server, store, "--on-failure", "continue", *more)
        args[args.index(TOOLS)] = EXTRA
        result = CliRunner().invoke(dagagent.cli.app, args, env={"OPENAI_API_KEY": WORKER_KEY})
        assert "Traceback" not in result.output
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        with dagagent.RunStore(store) as runs:
            second = runs.get_run(doc["rounds"][1]["run_id"])
        m3 = second.tasks["m3"]
        outcomes[where] = (doc["status"], m3.status.value, m3.error_type, m3.error)
        assert len((tmp_path / f"{where}.calls").read_text().split()) == 2
    assert outcomes["temporal"] == outcomes["local"]
    status, m3_status, error_type, error = outcomes["temporal"]
    assert (status, m3_status, error_type) == ("answered", "failed", "ToolLimitError")
    assert "may be called at most 2 times in a solve" in (error or ""), error


def test_a_solve_pauses_for_the_calls_a_lost_worker_left_in_doubt(
    own_workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """The worker running two payments of a round's run (a tool with side effects, no
    reconciler), made before it is SIGKILLed: their tasks wait for a person and the solve
    pauses (the joiner not asked), its workflow waiting on the server; ``approvals`` names
    each call's key and the worker; ``approve --happened --output`` for one, ``--allow`` for
    the other, then ``attach``: the round's run goes on in place, takes the first's output
    over (paid once), makes the second once more with its key, and the joiner answers."""
    from eventually import until

    from dagagent.store import RunStore

    [victim_proc] = own_workers.start(1, tools=EXTRA)
    where = str(tmp_path)

    def pay(name: str) -> dict[str, Any]:
        return {
            "id": name,
            "tool": "pay_hold",
            "args": {"name": name, "where": where, "pay_first": True},
        }

    then = {"id": "then", "tool": "echo", "args": {"value": ["${h}", "${a}"]}}
    plan = {"goal": "g", "tasks": [pay("h"), pay("a"), then]}
    model = Model([plan], [{"action": "finish", "answer": "paid", "cites": ["then"]}])
    model_server.responder = model
    db = tmp_path / "runs.db"
    solutions: list[Any] = []

    async def first() -> None:
        ex = executor(own_workers, heartbeat_s=HEARTBEAT_S)
        run_settings = RunSettings(executor=ex, retry=FAST_RETRY)
        async with client_of(model_server) as llm, anyio.create_task_group() as tg:

            async def go() -> None:
                # the plan whole before its run starts: the planner's step has ended by the
                # time a payment is made (a streamed one would be asked again on another worker)
                solutions.append(
                    await dagagent.solve(
                        "pay",
                        temporal_tools.extra,
                        llm,
                        settings=run_settings,
                        store=db,
                        stream=False,
                    )
                )

            tg.start_soon(go)
            for name in ("h", "a"):  # each paid, and its call holds on the one worker
                await until(partial(temporal_tools.started, tmp_path, name), f"{name} holds")
                await until(partial(temporal_tools.payments, tmp_path, name), f"{name} paid")
            await anyio.to_thread.run_sync(partial(own_workers.start, 1, tools=EXTRA))
            os.kill(victim_proc.pid, signal.SIGKILL)

    anyio.run(first)
    [paused] = solutions
    victim = victim_proc.pid
    [key_h] = temporal_tools.payments(tmp_path, "h")
    [key_a] = temporal_tools.payments(tmp_path, "a")
    assert paused.status.value == "paused", paused.reason
    assert model.count == 1  # planned; the joiner is not asked about a paused round
    with RunStore(db, create=False) as st:
        [rnd] = st.get_solve(paused.solve_id).rounds
        assert rnd.outcome == "paused" and rnd.run_id is not None
        run_id = rnd.run_id
        tasks = st.get_run(run_id).tasks
        assert [tasks[t].status.value for t in ("h", "a")] == ["waiting"] * 2
    listed = CliRunner().invoke(dagagent.cli.app, ["approvals", "--store", str(db)])
    said = " ".join(listed.output.split())
    for name, key in (("h", key_h), ("a", key_a)):
        assert f"task '{name}' of run {run_id}" in said and key in said, said
    assert f"its call started on worker {victim}@" in said, said

    def approve(*args: str) -> None:
        done = CliRunner().invoke(
            dagagent.cli.app, ["approve", run_id, *args, "--by", "ann", "--store", str(db)]
        )
        assert done.exit_code == 0, done.output

    approve("h", "--happened", "--output", '"by hand"')
    approve("a", "--allow")
    (tmp_path / "a.go").touch()  # a call made again does not hold
    (tmp_path / "h.go").touch()  # nor would one made against the decision

    async def attach() -> None:
        with RunStore(db) as st:
            ex = executor(own_workers, heartbeat_s=HEARTBEAT_S)
            solutions.append(await attach_solve(paused.solve_id, executor=ex, store=st))

    anyio.run(attach)
    answered = solutions[-1]
    assert answered.status.value == "answered", answered.reason
    assert answered.answer == "paid"
    with RunStore(db, create=False) as st:
        run = st.get_run(run_id)
        calls = {e.task_id: (e.state, e.resolution) for e in st.effects(run_id)}
    h, a = run.tasks["h"], run.tasks["a"]
    assert (h.status.value, h.output) == ("succeeded", "by hand"), h.error
    assert temporal_tools.payments(tmp_path, "h") == [key_h]  # paid once
    assert temporal_tools.started(tmp_path, "h") == [victim]  # never called again
    assert (a.status.value, a.output["key"]) == ("succeeded", key_a), a.error
    assert temporal_tools.payments(tmp_path, "a") == [key_a, key_a]  # once more, same key
    assert calls == {"h": ("succeeded", "happened"), "a": ("succeeded", "not_happened")}
    assert run.tasks["then"].output == [h.output, a.output]
    assert "ann" in [d.decided_by for d in h.decisions or ()]
    assert anyio.run(replay_solve, executor(own_workers), paused.solve_id) < 80
