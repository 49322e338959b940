"""Noticing a workflow whose workflow task keeps failing on the workers.

A workflow task that fails on a worker (its code raised, a nondeterminism met in a replay, a
worker with code of another version, the SDK's deadlock detector) does not end the workflow:
the server hands it out again, and again, until one succeeds. Meanwhile nothing moves, and a
driver following the workflow by queries sees nothing to report. :class:`StuckWatch` looks
now and then (the server's description of the workflow: its pending workflow task's
attempt) and, once the task has failed twice in a row (once may be a worker stopped under
it), reads why from the history (its last ``WorkflowTaskFailed`` event) and says so once, as
a warning naming the workflow and the failure's message (escaped). The driver goes on
following: the server keeps retrying, and a fixed worker deployed meanwhile picks the
workflow up where it was.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest
from temporalio.client import Client, WorkflowHandle

from ...events import get_logger
from ...text import printable, shorten

__all__ = ["TASK_FAILING", "StuckWatch"]

#: The warning's event (``workflow``, ``address``, ``attempts``, ``error``, ``cause``).
TASK_FAILING = "temporal.workflow_task_failing"
#: Seconds between two looks at a workflow (each is one request to the server).
LOOK_S = 2.0
_RPC_S = 5.0
# Events read back from the end of the history looking for the failure (its last workflow
# task's end is near the end: the events since are signals and activities' ends).
_PAGE = 100
_PAGES = 3
# Failures that are the server's way of asking a worker to look again, not a worker's failure.
_ROUTINE = {
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_STICKY_TASK_QUEUE,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_FAILOVER_CLOSE_COMMAND,
}
_TASK_ENDS = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
}


class StuckWatch:
    """Looks at the workflows a driver follows (``every_s`` after it first asks about one,
    then at most every ``every_s``) and warns once
    per failure when one's workflow task keeps failing on the workers (see the module
    docstring). ``bound``: what the warning is bound to (``run_id``, ``solve_id``)."""

    def __init__(self, address: str, every_s: float = LOOK_S) -> None:
        self.address = address
        self.every_s = every_s
        self._next: dict[str, float] = {}
        self._said: set[tuple[str, str, int]] = set()

    async def look(self, client: Client, handle: WorkflowHandle[Any, Any], **bound: Any) -> None:
        """Look at ``handle``'s workflow if its time has come; warn if its workflow task keeps
        failing and that failure was not said yet. Never raises: a look that fails is
        skipped (the driver's own requests say when the server cannot be reached)."""
        now = time.monotonic()
        due = self._next.get(handle.id)
        if due is None:  # first seen: looked at once it has run for a while (a workflow
            # task fails twice before it counts, and a run over by then costs no request)
            self._next[handle.id] = now + self.every_s
            return
        if now < due:
            return
        self._next[handle.id] = now + self.every_s
        try:
            await self._look(client, handle, bound)
        except Exception:  # the server did not answer now: looked at again later
            return

    async def _look(
        self, client: Client, handle: WorkflowHandle[Any, Any], bound: dict[str, Any]
    ) -> None:
        described = await handle.describe(rpc_timeout=timedelta(seconds=_RPC_S))
        raw = described.raw_description
        if not raw.HasField("pending_workflow_task"):
            return
        attempt = raw.pending_workflow_task.attempt
        if attempt < 3:  # failed at most once: a worker stopped under it, say
            return
        found = await _last_failure(client, handle.id, described.run_id)
        if found is None:
            return
        event_id, message, cause = found
        key = (handle.id, described.run_id, event_id)
        if key in self._said:
            return
        self._said.add(key)
        get_logger(**bound).warning(
            TASK_FAILING,
            workflow=handle.id,
            address=self.address,
            attempts=attempt - 1,
            error=printable(shorten(message, 500)),
            cause=cause,
        )


async def _last_failure(client: Client, wid: str, run_id: str) -> tuple[int, str, str] | None:
    """The last workflow task's failure in the history of run ``run_id`` of workflow ``wid``
    (its event id, message and cause), if that task failed on a worker (not routinely)."""
    token = b""
    for _ in range(_PAGES):
        page = await client.workflow_service.get_workflow_execution_history_reverse(
            GetWorkflowExecutionHistoryReverseRequest(
                namespace=client.namespace,
                execution=WorkflowExecution(workflow_id=wid, run_id=run_id),
                maximum_page_size=_PAGE,
                next_page_token=token,
            ),
            timeout=timedelta(seconds=_RPC_S),
        )
        for event in page.history.events:
            if event.event_type not in _TASK_ENDS:
                continue
            if event.event_type != EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                return None  # it last completed (or timed out: no worker answered)
            failed = event.workflow_task_failed_event_attributes
            if failed.cause in _ROUTINE:
                return None
            cause = WorkflowTaskFailedCause.Name(failed.cause).removeprefix(
                "WORKFLOW_TASK_FAILED_CAUSE_"
            )
            message = " ".join(failed.failure.message.split()) or cause.lower()
            return event.event_id, message, cause
        token = page.next_page_token
        if not token:
            return None
    return None
