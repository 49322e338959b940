"""The Dask executor and its session: the client and the cluster a run (or several at once)
calls tools through, connected or started when the first run opens it and closed after the
last.

``session()`` connects an asynchronous ``distributed.Client`` on the running event loop: to
the given client, to ``address``, or to a ``LocalCluster`` it starts and shuts down with the
run. Dask's client lives on asyncio: under another event loop (trio) a session refuses to
open, with a :class:`~dagagent.errors.ConfigError` that names it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from ...errors import ConfigError, WorkerLostError
from ..dataflow import DataflowExecutor
from ._calls import _quietly, _Session, call_on_cluster
from ._crashes import surviving_crashes
from ._once import PLUGIN, once_only
from ._shipping import ship_tools
from ._worker import _brief, _RaisedOnWorker, _Refused, carried

if TYPE_CHECKING:
    from distributed import Client

    from ...graph import PlanGraph
    from ...runner import Invoker, TaskRunner
    from ...tools import Tool
    from ..base import FailurePolicy

__all__ = ["INSTALL_HINT", "DaskExecutor"]

INSTALL_HINT = 'the dask executor needs Dask: pip install "dagagent[dask]"'


def _import_dask() -> None:
    try:
        import cloudpickle  # type: ignore[import-untyped]  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"{INSTALL_HINT} ({exc})") from None


class DaskExecutor(DataflowExecutor):
    """Dataflow scheduling on the driver; tool calls on Dask workers.

    Give a ``client`` (any ``distributed.Client``; one that is not asynchronous on the
    running loop is used through a second, asynchronous client to the same scheduler), or a
    scheduler ``address`` (``tcp://host:port``), or neither: then a ``LocalCluster`` is
    started for the run (``n_workers``, ``threads_per_worker``, ``processes`` and any other
    ``cluster_options`` are passed to it) and shut down after it. ``allowed_failures``
    applies to that local cluster: how many times Dask itself re-runs a call whose worker
    died before reporting it (default 0: dagagent's retries decide; a call of a tool with
    side effects is made by one of Dask's runs at most, on any cluster). ``connect_timeout_s``
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
        _require_asyncio()
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

        loop = asyncio.get_running_loop()
        given = self.client
        if given is not None:
            if given.asynchronous and getattr(given.loop, "asyncio_loop", None) is loop:
                await _install_once_only(given, "the given client's scheduler")
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
        try:
            await _install_once_only(client, where)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await _quietly(client.close())
                if cluster is not None:
                    await _quietly(cluster.close())
            raise
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
        await self._ship(state, runner.tools_in_use())
        self.startup_s = time.monotonic() - self._getting_ready

    async def run(self, graph: PlanGraph, runner: TaskRunner, on_failure: FailurePolicy) -> None:
        state = self._session
        if state is None:
            raise ConfigError("DaskExecutor.run() must be called inside DaskExecutor.session()")
        await self._ship(state, runner.tools_in_use())  # a no-op for tools already shipped
        state.traced = runner.telemetry is not None and runner.telemetry.tracer is not None
        try:
            await super().run(graph, runner, on_failure)
        finally:
            state.release_held()

    async def _ship(self, state: _Session, used: Mapping[Tool, Sequence[str]]) -> None:
        """Ship every tool the plan can call to the workers, or say which cannot go."""
        await ship_tools(
            state, used, timeout=self.connect_timeout_s, say=self._say, since=self._getting_ready
        )

    # -- the invoker (per tool call: keep it lean) ----------------------------------------

    async def _invoke(self, tool: Tool, args: Mapping[str, Any]) -> Any:
        if tool.connection is not None:  # an MCP session cannot travel: call it here
            return await tool.acall(args)
        state = self._session
        if state is None:
            raise ConfigError("the dask executor's invoker is used outside its session()")
        shipped = state.shipped.get(tool)
        if shipped is None:  # not seen by _ship (e.g. an invoker used on its own)
            try:
                shipped = state.ship(tool)
            except Exception as exc:
                raise ConfigError(
                    f"tool {tool.name!r} cannot be pickled for Dask: {_brief(exc)}"
                ) from None
        identity = carried(tool.name) if tool.side_effects else None
        result = await surviving_crashes(
            state.crashes,
            lambda: call_on_cluster(state, shipped, tool, args, identity, once=tool.side_effects),
            tool.name,
            side_effects=tool.side_effects,
        )
        if isinstance(result, _RaisedOnWorker):
            raise result.rebuild() from None
        if isinstance(result, _Refused):
            raise WorkerLostError(
                f"Dask ran the call of tool {tool.name!r} a second time (on {result.worker}), "
                "after losing the worker that ran it first; the tool has side effects and the "
                "first run may have taken effect, so the call was not made again"
            )
        return result


async def _install_once_only(client: Any, where: str) -> None:
    """Install, once per scheduler, what makes a call with side effects run once at most
    there (see :mod:`~._once`)."""
    try:
        await client.register_plugin(once_only(), name=PLUGIN)
    except Exception as exc:
        raise ConfigError(
            f"cannot install on the Dask scheduler at {where} the guard that keeps Dask from "
            f"making a call with side effects twice: {_brief(exc)}"
        ) from None


def _require_asyncio() -> None:
    """Refuse, naming it, an event loop other than asyncio's: Dask's client runs on asyncio."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        trio = sys.modules.get("trio")
        here = "trio" if trio is not None and trio.lowlevel.in_trio_run() else "this event loop"
        raise ConfigError(
            f"the dask executor runs on asyncio only (Dask's client is asyncio's), not on "
            f"{here}: run under asyncio (anyio's backend 'asyncio') or choose another executor"
        ) from None


def _any(obj: Any) -> Any:
    """Dask's sync/async dual API is typed for synchronous use; we use it asynchronously."""
    return obj
