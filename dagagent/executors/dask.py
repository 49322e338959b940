"""Scale-out: tool calls run on Dask workers; everything else stays on the driver.

:class:`DaskExecutor` schedules like :class:`~dagagent.executors.dataflow.DataflowExecutor`
(a task starts as soon as its own dependencies have succeeded) and differs only in its
*invoker*: the call ``tool.fn(**validated_args)`` is submitted to a Dask cluster and the
driver awaits the Dask future on its own event loop. References, argument validation,
interceptors, timeouts, retries, records and events stay in the
:class:`~dagagent.runner.TaskRunner` on the driver.

- **Session.** ``session()`` connects an asynchronous ``distributed.Client`` on the running
  event loop: to the given client, to ``address``, or to a ``LocalCluster`` it starts and
  shuts down with the run.
- **Shipping.** Before any task runs, every tool the plan can call is pickled once with
  cloudpickle and loaded on every worker; a tool that cannot be pickled or loaded there
  raises :class:`~dagagent.errors.ConfigError` naming the tool and its tasks. Workers cache
  the loaded functions, so a task ships only its arguments and a few hundred bytes of pickled
  function. Workers living in the driver's process (``processes=False``) call the very
  function object registered on the driver.
- **Submission.** The calls made in one turn of the driver's event loop (the tasks a
  finished task made ready, say) go to the scheduler together, one ``client.map`` per worker
  function: one graph update instead of one per call (see :meth:`_Session.flush`). A call
  whose arguments cannot be pickled fails alone with
  :class:`~dagagent.errors.ToolArgumentsError`; the calls submitted with it run.
- **Results.** A result of at most 4 KiB pickled travels back with its call's completion, as
  an event of the executor's own client (see :func:`_push`), saving the round trip that
  fetches it; a larger one, or any result when the client was given, is fetched. The Dask
  futures of pushed results are released together when the run ends (or every
  :data:`_HOLD_MAX` of them), not one by one between the calls of a chain (see
  :meth:`_Session.hold`); the others as soon as their result is in.
- **Tools bound to a connection** (:attr:`~dagagent.tools.Tool.connection`, tools from MCP
  servers) are called on the driver, which holds their sessions; they are not shipped.
- **Sync and async tools.** Sync tools run in a worker thread; async tools run on the
  worker's event loop (Dask awaits coroutine functions natively). Either way a worker runs
  at most ``threads_per_worker`` tool calls at once.
- **Cancellation.** When the awaiting coroutine is cancelled (fail-fast, a timeout, an
  interrupt) it cancels its Dask future. A sync tool already running in a worker thread runs
  to its end there; its result is dropped.
- **Lost workers.** A worker that dies mid-call (``KilledWorker``), a lost scheduler
  connection or a future cancelled on the cluster becomes
  :class:`~dagagent.errors.WorkerLostError`, retried if the task allows retries. The local
  cluster is started with ``allowed_failures=0`` so that Dask reports a dead worker at once
  instead of silently re-running the call on another worker; dagagent's own retry policy
  decides. A call that kills its worker (a segfault in native code, say) takes the other
  calls running there with it: when a worker dies under several calls, each is run again
  elsewhere, one at a time, and the one that kills its worker again fails, named as the
  cause; the others go on as if nothing happened. A worker that died under one call names
  that call at once.

Over 400 lines for one concern, the Dask invoker: shipping tools, the session and telling
a lost worker from a failing tool all serve the one call submitted to the cluster, and the
module is imported only when ``distributed`` is installed and the executor is chosen.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib
import itertools
import pickle
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import AsyncGeneratorType, GeneratorType
from typing import TYPE_CHECKING, Any

import anyio

from .. import telemetry
from ..errors import ConfigError, ToolArgumentsError, WorkerLostError
from ..tools import materialize_async
from .dataflow import DataflowExecutor

if TYPE_CHECKING:
    from distributed import Client

    from ..graph import PlanGraph
    from ..runner import Invoker, TaskRunner
    from ..tools import Tool
    from .base import FailurePolicy

__all__ = ["INSTALL_HINT", "DaskExecutor"]

INSTALL_HINT = 'the dask executor needs Dask: pip install "dagagent[dask]"'

# Seconds allowed for telling the scheduler to cancel a future whose caller was cancelled.
_CANCEL_TIMEOUT_S = 5.0
# Seconds a call that died with its worker waits for the other calls of that worker to report
# their death (Dask reports them together, when the scheduler removes the worker).
_CRASH_SETTLE_S = 0.2
_HOW_CALLS_KILL = "a crash in native code such as a segfault, running out of memory, os._exit"
# Results (pickled) at most this big travel to the driver with the call's completion (see
# _push); the scheduler keeps the last 1,000 events of a topic while the client lives.
_PUSH_MAX_BYTES = 4096
_PUSHED = "dagagent-result"
# Futures of pushed results held before they are released together (see _Session.hold).
_HOLD_MAX = 1000
# Interval (s) at which a client this executor creates batches messages to the scheduler:
# Dask's default (10 ms) adds up to 10 ms to every hop of a chain of dependent tasks.
_CLIENT_SEND_INTERVAL_S = 0.001


def _import_dask() -> None:
    try:
        import cloudpickle  # type: ignore[import-untyped]  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"{INSTALL_HINT} ({exc})") from None


# -- worker side ----------------------------------------------------------------------------
# These run on Dask workers. They are module-level so that they pickle by reference: workers
# need dagagent installed (and whatever the tools themselves import).

# token -> function registered by a driver living in this process (in-process workers).
_LOCAL: dict[str, Callable[..., Any]] = {}
# token -> function unpickled on this worker, so that each tool is unpickled once per worker.
_LOADED: dict[str, Callable[..., Any]] = {}
_LOADED_MAX = 1024


class _Fn:
    """A tool function as it travels to the workers: a token, the pickled function, a name.

    Small on the wire, shown as ``<tool 'name'>`` in Dask's task reprs and logs, and
    unpickled at most once per worker process.
    """

    __slots__ = ("blob", "name", "token")

    def __init__(self, token: str, blob: bytes, name: str) -> None:
        self.token = token
        self.blob = blob
        self.name = name

    def __repr__(self) -> str:
        return f"<tool {self.name!r}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Fn, (self.token, self.blob, self.name))

    def load(self) -> Callable[..., Any]:
        fn = _LOCAL.get(self.token)
        if fn is None:
            fn = _LOADED.get(self.token)
            if fn is None:
                import cloudpickle

                fn = cloudpickle.loads(self.blob)
                if len(_LOADED) >= _LOADED_MAX:
                    _LOADED.clear()
                _LOADED[self.token] = fn
        return fn


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


def _round_trips(exc: BaseException) -> bool:
    import cloudpickle

    try:
        cloudpickle.loads(cloudpickle.dumps(exc))
    except Exception:
        return False
    return True


def _picklable_args(exc: BaseException) -> tuple[Any, ...]:
    return tuple(
        a if isinstance(a, (str, int, float, bool, type(None))) else str(a) for a in exc.args
    )


def _call(
    fn: _Fn,
    args: dict[str, Any],
    trace: dict[str, str] | None = None,
    push: tuple[str, str] | None = None,
) -> Any:
    """Run a sync tool (in a worker thread); a generator it returns travels as a list.
    ``trace``: the task's trace context (with OpenTelemetry on), current while it runs.
    ``push``: where to send a small result at once (see :func:`_push`)."""
    try:
        with telemetry.attached(trace):
            result = fn.load()(**args)
            if type(result) is GeneratorType:
                result = list(result)
            elif type(result) is AsyncGeneratorType:  # no event loop in this thread: a short one
                result = asyncio.run(materialize_async(result))
    except BaseException as exc:
        result = _RaisedOnWorker(exc)
    if push is not None:
        _push(push, result)
    return result


async def _acall(
    fn: _Fn,
    args: dict[str, Any],
    trace: dict[str, str] | None = None,
    push: tuple[str, str] | None = None,
) -> Any:
    """Run an async tool (on the worker's event loop)."""
    try:
        with telemetry.attached(trace):
            result = await materialize_async(await fn.load()(**args))
    except asyncio.CancelledError:  # Dask cancelled the call
        raise
    except BaseException as exc:
        result = _RaisedOnWorker(exc)
    if push is not None:
        _push(push, result)
    return result


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


def _load_all(fns: list[_Fn]) -> dict[str, str]:
    """Load every tool on this worker; return ``{token: problem}`` for those that fail."""
    problems: dict[str, str] = {}
    for fn in fns:
        try:
            fn.load()
        except Exception as exc:
            problems[fn.token] = _brief(exc)
    return problems


def _brief(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- driver side ----------------------------------------------------------------------------


def _importable_by_name(module_name: str) -> bool:
    """Whether a fresh interpreter with the same ``sys.path`` could import ``module_name``.

    Asks the import system's finders directly: ``importlib.util.find_spec`` would answer from
    ``sys.modules``, where a module loaded from a file under a made-up name also sits.
    """
    top = module_name.partition(".")[0]
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        try:
            if find_spec(top, None) is not None:
                return True
        except Exception:  # a finder that cannot answer for this name
            continue
    return False


def _dumps_function(fn: Callable[..., Any]) -> bytes:
    """Pickle a tool function for the workers.

    - A function reachable by name from an importable module (directly, or as the ``fn`` of a
      :class:`~dagagent.tools.Tool` bound to that name by ``@tool``) travels *by name*: the
      worker imports the module, so module-level state (clients, tables) is the worker's own
      and need not be picklable.
    - Anything else travels *by value* with cloudpickle: functions of ``__main__``, local
      functions and closures, and functions of a module loaded from a file under a name that
      cannot be imported again (``dagagent run --tools path/file.py:attr``), so that workers
      need not see the file.
    """
    import cloudpickle

    module_name = getattr(fn, "__module__", None) or ""
    qualname = getattr(fn, "__qualname__", None) or ""
    module = sys.modules.get(module_name)
    importable = (
        module is not None and module_name != "__main__" and _importable_by_name(module_name)
    )
    if importable and "<" not in qualname and _resolve(module_name, qualname) is fn:
        return bytes(cloudpickle.dumps(_ByName(module_name, qualname)))
    if importable or module is None or module_name == "__main__":
        return bytes(cloudpickle.dumps(fn))
    if module_name in cloudpickle.list_registry_pickle_by_value():
        return bytes(cloudpickle.dumps(fn))
    cloudpickle.register_pickle_by_value(module)
    try:
        return bytes(cloudpickle.dumps(fn))
    finally:
        cloudpickle.unregister_pickle_by_value(module)


def _resolve(module_name: str, qualname: str) -> Any:
    """``module.qualname``, unwrapping a :class:`~dagagent.tools.Tool` to its function."""
    from ..tools import Tool

    obj: Any = importlib.import_module(module_name)
    try:
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except AttributeError:
        return None
    return obj.fn if isinstance(obj, Tool) else obj


class _ByName:
    """Unpickles as :func:`_resolve` of a module and a qualified name, on the worker."""

    __slots__ = ("module", "qualname")

    def __init__(self, module: str, qualname: str) -> None:
        self.module = module
        self.qualname = qualname

    def __reduce__(self) -> tuple[Any, ...]:
        return (_resolve_or_fail, (self.module, self.qualname))


def _resolve_or_fail(module_name: str, qualname: str) -> Any:
    fn = _resolve(module_name, qualname)
    if fn is None:
        raise AttributeError(f"module {module_name!r} has no attribute {qualname!r}")
    return fn


@dataclass(frozen=True)
class _Shipped:
    """A tool ready to be called on workers."""

    caller: Callable[..., Any]
    fn: _Fn
    prefix: str  # Dask key prefix: the tool name, so the dashboard groups calls by tool


class _Call:
    """One tool call on its way to the cluster: submitted with the other calls made in the
    same turn of the event loop (see :meth:`_Session.flush`); ``future`` is its Dask future
    once ``submitted`` is done."""

    __slots__ = ("args", "future", "key", "push", "shipped", "submitted", "trace")

    def __init__(
        self,
        shipped: _Shipped,
        args: Mapping[str, Any],
        trace: dict[str, str] | None,
        push: tuple[str, str] | None,
        key: str,
        submitted: asyncio.Future[None],
    ) -> None:
        self.shipped = shipped
        self.args = args
        self.trace = trace
        self.push = push
        self.key = key
        self.submitted = submitted
        self.future: Any = None


@dataclass
class _Session:
    # Dask's sync/async dual API is typed for sync use: awaited calls are Any here.
    client: Any
    cluster: Any
    own_client: bool
    keys: Iterator[int] = field(default_factory=itertools.count)
    shipped: dict[Tool, _Shipped] = field(default_factory=dict)
    users: int = 0
    traced: bool = False  # OpenTelemetry is on: calls carry their trace context
    #: Workers that died under calls, by address (a restarted worker has a new one).
    crashes: dict[str, _Crash] = field(default_factory=dict)
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
        small: a pushed result is at most :data:`_PUSH_MAX_BYTES` pickled."""
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
            blob = _dumps_function(tool.fn)
            token = uuid.uuid4().hex
            _LOCAL[token] = tool.fn
            caller = _acall if tool.is_async else _call
            fn = _Fn(token, blob, tool.name)
            shipped = _Shipped(caller, fn, f"{tool.name}-{token[:8]}-")
            self.shipped[tool] = shipped
        return shipped

    def crash(self, killed: _Killed) -> _Crash:
        """Count a call that died with its worker."""
        crash = self.crashes.setdefault(killed.key, _Crash())
        crash.calls += 1
        return crash

    def forget(self) -> None:
        for shipped in self.shipped.values():
            _LOCAL.pop(shipped.fn.token, None)
        self.shipped.clear()


class DaskExecutor(DataflowExecutor):
    """Dataflow scheduling on the driver; tool calls on Dask workers.

    Give a ``client`` (any ``distributed.Client``; one that is not asynchronous on the
    running loop is used through a second, asynchronous client to the same scheduler), or a
    scheduler ``address`` (``tcp://host:port``), or neither: then a ``LocalCluster`` is
    started for the run (``n_workers``, ``threads_per_worker``, ``processes`` and any other
    ``cluster_options`` are passed to it) and shut down after it. ``allowed_failures``
    applies to that local cluster: how many times Dask itself re-runs a call whose worker
    died before reporting it (default 0: dagagent's retries decide). ``connect_timeout_s``
    bounds connecting to the scheduler, waiting for a first worker and checking the workers.
    ``on_progress`` is told what happens while the cluster starts (a line of text each step),
    and ``startup_s`` says how long a run waited for it.

    One executor may serve several runs at once; they share its client and cluster.
    """

    name = "dask"

    def __init__(
        self,
        client: Client | None = None,
        address: str | None = None,
        *,
        n_workers: int | None = None,
        threads_per_worker: int | None = None,
        processes: bool = True,
        cluster_options: Mapping[str, Any] | None = None,
        allowed_failures: int = 0,
        connect_timeout_s: float = 10.0,
        on_progress: Callable[[str], None] | None = None,
    ) -> None:
        _import_dask()
        if client is not None and address is not None:
            raise ConfigError("dask executor: give a client or an address, not both")
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise ConfigError(
                f"dask executor: the scheduler address must be a string like "
                f"tcp://host:8786, not {address!r}"
            )
        for label, value in (("n_workers", n_workers), ("threads_per_worker", threads_per_worker)):
            if value is not None and value < 1:
                raise ConfigError(f"dask executor: {label} must be at least 1, not {value}")
        if allowed_failures < 0:
            raise ConfigError(
                f"dask executor: allowed_failures must be >= 0, not {allowed_failures}"
            )
        if connect_timeout_s <= 0:
            raise ConfigError(
                f"dask executor: connect_timeout_s must be > 0, not {connect_timeout_s}"
            )
        self.client = client
        self.address = address.strip() if address is not None else None
        self.n_workers = n_workers
        self.threads_per_worker = threads_per_worker
        self.processes = processes
        self.cluster_options = dict(cluster_options or {})
        self.allowed_failures = allowed_failures
        self.connect_timeout_s = connect_timeout_s
        #: Told, in a line of text, what the executor is doing while it gets ready (starting
        #: a local cluster takes seconds): for a command line to show.
        self.on_progress = on_progress
        #: Seconds the last run waited for the executor to get ready before its first task:
        #: starting or reaching the cluster, and shipping the tools.
        self.startup_s: float | None = None
        self._session: _Session | None = None
        self._opening: anyio.Event | None = None
        self._getting_ready = time.monotonic()

    def __repr__(self) -> str:
        if self.client is not None:
            return f"DaskExecutor(client={self.client!r})"
        if self.address is not None:
            return f"DaskExecutor(address={self.address!r})"
        return f"DaskExecutor(local cluster, processes={self.processes})"

    # -- session --------------------------------------------------------------------------

    @property
    def invoker(self) -> Invoker | None:
        return self._invoke

    @property
    def dask_client(self) -> Client | None:
        """The asynchronous client of the open session (``None`` outside a session): for
        dashboards, events or anything else a run wants from the cluster."""
        state = self._session
        return state.client if state is not None else None

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        self._getting_ready = time.monotonic()
        state = await self._acquire()
        self.startup_s = time.monotonic() - self._getting_ready
        try:
            yield
        finally:
            state.users -= 1
            if state.users == 0:
                if self._session is state:
                    self._session = None
                with anyio.CancelScope(shield=True):
                    await self._close(state)

    async def _acquire(self) -> _Session:
        while self._opening is not None:  # another run is connecting: share its session
            await self._opening.wait()
        state = self._session
        if state is None:
            opening = self._opening = anyio.Event()
            try:
                state = self._session = await self._open()
            finally:
                self._opening = None
                opening.set()
        state.users += 1
        return state

    async def _open(self) -> _Session:
        from distributed import Client

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise ConfigError(
                "the dask executor needs the asyncio event loop (anyio backend 'asyncio')"
            ) from None
        given = self.client
        if given is not None:
            if given.asynchronous and getattr(given.loop, "asyncio_loop", None) is loop:
                return _Session(given, None, own_client=False)
            target: Any = _any(given).scheduler.address
        else:
            target = self.address
        cluster = None
        if target is None:
            self._say(f"starting a local Dask cluster ({self._cluster_shape()})...")
            cluster = await self._start_cluster()
            target = cluster
        else:
            self._say(f"connecting to the Dask scheduler at {target}...")
        where = target if isinstance(target, str) else "the local cluster"
        try:
            client: Any = _any(Client)(target, asynchronous=True, timeout=self.connect_timeout_s)
        except Exception as exc:
            if cluster is not None:
                with anyio.CancelScope(shield=True):
                    await _quietly(cluster.close())
            raise ConfigError(
                f"cannot connect to the Dask scheduler at {where}: {_brief(exc)}"
            ) from None
        try:
            await client
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await _quietly(client.close())
                if cluster is not None:
                    await _quietly(cluster.close())
            if not isinstance(exc, Exception):
                raise
            raise ConfigError(
                f"cannot connect to the Dask scheduler at {where} "
                f"(within {self.connect_timeout_s:g} s): {_brief(exc)}"
            ) from None
        comm = getattr(client, "scheduler_comm", None)
        if comm is not None and hasattr(comm, "interval"):
            comm.interval = _CLIENT_SEND_INTERVAL_S
        state = _Session(client, cluster, own_client=True)
        state.listen()
        return state

    def _say(self, text: str) -> None:
        if self.on_progress is not None:
            self.on_progress(text)

    def _cluster_shape(self) -> str:
        n = self.n_workers
        if n is None:
            kind = "processes" if self.processes else "threads of this process"
            workers = f"worker {kind} as Dask picks for this machine"
        else:
            kind = {
                (True, False): "process",
                (True, True): "processes",
                (False, False): "thread of this process",
                (False, True): "threads of this process",
            }[(self.processes, n > 1)]
            workers = f"{n} worker {kind}"
        if self.threads_per_worker is not None:
            workers += f", {self.threads_per_worker} threads each"
        return workers

    async def _start_cluster(self) -> Any:
        from distributed import LocalCluster

        options: dict[str, Any] = {
            "processes": self.processes,
            "dashboard_address": ":0",  # never collide with another cluster's 8787
        }
        if self.n_workers is not None:
            options["n_workers"] = self.n_workers
        if self.threads_per_worker is not None:
            options["threads_per_worker"] = self.threads_per_worker
        options.update(self.cluster_options)
        scheduler_kwargs = {"dashboard": False, "allowed_failures": self.allowed_failures}
        scheduler_kwargs.update(options.pop("scheduler_kwargs", None) or {})
        if "dashboard_address" in self.cluster_options:
            scheduler_kwargs.pop("dashboard", None)
        try:
            cluster = _any(LocalCluster)(
                asynchronous=True, scheduler_kwargs=scheduler_kwargs, **options
            )
        except Exception as exc:
            raise ConfigError(f"cannot create a local Dask cluster: {_brief(exc)}") from None
        try:
            await cluster
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                await _quietly(cluster.close())
            if not isinstance(exc, Exception):
                raise
            raise ConfigError(
                f"cannot start a local Dask cluster: {_brief(exc)} (with process workers, a "
                'script must start the run under `if __name__ == "__main__":`)'
            ) from None
        return cluster

    @staticmethod
    async def _close(state: _Session) -> None:
        state.release_held()
        state.forget()
        if state.own_client:
            if state.waiting is not None:  # or the scheduler reports the client's end to it
                with contextlib.suppress(Exception):
                    state.client.unsubscribe_topic(state.client.id)
            await _quietly(state.client.close())
        if state.cluster is not None:
            await _quietly(state.cluster.close())

    # -- run ------------------------------------------------------------------------------

    async def prepare(self, graph: PlanGraph, runner: TaskRunner) -> None:
        """Ship every tool the plan can call before the run starts (``execute`` calls this
        inside ``session()``, before anything is recorded)."""
        state = self._session
        if state is None:
            raise ConfigError("DaskExecutor.prepare() must be called inside DaskExecutor.session()")
        await self._prepare(state, runner.tools_in_use())
        self.startup_s = time.monotonic() - self._getting_ready

    async def run(self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy) -> None:
        state = self._session
        if state is None:
            raise ConfigError("DaskExecutor.run() must be called inside DaskExecutor.session()")
        await self._prepare(state, runner.tools_in_use())  # a no-op for tools already shipped
        state.traced = runner.telemetry is not None and runner.telemetry.tracer is not None
        try:
            await super().run(graph, runner, on_failure)
        finally:
            state.release_held()

    async def _prepare(self, state: _Session, used: Mapping[Tool, Sequence[str]]) -> None:
        """Ship every tool the plan can call to the workers, or say which cannot go."""
        problems: list[str] = []
        fresh: dict[str, Tool] = {}
        for tool, task_ids in used.items():
            if tool in state.shipped or tool.connection is not None:
                continue  # shipped already, or called here (its session lives on the driver)
            try:
                fresh[state.ship(tool).fn.token] = tool
            except Exception as exc:
                problems.append(
                    f"tool {tool.name!r} ({_tasks(task_ids)}) cannot be pickled: {_brief(exc)}"
                )
        try:
            if fresh and not problems:
                problems = await self._check_workers(state, fresh, used)
        finally:
            if problems or sys.exc_info()[0] is not None:
                for tool in fresh.values():  # a later run checks these tools again
                    shipped = state.shipped.pop(tool, None)
                    if shipped is not None:
                        _LOCAL.pop(shipped.fn.token, None)
        if problems:
            raise ConfigError(
                "cannot run this plan on Dask:\n  "
                + "\n  ".join(problems)
                + "\ntools must be picklable with cloudpickle and importable on every worker "
                "(define them in a module the workers can import, not around local state)"
            )

    async def _check_workers(
        self, state: _Session, fresh: dict[str, Tool], used: Mapping[Tool, Sequence[str]]
    ) -> list[str]:
        """Load the new tools on every worker (out of band, not queued behind tasks)."""
        client = state.client
        timeout = self.connect_timeout_s
        fns = [state.shipped[tool].fn for tool in fresh.values()]
        try:
            with anyio.fail_after(timeout):
                info = await client.scheduler.identity()
                if not info.get("workers"):
                    self._say("waiting for a Dask worker...")
                    await client.wait_for_workers(1)
                    info = await client.scheduler.identity()
                workers = info.get("workers") or {}
                threads = sum(int(w.get("nthreads", 0) or 0) for w in workers.values())
                self._say(
                    f"Dask ready after {time.monotonic() - self._getting_ready:.1f}s: "
                    f"{len(workers)} worker{'s' if len(workers) != 1 else ''}, {threads} "
                    f"thread{'s' if threads != 1 else ''}; shipping {len(fns)} "
                    f"tool{'s' if len(fns) != 1 else ''}"
                )
                replies = await client.run(_load_all, fns, on_error="return")
        except TimeoutError:
            raise ConfigError(
                f"dask executor: no worker of the scheduler at {client.scheduler.address} "
                f"answered within {timeout:g} s"
            ) from None
        problems: list[str] = []
        for worker, reply in sorted(replies.items()):
            if isinstance(reply, BaseException):
                problems.append(
                    f"worker {worker} cannot run dagagent tool calls: {_brief(reply)} "
                    "(install dagagent and the tools' dependencies on every worker)"
                )
                continue
            for token, problem in reply.items():
                tool = fresh[token]
                problems.append(
                    f"tool {tool.name!r} ({_tasks(used[tool])}) cannot be loaded on worker "
                    f"{worker}: {problem}"
                )
        return problems

    # -- the invoker (per tool call: keep it lean) ----------------------------------------

    async def _invoke(self, tool: Tool, args: Mapping[str, Any]) -> Any:
        if tool.connection is not None:  # an MCP session cannot travel: call it here
            return await tool.acall(args)
        state = self._session
        if state is None:
            raise ConfigError("the dask executor's invoker is used outside its session()")
        shipped = state.shipped.get(tool)
        if shipped is None:  # not seen by _prepare (e.g. an invoker used on its own)
            try:
                shipped = state.ship(tool)
            except Exception as exc:
                raise ConfigError(
                    f"tool {tool.name!r} cannot be pickled for Dask: {_brief(exc)}"
                ) from None
        try:
            result = await self._submit(state, shipped, tool, args)
        except _Killed as first:
            crash = state.crash(first)
            await anyio.sleep(_CRASH_SETTLE_S)  # the other calls of that worker report too
            if crash.calls == 1:
                raise WorkerLostError(
                    f"the Dask worker running tool {tool.name!r} died ({first.worker}) while "
                    f"it ran this call and no other, so the call most likely killed it "
                    f"({_HOW_CALLS_KILL}); see that worker's log"
                ) from None
            # Several calls died with the worker, and one of them (or something else) killed
            # it: run them again elsewhere, one at a time, so that the one that kills its
            # worker again is known.
            async with crash.one_at_a_time:
                try:
                    result = await self._submit(state, shipped, tool, args)
                except _Killed as second:
                    state.crash(second)  # the calls that died with it get their chance
                    raise WorkerLostError(
                        f"the Dask worker running tool {tool.name!r} died ({second.worker}), "
                        f"and so did the worker that ran this call before ({first.worker}), "
                        f"with {crash.calls - 1} other call(s) that were run again elsewhere: "
                        f"this call kills its worker ({_HOW_CALLS_KILL}); see the workers' logs"
                    ) from None
        if isinstance(result, _RaisedOnWorker):
            raise result.rebuild() from None
        return result

    @staticmethod
    async def _submit(
        state: _Session, shipped: _Shipped, tool: Tool, args: Mapping[str, Any]
    ) -> Any:
        """Submit one call and await it; a worker that died under it is :class:`_Killed`."""
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
        call = _Call(shipped, args, trace, push, key, loop.create_future())
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
        except _killed_worker() as exc:
            raise _Killed(_last_worker(exc)) from None
        except concurrent.futures.CancelledError as exc:  # cancelled on the cluster, not by us
            raise WorkerLostError(
                f"the Dask task running tool {tool.name!r} was cancelled on the cluster: {exc}"
            ) from None
        except _comm_closed() as exc:
            raise WorkerLostError(
                f"lost the connection to the Dask scheduler while running tool {tool.name!r}: "
                f"{_brief(exc)}"
            ) from None
        except BaseException:  # our caller was cancelled (fail-fast, timeout, interrupt)
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
    import cloudpickle

    try:
        cloudpickle.dumps(call.args)
    except Exception as why:
        return ToolArgumentsError(
            call.shipped.fn.name,
            [f"they cannot be pickled to travel to the Dask workers ({_brief(why)})"],
        )
    return exc


def _killed_worker() -> type[Exception]:
    from distributed import KilledWorker

    return KilledWorker


def _comm_closed() -> type[Exception]:
    from distributed.comm.core import CommClosedError

    return CommClosedError


def _last_worker(exc: BaseException) -> str:
    worker = getattr(getattr(exc, "last_worker", None), "address", None)
    return str(worker) if worker else ""


def _any(obj: Any) -> Any:
    """Dask's sync/async dual API is typed for synchronous use; we use it asynchronously."""
    return obj


def _tasks(task_ids: Sequence[str]) -> str:
    if not task_ids:
        return "for the tasks of a plan still arriving"
    shown = ", ".join(repr(t) for t in task_ids[:5])
    more = f" and {len(task_ids) - 5} more" if len(task_ids) > 5 else ""
    return f"task{'s' if len(task_ids) > 1 else ''} {shown}{more}"


async def _quietly(awaitable: Any) -> None:
    """Await a Dask cleanup call; a failure to clean up must not hide the run's outcome."""
    with contextlib.suppress(Exception):
        await awaitable
