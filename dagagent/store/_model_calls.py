"""Recording model calls: one row per call of a solve (table ``model_calls``), written by a
thread of its own (:class:`ModelCallWriter`) and read back with the solve. A part of
:class:`~dagagent.store.RunStore`.

A call is written when it ends (and again when its reader rejects its answer: the row is
replaced with the issues), a batch at a time, at most :data:`FLUSH_INTERVAL_S` after it
ended: the event loop only puts it on a queue, so a store another process holds locked never
stalls it. A solve whose process dies keeps every call written until then.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import StoreError
from ..events import get_logger
from ..results import ModelCall
from ._codec import from_column, to_column
from ._part import StorePart

__all__ = ["FLUSH_INTERVAL_S", "ModelCallQueries", "ModelCallWriter", "SolveSpend", "UnrunPlan"]

#: How long a finished call waits at most for its batch to be written.
FLUSH_INTERVAL_S = 0.05

_COLUMNS = (
    "call_id",
    "solve_id",
    "seq",
    "round",
    "run_id",
    "role",
    "task_id",
    "model",
    "provider",
    "server",
    "response_model",
    "options",
    "status",
    "error",
    "started_at",
    "first_token_s",
    "duration_s",
    "finish_reason",
    "input_tokens",
    "output_tokens",
    "estimated",
    "cost_usd",
    "text",
    "text_chars",
    "issues",
    "replan_of",
)
_JSON = frozenset({"options", "issues"})
_INSERT = (
    f"INSERT OR REPLACE INTO model_calls ({', '.join(_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(_COLUMNS))})"
)
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM model_calls"


def _row(call: ModelCall) -> tuple[Any, ...]:
    values = call.model_dump()
    return tuple(
        to_column(values[c]) if c in _JSON else int(values[c]) if c == "estimated" else values[c]
        for c in _COLUMNS
    )


def _call(row: Sequence[Any]) -> ModelCall:
    values = dict(zip(_COLUMNS, row, strict=True))
    for c in _JSON:
        values[c] = from_column(values[c])
    values["options"] = values["options"] or {}
    values["issues"] = values["issues"] or []
    values["estimated"] = bool(values["estimated"])
    return ModelCall.model_validate(values)


class SolveSpend:
    """What a solve's model calls used, summed from their rows: ``calls``, tokens, cost
    (``None`` when a call's price is unknown), the models they used."""

    __slots__ = ("calls", "cost_usd", "estimated", "input_tokens", "models", "output_tokens")

    def __init__(
        self,
        calls: int,
        input_tokens: int,
        output_tokens: int,
        cost_usd: float | None,
        estimated: bool,
        models: list[str],
    ) -> None:
        self.calls = calls
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cost_usd = cost_usd
        self.estimated = estimated
        self.models = models

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class ModelCallQueries(StorePart):
    """The model calls of a run store (mixed into :class:`~dagagent.store.RunStore`)."""

    def record_model_calls(self, calls: Sequence[ModelCall]) -> None:
        """Write ``calls`` in one transaction (a call already recorded is replaced)."""
        if not calls:
            return
        with self._transaction() as conn:
            conn.executemany(_INSERT, [_row(c) for c in calls])

    def model_calls(
        self, *, solve_id: str | None = None, run_id: str | None = None
    ) -> list[ModelCall]:
        """The calls of solve ``solve_id`` (in the order they started), or of run ``run_id``."""
        if solve_id is not None:
            rows = self._query(
                f"{_SELECT} WHERE solve_id = ? ORDER BY seq, started_at", (solve_id,)
            )
        elif run_id is not None:
            rows = self._query(f"{_SELECT} WHERE run_id = ? ORDER BY seq, started_at", (run_id,))
        else:
            raise ValueError("give solve_id or run_id")
        return [_call(r) for r in rows]

    def resolve_calls(self, ref: str) -> str | None:
        """The run id ``ref`` names (a full id or a unique prefix) among the runs with model
        calls outside a solve, or ``None``. Such calls may have no run: those of a plan that
        was not run (``dagagent plan`` without ``--execute``) keep the id it would have had."""
        from ._ids import check_run_id

        ref = check_run_id(ref)
        rows = self._query(
            "SELECT DISTINCT run_id FROM model_calls WHERE solve_id IS NULL "
            "AND substr(run_id, 1, ?) = ? LIMIT 6",
            (len(ref), ref),
        )
        if not rows:
            return None
        if len(rows) > 1:
            ids = ", ".join(r[0] for r in rows[:5])
            raise StoreError(f"id prefix {ref} is ambiguous (matches {ids}...); give more digits")
        return str(rows[0][0])

    def unrun_plans(self, limit: int = 20) -> list[UnrunPlan]:
        """The plans that were not run, newest first: the model calls outside a solve whose
        run id no run has (see :meth:`resolve_calls`), summed per id."""
        rows = self._query(
            "SELECT run_id, MIN(started_at), SUM(status != 'refused'), SUM(input_tokens), "
            "SUM(output_tokens), SUM(cost_usd), SUM(cost_usd IS NULL AND status != 'refused'), "
            "MAX(estimated), GROUP_CONCAT(DISTINCT model), SUM(issues IS NOT NULL "
            "AND issues != '[]'), SUM(status = 'answered' AND (issues IS NULL OR issues = '[]')), "
            "MAX(replan_of) FROM model_calls WHERE solve_id IS NULL AND run_id IS NOT NULL "
            "AND run_id NOT IN (SELECT id FROM runs) "
            "GROUP BY run_id ORDER BY MIN(started_at) DESC LIMIT ?",
            (int(limit),),
        )
        return [
            UnrunPlan(
                run_id=r[0],
                started_at=float(r[1]),
                spend=SolveSpend(
                    calls=int(r[2] or 0),
                    input_tokens=int(r[3] or 0),
                    output_tokens=int(r[4] or 0),
                    cost_usd=None if r[6] else float(r[5] or 0.0),
                    estimated=bool(r[7]),
                    models=sorted(m for m in (r[8] or "").split(",") if m),
                ),
                rejected=int(r[9] or 0),
                accepted=int(r[10] or 0),
                replan_of=r[11],
            )
            for r in rows
        ]

    def revisions_not_run(self, run_id: str) -> list[str]:
        """The plans not run that revised the plan of run ``run_id`` (``dagagent replan RUN
        --model`` without ``--execute``), oldest first: the ids they would have had."""
        rows = self._query(
            "SELECT run_id FROM model_calls WHERE replan_of = ? AND solve_id IS NULL "
            "AND run_id IS NOT NULL AND run_id NOT IN (SELECT id FROM runs) "
            "GROUP BY run_id ORDER BY MIN(started_at)",
            (run_id,),
        )
        return [str(r[0]) for r in rows]

    def solve_spends(self, solve_ids: Sequence[str]) -> dict[str, SolveSpend]:
        """What each of ``solve_ids`` used (solves without a recorded call are left out)."""
        if not solve_ids:
            return {}
        marks = ",".join("?" * len(solve_ids))
        rows = self._query(
            "SELECT solve_id, SUM(status != 'refused'), SUM(input_tokens), SUM(output_tokens), "
            "SUM(cost_usd), SUM(cost_usd IS NULL AND status != 'refused'), MAX(estimated), "
            f"GROUP_CONCAT(DISTINCT model) FROM model_calls WHERE solve_id IN ({marks}) "
            "GROUP BY solve_id",
            list(solve_ids),
        )
        return {
            r[0]: SolveSpend(
                calls=int(r[1] or 0),
                input_tokens=int(r[2] or 0),
                output_tokens=int(r[3] or 0),
                cost_usd=None if r[5] else float(r[4] or 0.0),
                estimated=bool(r[6]),
                models=sorted(m for m in (r[7] or "").split(",") if m),
            )
            for r in rows
        }


@dataclass(frozen=True)
class UnrunPlan:
    """A plan that was not run, as the viewer and ``dagagent runs`` list it: the run id it
    would have had, when its first call started, what its calls used, how many attempts were
    rejected and how many answers were accepted (0: planning failed), and the run it
    revised, if it was a replan."""

    run_id: str
    started_at: float
    spend: SolveSpend
    rejected: int
    accepted: int
    #: The run whose plan it revised (``dagagent replan RUN --model``); ``None`` for a plan
    #: made from a goal.
    replan_of: str | None = None


_STOP = object()


class ModelCallWriter:
    """The thread that writes a solve's model calls to ``store`` (see the module docstring).
    :meth:`put` from the event loop; :meth:`close` writes the rest and ends the thread.
    ``error`` is the last write's error (``None`` once a write succeeds); ``lost`` counts
    the calls that could not be written."""

    def __init__(self, store: Any, *, flush_interval_s: float = FLUSH_INTERVAL_S) -> None:
        self.store = store
        self.flush_interval_s = flush_interval_s
        self.error: str | None = None
        self.lost = 0
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name="dagagent-model-calls", daemon=True)
        self._started = False
        self._closed = False

    def put(self, call: ModelCall) -> None:
        if self._closed:
            self._write([call])
            return
        if not self._started:
            self._started = True
            self._thread.start()
        self._queue.put(call)

    def close(self) -> None:
        """Write every call put so far, then end the thread (waits for it)."""
        if self._closed:
            return
        self._closed = True
        if self._started:
            self._queue.put(_STOP)
            self._thread.join()

    def _work(self) -> None:
        stop = False
        while not stop:
            batch: dict[str, ModelCall] = {}
            item = self._queue.get()
            deadline = time.monotonic() + self.flush_interval_s
            while True:
                if item is _STOP:
                    stop = True
                else:
                    batch[item.call_id] = item  # a later version of a call replaces it
                if stop:
                    with contextlib.suppress(queue.Empty):
                        while True:  # whatever came before the stop
                            more = self._queue.get_nowait()
                            if more is not _STOP:
                                batch[more.call_id] = more
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    item = self._queue.get(timeout=left)
                except queue.Empty:
                    break
            self._write(list(batch.values()))

    def _write(self, calls: list[ModelCall]) -> None:
        if not calls:
            return
        try:
            self.store.record_model_calls(calls)
            self.error = None
        except StoreError as exc:
            self.error = str(exc)
            self.lost += len(calls)
            get_logger().warning("store.model_calls_not_recorded", error=str(exc), n=len(calls))
