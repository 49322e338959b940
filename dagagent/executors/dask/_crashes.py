"""Lost workers and crashes: telling a worker that died from a tool that failed, and running
the calls a worker took with it again elsewhere, one at a time, to find the one that kills.

A worker that dies mid-call (Dask's ``KilledWorker``), a lost scheduler connection or a future
cancelled on the cluster becomes :class:`~dagagent.errors.WorkerLostError` (:func:`lost`),
retried if the task allows retries. The local cluster is started with ``allowed_failures=0``
so that Dask reports a dead worker at once instead of silently re-running the call on another
worker; dagagent's own retry policy decides. A call that kills its worker (a segfault in
native code, say) takes the other calls running there with it: when a worker dies under
several calls, each is run again elsewhere, one at a time, and the one that kills its worker
again fails, named as the cause; the others go on as if nothing happened
(:func:`surviving_crashes`). A worker that died under one call names that call at once.
"""

from __future__ import annotations

import concurrent.futures
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from ...errors import WorkerLostError
from ._worker import _brief

# Seconds a call that died with its worker waits for the other calls of that worker to report
# their death (Dask reports them together, when the scheduler removes the worker).
_CRASH_SETTLE_S = 0.2
_HOW_CALLS_KILL = "a crash in native code such as a segfault, running out of memory, os._exit"


class _Killed(Exception):
    """The worker running a call died (Dask's ``KilledWorker``), at ``worker``."""

    def __init__(self, worker: str) -> None:
        super().__init__(worker)
        self.worker = worker or "an unnamed worker"
        # the calls that died with one worker share its address (one a restart gets anew)
        self.key = worker or uuid.uuid4().hex


@dataclass
class _Crash:
    """A worker that died: how many calls died with it, and its calls' second chance, taken
    one at a time."""

    calls: int = 0
    one_at_a_time: anyio.Lock = field(default_factory=anyio.Lock)


class _Crashes:
    """The workers that died under calls of one session, by address (a restarted worker has
    a new one)."""

    def __init__(self) -> None:
        self.by_worker: dict[str, _Crash] = {}

    def count(self, killed: _Killed) -> _Crash:
        """Count a call that died with its worker."""
        crash = self.by_worker.setdefault(killed.key, _Crash())
        crash.calls += 1
        return crash


async def surviving_crashes(
    crashes: _Crashes,
    submit: Callable[[], Awaitable[Any]],
    tool_name: str,
    *,
    side_effects: bool = False,
) -> Any:
    """``await submit()``; if its worker dies under it, run it again as :mod:`the module
    <dagagent.executors.dask._crashes>` tells, or fail naming it as the cause. A call with
    ``side_effects`` is never run again here: it may have taken effect before its worker
    died (its task's retries, if any, make it again, with its idempotency key)."""
    try:
        return await submit()
    except _Killed as first:
        crash = crashes.count(first)
        await anyio.sleep(_CRASH_SETTLE_S)  # the other calls of that worker report too
        if crash.calls == 1:
            raise WorkerLostError(
                f"the Dask worker running tool {tool_name!r} died ({first.worker}) while "
                f"it ran this call and no other, so the call most likely killed it "
                f"({_HOW_CALLS_KILL}); see that worker's log"
            ) from None
        if side_effects:
            raise WorkerLostError(
                f"the Dask worker running tool {tool_name!r} died ({first.worker}) during "
                f"this call and {crash.calls - 1} other(s); the tool has side effects and "
                "the call may have taken effect, so it is not run again elsewhere"
            ) from None
        # Several calls died with the worker, and one of them (or something else) killed
        # it: run them again elsewhere, one at a time, so that the one that kills its
        # worker again is known.
        async with crash.one_at_a_time:
            try:
                return await submit()
            except _Killed as second:
                crashes.count(second)  # the calls that died with it get their chance
                raise WorkerLostError(
                    f"the Dask worker running tool {tool_name!r} died ({second.worker}), "
                    f"and so did the worker that ran this call before ({first.worker}), "
                    f"with {crash.calls - 1} other call(s) that were run again elsewhere: "
                    f"this call kills its worker ({_HOW_CALLS_KILL}); see the workers' logs"
                ) from None


def lost(exc: BaseException, tool_name: str) -> Exception | None:
    """What a call on the cluster that ended with ``exc`` raises when its worker, its task on
    the cluster or the connection to the scheduler was lost; ``None`` for anything else."""
    from distributed import KilledWorker
    from distributed.comm.core import CommClosedError

    if isinstance(exc, KilledWorker):
        worker = getattr(getattr(exc, "last_worker", None), "address", None)
        return _Killed(str(worker) if worker else "")
    if isinstance(exc, concurrent.futures.CancelledError):  # cancelled on the cluster, not by us
        return WorkerLostError(
            f"the Dask task running tool {tool_name!r} was cancelled on the cluster: {exc}"
        )
    if isinstance(exc, CommClosedError):
        return WorkerLostError(
            f"lost the connection to the Dask scheduler while running tool {tool_name!r}: "
            f"{_brief(exc)}"
        )
    return None
