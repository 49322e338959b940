"""The tools of the test of two processes resuming one run at once
(``tests/cli/test_resume_race.py``, which copies this file next to its plan and passes
``--tools race_tools.py:registry``). Everything goes through files in ``$RACE_DIR``:

- ``pay`` appends its idempotency key to ``effects.db`` (a SQLite file of its own), in the
  same transaction as the payment; its reconciler looks the key up there. With
  ``$RACE_CRASH`` set to a number, the payment of that amount kills its own process (SIGKILL)
  once made, before its outcome is on record: the call is left in doubt.
- with ``$RACE_BARRIER`` set, loading this module is a barrier: the process writes its pid to
  the FIFO ``ready`` and reads one byte from the FIFO ``go`` (the test writes one for each
  process once every process has written its pid), so that the processes ask for the run
  together.
- ``hold`` reads one byte from the FIFO ``release``: the run stays claimed until the test
  writes it.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

import dagagent

DIR = Path(os.environ["RACE_DIR"])
EFFECTS = DIR / "effects.db"

registry = dagagent.Registry()


def _logged(key: str) -> dict[str, Any] | None:
    with sqlite3.connect(EFFECTS, timeout=30) as conn:
        row = conn.execute("SELECT output FROM effects WHERE key = ?", (key,)).fetchone()
    found: dict[str, Any] | None = json.loads(row[0]) if row else None
    return found


def check_payment(call: dagagent.CallIdentity) -> dagagent.Reconciled:
    found = _logged(call.idempotency_key)
    if found is None:
        return dagagent.Reconciled.not_happened()
    return dagagent.Reconciled.happened(found)


@registry.tool(side_effects=True, reconcile=check_payment)
def pay(n: int) -> dict[str, Any]:
    """Pay n."""
    call = dagagent.current_call()
    output = {"paid": n, "key": call.idempotency_key, "pid": os.getpid()}
    with sqlite3.connect(EFFECTS, timeout=30, isolation_level=None) as conn:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO effects (key, output) VALUES (?, ?)",
            (call.idempotency_key, json.dumps(output)),
        )
        conn.execute("COMMIT")
    if os.environ.get("RACE_CRASH") == str(n):
        os.kill(os.getpid(), signal.SIGKILL)
    return output


@registry.tool
def hold() -> int:
    """Wait for the test's word: the run stays claimed by this process until then."""
    with open(DIR / "release", "rb", buffering=0) as release:
        release.read(1)
    return os.getpid()


def _barrier() -> None:
    with open(DIR / "ready", "w") as ready:
        ready.write(f"{os.getpid()}\n")
    with open(DIR / "go", "rb", buffering=0) as go:
        go.read(1)


if os.environ.get("RACE_BARRIER"):
    _barrier()
