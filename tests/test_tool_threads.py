"""Where a sync tool runs: a worker thread (:mod:`dagagent.tools._threads`, with the caller's
context variables, abandoned when its task is cancelled), or, declared
``blocking=False``, right on the event loop. A broken implementation runs a blocking tool on
the loop (and stalls every other task) or loses the caller's context."""

from __future__ import annotations

import contextvars
import functools
import threading
import time
from typing import Any

import anyio
import pytest
from backends import BACKENDS
from eventually import wait_until

import dagagent
from dagagent.tools import sync_threads

REQUEST = contextvars.ContextVar("REQUEST", default="none")

# The same threads on both of anyio's event loops.
backends = pytest.mark.parametrize("backend", BACKENDS)


def _execute(plan: dict[str, Any], registry: dagagent.Registry, backend: str) -> dagagent.RunResult:
    return anyio.run(functools.partial(dagagent.execute, plan, registry), backend=backend)


def _registry() -> tuple[dagagent.Registry, dict[str, int]]:
    seen: dict[str, int] = {}
    registry = dagagent.Registry()

    @registry.tool
    def threaded(label: str) -> str:
        """Runs in a worker thread."""
        seen[label] = threading.get_ident()
        return f"{label}:{REQUEST.get()}"

    @registry.tool(blocking=False)
    def inline(label: str) -> str:
        """Declared never to block: runs on the event loop."""
        seen[label] = threading.get_ident()
        return f"{label}:{REQUEST.get()}"

    return registry, seen


@backends
def test_a_sync_tool_runs_in_a_worker_thread_with_the_callers_context(backend: str) -> None:
    registry, seen = _registry()

    async def main() -> dagagent.RunResult:
        REQUEST.set("r-17")
        return await dagagent.execute(
            {"tasks": [{"id": "a", "tool": "threaded", "args": {"label": "a"}}]}, registry
        )

    result = anyio.run(main, backend=backend)
    assert result.ok
    assert result.tasks["a"].output == "a:r-17"
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


@backends
def test_a_cancelled_sync_call_is_abandoned_and_its_thread_is_known(backend: str) -> None:
    release = threading.Event()
    registry = dagagent.Registry()

    @registry.tool(timeout_s=0.5)
    def stuck() -> str:
        """Blocks until released."""
        release.wait(30)
        return "late"

    started = time.monotonic()
    result = _execute({"tasks": [{"id": "s", "tool": "stuck"}]}, registry, backend)
    try:
        assert result.tasks["s"].status.value == "failed"
        assert "timed out" in (result.tasks["s"].error or "")
        assert time.monotonic() - started < 20  # the run did not wait for the thread
        assert sync_threads.abandoned == 1 and sync_threads.running == 1
    finally:
        release.set()
    wait_until(lambda: sync_threads.running == 0, "the released thread ends its call")
    assert sync_threads.abandoned == 0


@backends
@pytest.mark.parametrize("blocking", [True, False])
def test_a_generator_of_a_sync_tool_is_drained(blocking: bool, backend: str) -> None:
    registry = dagagent.Registry()

    @registry.tool(blocking=blocking)
    def numbers(n: int) -> object:
        """Counts."""
        return (i for i in range(n))

    result = _execute(
        {"tasks": [{"id": "n", "tool": "numbers", "args": {"n": 3}}]}, registry, backend
    )
    assert result.tasks["n"].output == [0, 1, 2]


@backends
@pytest.mark.parametrize("blocking", [True, False])
def test_a_sync_tool_raising_stop_iteration_or_generator_exit_fails_its_task(
    blocking: bool, backend: str
) -> None:
    # Neither may travel as it is: a StopIteration would end the coroutine that receives it
    # as if it had returned, a GeneratorExit thrown into it would close the whole task.
    registry = dagagent.Registry()

    @registry.tool(blocking=blocking)
    def stop() -> str:
        """Raises StopIteration."""
        raise StopIteration("no more")

    @registry.tool(blocking=blocking)
    def close() -> str:
        """Raises GeneratorExit."""
        raise GeneratorExit

    plan = {"tasks": [{"id": "s", "tool": "stop"}, {"id": "c", "tool": "close"}]}
    result = anyio.run(
        functools.partial(
            dagagent.execute, plan, registry, settings=dagagent.RunSettings(on_failure="continue")
        ),
        backend=backend,
    )
    stopped, closed = result.tasks["s"], result.tasks["c"]
    assert stopped.status.value == "failed" and stopped.error_type == "RuntimeError"
    assert "StopIteration" in (stopped.error or "") and "no more" in (stopped.error or "")
    assert closed.status.value == "failed" and closed.error_type == "GeneratorExit"
