"""Streamed planning in a solve on Temporal: round 1's run starts on the workers before the
model has finished writing its plan, as a local streamed solve's does.

The model is a loopback server speaking OpenAI's wire format; it holds the plan's stream
after its first task until that task's tool has been entered on a worker (a marker file
the tool writes), so a solve that waited for the whole plan never gets its first tool
entered and the test fails instead of hanging.
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
import anyio.to_thread
import pytest
from typer.testing import CliRunner

import dagagent
from dagagent.llm import OpenAIChat, wire
from dagagent.settings import RunSettings, TaskRetryPolicy

pytest.importorskip("temporalio")

import temporal_tools  # the workers import it too
from eventually import until, wait_until
from llm_server import LLMTestServer, Recorded, Reply, SSEReply

from dagagent.executors.temporal import TemporalExecutor, workflow_id
from dagagent.workflows.temporal_solve import solve_workflow_id

from .temporal_fixtures import READY_S, ROOT, TOOLS, Workers

pytestmark = [pytest.mark.slow, pytest.mark.asyncio_only("Temporal's client runs on asyncio")]

FAST_RETRY = TaskRetryPolicy(base_delay_s=0.01, jitter=0)
FINISH = {"action": "finish", "answer": "3 doubled is 6", "cites": ["c"]}


def plan_of(where: Path) -> dict[str, Any]:
    return {
        "goal": "g",
        "tasks": [
            {"id": "first", "tool": "hold", "args": {"name": "first", "where": str(where)}},
            {"id": "b", "tool": "add", "args": {"a": 1, "b": 2}},
            {"id": "c", "tool": "double", "args": {"x": "${b}"}},
            {"id": "d", "tool": "echo", "args": {"value": "and " + "more " * 40}},
        ],
    }


class StreamingModel:
    """Streams the plan, holding it after its first task until that task's tool was
    entered (``entered_mid_plan`` says whether it was); the joiner answers ``FINISH``."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.plan = plan_of(where)
        self.entered_mid_plan = False
        self.count = 0
        self.lock = threading.Lock()

    def _hold_until_entered(self) -> None:
        try:
            wait_until(
                lambda: temporal_tools.started(self.where, "first"),
                "the first task's tool was entered",
                timeout=READY_S,
            )
        except BaseException:
            return  # not entered: the rest of the plan follows, the test fails on the flag
        finally:
            (self.where / "first.go").touch()  # the tool may end now
        self.entered_mid_plan = True

    def __call__(self, request: Recorded) -> Reply | SSEReply:
        body = request.json
        name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
        with self.lock:
            self.count += 1
            n = self.count
        if "plan" not in name:
            reply = wire.openai_text(json.dumps(FINISH), input_tokens=100 + n, output_tokens=20)
            return SSEReply(wire.openai_events(reply)) if body.get("stream") else Reply(json=reply)
        text = json.dumps(self.plan)
        reply = wire.openai_text(text, input_tokens=100 + n, output_tokens=20)
        if not body.get("stream"):
            return Reply(json=reply)
        events = wire.openai_events(reply, chunk_size=8)
        # held once the reader has seen the task after the first (it knows a task is whole
        # when the next one begins): the rest is the bulk of the plan
        next_begun = text.index('{"id": "c"')
        gate = next_begun // 8 + 2  # events: the role's, then 8 characters each
        assert gate < len(events) - 4  # much of the plan is still to come
        return SSEReply(events, gate=(gate, self._hold_until_entered))


@pytest.fixture
def model_server() -> Iterator[LLMTestServer]:
    with LLMTestServer() as srv:
        yield srv


def _records(store: Path, solution: dagagent.Solution, where: Path) -> dict[str, Any]:
    """What the store has of ``solution``, without what differs between two solves (ids,
    times, the held tool's folder ``where`` and output)."""

    def same(text: str | None) -> str | None:
        return text.replace(str(where), "WHERE") if text is not None else None

    def written(text: str | None) -> str | None:
        """A call's text; of an answer cut at an invalid task, up to that task (where the
        stream was closed after it depends on how the pieces arrived)."""
        if text is None or "no_such_tool" not in text:
            return same(text)
        return text[: text.index("no_such_tool")]

    with dagagent.RunStore(store) as runs:
        record = runs.get_solve(solution.solve_id)
        calls = runs.model_calls(solve_id=solution.solve_id)
        ran = []  # each round's run, after the runs of its earlier attempts (its parents)
        for r in record.rounds:
            chain, at = [], r.run_id
            while at is not None and runs.exists(at) and at not in [x.run_id for x in ran]:
                chain.append(runs.get_run(at))
                at = chain[-1].parent_id
            ran.extend(reversed(chain))
        names = {r.run_id: f"run{i}" for i, r in enumerate(ran)}

        def named(text: str) -> str:  # the runs a reason names, by their places
            for run_id, name in names.items():
                text = text.replace(run_id, name)
            return text

        return {
            "status": record.status,
            "rounds": [
                (r.round, names.get(r.run_id or ""), r.outcome, named(r.reason), r.decision)
                for r in record.rounds
            ],
            "calls": [
                (
                    c.role,
                    c.round,
                    names.get(c.run_id or ""),
                    c.input_tokens,
                    c.status,
                    written(c.text),
                )
                for c in calls
            ],
            "runs": [
                {
                    "status": run.status,
                    "parent": names.get(run.parent_id or ""),
                    "plan": same(run.plan.to_json(indent=None)),
                    "tasks": {
                        tid: (r.status.value, r.output if tid != "first" else None, r.error)
                        for tid, r in run.tasks.items()
                    },
                    "planned": sorted(run.planned_at),
                }
                for run in ran
            ],
        }


def _same_records(got: dict[str, Any], want: dict[str, Any]) -> None:
    """``got`` is ``want``, item by item (each run's too), naming the first difference."""
    assert len(got["runs"]) == len(want["runs"])
    for i, (g, w) in enumerate(zip(got["runs"], want["runs"], strict=True)):
        for k in w:
            assert g[k] == w[k], (i, k, g[k], w[k])
    for key in want:
        assert got[key] == want[key], (key, got[key], want[key])


@pytest.mark.anyio
async def test_round_one_s_first_tool_is_entered_while_the_plan_is_written(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """The first task's tool is entered on a worker while the model still holds the rest
    of the plan; the solve ends as a local streamed solve of the same answers ends, with
    the same records; round 1's run is a child of the solve's workflow, and the history
    replays."""
    from .test_temporal_solve import history_of, replay

    here, there = tmp_path / "temporal", tmp_path / "local"
    here.mkdir()
    there.mkdir()
    model = StreamingModel(here)
    model_server.responder = model
    heard: list[Any] = []
    heard_here: list[Any] = []
    ex = TemporalExecutor(workers.address, task_queue=workers.queue, payloads=workers.payloads)
    store = tmp_path / "temporal.db"
    async with OpenAIChat("gpt-test", base_url=f"{model_server.url}/v1", api_key="k") as llm:
        solution = await dagagent.solve(
            "double 1 + 2",
            temporal_tools.registry,
            llm,
            settings=RunSettings(executor=ex, retry=FAST_RETRY),
            store=store,
            listeners=[heard.append],
        )
    assert model.entered_mid_plan, "the first tool waited for the whole plan"
    assert solution.status.value == "answered", solution.reason
    [rnd] = solution.rounds
    assert rnd.result is not None and rnd.result.tasks["c"].output == 6

    local_model = StreamingModel(there)
    model_server.responder = local_model
    local_store = tmp_path / "local.db"
    async with OpenAIChat("gpt-test", base_url=f"{model_server.url}/v1", api_key="k") as llm:
        local = await dagagent.solve(
            "double 1 + 2",
            temporal_tools.registry,
            llm,
            settings=RunSettings(retry=FAST_RETRY),
            store=local_store,
            listeners=[heard_here.append],
        )
    assert local_model.entered_mid_plan

    def parsed(events: list[Any]) -> list[str]:
        return [e.task_id for e in events if e.kind == "task.parsed"]

    assert parsed(heard) == parsed(heard_here) == ["first", "b", "c", "d"]
    got, want = _records(store, solution, here), _records(local_store, local, there)
    _same_records(got, want)

    async with ex.session():
        _, history = await history_of(ex, solve_workflow_id(solution.solve_id))
        await replay(ex, history)
        run_info, run_history = await history_of(ex, workflow_id(rnd.result.run_id))
        assert run_info.parent_execution.workflow_id == solve_workflow_id(solution.solve_id)
        await replay(ex, run_history)


FIRST_ANSWER = {
    "goal": "g",
    "tasks": [
        {"id": "b", "tool": "add", "args": {"a": 1, "b": 2}},
        {"id": "x", "tool": "no_such_tool", "args": {}},
        {"id": "d", "tool": "echo", "args": {"value": "and " + "more " * 40}},
    ],
}
REST_ANSWER = {"goal": "g", "tasks": [{"id": "c", "tool": "double", "args": {"x": "${b}"}}]}


class HealingModel:
    """The first plan names a tool nobody has after a valid task; the second answer is the
    rest of the plan; the joiner answers ``FINISH``."""

    def __init__(self) -> None:
        self.answers = [FIRST_ANSWER, REST_ANSWER, FINISH]
        self.lock = threading.Lock()

    def __call__(self, request: Recorded) -> Reply | SSEReply:
        body = request.json
        with self.lock:
            n = 4 - len(self.answers)
            answer = self.answers.pop(0)
        reply = wire.openai_text(json.dumps(answer), input_tokens=100 + n, output_tokens=20)
        return SSEReply(wire.openai_events(reply)) if body.get("stream") else Reply(json=reply)


@pytest.mark.anyio
async def test_a_plan_rejected_halfway_is_healed_on_a_run_of_its_own_as_locally(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """An invalid task stops the stream: its run stops (what runs finishes, under
    ``on_failure="continue"``), the next attempt's run (a child of the solve's workflow
    too, the first one's child on record) reuses what succeeded, and the records are those
    of a local streamed solve of the same answers."""
    from .test_temporal_solve import history_of, replay

    ex = TemporalExecutor(workers.address, task_queue=workers.queue, payloads=workers.payloads)
    solutions = {}
    for where in ("local", "temporal"):
        model_server.responder = HealingModel()
        async with OpenAIChat("gpt-test", base_url=f"{model_server.url}/v1", api_key="k") as llm:
            solutions[where] = await dagagent.solve(
                "double 1 + 2",
                temporal_tools.registry,
                llm,
                settings=RunSettings(
                    executor=ex if where == "temporal" else "dataflow",
                    retry=FAST_RETRY,
                    on_failure="continue",  # what runs when the plan is rejected finishes
                ),
                store=tmp_path / f"{where}.db",
            )
    assert solutions["local"].status.value == "answered", solutions["local"].reason
    solution = solutions["temporal"]
    assert solution.status.value == "answered", solution.reason
    [rnd] = solution.rounds
    assert rnd.result is not None and rnd.result.tasks["c"].output == 6
    assert rnd.result.tasks["b"].status.value == "reused"
    got = _records(tmp_path / "temporal.db", solution, tmp_path)
    want = _records(tmp_path / "local.db", solutions["local"], tmp_path)
    assert [r["parent"] for r in got["runs"]] == [None, "run0"]
    _same_records(got, want)
    async with ex.session():
        _, history = await history_of(ex, solve_workflow_id(solution.solve_id))
        await replay(ex, history)
        info, _ = await history_of(ex, workflow_id(rnd.result.run_id))
        assert info.parent_execution.workflow_id == solve_workflow_id(solution.solve_id)


@pytest.mark.anyio
async def test_a_planning_error_mid_stream_ends_the_round_as_locally(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """One attempt only, and its plan is rejected halfway: the solve fails with no valid
    plan, and the run of what started is on record, failed, as a local streamed solve
    leaves it; no run waits for tasks that will never come."""
    ex = TemporalExecutor(workers.address, task_queue=workers.queue, payloads=workers.payloads)
    solutions = {}
    for where in ("local", "temporal"):
        model_server.responder = HealingModel()
        async with OpenAIChat("gpt-test", base_url=f"{model_server.url}/v1", api_key="k") as llm:
            solutions[where] = await dagagent.solve(
                "double 1 + 2",
                temporal_tools.registry,
                llm,
                settings=RunSettings(
                    executor=ex if where == "temporal" else "dataflow",
                    retry=FAST_RETRY,
                    on_failure="continue",
                ),
                store=tmp_path / f"{where}.db",
                max_attempts=1,
            )
    solution = solutions["temporal"]
    assert solution.status.value == "failed"
    assert "no valid plan after 1 attempt" in solution.reason

    def unnamed(text: str) -> str:
        return re.sub(r"\b[0-9a-f]{12}\b", "RUN", text)

    assert unnamed(solution.reason) == unnamed(solutions["local"].reason)
    got = _records(tmp_path / "temporal.db", solution, tmp_path)
    want = _records(tmp_path / "local.db", solutions["local"], tmp_path)
    assert [r["status"].value for r in got["runs"]] == ["failed"]
    _same_records(got, want)


class _HeldOnce(StreamingModel):
    """A streaming model whose first streamed plan is held, once its first tool was entered,
    until ``release`` (``held``: it is; ``held_request``: its request); the plans streamed
    after it are streamed whole."""

    def __init__(self, where: Path) -> None:
        super().__init__(where)
        self.held = threading.Event()
        self.held_request: Recorded | None = None
        self.release = threading.Event()
        self.streamed = 0

    def __call__(self, request: Recorded) -> Reply | SSEReply:
        reply = super().__call__(request)
        if not isinstance(reply, SSEReply) or reply.gate is None:
            return reply
        with self.lock:
            self.streamed += 1
            first = self.streamed == 1
        if not first:
            return SSEReply(reply.events)

        def hold() -> None:
            self._hold_until_entered()
            self.held_request = request
            self.held.set()
            self.release.wait(READY_S)

        return SSEReply(reply.events, gate=(reply.gate[0], hold))


class LostModel(_HeldOnce):
    """``StreamingModel``, whose first plan is held, once the first tool was entered, until
    ``release`` (its worker is killed meanwhile); the plan asked again is streamed whole."""


@pytest.mark.anyio
async def test_a_worker_lost_mid_stream_the_plan_goes_on_from_what_ran(
    own_workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """SIGKILL the worker whose planner step is streaming (its first task entered): the
    step runs again on the other worker, stops the run it was streaming into as a plan
    rejected halfway, and plans again into a run of its own (the first one's child) that
    reuses what ran; the lost call is on record, cut off; the history replays."""
    from .test_temporal_solve import _call_reported, _worker_of, history_of, replay

    own_workers.start(2)
    model = LostModel(tmp_path)
    model_server.responder = model
    ex = TemporalExecutor(
        own_workers.address,
        task_queue=own_workers.queue,
        payloads=own_workers.payloads,
        heartbeat_s=2.0,  # not missed on a loaded machine
    )
    solutions: list[dagagent.Solution] = []
    store = tmp_path / "runs.db"
    solve_id = "lost" + os.urandom(4).hex()

    async def solve() -> None:
        async with OpenAIChat("gpt-test", base_url=f"{model_server.url}/v1", api_key="k") as llm:
            solutions.append(
                await dagagent.solve(
                    "double 1 + 2",
                    temporal_tools.registry,
                    llm,
                    settings=RunSettings(executor=ex, retry=FAST_RETRY),
                    store=store,
                    solve_id=solve_id,
                )
            )

    async with anyio.create_task_group() as tg:
        tg.start_soon(solve)
        await anyio.to_thread.run_sync(model.held.wait, READY_S)
        try:
            await _call_reported(ex, solve_workflow_id(solve_id))  # the call would be recorded
            assert model.held_request is not None
            caller = _worker_of(own_workers, model.held_request)
            os.kill(caller.pid, signal.SIGKILL)
            caller.wait()
        finally:
            model.release.set()
    [solution] = solutions
    assert model.entered_mid_plan
    assert solution.status.value == "answered", solution.reason
    [rnd] = solution.rounds
    assert rnd.result is not None and rnd.result.tasks["c"].output == 6
    assert [(c.role, c.status) for c in solution.calls] == [
        ("planner", "cut"),
        ("planner", "answered"),
        ("joiner", "answered"),
    ]
    with dagagent.RunStore(store) as runs:
        first = runs.get_run(rnd.result.parent_id or "")
        assert first.parent_id is None and first.status.value in ("failed", "cancelled")
    async with ex.session():
        _, history = await history_of(ex, solve_workflow_id(solution.solve_id))
        await replay(ex, history)


# -- a later round's revised plan ---------------------------------------------------------------

FAILING = {
    "goal": "g",
    "tasks": [
        {"id": "b", "tool": "add", "args": {"a": 1, "b": 2}},
        {"id": "f", "tool": "boom", "args": {"x": 7}},
    ],
}
REPLAN = {"action": "replan", "feedback": "f failed: double b instead"}


def revised_of(where: Path) -> dict[str, Any]:
    """Round 2's plan: ``b`` kept (reused), then the tasks of :func:`plan_of`."""
    kept = FAILING["tasks"][0]
    return {"goal": "g", "tasks": [kept, *(t for t in plan_of(where)["tasks"] if t["id"] != "b")]}


class RevisingModel(StreamingModel):
    """Round 1's plan (``b``, and ``f``, which fails) streamed whole; the joiner asks for
    another round; the revised plan keeps ``b`` and is held after its first new task until
    that task's tool was entered (``entered_mid_plan``); then the joiner answers
    ``FINISH``."""

    def __init__(self, where: Path) -> None:
        super().__init__(where)
        self.plan = revised_of(where)
        self.answers = [FAILING, self.plan]
        self.decisions = [REPLAN, FINISH]

    def __call__(self, request: Recorded) -> Reply | SSEReply:
        body = request.json
        name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
        with self.lock:
            self.count += 1
            n = self.count
            answer = self.answers.pop(0) if "plan" in name else self.decisions.pop(0)
        text = json.dumps(answer)
        reply = wire.openai_text(text, input_tokens=100 + n, output_tokens=20)
        if not body.get("stream"):
            return Reply(json=reply)
        events = wire.openai_events(reply, chunk_size=8)
        if answer is not self.plan:
            return SSEReply(events)
        # held once the reader has seen the task after the first new one begin (a few
        # pieces into it: the last piece before the hold may reach the reader only after it)
        gate = text.index('"double"') // 8 + 2
        assert gate < len(events) - 4  # much of the plan is still to come
        return SSEReply(events, gate=(gate, self._hold_until_entered))


async def _revised_solve(
    model: RevisingModel,
    server: LLMTestServer,
    store: Path,
    executor: TemporalExecutor | str,
    heard: list[Any],
    **options: Any,
) -> dagagent.Solution:
    server.responder = model
    async with OpenAIChat("gpt-test", base_url=f"{server.url}/v1", api_key="k") as llm:
        return await dagagent.solve(
            "double 1 + 2",
            temporal_tools.registry,
            llm,
            settings=RunSettings(executor=executor, retry=FAST_RETRY, on_failure="continue"),
            store=store,
            listeners=[heard.append],
            **options,
        )


@pytest.mark.anyio
async def test_a_later_round_s_first_tool_is_entered_while_the_revised_plan_is_written(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """Round 2's revised plan streams into its run as round 1's does: its first new task's
    tool is entered on a worker while the model still holds the rest of the plan; the task
    it keeps from round 1 is settled as it arrives, reused without an activity; the
    records are those of a local streamed solve of the same answers; the histories (the
    solve's, round 2's run's) replay."""
    from temporalio.api.enums.v1 import EventType

    from .test_temporal_solve import history_of, replay

    here, there = tmp_path / "temporal", tmp_path / "local"
    here.mkdir()
    there.mkdir()
    ex = TemporalExecutor(workers.address, task_queue=workers.queue, payloads=workers.payloads)
    model = RevisingModel(here)
    heard: list[Any] = []
    solution = await _revised_solve(model, model_server, tmp_path / "temporal.db", ex, heard)
    assert model.entered_mid_plan, "round 2's first tool waited for the whole revised plan"
    assert solution.status.value == "answered", solution.reason
    first, second = (r.result for r in solution.rounds)
    assert first is not None and second is not None
    assert {t: r.status.value for t, r in second.tasks.items()} == {
        "b": "reused",
        "first": "succeeded",
        "c": "succeeded",
        "d": "succeeded",
    }
    assert second.tasks["c"].output == 6 and second.parent_id == first.run_id

    local_model = RevisingModel(there)
    heard_here: list[Any] = []
    local = await _revised_solve(
        local_model, model_server, tmp_path / "local.db", "dataflow", heard_here
    )
    assert local_model.entered_mid_plan
    assert local.status.value == "answered", local.reason

    def parsed(events: list[Any]) -> list[tuple[str, str]]:
        return [(e.run_id, e.task_id) for e in events if e.kind == "task.parsed"]

    assert [t for _, t in parsed(heard)] == [t for _, t in parsed(heard_here)]
    assert {r for r, _ in parsed(heard)} == {first.run_id, second.run_id}
    got = _records(tmp_path / "temporal.db", solution, here)
    want = _records(tmp_path / "local.db", local, there)
    _same_records(got, want)

    async with ex.session():
        _, history = await history_of(ex, solve_workflow_id(solution.solve_id))
        await replay(ex, history)
        info, run_history = await history_of(ex, workflow_id(second.run_id))
        assert info.parent_execution.workflow_id == solve_workflow_id(solution.solve_id)
        await replay(ex, run_history)
    # the kept task cost no activity: those of the new tasks alone were scheduled
    scheduled = [
        e
        for e in run_history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert len(scheduled) == 3  # first, c, d


class LostRevisingModel(_HeldOnce, RevisingModel):
    """``RevisingModel``, whose revised plan is held, once its first new task's tool was
    entered, until ``release`` (its worker is killed meanwhile); the revised plan asked
    again is streamed whole."""

    def __init__(self, where: Path) -> None:
        super().__init__(where)
        self.answers.append(self.plan)  # asked again, on the other worker


async def _succeeded_in_attempt(ex: TemporalExecutor, solve: str, task_id: str) -> None:
    """Until ``task_id`` has succeeded in the run of the round's latest attempt."""
    client = ex.client
    assert client is not None
    handle = client.get_workflow_handle(solve)

    async def succeeded() -> bool:
        runs = await handle.query("attempts")
        run = client.get_workflow_handle(workflow_id(runs[-1]))
        progress = await run.query("progress", 0)
        return any(
            r["task_id"] == task_id and r["status"] == "succeeded" for r in progress["results"]
        )

    await until(succeeded, f"{task_id} succeeded in the latest attempt", timeout=READY_S)


@pytest.mark.anyio
async def test_a_worker_lost_mid_revision_the_revised_plan_goes_on_from_what_ran(
    own_workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """SIGKILL the worker whose replanner step is streaming round 2's plan (its first new
    task ran): the step runs again on the other worker, stops the run it was streaming
    into, and plans again into a run of its own (the first one's child, a child of round
    1's run in turn) that reuses what ran there and what round 1 kept: no tool runs twice;
    the lost call is on record, cut off; the history replays."""
    from .test_temporal_solve import _call_reported, _worker_of, history_of, replay

    own_workers.start(2)
    model = LostRevisingModel(tmp_path)
    ex = TemporalExecutor(
        own_workers.address,
        task_queue=own_workers.queue,
        payloads=own_workers.payloads,
        heartbeat_s=2.0,  # not missed on a loaded machine
    )
    solutions: list[dagagent.Solution] = []
    solve_id = "lost" + os.urandom(4).hex()

    async def solve() -> None:
        solutions.append(
            await _revised_solve(
                model, model_server, tmp_path / "runs.db", ex, [], solve_id=solve_id
            )
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(solve)
        await anyio.to_thread.run_sync(model.held.wait, READY_S)
        try:
            await _succeeded_in_attempt(ex, solve_workflow_id(solve_id), "first")
            await _call_reported(ex, solve_workflow_id(solve_id))  # the call would be recorded
            assert model.held_request is not None
            caller = _worker_of(own_workers, model.held_request)
            os.kill(caller.pid, signal.SIGKILL)
            caller.wait()
        finally:
            model.release.set()
    [solution] = solutions
    assert model.entered_mid_plan
    assert solution.status.value == "answered", solution.reason
    first, second = (r.result for r in solution.rounds)
    assert first is not None and second is not None
    assert {t: r.status.value for t, r in second.tasks.items()} == {
        "b": "reused",
        "first": "reused",
        "c": "succeeded",
        "d": "succeeded",
    }
    assert len(temporal_tools.started(tmp_path, "first")) == 1  # entered once, on one worker
    assert [(c.role, c.status) for c in solution.calls] == [
        ("planner", "answered"),
        ("joiner", "answered"),
        ("replanner", "cut"),
        ("replanner", "answered"),
        ("joiner", "answered"),
    ]
    with dagagent.RunStore(tmp_path / "runs.db") as runs:
        stopped = runs.get_run(second.parent_id or "")
        assert stopped.parent_id == first.run_id
        assert stopped.tasks["first"].status.value == "succeeded"
    async with ex.session():
        _, history = await history_of(ex, solve_workflow_id(solution.solve_id))
        await replay(ex, history)


def test_the_driver_killed_mid_revision_attach_records_the_revised_round(
    own_workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """SIGKILL ``dagagent ask --executor temporal`` while round 2's revised plan is being
    written into its run (its first new task ran): the solve finishes on the workers, and
    ``dagagent attach`` records the rest of the revised round (the tasks that joined its
    plan after the driver died, the joiner's call, the answer)."""
    from .test_temporal_solve import DRIVER_KEY

    own_workers.start(1)
    model = LostRevisingModel(tmp_path)
    model_server.responder = model
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
    command = ["ask", "double 1 + 2", "--tools", TOOLS, "--model", "openai:gpt-test"]
    command += ["--base-url", f"{model_server.url}/v1", "--store", str(store)]
    command += ["--on-failure", "continue", *temporal]
    driver = subprocess.Popen(
        [sys.executable, "-m", "dagagent", *command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )
    try:
        assert model.held.wait(READY_S), "round 2's revised plan was never held"
        driver.kill()
    finally:
        driver.kill()
        driver.wait()
        model.release.set()
    assert model.entered_mid_plan
    with dagagent.RunStore(store) as runs:
        [summary] = runs.list_solves()
        solve_id = summary.solve_id
        assert runs.get_solve(solve_id).status in ("running", "interrupted")
    result = CliRunner().invoke(
        dagagent.cli.app,
        ["attach", solve_id, "--store", str(store), "--json", *temporal[2:]],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["answer"] == FINISH["answer"]
    with dagagent.RunStore(store) as runs:
        record = runs.get_solve(solve_id)
        assert record.status == "answered"
        assert [r.outcome for r in record.rounds] == ["replan", "answered"]
        run = runs.get_run(record.rounds[1].run_id or "")
        assert run.parent_id == record.rounds[0].run_id
        assert [t.id for t in run.plan.tasks] == ["b", "first", "c", "d"]
        assert {t: r.status.value for t, r in run.tasks.items()} == {
            "b": "reused",
            "first": "succeeded",
            "c": "succeeded",
            "d": "succeeded",
        }
        assert run.tasks["c"].output == 6
        assert [c.role for c in runs.model_calls(solve_id=solve_id)] == [
            "planner",
            "joiner",
            "replanner",
            "joiner",
        ]


class SamePlanModel:
    """Round 1's plan (``b``, ``f``, which fails) and the same plan again when asked to
    revise it (each streamed whole); the joiner asks for another round."""

    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()

    def __call__(self, request: Recorded) -> Reply | SSEReply:
        body = request.json
        name = ((body.get("response_format") or {}).get("json_schema") or {}).get("name", "")
        with self.lock:
            self.count += 1
            n = self.count
        answer = FAILING if "plan" in name else REPLAN
        reply = wire.openai_text(json.dumps(answer), input_tokens=100 + n, output_tokens=20)
        return SSEReply(wire.openai_events(reply)) if body.get("stream") else Reply(json=reply)


@pytest.mark.anyio
async def test_a_streamed_revision_the_same_as_the_round_before_s_gives_up_as_locally(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """The revised plan is round 1's again: as a local streamed round, it ran as it came
    (``b`` reused, ``f`` failing again), then the solve gives up saying the plan is the
    same; the records are the local solve's; the history replays."""
    from .test_temporal_solve import history_of, replay

    ex = TemporalExecutor(workers.address, task_queue=workers.queue, payloads=workers.payloads)
    solutions = {}
    for where in ("local", "temporal"):
        model_server.responder = SamePlanModel()
        async with OpenAIChat("gpt-test", base_url=f"{model_server.url}/v1", api_key="k") as llm:
            solutions[where] = await dagagent.solve(
                "double 1 + 2",
                temporal_tools.registry,
                llm,
                settings=RunSettings(
                    executor=ex if where == "temporal" else "dataflow",
                    retry=FAST_RETRY,
                    on_failure="continue",
                ),
                store=tmp_path / f"{where}.db",
            )
    solution = solutions["temporal"]
    assert solution.status.value == "gave_up"
    assert "the revised plan is the same as round 1's" in solution.reason
    assert solution.reason == solutions["local"].reason
    second = solution.rounds[1].result
    assert second is not None
    assert {t: r.status.value for t, r in second.tasks.items()} == {"b": "reused", "f": "failed"}
    got = _records(tmp_path / "temporal.db", solution, tmp_path)
    want = _records(tmp_path / "local.db", solutions["local"], tmp_path)
    assert [r[2] for r in got["rounds"]] == ["replan", "gave_up"]
    _same_records(got, want)
    async with ex.session():
        _, history = await history_of(ex, solve_workflow_id(solution.solve_id))
        await replay(ex, history)


class HeldAfterFirstTask:
    """Streams a plan and holds it after its first task (``b``) until ``release``: the
    round's run starts with that task while the model still writes."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.count = 0

    def __call__(self, request: Recorded) -> Reply | SSEReply:
        self.count += 1
        plan = {
            "goal": "g",
            "tasks": [
                {"id": "b", "tool": "add", "args": {"a": 1, "b": 2}},
                {"id": "c", "tool": "double", "args": {"x": "${b}"}},
            ],
        }
        text = json.dumps(plan)
        reply = wire.openai_text(text, input_tokens=100, output_tokens=20)
        events = wire.openai_events(reply, chunk_size=8)
        gate = text.index('{"id": "c"') // 8 + 2  # once the reader knows ``b`` is whole
        return SSEReply(events, gate=(gate, lambda: self.release.wait(READY_S)))


@pytest.mark.anyio
async def test_a_deadline_passing_while_the_plan_is_written_ends_the_solve_timed_out(
    workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """The deadline passes while the model holds the plan's stream and the round's run has
    started: the solve's workflow cancels the run as it ends, and the driver, following it,
    records the run as it ended and the solve ``timed_out`` (not the run's cancellation as a
    cluster error)."""
    model = HeldAfterFirstTask()
    model_server.responder = model
    ex = TemporalExecutor(workers.address, task_queue=workers.queue, payloads=workers.payloads)
    store = tmp_path / "runs.db"
    try:
        async with OpenAIChat("gpt-test", base_url=f"{model_server.url}/v1", api_key="k") as llm:
            solution = await dagagent.solve(
                "add 1 and 2, doubled",
                temporal_tools.registry,
                llm,
                settings=RunSettings(executor=ex, retry=FAST_RETRY),
                store=store,
                deadline_s=4.0,
            )
    finally:
        model.release.set()
    assert solution.status.value == "timed_out", solution.reason
    assert "cancelled: the planner's step (round 1)" in solution.reason
    assert model.count == 1
    [rnd] = solution.rounds
    assert rnd.outcome == "timed_out" and rnd.run_id is not None
    with dagagent.RunStore(store) as runs:
        assert runs.get_solve(solution.solve_id).status == "timed_out"
        assert runs.exists(rnd.run_id)  # the run is on record, ended
        assert runs.get_run(rnd.run_id).status.value != "running"
