"""Histories recorded by earlier versions of the run workflow, replayed by today's: a worker
taking over a workflow that started before a change must decide as it did (Temporal raises
on any other decision). No server is needed: the histories are files here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("temporalio")

from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from dagagent.executors.temporal import DirectoryPayloads, RunWorkflow, data_converter

pytestmark = [pytest.mark.asyncio_only("Temporal's client runs on asyncio")]

HISTORIES = Path(__file__).parent / "histories"


@pytest.mark.anyio
async def test_a_run_that_lost_workers_before_lost_calls_asked_replays_as_it_ran(
    tmp_path: Path,
) -> None:
    """Recorded before a call a lost worker left in doubt waited for a person: the worker
    running a tool with side effects and no reconciler (``hold_effect``) and one whose
    reconciler cannot tell (``hold_unsure``) was lost; the first task failed with
    ``WorkerLostError`` (no activity again), the second ran again in doubt and was denied.
    Replayed by today's workflow, which would run the first again in doubt and make both
    wait: it must decide what the history holds."""
    text = (HISTORIES / "lost-side-effects-before-asking.json").read_text()
    history = WorkflowHistory.from_json("dagagent-run-old", json.loads(text))
    kinds = [e.event_type for e in history.events]
    assert kinds.count(10) == 3  # ACTIVITY_TASK_SCHEDULED: two, then the second one's again
    replayer = Replayer(
        workflows=[RunWorkflow], data_converter=data_converter(DirectoryPayloads(tmp_path))
    )
    replayed = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure
