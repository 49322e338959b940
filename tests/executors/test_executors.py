"""The in-process executors' scheduling: overlap, the levels barrier, dataflow starts, and
concurrency limits."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import dagagent
from dagagent import execute
from dagagent.settings import RunSettings

pytestmark = pytest.mark.anyio

PARALLEL = ["levels", "dataflow"]


def w(id: str, seconds: float = 0.0, deps: tuple[str, ...] = (), **kw: Any) -> dict[str, Any]:
    args = {"name": id, "seconds": seconds, **kw.pop("args", {})}
    return {"id": id, "tool": "work", "args": args, "depends_on": list(deps), **kw}


@pytest.mark.parametrize("executor", PARALLEL)
async def test_independent_tasks_overlap(
    executor: str, registry: dagagent.Registry, recorder: Any
) -> None:
    plan = {"tasks": [w(f"t{i}", 0.2) for i in range(4)]}
    await execute(plan, registry, settings=RunSettings(executor=executor))
    assert all(recorder.overlap("t0", f"t{i}") for i in range(1, 4))


async def test_serial_never_overlaps(registry: dagagent.Registry, recorder: Any) -> None:
    plan = {"tasks": [w(f"t{i}", 0.05) for i in range(3)]}
    await execute(plan, registry, settings=RunSettings(executor="serial"))
    assert not recorder.overlap("t0", "t1") and not recorder.overlap("t1", "t2")


async def test_levels_barrier_holds(registry: dagagent.Registry, recorder: Any) -> None:
    # c depends only on the fast task a, but levels waits for the slow b of the same level.
    plan = {"tasks": [w("a", 0.0), w("b", 0.3), w("c", 0.0, ("a",))]}
    await execute(plan, registry, settings=RunSettings(executor="levels"))
    assert recorder.intervals["c"][0] >= recorder.intervals["b"][1]


async def test_dataflow_starts_without_waiting_for_unrelated_slow_task(
    registry: dagagent.Registry, recorder: Any
) -> None:
    plan = {"tasks": [w("a", 0.0), w("b", 0.5), w("c", 0.0, ("a",))]}
    await execute(plan, registry, settings=RunSettings(executor="dataflow"))
    assert recorder.intervals["c"][1] < recorder.intervals["b"][1]
    assert recorder.intervals["c"][0] >= recorder.intervals["a"][1]


@pytest.mark.skip_time  # every job lasts until all that may run at once have started
@pytest.mark.parametrize("executor", PARALLEL)
async def test_max_concurrency_limits_the_run(executor: str) -> None:
    running = peak = 0
    reg = dagagent.Registry()

    @reg.tool
    async def job(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.02)
        running -= 1
        return i

    plan = {"tasks": [{"id": f"j{i}", "tool": "job", "args": {"i": i}} for i in range(10)]}
    result = await execute(plan, reg, settings=RunSettings(executor=executor, max_concurrency=3))
    assert result.ok and peak == 3


@pytest.mark.skip_time
async def test_per_tool_max_concurrency() -> None:
    running = peak = 0
    reg = dagagent.Registry()

    @reg.tool(max_concurrency=2)
    async def limited(i: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.02)
        running -= 1
        return i

    plan = {"tasks": [{"id": f"j{i}", "tool": "limited", "args": {"i": i}} for i in range(6)]}
    assert (await execute(plan, reg, settings=RunSettings(executor="dataflow"))).ok and peak == 2


def t(id: str, *deps: str) -> dict[str, Any]:
    """A task of the tool ``step`` named after itself."""
    return {"id": id, "tool": "step", "args": {"name": id}, "depends_on": list(deps)}


async def test_dataflow_runs_in_order_until_a_task_blocks_then_starts_each_task_when_ready() -> (
    None
):
    # Tasks that never block run one after another in plan order, nothing counted. The
    # first to block (a, waiting for c) hands the rest to the countdown: c, which does not
    # depend on a, must start while a waits (else the run never ends), and b, which depends
    # on a and comes before c, must not start before a ends; d waits for both b and c.
    reg = dagagent.Registry()
    log: list[str] = []
    go = anyio.Event()

    @reg.tool
    async def step(name: str) -> str:
        log.append(f"start {name}")
        if name == "a":
            await go.wait()
        elif name == "c":
            go.set()
        log.append(f"end {name}")
        return name

    # In order: z, then a and y, then b and c, then d. a blocks with y, b, c and d queued.
    plan = {"tasks": [t("z"), t("a", "z"), t("y", "z"), t("b", "a"), t("c", "y"), t("d", "b", "c")]}
    with anyio.fail_after(30):
        result = await execute(plan, reg, settings=RunSettings(executor="dataflow"))
    assert result.ok, result.counts
    assert log.index("start c") < log.index("end a")  # c ran while a waited
    assert log.index("end a") < log.index("start b")
    assert log.index("end b") < log.index("start d") and log.index("end c") < log.index("start d")


async def test_dataflow_failure_before_anything_blocks_skips_only_what_depends_on_it() -> None:
    # A failure while tasks still run in order (under "continue") starts the countdown:
    # the failed task's descendants are skipped, tasks after it in the plan that do not
    # depend on it still run, and so do their dependents.
    reg = dagagent.Registry()

    @reg.tool
    async def step(name: str) -> str:
        if name == "f":
            raise ValueError("no")
        return name

    plan = {"tasks": [t("a"), t("f", "a"), t("g", "f"), t("h", "a"), t("i", "h", "g"), t("j", "h")]}
    result = await execute(
        plan, reg, settings=RunSettings(executor="dataflow", on_failure="continue")
    )
    statuses = {k: v.status.value for k, v in result.tasks.items()}
    assert statuses == {
        "a": "succeeded",
        "f": "failed",
        "g": "skipped",
        "h": "succeeded",
        "i": "skipped",
        "j": "succeeded",
    }
