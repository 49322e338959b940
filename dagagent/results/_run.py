"""The outcome of a run: :class:`RunResult`, with what the store could not write of it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..errors import RunFailedError
from ..llm.usage import Usage
from ._status import FAILURES, RunStatus, TaskStatus
from ._task import TaskResult

__all__ = ["RecordLoss", "RunResult", "StatusCounts"]


class StatusCounts(dict[str, int]):
    """How many tasks ended in each status, by status value: ``{"succeeded": 3, "failed": 1}``."""

    @classmethod
    def of(cls, results: Iterable[TaskResult]) -> StatusCounts:
        return cls.of_statuses(r.status for r in results)

    @classmethod
    def of_statuses(cls, statuses: Iterable[TaskStatus]) -> StatusCounts:
        tally = Counter(statuses)
        return cls((status.value, n) for status, n in tally.items())


class RecordLoss(BaseModel):
    """What of a run the run store could not write (``RunResult.record_loss``), and why.

    - ``run``: nothing of the run is in the store (its first row could not be written, so no
      task's result could be either);
    - ``tasks``: the tasks whose result is not in the store;
    - ``outputs``: the tasks recorded without their output (the row says why; never reused);
    - ``finish``: the run's end (status, times, critical path) is not in the store, so the
      record reads as running or interrupted;
    - ``plan``: the plan as it grew while the run was planned is not in the store;
    - ``error``: the store's error (the last one), e.g. ``database is locked``.
    """

    model_config = ConfigDict(defer_build=True)

    run: bool = False
    tasks: list[str] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)
    finish: bool = False
    plan: bool = False
    error: str = ""

    @property
    def parts(self) -> list[str]:
        """What is missing, in words (``["the result of task b", ...]``)."""
        if self.run:
            return ["the whole run"]
        parts = [f"the result of task {t}" for t in self.tasks[:10]]
        if len(self.tasks) > 10:
            parts.append(f"the results of {len(self.tasks) - 10} more tasks")
        parts += [f"the output of task {t}" for t in self.outputs[:10]]
        if len(self.outputs) > 10:
            parts.append(f"the outputs of {len(self.outputs) - 10} more tasks")
        if self.plan:
            parts.append("the plan as it grew")
        if self.finish:
            parts.append("how the run ended")
        return parts

    def __str__(self) -> str:
        return f"not written: {', '.join(self.parts)} ({self.error})"


class RunResult(BaseModel):
    """The outcome of a run: one :class:`TaskResult` per task, in plan order (``tasks``).

    ``record_loss`` is ``None`` unless the run was recorded in a run store that could not
    write all of it: then it says what is missing (:class:`RecordLoss`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, defer_build=True)

    run_id: str
    status: RunStatus
    goal: str = ""
    executor: str = ""
    tasks: dict[str, TaskResult]
    started_at: float
    finished_at: float
    critical_path: list[str] = Field(default_factory=list)
    critical_path_s: float = 0.0
    parent_id: str | None = None
    #: What the run's agent tasks used of their model (``None``: no model call was made).
    usage: Usage | None = None
    record_loss: RecordLoss | None = None

    @property
    def wall_time_s(self) -> float:
        return self.finished_at - self.started_at

    @property
    def outputs(self) -> dict[str, Any]:
        """Outputs of the tasks that have one (succeeded or reused)."""
        return {t: r.output for t, r in self.tasks.items() if r.status.ok}

    @property
    def ok(self) -> bool:
        return self.status is RunStatus.SUCCEEDED

    @property
    def counts(self) -> StatusCounts:
        """How many tasks ended in each status."""
        return StatusCounts.of(self.tasks.values())

    def failures(self) -> list[TaskResult]:
        """The tasks that failed or were denied, in plan order."""
        return [r for r in self.tasks.values() if r.status in FAILURES]

    def waiting(self) -> list[TaskResult]:
        """The tasks waiting for a person's decision (the run is ``paused``)."""
        return [r for r in self.tasks.values() if r.status is TaskStatus.WAITING]

    def __repr__(self) -> str:
        # Short on purpose: a run may hold 100,000 task results, and reprs get built in
        # places nobody reads (asyncio formats the finished task that returned this result).
        counts = ", ".join(f"{n} {s}" for s, n in sorted(self.counts.items()))
        return (
            f"RunResult(run_id={self.run_id!r}, status={self.status.value!r}, "
            f"tasks={len(self.tasks)} ({counts}), wall_time_s={self.wall_time_s:.3f})"
        )

    def raise_for_status(self) -> RunResult:
        """Return self if the run succeeded, else raise :class:`RunFailedError` naming
        the failures."""
        if self.status is RunStatus.SUCCEEDED:
            return self
        lines = [f"{r.task_id}: {r.status.value}: {r.error}" for r in self.failures()]
        counts = ", ".join(f"{n} {s}" for s, n in sorted(self.counts.items()))
        detail = ("\n  " + "\n  ".join(lines)) if lines else ""
        raise RunFailedError(f"run {self.run_id} {self.status.value} ({counts}){detail}", self)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "parent_id": self.parent_id,
            "status": self.status.value,
            "goal": self.goal,
            "executor": self.executor,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "wall_time_s": self.wall_time_s,
            "critical_path": self.critical_path,
            "critical_path_s": self.critical_path_s,
            "counts": dict(self.counts),
            "usage": None if self.usage is None else self.usage.to_json_dict(),
            "record_loss": None if self.record_loss is None else self.record_loss.model_dump(),
            "tasks": {k: r.to_json_dict() for k, r in self.tasks.items()},
        }
