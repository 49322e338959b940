"""Engine overhead: no-op tools at 1,000 / 10,000 / 100,000 tasks.

For each DAG size (each in a fresh subprocess, so that peak RSS is per size) this measures:

- microseconds per task of ``dagagent.execute`` with each executor, on an already validated
  plan, with a tool that does nothing;
- the same for a *floor* measured in the same process on the same DAG: plain asyncio with
  ``graphlib.TopologicalSorter`` (``get_ready``/``done`` loop), each ready node run as an
  ``asyncio.create_task`` of a no-op coroutine. It has no arguments, results, events or
  failure handling; it is the least any asyncio scheduler must do;
- the time ``dagagent.validate`` takes to check the plan (pydantic model, graph, cycles, tools);
- peak RSS of the process (``resource.getrusage(RUSAGE_SELF).ru_maxrss``).

Each measurement is repeated (``--repeats``) with runs of the different executors (and the
validation) interleaved; the headline is the minimum (noise on a shared machine only ever adds
time). With three runs or more, a second table gives each cell's median against the floor's
median: on a machine whose speed moves from run to run, a ratio of two minima rests on the two
luckiest runs and moves with them, a ratio of medians much less. Ratios to the floor matter more
than absolute times.

DAG shapes: ``layered`` (seeded random layers of ``--width`` tasks, each task depending on two
distinct tasks of the layer before), ``fan`` (one root, n-2 parallel tasks, one join),
``chain`` (each task depending on the one before: n levels of one task) and ``wide`` (n tasks
and no dependencies: one level of n).

    python benchmarks/overhead.py
    python benchmarks/overhead.py --sizes 1000,10000 --shapes layered --repeats 5
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import graphlib
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import _common as common

from dagagent.settings import RunSettings

SHAPES = ("layered", "fan", "chain", "wide")
DEFAULT_EXECUTORS = ("serial", "levels", "dataflow")
FLOOR = "floor"
#: The floor's loop spawning each node in an anyio task group instead of asyncio.create_task:
#: what anyio's start_soon costs before dagagent does anything.
ANYIO_FLOOR = "anyio floor"


# ---------------------------------------------------------------------------------------------
# DAGs


def build_deps(shape: str, n: int, width: int, seed: int) -> dict[str, list[str]]:
    """``{task_id: [dependency ids]}`` in plan order."""
    if shape == "fan":
        if n < 3:
            raise SystemExit("the fan shape needs at least 3 tasks")
        deps: dict[str, list[str]] = {"root": []}
        middle = [f"t{i}" for i in range(n - 2)]
        for t in middle:
            deps[t] = ["root"]
        deps["join"] = middle
        return deps
    if shape == "chain":
        return {f"t{i}": [f"t{i - 1}"] if i else [] for i in range(n)}
    if shape == "wide":
        return {f"t{i}": [] for i in range(n)}
    if shape == "layered":
        rng = random.Random(seed)
        deps = {}
        prev: list[str] = []
        i = 0
        while i < n:
            layer = [f"t{j}" for j in range(i, min(n, i + width))]
            for t in layer:
                deps[t] = rng.sample(prev, min(2, len(prev))) if prev else []
            prev = layer
            i += len(layer)
        return deps
    raise SystemExit(f"unknown shape {shape!r}: choose from {', '.join(SHAPES)}")


def to_plan(deps: dict[str, list[str]], tool: str = "noop") -> dict[str, Any]:
    return {
        "goal": f"overhead benchmark: {tool} tasks",
        "tasks": [{"id": t, "tool": tool, "depends_on": d} for t, d in deps.items()],
    }


# ---------------------------------------------------------------------------------------------
# The floor: plain asyncio + graphlib


async def _noop() -> None:
    return None


async def _yield() -> None:
    await asyncio.sleep(0)


def _nothing() -> None:
    return None


async def _in_thread() -> None:
    await asyncio.to_thread(_nothing)


async def floor_run(deps: dict[str, list[str]], tool: str = "noop") -> None:
    """Run every node of ``deps`` as an asyncio task of a no-op coroutine (or one that yields
    to the event loop once, for ``tool="yield"``), in dependency order."""
    body = {"yield": _yield, "sync": _in_thread}.get(tool, _noop)
    ts: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter(deps)
    ts.prepare()
    finished: asyncio.Queue[str] = asyncio.Queue()
    running: dict[str, asyncio.Task[None]] = {}

    async def one(node: str) -> None:
        await body()
        finished.put_nowait(node)

    create = asyncio.create_task
    while ts.is_active():
        for node in ts.get_ready():
            running[node] = create(one(node))
        node = await finished.get()
        del running[node]
        ts.done(node)
        while not finished.empty():
            node = finished.get_nowait()
            del running[node]
            ts.done(node)


async def anyio_floor_run(deps: dict[str, list[str]], tool: str = "noop") -> None:
    """:func:`floor_run`, each node spawned with an anyio task group's ``start_soon``."""
    import anyio

    body = {"yield": _yield, "sync": _in_thread}.get(tool, _noop)
    ts: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter(deps)
    ts.prepare()
    send, receive = anyio.create_memory_object_stream[str](len(deps))

    async def one(node: str) -> None:
        await body()
        send.send_nowait(node)

    async with anyio.create_task_group() as tg:
        while ts.is_active():
            for node in ts.get_ready():
                tg.start_soon(one, node)
            ts.done(await receive.receive())
            while True:
                try:
                    ts.done(receive.receive_nowait())
                except anyio.WouldBlock:
                    break


# ---------------------------------------------------------------------------------------------
# One size, in a child process


def _registry() -> Any:
    import dagagent

    registry = dagagent.Registry()

    @registry.tool
    async def noop() -> None:
        """Do nothing."""
        return None

    @registry.tool(name="yield")
    async def yield_() -> None:
        """Yield to the event loop once: a task that blocks, for the shortest possible time."""
        await asyncio.sleep(0)

    @registry.tool(name="sync")
    def sync() -> None:
        """A plain function: runs in a worker thread."""
        return None

    @registry.tool(name="inline", blocking=False)
    def inline() -> None:
        """A plain function declared never to block: called on the event loop."""
        return None

    return registry


def measure(
    shape: str, n: int, width: int, seed: int, executors: list[str], repeats: int, tool: str
) -> dict[str, Any]:
    import dagagent

    deps = build_deps(shape, n, width, seed)
    plan = to_plan(deps, tool)
    registry = _registry()
    edges = sum(len(d) for d in deps.values())

    validate_s: list[float] = []
    validate_cpu_s: list[float] = []

    def validate() -> Any:
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        checked = dagagent.validate(plan, registry)
        validate_s.append(time.perf_counter() - t0)
        validate_cpu_s.append(time.process_time() - c0)
        return checked

    graph = validate()  # the plan the runs take; validated again in each round below
    rss_after_validate = _peak_rss_mb()

    store_dir = Path(tempfile.mkdtemp(prefix="dagagent-overhead-"))
    store_runs = 0

    async def run_dagagent(name: str) -> None:
        # "NAME+store": the same executor, recording the run to a fresh SQLite run store;
        # "NAME+plan": execute(plan) as users call it, from the plan's dict: validation included.
        nonlocal store_runs
        executor, _, mode = name.partition("+")
        store = None
        if mode == "store":
            store_runs += 1
            store = store_dir / f"runs-{store_runs}.db"
        what = plan if mode == "plan" else graph
        result = await dagagent.execute(
            what, registry, store=store, settings=RunSettings(executor=executor)
        )
        if not result.ok:
            raise SystemExit(f"{name}: the {tool} run did not succeed: {result.counts}")

    runners: dict[str, Callable[[], Awaitable[None]]] = {
        FLOOR: lambda: floor_run(deps, tool),
        ANYIO_FLOOR: lambda: anyio_floor_run(deps, tool),
    }
    for name in executors:
        runners[name] = lambda name=name: run_dagagent(name)  # type: ignore[misc]
    times: dict[str, list[float]] = {k: [] for k in runners}
    cpu: dict[str, list[float]] = {k: [] for k in runners}

    async def main() -> None:
        for i in range(repeats):
            if i:  # validation interleaved with the runs, as they are with one another
                validate()
            for name, fn in runners.items():
                gc.collect()
                c0, t0 = time.process_time(), time.perf_counter()
                await fn()
                times[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)

    asyncio.run(main())
    shutil.rmtree(store_dir, ignore_errors=True)

    return {
        "shape": shape,
        "tool": tool,
        "tasks": n,
        "edges": edges,
        "levels": len(graph.levels),
        "repeats": repeats,
        "validate_s": validate_s,
        "validate_cpu_s": validate_cpu_s,
        "run_s": times,
        "run_cpu_s": cpu,
        "peak_rss_mb": _peak_rss_mb(),
        "peak_rss_mb_after_validate": rss_after_validate,
    }


def measure_scale(n: int, width: int, seed: int, executor: str) -> dict[str, Any]:
    """``--scale``: build the plan of ``n`` no-op tasks, then validate and run it once through
    ``execute`` in this process; the times and the process's peak RSS."""
    import dagagent

    deps = build_deps("layered", n, width, seed)
    plan = to_plan(deps)
    del deps
    registry = _registry()
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    graph = dagagent.validate(plan, registry)
    validate_s, validate_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    rss_after_validate = _peak_rss_mb()

    async def run() -> None:
        result = await dagagent.execute(graph, registry, settings=RunSettings(executor=executor))
        if not result.ok:
            raise SystemExit(f"the run of {n} tasks did not succeed: {result.counts}")

    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    asyncio.run(run())
    run_s, run_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    return {
        "tasks": n,
        "executor": executor,
        "validate_s": validate_s,
        "validate_cpu_s": validate_cpu_s,
        "run_s": run_s,
        "run_cpu_s": run_cpu_s,
        "us_per_task": (validate_s + run_s) / n * 1e6,
        "peak_rss_mb": _peak_rss_mb(),
        "peak_rss_mb_after_validate": rss_after_validate,
    }


def _peak_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports kilobytes, macOS bytes.
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


# ---------------------------------------------------------------------------------------------
# The parent: one subprocess per (shape, size), then the table


def _child(args: argparse.Namespace) -> None:
    if args.child_scale:
        executor = args.executors[0] if args.executors else "dataflow"
        print(json.dumps(measure_scale(args.child_size, args.width, args.seed, executor)))
        return
    data = measure(
        args.child_shape,
        args.child_size,
        args.width,
        args.seed,
        args.executors,
        args.repeats,
        args.tool,
    )
    print(json.dumps(data))


def _run_child(shape: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child-shape",
        shape,
        "--child-size",
        str(n),
        "--width",
        str(args.width),
        "--seed",
        str(args.seed),
        "--repeats",
        str(args.repeats),
        "--executors",
        ",".join(args.executors),
        "--tool",
        args.tool,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"the measurement of {shape} x {n} failed (exit {proc.returncode})")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


SCALE_RSS_MB = 3 * 1024  # the target: peak RSS at --scale tasks
SCALE_RATIO = 2.0  # the target: cost per task at --scale within this of --scale-base's


def _scale(args: argparse.Namespace) -> None:
    """``--scale N``: validate and run N no-op tasks in one process (each size in a fresh
    one), next to ``--scale-base`` tasks the same way: cost per task and peak RSS."""
    executor = args.executors[0]
    info = common.machine_info()
    print(f"machine: {common.machine_line(info)}")
    rows_data = []
    for n in (args.scale_base, args.scale):
        print(f"measuring validate + run of {n:,} tasks ({executor}) ...", flush=True)
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child-scale",
            "--child-size",
            str(n),
            "--width",
            str(args.width),
            "--seed",
            str(args.seed),
            "--executors",
            executor,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            raise SystemExit(f"the measurement of {n} tasks failed (exit {proc.returncode})")
        rows_data.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    base, big = rows_data
    headers = [
        "tasks",
        "validate s",
        "run s",
        "us/task (validate + run)",
        "x base per task",
        "peak RSS MB",
    ]
    rows = [
        [
            f"{r['tasks']:,}",
            common.fmt(r["validate_s"], 2),
            common.fmt(r["run_s"], 2),
            common.fmt(r["us_per_task"], 1),
            common.fmt(r["us_per_task"] / base["us_per_task"]),
            common.fmt(r["peak_rss_mb"], 0),
        ]
        for r in rows_data
    ]
    ratio = big["us_per_task"] / base["us_per_task"]
    targets = [
        (
            f"peak RSS at {big['tasks']:,} tasks <= {SCALE_RSS_MB} MB",
            big["peak_rss_mb"] <= SCALE_RSS_MB,
            f"{big['peak_rss_mb']:.0f} MB",
        ),
        (
            f"cost per task at {big['tasks']:,} tasks <= {SCALE_RATIO:g} x the one at "
            f"{base['tasks']:,}",
            ratio <= SCALE_RATIO,
            f"{ratio:.2f} x ({big['us_per_task']:.1f} against {base['us_per_task']:.1f} us)",
        ),
    ]
    print()
    print(common.text_table(headers, rows))
    print()
    common.print_targets(targets)
    command = common.command_line()
    md = [
        *common.markdown_head(
            f"Scale: {big['tasks']:,} no-op tasks validated and run in one process", command, info
        ),
        f"Each size in a fresh process: the plan built as a dict, `validate`, then `execute` "
        f"({executor}), once; peak RSS of that process.",
        "",
        common.markdown_table(headers, rows),
        *common.markdown_targets(targets),
    ]
    data_out = {
        "benchmark": "overhead_scale",
        "command": command,
        "machine": info,
        "options": {"scale": args.scale, "base": args.scale_base, "executor": executor},
        "results": rows_data,
        "targets": common.targets_json(targets),
    }
    common.save(args, "overhead_scale", data_out, "\n".join(md))


def summarize(data: dict[str, Any], executors: list[str]) -> dict[str, Any]:
    n = data["tasks"]
    best, med = common.best_and_median(data["run_s"])
    floor = best[FLOOR]
    return {
        "us_per_task": {k: v / n * 1e6 for k, v in best.items()},
        "us_per_task_median": {k: v / n * 1e6 for k, v in med.items()},
        "x_floor": {k: best[k] / floor for k in executors},
        "x_floor_median": {k: med[k] / med[FLOOR] for k in executors},
        "x_floor_cpu": {
            k: min(data["run_cpu_s"][k]) / min(data["run_cpu_s"][FLOOR]) for k in executors
        },
        "anyio_x_floor": best[ANYIO_FLOOR] / floor,
        "anyio_x_floor_median": med[ANYIO_FLOOR] / med[FLOOR],
        "run_s": best,
        "run_cpu_s": {k: min(v) for k, v in data["run_cpu_s"].items()},
        "validate_s": min(data["validate_s"]),
        "validate_x_floor": min(data["validate_s"]) / floor,
        "validate_cpu_s": min(data["validate_cpu_s"]),
        "validate_s_median": common.median(data["validate_s"]),
        "validate_x_floor_median": common.median(data["validate_s"]) / med[FLOOR],
    }


def _targets(results: list[dict[str, Any]]) -> list[tuple[str, bool | None, str]]:
    out: list[tuple[str, bool | None, str]] = []
    layered = [r for r in results if r["shape"] == "layered"]
    at10k = [r for r in layered if r["tasks"] == 10_000]
    for name in ("dataflow", "levels"):
        for r in at10k:
            x = r["summary"]["x_floor"].get(name)
            if x is not None:
                xc = r["summary"]["x_floor_cpu"][name]
                out.append(
                    (
                        f"{name} overhead at 10,000 tasks <= 2 x floor",
                        x <= 2.0,
                        f"{x:.2f} x (CPU time: {xc:.2f} x)",
                    )
                )
            x = r["summary"]["x_floor"].get(f"{name}+plan")
            if x is not None:
                xc = r["summary"]["x_floor_cpu"][f"{name}+plan"]
                out.append(
                    (
                        f"execute(plan) with {name}, validation included, at 10,000 tasks "
                        "<= 1.5 x floor",
                        x <= 1.5,
                        f"{x:.2f} x (CPU time: {xc:.2f} x)",
                    )
                )
    for r in at10k:
        x = r["summary"]["validate_x_floor"]
        out.append(
            (
                "validation per task at 10,000 tasks <= 0.5 x the floor's run per task",
                x <= 0.5,
                f"{x:.2f} x",
            )
        )
    for r in at10k:
        for name, x in r["summary"]["x_floor"].items():
            if name.endswith("+store"):
                xc = r["summary"]["x_floor_cpu"][name]
                out.append(
                    (
                        f"{name} (SQLite run store on) at 10,000 tasks <= 2 x floor",
                        x <= 2.0,
                        f"{x:.2f} x (CPU time: {xc:.2f} x)",
                    )
                )
    for r in [r for r in layered if r["tasks"] == 100_000]:
        v = r["summary"]["validate_s"]
        vc = r["summary"]["validate_cpu_s"]
        out.append(
            ("validation of 100,000 tasks <= 1 s", v <= 1.0, f"{v:.2f} s (CPU time: {vc:.2f} s)")
        )
        for name, t in r["summary"]["run_s"].items():
            if name not in (FLOOR, ANYIO_FLOOR):
                tc = r["summary"]["run_cpu_s"][name]
                out.append(
                    (
                        f"no-op run of 100,000 tasks ({name}) <= 5 s",
                        t <= 5.0,
                        f"{t:.2f} s (CPU time: {tc:.2f} s)",
                    )
                )
        rss = r["peak_rss_mb"]
        out.append(("peak RSS at 100,000 tasks <= 600 MB", rss <= 600, f"{rss:.0f} MB"))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Per-task overhead of each executor next to a plain asyncio + graphlib "
        "floor, validation time and peak RSS, for no-op DAGs of growing size (each size in "
        "a fresh subprocess). Writes overhead.json and overhead.md.",
    )
    parser.add_argument(
        "--sizes",
        default="1000,10000,100000",
        help="comma-separated task counts (default: %(default)s)",
    )
    parser.add_argument(
        "--shapes",
        default="layered,fan",
        help=f"comma-separated DAG shapes from {', '.join(SHAPES)} (default: %(default)s)",
    )
    parser.add_argument(
        "--executors",
        default=",".join(DEFAULT_EXECUTORS),
        help="comma-separated executors to measure (default: %(default)s)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement (min is kept)")
    parser.add_argument("--width", type=int, default=100, help="tasks per layer of 'layered'")
    parser.add_argument(
        "--tool",
        choices=("noop", "yield", "sync", "inline"),
        default="noop",
        help="what each task does: 'noop' returns at once (default); 'yield' awaits "
        "asyncio.sleep(0) once, so every task blocks and needs a task of its own; 'sync' is a "
        "plain def (a worker thread per call; floor: asyncio.to_thread); 'inline' a plain def "
        "declared blocking=False (floor: the async no-op). Results go to overhead.json (noop) "
        "or overhead_TOOL.json",
    )
    parser.add_argument(
        "--store",
        action="store_true",
        help="also measure each in-process executor recording to a SQLite run store, a new "
        "file for each run (shown as NAME+store). Results go to overhead_store.json",
    )
    parser.add_argument(
        "--from-plan",
        action="store_true",
        help="also measure each in-process executor through execute(plan) from the plan's "
        "dict, validation included (shown as NAME+plan)",
    )
    parser.add_argument(
        "--scale",
        type=int,
        metavar="N",
        help="instead of the table: validate and run N no-op tasks (layered) in one process, "
        "next to --scale-base tasks, with the first of --executors; cost per task and peak "
        "RSS (e.g. --scale 1000000; dataflow unless --executors is given). Results go to "
        "overhead_scale.json",
    )
    parser.add_argument(
        "--scale-base", type=int, default=10_000, help="the size --scale is compared with"
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of the random layered DAG")
    parser.add_argument("--child-scale", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-shape", help=argparse.SUPPRESS)
    parser.add_argument("--child-size", type=int, help=argparse.SUPPRESS)
    common.add_output_options(parser)
    args = parser.parse_args(argv)

    args.executors = [e.strip() for e in args.executors.split(",") if e.strip()]
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.width < 1:
        parser.error("--width must be at least 1")
    if args.child_shape or args.child_scale:
        _child(args)
        return
    if args.scale is not None:
        if args.scale < 1 or args.scale_base < 1:
            parser.error("--scale and --scale-base must be at least 1")
        if args.executors == list(DEFAULT_EXECUTORS):  # not given: the default executor
            args.executors = ["dataflow"]
        args.executors = common.usable_executors(parser, args.executors)
        if args.executors[0] == "dask":
            parser.error("--scale measures an in-process executor: put it first in --executors")
        _scale(args)
        return
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes must be comma-separated integers, not {args.sizes!r}")
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    for s in shapes:
        if s not in SHAPES:
            parser.error(f"unknown shape {s!r}: choose from {', '.join(SHAPES)}")
    args.executors = common.usable_executors(parser, args.executors)
    in_process = [e for e in args.executors if e != "dask"]
    if args.from_plan:
        args.executors += [f"{e}+plan" for e in in_process]
    if args.store:
        args.executors += [f"{e}+store" for e in in_process]

    info = common.machine_info()
    print(f"machine: {common.machine_line(info)}")
    results: list[dict[str, Any]] = []
    for shape in shapes:
        for n in sizes:
            print(f"measuring {shape} x {n} ...", flush=True)
            data = _run_child(shape, n, args)
            data["summary"] = summarize(data, args.executors)
            results.append(data)

    headers = ["shape", "tasks", "floor us/task", "anyio floor x floor"]
    for e in args.executors:
        headers += [f"{e} us/task", f"{e} x floor"]
    headers += ["validate s", "validate x floor", "peak RSS MB"]
    rows = []
    for r in results:
        s = r["summary"]
        row: list[Any] = [r["shape"], f"{r['tasks']:,}", common.fmt(s["us_per_task"][FLOOR], 1)]
        row += [common.fmt(s["anyio_x_floor"])]
        for e in args.executors:
            row += [common.fmt(s["us_per_task"][e], 1), common.fmt(s["x_floor"][e])]
        row += [common.fmt(s["validate_s"], 3), common.fmt(s["validate_x_floor"])]
        row += [common.fmt(r["peak_rss_mb"], 0)]
        rows.append(row)
    # The same cells as medians, when there are enough runs for a median to differ from a mean.
    median_headers = ["shape", "tasks", "floor us/task", "anyio floor x floor"]
    median_headers += [f"{e} x floor" for e in args.executors] + ["validate x floor"]
    median_rows: list[list[Any]] = []
    if args.repeats >= 3:
        for r in results:
            s = r["summary"]
            median_rows.append(
                [r["shape"], f"{r['tasks']:,}", common.fmt(s["us_per_task_median"][FLOOR], 1)]
                + [common.fmt(s["anyio_x_floor_median"])]
                + [common.fmt(s["x_floor_median"][e]) for e in args.executors]
                + [common.fmt(s["validate_x_floor_median"])]
            )
    median_title = (
        f"Median of the {args.repeats} runs per cell, against the floor's median (steadier "
        "than the best of them when the machine's speed moves between runs):"
    )
    targets = _targets(results) if args.tool == "noop" else []
    name = "overhead" if args.tool == "noop" else f"overhead_{args.tool}"
    if args.store:  # its own results: the store's figures beside the runs they were taken with
        name += "_store"
    subject = {
        "noop": "no-op tasks",
        "yield": "tasks that yield to the event loop once (each needs a task of its own)",
        "sync": "plain def tools (each call in a worker thread; the floor: asyncio.to_thread)",
        "inline": "plain def tools declared blocking=False (called on the event loop; the "
        "floor: an async no-op)",
    }[args.tool]

    print()
    print(common.text_table(headers, rows))
    if median_rows:
        print()
        print(median_title)
        print(common.text_table(median_headers, median_rows))
    if targets:
        print()
        common.print_targets(targets)

    command = common.command_line()
    md = [
        *common.markdown_head(
            f"Overhead: {subject}, dagagent next to a plain asyncio + graphlib floor", command, info
        ),
        f"Wall time per task, best of {args.repeats} runs per cell (CPU times are in "
        f"{name}.json); each size measured in a fresh process.",
        "",
        common.markdown_table(headers, rows),
    ]
    if median_rows:
        md += ["", median_title, "", common.markdown_table(median_headers, median_rows)]
    if targets:
        md += ["", "Targets:", ""]
        md += [f"- {'met' if ok else '**missed**'}: {what} — {got}" for what, ok, got in targets]
    data_out = {
        "benchmark": name,
        "command": command,
        "machine": info,
        "options": {
            "sizes": sizes,
            "shapes": shapes,
            "executors": args.executors,
            "repeats": args.repeats,
            "width": args.width,
            "seed": args.seed,
            "tool": args.tool,
        },
        "results": results,
        "targets": common.targets_json(targets),
    }
    common.save(args, name, data_out, "\n".join(md))


if __name__ == "__main__":
    main()
