"""Tools that misbehave at run time: BaseExceptions, cancellations of their own, generators.
Nothing may hang, end the run abruptly or lose the other tasks' results."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import dagagent

EXECUTORS = ["serial", "levels", "dataflow"]


class CustomBase(BaseException):
    pass


RAISED: dict[str, type[BaseException]] = {
    "KeyboardInterrupt": KeyboardInterrupt,
    "SystemExit": SystemExit,
    "GeneratorExit": GeneratorExit,
    "CustomBase": CustomBase,
    "CancelledError": asyncio.CancelledError,
}


def _registry() -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool
    async def raise_async(kind: str) -> str:
        await anyio.sleep(0.01)
        raise RAISED[kind]()

    @reg.tool
    def raise_sync(kind: str) -> str:
        raise RAISED[kind]()

    @reg.tool
    async def ok(value: Any = "ok") -> Any:
        return value

    @reg.tool
    async def nap(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "rested"

    return reg


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("mode", ["raise_async", "raise_sync"])
@pytest.mark.parametrize("kind", list(RAISED))
def test_a_tool_raising_a_base_exception_fails_its_task_only(
    executor: str, mode: str, kind: str
) -> None:
    if kind == "CancelledError" and sys.version_info < (3, 11):
        pytest.skip(
            "before 3.11 asyncio cannot tell a CancelledError a tool raised from a real "
            "cancellation (Task.cancelling() is new in 3.11): it is treated as cancellation"
        )
    plan = {
        "tasks": [
            {"id": "first", "tool": "ok"},
            {"id": "bad", "tool": mode, "args": {"kind": kind}, "retries": 2},
            {"id": "branch", "tool": "ok", "depends_on": ["first"]},
            {"id": "child", "tool": "ok", "depends_on": ["bad"]},
        ]
    }
    result = dagagent.execute_sync(plan, _registry(), executor=executor, on_failure="continue")
    bad = result.tasks["bad"]
    assert bad.status == "failed"
    assert bad.error_type == kind
    assert kind in (bad.error or "")
    assert bad.attempts == 1  # a BaseException is not retried
    assert result.tasks["first"].status == "succeeded"
    assert result.tasks["branch"].status == "succeeded"
    assert result.tasks["child"].status == "skipped"
    assert result.status == "failed"


@pytest.mark.parametrize("executor", ["levels", "dataflow"])
def test_a_base_exception_under_cancel_stops_siblings_and_keeps_results(executor: str) -> None:
    plan = {
        "tasks": [
            {"id": "first", "tool": "ok"},
            {"id": "slow", "tool": "nap", "args": {"seconds": 10}},
            {"id": "bad", "tool": "raise_sync", "args": {"kind": "SystemExit"}},
        ]
    }
    t0 = time.monotonic()
    result = dagagent.execute_sync(plan, _registry(), executor=executor)
    assert time.monotonic() - t0 < 5
    assert result.tasks["first"].status == "succeeded"
    assert result.tasks["bad"].status == "failed"
    assert result.tasks["slow"].status == "cancelled"


@pytest.mark.anyio
@pytest.mark.parametrize("executor", EXECUTORS)
async def test_cancelling_the_caller_still_cancels_the_run(executor: str) -> None:
    plan = {"tasks": [{"id": "slow", "tool": "nap", "args": {"seconds": 10}}]}
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(dagagent.execute(plan, _registry(), executor=executor), 0.2)
    with anyio.move_on_after(0.2) as scope:
        await dagagent.execute(plan, _registry(), executor=executor)
    assert scope.cancelled_caught


# -- generators ---------------------------------------------------------------------------


def _generator_registry() -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool
    def returns_generator() -> Iterator[int]:
        return (i * i for i in range(4))

    @reg.tool
    def generator_function() -> Iterator[str]:
        yield "a"
        yield "b"

    @reg.tool
    async def async_generator_function() -> AsyncIterator[int]:
        for i in range(3):
            await anyio.lowlevel.checkpoint()
            yield i

    @reg.tool
    async def async_returns_generator() -> Iterator[int]:
        return iter_range(2)

    @reg.tool
    def echo(value: Any) -> Any:
        return value

    return reg


def iter_range(n: int) -> Iterator[int]:
    yield from range(n)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_generator_outputs_are_lists_every_reference_can_read(executor: str) -> None:
    plan = {
        "tasks": [
            {"id": "g1", "tool": "returns_generator"},
            {"id": "g2", "tool": "generator_function"},
            {"id": "g3", "tool": "async_generator_function"},
            {"id": "g4", "tool": "async_returns_generator"},
            {"id": "r1", "tool": "echo", "args": {"value": "${g1}"}},
            {"id": "r2", "tool": "echo", "args": {"value": "${g1}"}},
            {"id": "r3", "tool": "echo", "args": {"value": "${g1.3} ${g2.1} ${g3} ${g4}"}},
        ]
    }
    result = dagagent.execute_sync(plan, _generator_registry(), executor=executor)
    assert result.ok, result.tasks
    assert result.outputs["g1"] == [0, 1, 4, 9]
    assert result.outputs["g2"] == ["a", "b"]
    assert result.outputs["g3"] == [0, 1, 2]
    assert result.outputs["g4"] == [0, 1]
    assert result.outputs["r1"] == result.outputs["r2"] == [0, 1, 4, 9]
    assert result.outputs["r3"] == "9 b [0, 1, 2] [0, 1]"
    assert result.to_json_dict()["tasks"]["g1"]["output"] == [0, 1, 4, 9]
