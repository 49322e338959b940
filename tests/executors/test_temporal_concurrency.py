"""A map's elements on the workers run as many at once as in a local run: the run's
``max_concurrency`` and the task's own bound hold for the elements a chunk of the map runs on
its worker, and for its chunks together, not only for the activities pending at once.

The tool (``temporal_tools.crowd``) counts the elements in it at once; each waits for more to
come in after it (or for the test's go, once the bound is reached), so a map that lets more
than the bound in at once shows it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

import dagagent
from dagagent.settings import RunSettings

pytest.importorskip("temporalio")

import temporal_tools
from eventually import until

from dagagent.executors.temporal import TemporalExecutor

from .temporal_fixtures import EXTRA, Workers
from .test_temporal import replay

pytestmark = [pytest.mark.slow, pytest.mark.asyncio_only("Temporal's client runs on asyncio")]

N = 6


def _plan(where: Path, name: str, bound: int, own: int | None = None) -> dict[str, Any]:
    task: dict[str, Any] = {
        "id": "m",
        "tool": "crowd",
        "for_each": list(range(N)),
        "args": {"name": name, "where": str(where), "i": "${@item}", "n": N, "bound": bound},
    }
    if own is not None:
        task["max_concurrency"] = own
    return {"goal": "g", "tasks": [task]}


async def _most_at_once(
    plan: dict[str, Any], settings: RunSettings, where: Path, name: str, bound: int
) -> int:
    """Run ``plan``; once ``bound`` elements are in at once, let them go: the most that were
    in at once."""
    result: list[dagagent.RunResult] = []

    async def run() -> None:
        result.append(await dagagent.execute(plan, temporal_tools.extra, settings=settings))

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        # the bound reached (the elements' markers, on the workers'), or the run ended
        await until(
            lambda: result or temporal_tools.crowded(where, name) >= bound,
            f"{bound} elements of {name} in at once",
        )
        temporal_tools.let_go(where, name)
    [done] = result
    assert done.tasks["m"].status.value == "succeeded", done.tasks["m"].error
    assert done.tasks["m"].output == list(range(N))
    return max(int(x) for x in (where / f"{name}.seen").read_text().split())


@pytest.mark.anyio
async def test_a_map_s_elements_on_the_workers_keep_the_run_s_and_the_task_s_bound(
    own_workers: Workers, tmp_path: Path
) -> None:
    """Six elements: under the run's ``max_concurrency=2``, in one chunk, at most two at once
    on the worker (as locally), not six; under the task's ``max_concurrency=2`` cut into
    chunks of two spread over two workers, at most two at once over all chunks."""
    own_workers.start(2, tools=EXTRA)

    def on(**options: Any) -> TemporalExecutor:
        return TemporalExecutor(
            own_workers.address,
            task_queue=own_workers.queue,
            payloads=own_workers.payloads,
            **options,
        )

    local = await _most_at_once(
        _plan(tmp_path, "local", 2), RunSettings(max_concurrency=2), tmp_path, "local", 2
    )
    by_run, by_task = on(), on(chunk_elements=2)
    run_bound = await _most_at_once(
        _plan(tmp_path, "run", 2),
        RunSettings(executor=by_run, max_concurrency=2),
        tmp_path,
        "run",
        2,
    )
    task_bound = await _most_at_once(
        _plan(tmp_path, "task", 2, own=2),
        RunSettings(executor=by_task),
        tmp_path,
        "task",
        2,
    )
    assert (local, run_bound, task_bound) == (2, 2, 2)
    for ex in (by_run, by_task):  # the histories replay: the workflow decides the same
        await replay(ex)
