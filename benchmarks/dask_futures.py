"""The Dask executor next to raw Dask futures with the same dependency structure.

The floor is what a Dask user would write by hand: ``client.submit`` of every task at once,
each future passed to the tasks that depend on it, so the scheduler hands each result
straight to its dependents; then one ``client.gather`` of every task's future, because
dagagent has every result on the driver too (it records them) and the floor must bring
back the same data. The floor runs on a client of its own, to the same scheduler, made as
Dask makes clients (as the executor's client is): the executor's client takes the results
workers push on the topic named after it, so the scheduler also sends it an event for every
graph update, which a plain client does not pay for.

dagagent's ``dask`` executor runs the same plan on the same cluster, in the same process:
each call is a Dask task, its result comes back to the driver (references, validation,
records and events live there), and the driver submits the tasks that depended on it.

Two shapes: a chain of ``--chain`` tasks (each step a round trip through the cluster) and a
fan-out/fan-in of 1 + ``--fan`` + 1 tasks. Every task's tool adds one to its input (the
join counts its inputs), or sleeps ``--tool-ms`` first. Runs of the two are interleaved;
the headline is the best of ``--repeats`` (noise on a shared machine only adds time), the
median is in the JSON. The cluster (``--workers`` processes, ``--threads`` each) is started
once and is not timed.

    python benchmarks/dask_futures.py
    python benchmarks/dask_futures.py --chain 50 --fan 64 --repeats 9 --write
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import _common as common

import dagagent
from dagagent.settings import RunSettings


def add_one(x: int = 0, ms: float = 0.0) -> int:
    """Add one to ``x`` (after sleeping ``ms`` milliseconds)."""
    if ms:
        time.sleep(ms / 1000)
    return x + 1


def count(xs: list[int]) -> int:
    """How many inputs arrived."""
    return len(xs)


def _count_all(*xs: int) -> int:
    return len(xs)


def _registry() -> dagagent.Registry:
    registry = dagagent.Registry()
    registry.tool(add_one)
    registry.tool(count)
    return registry


def chain_plan(n: int, ms: float) -> dict[str, Any]:
    tasks = [{"id": "t0", "tool": "add_one", "args": {"x": 0, "ms": ms}}]
    tasks += [
        {"id": f"t{i}", "tool": "add_one", "args": {"x": f"${{t{i - 1}}}", "ms": ms}}
        for i in range(1, n)
    ]
    return {"goal": f"a chain of {n}", "tasks": tasks}


def fan_plan(n: int, ms: float) -> dict[str, Any]:
    tasks: list[dict[str, Any]] = [{"id": "root", "tool": "add_one", "args": {"ms": ms}}]
    tasks += [
        {"id": f"m{i}", "tool": "add_one", "args": {"x": "${root}", "ms": ms}} for i in range(n)
    ]
    tasks.append({"id": "join", "tool": "count", "args": {"xs": [f"${{m{i}}}" for i in range(n)]}})
    return {"goal": f"a fan of {n}", "tasks": tasks}


async def raw_chain(client: Any, n: int, ms: float) -> int:
    futures = [client.submit(add_one, 0, ms, pure=False)]
    for _ in range(1, n):
        futures.append(client.submit(add_one, futures[-1], ms, pure=False))
    results = await client.gather(futures)  # every result on the driver, as dagagent has
    last: int = results[-1]
    return last


async def raw_fan(client: Any, n: int, ms: float) -> int:
    root = client.submit(add_one, 0, ms, pure=False)
    middle = [client.submit(add_one, root, ms, pure=False) for _ in range(n)]
    join = client.submit(_count_all, *middle, pure=False)
    results = await client.gather([root, *middle, join])
    last: int = results[-1]
    return last


async def floor_client(exe: Any) -> Any:
    """A plain asynchronous client to the executor's scheduler, as Dask makes it (as the
    executor's own client is)."""
    from distributed import Client

    client: Any = await Client(exe.dask_client.scheduler.address, asynchronous=True)
    return client


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    from dagagent.executors.dask import DaskExecutor

    registry = _registry()
    exe = DaskExecutor(
        n_workers=args.workers, threads_per_worker=args.threads, processes=not args.in_process
    )
    shapes = {
        "chain": (
            dagagent.validate(chain_plan(args.chain, args.tool_ms), registry),
            raw_chain,
            args.chain,
            args.chain,
        ),
        "fan": (
            dagagent.validate(fan_plan(args.fan, args.tool_ms), registry),
            raw_fan,
            args.fan,
            args.fan,
        ),
    }
    times: dict[str, dict[str, list[float]]] = {s: {"futures": [], "dagagent": []} for s in shapes}
    async with exe.session():
        client = await floor_client(exe)
        try:
            for graph, raw, n, expected in shapes.values():  # warm up: ship, import
                assert await raw(client, n, args.tool_ms) == expected
                result = await dagagent.execute(graph, registry, settings=RunSettings(executor=exe))
                result.raise_for_status()
            for _ in range(args.repeats):
                for shape, (graph, raw, n, expected) in shapes.items():
                    t0 = time.perf_counter()
                    got = await raw(client, n, args.tool_ms)
                    times[shape]["futures"].append(time.perf_counter() - t0)
                    assert got == expected, (shape, got)
                    t0 = time.perf_counter()
                    result = await dagagent.execute(
                        graph, registry, settings=RunSettings(executor=exe)
                    )
                    times[shape]["dagagent"].append(time.perf_counter() - t0)
                    result.raise_for_status()
        finally:
            await client.close()
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="dagagent's dask executor next to raw Dask futures with the same "
        "dependency structure (a chain and a fan-out/fan-in), on one local cluster, in one "
        "run. Writes dask_futures.json and dask_futures.md.",
    )
    common.add_shape_options(parser, repeats=7)
    parser.add_argument("--tool-ms", type=float, default=0.0, help="each call sleeps this long")
    parser.add_argument("--workers", type=int, default=2, help="local worker processes")
    parser.add_argument("--threads", type=int, default=4, help="threads per worker")
    parser.add_argument(
        "--in-process", action="store_true", help="workers as threads of this process"
    )
    common.add_output_options(parser)
    args = parser.parse_args(argv)
    if args.chain < 2 or args.fan < 1 or args.repeats < 1:
        parser.error("--chain must be at least 2, --fan and --repeats at least 1")
    if common.usable_executors(parser, ["dask"]) != ["dask"]:
        raise SystemExit("this benchmark needs Dask: pip install 'dagagent[dask]'")

    info = common.machine_info()
    print(f"machine: {common.machine_line(info)}")
    times = asyncio.run(measure(args))

    headers = ["shape", "tasks", "futures ms", "dagagent ms", "x futures", "x futures (median)"]
    rows = []
    summary: dict[str, Any] = {}
    for shape, t in times.items():
        n = args.chain if shape == "chain" else args.fan + 2
        best, med = common.best_and_median(t)
        x, xm = best["dagagent"] / best["futures"], med["dagagent"] / med["futures"]
        summary[shape] = {"tasks": n, "best_s": best, "median_s": med, "x": x, "x_median": xm}
        rows.append(
            [
                shape,
                n,
                common.fmt(best["futures"] * 1e3, 1),
                common.fmt(best["dagagent"] * 1e3, 1),
                common.fmt(x),
                common.fmt(xm),
            ]
        )
    targets = [
        (f"dask executor, {shape}: <= 1.15 x raw futures", s["x"] <= 1.15, f"{s['x']:.2f} x")
        for shape, s in summary.items()
    ]
    print()
    print(common.text_table(headers, rows))
    print()
    common.print_targets(targets)

    command = common.command_line()
    workers = "threads of one process" if args.in_process else "processes"
    md = [
        *common.markdown_head("The dask executor next to raw Dask futures", command, info),
        f"One local cluster of {args.workers} worker {workers}, {args.threads} threads each, "
        f"started once; each call sleeps {args.tool_ms:g} ms. Wall time, best of "
        f"{args.repeats} interleaved runs (medians in dask_futures.json). The floor submits "
        "every task at once with futures passed to their dependents, then gathers every "
        "result to the driver (as dagagent has them), on a plain client of its own.",
        "",
        common.markdown_table(headers, rows),
        *common.markdown_targets(targets),
    ]
    data = {
        "benchmark": "dask_futures",
        "command": command,
        "machine": info,
        "options": {k: v for k, v in vars(args).items() if k not in ("out",)},
        "times_s": times,
        "summary": summary,
        "targets": common.targets_json(targets),
    }
    common.save(args, "dask_futures", data, "\n".join(md))


if __name__ == "__main__":
    sys.exit(main())
