"""Dask worker processes and tools that end with a BaseException: the task fails as it does
in-process, the worker survives, and calls running beside it keep their results."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import dagagent

pytest.importorskip("distributed")

from dagagent.executors.dask import DaskExecutor


class ToolAbort(BaseException):
    pass


registry = dagagent.Registry()


@registry.tool
def exits(code: int) -> int:
    time.sleep(0.1)  # the neighbour is running by now
    sys.exit(code)


@registry.tool
def aborts() -> int:
    raise ToolAbort("given up")


@registry.tool
async def aexits() -> int:
    raise SystemExit(4)


@registry.tool
def neighbour(seconds: float) -> str:
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
def test_base_exceptions_on_a_worker_fail_their_task_and_spare_the_worker(client: Any) -> None:
    plan = {
        "tasks": [
            {"id": "slow", "tool": "neighbour", "args": {"seconds": 0.6}},
            {"id": "exit", "tool": "exits", "args": {"code": 3}, "retries": 1},
            {"id": "abort", "tool": "aborts"},
            {"id": "aexit", "tool": "aexits"},
        ]
    }
    workers = set(client.scheduler_info()["workers"])

    async def run() -> dagagent.RunResult:
        with anyio.fail_after(60):  # without the fix, a worker killed by SystemExit hung here
            return await dagagent.execute(
                plan, registry, executor=DaskExecutor(client=client), on_failure="continue"
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
