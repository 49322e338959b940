"""Once only: a call of a tool with side effects is made by at most one run of its Dask task.

Dask runs a task again on its own in more cases than a dead worker under it
(``allowed_failures`` above 0, Dask's default being 3): a task whose *result* was lost with its
worker is computed again elsewhere while a client still holds its future, and the executor
holds the futures of small results until the run ends (see :meth:`~._calls._Session.hold`).
A call with side effects must not be made by that second run: its effect was made by the
first. So each run of such a call first takes the call's claim on the scheduler, by the call's
Dask key (a key the driver never submits twice: a retry is a new key); the scheduler answers
claims one at a time, so exactly one run takes it, and any other refuses (see
:class:`~._worker._Refused`). A key the scheduler has forgotten (nobody wants its result any
more) gives its claim up and cannot be claimed again.

The claims are kept by a scheduler plugin that travels *by value* (its class is made by
:func:`once_only`, so that cloudpickle sends its code): a scheduler without dagagent
installed takes it all the same. It is registered idempotently under one name, so that every
session and executor on a scheduler shares the one set of claims.
"""

from __future__ import annotations

from typing import Any

#: The scheduler's handler that takes a claim: ``key`` -> whether this run took it.
CLAIM = "dagagent_claim"
PLUGIN = "dagagent-once-only"


def once_only() -> Any:
    """The scheduler plugin that keeps the claims (a fresh class each time: see the module)."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    handler = CLAIM

    class OnceOnly(SchedulerPlugin):
        """The keys whose call one of its runs has claimed, while the scheduler knows them."""

        idempotent = True  # registering again (another session) keeps the claims

        def __init__(self) -> None:
            self.claimed: set[Any] = set()
            self.scheduler: Any = None

        async def start(self, scheduler: Any) -> None:
            self.scheduler = scheduler
            scheduler.handlers[handler] = self.claim

        async def close(self) -> None:
            if self.scheduler is not None:
                self.scheduler.handlers.pop(handler, None)

        def claim(self, key: Any) -> bool:
            if key in self.claimed or key not in self.scheduler.tasks:
                return False  # a run took it, or nobody wants the result any more
            self.claimed.add(key)
            return True

        def transition(self, key: Any, start: Any, finish: Any, *args: Any, **kwargs: Any) -> None:
            if finish == "forgotten":
                self.claimed.discard(key)

    return OnceOnly()
