"""Do the run workflow's histories replay? Many runs of one plan, every history replayed.

A workflow's history must replay to the same decisions on any worker: a worker that picks up
a run another one started (the first was killed, restarted, or dropped the run from its
cache) replays the history so far before it goes on. This script runs one plan many times on
the Temporal executor and replays every history with ``temporalio.worker.Replayer``, and
counts the histories that do not replay; and, from the histories themselves, the workflow
tasks that failed on a live worker (a nondeterminism met while a worker caught up).

The plan is the Temporal tests' mixed plan (a fast tool, maps in chunks of two elements,
failures under ``on_failure="continue"``): its maps' element counts and assembly, the fast
tool and the regular tool calls end in the same workflow tasks, where the order in which
their results reach the workflow decides what it does next. It starts a development server
(``temporal server start-dev``, in memory, loopback) and ``--workers`` worker processes;
``--at-once`` runs go at a time (the load is part of the test: the bug this hunts showed at
a load average near 10 on two cores); with ``--kill``, a worker is killed (SIGKILL) at a
random moment during each batch and another started, so runs move between workers mid-way.

The dagagent it runs is the one Python imports (``PYTHONPATH``), for the driver and the
workers alike, so the same script measures two versions::

    python benchmarks/temporal_replay.py --runs 300 --at-once 4
    PYTHONPATH=/path/to/other/checkout python benchmarks/temporal_replay.py --runs 300
    python benchmarks/temporal_replay.py --runs 100 --kill --keep /tmp/histories

``--name`` names the result files (``--write``: under ``benchmarks/results``), so that two
versions' results stand side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common
from temporal_overhead import _free_port, _wait_ready, start_dev_server

import dagagent
from dagagent.settings import RunSettings, TaskRetryPolicy

HERE = Path(__file__).resolve().parent
#: The checkout whose dagagent runs (the driver's and the workers').
SOURCE = Path(dagagent.__file__).resolve().parents[1]
QUEUE = "replay-check"

registry = dagagent.Registry()


@registry.tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@registry.tool
def echo(value: Any) -> Any:
    """Return the value."""
    return value


@registry.tool
def boom(x: int) -> int:
    """Fail, naming x."""
    raise ValueError(f"boom {x}")


@registry.tool(blocking=False)
def double(x: int) -> int:
    """Twice x (declared fast: never blocks, no side effects)."""
    return 2 * x


PLAN: dict[str, Any] = {
    "goal": "replay check",
    "tasks": [
        {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
        {"id": "b", "tool": "double", "args": {"x": "${a}"}},
        {"id": "items", "tool": "echo", "args": {"value": [1, 2, 3, 4, 5, 6, 7]}},
        {"id": "m", "for_each": "${items}", "tool": "add", "args": {"a": "${@item}", "b": "${b}"}},
        {
            "id": "ix",
            "for_each": "${m}",
            "tool": "add",
            "args": {"a": "${@item}", "b": "${@index}"},
        },
        {"id": "f", "tool": "boom", "args": {"x": "${a}"}, "retries": 2},
        {"id": "after_f", "tool": "add", "args": {"a": "${f}", "b": 1}},
        {"id": "mf", "for_each": [1, 2, 3, 4], "tool": "boom", "args": {"x": "${@item}"}},
        {
            "id": "partial",
            "for_each": [0, 1, 2, 3, 4],
            "tool": "boom",
            "args": {"x": "${@item}"},
            "allow_partial": True,
        },
    ],
}
#: What every run must end with (the dataflow executor's outcome).
EXPECTED_IX = [7, 9, 11, 13, 15, 17, 19]


class Workers:
    """The worker processes, any of which may be killed and replaced."""

    def __init__(self, address: str, payloads: str, count: int) -> None:
        self.address = address
        self.payloads = payloads
        # ``python -m`` puts its working directory first on the path: a neutral one, so that
        # the workers import the dagagent of PYTHONPATH, not a checkout they happen to be in
        self.cwd = str(Path(payloads).parent)
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SOURCE), str(HERE)])}
        self.procs = [self._start() for _ in range(count)]
        self.killed = 0

    def _start(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "dagagent", "worker"),
                *("--tools", "temporal_replay:registry"),
                *("--temporal-address", self.address, "--task-queue", QUEUE),
                *("--payload-store", self.payloads),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            cwd=self.cwd,
        )
        _wait_ready(proc)
        assert proc.stdout is not None
        proc.stdout.close()  # its later lines are not read: not piped, not blocking it
        return proc

    def kill_one(self, rng: random.Random) -> None:
        victim = self.procs.pop(rng.randrange(len(self.procs)))
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        self.killed += 1
        self.procs.append(self._start())

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


async def check(args: argparse.Namespace, workers: Workers) -> dict[str, Any]:
    from temporalio.client import WorkflowHistory
    from temporalio.worker import Replayer
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    from dagagent.executors.temporal import RunWorkflow, TemporalExecutor

    rng = random.Random(args.seed)
    retry = TaskRetryPolicy(base_delay_s=0.01, jitter=0)
    runs: list[dict[str, Any]] = []
    histories: list[tuple[str, WorkflowHistory]] = []
    client: Any = None

    async def one(k: int) -> None:
        nonlocal client
        ex = TemporalExecutor(
            workers.address,
            task_queue=QUEUE,
            payloads=workers.payloads,
            chunk_elements=args.chunk,
            heartbeat_s=args.heartbeat_s,
        )
        started = time.perf_counter()
        result = await dagagent.execute(
            PLAN, registry, settings=RunSettings(executor=ex, on_failure="continue", retry=retry)
        )
        wall = time.perf_counter() - started
        assert ex.client is not None and ex.workflow_id is not None
        client = ex.client
        history = await ex.client.get_workflow_handle(ex.workflow_id).fetch_history()
        histories.append((ex.workflow_id, history))
        runs.append(
            {
                "run": k,
                "workflow_id": ex.workflow_id,
                "ended_right": result.tasks["ix"].output == EXPECTED_IX,
                "wall_s": round(wall, 3),
            }
        )

    async def kill_later(batch_s: float) -> None:
        await asyncio.sleep(rng.uniform(0.05, batch_s))
        await asyncio.to_thread(workers.kill_one, rng)

    batch_s = 0.3  # about a run's time at a low load: a kill lands mid-run
    for start in range(0, args.runs, args.at_once):
        batch = [one(k) for k in range(start, min(args.runs, start + args.at_once))]
        if args.kill:
            batch.append(kill_later(batch_s))
        began = time.perf_counter()
        await asyncio.gather(*batch)
        batch_s = max(0.1, time.perf_counter() - began)
        done = min(args.runs, start + args.at_once)
        if done % 50 < args.at_once:
            print(f"  {done} runs", flush=True)

    replayer = Replayer(
        workflows=[RunWorkflow],
        data_converter=client.data_converter,
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("dagagent")
        ),
    )
    logging.getLogger("temporalio").setLevel(logging.ERROR)  # each failure is listed below
    failed: list[dict[str, Any]] = []
    task_failures = 0
    with_local = 0  # histories with local activities: which workflow the workers ran
    for wid, history in histories:
        task_failures += sum(
            1 for e in history.events if e.HasField("workflow_task_failed_event_attributes")
        )
        with_local += any(
            e.marker_recorded_event_attributes.marker_name == "core_local_activity"
            for e in history.events
        )
        try:
            await replayer.replay_workflow(history)
        except Exception as exc:
            failed.append({"workflow_id": wid, "error": f"{type(exc).__name__}: {exc}"[:400]})
            if args.keep is not None:
                args.keep.mkdir(parents=True, exist_ok=True)
                (args.keep / f"{wid}.json").write_text(history.to_json(), encoding="utf-8")
    return {
        "runs": len(runs),
        "ended_right": sum(1 for r in runs if r["ended_right"]),
        "replay_failures": len(failed),
        "workflow_task_failures": task_failures,
        "workers_killed": workers.killed,
        "histories_with_local_activities": with_local,
        "median_wall_s": common.median([r["wall_s"] for r in runs]),
        "failed": failed,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Run the mixed plan on the Temporal executor many times and replay every "
        "history; count the histories that do not replay. Writes temporal_replay.json/.md.",
    )
    parser.add_argument("--runs", type=int, default=100, help="runs of the plan")
    parser.add_argument("--at-once", type=int, default=4, help="runs at a time")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--chunk", type=int, default=2, help="map elements per activity")
    parser.add_argument(
        "--heartbeat-s", type=float, default=2.0, help="the runs' heartbeat timeout"
    )
    parser.add_argument(
        "--kill", action="store_true", help="kill a worker (and start another) in each batch"
    )
    parser.add_argument("--seed", type=int, default=44, help="seed of the kills' moments")
    parser.add_argument(
        "--keep", type=Path, default=None, help="save each history that does not replay here"
    )
    parser.add_argument(
        "--name", default="temporal_replay", help="the result files' name (NAME.json, NAME.md)"
    )
    common.add_output_options(parser)
    args = parser.parse_args(argv)
    info = common.machine_info()
    workdir = Path(tempfile.mkdtemp(prefix="temporal-replay-"))
    port = _free_port()
    server = start_dev_server(port)
    workers: Workers | None = None
    try:
        workers = Workers(f"127.0.0.1:{port}", str(workdir / "payloads"), args.workers)
        found = asyncio.run(check(args, workers))
    finally:
        if workers is not None:
            workers.stop()
        server.terminate()
        server.wait(timeout=30)
    load_after = list(os.getloadavg())
    found["dagagent"] = str(SOURCE)
    found["dagagent_commit"] = subprocess.run(
        ["git", "-C", str(SOURCE), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    found["load_after"] = [round(x, 2) for x in load_after]
    print(json.dumps({k: v for k, v in found.items() if k != "failed"}, indent=2))
    for f in found["failed"]:
        print(f"  does not replay: {f['workflow_id']}: {f['error'][:200]}")
    lines = common.markdown_head(
        "Do the run workflow's histories replay?", common.command_line(), info
    )
    lines += [
        "",
        f"dagagent from `{found['dagagent']}` (driver and workers), at commit "
        f"{found['dagagent_commit']}.",
        "",
        f"{found['runs']} runs of the mixed plan (maps in chunks of {args.chunk}), "
        f"{args.at_once} at a time on {args.workers} workers"
        + (f", {found['workers_killed']} workers killed mid-run" if args.kill else "")
        + f"; load average after: {found['load_after']}.",
        "",
        f"- ended as on the dataflow executor: {found['ended_right']} of {found['runs']}",
        f"- histories that do not replay: **{found['replay_failures']}**",
        f"- workflow tasks failed on a live worker: {found['workflow_task_failures']}",
        f"- histories with local activities: {found['histories_with_local_activities']}",
        f"- median wall time of a run: {found['median_wall_s']:.3f} s",
    ]
    common.save(args, args.name, {"machine": info, **found}, "\n".join(lines))


if __name__ == "__main__":
    main()
