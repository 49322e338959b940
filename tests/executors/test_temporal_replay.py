"""Histories of the run workflow, stored, replay on this version: those of runs started
before the workflow stopped using local activities (patch ``no-local-activities``) take the
road they took, and those of runs started since take the new one.

Both were made from the Temporal tests' mixed plan (a fast tool, maps in chunks of two
elements, failures under ``on_failure="continue"``) by an in-process worker of
``tests/temporal_tools.py``, every payload inline: ``run_local_activities`` by the workflow
before the patch (its maps' element counts and assembly, and the fast tool's call, are local
activities), ``run_no_local_activities`` by this one. Replaying needs no server.

Two more are of a revision's run whose map reuses four of its five elements' earlier outputs
(``tests/data/temporal`` names them; made alike, its map in chunks of two): one by the
workflow before its map's reuse went by reference (patch ``reuse-by-reference``: every
activity of the map carried the whole of it), one by this one (each gets the reference).
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio")

from .temporal_fixtures import ROOT

pytestmark = pytest.mark.asyncio_only("Temporal's client runs on asyncio")

STORED = ROOT / "tests" / "data" / "temporal"
BEFORE = STORED / "run_local_activities.json.gz"
SINCE = STORED / "run_no_local_activities.json.gz"
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
async def test_a_run_whose_map_reuse_goes_by_reference_replays(tmp_path: Path) -> None:
    """A run started since has the patch's marker, and each activity of its map gets the
    reference to its reuse alone, the same for all (the replay reads no payload store)."""
    history = _history(REUSED_BY_REFERENCE)
    assert _markers(history) == {"core_patch": 2}
    calls = _calls_of(history, "m")
    assert len(calls) == 5
    assert all("reuse" not in call for call in calls)
    assert len({call["reuse_ref"] for call in calls}) == 1
    assert len(calls[0]["reuse_ref"]) < 1000
    await _replayer(tmp_path).replay_workflow(history)
