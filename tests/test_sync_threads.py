"""The threads sync tools run in: bounded in number, abandoned calls included (a sync tool
cannot be stopped, so a timed-out or cancelled call keeps its thread until it returns), in
the process as a whole: across runs, event loops and both of anyio's backends."""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from backends import BACKENDS, both_backends
from eventually import until, wait_until

import dagagent
from dagagent.settings import RunSettings
from dagagent.tools import SyncThreads, sync_threads

pytestmark = pytest.mark.anyio


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return both_backends(request)


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


async def _abandon(threads: SyncThreads, release: threading.Event) -> None:
    """A call of ``threads`` that waits for ``release``, given up on once it runs in its
    thread: abandoned, it holds its place until ``release`` is set."""
    entered = threading.Event()

    def hold() -> None:
        entered.set()
        release.wait(30)

    async with anyio.create_task_group() as tg:
        tg.start_soon(threads.run, hold)
        await anyio.to_thread.run_sync(entered.wait, 30)
        tg.cancel_scope.cancel()


async def test_hung_sync_tools_hold_no_more_threads_than_the_limit(
    limit: None, anyio_backend: str
) -> None:
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
        # anyio's test runner drives trio as a guest of the test's thread: trio's own I/O
        # waits take a thread of trio's (one more, never one per call).
        guest = 1 if anyio_backend == "trio" else 0
        assert threading.active_count() - threads_before <= 3 + guest
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
    # 1 place, 40 calls: 39 wait in line, each let in by the call that frees the place. The
    # 10 whose caller gives up while in line never run, and hold no place. (With more places,
    # the order places are handed out in is still that of arrival, but which of two threads
    # let in at once enters its function first is the operating system's choice.)
    threads = SyncThreads(limit=1)
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
    arrived: list[int] = []  # trio starts tasks in an order of its own choosing
    scopes: dict[int, anyio.CancelScope] = {}

    async def call(i: int) -> None:
        with anyio.CancelScope() as scopes[i]:
            arrived.append(i)  # and in line at once: nothing is awaited in between
            got.append(await threads.run(work, i))

    async with anyio.create_task_group() as tg:
        for i in range(40):
            tg.start_soon(call, i)
        await _until(lambda: len(scopes) == 40 and threads.running == 1)
        given_up = arrived[20:30]  # in line: never started
        for i in given_up:
            scopes[i].cancel()
        gate.set()
    expected = [i for i in arrived if i not in given_up]
    assert ran == expected  # in order of arrival, the cancelled ones never
    assert sorted(got) == sorted(expected)
    assert most == 1 and threads.running == 0


async def test_an_abandoned_call_hands_its_place_to_a_waiting_one_when_it_returns() -> None:
    # The place comes free in the abandoned call's worker thread, not on the event loop.
    threads = SyncThreads(limit=1)
    release = threading.Event()
    await _abandon(threads, release)
    assert threads.running == 1 and threads.abandoned == 1
    async with anyio.create_task_group() as tg:
        got: list[int] = []

        async def second() -> None:
            got.append(await threads.run(lambda: 7))

        tg.start_soon(second)
        await anyio.wait_all_tasks_blocked()
        assert got == [] and threads.running == 1  # waits for the abandoned call's place
        release.set()
    assert got == [7] and threads.running == 0 and threads.abandoned == 0


@pytest.mark.parametrize("other", BACKENDS)
async def test_a_call_waits_for_a_place_held_on_another_event_loop(other: str) -> None:
    # The places belong to the process: a run on another loop (another thread) holding the
    # only one makes this loop's call wait, and wakes it when its call returns.
    threads = SyncThreads(limit=1)
    release = threading.Event()
    entered = threading.Event()

    def hold() -> None:
        entered.set()
        release.wait(30)

    elsewhere = threading.Thread(
        target=anyio.run, args=(functools.partial(threads.run, hold),), kwargs={"backend": other}
    )
    elsewhere.start()
    try:
        await anyio.to_thread.run_sync(entered.wait, 30)
        got: list[int] = []
        async with anyio.create_task_group() as tg:

            async def waiting() -> None:
                got.append(await threads.run(lambda: 7))

            tg.start_soon(waiting)
            await anyio.wait_all_tasks_blocked()
            assert got == [] and threads.running == 1
            release.set()
        assert got == [7] and threads.running == 0
    finally:
        release.set()
        elsewhere.join(30)


def _seven() -> int:
    return 7


@pytest.mark.slow  # forks a process
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
async def test_a_child_process_after_fork_starts_with_every_place_free() -> None:
    threads = SyncThreads(limit=1)
    release = threading.Event()
    await _abandon(threads, release)  # holds the only place
    assert threads.running == 1
    try:
        with warnings.catch_warnings():  # forking a process with threads (3.12+ warns)
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: no thread of the parent's is here, nor its calls
            code = 1
            try:
                fresh = threads.running == 0 and threads.abandoned == 0
                got: list[int] = []  # a call on an event loop of the child's own
                loop = threading.Thread(target=lambda: got.append(anyio.run(threads.run, _seven)))
                loop.start()
                loop.join(30)
                code = 0 if fresh and got == [7] and threads.running == 0 else 2
            finally:
                sys.stdout.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)  # noqa: ASYNC222 - the child ends at once
        assert os.waitstatus_to_exitcode(status) == 0
        assert threads.running == 1  # the parent's call still holds its place
    finally:
        release.set()
    await _until(lambda: threads.running == 0)
