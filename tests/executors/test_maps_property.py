"""For random DAGs with map tasks, every executor runs each element of each map exactly once,
and never before the tasks it needs have ended."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
from hypothesis import HealthCheck, given, settings, strategies as st

import dagagent
from dagagent.settings import RunSettings


@st.composite
def map_dags(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Tasks ``t0..tn``: each a plain step (its output a list of 0-3 numbers) or a map over
    the output of an earlier task, or over a literal list; any may also wait on others."""
    n = draw(st.integers(min_value=1, max_value=12))
    tasks = []
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), unique=True, max_size=min(i, 3))) if i else []
        tid = f"t{i}"
        ticks = draw(st.integers(0, 3))
        kind = draw(st.sampled_from(["step", "map", "literal"])) if i else "step"
        task: dict[str, Any] = {"id": tid, "depends_on": [f"t{d}" for d in deps]}
        if kind == "step":
            width = draw(st.integers(0, 3))
            task |= {"tool": "step", "args": {"name": tid, "ticks": ticks, "width": width}}
        else:
            if kind == "map":
                source = draw(st.integers(0, i - 1))
                task["for_each"] = f"${{t{source}}}"
            else:
                task["for_each"] = draw(st.lists(st.integers(0, 9), max_size=4))
            task |= {
                "tool": "element",
                "args": {"name": tid, "index": "${@index}", "item": "${@item}", "ticks": ticks},
            }
            limit = draw(st.integers(1, 3) | st.none())
            if limit is not None:
                task["max_concurrency"] = limit
        tasks.append(task)
    return tasks


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(map_dags(), st.sampled_from(["serial", "levels", "dataflow"]), st.integers(1, 4) | st.none())
def test_each_element_once_and_after_its_inputs(
    tasks: list[dict[str, Any]], executor: str, limit: int | None
) -> None:
    events: list[tuple[str, str]] = []
    reg = dagagent.Registry()

    async def ticking(ticks: int) -> None:
        for _ in range(ticks):
            await anyio.lowlevel.checkpoint()

    @reg.tool
    async def step(name: str, ticks: int, width: int) -> list[int]:
        events.append(("start", name))
        await ticking(ticks)
        events.append(("end", name))
        return list(range(width))

    @reg.tool
    async def element(name: str, index: int, item: Any, ticks: int) -> list[int]:
        events.append(("start", f"{name}[{index}]"))
        await ticking(ticks)
        events.append(("end", f"{name}[{index}]"))
        return [index]  # a map's output is a list: another map may run over it

    result = dagagent.execute_sync(
        {"tasks": tasks}, reg, settings=RunSettings(executor=executor, max_concurrency=limit)
    )
    assert result.ok, {t: r.error for t, r in result.tasks.items() if r.error}

    # What each task should have run: its elements (as many as its list had), or itself.
    expected: list[str] = []
    for t in tasks:
        if "for_each" not in t:
            expected.append(t["id"])
            continue
        n = len(result.tasks[t["id"]].output)
        items = t["for_each"]
        if isinstance(items, list):
            assert n == len(items)
        else:
            assert n == len(result.tasks[items[2:-1]].output)  # "${tK}"
        expected += [f"{t['id']}[{i}]" for i in range(n)]
        assert result.tasks[t["id"]].output == [[i] for i in range(n)]  # in order
    starts = [n for kind, n in events if kind == "start"]
    assert sorted(starts) == sorted(expected)  # every element exactly once

    started_at = {n: i for i, (kind, n) in enumerate(events) if kind == "start"}
    ended_at = {n: i for i, (kind, n) in enumerate(events) if kind == "end"}

    def last_end(task_id: str) -> int:
        """When ``task_id`` was done: its last element's end (-1: it ran nothing)."""
        ran = [i for n, i in ended_at.items() if n == task_id or n.startswith(f"{task_id}[")]
        return max(ran, default=-1)

    graph = dagagent.validate({"tasks": tasks}, reg)
    for t in tasks:
        mine = [i for n, i in started_at.items() if n == t["id"] or n.startswith(f"{t['id']}[")]
        for d in graph.dependencies[t["id"]]:
            for s in mine:
                assert last_end(d) < s, f"{t['id']} started before {d} ended"
    # the bounds held: never more than the run's limit, nor a map's own, at once
    running: dict[str, int] = {}
    total = 0
    for kind, n in events:
        owner = n.split("[")[0]
        step_ = 1 if kind == "start" else -1
        running[owner] = running.get(owner, 0) + step_
        total += step_
        assert limit is None or total <= limit
        own = next(t.get("max_concurrency") for t in tasks if t["id"] == owner)
        assert own is None or running[owner] <= own
        assert executor != "serial" or total <= 1
