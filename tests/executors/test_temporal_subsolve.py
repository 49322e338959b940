"""Sub-solves on Temporal: a ``"solve": true`` task of a round's run is a child solve
workflow of the run's workflow, on a real development server and ``dagagent worker``
processes; the driver records each as a local sub-solve is recorded.

Each scenario runs twice with the same model (a loopback server speaking OpenAI's wire
format, answering each request from the goal it is about): as a local solve and on Temporal.
The records of the two (statuses, reasons, runs, tasks, children, budgets, model calls) must
have the same shape, ids apart.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

import dagagent
import dagagent.cli
from dagagent.events import (
    InSubSolve,
    RunStarted,
    SubSolveFinished,
    SubSolveStarted,
    TaskFinished,
)
from dagagent.llm import OpenAIChat, wire
from dagagent.settings import RunSettings, TaskRetryPolicy

pytest.importorskip("temporalio")

import temporal_tools  # the workers import it too
from eventually import wait_until
from llm_server import LLMTestServer, Recorded, Reply
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

from dagagent.executors.temporal import TemporalExecutor, workflow_id
from dagagent.workflows.temporal_solve import attach_solve, solve_workflow_id

from .temporal_fixtures import READY_S, ROOT, TOOLS, Workers

pytestmark = [pytest.mark.slow, pytest.mark.asyncio_only("Temporal's client runs on asyncio")]

DRIVER_KEY = "sk-driver-only-secret"
FAST_RETRY = TaskRetryPolicy(base_delay_s=0.01, jitter=0)
GOAL = "Find the best supplier in each region"
SUPPLIERS = {"EU": "Acme", "US": "Bolt"}
_ID = re.compile(r"\b[0-9a-f]{12}\b")


def _goal(body: dict[str, Any]) -> str:
    found = re.search(r"^Goal: (.*)$", body["messages"][-1]["content"], re.M)
    assert found, body["messages"][-1]["content"]
    return found.group(1).strip()


class Router:
    """Answers each request from its goal and kind: ``plans`` and ``answers`` by goal (a
    goal not listed is a region's: its plan echoes its supplier, its answer names it; a
    list: one per request of that goal and kind, in order, the last one for any more).
    ``seen`` counts the (goal, kind) of every request; ``turns`` too, from the start of the
    solve under way."""

    def __init__(self, plans: dict[str, Any], answers: dict[str, Any]) -> None:
        self.plans = plans
        self.answers = answers
        self.seen: Counter[tuple[str, str]] = Counter()
        self.turns: Counter[tuple[str, str]] = Counter()
        self.prompts: dict[str, str] = {}  # goal -> the planner's system prompt (the last)
        self.lock = threading.Lock()

    def __call__(self, request: Recorded) -> Reply:
        body = request.json
        name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
        goal = _goal(body)
        kind = "plan" if "plan" in name else "join"
        with self.lock:
            self.seen[(goal, kind)] += 1
            self.turns[(goal, kind)] += 1
            turn = self.turns[(goal, kind)] - 1
            if kind == "plan":
                self.prompts[goal] = body["messages"][0]["content"]
        region = goal.rsplit(" ", 1)[-1]
        given = (self.plans if kind == "plan" else self.answers).get(goal)
        if isinstance(given, list):
            given = given[min(turn, len(given) - 1)]
        if kind == "plan":
            answer = given or {
                "tasks": [{"id": "s", "tool": "echo", "args": {"value": SUPPLIERS[region]}}]
            }
        else:
            answer = given or {
                "action": "finish",
                "answer": SUPPLIERS[region],
                "cites": ["s"],
            }
        reply = wire.openai_text(json.dumps(answer), input_tokens=100, output_tokens=20)
        return Reply(json=reply)


MAP_PLAN = {
    "tasks": [
        {"id": "regions", "tool": "echo", "args": {"value": ["EU", "US"]}},
        {
            "id": "best",
            "for_each": "${regions}",
            "instruction": "Find the best supplier in ${@item}",
            "solve": True,
            "tools": ["echo"],
        },
    ]
}
ONE_PLAN = {
    "tasks": [
        {
            "id": "best",
            "instruction": "Find the best supplier in EU",
            "solve": True,
            "tools": ["echo"],
        }
    ]
}
FINISH = {"action": "finish", "answer": "EU: Acme; US: Bolt", "cites": ["best"]}


@pytest.fixture
def model_server() -> Iterator[LLMTestServer]:
    with LLMTestServer() as srv:
        yield srv


def executor(workers: Workers) -> TemporalExecutor:
    return TemporalExecutor(workers.address, task_queue=workers.queue, payloads=workers.payloads)


def _norm(value: Any) -> Any:
    """``value`` with every id (12 hex digits) as ``<id>``."""
    normalised: Any = json.loads(_ID.sub("<id>", json.dumps(value, default=str)))
    return normalised


async def replay(workers: Workers, solution: dagagent.Solution, store: Path, children: int) -> None:
    """Replay the history of the first round's run of ``solution`` (which started
    ``children`` sub-solves) and of each sub-solve (as ``store`` records them), as a worker
    taking them over would: Temporal raises if a workflow decides differently."""
    from temporalio.worker import Replayer
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from dagagent.executors.temporal._workflow import RunWorkflow
    from dagagent.workflows.temporal_solve import SolveWorkflow

    ex = executor(workers)
    async with ex.session():
        client = ex._client()
        replayer = Replayer(
            workflows=[SolveWorkflow, RunWorkflow],
            data_converter=client.data_converter,
            workflow_runner=SandboxedWorkflowRunner(
                restrictions=SandboxRestrictions.default.with_passthrough_modules("dagagent")
            ),
        )
        run_id = solution.rounds[0].run_id or ""
        history = await client.get_workflow_handle(workflow_id(run_id)).fetch_history()
        kinds = [e.WhichOneof("attributes") for e in history.events]
        started = kinds.count("start_child_workflow_execution_initiated_event_attributes")
        assert started == children
        await replayer.replay_workflow(history)
        with dagagent.RunStore(store) as runs:
            below = runs.child_solves(solution.solve_id)
        for child in below:
            handle = client.get_workflow_handle(solve_workflow_id(child.solve_id))
            await replayer.replay_workflow(await handle.fetch_history())


def _task(r: Any) -> list[Any]:
    found = [r.status.value, r.output, r.error, r.error_type, r.args]
    if r.elements:
        found.append([(e.status.value, e.output, e.error, e.args) for e in r.elements])
    return found


def shape(runs: dagagent.RunStore, solve_id: str) -> dict[str, Any]:
    """What a solve's records say, ids apart: how it ended, its rounds, its runs' tasks, its
    model calls, and the same of each sub-solve, under the task that started it."""
    record = runs.get_solve(solve_id)
    tasks: list[Any] = []
    for rnd in record.rounds:
        if rnd.run_id is None:
            continue
        run = runs.get_run(rnd.run_id)
        tasks.append({t: _task(r) for t, r in sorted(run.tasks.items())})
    options = record.options or {}
    children = sorted(record.children, key=lambda c: (c.link.task_id, c.link.element or 0))
    found: dict[str, Any] = _norm(
        {
            "goal": record.goal,
            "status": record.status,
            "reason": record.reason,
            "answer": record.answer,
            "depth": record.depth,
            "parent": (record.parent.task_id, record.parent.element) if record.parent else None,
            "budget": options.get("budget"),
            "tools": options.get("tools"),
            "sub_solves": options.get("sub_solves"),
            "rounds": [(r.outcome, r.reason) for r in record.rounds],
            "calls": [(c.role, c.round) for c in runs.model_calls(solve_id=solve_id)],
            "runs": tasks,
            "children": [shape(runs, c.solve_id) for c in children],
        }
    )
    return found


async def both(
    server: LLMTestServer,
    workers: Workers,
    tmp_path: Path,
    router: Router,
    registry: dagagent.Registry = temporal_tools.registry,
    between: Callable[[], None] | None = None,
    **options: Any,
) -> tuple[dict[str, Any], dict[str, Any], dagagent.Solution, list[Any]]:
    """The scenario as a local solve and on Temporal (``between`` them: ``between()``, and
    the router's count of requests starts again): the shapes of their records, the
    Temporal solve's solution and the events its listeners heard."""
    server.responder = router
    shapes = []
    events: list[Any] = []
    solution = None
    for where in ("local", "temporal"):
        if where == "temporal":
            router.turns.clear()
            if between is not None:
                between()
        store = tmp_path / f"{where}.db"
        settings = RunSettings(on_failure="continue", retry=FAST_RETRY)
        if where == "temporal":
            settings = RunSettings(
                executor=executor(workers), on_failure="continue", retry=FAST_RETRY
            )
        async with OpenAIChat("gpt-test", base_url=f"{server.url}/v1", api_key=DRIVER_KEY) as llm:
            solution = await dagagent.solve(
                GOAL,
                registry,
                llm,
                settings=settings,
                store=store,
                sub_solves=True,
                stream=False,  # as on Temporal, where the workers plan whole plans
                listeners=[events.append] if where == "temporal" else [],
                **options,
            )
        with dagagent.RunStore(store) as runs:
            shapes.append(shape(runs, solution.solve_id))
    assert solution is not None
    return shapes[0], shapes[1], solution, events


@pytest.mark.anyio
async def test_a_map_of_sub_solves_runs_as_child_solve_workflows_recorded_as_local_ones(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    router = Router({GOAL: MAP_PLAN}, {GOAL: FINISH})
    local, durable, solution, events = await both(model_server, workers, tmp_path, router)
    assert durable == local
    assert durable["status"] == "answered" and durable["answer"] == FINISH["answer"]
    best = durable["runs"][0]["best"]
    assert best[0] == "succeeded" and best[1] == ["Acme", "Bolt"]
    eu, us = durable["children"]
    assert (eu["parent"], eu["depth"], eu["answer"], eu["tools"]) == (
        ["best", 0],
        1,
        "Acme",
        ["echo"],
    )
    assert (us["parent"], us["goal"], us["answer"]) == (
        ["best", 1],
        "Find the best supplier in US",
        "Bolt",
    )
    assert eu["calls"] == [["planner", 1], ["joiner", 1]]
    # each request was made once: none repeated by the workflows or their workers
    assert set(router.seen.values()) == {2}  # once locally, once on Temporal
    # the parent's usage counts its sub-solves' calls, as a local solve's does
    assert solution.usage.sub_solves.calls == 4
    # the listeners heard each child start and end, and its own events wrapped
    started = [e for e in events if isinstance(e, SubSolveStarted)]
    assert sorted((e.task_id, e.element, e.depth) for e in started) == [
        ("best", 0, 1),
        ("best", 1, 1),
    ]
    finished = [e for e in events if isinstance(e, SubSolveFinished)]
    assert {e.status for e in finished} == {"answered"}
    inner = [e for e in events if isinstance(e, InSubSolve)]
    assert {e.child_id for e in inner} == {e.child_id for e in started}
    assert all(e.solve_id == solution.solve_id for e in inner)
    kinds = Counter(e.event.kind for e in inner)
    assert kinds["round.started"] == 2 and kinds["model_call.finished"] == 4
    # in their order: the task that started them finishes after both sub-solves have
    (best_done,) = [
        i
        for i, e in enumerate(events)
        if isinstance(e, TaskFinished) and e.result.task_id == "best"
    ]
    assert all(events.index(e) < best_done for e in finished)

    # the new workflows replay as they ran: the round's run (its local activities and
    # child solve workflows) and a child solve
    await replay(workers, solution, tmp_path / "temporal.db", children=2)


@pytest.mark.anyio
async def test_a_sub_solve_too_deep_is_refused_as_locally(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """Solves nest at most MAX_SOLVE_DEPTH deep: the planner of a sub-solve at depth 2 may
    not plan one, and that solve fails; its task fails with the reason, as locally."""
    deeper = {"tasks": [{"id": "more", "instruction": "Go deepest", "solve": True}]}
    router = Router(
        {
            GOAL: {"tasks": [{"id": "deep", "instruction": "Go deeper", "solve": True}]},
            "Go deeper": {"tasks": [{"id": "more", "instruction": "Go deepest", "solve": True}]},
            "Go deepest": deeper,
        },
        {
            GOAL: {"action": "finish", "answer": "as deep as allowed", "cites": ["deep"]},
            "Go deeper": {"action": "finish", "answer": "the deepest failed", "cites": []},
        },
    )
    local, durable, _, _ = await both(
        model_server, workers, tmp_path, router, max_attempts=1, max_rounds=1
    )
    assert durable == local
    (child,) = durable["children"]
    (grandchild,) = child["children"]
    assert (child["depth"], grandchild["depth"]) == (1, 2)
    assert grandchild["status"] == "failed"
    assert grandchild["reason"].startswith("round 1: no valid plan")
    # the workers told the planners of sub-solves down to MAX_SOLVE_DEPTH, not below
    assert '"solve": true' in router.prompts[GOAL]
    assert '"solve": true' in router.prompts["Go deeper"]
    assert '"solve": true' not in router.prompts["Go deepest"]
    more = child["runs"][0]["more"]
    assert more[0] == "failed" and more[3] == "SubSolveError"
    assert more[2].startswith("sub-solve <id> of task 'more' ended failed: round 1: no valid plan")
    assert durable["answer"] == "as deep as allowed"


@pytest.mark.anyio
async def test_a_sub_solve_s_budget_is_carved_from_its_parent_s_as_locally(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """Six model calls, one kept for the joiner's last answer: the planner spent one, so
    the sub-solve gets four; what it spends counts for its parent."""
    router = Router({GOAL: ONE_PLAN}, {GOAL: FINISH})
    local, durable, solution, _ = await both(
        model_server, workers, tmp_path, router, budget=dagagent.Budget(model_calls=6)
    )
    assert durable == local
    (child,) = durable["children"]
    assert child["budget"] == {"model_calls": 4}
    assert child["status"] == "answered"
    assert solution.usage.sub_solves.calls == 2
    assert durable["status"] == "answered"
    # the run's history with a carved budget (one more local activity) replays too
    await replay(workers, solution, tmp_path / "temporal.db", children=1)


class AgentRouter(Router):
    """A :class:`Router` whose sub-solve (``ONE_PLAN``'s) has a sub-solve of its own, without
    ``tools``, whose plan is an agent task: the agent answers the region's supplier, and
    ``offered`` keeps the names of the tools each agent's request offered."""

    def __init__(self) -> None:
        plans = {
            "Find the best supplier in EU": {
                "tasks": [
                    {"id": "s", "instruction": "Ask for the best supplier in EU", "solve": True}
                ]
            },
            "Ask for the best supplier in EU": {
                "tasks": [{"id": "s", "instruction": "Name the best supplier in EU"}]
            },
        }
        super().__init__({GOAL: ONE_PLAN, **plans}, {GOAL: FINISH})
        self.offered: list[list[str]] = []

    def __call__(self, request: Recorded) -> Reply:
        body = request.json
        if body.get("response_format") is not None:  # a planner's or joiner's
            return super().__call__(request)
        with self.lock:
            self.offered.append(sorted(t["function"]["name"] for t in body.get("tools") or ()))
        region = str(body["messages"][-1]["content"]).rsplit(" ", 1)[-1]
        return Reply(json=wire.openai_text(SUPPLIERS[region], input_tokens=50, output_tokens=5))


@pytest.mark.anyio
async def test_an_agent_in_a_sub_solve_is_offered_its_task_s_tools_alone_as_locally(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """A sub-solve task with ``tools: ["echo"]`` whose child's own sub-solve (without
    ``tools``: the child's are its) plans an agent task: the agent's model request offers
    ``echo`` alone, on Temporal as locally (not every tool the worker serves)."""
    router = AgentRouter()
    local, durable, solution, _ = await both(
        model_server, workers, tmp_path, router, agent_tasks=True
    )
    assert durable == local
    (child,) = durable["children"]
    (grandchild,) = child["children"]
    assert (child["tools"], grandchild["tools"]) == (["echo"], ["echo"])
    assert grandchild["runs"][0]["s"][:2] == ["succeeded", "Acme"]
    assert child["status"] == "answered" and child["answer"] == "Acme"
    assert router.offered == [["echo"], ["echo"]]  # locally, then on Temporal
    await replay(workers, solution, tmp_path / "temporal.db", children=1)


@pytest.mark.anyio
async def test_a_sub_solve_without_budget_left_does_not_start_as_locally(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    router = Router({GOAL: ONE_PLAN}, {GOAL: FINISH})
    local, durable, _, _ = await both(
        model_server, workers, tmp_path, router, budget=dagagent.Budget(model_calls=2)
    )
    assert durable == local
    assert durable["children"] == []
    best = durable["runs"][0]["best"]
    assert best[0] == "failed" and best[3] == "SubSolveError"
    assert best[2].startswith(
        "sub-solve of task 'best' did not start: a sub-solve cannot start: the solve's budget "
        "has nothing left of its model calls"
    )


@pytest.mark.anyio
async def test_attach_records_the_sub_solves_of_a_solve_no_driver_recorded(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """A solve followed without a store, then attached with one: the attach follows the
    round's run and each of its sub-solves, and records them as the driver would have."""
    router = Router({GOAL: MAP_PLAN}, {GOAL: FINISH})
    model_server.responder = router
    ex = executor(workers)
    async with OpenAIChat("gpt-test", base_url=f"{model_server.url}/v1", api_key=DRIVER_KEY) as llm:
        solution = await dagagent.solve(
            GOAL,
            temporal_tools.registry,
            llm,
            settings=RunSettings(executor=ex, on_failure="continue"),
            sub_solves=True,
        )
    assert solution.ok, solution.reason
    store = tmp_path / "runs.db"
    with dagagent.RunStore(store) as runs:
        attached = await attach_solve(solution.solve_id, executor=executor(workers), store=runs)
        assert attached.answer == FINISH["answer"]
        assert attached.usage.sub_solves.calls == 4
        record = runs.get_solve(solution.solve_id)
        assert [
            (c.link.task_id, c.link.element, c.status, c.answer)
            for c in sorted(record.children, key=lambda c: c.link.element or 0)
        ] == [("best", 0, "answered", "Acme"), ("best", 1, "answered", "Bolt")]
        for c in record.children:
            child = runs.get_solve(c.solve_id)
            assert child.depth == 1 and child.parent is not None
            assert [m.role for m in child.calls] == ["planner", "joiner"]
    assert set(router.seen.values()) == {1}  # the attach made no model call again


def test_ask_with_sub_solves_on_temporal_and_show_lists_them(
    workers: Workers,
    model_server: LLMTestServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model_server.responder = Router({GOAL: MAP_PLAN}, {GOAL: FINISH})
    monkeypatch.setenv("OPENAI_API_KEY", DRIVER_KEY)
    store = str(tmp_path / "runs.db")
    asked = CliRunner().invoke(
        dagagent.cli.app,
        [
            "ask",
            GOAL,
            "--tools",
            TOOLS,
            "--model",
            "openai:gpt-test",
            "--base-url",
            f"{model_server.url}/v1",
            "--store",
            store,
            "--sub-solves",
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
    )
    assert asked.exit_code == 0, asked.output
    answer = json.loads(asked.stdout)
    assert answer["answer"] == FINISH["answer"]
    shown = CliRunner().invoke(dagagent.cli.app, ["show", answer["solve_id"], "--store", store])
    assert shown.exit_code == 0, shown.output
    assert "task best: 2 sub-solves (dagagent show ID)" in shown.stdout
    assert re.search(r"\[0\] [0-9a-f]{12} answered: Acme", shown.stdout), shown.stdout
    assert re.search(r"\[1\] [0-9a-f]{12} answered: Bolt", shown.stdout), shown.stdout


def _wait_for_start(where: Path) -> None:
    """Until the held tool has started (its marker file exists)."""
    wait_until(lambda: temporal_tools.started(where, "w"), "the held tool started", timeout=READY_S)


def _held(where: Path, tool: str = "hold") -> Router:
    """A solve whose one sub-solve holds a tool (``hold``, or ``tool``, named ``w``) until
    ``where/w.go`` exists."""
    child_goal = "Find the best supplier in EU"
    return Router(
        {
            GOAL: {
                "tasks": [{"id": "best", "instruction": child_goal, "solve": True, "tools": [tool]}]
            },
            child_goal: {
                "tasks": [{"id": "wait", "tool": tool, "args": {"name": "w", "where": str(where)}}]
            },
        },
        {
            GOAL: {"action": "finish", "answer": "EU: Acme", "cites": ["best"]},
            child_goal: {"action": "finish", "answer": "Acme", "cites": ["wait"]},
        },
    )


@pytest.mark.anyio
async def test_a_worker_killed_under_a_sub_solve_s_task_the_sub_solve_goes_on(
    own_workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """SIGKILL the worker running the tool of a sub-solve's task: the task runs again on the
    other worker, the sub-solve finishes, and none of its model calls is made twice."""
    own_workers.start(2)
    router = _held(tmp_path)
    model_server.responder = router
    ex = TemporalExecutor(
        own_workers.address,
        task_queue=own_workers.queue,
        payloads=own_workers.payloads,
        heartbeat_s=2.0,
    )
    solutions: list[dagagent.Solution] = []

    async def solve() -> None:
        async with OpenAIChat(
            "gpt-test", base_url=f"{model_server.url}/v1", api_key=DRIVER_KEY
        ) as llm:
            solutions.append(
                await dagagent.solve(
                    GOAL,
                    temporal_tools.registry,
                    llm,
                    settings=RunSettings(executor=ex, on_failure="continue", retry=FAST_RETRY),
                    store=tmp_path / "runs.db",
                    sub_solves=True,
                )
            )

    async with anyio.create_task_group() as tg:
        tg.start_soon(solve)
        await anyio.to_thread.run_sync(_wait_for_start, tmp_path)
        [pid] = temporal_tools.started(tmp_path, "w")
        victim = next(p for p in own_workers.procs if p.pid == pid)
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        (tmp_path / "w.go").touch()
    [solution] = solutions
    assert solution.status.value == "answered", solution.reason
    assert solution.answer == "EU: Acme"
    # the sub-solve's calls were made once: it was not started again (a model step of the
    # parent's whose worker missed its heartbeats under load may be, which is no matter here)
    child_goal = "Find the best supplier in EU"
    assert router.seen[(child_goal, "plan")] == router.seen[(child_goal, "join")] == 1
    [survivor] = [p.pid for p in own_workers.procs if p.pid != pid]
    with dagagent.RunStore(tmp_path / "runs.db") as runs:
        [child] = runs.get_solve(solution.solve_id).children
        assert (child.status, child.answer) == ("answered", "Acme")
        record = runs.get_solve(child.solve_id)
        run = runs.get_run(record.run_id or "")
        assert run.tasks["wait"].output == {"pid": survivor}  # run again on the other worker


def test_the_driver_killed_during_a_sub_solve_attach_records_it(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """SIGKILL ``dagagent ask --sub-solves --executor temporal`` while its sub-solve holds a
    tool: the solve and its sub-solve finish on the workers; ``dagagent attach`` of the
    parent follows the sub-solve too and records it, no model call made twice."""
    router = _held(tmp_path)
    model_server.responder = router
    store = tmp_path / "runs.db"
    temporal = [
        "--temporal-address",
        workers.address,
        "--task-queue",
        workers.queue,
        "--payload-store",
        str(workers.payloads),
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
            GOAL,
            "--tools",
            TOOLS,
            "--model",
            "openai:gpt-test",
            "--base-url",
            f"{model_server.url}/v1",
            "--store",
            str(store),
            "--sub-solves",
            "--executor",
            "temporal",
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
            assert driver.poll() is None, "the driver ended before the sub-solve held its tool"
        driver.kill()
    finally:
        driver.kill()
        driver.wait()
    (tmp_path / "w.go").touch()
    with dagagent.RunStore(store) as runs:
        [summary] = [s for s in runs.list_solves() if s.goal == GOAL]
        solve_id = summary.solve_id
    result = CliRunner().invoke(
        dagagent.cli.app, ["attach", solve_id, "--store", str(store), "--json", *temporal]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["answer"] == "EU: Acme"
    assert set(router.seen.values()) == {1}  # each model call made once
    with dagagent.RunStore(store) as runs:
        record = runs.get_solve(solve_id)
        assert record.status == "answered"
        [child] = record.children
        assert (child.link.task_id, child.status, child.answer) == ("best", "answered", "Acme")
        below = runs.get_solve(child.solve_id)
        assert below.depth == 1 and below.status == "answered"
        assert [c.role for c in below.calls] == ["planner", "joiner"]
        run = runs.get_run(below.run_id or "")
        assert run.tasks["wait"].output in [{"pid": p.pid} for p in workers.procs]


@pytest.mark.anyio
async def test_a_sub_solve_s_deadline_is_its_task_s_timeout_as_locally(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """A sub-solve task's ``timeout_s`` is its solve's deadline: the solve's run is stopped
    when it passes, the solve ends ``timed_out`` and its task fails saying so, as locally."""
    router = _held(tmp_path)
    router.plans[GOAL]["tasks"][0]["timeout_s"] = 1.0
    router.answers[GOAL] = {"action": "finish", "answer": "no supplier found", "cites": []}
    try:
        local, durable, _, _ = await both(model_server, workers, tmp_path, router)
    finally:
        (tmp_path / "w.go").touch()  # the held tool's threads may end
    # the task the deadline stopped is cancelled on both; its record's words differ between
    # a local run and a run on Temporal (sub-solve or not), so they are left out here
    for side in (local, durable):
        (wait,) = (run["wait"] for run in side["children"][0].pop("runs"))
        assert wait[0] == "cancelled"
    assert durable == local
    (child,) = durable["children"]
    assert child["status"] == "timed_out"
    assert child["reason"].startswith("the deadline passed in round 1 (1.0 s into the solve)")
    best = durable["runs"][0]["best"]
    assert best[0] == "failed" and best[3] == "SubSolveError"
    assert best[2].startswith("sub-solve <id> of task 'best' ended timed_out: the deadline passed")
    assert durable["status"] == "answered"


@pytest.mark.anyio
async def test_the_parent_s_deadline_stops_its_sub_solve_and_its_record_says_so(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """The parent's deadline passes while its sub-solve runs: the parent ends ``timed_out``
    and the sub-solve's record ends too, never left ``running``: stopped with its task
    (``cancelled``, as a local sub-solve stopped with its parent), or ``timed_out`` when its
    own deadline (the parent's) came first; which of the two is a race, locally too."""
    router = _held(tmp_path)
    model_server.responder = router
    store = tmp_path / "runs.db"
    try:
        async with OpenAIChat(
            "gpt-test", base_url=f"{model_server.url}/v1", api_key=DRIVER_KEY
        ) as llm:
            solution = await dagagent.solve(
                GOAL,
                temporal_tools.registry,
                llm,
                settings=RunSettings(executor=executor(workers), on_failure="continue"),
                store=store,
                sub_solves=True,
                deadline_s=1.5,
            )
    finally:
        (tmp_path / "w.go").touch()
    assert solution.status.value == "timed_out"
    with dagagent.RunStore(store) as runs:
        found = shape(runs, solution.solve_id)
    (child,) = found["children"]
    ended = (child["status"], child["rounds"][0][0])
    assert ended in (("cancelled", "cancelled"), ("timed_out", "timed_out")), child
    if ended[0] == "cancelled":
        assert child["reason"] == "the solve was stopped"
    (run,) = child["runs"]  # the round keeps its run
    assert run["wait"][0] == "cancelled"


@pytest.mark.anyio
@pytest.mark.parametrize("tool", ["hold", "hold_effect"])
async def test_stopping_the_driver_stops_the_sub_solve_and_records_it_cancelled(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path, tool: str
) -> None:
    """Cancelling the solve's call (Ctrl-C) while its sub-solve runs cancels the solve on the
    workers, and the sub-solve with it: both are recorded ``cancelled``, as locally. A call
    with side effects the stop cut off in the sub-solve's run is in doubt on that run's
    record, with its key, and was not made again."""
    router = _held(tmp_path, tool)
    model_server.responder = router
    store = tmp_path / "runs.db"
    ex = executor(workers)
    followed = anyio.Event()  # the driver follows the sub-solve's run

    def listen(event: Any) -> None:
        if isinstance(event, InSubSolve) and isinstance(event.event, RunStarted):
            followed.set()

    try:
        async with (
            OpenAIChat("gpt-test", base_url=f"{model_server.url}/v1", api_key=DRIVER_KEY) as llm,
            anyio.create_task_group() as tg,
        ):

            async def solve() -> None:
                await dagagent.solve(
                    GOAL,
                    temporal_tools.registry,
                    llm,
                    settings=RunSettings(executor=ex, on_failure="continue"),
                    store=store,
                    sub_solves=True,
                    listeners=[listen],
                )

            tg.start_soon(solve)
            await followed.wait()
            await anyio.to_thread.run_sync(_wait_for_start, tmp_path)
            tg.cancel_scope.cancel()
        with dagagent.RunStore(store) as runs:
            [parent] = [s for s in runs.list_solves() if s.goal == GOAL]
            record = runs.get_solve(parent.solve_id)
            assert (record.status, record.reason) == ("cancelled", "the solve was stopped")
            [child] = record.children
            below = runs.get_solve(child.solve_id)
            assert (below.status, below.reason) == ("cancelled", "the solve was stopped")
            assert {r.outcome for r in below.rounds} <= {"cancelled"}  # none left running
            [run_id] = [r.run_id for r in below.rounds if r.run_id is not None]
            wait = runs.get_run(run_id).tasks["wait"]
            doubts = [e for e in runs.effects(run_id) if e.in_doubt]
        assert wait.status.value == "cancelled"
        if tool == "hold_effect":  # named on a worker for the record, not made again
            assert "in doubt on the run's record" in (wait.error or ""), wait.error
            assert [(e.task_id, e.tool) for e in doubts] == [("wait", "hold_effect")]
            assert doubts[0].key.startswith("dga-")
            assert len(temporal_tools.started(tmp_path, "w")) == 1
        else:
            assert doubts == []
        # the sub-solve's workflow was cancelled on the server too (its held tool holds)
        async with ex.session():
            handle = ex._client().get_workflow_handle(solve_workflow_id(child.solve_id))
            with pytest.raises(WorkflowFailureError):
                await handle.result()
            described = await handle.describe()
            assert described.status is WorkflowExecutionStatus.CANCELED
    finally:
        (tmp_path / "w.go").touch()


@pytest.mark.anyio
async def test_with_a_budget_a_map_s_sub_solves_start_one_at_a_time_each_carved(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """Ten model calls, one kept for the joiner: the planner spent one, so the first
    sub-solve gets eight; it spends two, so the second gets six (they start one at a time,
    never holding the same calls); the parent's joiner spends its own after them."""
    router = Router({GOAL: MAP_PLAN}, {GOAL: FINISH})
    model_server.responder = router
    store = tmp_path / "runs.db"
    async with OpenAIChat("gpt-test", base_url=f"{model_server.url}/v1", api_key=DRIVER_KEY) as llm:
        solution = await dagagent.solve(
            GOAL,
            temporal_tools.registry,
            llm,
            settings=RunSettings(executor=executor(workers), on_failure="continue"),
            store=store,
            sub_solves=True,
            budget=dagagent.Budget(model_calls=10),
        )
    assert solution.ok, solution.reason
    assert solution.usage.sub_solves.calls == 4 and solution.usage.total.calls == 6
    with dagagent.RunStore(store) as runs:
        children = sorted(
            runs.get_solve(solution.solve_id).children, key=lambda c: c.link.element or 0
        )
        budgets = [(runs.get_solve(c.solve_id).options or {}).get("budget") for c in children]
    assert budgets == [{"model_calls": 8}, {"model_calls": 6}]  # the second after the first
    await replay(workers, solution, store, children=2)


def _metered(where: Path, task_id: str, i: Any, *after: str) -> dict[str, Any]:
    """A task calling ``metered`` (``max_calls=2``), counted in ``<where>/m.calls``."""
    args = {"name": "m", "where": str(where), "i": i}
    return {"id": task_id, "tool": "metered", "args": args, "depends_on": list(after)}


@pytest.mark.anyio
async def test_a_sub_solve_and_its_parent_share_a_tool_s_max_calls_as_locally(
    own_workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """``metered`` may be called twice in a solve: the parent's task calls it once, its
    sub-solve's first task once more (counting on from the parent's count), so the
    sub-solve's second task fails with ``ToolLimitError``; the sub-solve's call counts for
    the parent, whose round 2 call fails too. The same records, messages and counts on
    Temporal as locally; the tool ran twice each time; the new histories replay."""
    from .temporal_fixtures import EXTRA

    own_workers.start(1, tools=EXTRA)
    child_goal = "Count in EU"
    router = Router(
        {
            GOAL: [
                {
                    "tasks": [
                        _metered(tmp_path, "m1", 1),
                        {
                            "id": "best",
                            "instruction": child_goal,
                            "solve": True,
                            "tools": ["metered", "echo"],
                            "depends_on": ["m1"],
                        },
                    ]
                },
                {
                    "tasks": [
                        _metered(tmp_path, "m4", 4),
                        {"id": "note", "tool": "echo", "args": {"value": "again"}},
                    ]
                },
            ],
            child_goal: {
                "tasks": [_metered(tmp_path, "m2", 2), _metered(tmp_path, "m3", "${m2}", "m2")]
            },
        },
        {
            GOAL: [
                {"action": "replan", "feedback": "count once more"},
                {"action": "finish", "answer": "counted", "cites": ["note"]},
            ],
            child_goal: {"action": "finish", "answer": "counted once", "cites": ["m2"]},
        },
    )
    calls = tmp_path / "m.calls"
    counted = []

    def between() -> None:
        counted.append(len(calls.read_text().split()))
        calls.unlink()

    local, durable, solution, _ = await both(
        model_server,
        own_workers,
        tmp_path,
        router,
        registry=temporal_tools.extra,
        between=between,
        max_rounds=2,
    )
    counted.append(len(calls.read_text().split()))
    assert durable == local
    assert counted == [2, 2]  # the tool ran twice in each solve, parent and child together
    assert durable["status"] == "answered", durable["reason"]
    first, second = durable["runs"]
    assert first["m1"][:2] == ["succeeded", 1]
    assert first["best"][:2] == ["succeeded", "counted once"]
    (child,) = durable["children"]
    (child_run,) = child["runs"]
    assert child_run["m2"][:2] == ["succeeded", 2]
    m3_status, _, m3_error, m3_type, _ = child_run["m3"]
    assert (m3_status, m3_type) == ("failed", "ToolLimitError")
    assert "may be called at most 2 times in a solve" in m3_error, m3_error
    m4_status, _, m4_error, m4_type, _ = second["m4"]
    assert (m4_status, m4_type) == ("failed", "ToolLimitError")
    assert "may be called at most 2 times in a solve" in m4_error, m4_error
    await replay(own_workers, solution, tmp_path / "temporal.db", children=1)


@pytest.mark.anyio
async def test_a_limit_the_parent_used_up_leaves_its_sub_solve_no_call_as_locally(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """A policy's limit lets ``add`` be called once in the solve: the parent's task calls
    it, so its sub-solve's call of ``add`` is denied by the limit (counted across the
    solve), on Temporal as locally; the new histories replay."""
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps({"default": "allow", "rules": [], "limits": [{"tool": "add", "max_calls": 1}]})
    )
    child_goal = "Add in EU"
    router = Router(
        {
            GOAL: {
                "tasks": [
                    {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
                    {
                        "id": "best",
                        "instruction": child_goal,
                        "solve": True,
                        "tools": ["add", "echo"],
                        "depends_on": ["a"],
                    },
                ]
            },
            child_goal: {
                "tasks": [
                    {"id": "b", "tool": "add", "args": {"a": 2, "b": 3}},
                    {"id": "note", "tool": "echo", "args": {"value": "tried"}},
                ]
            },
        },
        {
            GOAL: {"action": "finish", "answer": "3", "cites": ["a"]},
            child_goal: {"action": "finish", "answer": "none left", "cites": ["note"]},
        },
    )
    local, durable, solution, _ = await both(
        model_server, workers, tmp_path, router, max_rounds=1, policy=rules
    )
    assert durable == local
    assert durable["status"] == "answered", durable["reason"]
    assert durable["runs"][0]["a"][:2] == ["succeeded", 3]
    (child,) = durable["children"]
    b_status, _, b_error, _, _ = child["runs"][0]["b"]
    assert b_status == "denied"
    assert "at most 1 time in a solve" in b_error, b_error
    await replay(workers, solution, tmp_path / "temporal.db", children=1)


@pytest.mark.anyio
async def test_a_map_s_sub_solves_share_the_count_one_after_another(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """A policy's limit lets ``add`` be called twice in the solve; the parent calls it once,
    then each of a map's two sub-solves once: one of them gets the last call and the other's
    is denied, on Temporal as locally (locally the two run at once and share the parent's
    ledger; on Temporal they hold the limit in turn, the first element first)."""
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps({"default": "allow", "rules": [], "limits": [{"tool": "add", "max_calls": 2}]})
    )
    plan = {
        "tasks": [
            {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
            {"id": "regions", "tool": "echo", "args": {"value": ["EU", "US"]}},
            {
                "id": "best",
                "for_each": "${regions}",
                "instruction": "Add in ${@item}",
                "solve": True,
                "tools": ["add", "echo"],
                "depends_on": ["a"],
            },
        ]
    }
    child_plan = {
        "tasks": [
            {"id": "b", "tool": "add", "args": {"a": 2, "b": 3}},
            {"id": "note", "tool": "echo", "args": {"value": "tried"}},
        ]
    }
    done = {"action": "finish", "answer": "tried", "cites": ["note"]}
    router = Router(
        {GOAL: plan, "Add in EU": child_plan, "Add in US": child_plan},
        {GOAL: FINISH, "Add in EU": done, "Add in US": done},
    )
    local, durable, solution, _ = await both(
        model_server, workers, tmp_path, router, max_rounds=1, policy=rules
    )

    def outcomes(shape: dict[str, Any]) -> list[Any]:
        return sorted(tuple(c["runs"][0]["b"][:3]) for c in shape["children"])

    assert outcomes(durable) == outcomes(local)
    denied, granted = outcomes(durable)
    assert (denied[0], granted[:2]) == ("denied", ("succeeded", 5))
    assert "at most 2 times in a solve" in denied[2], denied
    eu, us = durable["children"]
    assert (eu["runs"][0]["b"][0], us["runs"][0]["b"][0]) == ("succeeded", "denied")
    await replay(workers, solution, tmp_path / "temporal.db", children=2)


def test_a_sub_solve_counts_on_from_its_input_and_its_end_says_what_it_counted() -> None:
    """A sub-solve's workflow starts its ledger from its input's (its parent's counts), a
    run of it continued as new from what the run before carried (which counted on from
    them); its end step says what it counted, for the parent to count on."""
    from dataclasses import asdict

    from dagagent.workflows.temporal_solve import SolveWorkflow
    from dagagent.workflows.temporal_solve._workflow import SolveInput

    given = {"tool:metered": [1, 100.0], "limit:1": [3, 90.0]}
    inp = SolveInput("s1", "g", {}, 2, 1, True, {}, "q", ledger=given)
    workflow = SolveWorkflow(asdict(inp))
    assert workflow.ledger == given
    workflow.ledger["tool:metered"] = [2, 120.0]
    end = workflow._end("answered", "answered in round 1")[-1]
    assert end["ledger"] == {"tool:metered": [2, 120.0], "limit:1": [3, 90.0]}
    carried = {"round": 2, "seq": 3, "ledger": {"tool:metered": [2, 120.0]}}
    later = SolveWorkflow(
        asdict(SolveInput("s1", "g", {}, 2, 1, True, {}, "q", carried=carried, ledger=given))
    )
    assert later.ledger == {"tool:metered": [2, 120.0]}
    # a solve that counted nothing says nothing of it
    assert (
        "ledger"
        not in SolveWorkflow(asdict(SolveInput("s2", "g", {}, 1, 1, True, {}, "q")))._end(
            "failed", "r"
        )[-1]
    )
