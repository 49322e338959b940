"""Where a sync tool runs: a worker thread of dagagent's own (:mod:`dagagent.tools._threads`,
with the caller's context variables, abandoned when its task is cancelled), or, declared
``blocking=False``, right on the event loop. A broken implementation runs a blocking tool on
the loop (and stalls every other task) or loses the caller's context."""

from __future__ import annotations

import contextvars
import threading
import time

import anyio
import pytest
from eventually import wait_until

import dagagent
from dagagent.tools import THREAD_NAME, sync_threads

REQUEST = contextvars.ContextVar("REQUEST", default="none")


def _registry() -> tuple[dagagent.Registry, dict[str, int]]:
    seen: dict[str, int] = {}
    registry = dagagent.Registry()

    @registry.tool
    def threaded(label: str) -> str:
        """Runs in a worker thread."""
        seen[label] = threading.get_ident()
        return f"{label}:{REQUEST.get()}:{threading.current_thread().name}"

    @registry.tool(blocking=False)
    def inline(label: str) -> str:
        """Declared never to block: runs on the event loop."""
        seen[label] = threading.get_ident()
        return f"{label}:{REQUEST.get()}"

    return registry, seen


def test_a_sync_tool_runs_in_a_worker_thread_with_the_callers_context() -> None:
    registry, seen = _registry()

    async def main() -> dagagent.RunResult:
        REQUEST.set("r-17")
        return await dagagent.execute(
            {"tasks": [{"id": "a", "tool": "threaded", "args": {"label": "a"}}]}, registry
        )

    result = anyio.run(main)
    assert result.ok
    output = result.tasks["a"].output
    assert output.startswith("a:r-17:" + THREAD_NAME)
    assert seen["a"] != threading.get_ident()


def test_a_tool_declared_not_blocking_runs_on_the_event_loop() -> None:
    registry, seen = _registry()
    assert registry.get("inline").blocking is False
    assert registry.get("threaded").blocking is True
    loop_thread: list[int] = []

    async def main() -> dagagent.RunResult:
        loop_thread.append(threading.get_ident())
        REQUEST.set("r-18")
        plan = {
            "tasks": [
                {"id": "a", "tool": "inline", "args": {"label": "a"}},
                {"id": "b", "tool": "inline", "args": {"label": "${a}"}, "timeout_s": 5},
            ]
        }
        return await dagagent.execute(plan, registry)

    result = anyio.run(main)
    assert result.ok, result.counts
    assert result.tasks["b"].output == "a:r-18:r-18"
    assert seen["a"] == seen["a:r-18"] == loop_thread[0]


def test_blocking_survives_pickling() -> None:
    registry, _ = _registry()
    rebuild, args = registry.get("inline").__reduce__()  # what pickle (and Dask) ship
    copy = rebuild(*args)
    assert copy.blocking is False and copy("x") == "x:none"


def test_a_cancelled_sync_call_is_abandoned_and_its_thread_is_known() -> None:
    release = threading.Event()
    registry = dagagent.Registry()

    @registry.tool(timeout_s=0.5)
    def stuck() -> str:
        """Blocks until released."""
        release.wait(30)
        return "late"

    started = time.monotonic()
    result = dagagent.execute_sync({"tasks": [{"id": "s", "tool": "stuck"}]}, registry)
    try:
        assert result.tasks["s"].status.value == "failed"
        assert "timed out" in (result.tasks["s"].error or "")
        assert time.monotonic() - started < 20  # the run did not wait for the thread
        assert sync_threads.abandoned == 1 and sync_threads.running == 1
    finally:
        release.set()
    wait_until(lambda: sync_threads.running == 0, "the released thread ends its call")
    assert sync_threads.abandoned == 0


@pytest.mark.parametrize("blocking", [True, False])
def test_a_generator_of_a_sync_tool_is_drained(blocking: bool) -> None:
    registry = dagagent.Registry()

    @registry.tool(blocking=blocking)
    def numbers(n: int) -> object:
        """Counts."""
        return (i for i in range(n))

    result = dagagent.execute_sync(
        {"tasks": [{"id": "n", "tool": "numbers", "args": {"n": 3}}]}, registry
    )
    assert result.tasks["n"].output == [0, 1, 2]
