"""Recording sessions (:class:`dagagent.Session`, ``dagagent chat``): a named conversation
and its turns, each a solve. A part of :class:`~dagagent.store.RunStore`.

A turn's row (its number, its solve's id, the question) is written before its solve starts,
in one transaction that takes the next number: two processes that continue a session at the
same time cannot both take turn 3 (the second is told the session moved on). The solve records
itself as any solve does; a turn whose process died shows as its solve does
(``interrupted``), and :meth:`dagagent.Session.resume` continues it. The summary a turn's
models saw of the turns before (a compression, see :mod:`dagagent.planners.conversation`) is
written on the turn's row as soon as it is made, before the turn plans.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from ..errors import ConfigError, StoreError
from ..results import SolveStatus
from ._codec import from_column, to_column
from ._ids import check_run_id
from .models import SessionRecord, SessionSummary, SessionTurnRecord

__all__ = ["SESSION_NAME_RE", "SessionQueries", "check_session_name"]

#: A session's name: 1-64 letters, digits, ``_``, ``-`` or ``.``, starting with a letter or a
#: digit (it is typed on command lines and shown in the viewer's addresses).
SESSION_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def check_session_name(name: str) -> str:
    """``name`` if it can name a session, else :class:`~dagagent.errors.ConfigError`."""
    if not isinstance(name, str) or not SESSION_NAME_RE.match(name):
        raise ConfigError(
            f"{name!r} cannot name a session: use 1-64 letters, digits, '_', '-' or '.', "
            "starting with a letter or a digit"
        )
    return name


class SessionQueries:
    """The session records of a run store (mixed into :class:`~dagagent.store.RunStore`)."""

    path: Path

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # pragma: no cover - RunStore provides it

    def _query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError  # pragma: no cover - RunStore provides it

    # -- writing ----------------------------------------------------------------------------

    def start_turn(
        self,
        session: str,
        solve_id: str,
        question: str,
        *,
        after: int,
        options: Mapping[str, Any] | None = None,
    ) -> int:
        """Record the next turn of ``session`` (begun with ``options`` when it is new): its
        solve ``solve_id`` and ``question``. ``after``: the last turn the caller knows of;
        when another process took a turn since, :class:`~dagagent.errors.StoreError` says so
        (the caller reads the session again). Returns the turn's number."""
        check_session_name(session)
        solve_id = check_run_id(solve_id, prefix=False)
        now = time.time()
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO sessions (name, created, options) VALUES (?, ?, ?)",
                (session, now, to_column(dict(options)) if options is not None else None),
            )
            (last,) = conn.execute(
                "SELECT COALESCE(MAX(turn), 0) FROM session_turns WHERE session = ?", (session,)
            ).fetchone()
            if last != after:
                raise StoreError(
                    f"session {session!r} moved on while this turn was being asked: it has "
                    f"{last} turn{'s' if last != 1 else ''}, not {after} (another process "
                    "continued it); open it again to see its latest turns"
                )
            conn.execute(
                "INSERT INTO session_turns (session, turn, solve_id, question, created) "
                "VALUES (?, ?, ?, ?, ?)",
                (session, last + 1, solve_id, question, now),
            )
        return int(last) + 1

    def drop_unstarted_turn(self, session: str, turn: int) -> bool:
        """Take back turn ``turn`` of ``session`` if its solve never began (a bad option
        refused it before anything was recorded): the session's last turn is then the one
        before. Returns whether it was taken back."""
        with self._transaction() as conn:
            cur = conn.execute(
                "DELETE FROM session_turns WHERE session = ? AND turn = ? AND solve_id NOT IN "
                "(SELECT id FROM solves)",
                (session, turn),
            )
            return cur.rowcount > 0

    def record_compression(self, session: str, turn: int, summary: str, summarized: int) -> None:
        """Record the summary of turns ``1..summarized`` that turn ``turn``'s models saw."""
        self._query(
            "UPDATE session_turns SET summary = ?, summarized = ? WHERE session = ? AND turn = ?",
            (summary, summarized, session, turn),
        )

    # -- reading ----------------------------------------------------------------------------

    def get_session(self, name: str) -> SessionRecord | None:
        """The record of session ``name`` with every turn, or ``None`` when there is none."""
        check_session_name(name)
        rows = self._query("SELECT name, created, options FROM sessions WHERE name = ?", (name,))
        if not rows:
            return None
        found = self._query(
            "SELECT t.turn, t.solve_id, t.question, t.created, t.summary, t.summarized, "
            "s.status, s.pid, s.answer, s.run_id FROM session_turns t "
            "LEFT JOIN solves s ON s.id = t.solve_id WHERE t.session = ? ORDER BY t.turn",
            (name,),
        )
        return SessionRecord(
            name=rows[0][0],
            created=rows[0][1],
            options=from_column(rows[0][2]) or {},
            turns=[_turn(r) for r in found],
        )

    def session_of_solve(self, solve_id: str) -> tuple[str, int] | None:
        """The session and turn solve ``solve_id`` is, or ``None``."""
        rows = self._query(
            "SELECT session, turn FROM session_turns WHERE solve_id = ?", (solve_id,)
        )
        return (str(rows[0][0]), int(rows[0][1])) if rows else None

    def turn_of_solve(self, solve_id: str) -> tuple[str, int, str] | None:
        """The session and turn solve ``solve_id`` belongs to, and the turn's own solve: the
        solve itself when it is a turn, else the turn its parents (a sub-solve's, theirs...)
        lead up to; ``None`` when it belongs to none."""
        seen: set[str] = set()
        current: str | None = solve_id
        while current is not None and current not in seen:
            seen.add(current)
            found = self.session_of_solve(current)
            if found is not None:
                return found[0], found[1], current
            rows = self._query("SELECT parent_solve_id FROM solves WHERE id = ?", (current,))
            current = str(rows[0][0]) if rows and rows[0][0] is not None else None
        return None

    def list_sessions(self, limit: int | None = 20) -> list[SessionSummary]:
        """The sessions that moved last first: their turns, latest question and status."""
        from ._lease import effective_status

        sql = (
            "SELECT n.name, n.created, COUNT(t.turn), MAX(t.created), "
            "(SELECT question FROM session_turns x WHERE x.session = n.name "
            " ORDER BY x.turn DESC LIMIT 1), "
            "(SELECT solve_id FROM session_turns x WHERE x.session = n.name "
            " ORDER BY x.turn DESC LIMIT 1) "
            "FROM sessions n LEFT JOIN session_turns t ON t.session = n.name "
            "GROUP BY n.name ORDER BY COALESCE(MAX(t.created), n.created) DESC, n.name"
        )
        params: tuple[Any, ...] = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (int(limit),)
        out = []
        for name, created, turns, updated, question, solve_id in self._query(sql, params):
            status: SolveStatus | None = None
            if solve_id is not None:
                solve = self._query("SELECT status, pid FROM solves WHERE id = ?", (solve_id,))
                raw = effective_status(*solve[0]) if solve else "interrupted"
                status = _status(raw)
            out.append(
                SessionSummary(
                    name=name,
                    created=created,
                    updated=updated if updated is not None else created,
                    turns=turns,
                    last_question=question or "",
                    last_status=status,
                )
            )
        return out


def _status(raw: str) -> SolveStatus:
    try:
        return SolveStatus(raw)
    except ValueError:
        return SolveStatus.FAILED


def _turn(row: tuple[Any, ...]) -> SessionTurnRecord:
    """A turn's row joined with its solve's; a turn whose solve never got recorded (its
    process died between the two writes) is ``interrupted``."""
    from ._lease import effective_status

    turn, solve_id, question, created, summary, summarized, status, pid, answer, run_id = row
    raw = effective_status(status, pid) if status is not None else "interrupted"
    return SessionTurnRecord(
        turn=turn,
        solve_id=solve_id,
        question=question,
        created=created,
        status=_status(raw),
        answer=from_column(answer),
        run_id=run_id,
        summary=summary,
        summarized=summarized or 0,
        solve_recorded=status is not None,
    )
