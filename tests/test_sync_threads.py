"""The threads sync tools run in: bounded in number, abandoned calls included (a sync tool
cannot be stopped, so a timed-out or cancelled call keeps its thread until it returns)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from eventually import until, wait_until

import dagagent
from dagagent.settings import RunSettings
from dagagent.tools import SyncThreads, sync_threads

pytestmark = pytest.mark.anyio


@pytest.fixture
def limit() -> Iterator[None]:
    before = sync_threads.limit
    yield
    sync_threads.limit = before


class Hung:
    """A sync tool that blocks until released; counts the calls that entered it at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.inside = 0
        self.most = 0
        self.entered = 0

    def __call__(self, name: str) -> str:
        with self.lock:
            self.inside += 1
            self.entered += 1
            self.most = max(self.most, self.inside)
        try:
            self.release.wait(60)
            return name
        finally:
            with self.lock:
                self.inside -= 1


def _registry(hung: Hung) -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool(retries=1)
    def hang(name: str) -> str:
        return hung(name)

    return reg


def _wait_until(predicate: Any) -> None:
    wait_until(predicate, "another thread changed the state")


async def _until(predicate: Any) -> None:
    """Wait for state another thread changes (no event to wait on there)."""
    await until(predicate, "another thread changed the state")


async def test_hung_sync_tools_hold_no_more_threads_than_the_limit(limit: None) -> None:
    sync_threads.limit = 3
    hung = Hung()
    threads_before = threading.active_count()
    plan = {
        "tasks": [
            {"id": f"t{i}", "tool": "hang", "args": {"name": f"t{i}"}, "timeout_s": 0.5}
            for i in range(12)
        ]
    }
    try:
        with anyio.fail_after(60):
            result = await dagagent.execute(
                plan, _registry(hung), settings=RunSettings(on_failure="continue")
            )
        assert {r.error_type for r in result.tasks.values()} == {"TaskTimeoutError"}
        assert all(r.attempts == 2 for r in result.tasks.values())
        # 24 attempts, each abandoned at its timeout: only 3 ever got a thread.
        assert hung.most <= 3 and hung.entered <= 3, (hung.most, hung.entered)
        assert sync_threads.running == 3 and sync_threads.abandoned == 3
        assert threading.active_count() - threads_before <= 3
    finally:
        hung.release.set()
    _wait_until(lambda: sync_threads.running == 0)
    assert sync_threads.abandoned == 0


async def test_a_call_waits_for_a_thread_and_gets_the_one_freed(limit: None) -> None:
    sync_threads.limit = 1
    hung = Hung()
    plan = {
        "tasks": [
            {"id": "first", "tool": "hang", "args": {"name": "first"}},
            {"id": "second", "tool": "hang", "args": {"name": "second"}},
        ]
    }
    async with anyio.create_task_group() as tg:
        tg.start_soon(_release_later, hung)
        with anyio.fail_after(60):
            result = await dagagent.execute(plan, _registry(hung))
    assert result.outputs == {"first": "first", "second": "second"}
    assert hung.most == 1 and hung.entered == 2
    assert sync_threads.running == 0


async def _release_later(hung: Hung) -> None:
    await _until(lambda: hung.entered > 0)
    await anyio.wait_all_tasks_blocked()  # the second call waits for a thread meanwhile
    assert hung.entered == 1
    hung.release.set()


async def test_a_waiting_call_that_is_cancelled_leaves_no_place_taken() -> None:
    threads = SyncThreads(limit=1)
    release = threading.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(threads.run, lambda: release.wait(30))
        await _until(lambda: threads.running == 1)
        in_line = anyio.CancelScope()

        async def wait_in_line() -> None:
            with in_line:
                await threads.run(lambda: None)  # waits: the only place is taken

        tg.start_soon(wait_in_line)
        await anyio.wait_all_tasks_blocked()
        in_line.cancel()
        await anyio.wait_all_tasks_blocked()
        assert in_line.cancelled_caught and threads.running == 1
        release.set()
    assert threads.running == 0
    assert await threads.run(lambda: 7) == 7 and threads.running == 0


async def test_raising_the_limit_lets_waiting_calls_in() -> None:
    threads = SyncThreads(limit=1)
    release = threading.Event()
    done: list[int] = []

    async def call(i: int) -> None:
        await threads.run(lambda: release.wait(30))
        done.append(i)

    async with anyio.create_task_group() as tg:
        for i in range(3):
            tg.start_soon(call, i)
        await _until(lambda: threads.running == 1)
        await anyio.wait_all_tasks_blocked()  # the other two wait in line
        assert threads.running == 1
        threads.limit = 3
        await _until(lambda: threads.running == 3)
        release.set()
    assert sorted(done) == [0, 1, 2] and threads.running == 0


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_the_limit_is_a_positive_integer(bad: Any) -> None:
    with pytest.raises(ValueError, match="integer >= 1"):
        SyncThreads(limit=bad)


async def test_calls_in_line_run_in_order_of_arrival_and_cancelled_ones_never_run() -> None:
    # 2 places, 40 calls: 38 wait in line, each started by the call that frees a place. The
    # 10 whose caller gives up while in line never run, and hold no place.
    threads = SyncThreads(limit=2)
    lock = threading.Lock()
    inside = most = 0
    ran: list[int] = []
    gate = threading.Event()

    def work(i: int) -> int:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
            ran.append(i)
        gate.wait(30)
        time.sleep(0.001)
        with lock:
            inside -= 1
        return i

    got: list[int] = []
    scopes: dict[int, anyio.CancelScope] = {}

    async def call(i: int) -> None:
        with anyio.CancelScope() as scopes[i]:
            got.append(await threads.run(work, i))

    async with anyio.create_task_group() as tg:
        for i in range(40):
            tg.start_soon(call, i)
        await _until(lambda: len(scopes) == 40 and threads.running == 2)
        for i in range(20, 30):  # in line: never started
            scopes[i].cancel()
        gate.set()
    expected = [i for i in range(40) if not 20 <= i < 30]
    assert ran == expected  # in order of arrival, the cancelled ones never
    assert sorted(got) == expected
    assert most == 2 and threads.running == 0
