"""What the run workflow's steps cost on Temporal: fast tools and maps in chunks, two versions.

The run workflow once ran the calls of fast tools (``@tool(blocking=False)``, no side
effects) and its own bookkeeping steps (a map's element count and assembly) as local
activities, in the worker that runs the workflow; it now runs them as activities on the
task queue, because a local activity's result can reach the workflow a workflow task later
than the one that recorded it, and such a history does not replay (see
``benchmarks/temporal_replay.py``). This benchmark measures what that costs, on two shapes:

- **chain**: ``--chain`` fast-tool tasks, each on the previous one's output;
- **maps**: the mixed plan of ``temporal_replay.py`` (a fast tool, four maps, two of them
  in chunks), whose element counts and assemblies were local activities.

Each *round* runs both shapes ``--repeats`` times on a fresh development server and worker,
in a process of its own, once with this checkout's dagagent and once with ``--against``'s
(another checkout, say the version before), alternating, so that both see the same load
over time; the table gives the medians over all rounds, per version, and their ratio::

    python benchmarks/temporal_fast_tools.py --against /path/to/older/checkout
    python benchmarks/temporal_fast_tools.py --against ../main --rounds 4 --repeats 10 --write
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
from temporal_overhead import _free_port, start_dev_server
from temporal_replay import PLAN, QUEUE, Workers, registry

import dagagent
from dagagent.settings import RunSettings, TaskRetryPolicy

HERE = Path(__file__).resolve().parent
SOURCE = Path(dagagent.__file__).resolve().parents[1]
SHAPES = ("chain", "maps")


def chain_plan(n: int) -> dict[str, Any]:
    tasks: list[dict[str, Any]] = [{"id": "t0", "tool": "double", "args": {"x": 1}}]
    tasks += [
        {"id": f"t{i}", "tool": "double", "args": {"x": f"${{t{i - 1}}}"}} for i in range(1, n)
    ]
    return {"goal": "a chain of fast tools", "tasks": tasks}


async def measure(address: str, payloads: str, chain: int, repeats: int) -> dict[str, list[float]]:
    from dagagent.executors.temporal import TemporalExecutor

    retry = TaskRetryPolicy(base_delay_s=0.01, jitter=0)
    plans = {"chain": chain_plan(chain), "maps": PLAN}
    times: dict[str, list[float]] = {s: [] for s in SHAPES}
    for k in range(repeats + 1):  # the first of each is a warm-up
        for shape in SHAPES:
            ex = TemporalExecutor(address, task_queue=QUEUE, payloads=payloads, chunk_elements=2)
            started = time.perf_counter()
            result = await dagagent.execute(
                plans[shape],
                registry,
                settings=RunSettings(executor=ex, on_failure="continue", retry=retry),
            )
            wall = time.perf_counter() - started
            if shape == "chain":
                assert result.tasks[f"t{chain - 1}"].output == 2**chain
            if k:
                times[shape].append(wall)
    return times


def one_round(args: argparse.Namespace) -> None:
    """In a child process: start a server and a worker, measure, print the times as JSON."""
    workdir = Path(tempfile.mkdtemp(prefix="temporal-fast-"))
    port = _free_port()
    server = start_dev_server(port)
    workers: Workers | None = None
    try:
        workers = Workers(f"127.0.0.1:{port}", str(workdir / "payloads"), 1)
        times = asyncio.run(measure(workers.address, workers.payloads, args.chain, args.repeats))
    finally:
        if workers is not None:
            workers.stop()
        server.terminate()
        server.wait(timeout=30)
    print(json.dumps(times))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Fast tools and maps in chunks on the Temporal executor, this checkout "
        "against another, rounds alternating. Writes temporal_fast_tools.json/.md.",
    )
    parser.add_argument("--against", type=Path, required=True, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per version")
    parser.add_argument("--repeats", type=int, default=10, help="runs of each shape per round")
    parser.add_argument("--chain", type=int, default=20, help="tasks in the chain")
    parser.add_argument("--one-round", action="store_true", help=argparse.SUPPRESS)
    common.add_output_options(parser)
    args = parser.parse_args(argv)
    if args.one_round:
        one_round(args)
        return
    info = common.machine_info()
    versions = {"this": SOURCE, "against": args.against.resolve()}
    times: dict[str, dict[str, list[float]]] = {v: {s: [] for s in SHAPES} for v in versions}
    for r in range(args.rounds):
        order = list(versions) if r % 2 == 0 else list(reversed(versions))
        for version in order:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(versions[version]), str(HERE)])}
            out = subprocess.run(
                [
                    *(sys.executable, str(Path(__file__).resolve()), "--one-round"),
                    *("--against", str(args.against), "--repeats", str(args.repeats)),
                    *("--chain", str(args.chain)),
                ],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            got = json.loads(out.stdout.strip().splitlines()[-1])
            for s in SHAPES:
                times[version][s] += got[s]
            print(
                f"  round {r + 1} {version}: "
                + ", ".join(f"{s} {common.median(got[s]) * 1000:.0f} ms" for s in SHAPES),
                flush=True,
            )
    rows = []
    for s in SHAPES:
        this, other = common.median(times["this"][s]), common.median(times["against"][s])
        tasks = args.chain if s == "chain" else len(PLAN["tasks"])
        rows.append([s, tasks, f"{this * 1000:.0f}", f"{other * 1000:.0f}", f"{this / other:.2f}"])
    headers = ["shape", "tasks", "this ms (median)", "against ms (median)", "x against"]
    print(common.text_table(headers, rows))
    load = [round(x, 2) for x in os.getloadavg()]
    lines = common.markdown_head(
        "What the run workflow's steps cost: this version against another",
        common.command_line(),
        info,
    )
    commits = {
        v: subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        for v, path in versions.items()
    }
    lines += [
        "",
        f"this: {versions['this']} ({commits['this']}); against: {versions['against']} "
        f"({commits['against']}); {args.rounds} rounds "
        f"each, alternating, {args.repeats} runs of each shape per round (after one warm-up), "
        f"one worker, maps in chunks of 2; load average at the end {load}.",
        "",
        common.markdown_table(headers, rows),
    ]
    data = {
        "machine": info,
        "versions": {k: str(v) for k, v in versions.items()},
        "commits": commits,
        "times": times,
    }
    common.save(args, "temporal_fast_tools", data, "\n".join(lines))


if __name__ == "__main__":
    main()
