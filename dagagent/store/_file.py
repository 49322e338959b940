"""The store's SQLite file: opening it (WAL; read-only for readers that may not write), and
what a file that cannot be opened, or is not a store, is reported as."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..errors import StoreError

__all__ = ["BUSY_TIMEOUT_S", "connect", "failure", "open_error", "refuse_foreign"]


def refuse_foreign(conn: sqlite3.Connection, path: Path) -> None:
    """A store at schema version 0 is a new, empty file: never add our tables to (or switch
    the journal of) another application's database, e.g. a --store pointed at the wrong file."""
    foreign = [
        r[0]
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' LIMIT 6"
        )
    ]
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise StoreError(
            f"{path} is not a dagagent run store: it is a SQLite database of something else "
            f"(it has {shown}); choose another --store file"
        )


def failure(exc: sqlite3.Error) -> str:
    """What kind of failure ``exc`` is: ``busy`` (another process holds a lock), ``readonly``,
    ``cantopen``, or ``other`` (e.g. not a database, a damaged file)."""
    name = getattr(exc, "sqlite_errorname", "")  # Python 3.11+
    text = str(exc)
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or (not name and "locked" in text):
        return "busy"
    if name.startswith("SQLITE_READONLY") or (not name and "readonly" in text):
        return "readonly"
    if name.startswith("SQLITE_CANTOPEN") or (not name and "unable to open" in text):
        return "cantopen"
    return "other"


def open_error(path: Path, exc: sqlite3.Error, doing: str = "open") -> StoreError:
    """The error of a store that cannot be opened, saying why: another process holds it
    locked, it cannot be written, it cannot be opened at all, or it is not a store."""
    kind = failure(exc)
    if kind == "busy":
        return StoreError(
            f"run store {path} is locked by another process (waited {BUSY_TIMEOUT_S:g} s "
            f"to {doing} it): try again when that process is done"
        )
    if kind == "readonly":
        return StoreError(
            f"run store {path} cannot be written: it is read-only ({exc}); commands that "
            "only read runs can still read it; or choose another --store"
        )
    if kind == "cantopen":
        return StoreError(f"cannot {doing} run store {path}: {exc}")
    return StoreError(f"{path} is not a dagagent run store: {exc}")


#: How long a connection waits for another process's lock (SQLite's busy timeout).
BUSY_TIMEOUT_S = 10.0


def connect(path: Path, *, read_only: bool = False) -> sqlite3.Connection:
    """A connection to the store file (``read_only``: one that cannot write to it, and that
    also opens a store in a directory it cannot write to)."""
    if read_only:
        uri = path.resolve().as_uri()
        try:
            conn = _connect_ro(uri + "?mode=ro")
        except sqlite3.OperationalError as exc:
            # A WAL store whose directory is read-only: its shared-memory file cannot be
            # made. Nobody can write the store there, so it may be read as unchanging.
            if failure(exc) not in ("cantopen", "readonly"):
                raise open_error(path, exc, "read") from None
            try:
                conn = _connect_ro(uri + "?immutable=1")
            except sqlite3.Error as exc2:
                raise open_error(path, exc2, "read") from None
        except sqlite3.Error as exc:
            raise open_error(path, exc, "read") from None
        return conn
    conn = sqlite3.connect(
        str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )
    try:
        if int(conn.execute("PRAGMA user_version").fetchone()[0]) == 0:
            refuse_foreign(conn, path)
        conn.execute("PRAGMA synchronous=NORMAL")  # first: the switch to WAL is then quicker
        # Switching to WAL writes to the file: only when it is not in WAL mode yet.
        if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
            # A new file (no page yet) has nothing a journal could restore: it is switched
            # without one (a rollback journal costs three waits for the disk, often more than
            # the rest of the store's opening). A process killed meanwhile leaves the empty
            # file, or the switched one: its first page is one write.
            new = int(conn.execute("PRAGMA page_count").fetchone()[0]) == 0
            if new:
                conn.execute("PRAGMA journal_mode=MEMORY")
            mode = str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
            if new and mode != "wal":  # WAL refused (e.g. no shared memory): the usual journal
                conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("PRAGMA foreign_keys=ON")
    except sqlite3.Error as exc:
        conn.close()
        raise open_error(path, exc) from None
    except StoreError:
        conn.close()
        raise
    return conn


def _connect_ro(uri: str) -> sqlite3.Connection:
    conn = sqlite3.connect(
        uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
    )
    try:
        conn.execute("PRAGMA user_version").fetchone()
    except BaseException:
        conn.close()
        raise
    return conn
