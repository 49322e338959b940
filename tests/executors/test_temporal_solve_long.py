"""Long solves on Temporal: the solve's workflow continues as new between rounds (forced
here by a small ``history_events``), and the solve is recorded as a local one, whatever
run of the workflow the driver (or ``attach``) reads it from.

Nothing waits on a clock: a test waits for a state (a request reaching the model server, a
round the driver heard of, the workflow's end).
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import asdict
from datetime import timezone
from functools import partial
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest
from typer.testing import CliRunner

import dagagent
from dagagent.budget import Budget
from dagagent.llm import wire
from dagagent.settings import RunSettings

pytest.importorskip("temporalio")

import temporal_tools  # the workers import it too
from llm_server import LLMTestServer, Recorded, Reply, SSEReply

from dagagent.executors.temporal import TemporalExecutor
from dagagent.workflows.temporal_solve import attach_solve, solve_workflow_id

from .temporal_fixtures import READY_S, ROOT, Workers
from .test_temporal_solve import DRIVER_KEY, FAST_RETRY, client_of, executor, replay

pytestmark = [pytest.mark.slow, pytest.mark.asyncio_only("Temporal's client runs on asyncio")]

#: The smallest history length the executor takes: a run of the solve's workflow holds
#: about five rounds.
SHORT = 100
#: The events a round adds, at most: a run ends at most this far past ``SHORT``.
ROUND_EVENTS = 40


@pytest.fixture
def model_server() -> Iterator[LLMTestServer]:
    with LLMTestServer() as srv:
        yield srv


class Rounds:
    """A model for a solve of ``rounds`` rounds: round ``k``'s plan (planner, then
    replanner) adds ``k`` and 1 (a new success each round) and echoes a long note (so that
    the state the workflow carries goes by reference); the joiner asks for another plan until
    round ``rounds``, or until it must answer (the budget ran low), where it answers.
    ``gates``: request numbers (1-based) held until
    their ``release`` is set."""

    def __init__(self, rounds: int, gates: tuple[int, ...] = ()) -> None:
        self.rounds = rounds
        self.plans = self.joins = self.count = 0
        self.lock = threading.Lock()
        self.held = {n: threading.Event() for n in gates}
        self.release = {n: threading.Event() for n in gates}

    def __call__(self, request: Recorded) -> Reply | SSEReply:
        body = request.json
        fmt = (body.get("response_format") or {}).get("json_schema") or {}
        name = fmt.get("name", "")
        actions = (fmt.get("schema") or {}).get("properties", {}).get("action", {}).get("enum")
        with self.lock:
            self.count += 1
            n = self.count
            if "plan" in name:
                self.plans += 1
                k = self.plans
                answer: dict[str, Any] = {
                    "goal": "count up",
                    "tasks": [
                        {"id": f"up{k}", "tool": "add", "args": {"a": k, "b": 1}},
                        {"id": f"note{k}", "tool": "echo", "args": {"value": f"{k}" * 600}},
                    ],
                }
            else:
                self.joins += 1
                k = self.joins
                answer = (
                    {"action": "replan", "feedback": f"round {k} done, go on"}
                    if k < self.rounds and actions != ["finish"]
                    else {"action": "finish", "answer": f"counted to {k + 1}", "cites": []}
                )
        if n in self.held:
            self.held[n].set()
            self.release[n].wait(READY_S)
        reply = wire.openai_text(json.dumps(answer), input_tokens=100 + n, output_tokens=20 + n)
        return SSEReply(wire.openai_events(reply)) if body.get("stream") else Reply(json=reply)


async def runs_of(ex: TemporalExecutor, workflow: str) -> list[tuple[Any, Any]]:
    """Each run of ``workflow``, first to last (following its continue-as-new chain): the
    server's description of it and its history."""
    assert ex.client is not None
    latest = await ex.client.get_workflow_handle(workflow).describe()
    run_id: str | None = latest.raw_description.workflow_execution_info.first_run_id
    found = []
    while run_id:
        handle = ex.client.get_workflow_handle(workflow, run_id=run_id)
        described = await handle.describe()
        history = await handle.fetch_history()
        found.append((described.raw_description.workflow_execution_info, history))
        last = history.events[-1]
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.HasField("workflow_execution_continued_as_new_event_attributes")
            else None
        )
    return found


async def assert_carried_once(ex: TemporalExecutor, workflow: str, chain: list[Any]) -> None:
    """What each run of ``workflow`` (its ``chain``) started with: its first argument (where
    the runs before left the solve) stays about the same size however many steps came
    before, and after it one argument per earlier run, holding that run's own steps and
    passed on unchanged (the same reference to the same stored value: each step is stored
    once); together with the last run's own steps, they are every step of the solve, each
    once, in order."""
    assert ex.client is not None
    inputs = [
        list(history.events[0].workflow_execution_started_event_attributes.input.payloads)
        for _, history in chain
    ]
    for k, payloads in enumerate(inputs):
        assert len(payloads) == 1 + k  # the input, then one argument per earlier run
        if k > 1:
            assert payloads[1:k] == inputs[k - 1][1:]  # passed on as it came
    sizes = [_stored_size(payloads[0]) for payloads in inputs[1:]]
    carried = [_stored_size(p) for p in inputs[-1][1:]]
    # (with every step so far in the input, the last run's would be larger than the second's
    # by all the steps of the runs between them)
    assert max(sizes) - min(sizes) < min(carried) / 4, (sizes, carried)
    runs = await ex.client.data_converter.decode(inputs[-1][1:])
    firsts = await ex.client.data_converter.decode([payloads[0] for payloads in inputs])
    for k, run in enumerate(runs):  # each run's own steps: from the round it began with
        begun = firsts[k]["carried"]["round"] if k else None
        assert run["steps"][0]["step"] == ("round" if k else "start")
        assert run["steps"][0].get("round") == begun
    steps = [step for run in runs for step in run["steps"]]
    result = await ex.client.get_workflow_handle(workflow).result()
    assert firsts[-1]["carried"]["round"] == next(
        s["round"] for s in result[len(steps) :] if s["step"] == "round"
    )
    assert result[: len(steps)] == steps


def _stored_size(payload: Any) -> int:
    """The size of the value ``payload`` (in a history) stands for: in the payload store,
    or inline."""
    return int(
        payload.external_payloads[0].size_bytes if payload.external_payloads else payload.ByteSize()
    )


def _at(event: Any) -> float:
    """When the server wrote history ``event`` (seconds since the epoch)."""
    return float(event.event_time.ToDatetime(tzinfo=timezone.utc).timestamp())


def record_of(store: Path, solve_id: str) -> dict[str, Any]:
    """What the store holds of solve ``solve_id``, without what differs between two solves
    of the same script (ids, times, which executor)."""
    with dagagent.RunStore(store) as runs:
        record = runs.get_solve(solve_id)
        rounds = []
        for r in record.rounds:
            run = runs.get_run(r.run_id) if r.run_id else None
            # a round whose planning was refused: no run (Temporal), or an empty one (local)
            tasks = {t: (x.status.value, x.output) for t, x in run.tasks.items()} if run else {}
            rounds.append((r.round, r.outcome, r.reason, r.feedback, r.decision, tasks))
        calls = [
            (c.role, c.round, c.seq, c.input_tokens, c.output_tokens, c.text)
            for c in runs.model_calls(solve_id=solve_id)
        ]
    return {
        "status": record.status,
        "reason": record.reason,
        "answer": record.answer,
        "cites": record.cites,
        "usage": {k: v.model_dump() for k, v in (record.usage or {}).items()},
        "rounds": rounds,
        "calls": calls,
    }


async def local_record(
    model_server: LLMTestServer,
    rounds: int,
    store: Path,
    on_failure: Literal["cancel", "continue"] = "cancel",
    **options: Any,
) -> dict[str, Any]:
    """The record of the same script solved locally (with ``dagagent.solve``'s
    ``options``)."""
    model_server.responder = Rounds(rounds)
    async with client_of(model_server) as llm:
        local = await dagagent.solve(
            "count up",
            temporal_tools.registry,
            llm,
            settings=RunSettings(retry=FAST_RETRY, on_failure=on_failure),
            store=store,
            max_rounds=rounds,
            **options,
        )
    assert local.status.value == "answered", local.reason
    return record_of(store, local.solve_id)


@pytest.mark.anyio
async def test_a_long_solve_continues_as_new_and_is_recorded_as_a_local_one(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """Twelve rounds with ``history_events=100``: the solve's workflow continues as new
    between rounds, several times; every run's history stays near that length; the driver
    follows it across its runs and hears and records every round and model call once; the
    record equals a local solve's, down to the budget (of model calls) that runs out in a
    later run, where what the earlier runs spent counts; the deadline stays the first run's;
    each run's input stays the same size, its earlier runs' steps stored once; each run's
    history replays."""
    rounds = 12
    deadline_s = 600.0
    options: dict[str, Any] = {"budget": Budget(model_calls=19), "deadline_s": deadline_s}
    model_server.responder = Rounds(rounds)
    ex = executor(workers, history_events=SHORT)
    store = tmp_path / "temporal.db"
    events: list[Any] = []
    async with client_of(model_server) as llm:
        solution = await dagagent.solve(
            "count up",
            temporal_tools.registry,
            llm,
            settings=RunSettings(executor=ex, retry=FAST_RETRY),
            store=store,
            listeners=[events.append],
            max_rounds=rounds,
            **options,
        )
    # the budget's 19 calls: nine rounds, then the tenth's replanning is refused (one call
    # is kept for the joiner's last answer, from the ninth round's results), as locally
    assert solution.status.value == "answered", solution.reason
    assert "answered from round 9's results when the budget ran low in round 10" in (
        solution.reason
    )
    assert [r.number for r in solution.rounds] == list(range(1, 11))
    made = [c for c in solution.calls if c.input_tokens]  # the refused call is recorded too
    assert len(made) == 19
    assert [c.seq for c in solution.calls] == list(range(1, len(solution.calls) + 1))
    kinds = [e.kind for e in events]
    assert kinds.count("round.started") == 10
    assert kinds.count("round.finished") == 10
    assert kinds.count("model_call.finished") == len(solution.calls)
    chain = await runs_of(ex, solve_workflow_id(solution.solve_id))
    assert len(chain) >= 3, [info.history_length for info, _ in chain]
    start = next(  # the solve's start, in workflow time: its first workflow task's
        _at(e) for e in chain[0][1].events if e.HasField("workflow_task_started_event_attributes")
    )
    await assert_carried_once(ex, solve_workflow_id(solution.solve_id), chain)
    for info, history in chain:
        assert info.history_length <= SHORT + ROUND_EVENTS
        await replay(ex, history)
        now = start  # workflow time: the start of the workflow task under way
        for event in history.events:  # a model step waits until the solve's deadline
            if event.HasField("workflow_task_started_event_attributes"):
                now = _at(event)
            elif event.HasField("timer_started_event_attributes"):
                waits = event.timer_started_event_attributes.start_to_fire_timeout
                # recorded times, not a measured duration: equal but for their rounding
                fires = now + waits.ToTimedelta().total_seconds()
                assert fires == pytest.approx(start + deadline_s, abs=1e-2)
    here = record_of(store, solution.solve_id)
    there = await local_record(model_server, rounds, tmp_path / "local.db", **options)
    assert here == there


def _driver(workers: Workers, model_server: LLMTestServer, store: Path, rounds: int) -> str:
    """A driver process's script: a solve of ``rounds`` rounds on the workers, continuing
    as new every few rounds."""
    return (
        "import anyio, dagagent, temporal_tools\n"
        "from dagagent.executors.temporal import TemporalExecutor\n"
        "from dagagent.llm import OpenAIChat\n"
        "async def main():\n"
        f"    ex = TemporalExecutor({workers.address!r}, task_queue={workers.queue!r}, "
        f"payloads={str(workers.payloads)!r}, history_events={SHORT})\n"
        f"    async with OpenAIChat('gpt-test', base_url={model_server.url + '/v1'!r}, "
        f"api_key={DRIVER_KEY!r}) as llm:\n"
        "        await dagagent.solve('count up', temporal_tools.registry, llm, "
        f"settings=dagagent.RunSettings(executor=ex), store={str(store)!r}, "
        f"max_rounds={rounds})\n"
        "anyio.run(main)\n"
    )


@pytest.mark.anyio
async def test_the_driver_killed_attach_follows_the_solve_across_continue_as_new(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """SIGKILL the driver in the solve's first run; the solve continues as new without it;
    ``attach_solve`` joins it in a later run while it goes on, follows it across the next
    runs to its end, and the record (every round and model call once) equals a local
    solve's; ``dagagent attach`` of the finished solve records nothing twice."""
    rounds = 14
    model = Rounds(rounds, gates=(3, 19))  # round 2's replanner; round 10's
    model_server.responder = model
    store = tmp_path / "temporal.db"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DAGAGENT_", "OPENAI_"))},
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
    }
    driver = await anyio.open_process(
        [sys.executable, "-c", _driver(workers, model_server, store, rounds)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )
    try:
        assert await anyio.to_thread.run_sync(model.held[3].wait, READY_S)
        driver.send_signal(signal.SIGKILL)
    finally:
        driver.kill()
        await driver.wait()
    with dagagent.RunStore(store) as runs:
        [summary] = runs.list_solves()
        solve_id = summary.solve_id
        assert runs.get_solve(solve_id).status in ("running", "interrupted")
    model.release[3].set()
    assert await anyio.to_thread.run_sync(model.held[19].wait, READY_S)
    ex = TemporalExecutor(workers.address, task_queue=workers.queue, payloads=workers.payloads)
    async with ex.session():
        before = await runs_of(ex, solve_workflow_id(solve_id))
    assert len(before) >= 2  # it continued as new while no driver followed it

    heard: list[Any] = []

    def listener(event: Any) -> None:
        heard.append(event)
        if event.kind == "round.started" and event.round == 10:
            model.release[19].set()  # the rest of the solve happens while attach follows

    with dagagent.RunStore(store) as runs:
        solution = await attach_solve(solve_id, executor=ex, store=runs, listeners=[listener])
    assert solution.status.value == "answered", solution.reason
    assert [r.number for r in solution.rounds] == list(range(1, rounds + 1))
    assert [e.round for e in heard if e.kind == "round.started"] == list(range(1, rounds + 1))
    async with ex.session():
        after = await runs_of(ex, solve_workflow_id(solve_id))
        await assert_carried_once(ex, solve_workflow_id(solve_id), after)
    assert len(after) > len(before)  # and continued as new again while attach followed it
    for _, history in after:
        await replay(ex, history)
    recorded = record_of(store, solve_id)
    cli = partial(
        CliRunner().invoke,
        dagagent.cli.app,
        [
            "attach",
            solve_id,
            "--store",
            str(store),
            "--json",
            "--temporal-address",
            workers.address,
            "--task-queue",
            workers.queue,
            "--payload-store",
            str(workers.payloads),
        ],
    )
    result = await anyio.to_thread.run_sync(cli)  # the command runs its own event loop
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["answer"] == f"counted to {rounds + 1}"
    assert record_of(store, solve_id) == recorded
    assert recorded == await local_record(model_server, rounds, tmp_path / "local.db")


#: The two runs of a seven-round solve whose workflow continued as new before each run's
#: steps became an argument of their own (``_CARRIES_RUNS``): the first run's input held
#: every step and output so far. Made by that version's workflow, every payload inline.
BEFORE_RUNS = [
    ROOT / "tests" / "data" / "temporal" / f"solve_continued_before_runs_{k}.json.gz"
    for k in (1, 2)
]


def _history(path: Path) -> Any:
    from temporalio.client import WorkflowHistory

    with gzip.open(path, "rt") as f:
        return WorkflowHistory.from_json("dagagent-solve-before", f.read())


def _decoded(payloads: Any) -> list[Any]:
    """Inline JSON payloads, as the workflow gets them."""
    return [json.loads(p.data) for p in payloads]


@pytest.mark.anyio
async def test_a_solve_continued_as_new_before_each_run_carried_its_own_steps_replays(
    tmp_path: Path,
) -> None:
    """The histories of a solve that continued as new carrying every step in its input
    replay on this version (its first run continues as new as it did, one argument), and a
    run that starts from such an input has the earlier steps under their numbers and the
    outputs so far, and passes them on as one earlier run's."""
    from temporalio.worker import Replayer
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from dagagent.executors.temporal import RunWorkflow
    from dagagent.executors.temporal._payloads import DirectoryPayloads, data_converter
    from dagagent.workflows.temporal_solve import SolveWorkflow

    histories = [_history(p) for p in BEFORE_RUNS]
    replayer = Replayer(
        workflows=[SolveWorkflow, RunWorkflow],
        data_converter=data_converter(DirectoryPayloads(tmp_path)),
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("dagagent")
        ),
    )
    for history in histories:
        await replayer.replay_workflow(history)
    first, second = (h.events for h in histories)
    [given] = _decoded(second[0].workflow_execution_started_event_attributes.input.payloads)
    carried = given["carried"]
    assert carried["steps"][0]["step"] == "start" and carried["outputs"]
    workflow = SolveWorkflow(given)
    assert workflow.steps_since(0)["total"] == len(carried["steps"])
    assert workflow.steps_since(0)["steps"] == carried["steps"][:50]
    assert workflow.outputs == carried["outputs"]
    assert workflow.earlier == [{"steps": carried["steps"], "outputs": carried["outputs"]}]
    assert workflow.first == len(carried["steps"])
    [moved] = _decoded(
        first[-1].workflow_execution_continued_as_new_event_attributes.input.payloads
    )
    assert moved == given


def test_a_run_continued_as_new_numbers_the_earlier_runs_steps_on() -> None:
    """A run's earlier runs' arguments, in order: their steps numbered on from 0 (the
    ``steps`` query answers them), their outputs merged (a later run's output of a task
    replaces an earlier one's); what the input carries keeps only what the rules need."""
    from dagagent.workflows.temporal_solve import SolveWorkflow
    from dagagent.workflows.temporal_solve._workflow import SolveInput

    inp = SolveInput("s1", "g", {}, 9, 1, True, {}, "q", carried={"round": 4, "seq": 7})
    runs = [
        {"steps": [{"step": "start"}, {"step": "round", "round": 1}], "outputs": {"a": 1}},
        {"steps": [{"step": "round", "round": 3}], "outputs": {"a": 2, "b": 3}},
    ]
    workflow = SolveWorkflow(asdict(inp), *runs)
    assert workflow.inp == inp
    assert workflow.steps_since(0) == {"steps": runs[0]["steps"] + runs[1]["steps"], "total": 3}
    assert workflow.steps_since(2) == {"steps": runs[1]["steps"], "total": 3}
    assert workflow.first == 3 and workflow.seq == 7
    assert workflow.outputs == {"a": 2, "b": 3}
    assert workflow.earlier == runs


@pytest.mark.anyio
async def test_a_policy_s_limit_counts_on_across_continue_as_new(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """A policy file whose limit lets ``add`` be called six times, over eight rounds that
    call it once each, with ``history_events=100``: the solve's workflow continues as new
    before round 7, and the new run counts on from the six calls the earlier one counted,
    so rounds 7 and 8 have their ``add`` denied by the limit, as in the same solve run
    locally (the records are equal, the message counts the solve's calls); each run's
    history replays."""
    rounds = 8
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps({"default": "allow", "rules": [], "limits": [{"tool": "add", "max_calls": 6}]})
    )
    model_server.responder = Rounds(rounds)
    ex = executor(workers, history_events=SHORT)
    store = tmp_path / "temporal.db"
    async with client_of(model_server) as llm:
        solution = await dagagent.solve(
            "count up",
            temporal_tools.registry,
            llm,
            settings=RunSettings(executor=ex, retry=FAST_RETRY, on_failure="continue"),
            store=store,
            max_rounds=rounds,
            policy=rules,
        )
    assert solution.status.value == "answered", solution.reason
    chain = await runs_of(ex, solve_workflow_id(solution.solve_id))
    assert len(chain) >= 2, [info.history_length for info, _ in chain]
    for _, history in chain:
        await replay(ex, history)
    here = record_of(store, solution.solve_id)
    assert [r[5][f"up{r[0]}"][0] for r in here["rounds"]] == ["succeeded"] * 6 + ["denied"] * 2
    with dagagent.RunStore(store) as runs:
        last = runs.get_run(solution.rounds[-1].run_id or "")
    assert "may be called at most 6 times in a solve" in (last.tasks["up8"].error or "")
    there = await local_record(
        model_server, rounds, tmp_path / "local.db", "continue", policy=rules
    )
    assert here == there
