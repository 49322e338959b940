"""What runs on the Dask workers: the call of one tool, and what it sends back.

These are module-level functions and classes, so that they pickle by reference: workers need
dagagent installed (and whatever the tools themselves import). A call never raises on the
worker: what the tool raised is returned as a value (:class:`_RaisedOnWorker`), and a small
result is pushed to the driver with the call's completion (:func:`_push`). A call of a tool
with side effects travels with its identity (:func:`carried`), current while it runs there,
so that :func:`dagagent.current_call` works on the worker as in the driver's process, and with
its Dask key, which it claims on the scheduler before it runs: a second run of the same task
(Dask's, after a worker was lost) refuses (:class:`_Refused`, see :mod:`~._once`).
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
from types import AsyncGeneratorType, GeneratorType
from typing import TYPE_CHECKING, Any

from ... import telemetry
from ...tools import materialize_async
from ...tools._effects import call_of, reset_call, using_call
from ._once import CLAIM

if TYPE_CHECKING:
    from ...tools import CallIdentity
    from ._shipping import _Fn

# Results (pickled) at most this big travel to the driver with the call's completion (see
# _push); the scheduler keeps the last 1,000 events of a topic while the client lives.
_PUSH_MAX_BYTES = 4096
_PUSHED = "dagagent-result"


class _RaisedOnWorker:
    """What a tool raised on a worker, *returned* as the call's value rather than raised.

    A raised exception is a failed Dask task, which the worker logs at ERROR level with its
    traceback ("Compute Failed") - on a local cluster straight into the user's terminal, for
    what is an ordinary task failure (a city the tool does not know). A BaseException
    (``sys.exit()``, ``KeyboardInterrupt``...) must not be let through either: SystemExit would
    stop the worker process and take every call running there with it. The driver raises it
    again (:meth:`rebuild`), so the task fails exactly as it would in-process.
    """

    def __init__(self, exc: BaseException) -> None:
        self.name = type(exc).__name__
        self.exc_args = _picklable_args(exc)
        self.text = str(exc)
        self.ordinary = isinstance(exc, Exception)
        # the exception itself when it survives the trip to the driver (the same type there)
        self.exc: BaseException | None = exc if self.ordinary and _round_trips(exc) else None

    def rebuild(self) -> BaseException:
        import builtins

        if self.exc is not None:
            return self.exc
        cls = getattr(builtins, self.name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            try:
                return cls(*self.exc_args)
            except Exception:
                pass
        # A class of the tool's own: the same name, so the task's error reads the same.
        base: type[BaseException] = Exception if self.ordinary else BaseException
        own: type[BaseException] = type(self.name, (base,), {"__module__": "worker"})
        return own(self.text)


class _Refused:
    """What a run of a call with side effects returns when another run of its Dask task
    claimed the call first (see :mod:`~._once`): the call was not made by this run."""

    __slots__ = ("worker",)

    def __init__(self, worker: str) -> None:
        self.worker = worker


def _claim(key: str) -> bool:
    """In a worker thread: take the claim of the call under Dask key ``key``."""
    from distributed import get_worker

    worker = get_worker()
    ask = getattr(worker.scheduler, CLAIM)
    loop: Any = worker.loop  # tornado's IOLoop on asyncio: its loop is asyncio_loop
    return bool(asyncio.run_coroutine_threadsafe(ask(key=key), loop.asyncio_loop).result())


async def _aclaim(key: str) -> bool:
    """On the worker's event loop: :func:`_claim`."""
    from distributed import get_worker

    return bool(await getattr(get_worker().scheduler, CLAIM)(key=key))


def _unclaimed(exc: BaseException) -> _RaisedOnWorker:
    """What a call whose claim could not be asked for returns: it was not made."""
    return _RaisedOnWorker(
        RuntimeError(
            "the call was not made: the Dask scheduler could not be asked to make sure it "
            f"runs once ({_brief(exc)})"
        )
    )


def _worker_address() -> str:
    from distributed import get_worker

    return str(get_worker().address)


def _round_trips(exc: BaseException) -> bool:
    import cloudpickle  # type: ignore[import-untyped]

    try:
        cloudpickle.loads(cloudpickle.dumps(exc))
    except Exception:
        return False
    return True


def _picklable_args(exc: BaseException) -> tuple[Any, ...]:
    return tuple(
        a if isinstance(a, (str, int, float, bool, type(None))) else str(a) for a in exc.args
    )


def carried(tool: str) -> CallIdentity | None:
    """On the driver: the identity a call of ``tool`` takes to the worker (the current call,
    when it is the call of that tool with side effects being made), else ``None``."""
    return call_of(tool)


def _call(
    fn: _Fn,
    args: dict[str, Any],
    trace: dict[str, str] | None = None,
    push: tuple[str, str] | None = None,
    call: CallIdentity | None = None,
    claim: str | None = None,
) -> Any:
    """Run a sync tool (in a worker thread); a generator it returns travels as a list.
    ``trace``: the task's trace context (with OpenTelemetry on), current while it runs.
    ``push``: where to send a small result at once (see :func:`_push`). ``call``: the
    identity of a call with side effects, :func:`~dagagent.current_call` while it runs.
    ``claim``: the Dask key of a call with side effects, claimed before it is made (a run
    that does not get the claim returns :class:`_Refused`)."""
    if claim is not None:
        try:
            claimed = _claim(claim)
        except Exception as exc:
            return _unclaimed(exc)
        if not claimed:
            return _refused(push)
    token = using_call(call) if call is not None else None
    try:
        with telemetry.attached(trace):
            result = fn.load()(**args)
            if type(result) is GeneratorType:
                result = list(result)
            elif type(result) is AsyncGeneratorType:  # no event loop in this thread: a short one
                result = asyncio.run(materialize_async(result))
    except BaseException as exc:
        result = _RaisedOnWorker(exc)
    finally:
        if token is not None:
            reset_call(token)
    if push is not None:
        _push(push, result)
    return result


async def _acall(
    fn: _Fn,
    args: dict[str, Any],
    trace: dict[str, str] | None = None,
    push: tuple[str, str] | None = None,
    call: CallIdentity | None = None,
    claim: str | None = None,
) -> Any:
    """Run an async tool (on the worker's event loop)."""
    if claim is not None:
        try:
            claimed = await _aclaim(claim)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return _unclaimed(exc)
        if not claimed:
            return _refused(push)
    token = using_call(call) if call is not None else None
    try:
        with telemetry.attached(trace):
            result = await materialize_async(await fn.load()(**args))
    except asyncio.CancelledError:  # Dask cancelled the call
        raise
    except BaseException as exc:
        result = _RaisedOnWorker(exc)
    finally:
        if token is not None:
            reset_call(token)
    if push is not None:
        _push(push, result)
    return result


def _refused(push: tuple[str, str] | None) -> _Refused:
    refused = _Refused(_worker_address())
    if push is not None:  # a driver still waiting for the call hears it at once
        _push(push, refused)
    return refused


def _push(push: tuple[str, str], result: Any) -> None:
    """Send a small result to the driver with the call's completion instead of after it.

    Dask tells the driver that a task finished, and the driver then asks for its result: one
    more round trip through the scheduler to the worker, for every call (a chain of calls
    pays it at every step). A result of at most :data:`_PUSH_MAX_BYTES` pickled goes to the
    driver's client as an event of the topic named after that client (``push`` is the topic
    and the call's key), which the scheduler sends on with the task's completion and forgets
    when the client goes. The result is also returned as usual: anything that cannot go this
    way, or does not arrive, is fetched."""
    try:
        blob = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return
    if len(blob) > _PUSH_MAX_BYTES:
        return
    with contextlib.suppress(Exception):  # no worker here (a plain function call): nothing
        from distributed import get_worker

        topic, key = push
        get_worker().log_event(topic, [_PUSHED, key, blob])


def _brief(exc: BaseException) -> str:
    """An exception in one line: its type, and its text if it has one."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
