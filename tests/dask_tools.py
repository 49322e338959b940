"""Tools for the Dask executor tests that run on worker *processes*.

They live in an importable module rather than in the test file: ``tests/`` is on
``sys.path`` under pytest, and a ``LocalCluster``'s worker processes start with the
driver's ``sys.path``, so the workers import this module and these tools travel *by name*,
exactly as tools installed on a real cluster would. (Tools defined inside a test function
travel by value instead; the in-process tests cover that path.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio

from dagagent import Registry

registry = Registry()


@registry.tool
def where(value: int) -> dict[str, Any]:
    """Return the value and the id of the process that ran the call.

    Args:
        value: Any integer.
    """
    return {"pid": os.getpid(), "value": value}


@registry.tool
async def awhere(value: int, seconds: float = 0.0) -> dict[str, Any]:
    """Async: sleep, then return the value and the id of the process that ran the call.

    Args:
        value: Any integer.
        seconds: How long to sleep first.
    """
    await anyio.sleep(seconds)
    return {"pid": os.getpid(), "value": value}


@registry.tool
def die() -> None:
    """Kill the worker process running this call."""
    os._exit(1)


@registry.tool
def die_once(marker: str) -> str:
    """Kill the worker process the first time (creating ``marker``), succeed afterwards.

    Args:
        marker: A file path that records the first call.
    """
    path = Path(marker)
    if not path.exists():
        path.write_text("died once")
        os._exit(1)
    return "survived"


@registry.tool
def trace_context() -> dict[str, Any]:
    """The trace and span the call runs under, as the worker process sees them."""
    from opentelemetry import trace

    ctx = trace.get_current_span().get_span_context()
    return {"pid": os.getpid(), "trace_id": ctx.trace_id, "span_id": ctx.span_id}


@registry.tool
async def atrace_context() -> dict[str, Any]:
    """``trace_context`` as an async tool (run on the worker's event loop)."""
    return trace_context.fn()


@registry.tool
def segfault(log: str, after: float = 0.0) -> None:
    """Note the call in ``log``, sleep, then crash the worker process with a segfault.

    Args:
        log: A file each call appends a line to.
        after: Seconds to sleep first.
    """
    import signal
    import time

    with open(log, "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()}\n")
    time.sleep(after)
    os.kill(os.getpid(), signal.SIGSEGV)


@registry.tool
def nap(value: int, seconds: float) -> dict[str, Any]:
    """Sleep in a worker thread, then return the value and the worker's process id.

    Args:
        value: Any integer.
        seconds: How long to sleep.
    """
    import time

    time.sleep(seconds)
    return {"pid": os.getpid(), "value": value}


def _identity() -> dict[str, Any]:
    import dagagent

    call = dagagent.current_call()
    return {
        "pid": os.getpid(),
        "key": call.idempotency_key,
        "run_id": call.run_id,
        "task_id": call.task_id,
        "element": call.element,
        "attempt": call.attempt,
    }


@registry.tool(side_effects=True)
def charge(account: str) -> dict[str, Any]:
    """A side effect: the identity of the call, as the worker process sees it.

    Args:
        account: Whom to charge.
    """
    return {"account": account, **_identity()}


@registry.tool(side_effects=True)
async def acharge(account: str) -> dict[str, Any]:
    """``charge`` as an async tool (run on the worker's event loop).

    Args:
        account: Whom to charge.
    """
    return {"account": account, **_identity()}


@registry.tool(side_effects=True)
def charge_slowly(account: str, ledger: str, seconds: float) -> dict[str, Any]:
    """A side effect counted outside the process: append the call's key to ``ledger``, then
    sleep (so that a worker crash meanwhile takes the call with it).

    Args:
        account: Whom to charge.
        ledger: A file each call appends its idempotency key to.
        seconds: How long to sleep after the effect.
    """
    import time

    import dagagent

    with open(ledger, "a", encoding="utf-8") as f:
        f.write(dagagent.current_call().idempotency_key + "\n")
    time.sleep(seconds)
    return {"account": account, **_identity()}


@registry.tool(side_effects=True)
def note(ledger: str) -> int:
    """A side effect counted outside the process: append the worker's process id to
    ``ledger``, and return it.

    Args:
        ledger: A file each call appends a line to.
    """
    with open(ledger, "a", encoding="utf-8") as f:
        f.write(f"{os.getpid()}\n")
    return os.getpid()


@registry.tool(side_effects=True)
def note_slowly(ledger: str, seconds: float) -> int:
    """``note``, then sleep (a call still running after its effect).

    Args:
        ledger: A file each call appends a line to.
        seconds: How long to sleep after the effect.
    """
    import time

    pid = note.fn(ledger)
    time.sleep(seconds)
    return pid


@registry.tool(side_effects=True)
def note_and_die(ledger: str) -> None:
    """A side effect, then the end of the worker process that made it (before it could
    report it).

    Args:
        ledger: A file each call appends a line to.
    """
    note.fn(ledger)
    os._exit(1)


async def end_process() -> None:
    """End the process at once (for ``Client.run`` on a worker, which takes a coroutine
    function when it is not to wait for an answer)."""
    os._exit(1)
