"""Recording solves (:func:`dagagent.solve`, ``dagagent ask``): the goal, each round's run
(named as the round starts) and joiner decision as it ends, and the answer. A part of
:class:`~dagagent.store.RunStore`.

A solve's rounds are runs like any other (each round after the first is a child of the round
before, as ``replan`` makes them); these tables add what runs do not hold: which solve and
round a run belongs to, the joiner's decision about it, and the solve's outcome and answer.
Rows are written when a round or the solve ends (a few per solve), from a worker thread of
the caller (a store another process holds locked never stalls its event loop):
a solve whose process dies keeps every round that ended and shows as ``interrupted``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import DecisionError, StoreError
from ..llm import Usage
from ..results import RunStatus, SolveStatus
from ._codec import from_column, to_column
from ._ids import check_run_id
from ._model_calls import ModelCallQueries
from .models import RoundRecord, SolveRecord, SolveSummary

__all__ = ["SolveQueries"]


class SolveQueries(ModelCallQueries):
    """The solve records of a run store (mixed into :class:`~dagagent.store.RunStore`), with
    their model calls."""

    # -- writing ----------------------------------------------------------------------------

    def start_solve(
        self, solve_id: str, goal: str, *, options: Mapping[str, Any] | None = None
    ) -> None:
        """Record that solve ``solve_id`` (12 hex digits, like a run id) has begun, with the
        ``options`` a resume of it needs (JSON-able: rounds, failure policy...)."""
        solve_id = check_run_id(solve_id, prefix=False)
        self._query(
            "INSERT INTO solves (id, goal, created, status, pid, options) "
            "VALUES (?, ?, ?, 'running', ?, ?)",
            (
                solve_id,
                goal,
                time.time(),
                os.getpid(),
                to_column(dict(options)) if options is not None else None,
            ),
        )

    def claim_solve(self, solve_id: str) -> None:
        """Take paused (or interrupted: its process died) solve ``solve_id`` to ``running`` in
        this process (one transaction: two resumes of a solve cannot both claim it). Raises
        :class:`~dagagent.errors.DecisionError` when it is neither."""
        from ._lease import effective_status

        solve_id = check_run_id(solve_id, prefix=False)
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT status, pid FROM solves WHERE id = ?", (solve_id,)
            ).fetchone()
            if row is None:
                raise StoreError(f"no solve {solve_id} in {self.path}")
            status = effective_status(row[0], row[1])
            if status not in ("paused", "interrupted"):
                raise DecisionError(_not_paused(solve_id, status, row[1]))
            conn.execute(
                "UPDATE solves SET status = 'running', pid = ?, finished_at = NULL WHERE id = ?",
                (os.getpid(), solve_id),
            )

    def release_solve(self, solve_id: str) -> None:
        """A resume of the solve that stopped before its round's run went on: paused again."""
        with self._transaction() as conn:
            conn.execute(
                "UPDATE solves SET status = 'paused' WHERE id = ? AND status = 'running' "
                "AND pid = ?",
                (solve_id, os.getpid()),
            )

    def record_round(
        self,
        solve_id: str,
        round: int,
        *,
        run_id: str | None,
        outcome: str,
        reason: str = "",
        decision: Mapping[str, Any] | None = None,
        feedback: str | None = None,
    ) -> None:
        """Record how round ``round`` of the solve ended."""
        self._query(
            "INSERT OR REPLACE INTO solve_rounds (solve_id, round, run_id, outcome, reason, "
            "decision, feedback, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                solve_id,
                round,
                run_id,
                outcome,
                reason,
                to_column(dict(decision)) if decision is not None else None,
                feedback,
                time.time(),
            ),
        )

    def finish_solve(
        self,
        solve_id: str,
        *,
        status: str,
        reason: str = "",
        answer: Any = None,
        cites: Sequence[str] = (),
        run_id: str | None = None,
        usage: Mapping[str, Any] | None = None,
    ) -> None:
        """Record how the solve ended and its answer (in full)."""
        self._query(
            "UPDATE solves SET status = ?, reason = ?, answer = ?, cites = ?, run_id = ?, "
            "usage = ?, finished_at = ? WHERE id = ?",
            (
                status,
                reason,
                to_column(answer),
                to_column(list(cites)),
                run_id,
                to_column(dict(usage)) if usage is not None else None,
                time.time(),
                solve_id,
            ),
        )

    # -- reading ----------------------------------------------------------------------------

    def get_solve(self, solve_id: str) -> SolveRecord:
        """The record of solve ``solve_id`` (its full id)."""
        solve_id = check_run_id(solve_id, prefix=False)
        rows = self._query(
            "SELECT id, goal, created, status, reason, answer, cites, run_id, usage, "
            "finished_at, pid, options FROM solves WHERE id = ?",
            (solve_id,),
        )
        if not rows:
            raise StoreError(f"no solve {solve_id} in {self.path}")
        r = rows[0]
        rounds = [
            RoundRecord(
                round=x[0],
                run_id=x[1],
                outcome=x[2],
                reason=x[3] or "",
                decision=from_column(x[4]),
                feedback=x[5],
                at=x[6],
            )
            for x in self._query(
                "SELECT round, run_id, outcome, reason, decision, feedback, at "
                "FROM solve_rounds WHERE solve_id = ? ORDER BY round",
                (solve_id,),
            )
        ]
        from ._lease import effective_status

        status = effective_status(r[3], r[10])
        if status == RunStatus.INTERRUPTED:  # the round under way when the process died
            rounds = [
                x.model_copy(update={"outcome": RunStatus.INTERRUPTED.value})
                if x.outcome == "running"
                else x
                for x in rounds
            ]
        try:
            solve_status = SolveStatus(status)
        except ValueError:
            known = ", ".join(s.value for s in SolveStatus)
            raise StoreError(
                f"solve {solve_id} in {self.path} is damaged and cannot be read: its status "
                f"{status!r} is not one this version of dagagent knows ({known})"
            ) from None
        return SolveRecord(
            solve_id=r[0],
            goal=r[1],
            created=r[2],
            status=solve_status,
            reason=r[4] or "",
            answer=from_column(r[5]),
            cites=from_column(r[6]) or [],
            run_id=r[7],
            usage=from_column(r[8]),
            finished_at=r[9],
            rounds=rounds,
            options=from_column(r[11]),
            calls=self.model_calls(solve_id=solve_id),
        )

    def resolve_solve(self, ref: str) -> str | None:
        """The full id of the solve ``ref`` names (a full id or a unique prefix of at least 4
        digits), or ``None`` when no solve has it (it may be a run's)."""
        ref = check_run_id(ref)
        rows = self._query(
            "SELECT id FROM solves WHERE substr(id, 1, ?) = ? ORDER BY created DESC LIMIT 6",
            (len(ref), ref),
        )
        if not rows:
            return None
        if len(rows) > 1:
            ids = ", ".join(r[0] for r in rows[:5])
            raise StoreError(
                f"solve id prefix {ref} is ambiguous (matches {ids}...); give more digits"
            )
        return str(rows[0][0])

    def list_solves(self, limit: int | None = 20) -> list[SolveSummary]:
        """The most recent solves first, with their rounds' runs and what they spent."""
        from ._lease import effective_status

        sql = (
            "SELECT id, goal, created, finished_at, status, pid, reason, answer FROM solves "
            "ORDER BY created DESC, rowid DESC"
        )
        params: tuple[Any, ...] = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (int(limit),)
        rows = self._query(sql, params)
        ids = [r[0] for r in rows]
        runs: dict[str, list[str]] = {i: [] for i in ids}
        if ids:
            marks = ",".join("?" * len(ids))
            for solve_id, run_id in self._query(
                f"SELECT solve_id, run_id FROM solve_rounds WHERE solve_id IN ({marks}) "
                "AND run_id IS NOT NULL ORDER BY round",
                ids,
            ):
                runs[solve_id].append(run_id)
        spends = self.solve_spends(ids)
        out = []
        known = {s.value for s in SolveStatus}
        for r in rows:
            spend = spends.get(r[0])
            status = effective_status(r[4], r[5])
            if status not in known:  # damaged (or a newer dagagent's): 'show' says so
                continue
            out.append(
                SolveSummary(
                    solve_id=r[0],
                    goal=r[1],
                    created=r[2],
                    finished_at=r[3],
                    status=SolveStatus(status),
                    reason=r[6] or "",
                    answer=from_column(r[7]),
                    run_ids=runs[r[0]],
                    spent=Usage(
                        calls=spend.calls,
                        input_tokens=spend.input_tokens,
                        output_tokens=spend.output_tokens,
                        cost_usd=spend.cost_usd,
                        estimated=spend.estimated,
                    )
                    if spend is not None
                    else Usage(),
                    models=spend.models if spend is not None else [],
                )
            )
        return out

    def solve_of_run(self, run_id: str) -> SolveRecord | None:
        """The solve run ``run_id`` is a round of, or ``None``."""
        rows = self._query("SELECT solve_id FROM solve_rounds WHERE run_id = ? LIMIT 1", (run_id,))
        return self.get_solve(rows[0][0]) if rows else None


def _not_paused(solve_id: str, status: str, pid: int | None) -> str:
    if status == "running":
        return (
            f"solve {solve_id} is running (process {pid}), not paused: it cannot be resumed "
            "while it runs (is another 'dagagent resume' under way?)"
        )
    return f"solve {solve_id} is {status}, not paused: there is nothing to resume"
