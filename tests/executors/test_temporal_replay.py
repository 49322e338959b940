"""Histories of the run workflow, stored, replay on this version: those of runs started
before the workflow stopped using local activities (patch ``no-local-activities``) take the
road they took, and those of runs started since take the new one; so do those of runs
started before and since each activity carries its task alone, not the plan (patch
``dagagent-run-task-alone``), and a worker runs an activity of either.

All were made from the Temporal tests' mixed plan (a fast tool, maps in chunks of two
elements, failures under ``on_failure="continue"``) by an in-process worker of
``tests/temporal_tools.py``, every payload inline: ``run_local_activities`` by the workflow
before the first patch (its maps' element counts and assembly, and the fast tool's call, are
local activities), ``run_no_local_activities`` by the workflow between the two (each
activity carries the plan's JSON text), ``run_task_alone`` by this one. Replaying needs no
server.

Two more are of a revision's run whose map reuses four of its five elements' earlier outputs
(``tests/data/temporal`` names them; made alike, its map in chunks of two): one by the
workflow before its map's reuse went by reference (patch ``reuse-by-reference``: every
activity of the map carried the whole of it), one by the workflow since (each gets the
reference).
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio")

import temporal_tools  # tests/ is on sys.path under pytest

from dagagent.settings import TaskRetryPolicy

from .temporal_fixtures import ROOT
from .test_temporal import MIXED

pytestmark = pytest.mark.asyncio_only("Temporal's client runs on asyncio")

STORED = ROOT / "tests" / "data" / "temporal"
BEFORE = STORED / "run_local_activities.json.gz"
SINCE = STORED / "run_no_local_activities.json.gz"
TASK_ALONE = STORED / "run_task_alone.json.gz"
REUSED_INLINE = STORED / "run_reused_map_inline.json.gz"
REUSED_BY_REFERENCE = STORED / "run_reused_map_by_reference.json.gz"


def _history(path: Path) -> Any:
    from temporalio.client import WorkflowHistory

    with gzip.open(path, "rt") as f:
        return WorkflowHistory.from_json(path.name, f.read())


def _replayer(tmp_path: Path) -> Any:
    from temporalio.worker import Replayer
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from dagagent.executors.temporal import RunWorkflow
    from dagagent.executors.temporal._payloads import DirectoryPayloads, data_converter

    return Replayer(
        workflows=[RunWorkflow],
        data_converter=data_converter(DirectoryPayloads(tmp_path)),
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("dagagent")
        ),
    )


def _markers(history: Any) -> Counter[str]:
    return Counter(
        e.marker_recorded_event_attributes.marker_name
        for e in history.events
        if e.HasField("marker_recorded_event_attributes")
    )


def _activities(history: Any) -> Counter[str]:
    return Counter(
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    )


@pytest.mark.anyio
async def test_a_run_started_with_local_activities_replays_its_local_activities(
    tmp_path: Path,
) -> None:
    """A run started before the patch replays its local activities: a worker of this
    version that picks it up mid-way goes on as it began."""
    history = _history(BEFORE)
    # its element counts, assemblies and the fast tool's call, each a local activity
    assert _markers(history) == {"core_local_activity": 9}
    assert "dagagent.count_elements" not in _activities(history)
    await _replayer(tmp_path).replay_workflow(history)


@pytest.mark.anyio
async def test_a_run_started_since_replays_with_no_local_activity(tmp_path: Path) -> None:
    """A run started since has the patch's marker and runs every step as an activity: its
    maps' element counts (four maps), their assembly and the fast tool's call included."""
    history = _history(SINCE)
    assert _markers(history) == {"core_patch": 1}
    assert _activities(history) == {"dagagent.count_elements": 4, "dagagent.run_task": 21}
    await _replayer(tmp_path).replay_workflow(history)


def _scheduled_inputs(history: Any) -> list[tuple[str, list[Any]]]:
    """Each activity the workflow scheduled: its name and its arguments (inline JSON)."""
    from temporalio.converter import default

    converter = default().payload_converter
    return [
        (
            e.activity_task_scheduled_event_attributes.activity_type.name,
            converter.from_payloads(e.activity_task_scheduled_event_attributes.input.payloads),
        )
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]


@pytest.mark.anyio
async def test_a_run_started_since_sends_each_activity_its_task_alone(tmp_path: Path) -> None:
    """A run started since both patches has both markers, and each activity's arguments are
    its call, with its task, then its dependencies' outputs: no plan."""
    history = _history(TASK_ALONE)
    assert _markers(history) == {"core_patch": 2}
    scheduled = _scheduled_inputs(history)
    assert Counter(name for name, _ in scheduled) == {
        "dagagent.count_elements": 4,
        "dagagent.run_task": 21,
    }
    tasks = {t["id"]: t for t in MIXED["tasks"]}
    for _, (call, *outputs) in scheduled:
        assert call["task"] == tasks[call["task_id"]]
        assert len(outputs) == len(call["deps"])  # the outputs alone: no plan's text


def _calls_of(history: Any, task_id: str) -> list[dict[str, Any]]:
    """The call (first argument) of each activity scheduled for ``task_id``."""
    calls = []
    for e in history.events:
        if e.HasField("activity_task_scheduled_event_attributes"):
            call = json.loads(e.activity_task_scheduled_event_attributes.input.payloads[0].data)
            if call["task_id"] == task_id:
                calls.append(call)
    return calls


@pytest.mark.anyio
async def test_a_run_whose_map_reuse_went_inline_replays_so(tmp_path: Path) -> None:
    """A run started before the patch gave each activity of its map the whole reuse of it:
    it replays so."""
    history = _history(REUSED_INLINE)
    assert _markers(history) == {"core_patch": 1}
    calls = _calls_of(history, "m")
    assert len(calls) == 5  # its count, three chunks, its assembly
    for call in calls:
        assert "reuse_ref" not in call
        assert sum(k.startswith("m@") for k in call["reuse"]) == 5  # the earlier run's
    await _replayer(tmp_path).replay_workflow(history)


@pytest.mark.anyio
async def test_the_runs_started_before_sent_the_plan_and_still_replay(tmp_path: Path) -> None:
    """A run started between the two patches sent the plan's JSON text with each call (and
    has one marker): it replays, sending it still."""
    scheduled = _scheduled_inputs(_history(SINCE))
    call, plan_text, *_ = scheduled[0][1]
    assert "task" not in call
    assert [t["id"] for t in json.loads(plan_text)["tasks"]] == [t["id"] for t in MIXED["tasks"]]


@pytest.mark.anyio
async def test_a_worker_runs_an_activity_sent_the_plan_or_its_task_alone() -> None:
    """An activity of a run started before (its call, the plan's text, the outputs) and one
    of a run started since (its call with its task, the outputs) run the task alike on a
    worker of this version, a map's element count included; a task the worker cannot read
    fails without a retry, naming the problem."""
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from dagagent.executors.temporal._activities import Activities

    acts = Activities(temporal_tools.registry, "tests")
    env = ActivityEnvironment()
    base = {
        "run_id": "r",
        "on_failure": "continue",
        "max_elements": 100,
        "retry": asdict(TaskRetryPolicy(base_delay_s=0.01, jitter=0)),
        "window": None,
        "done": [],
    }
    tasks = {t["id"]: t for t in MIXED["tasks"]}
    plan_text = json.dumps(MIXED)
    b = {**base, "task_id": "b", "deps": ["a"]}
    before = await env.run(acts.run_task, b, plan_text, 3)
    since = await env.run(acts.run_task, {**b, "task": tasks["b"]}, 3)
    assert before["status"] == since["status"] == "succeeded"
    assert before["output"] == since["output"] == 6
    m = {**base, "task_id": "m", "deps": ["items", "b"]}
    items = [1, 2, 3]
    assert await env.run(acts.count_elements, m, plan_text, items, 6) == {"n": 3}
    assert await env.run(acts.count_elements, {**m, "task": tasks["m"]}, items, 6) == {"n": 3}
    wrong = {**b, "task": {**tasks["b"], "args": {"x": "${nowhere}"}}}
    with pytest.raises(ApplicationError) as raised:
        await env.run(acts.run_task, wrong, 3)
    assert raised.value.non_retryable
    assert "cannot read the plan" in str(raised.value) and "nowhere" in str(raised.value)
