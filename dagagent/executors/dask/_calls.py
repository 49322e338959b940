"""Tool calls through an open session: submitted in batches, their small results pushed back
with their completion, their futures released off the path of the next call.

- **Submission.** The calls made in one turn of the driver's event loop (the tasks a
  finished task made ready, say) go to the scheduler together, one ``client.map`` per worker
  function: one graph update instead of one per call (see :meth:`_Session.flush`). A call
  whose arguments cannot be pickled fails alone with
  :class:`~dagagent.errors.ToolArgumentsError`; the calls submitted with it run.
- **Results.** A result of at most 4 KiB pickled travels back with its call's completion, as
  an event of the executor's own client (see :func:`~._worker._push`), saving the round trip
  that fetches it; a larger one, or any result when the client was given, is fetched. The
  Dask futures of pushed results are released together when the run ends (or every
  :data:`_HOLD_MAX` of them), not one by one between the calls of a chain (see
  :meth:`_Session.hold`); the others as soon as their result is in.
- **Cancellation.** When the awaiting coroutine is cancelled (fail-fast, a timeout, an
  interrupt) it cancels its Dask future. A sync tool already running in a worker thread runs
  to its end there; its result is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import pickle
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from ... import telemetry
from ...errors import ToolArgumentsError
from ._crashes import _Crashes, lost
from ._shipping import _Shipped, ship, unship
from ._worker import _PUSHED, _brief  # _PUSHED: the mark of a pushed result's event

if TYPE_CHECKING:
    from ...tools import CallIdentity, Tool

# Seconds allowed for telling the scheduler to cancel a future whose caller was cancelled.
_CANCEL_TIMEOUT_S = 5.0
# Futures of pushed results held before they are released together (see _Session.hold).
_HOLD_MAX = 1000


class _Call:
    """One tool call on its way to the cluster: submitted with the other calls made in the
    same turn of the event loop (see :meth:`_Session.flush`); ``future`` is its Dask future
    once ``submitted`` is done."""

    __slots__ = (
        "args",
        "future",
        "identity",
        "key",
        "once",
        "push",
        "shipped",
        "submitted",
        "trace",
    )

    def __init__(
        self,
        shipped: _Shipped,
        args: Mapping[str, Any],
        trace: dict[str, str] | None,
        push: tuple[str, str] | None,
        key: str,
        submitted: asyncio.Future[None],
        identity: CallIdentity | None = None,
        once: bool = False,
    ) -> None:
        self.shipped = shipped
        self.args = args
        self.trace = trace
        self.push = push
        self.identity = identity
        self.key = key
        self.submitted = submitted
        self.future: Any = None
        #: A call with side effects: its run claims its key first (see :mod:`~._once`).
        self.once = once

    @property
    def claim(self) -> str | None:
        return self.key if self.once else None


@dataclass
class _Session:
    """What an open session holds: its client (and the local cluster it started), the tools
    shipped through it, and its calls in flight."""

    # Dask's sync/async dual API is typed for sync use: awaited calls are Any here.
    client: Any
    cluster: Any
    own_client: bool
    keys: Iterator[int] = field(default_factory=itertools.count)
    shipped: dict[Tool, _Shipped] = field(default_factory=dict)
    users: int = 0
    traced: bool = False  # OpenTelemetry is on: calls carry their trace context
    #: Workers that died under calls.
    crashes: _Crashes = field(default_factory=_Crashes)
    #: Calls whose small result may arrive pushed (see _push), by Dask key; ``None``: no
    #: pushing (a client the executor did not create, whose events it must not fill).
    waiting: dict[str, asyncio.Future[bytes]] | None = None
    #: Calls made in this turn of the event loop, submitted together at its end.
    batch: list[_Call] = field(default_factory=list)
    #: Futures of calls whose result came pushed, released together (see :meth:`hold`).
    held: list[Any] = field(default_factory=list)

    def hold(self, future: Any) -> None:
        """Keep the future of a call whose result came pushed until the run ends (or
        :data:`_HOLD_MAX` are held), then release them all at once.

        Releasing a key makes the scheduler tell the worker holding its result to free it,
        on the same stream and within the same few milliseconds as the next call of a chain
        it may be sending that worker: Dask's stream then holds the call back until its
        send interval (5 ms) has passed. What the held futures keep on the workers is
        small: a pushed result is at most :data:`~._worker._PUSH_MAX_BYTES` pickled. A held
        result lost with its worker is computed again by Dask, as any wanted result is: a
        call with side effects refuses that second run (see :mod:`~._once`)."""
        held = self.held
        held.append(future)
        if len(held) >= _HOLD_MAX:
            self.release_held()

    def release_held(self) -> None:
        held, self.held = self.held, []
        for future in held:
            future.release()

    def submit(self, call: _Call) -> None:
        """Queue ``call``; the first call of a turn schedules :meth:`flush`."""
        if not self.batch:
            asyncio.get_running_loop().call_soon(self.flush)
        self.batch.append(call)

    def flush(self) -> None:
        """Submit the queued calls, all those of one worker function in one message.

        A task fanning out makes its dependents ready at once and the runner reaches the
        invoker of each in the same turn of the event loop; one ``client.map`` of all their
        calls is one graph update for the scheduler, where a ``client.submit`` each costs
        one update (and its event) per call. A call whose caller was cancelled meanwhile is
        left out. When a batch cannot be sent (an argument that cannot be pickled), each of
        its calls is submitted on its own, so that only the one at fault fails."""
        batch, self.batch = self.batch, []
        groups: dict[Callable[..., Any], list[_Call]] = {}
        for call in batch:
            if not call.submitted.done():  # else its caller was cancelled before it went
                groups.setdefault(call.shipped.caller, []).append(call)
        map_ = self.client.map
        for caller, calls in groups.items():
            if len(calls) > 1:
                try:
                    futures = map_(
                        caller,
                        [c.shipped.fn for c in calls],
                        [c.args for c in calls],
                        [c.trace for c in calls],
                        [c.push for c in calls],
                        [c.identity for c in calls],
                        [c.claim for c in calls],
                        key=[c.key for c in calls],
                        pure=False,
                    )
                except Exception:
                    for call in calls:  # under new keys: Dask made futures for the old ones
                        self.submit_alone(call, fresh=True)
                    continue
                for call, future in zip(calls, futures, strict=True):
                    call.future = future
                    call.submitted.set_result(None)
            else:
                self.submit_alone(calls[0], fresh=False)

    def submit_alone(self, call: _Call, *, fresh: bool) -> None:
        if fresh:
            key = call.key = f"{call.shipped.prefix}{next(self.keys)}"
            if call.push is not None and self.waiting is not None:
                waiter = self.waiting.pop(call.push[1], None)
                if waiter is not None:
                    self.waiting[key] = waiter
                call.push = (call.push[0], key)
        try:
            call.future = self.client.submit(
                call.shipped.caller,
                call.shipped.fn,
                call.args,
                call.trace,
                call.push,
                call.identity,
                call.claim,
                key=call.key,
                pure=False,
            )
        except Exception as exc:
            call.submitted.set_exception(_unsendable(call, exc))
        else:
            call.submitted.set_result(None)

    def listen(self) -> None:
        """Take the results workers push (on the topic named after this client)."""
        self.waiting = {}
        self.client.subscribe_topic(self.client.id, self.received)

    def received(self, event: tuple[float, Any]) -> None:
        msg = event[1]
        if type(msg) in (list, tuple) and len(msg) == 3 and msg[0] == _PUSHED:
            waiter = (self.waiting or {}).pop(msg[1], None)
            if waiter is not None and not waiter.done():
                waiter.set_result(msg[2])

    def ship(self, tool: Tool) -> _Shipped:
        """Pickle ``tool`` once for this session (raises what pickling raises)."""
        shipped = self.shipped.get(tool)
        if shipped is None:
            shipped = self.shipped[tool] = ship(tool)
        return shipped

    def forget(self) -> None:
        for shipped in self.shipped.values():
            unship(shipped)
        self.shipped.clear()


async def call_on_cluster(
    state: _Session,
    shipped: _Shipped,
    tool: Tool,
    args: Mapping[str, Any],
    identity: CallIdentity | None = None,
    *,
    once: bool = False,
) -> Any:
    """Submit one call and await it; a worker that died under it is
    :class:`~._crashes._Killed`. ``identity``: a call with side effects, current on the
    worker while it runs (see :func:`~._worker.carried`). ``once``: a call with side
    effects, made by one run of its task at most (see :mod:`~._once`)."""
    client = state.client
    trace = telemetry.carrier() if state.traced else None  # the task's trace context
    key = f"{shipped.prefix}{next(state.keys)}"
    waiting = state.waiting
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[bytes] | None = None
    push = None
    if waiting is not None:  # a small result comes with the completion (see _push)
        waiter = waiting[key] = loop.create_future()
        push = (client.id, key)
    call = _Call(shipped, args, trace, push, key, loop.create_future(), identity, once)
    state.submit(call)
    try:
        await call.submitted  # with the other calls of this turn (raises what Dask raised)
        future = call.future
        if waiter is not None:
            finished = asyncio.ensure_future(_finished(future))
            try:
                await asyncio.wait((waiter, finished), return_when=asyncio.FIRST_COMPLETED)
            finally:
                finished.cancel()
            if waiter.done():
                state.hold(future)  # released with others, off the path of the next call
                call.future = None
                return pickle.loads(waiter.result())
        return await future  # fetched (or what went wrong, raised)
    except BaseException as exc:
        gone = lost(exc, tool.name)  # the worker, the task or the scheduler was lost
        if gone is not None:
            raise gone from None
        # our caller was cancelled (fail-fast, timeout, interrupt)
        future = call.future  # None: it was never submitted
        if future is not None and not future.done():
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_TIMEOUT_S):
                await _quietly(client.cancel([future]))
        raise
    finally:
        if waiting is not None:
            waiting.pop(call.key, None)
        # Forget the key now rather than when the future is garbage collected (an error's
        # traceback keeps it alive): the scheduler and workers drop the result or error.
        if call.future is not None:
            call.future.release()


async def _finished(future: Any) -> None:
    """Until a Dask future is done (finished, failed or cancelled), without fetching it: its
    public done callback, handed to this event loop. (``distributed.wait`` would use the
    default client, which may be a synchronous one.)"""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not done.done():
            done.set_result(None)

    def on_done(_: Any) -> None:  # in Dask's callback thread
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is waiting
            loop.call_soon_threadsafe(settle)

    future.add_done_callback(on_done)
    await done


def _unsendable(call: _Call, exc: Exception) -> Exception:
    """What a call that could not be submitted raises: arguments that cannot be pickled are
    the plan's problem, named as such (and not retried); anything else as Dask raised it."""
    import cloudpickle  # type: ignore[import-untyped]

    try:
        cloudpickle.dumps(call.args)
    except Exception as why:
        return ToolArgumentsError(
            call.shipped.fn.name,
            [f"they cannot be pickled to travel to the Dask workers ({_brief(why)})"],
        )
    return exc


async def _quietly(awaitable: Any) -> None:
    """Await a Dask cleanup call; a failure to clean up must not hide the run's outcome."""
    with contextlib.suppress(Exception):
        await awaitable
