"""For random DAGs, every executor runs each task exactly once and never before its dependencies."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dagagent


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, int]]:
    n = draw(st.integers(min_value=1, max_value=25))
    tasks = []
    delays = {}
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), unique=True, max_size=min(i, 4))) if i else []
        tid = f"t{i}"
        delays[tid] = draw(st.integers(0, 3))
        tasks.append(
            {
                "id": tid,
                "tool": "step",
                "args": {"name": tid, "ticks": delays[tid]},
                "depends_on": [f"t{d}" for d in deps],
            }
        )
    order = draw(st.permutations(tasks))
    return list(order), delays


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(), st.sampled_from(["serial", "levels", "dataflow"]), st.integers(1, 4) | st.none())
def test_each_task_once_and_after_its_dependencies(
    dag: tuple[list[dict[str, Any]], dict[str, int]], executor: str, limit: int | None
) -> None:
    tasks, _ = dag
    events: list[tuple[str, str]] = []
    reg = dagagent.Registry()

    @reg.tool
    async def step(name: str, ticks: int) -> str:
        events.append(("start", name))
        for _ in range(ticks):
            await anyio.lowlevel.checkpoint()
        events.append(("end", name))
        return name

    result = dagagent.execute_sync({"tasks": tasks}, reg, executor=executor, max_concurrency=limit)
    assert result.ok
    starts = [n for kind, n in events if kind == "start"]
    assert sorted(starts) == sorted(t["id"] for t in tasks)  # exactly once each
    ended_at = {n: i for i, (kind, n) in enumerate(events) if kind == "end"}
    started_at = {n: i for i, (kind, n) in enumerate(events) if kind == "start"}
    for t in tasks:
        for d in t["depends_on"]:
            assert ended_at[d] < started_at[t["id"]], f"{t['id']} started before {d} ended"
