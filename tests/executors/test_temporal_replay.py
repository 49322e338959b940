"""Histories of the run workflow, stored, replay on this version: those of runs started
before the workflow stopped using local activities (patch ``no-local-activities``) take the
road they took, and those of runs started since take the new one.

Both were made from the Temporal tests' mixed plan (a fast tool, maps in chunks of two
elements, failures under ``on_failure="continue"``) by an in-process worker of
``tests/temporal_tools.py``, every payload inline: ``run_local_activities`` by the workflow
before the patch (its maps' element counts and assembly, and the fast tool's call, are local
activities), ``run_no_local_activities`` by this one. Replaying needs no server.
"""

from __future__ import annotations

import gzip
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
