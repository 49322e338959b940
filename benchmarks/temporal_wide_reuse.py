"""What a wide reused map costs the run workflow: a revision whose map reuses thousands of
elements' earlier outputs, on the Temporal executor.

A revision (``replan --execute``, a solve's later round) hands its run the earlier run's
outputs to reuse, a map's element by element. The map runs in chunks (``chunk_elements``
each); what each chunk's activity is given decides how long the workflow task that
schedules them takes, and a workflow task over two seconds is taken by Temporal's SDK for a
deadlock. This script runs a map of ``--elements`` elements (each output ``--bytes`` long)
locally, then its revision (one element changed, the others reused) on a development server
with one worker process, and reads the revision's history: the longest workflow task (from
its start to its completion, as the server recorded them), what the map's activities were
given (their first argument, the call, as its bytes: inline, or the size the payload store
holds for it: the median, a chunk's, and the total), the history's size, and the
revision's time.

The dagagent it runs is the one Python imports (``PYTHONPATH``), for the driver and the
worker alike, so the same script measures two versions::

    python benchmarks/temporal_wide_reuse.py --write
    PYTHONPATH=/path/to/other/checkout python benchmarks/temporal_wide_reuse.py \\
        --name temporal_wide_reuse_before --write
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common
from temporal_overhead import _free_port, _wait_ready, start_dev_server

import dagagent
from dagagent.settings import RunSettings

HERE = Path(__file__).resolve().parent
SOURCE = Path(dagagent.__file__).resolve().parents[1]
QUEUE = "wide-reuse"

registry = dagagent.Registry()


@registry.tool
def echo(value: Any) -> Any:
    """Return the value."""
    return value


@registry.tool
def text(i: int, n: int) -> str:
    """A text of about ``n`` characters made of ``i``'s digits."""
    return (str(i) * n)[:n]


def wide(items: list[int], size: int) -> dict[str, Any]:
    return {
        "goal": "a wide map",
        "tasks": [
            {"id": "xs", "tool": "echo", "args": {"value": items}},
            {"id": "m", "for_each": "${xs}", "tool": "text", "args": {"i": "${@item}", "n": size}},
        ],
    }


def _logical(payload: Any) -> int:
    """A payload's bytes: inline, or as the payload store holds it."""
    stored = sum(p.size_bytes for p in payload.external_payloads)
    return int(stored) if stored else int(payload.ByteSize())


async def measure(args: argparse.Namespace, address: str, payloads: str) -> dict[str, Any]:
    from dagagent.executors.temporal import TemporalExecutor
    from dagagent.review import reuse_map
    from dagagent.store import RunStore

    n = args.elements
    with RunStore(Path(payloads).parent / "runs.db") as st:
        before = await dagagent.execute(wide(list(range(n)), args.bytes), registry, store=st)
        assert before.ok
        reuse = reuse_map(st.get_run(before.run_id))
    ex = TemporalExecutor(address, task_queue=QUEUE, payloads=payloads, chunk_elements=args.chunk)
    revised = wide([*range(n - 1), n + 7], args.bytes)
    started = time.perf_counter()
    result = await dagagent.execute(
        revised, registry, settings=RunSettings(executor=ex), reuse=reuse
    )
    wall = time.perf_counter() - started
    elements = result.tasks["m"].elements or []
    reused = sum(1 for e in elements if e.status.value == "reused")
    assert result.ok and reused == n - 1, (result.status, reused)
    assert ex.client is not None and ex.workflow_id is not None
    history = await ex.client.get_workflow_handle(ex.workflow_id).fetch_history()
    started_at: dict[int, float] = {}
    tasks_ms: list[float] = []
    calls: list[int] = []
    for e in history.events:
        when = e.event_time.ToDatetime().timestamp()
        if e.HasField("workflow_task_started_event_attributes"):
            started_at[e.event_id] = when
        elif e.HasField("workflow_task_completed_event_attributes"):
            began = started_at.get(e.workflow_task_completed_event_attributes.started_event_id)
            if began is not None:
                tasks_ms.append((when - began) * 1000)
        elif e.HasField("activity_task_scheduled_event_attributes"):
            a = e.activity_task_scheduled_event_attributes
            if a.activity_type.name == "dagagent.run_task" and a.input.payloads:
                calls.append(_logical(a.input.payloads[0]))
    history_bytes = sum(e.ByteSize() for e in history.events)
    return {
        "elements": n,
        "output_bytes": args.bytes,
        "chunk_elements": args.chunk,
        "chunks": -(-n // args.chunk),
        "revision_wall_s": round(wall, 3),
        "longest_workflow_task_ms": round(max(tasks_ms), 1),
        "workflow_tasks": len(tasks_ms),
        # (the largest is the map's assembly, which carries its elements' results)
        "median_call_bytes": int(common.median([float(c) for c in calls])),
        "calls_bytes_total": sum(calls),
        "history_events": len(history.events),
        "history_bytes": history_bytes,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="A revision's wide reused map on the Temporal executor: its longest "
        "workflow task and what its activities are given. Writes NAME.json/.md.",
    )
    parser.add_argument("--elements", type=int, default=3502, help="elements of the map")
    parser.add_argument("--bytes", type=int, default=400, help="each element's output length")
    parser.add_argument("--chunk", type=int, default=100, help="map elements per activity")
    parser.add_argument("--name", default="temporal_wide_reuse", help="the result files' name")
    common.add_output_options(parser)
    args = parser.parse_args(argv)
    info = common.machine_info()
    workdir = Path(tempfile.mkdtemp(prefix="temporal-wide-reuse-"))
    payloads = str(workdir / "payloads")
    port = _free_port()
    server = start_dev_server(port)
    address = f"127.0.0.1:{port}"
    worker: subprocess.Popen[bytes] | None = None
    try:
        worker = subprocess.Popen(
            [
                *(sys.executable, "-m", "dagagent", "worker"),
                *("--tools", "temporal_wide_reuse:registry"),
                *("--temporal-address", address, "--task-queue", QUEUE),
                *("--payload-store", payloads),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(SOURCE), str(HERE)])},
            cwd=str(workdir),
        )
        _wait_ready(worker)
        assert worker.stdout is not None
        worker.stdout.close()
        found = asyncio.run(measure(args, address, payloads))
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(timeout=30)
        server.terminate()
        server.wait(timeout=30)
    found["dagagent"] = str(SOURCE)
    found["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(found, indent=2))
    lines = common.markdown_head(
        "A revision's wide reused map on Temporal", common.command_line(), info
    )
    lines += [
        "",
        f"dagagent from `{found['dagagent']}` (driver and worker); load average after: "
        f"{found['load_after']}.",
        "",
        common.markdown_table(
            ["measure", "value"], [[k, v] for k, v in found.items() if k not in ("dagagent",)]
        ),
    ]
    common.save(args, args.name, {**found, "machine": info}, "\n".join(lines))


if __name__ == "__main__":
    main()
