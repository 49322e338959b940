"""The tools of ``temporal_tools`` on a worker whose run workflow fails on purpose: a task
named ``wedged`` makes the workflow code raise when it would start it, so that the workflow
task fails on every attempt (as a workflow task that deadlocks, or meets a nondeterminism,
keeps failing) while the server retries it. Served by a real ``dagagent worker`` process
(``--tools temporal_wedged:registry``); test-only."""

from __future__ import annotations

from typing import Any

from temporal_tools import registry

from dagagent.executors.temporal._workflow import RunWorkflow

__all__ = ["FAILURE", "registry"]

#: What the workflow code raises (a control character in it: the driver shows it escaped).
FAILURE = "a deliberate failure of the workflow code\x1b[2J for task wedged"

_args = RunWorkflow._args


def _wedged(self: RunWorkflow, task_id: str, call: dict[str, Any]) -> list[Any]:
    if task_id == "wedged":
        raise RuntimeError(FAILURE)
    return _args(self, task_id, call)


RunWorkflow._args = _wedged  # type: ignore[method-assign]
