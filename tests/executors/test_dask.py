"""The Dask executor: tool calls on Dask workers, dataflow scheduling on the driver.

Most tests start an in-process cluster (``processes=False``, a few tens of milliseconds) per
run, so the recording tools of ``conftest.py`` see every call. A few tests share one
module-scoped cluster of worker *processes* (``n_workers=2, threads_per_worker=1``), which
is slow to start; their tools live in ``tests/dask_tools.py`` so that workers can import them.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from eventually import until
from typer.testing import CliRunner

import dagagent
from dagagent.cli import app
from dagagent.errors import ConfigError
from dagagent.executors import get_executor
from dagagent.settings import RunSettings, TaskRetryPolicy
from dagagent.tools import Registry, Tool

pytest.importorskip("distributed")

import dask_tools  # tests/ is on sys.path under pytest; see dask_tools.py

from dagagent.executors.dask import DaskExecutor

pytestmark = pytest.mark.asyncio_only("Dask's client runs on asyncio")

ROOT = Path(__file__).resolve().parents[2]
FAST_RETRY = TaskRetryPolicy(base_delay_s=0.01, jitter=0)


def in_process(**options: Any) -> DaskExecutor:
    return DaskExecutor(processes=False, n_workers=2, threads_per_worker=4, **options)


def plan(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"goal": "dask test", "tasks": list(tasks)}


# -- in-process cluster --------------------------------------------------------------------


@pytest.mark.anyio
async def test_runs_plan_on_dask_respecting_dependencies(registry: Registry, recorder: Any) -> None:
    p = plan(
        {"id": "a", "tool": "work", "args": {"name": "a", "seconds": 0.3, "value": 2}},
        {"id": "b", "tool": "work", "args": {"name": "b", "seconds": 0.3, "value": 3}},
        {"id": "sum", "tool": "add", "args": {"a": "${a}", "b": "${b}"}},
        {"id": "c", "tool": "work", "args": {"name": "c", "value": "${sum}"}},
        {"id": "echo", "tool": "echo", "args": {"value": "got ${c}"}},
    )
    result = await dagagent.execute(p, registry, settings=RunSettings(executor=in_process()))
    assert result.ok, result.tasks
    assert result.executor == "dask"
    assert result.outputs == {"a": 2, "b": 3, "sum": 5, "c": 5, "echo": "got 5"}
    # the recording tool ran once per call, in this process (in-process workers call the
    # very function registered here), and the dependencies were respected
    assert recorder.calls == {"a": 1, "b": 1, "c": 1}
    assert recorder.overlap("a", "b")
    c_start = recorder.intervals["c"][0]
    assert c_start >= recorder.intervals["a"][1] and c_start >= recorder.intervals["b"][1]
    assert result.tasks["sum"].args == {"a": 2, "b": 3}
    assert result.tasks["sum"].started_at >= max(  # type: ignore[operator]
        result.tasks["a"].finished_at,
        result.tasks["b"].finished_at,  # type: ignore[type-var]
    )


@pytest.mark.anyio
async def test_executor_by_name_and_sync_execute(registry: Registry) -> None:
    exe = get_executor("dask", processes=False, n_workers=1)
    assert isinstance(exe, DaskExecutor) and exe.name == "dask"

    def run() -> dagagent.RunResult:
        p = plan({"id": "x", "tool": "add", "args": {"a": 1, "b": 41}})
        return dagagent.execute_sync(p, registry, settings=RunSettings(executor=exe))

    result = await anyio.to_thread.run_sync(run)  # execute_sync runs its own event loop
    assert result.ok and result.outputs == {"x": 42}


@pytest.mark.anyio
async def test_fail_fast_cancels_running_sibling_and_its_dask_future(
    registry: Registry, recorder: Any
) -> None:
    from distributed import Client, LocalCluster

    p = plan(
        {"id": "slow", "tool": "work", "args": {"name": "slow", "seconds": 30}},
        {"id": "bad", "tool": "work", "args": {"name": "bad", "seconds": 0.2, "fail": True}},
        {"id": "after", "tool": "echo", "args": {"value": "${bad}"}},
    )
    async with (
        LocalCluster(
            processes=False,
            n_workers=1,
            threads_per_worker=4,
            asynchronous=True,
            dashboard_address=":0",
            scheduler_kwargs={"dashboard": False},
        ) as cluster,
        Client(cluster, asynchronous=True) as client,
    ):
        t0 = time.perf_counter()
        result = await dagagent.execute(
            p, registry, settings=RunSettings(executor=DaskExecutor(client=client))
        )
        elapsed = time.perf_counter() - t0
        assert elapsed < 5, elapsed
        statuses = {t: r.status.value for t, r in result.tasks.items()}
        assert statuses == {"slow": "cancelled", "bad": "failed", "after": "skipped"}
        assert "bad failed on purpose" in (result.tasks["bad"].error or "")
        assert recorder.calls.get("slow") == 1  # it had started on the worker

        # the driver told the scheduler to cancel the sibling's future, and the scheduler
        # holds nothing of this run any more
        async def forgotten() -> bool:
            events = await client.get_events(client.id)
            cancelled = any(msg.get("action") == "cancel" for _, msg in events)
            return cancelled and not await client.run_on_scheduler(_task_count)

        await until(forgotten, "the sibling's future is cancelled and the scheduler empty")
        # the given client stays open and usable
        assert await client.submit(sum, [1, 2], pure=False) == 3


def _task_count(dask_scheduler: Any) -> int:
    return len(dask_scheduler.tasks)


def scheduler_empty(client: Any) -> Callable[[], Awaitable[bool]]:
    async def empty() -> bool:
        return not await client.run_on_scheduler(_task_count)

    return empty


def _fan(n: int, tool: str = "add") -> dict[str, Any]:
    return plan(
        {"id": "root", "tool": "add", "args": {"a": 1, "b": 1}},
        *[{"id": f"m{i}", "tool": tool, "args": {"a": "${root}", "b": i}} for i in range(n)],
        {"id": "join", "tool": "echo", "args": {"value": [f"${{m{i}}}" for i in range(n)]}},
    )


@pytest.mark.anyio
async def test_a_fan_out_goes_to_the_scheduler_in_a_few_graph_updates(registry: Registry) -> None:
    """The calls made ready together (by the root of a fan) are submitted together, not one
    graph update (and one scheduler event) each."""
    exe = in_process()
    async with exe.session():
        client: Any = exe.dask_client

        async def updates() -> int:
            events = await client.get_events(client.id)
            return sum(
                1 for _, m in events if isinstance(m, dict) and m["action"] == "update-graph"
            )

        before = await updates()
        result = await dagagent.execute(_fan(12), registry, settings=RunSettings(executor=exe))
        assert result.ok, result.tasks
        assert result.outputs["join"] == [2 + i for i in range(12)]
        sent = await updates() - before
    # root, the fan (its first call may go alone) and the join: 14 one call at a time
    assert 3 <= sent <= 6, sent


@pytest.mark.anyio
async def test_an_argument_that_cannot_be_pickled_fails_only_its_call(registry: Registry) -> None:
    """A batch of calls that cannot be sent is sent call by call: the call whose argument
    cannot be pickled fails, named, and the calls submitted with it run."""

    @registry.tool
    def holder() -> dict[str, Any]:
        """A lock (not picklable) and a number."""
        return {"lock": threading.Lock(), "n": 1}

    @registry.tool
    def kind(x: Any) -> str:
        """The type of x."""
        return type(x).__name__

    p = plan(
        {"id": "h", "tool": "holder", "args": {}},
        {"id": "bad", "tool": "kind", "args": {"x": "${h.lock}"}},
        *[{"id": f"ok{i}", "tool": "kind", "args": {"x": "${h.n}"}} for i in range(4)],
    )
    result = await dagagent.execute(
        p, registry, settings=RunSettings(executor=in_process(), on_failure="continue")
    )
    bad = result.tasks["bad"]
    assert bad.status.value == "failed" and bad.error_type == "ToolArgumentsError"
    assert bad.attempts == 1
    assert bad.error == (
        "bad arguments for tool 'kind': they cannot be pickled to travel to the Dask workers "
        "(TypeError: cannot pickle '_thread.lock' object)"
    )
    assert {result.outputs[f"ok{i}"] for i in range(4)} == {"int"}


@pytest.mark.anyio
async def test_fail_fast_cancels_the_calls_submitted_with_the_failing_one(
    registry: Registry, recorder: Any
) -> None:
    p = plan(
        {"id": "root", "tool": "work", "args": {"name": "root"}},
        *[
            {"id": f"slow{i}", "tool": "work", "args": {"name": f"slow{i}", "seconds": 30}}
            for i in range(5)
        ],
        {"id": "bad", "tool": "work", "args": {"name": "bad", "seconds": 0.5, "fail": True}},
        {"id": "after", "tool": "echo", "args": {"value": ["${bad}", "${slow0}"]}},
    )
    exe = in_process()
    async with exe.session():
        client: Any = exe.dask_client
        t0 = time.perf_counter()
        result = await dagagent.execute(p, registry, settings=RunSettings(executor=exe))
        assert time.perf_counter() - t0 < 20  # the slow calls were not waited for
        statuses = {t: r.status.value for t, r in result.tasks.items()}
        assert statuses == {
            "root": "succeeded",
            **{f"slow{i}": "cancelled" for i in range(5)},
            "bad": "failed",
            "after": "skipped",
        }
        assert all(recorder.calls.get(f"slow{i}") == 1 for i in range(5))  # they had started
        await until(scheduler_empty(client), "the scheduler forgets every call of the run")
        events = await client.get_events(client.id)
        cancelled = sum(
            m["count"] for _, m in events if isinstance(m, dict) and m["action"] == "cancel"
        )
        assert cancelled == 5, events


class _FakeClient:
    """Records what the session submits; ``map`` fails when told to."""

    id = "client-1"

    def __init__(self, map_fails: bool) -> None:
        self.map_fails = map_fails
        self.mapped: list[list[str]] = []
        self.submitted: list[str] = []

    def map(self, fn: Any, *iterables: Any, key: list[str], pure: bool) -> list[str]:
        if self.map_fails:
            raise TypeError("Could not serialize object of type LLGExpr")
        self.mapped.append(list(key))
        return [f"future of {k}" for k in key]

    def submit(self, fn: Any, *args: Any, key: str, pure: bool) -> str:
        self.submitted.append(key)
        return f"future of {key}"


@pytest.mark.anyio
@pytest.mark.parametrize("map_fails", [False, True])
async def test_a_batch_leaves_out_cancelled_calls_and_falls_back_to_one_call_each(
    map_fails: bool,
) -> None:
    import asyncio

    from dagagent.executors.dask import _calls as dask_executor

    client = _FakeClient(map_fails)
    state = dask_executor._Session(client, None, own_client=True)
    state.waiting = {}
    tool = Tool(lambda x: x, name="ident")
    shipped = state.ship(tool)
    loop = asyncio.get_running_loop()
    calls = []
    for i in range(3):
        key = f"k{i}"
        state.waiting[key] = loop.create_future()
        call = dask_executor._Call(
            shipped, {"x": i}, None, (client.id, key), key, loop.create_future()
        )
        state.submit(call)
        calls.append(call)
    calls[1].submitted.cancel()  # its caller was cancelled before the batch went
    assert not client.mapped and not client.submitted  # nothing sent within the turn
    await anyio.lowlevel.checkpoint()  # the end of the turn: the batch goes
    assert state.batch == []
    assert calls[0].submitted.done() and calls[2].submitted.done()
    if not map_fails:
        assert client.mapped == [["k0", "k2"]] and client.submitted == []
        assert [calls[0].key, calls[2].key] == ["k0", "k2"]
    else:
        # submitted one by one under fresh keys, the pushed results awaited under those
        assert client.mapped == [] and client.submitted == [calls[0].key, calls[2].key]
        assert {calls[0].key, calls[2].key}.isdisjoint({"k0", "k1", "k2"})
        for call in (calls[0], calls[2]):
            assert call.push == (client.id, call.key) and call.key in state.waiting
    assert calls[0].future == f"future of {calls[0].key}"
    assert calls[1].future is None
    state.forget()


@pytest.mark.anyio
async def test_pushed_results_are_released_together_and_when_the_run_ends(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The futures of pushed results are released in groups (at most _HOLD_MAX held), and
    the last ones when the run ends: the cluster keeps nothing of a finished run."""
    from dagagent.executors.dask import _calls as dask_executor

    monkeypatch.setattr(dask_executor, "_HOLD_MAX", 3)
    released: list[int] = []
    real = dask_executor._Session.release_held

    def spy(self: Any) -> None:
        released.append(len(self.held))
        real(self)

    monkeypatch.setattr(dask_executor._Session, "release_held", spy)
    p = plan(
        {"id": "t0", "tool": "add", "args": {"a": 0, "b": 1}},
        *[
            {"id": f"t{i}", "tool": "add", "args": {"a": f"${{t{i - 1}}}", "b": 1}}
            for i in range(1, 7)
        ],
    )
    exe = in_process()
    async with exe.session():
        result = await dagagent.execute(p, registry, settings=RunSettings(executor=exe))
        assert result.ok and result.outputs["t6"] == 7
        assert released == [3, 3, 1]  # 7 results: two full groups, the rest at the end
        client: Any = exe.dask_client
        await until(scheduler_empty(client), "the run's results leave the cluster")


@pytest.mark.anyio
async def test_timeout_cancels_the_call(registry: Registry) -> None:
    p = plan(
        {"id": "slow", "tool": "work", "args": {"name": "slow", "seconds": 30}, "timeout_s": 0.5}
    )
    t0 = time.perf_counter()
    result = await dagagent.execute(p, registry, settings=RunSettings(executor=in_process()))
    assert time.perf_counter() - t0 < 15  # not the tool's 30 s
    r = result.tasks["slow"]
    assert r.status.value == "failed" and r.error_type == "TaskTimeoutError"
    assert "timed out after 0.5 s" in (r.error or "")


@pytest.mark.anyio
async def test_retries_run_again_on_dask(registry: Registry) -> None:
    calls: list[int] = []

    @registry.tool(retries=2)
    def flaky(n: int) -> int:
        """Fail on the first two calls."""
        calls.append(n)
        if len(calls) < 3:
            raise ConnectionError(f"attempt {len(calls)} failed")
        return n * 2

    p = plan({"id": "f", "tool": "flaky", "args": {"n": 21}})
    result = await dagagent.execute(
        p, registry, settings=RunSettings(executor=in_process(), retry=FAST_RETRY)
    )
    r = result.tasks["f"]
    assert r.status.value == "succeeded" and r.output == 42 and r.attempts == 3
    assert calls == [21, 21, 21]

    calls.clear()
    p = plan({"id": "f", "tool": "flaky", "args": {"n": 1}, "retries": 1})
    result = await dagagent.execute(
        p, registry, settings=RunSettings(executor=in_process(), retry=FAST_RETRY)
    )
    r = result.tasks["f"]
    assert r.status.value == "failed" and r.attempts == 2
    assert r.error == "ConnectionError: attempt 2 failed"
    assert r.error_type == "ConnectionError"


@pytest.mark.anyio
async def test_a_tool_with_side_effects_knows_its_call_on_a_worker(
    registry: Registry, tmp_path: Path
) -> None:
    """``current_call()`` on a worker (a sync tool in a worker thread, an async one on the
    worker's event loop): the identity recorded in the store, the same key on a retry; a
    tool without side effects has none there either."""
    attempts: list[tuple[str, int]] = []

    @registry.tool(side_effects=True, retries=1)
    def send(to: str) -> dict[str, Any]:
        """Fail on the first attempt; say which call this is."""
        call = dagagent.current_call()
        attempts.append((call.idempotency_key, call.attempt))
        if len(attempts) == 1:
            raise ConnectionError("the mail server hung up")
        return {"key": call.idempotency_key, "task": call.task_id, "attempt": call.attempt}

    @registry.tool(side_effects=True)
    async def asend(to: str) -> dict[str, Any]:
        """Say which call this is (async)."""
        call = dagagent.current_call()
        return {"key": call.idempotency_key, "task": call.task_id, "element": call.element}

    @registry.tool
    def pure(to: str) -> str:
        """Say whether a call identity is known here (it should not be)."""
        try:
            dagagent.current_call()
        except dagagent.errors.NoCurrentCallError:
            return "none"
        return "some"

    p = plan(
        {"id": "s", "tool": "send", "args": {"to": "ann"}},
        {"id": "each", "for_each": ["bo", "cy"], "tool": "asend", "args": {"to": "${@item}"}},
        {"id": "p", "tool": "pure", "args": {"to": "ann"}},
    )
    store = tmp_path / "runs.db"
    result = await dagagent.execute(
        p,
        registry,
        store=store,
        settings=RunSettings(executor=in_process(), retry=FAST_RETRY),
    )
    assert result.ok, result.tasks
    with dagagent.RunStore(store) as st:
        keys = {(e.task_id, e.element): e.key for e in st.effects(result.run_id)}
    assert result.outputs["s"] == {"key": keys[("s", None)], "task": "s", "attempt": 2}
    assert attempts == [(keys[("s", None)], 1), (keys[("s", None)], 2)]  # a retry: same key
    assert result.outputs["each"] == [
        {"key": keys[("each", 0)], "task": "each", "element": 0},
        {"key": keys[("each", 1)], "task": "each", "element": 1},
    ]
    assert result.outputs["p"] == "none"


@pytest.mark.anyio
async def test_unpicklable_tool_is_refused_before_any_task_runs(
    registry: Registry, recorder: Any
) -> None:
    lock = threading.Lock()

    @registry.tool
    def guarded(x: int) -> int:
        """Uses a lock from the driver: it cannot be sent to a worker."""
        with lock:
            return x

    p = plan(
        {"id": "first", "tool": "work", "args": {"name": "first"}},
        {"id": "g", "tool": "guarded", "args": {"x": "${first}"}},
    )
    events: list[Any] = []
    with pytest.raises(ConfigError) as info:
        await dagagent.execute(
            p, registry, listeners=[events.append], settings=RunSettings(executor=in_process())
        )
    text = str(info.value)
    assert "tool 'guarded' (task 'g') cannot be pickled" in text
    assert "lock" in text
    assert "work" not in text.split("\n")[1]  # only the tool that cannot go is named
    assert recorder.calls == {}  # nothing ran
    kinds = [e.kind for e in events]
    assert kinds == []  # refused before the run started: nothing recorded, no task started


@pytest.mark.anyio
async def test_agent_tasks_ship_their_tool_subset(registry: Registry) -> None:
    lock = threading.Lock()

    @registry.tool
    def guarded() -> None:
        """Cannot be pickled."""
        with lock:
            pass

    # an agent task that may call every tool needs every tool shipped
    p = plan({"id": "ask", "instruction": "use the tools"})
    with pytest.raises(ConfigError, match=r"tool 'guarded' \(task 'ask'\)"):
        await dagagent.execute(p, registry, settings=RunSettings(executor=in_process()))


@pytest.mark.anyio
async def test_async_and_sync_tools_on_file_loaded_module(tmp_path: Path) -> None:
    from dagagent.cli._app import load_registry

    source = tmp_path / "mytools.py"
    source.write_text(
        "import anyio\n"
        "from dagagent import Registry\n"
        "SCALE = 10\n"
        "def scale(x: int) -> int:\n"
        "    return x * SCALE\n"
        "async def later(x: int) -> int:\n"
        "    await anyio.lowlevel.checkpoint()\n"
        "    return x + 1\n"
        "registry = Registry([scale, later])\n"
    )
    reg = load_registry(f"{source}:registry")
    p = plan(
        {"id": "s", "tool": "scale", "args": {"x": 4}},
        {"id": "l", "tool": "later", "args": {"x": "${s}"}},
    )
    result = await dagagent.execute(p, reg, settings=RunSettings(executor=in_process()))
    assert result.ok and result.outputs == {"s": 40, "l": 41}


@pytest.mark.anyio
async def test_own_cluster_reports_dead_workers_at_once_and_is_closed_after() -> None:
    exe = in_process()
    assert exe.dask_client is None
    async with exe.session():
        client = exe.dask_client
        assert client is not None and client.asynchronous
        assert await client.run_on_scheduler(_allowed_failures) == 0
    assert exe.dask_client is None
    assert client.status == "closed"


def _allowed_failures(dask_scheduler: Any) -> int:
    return int(dask_scheduler.allowed_failures)


@pytest.mark.anyio
async def test_concurrent_runs_share_one_session(registry: Registry, recorder: Any) -> None:
    exe = in_process()
    clients: list[Any] = []

    def on_event(event: Any) -> None:
        if event.kind == "run.started":
            clients.append(exe.dask_client)

    results: dict[str, dagagent.RunResult] = {}

    async def run(name: str) -> None:
        p = plan({"id": name, "tool": "work", "args": {"name": name, "seconds": 0.3}})
        results[name] = await dagagent.execute(
            p, registry, listeners=[on_event], settings=RunSettings(executor=exe)
        )

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "one")
        tg.start_soon(run, "two")
    assert results["one"].ok and results["two"].ok
    assert recorder.overlap("one", "two")
    assert len(clients) == 2 and clients[0] is clients[1] is not None
    assert exe.dask_client is None  # closed with the last run


def test_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="a client or an address, not both"):
        DaskExecutor(client=object(), address="tcp://127.0.0.1:8786")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="n_workers must be at least 1"):
        DaskExecutor(n_workers=0)
    with pytest.raises(ConfigError, match="scheduler address"):
        DaskExecutor(address=" ")
    assert "tcp://h:1" in repr(DaskExecutor(address="tcp://h:1"))


@pytest.mark.anyio
async def test_unreachable_scheduler_is_a_clear_error(registry: Registry) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = DaskExecutor(address=f"tcp://127.0.0.1:{port}", connect_timeout_s=0.5)
    p = plan({"id": "x", "tool": "add", "args": {"a": 1, "b": 2}})
    t0 = time.perf_counter()
    with pytest.raises(
        ConfigError, match=rf"cannot connect to the Dask scheduler at tcp://127.0.0.1:{port}"
    ):
        await dagagent.execute(p, registry, settings=RunSettings(executor=exe))
    assert time.perf_counter() - t0 < 10


def test_without_dask_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    with pytest.raises(ConfigError, match=r'pip install "dagagent\[dask\]"'):
        DaskExecutor()
    r = CliRunner().invoke(
        app,
        [
            "run",
            str(ROOT / "examples" / "weather.json"),
            "--executor",
            "dask",
            "--store",
            str(tmp_path / "runs.db"),
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 2, r.output
    assert 'pip install "dagagent[dask]"' in r.stderr
    assert "Traceback" not in r.output


def test_on_trio_the_dask_executor_refuses_naming_the_event_loop(registry: Registry) -> None:
    # Dask's client lives on asyncio: the session refuses before it starts anything.
    exe = DaskExecutor(processes=False, n_workers=1)
    p = plan({"id": "a", "tool": "add", "args": {"a": 1, "b": 2}})

    async def main() -> None:
        await dagagent.execute(p, registry, settings=RunSettings(executor=exe))

    with pytest.raises(ConfigError, match=r"asyncio only .* not on trio"):
        anyio.run(main, backend="trio")
    assert exe.dask_client is None


def test_cli_dask_address_needs_dask_executor(tmp_path: Path) -> None:
    r = CliRunner().invoke(
        app,
        [
            "run",
            str(ROOT / "examples" / "weather.json"),
            "--dask-address",
            "tcp://h:1",
            "--store",
            str(tmp_path / "runs.db"),
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 2
    assert "--dask-address needs --executor dask" in r.stderr


@pytest.mark.anyio
async def test_the_executor_says_what_happens_while_its_cluster_starts(
    registry: Registry,
) -> None:
    said: list[str] = []
    exe = DaskExecutor(processes=False, n_workers=1, threads_per_worker=2, on_progress=said.append)
    p = plan({"id": "a", "tool": "add", "args": {"a": 1, "b": 2}})
    result = await dagagent.execute(p, registry, settings=RunSettings(executor=exe))
    assert result.ok
    assert (
        said[0]
        == "starting a local Dask cluster (1 worker thread of this process, 2 threads each)..."
    )
    assert said[-1].startswith("Dask ready after ")
    assert said[-1].endswith("s: 1 worker, 2 threads; shipping 1 tool")
    # how long the run waited for it, apart from the run's own time
    assert exe.startup_s is not None and exe.startup_s > 0
    assert DaskExecutor(n_workers=3)._cluster_shape() == "3 worker processes"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dask-workers", "2"], "--dask-workers needs --executor dask"),
        (["--dask-threads", "2"], "--dask-threads needs --executor dask"),
        (
            ["--executor", "dask", "--dask-address", "tcp://h:1", "--dask-workers", "2"],
            "with --dask-address the scheduler's own workers run the tools",
        ),
        (["--executor", "dask", "--dask-threads", "0"], "--dask-threads"),
    ],
)
def test_cli_dask_cluster_options_are_checked(
    tmp_path: Path, args: list[str], message: str
) -> None:
    r = CliRunner().invoke(
        app,
        ["run", str(ROOT / "examples" / "weather.json"), *args, "--store", str(tmp_path / "r.db")],
        catch_exceptions=False,
    )
    assert r.exit_code == 2
    assert message in r.stderr
    assert not (tmp_path / "r.db").exists()


# -- worker processes ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def process_cluster() -> Iterator[Any]:
    """Two single-threaded worker processes; a worker that dies is reported at once."""
    from distributed import LocalCluster

    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        scheduler_kwargs={"dashboard": False, "allowed_failures": 0},
    )
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.mark.slow
@pytest.mark.anyio
async def test_process_workers_run_sync_and_async_tools(process_cluster: Any) -> None:
    p = plan(
        {"id": "s", "tool": "where", "args": {"value": 1}},
        {"id": "a", "tool": "awhere", "args": {"value": "${s.value}", "seconds": 0.01}},
        {"id": "s2", "tool": "where", "args": {"value": "${a.value}"}},
    )
    exe = DaskExecutor(address=process_cluster.scheduler_address)
    result = await dagagent.execute(p, dask_tools.registry, settings=RunSettings(executor=exe))
    assert result.ok, result.tasks
    assert [result.outputs[t]["value"] for t in ("s", "a", "s2")] == [1, 1, 1]
    worker_pids = {result.outputs[t]["pid"] for t in ("s", "a", "s2")}
    assert os.getpid() not in worker_pids  # the calls ran in worker processes


@pytest.mark.slow
@pytest.mark.anyio
async def test_process_workers_know_the_call_of_a_tool_with_side_effects(
    process_cluster: Any, tmp_path: Path
) -> None:
    p = plan(
        {"id": "c", "tool": "charge", "args": {"account": "ann"}},
        {
            "id": "each",
            "for_each": ["bo", "cy"],
            "tool": "acharge",
            "args": {"account": "${@item}"},
        },
    )
    store = tmp_path / "runs.db"
    exe = DaskExecutor(address=process_cluster.scheduler_address)
    result = await dagagent.execute(
        p, dask_tools.registry, store=store, settings=RunSettings(executor=exe)
    )
    assert result.ok, result.tasks
    with dagagent.RunStore(store) as st:
        keys = {(e.task_id, e.element): e.key for e in st.effects(result.run_id)}
    seen = [result.outputs["c"], *result.outputs["each"]]
    assert os.getpid() not in {s["pid"] for s in seen}  # they ran in worker processes
    assert [(s["key"], s["run_id"], s["task_id"], s["element"], s["attempt"]) for s in seen] == [
        (keys[("c", None)], result.run_id, "c", None, 1),
        (keys[("each", 0)], result.run_id, "each", 0, 1),
        (keys[("each", 1)], result.run_id, "each", 1, 1),
    ]


@pytest.mark.anyio
async def test_tool_not_importable_on_workers_is_refused_before_running(
    process_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a module the driver can import (its folder joins sys.path only now) but the worker
    # processes, started earlier, cannot: its functions travel by name and fail there
    (tmp_path / "driver_only_tools.py").write_text(
        "def shout(text: str) -> str:\n    return text.upper()\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "driver_only_tools", raising=False)  # gone after the test
    import driver_only_tools  # type: ignore[import-not-found]

    reg = Registry([Tool(driver_only_tools.shout), *dask_tools.registry])
    p = plan(
        {"id": "w", "tool": "where", "args": {"value": 1}},
        {"id": "loud", "tool": "shout", "args": {"text": "hi"}},
    )
    events: list[Any] = []
    exe = DaskExecutor(address=process_cluster.scheduler_address)
    with pytest.raises(ConfigError) as info:
        await dagagent.execute(
            p, reg, listeners=[events.append], settings=RunSettings(executor=exe)
        )
    text = str(info.value)
    assert "tool 'shout' (task 'loud') cannot be loaded on worker tcp://" in text
    assert "No module named 'driver_only_tools'" in text
    assert "'where'" not in text
    kinds = [e.kind for e in events]
    assert kinds == []  # refused before the run started: nothing recorded, no task started


@pytest.mark.slow
@pytest.mark.anyio
async def test_worker_killed_mid_task_fails_clearly(process_cluster: Any) -> None:
    p = plan({"id": "boom", "tool": "die", "args": {}})
    exe = DaskExecutor(address=process_cluster.scheduler_address)
    t0 = time.perf_counter()
    result = await dagagent.execute(p, dask_tools.registry, settings=RunSettings(executor=exe))
    assert time.perf_counter() - t0 < 20
    r = result.tasks["boom"]
    assert r.status.value == "failed" and r.attempts == 1
    assert r.error_type == "WorkerLostError"
    assert "the Dask worker running tool 'die' died (tcp://" in (r.error or "")


@pytest.mark.slow
@pytest.mark.anyio
async def test_worker_killed_mid_task_is_retried(process_cluster: Any, tmp_path: Path) -> None:
    marker = tmp_path / "died"
    p = plan({"id": "once", "tool": "die_once", "args": {"marker": str(marker)}, "retries": 1})
    exe = DaskExecutor(address=process_cluster.scheduler_address)
    result = await dagagent.execute(
        p, dask_tools.registry, settings=RunSettings(executor=exe, retry=FAST_RETRY)
    )
    r = result.tasks["once"]
    assert marker.exists()  # the first attempt did kill its worker
    assert r.status.value == "succeeded" and r.output == "survived" and r.attempts == 2


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_call_with_side_effects_is_not_made_again_when_dask_recomputes_it(
    process_cluster: Any, tmp_path: Path
) -> None:
    """A finished call's result lives on its worker while the run holds it; when that worker
    dies, Dask computes the call again elsewhere, as it does for any task whose result is
    lost. A call with side effects must refuse that second run: its effect was made."""
    ledger = tmp_path / "ledger"
    exe = DaskExecutor(address=process_cluster.scheduler_address)
    async with exe.session():
        client, invoke = exe.dask_client, exe.invoker
        assert client is not None and invoke is not None
        pid = await invoke(dask_tools.note, {"ledger": str(ledger)})
        [key] = [k for k in await client.who_has() if str(k).startswith("note-")]

        async def holders() -> tuple[str, ...]:
            return tuple((await client.who_has()).get(key, ()))

        [worker] = await until(holders, "the call's result is kept on its worker")
        await client.run(dask_tools.end_process, workers=[worker], wait=False)  # it dies
        await until(lambda: _elsewhere(holders, worker), "Dask runs the call again elsewhere")
        [gone] = [e for _, e in await client.get_events(worker) if e["action"] == "remove-worker"]
        assert key in gone["lost-computed-tasks"]  # Dask did run it again...
    assert ledger.read_text().split() == [str(pid)]  # ... and the effect was made once


async def _elsewhere(holders: Callable[[], Awaitable[tuple[str, ...]]], gone: str) -> bool:
    where = await holders()
    return bool(where) and gone not in where


@pytest.fixture(scope="module")
def rerunning_cluster() -> Iterator[Any]:
    """Two single-threaded worker processes, on a scheduler that runs a call whose worker died
    once more elsewhere before reporting it (``allowed_failures=1``; Dask's default is 3)."""
    from distributed import LocalCluster

    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        scheduler_kwargs={"dashboard": False, "allowed_failures": 1},
    )
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_call_with_side_effects_that_dask_runs_again_after_its_worker_died_refuses(
    rerunning_cluster: Any, tmp_path: Path
) -> None:
    """A scheduler that runs a call again when its worker died must not make a call with
    side effects twice: the second run refuses, and the call is in doubt on record."""
    ledger, store = tmp_path / "ledger", tmp_path / "runs.db"
    exe = DaskExecutor(address=rerunning_cluster.scheduler_address)
    p = plan({"id": "pay", "tool": "note_and_die", "args": {"ledger": str(ledger)}})
    with anyio.fail_after(120):
        result = await dagagent.execute(
            p, dask_tools.registry, store=store, settings=RunSettings(executor=exe)
        )
    assert len(ledger.read_text().split()) == 1  # made once, by the worker that died
    r = result.tasks["pay"]
    assert r.status.value == "failed" and r.error_type == "WorkerLostError" and r.attempts == 1
    assert "Dask ran the call of tool 'note_and_die' a second time" in (r.error or ""), r.error
    assert "was not made again" in (r.error or "")
    with dagagent.RunStore(store) as st:
        [effect] = st.effects(result.run_id)
    assert effect.state == "cancelled" and effect.in_doubt


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_call_with_side_effects_on_a_worker_retired_under_it_is_not_made_again(
    rerunning_cluster: Any, tmp_path: Path
) -> None:
    """A worker retired while a call runs there (a cluster scaling down, say) is an expected
    departure for Dask, which runs its calls again elsewhere, whatever ``allowed_failures``
    says, while the first run may still be going: the second run of a call with side effects
    refuses, and the caller hears that the call is in doubt."""
    ledger = tmp_path / "ledger"
    exe = DaskExecutor(address=rerunning_cluster.scheduler_address)
    outcome: list[BaseException] = []
    async with exe.session():
        client, invoke = exe.dask_client, exe.invoker
        assert client is not None and invoke is not None

        async def call() -> None:
            try:
                await invoke(dask_tools.note_slowly, {"ledger": str(ledger), "seconds": 3})
            except Exception as exc:
                outcome.append(exc)

        async def running_on() -> list[str]:
            return [w for w, keys in (await client.processing()).items() if keys]

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await until(ledger.exists, "the call makes its effect")
            [worker] = await until(running_on, "the call runs on a worker")
            await client.retire_workers(workers=[worker], close_workers=True)
    assert len(ledger.read_text().split()) == 1  # made once, by the retired worker
    [error] = outcome
    assert isinstance(error, dagagent.errors.WorkerLostError), error
    assert "a second time" in str(error) and "was not made again" in str(error)


@pytest.fixture(scope="module")
def shared_cluster() -> Iterator[Any]:
    """Two worker processes of three threads: calls share a worker, and die with it."""
    from distributed import LocalCluster

    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=3,
        processes=True,
        dashboard_address=":0",
        scheduler_kwargs={"dashboard": False, "allowed_failures": 0},
    )
    try:
        yield cluster
    finally:
        cluster.close()


async def both_workers(cluster: Any) -> None:
    """Until both workers of ``cluster`` are up (a test's crash makes their nannies restart
    them), so that a plan's calls fill both and a crash takes calls with it."""
    from distributed import Client

    async with Client(cluster.scheduler_address, asynchronous=True) as client:
        with anyio.fail_after(120):
            await client.wait_for_workers(2)


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_call_that_kills_its_worker_is_named_and_the_others_run_elsewhere(
    shared_cluster: Any, tmp_path: Path
) -> None:
    await both_workers(shared_cluster)
    log = tmp_path / "segfaults.log"
    p = plan(
        {"id": "crash", "tool": "segfault", "args": {"log": str(log), "after": 1.0}},
        *[
            {
                "id": f"v{i}",
                "tool": "nap" if i % 2 else "awhere",
                "args": {"value": i, "seconds": 3},
            }
            for i in range(5)
        ],
    )
    exe = DaskExecutor(address=shared_cluster.scheduler_address)
    with anyio.fail_after(120):
        result = await dagagent.execute(
            p, dask_tools.registry, settings=RunSettings(executor=exe, on_failure="continue")
        )
    crash = result.tasks["crash"]
    assert crash.status.value == "failed" and crash.error_type == "WorkerLostError"
    assert "tool 'segfault'" in (crash.error or "")
    # The six calls filled both workers: the crash took two calls with it, which ran again
    # (one at a time with the crashing one, which crashed a second worker and was named).
    assert len(log.read_text().split()) == 2, log.read_text()
    assert "this call kills its worker" in (crash.error or ""), crash.error
    for i in range(5):
        r = result.tasks[f"v{i}"]
        assert r.status.value == "succeeded", (r.task_id, r.error)
        assert r.output["value"] == i and r.attempts == 1


@pytest.mark.slow
@pytest.mark.anyio
async def test_calls_with_side_effects_that_die_with_a_worker_are_not_run_again(
    shared_cluster: Any, tmp_path: Path
) -> None:
    """Calls of a tool with side effects taken down by another call's crash may have taken
    effect: they fail (in doubt on record) and are not run again elsewhere; every effect is
    made at most once, counted outside the processes."""
    log, ledger = tmp_path / "segfaults.log", tmp_path / "ledger"
    p = plan(
        {"id": "crash", "tool": "segfault", "args": {"log": str(log), "after": 1.0}},
        *[
            {
                "id": f"c{i}",
                "tool": "charge_slowly",
                "args": {"account": f"a{i}", "ledger": str(ledger), "seconds": 3},
            }
            for i in range(5)
        ],
    )
    store = tmp_path / "runs.db"
    await both_workers(shared_cluster)
    exe = DaskExecutor(address=shared_cluster.scheduler_address)
    with anyio.fail_after(120):
        result = await dagagent.execute(
            p,
            dask_tools.registry,
            store=store,
            settings=RunSettings(executor=exe, on_failure="continue"),
        )
    assert result.tasks["crash"].error_type == "WorkerLostError"
    made = ledger.read_text().split()
    assert len(made) == len(set(made))  # no call made twice
    with dagagent.RunStore(store) as st:
        effects = {e.task_id: e for e in st.effects(result.run_id)}
    lost = [f"c{i}" for i in range(5) if result.tasks[f"c{i}"].status.value == "failed"]
    assert lost  # the crash took at least the calls that shared its worker
    for tid in lost:
        r = result.tasks[tid]
        assert r.error_type == "WorkerLostError" and r.attempts == 1
        assert "may have taken effect, so it is not run again" in (r.error or ""), r.error
        assert effects[tid].state == "cancelled" and effects[tid].in_doubt  # a resume asks
    # A lost call may have been made or not (one the dead worker had queued never started:
    # in doubt all the same, for nobody can tell); every other call was made, once.
    for i in range(5):
        if f"c{i}" not in lost:
            assert result.tasks[f"c{i}"].output["key"] == effects[f"c{i}"].key
            assert effects[f"c{i}"].key in made
    assert set(made) <= {e.key for e in effects.values()}


@pytest.mark.anyio
async def test_a_synchronous_client_is_used_through_an_async_one(process_cluster: Any) -> None:
    from distributed import Client

    with Client(process_cluster) as sync_client:
        exe = DaskExecutor(client=sync_client)
        p = plan({"id": "s", "tool": "where", "args": {"value": 7}})
        result = await dagagent.execute(p, dask_tools.registry, settings=RunSettings(executor=exe))
        assert result.ok and result.outputs["s"]["value"] == 7
        assert sync_client.status == "running"  # the given client is left open


def test_cli_runs_on_a_dask_scheduler(process_cluster: Any, tmp_path: Path) -> None:
    r = CliRunner().invoke(
        app,
        [
            "run",
            str(ROOT / "examples" / "weather.json"),
            "--executor",
            "dask",
            "--json",
            "--dask-address",
            process_cluster.scheduler_address,
            "--store",
            str(tmp_path / "runs.db"),
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["status"] == "succeeded" and data["executor"] == "dask"
    assert data["tasks"]["cmp"]["output"]["larger"] == "Tokyo"
    assert data["executor_startup_s"] > 0  # the wait for the cluster, apart from wall_time_s
    # without --json: what happens while it connects, and both times at the end
    r = CliRunner().invoke(
        app,
        [
            "run",
            str(ROOT / "examples" / "weather.json"),
            "--executor",
            "dask",
            "--dask-address",
            process_cluster.scheduler_address,
            "--store",
            str(tmp_path / "runs.db"),
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    # (no --tools: a first line says the demo tools are used)
    lines = [line for line in r.stderr.splitlines() if not line.startswith("note: using the")]
    assert lines[0] == f"connecting to the Dask scheduler at {process_cluster.scheduler_address}..."
    assert re.fullmatch(
        r"Dask ready after \d+\.\ds: 2 workers, 2 threads; shipping 4 tools", lines[1]
    )
    took = [ln for ln in lines if ln.startswith("Dask took ")]
    assert len(took) == 1 and re.fullmatch(
        r"Dask took \d+\.\ds to start and receive the tools, the run \d+\.\ds: \d+\.\ds in all",
        took[0],
    )


# ----------------------------------------------------------------------------------------------
# Dask worker processes and tools that end with a BaseException: the task fails as it does
# in-process, the worker survives, and calls running beside it keep their results.
# ----------------------------------------------------------------------------------------------


pytest.importorskip("distributed")


class ToolAbort(BaseException):
    pass


registry = dagagent.Registry()


@registry.tool
def exits(code: int, after: str) -> int:
    """Exit once the neighbour has started (it says so by creating the file ``after``)."""
    deadline = time.monotonic() + 60
    while not os.path.exists(after) and time.monotonic() < deadline:
        time.sleep(0.01)
    sys.exit(code)


@registry.tool
def aborts() -> int:
    raise ToolAbort("given up")


@registry.tool
async def aexits() -> int:
    raise SystemExit(4)


@registry.tool
def neighbour(seconds: float, started: str) -> str:
    """Say it has started (create the file ``started``), then work for a while."""
    Path(started).touch()
    time.sleep(seconds)
    return "finished"


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=4, processes=True, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as c,
    ):
        yield c


@pytest.mark.slow
def test_base_exceptions_on_a_worker_fail_their_task_and_spare_the_worker(
    client: Any, tmp_path: Path
) -> None:
    started = str(tmp_path / "neighbour.started")
    plan = {
        "tasks": [
            {"id": "slow", "tool": "neighbour", "args": {"seconds": 0.6, "started": started}},
            {"id": "exit", "tool": "exits", "args": {"code": 3, "after": started}, "retries": 1},
            {"id": "abort", "tool": "aborts"},
            {"id": "aexit", "tool": "aexits"},
        ]
    }
    workers = set(client.scheduler_info()["workers"])

    async def run() -> dagagent.RunResult:
        with anyio.fail_after(60):  # without the fix, a worker killed by SystemExit hung here
            return await dagagent.execute(
                plan,
                registry,
                settings=RunSettings(executor=DaskExecutor(client=client), on_failure="continue"),
            )

    result = anyio.run(run)
    tasks = result.tasks
    assert tasks["slow"].status == "succeeded", tasks["slow"].error
    assert tasks["slow"].output == "finished"
    assert (tasks["exit"].status, tasks["exit"].error_type) == ("failed", "SystemExit")
    assert tasks["exit"].attempts == 1
    assert (tasks["abort"].error_type, tasks["abort"].error) == (
        "ToolAbort",
        "ToolAbort: given up (raised by the task; a BaseException, not retried)",
    )
    assert (tasks["aexit"].status, tasks["aexit"].error_type) == ("failed", "SystemExit")
    assert set(client.scheduler_info()["workers"]) == workers  # the worker did not die


@pytest.mark.anyio
async def test_small_results_come_with_the_completion_and_large_ones_are_fetched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A small result is pushed to the driver with its call's completion (no fetch round
    trip); one too big to push, or an error, still arrives whole and the same."""
    from dagagent.executors.dask import _calls as dask_executor

    reg = Registry()

    @reg.tool
    def sized(n: int) -> dict[str, Any]:
        """A result of about n characters."""
        return {"text": "é" * n, "n": n}

    @reg.tool
    async def fails(why: str) -> str:
        """Raise."""
        raise LookupError(why)

    pushed: list[str] = []
    real = dask_executor._Session.received

    def spy(self: Any, event: Any) -> None:
        msg = event[1]
        if isinstance(msg, list) and msg[:1] == [dask_executor._PUSHED]:
            pushed.append(msg[1])
        real(self, event)

    monkeypatch.setattr(dask_executor._Session, "received", spy)
    result = await dagagent.execute(
        plan(
            {"id": "small", "tool": "sized", "args": {"n": 10}},
            {"id": "large", "tool": "sized", "args": {"n": 100_000}},
            {"id": "again", "tool": "sized", "args": {"n": "${small.n}"}},
            {"id": "bad", "tool": "fails", "args": {"why": "no such thing"}},
        ),
        reg,
        settings=RunSettings(executor=in_process(), on_failure="continue"),
    )
    assert result.tasks["small"].output == {"text": "é" * 10, "n": 10}
    assert result.tasks["again"].output == {"text": "é" * 10, "n": 10}
    assert result.tasks["large"].output == {"text": "é" * 100_000, "n": 100_000}
    assert result.tasks["bad"].error == "LookupError: no such thing"
    assert sorted(k.split("-")[0] for k in pushed) == ["fails", "sized", "sized"]  # not large
