"""Approvals that wait: the calls an ``ask`` rule left for a person, their decisions, and the
claim a resume makes on them. A part of :class:`~dagagent.store.RunStore`.

A row is written (by the run's recorder, with the task's ``waiting`` result) for every call
that waits; ``dagagent approve`` (:meth:`ApprovalQueries.decide`) fills in the decision;
``dagagent resume`` (:meth:`ApprovalQueries.claim_resume`) takes the run from ``paused`` to
``running`` and every decision from ``decided`` to ``used`` **in one transaction**, so that
two processes can never both resume a run, nor use one decision twice, nor record a decision
that a resume already passed by: SQLite's write lock (``BEGIN IMMEDIATE``) orders them.

States of a row: ``waiting`` → ``decided`` → ``used``; or ``waiting`` → ``closed`` when the run
moves on without a decision (a resume asks again, with a new row; or the run ended).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import DecisionError
from ..results import ApprovalAnswer
from ..text import shorten
from ._codec import from_column, to_column
from ._lease import LEASE_S, effective_status, here, lease_note
from ._part import StorePart, column_names, record_from_row
from ._plans import plan_from_column
from .models import ApprovalRecord

__all__ = ["DECISIONS", "ApprovalQueries", "ArgsCheck", "person_wait_s", "person_waits"]

#: What a person may decide about a waiting call (``happened``: only about a call in doubt).
DECISIONS = ("allow", "deny", "edit", "happened")

ArgsCheck = Callable[[str, dict[str, Any]], Any]
"""``(tool name, arguments) -> validated`` (raises when they do not fit the tool's schema)."""

_COLUMNS = (
    "run_id, task_id, seq, tool, args, rule, source, asked_at, state, decision, decided_by, "
    "decided_at, reason, edit_args, used_at, note"
)
_NAMES = column_names(_COLUMNS)


def _record(row: Sequence[Any]) -> ApprovalRecord:
    return record_from_row(ApprovalRecord, _NAMES, row, json=("args", "edit_args"))


def person_waits(
    history: Sequence[ApprovalRecord], *, until: float | None = None
) -> dict[str, list[tuple[float, float]]]:
    """When each task of a run waited for a person (``history``: the run's
    :meth:`~ApprovalQueries.approval_history`), by task: from each question to the resume
    that used its decision, or, for a question still open (the run is paused), to ``until``
    (default: not counted). A question the run moved on from without a decision (asked
    again by a resume) waited until that resume."""
    resumes = sorted({r.used_at for r in history if r.used_at is not None})
    waits: dict[str, list[tuple[float, float]]] = {}
    for r in history:
        end: float | None = r.used_at
        if r.state in ("waiting", "decided"):
            end = until
        elif r.state == "closed":
            end = next((at for at in resumes if at >= r.asked_at), None)
        if end is not None and end > r.asked_at:
            waits.setdefault(r.task_id, []).append((r.asked_at, end))
    return waits


def person_wait_s(
    waits: Mapping[str, Sequence[tuple[float, float]]], start: float, end: float
) -> float:
    """How much of the time from ``start`` to ``end`` some task waited for a person
    (``waits``: :func:`person_waits`); two tasks waiting at once count once."""
    spans = sorted(
        (max(a, start), min(b, end)) for task in waits.values() for a, b in task if b > a
    )
    total, reach = 0.0, start
    for a, b in spans:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at or 0))


class ApprovalQueries(StorePart):
    """The waiting approvals of a run store (mixed into :class:`~dagagent.store.RunStore`)."""

    def mark_resolved(
        self,
        conn: sqlite3.Connection,
        run_id: str,
        task_id: str,
        resolution: str,
        *,
        output: str | None,
        by: str,
        reason: str | None,
        at: float,
        key: str | None = None,
    ) -> int:
        raise NotImplementedError  # pragma: no cover - RunStore provides it (EffectQueries)

    # -- reading ----------------------------------------------------------------------------

    def approvals(
        self, run: str | None = None, *, states: Iterable[str] = ("waiting", "decided")
    ) -> list[ApprovalRecord]:
        """The calls waiting for a person (``states``: also those decided and not yet used by
        a resume, by default), oldest first; of one run (an id or a unique prefix) or all."""
        wanted = tuple(states)
        marks = ",".join("?" * len(wanted)) or "NULL"
        sql = f"SELECT {_COLUMNS} FROM approvals WHERE state IN ({marks})"
        params: list[Any] = list(wanted)
        if run is not None:
            sql += " AND run_id = ?"
            params.append(self.resolve(run))
        return [_record(r) for r in self._query(sql + " ORDER BY asked_at, task_id, seq", params)]

    def approval_history(self, run: str) -> list[ApprovalRecord]:
        """Every call of run ``run`` that waited for a person, in every state, oldest first."""
        return self.approvals(run, states=("waiting", "decided", "used", "closed"))

    # -- deciding ---------------------------------------------------------------------------

    def decide(
        self,
        run: str,
        task_id: str,
        decision: str,
        *,
        by: str,
        reason: str | None = None,
        edit_args: dict[str, Any] | None = None,
        check: ArgsCheck | None = None,
        output: Any = None,
        key: str | None = None,
    ) -> list[ApprovalRecord]:
        """Record a person's decision about the waiting calls of task ``task_id`` of run
        ``run``: ``allow``, ``deny``, or ``edit`` (allow with ``edit_args``, whose keys
        replace the call's arguments; ``check`` validates the result against the tool's
        schema); about a call in doubt (its process died during it), ``allow`` makes it again
        (with the same idempotency key), ``deny`` does not (the task is denied), and
        ``happened`` says it took effect, with its ``output`` (JSON-able; the task's output).
        ``key``: the idempotency key of one call in doubt of the task (a map's element, one
        call of an agent), to decide about it alone. Runs nothing; the next resume uses it,
        once.

        Raises :class:`~dagagent.errors.StoreError` for a run that does not exist and
        :class:`~dagagent.errors.DecisionError` when the task is not waiting (never was, was
        decided already, a resume used its decision or asked again)."""
        if decision not in DECISIONS:
            raise DecisionError(f"a decision is one of {', '.join(DECISIONS)}, not {decision!r}")
        if (decision == "edit") != (edit_args is not None):
            raise DecisionError("edited arguments go with the decision 'edit', and only with it")
        if not by.strip():
            raise DecisionError("a decision names who took it (by=...)")
        if output is not None and decision != "happened":
            raise DecisionError("an output goes with the decision 'happened', and only with it")
        run_id = self.resolve(run)
        now = time.time()
        with self._transaction() as conn:
            rows = [
                _record(r)
                for r in conn.execute(
                    f"SELECT {_COLUMNS} FROM approvals WHERE run_id = ? AND task_id = ? "
                    "ORDER BY seq",
                    (run_id, task_id),
                ).fetchall()
            ]
            waiting = [r for r in rows if r.state == "waiting"]
            if not waiting:
                raise DecisionError(_not_waiting(conn, run_id, task_id, rows))
            if key is not None:
                waiting = _waiting_on(conn, run_id, task_id, key, waiting)
            if edit_args is not None and len(waiting) > 1:
                raise DecisionError(
                    f"task {task_id!r} of run {run_id} waits on {len(waiting)} calls "
                    f"({', '.join(r.tool for r in waiting)}): edited arguments would fit only "
                    "one of them; allow or deny them"
                )
            if decision == "edit" and any(r.rule == _in_doubt_rule() for r in waiting):
                raise DecisionError(
                    f"task {task_id!r} of run {run_id} waits on a call in doubt: it is made "
                    "again as it was (its idempotency key is that of its arguments), or not; "
                    "allow, deny, or say it happened"
                )
            if decision == "happened":
                _check_happened(run_id, task_id, waiting, output)
            if any(r.rule == _in_doubt_rule() for r in waiting):
                # On the calls' own records, by identity: what the resume does with each.
                self.mark_resolved(
                    conn,
                    run_id,
                    task_id,
                    {"happened": "happened", "deny": "denied"}.get(decision, "not_happened"),
                    output=to_column(output),
                    by=by,
                    reason=reason,
                    at=now,
                    key=key,
                )
            decided: list[ApprovalRecord] = []
            for r in waiting:
                edited = None
                if edit_args is not None:
                    edited = {**(r.args if isinstance(r.args, dict) else {}), **edit_args}
                    if check is not None:
                        check(r.tool, edited)
                conn.execute(
                    "UPDATE approvals SET state = 'decided', decision = ?, decided_by = ?, "
                    "decided_at = ?, reason = ?, edit_args = ? "
                    "WHERE run_id = ? AND task_id = ? AND seq = ? AND state = 'waiting'",
                    (decision, by, now, reason, to_column(edited), run_id, task_id, r.seq),
                )
                decided.append(
                    r.model_copy(
                        update={
                            "state": "decided",
                            "decision": decision,
                            "decided_by": by,
                            "decided_at": now,
                            "reason": reason,
                            "edit_args": edited,
                        }
                    )
                )
        return decided

    # -- resuming ---------------------------------------------------------------------------

    def claim_resume(self, run: str) -> tuple[str, dict[str, list[ApprovalAnswer]]]:
        """Take run ``run`` from ``paused`` (or ``interrupted``: its process died) to
        ``running`` in this process, and every decision recorded for it from ``decided`` to
        ``used``; calls still undecided are closed (the resumed run asks about them again).
        All in one transaction: ``(run id, {task id: answers})``.

        Raises :class:`~dagagent.errors.DecisionError` when the run is not paused (running —
        perhaps another resume —, or finished)."""
        run_id = self.resolve(run)
        now = time.time()
        with self._transaction() as conn:
            status, pid, owner, lease_until = conn.execute(
                "SELECT status, pid, owner, lease_until FROM runs WHERE id = ?", (run_id,)
            ).fetchone()
            status = effective_status(status, pid, owner, lease_until, now=now)
            if status not in ("paused", "interrupted"):
                raise DecisionError(_not_paused(run_id, status, pid, owner, lease_until))
            conn.execute(
                "UPDATE runs SET status = 'running', pid = ?, owner = ?, lease_until = ?, "
                "finished_at = NULL WHERE id = ?",
                (os.getpid(), here(), now + LEASE_S, run_id),
            )
            decided = [
                _record(r)
                for r in conn.execute(
                    f"SELECT {_COLUMNS} FROM approvals WHERE run_id = ? AND state = 'decided' "
                    "ORDER BY seq",
                    (run_id,),
                ).fetchall()
            ]
            conn.execute(
                "UPDATE approvals SET state = 'used', used_at = ?, note = ? "
                "WHERE run_id = ? AND state = 'decided'",
                (now, f"used by the resume of {_when(now)} (pid {os.getpid()})", run_id),
            )
            conn.execute(
                "UPDATE approvals SET state = 'closed', note = ? "
                "WHERE run_id = ? AND state = 'waiting'",
                (f"not decided when the run was resumed at {_when(now)}: asked again", run_id),
            )
        answers: dict[str, list[ApprovalAnswer]] = {}
        for r in decided:
            answers.setdefault(r.task_id, []).append(
                ApprovalAnswer(
                    task_id=r.task_id,
                    tool=r.tool,
                    args=r.args,
                    decision=r.decision or "deny",
                    decided_by=r.decided_by or "unknown",
                    reason=r.reason,
                    edit_args=r.edit_args,
                    at=r.decided_at or now,
                    rule=r.rule,
                )
            )
        return run_id, answers

    def release_resume(self, run_id: str) -> None:
        """A resume that stopped before its run was recorded as ended (a tool connection that
        could not be opened, say): the run is paused again. Its decisions stay used: the calls
        they were about are asked about again."""
        with self._transaction() as conn:
            conn.execute(
                "UPDATE runs SET status = 'paused' WHERE id = ? AND status = 'running' AND pid = ?",
                (run_id, os.getpid()),
            )


def _waiting_on(
    conn: sqlite3.Connection, run_id: str, task_id: str, key: str, waiting: list[ApprovalRecord]
) -> list[ApprovalRecord]:
    """The questions about the call in doubt whose idempotency key is ``key``."""
    row = conn.execute(
        "SELECT task_id, args, state, resolution FROM effects WHERE run_id = ? AND key = ?",
        (run_id, key),
    ).fetchone()
    if row is None or row[0] != task_id:
        raise DecisionError(f"task {task_id!r} of run {run_id} made no call with the key {key}")
    if row[2] not in ("started", "cancelled") or row[3] is not None:
        raise DecisionError(
            f"the call with the key {key} (task {task_id!r} of run {run_id}) is not in doubt: "
            f"it {row[2]}" + (f" ({row[3]})" if row[3] else "")
        )
    args = from_column(row[1])
    # One question per call: calls with equal arguments (a map's equal elements) are asked
    # about once each, and decided one by one.
    about = [r for r in waiting if r.rule == _in_doubt_rule() and r.args == args][:1]
    if not about:
        raise DecisionError(
            f"the call with the key {key} (task {task_id!r} of run {run_id}) does not wait for "
            "a decision: resume the run first (it asks about calls in doubt)"
        )
    return about


def _in_doubt_rule() -> str:
    from ..errors import IN_DOUBT_RULE

    return IN_DOUBT_RULE


def _check_happened(run_id: str, task_id: str, waiting: list[ApprovalRecord], output: Any) -> None:
    """``happened`` answers a call in doubt, and an output fits one call."""
    from ..errors import IN_DOUBT_RULE

    other = [r for r in waiting if r.rule != IN_DOUBT_RULE]
    if other:
        raise DecisionError(
            f"task {task_id!r} of run {run_id} waits for approval of a call of "
            f"{other[0].tool!r} ({other[0].rule}), not for a call in doubt: 'happened' is only "
            "for a call whose process died during it; allow or deny it"
        )
    if output is not None and len(waiting) > 1:
        raise DecisionError(
            f"task {task_id!r} of run {run_id} has {len(waiting)} calls in doubt: one output "
            "would stand for all of them; say they happened without --output, or allow or deny"
        )


def _not_waiting(
    conn: sqlite3.Connection, run_id: str, task_id: str, rows: list[ApprovalRecord]
) -> str:
    """Why task ``task_id`` of run ``run_id`` takes no decision, in words."""
    plan = conn.execute("SELECT plan FROM run_plans WHERE run_id = ?", (run_id,)).fetchone()
    ids = [t.id for t in plan_from_column(plan[0] if plan else None, run_id).tasks]
    if task_id not in ids:
        shown = ", ".join(str(i) for i in ids[:10]) + (", ..." if len(ids) > 10 else "")
        return f"run {run_id} has no task {shorten(task_id, 64)!r} (its tasks: {shown})"
    doubt = conn.execute(
        "SELECT r.status FROM effects e JOIN runs r ON r.id = e.run_id WHERE e.run_id = ? "
        "AND e.task_id = ? AND e.state IN ('started', 'cancelled') AND e.resolution IS NULL "
        "AND r.status IN ('succeeded', 'failed', 'cancelled') LIMIT 1",
        (run_id, task_id),
    ).fetchone()
    if doubt is not None:
        return (
            f"task {task_id!r} of run {run_id} has a call in doubt, and the run is {doubt[0]}: "
            "nothing resumes it, so nothing asks; say what became of the call with "
            "RunStore.resolve_in_doubt (on the command line, 'dagagent approve' with "
            "--happened, --allow or --deny)"
        )
    last = rows[-1] if rows else None
    if last is None:
        row = conn.execute(
            "SELECT status FROM tasks WHERE run_id = ? AND task_id = ?", (run_id, task_id)
        ).fetchone()
        now = f"it is {row[0]}" if row else "it has not run"
        return f"task {task_id!r} of run {run_id} is not waiting for approval ({now})"
    who = f"{last.decision} by {last.decided_by} at {_when(last.decided_at)}"
    if last.state == "decided":
        return (
            f"task {task_id!r} of run {run_id} is decided already ({who}); "
            f"the next 'dagagent resume {run_id}' uses that decision"
        )
    if last.state == "used":
        return (
            f"the decision about task {task_id!r} of run {run_id} ({who}) was used by a "
            f"resume at {_when(last.used_at)}; a decision is used once, and the task is not "
            "waiting any more"
        )
    again = (
        f"; nobody can approve it now: 'dagagent replan {run_id} --execute' runs it again, "
        "under the run's approval rules"
        if (last.note or "").startswith("the run ended")
        else ""
    )
    return f"task {task_id!r} of run {run_id} is not waiting any more: {last.note}{again}"


def _not_paused(
    run_id: str, status: str, pid: int | None, owner: str | None, lease_until: float | None
) -> str:
    if status == "running":
        return (
            f"run {run_id} is running (process {pid}{lease_note(owner, lease_until)}), not "
            "paused: it cannot be resumed while it runs (is another 'dagagent resume' under "
            "way?)"
        )
    return f"run {run_id} is {status}, not paused: there is nothing to resume"
