"""The same DAGs and tool kinds on dagagent and its peers, in one run: µs per task and the
ratio to a plain asyncio floor measured in the same process.

Systems (each one skipped, with the reason, when it cannot run here):

- ``floor``: plain asyncio with ``graphlib.TopologicalSorter``, one ``asyncio.create_task``
  per ready node (``asyncio.to_thread`` per call for the sync tool);
- ``dagagent``: ``dagagent.execute(plan)`` from the plan's dict, as users call it (validation
  included), with the ``dataflow`` executor (and ``levels``);
- ``dask``: Dask's threaded scheduler (``dask.threaded.get``) on a task graph with the same
  dependencies; Dask calls functions, so every tool kind runs as a plain function there
  (``yield`` as ``time.sleep(0)``);
- ``langgraph``: a LangGraph ``StateGraph`` with one node per task and an edge from each
  task's dependencies (a join waits for all of them), run with ``ainvoke``; the time to build
  and compile the graph is counted, as validation is for dagagent;
- ``prefect``: a Prefect flow submitting one task run per task (``wait_for`` its
  dependencies) to its default thread pool task runner; it needs its local API server, which
  Prefect starts by itself (the first, warming run is not counted).

Tool kinds: ``noop`` (an async function that returns at once), ``yield`` (awaits
``asyncio.sleep(0)`` once), ``sync`` (a plain ``def`` that returns at once).

LangGraph and Prefect are optional (``pip install "dagagent[bench]"``). Each system runs
``--repeats`` times per DAG and tool kind, interleaved; the best run counts.

    python benchmarks/peers.py
    python benchmarks/peers.py --tasks 200 --kinds noop,sync --systems floor,dagagent,dask
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import graphlib
import importlib.util
import logging
import operator
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypedDict

import _common as common
from overhead import build_deps, to_plan

from dagagent.settings import RunSettings

KINDS = ("noop", "yield", "sync")
SYSTEMS = ("floor", "dagagent", "dagagent-levels", "dask", "langgraph", "prefect")
FLOOR = "floor"


# ---------------------------------------------------------------------------------------------
# The floor


async def _noop() -> None:
    return None


async def _yield() -> None:
    await asyncio.sleep(0)


def _sync() -> None:
    return None


async def floor_run(deps: dict[str, list[str]], kind: str) -> None:
    ts: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter(deps)
    ts.prepare()
    finished: asyncio.Queue[str] = asyncio.Queue()

    async def one(node: str) -> None:
        if kind == "sync":
            await asyncio.to_thread(_sync)
        elif kind == "yield":
            await _yield()
        finished.put_nowait(node)

    tasks = set()
    while ts.is_active():
        for node in ts.get_ready():
            t = asyncio.create_task(one(node))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        ts.done(await finished.get())
        while not finished.empty():
            ts.done(finished.get_nowait())


# ---------------------------------------------------------------------------------------------
# dagagent


def _registry(kind: str) -> Any:
    import dagagent

    registry = dagagent.Registry()
    if kind == "noop":

        @registry.tool(name="work")
        async def noop() -> None:
            """Return at once."""

    elif kind == "yield":

        @registry.tool(name="work")
        async def yields() -> None:
            """Yield to the event loop once."""
            await asyncio.sleep(0)

    else:

        @registry.tool(name="work")
        def sync() -> None:
            """A plain function that returns at once."""

    return registry


def dagagent_runner(executor: str) -> Callable[[dict[str, list[str]], str], Awaitable[None]]:
    async def run(deps: dict[str, list[str]], kind: str) -> None:
        import dagagent

        plan = to_plan(deps, "work")
        result = await dagagent.execute(
            plan, _registry(kind), settings=RunSettings(executor=executor)
        )
        if not result.ok:
            raise RuntimeError(f"dagagent: the run failed: {result.counts}")

    return run


# ---------------------------------------------------------------------------------------------
# Dask (threaded scheduler)


def _dask_fn(kind: str) -> Callable[..., None]:
    def fn(*_deps: Any) -> None:
        if kind == "yield":
            time.sleep(0)

    return fn


async def dask_run(deps: dict[str, list[str]], kind: str) -> None:
    import dask.threaded

    fn = _dask_fn(kind)
    dsk = {t: (fn, *d) for t, d in deps.items()}
    has_dependents = {d for ds in deps.values() for d in ds}
    dask.threaded.get(dsk, [t for t in deps if t not in has_dependents])


# ---------------------------------------------------------------------------------------------
# LangGraph


class _State(TypedDict):
    done: Annotated[list[str], operator.add]


def _langgraph_node(kind: str) -> Callable[..., Any]:
    if kind == "sync":

        def sync(state: _State) -> dict[str, Any]:
            return {}

        return sync
    if kind == "yield":

        async def yields(state: _State) -> dict[str, Any]:
            await asyncio.sleep(0)
            return {}

        return yields

    async def noop(state: _State) -> dict[str, Any]:
        return {}

    return noop


async def langgraph_run(deps: dict[str, list[str]], kind: str) -> None:
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(_State)
    node = _langgraph_node(kind)
    has_dependents = {d for ds in deps.values() for d in ds}
    for t in deps:
        builder.add_node(t, node)
    for t, ds in deps.items():
        if not ds:
            builder.add_edge(START, t)
        elif len(ds) == 1:
            builder.add_edge(ds[0], t)
        else:
            builder.add_edge(list(ds), t)  # a join: waits for every dependency
        if t not in has_dependents:
            builder.add_edge(t, END)
    app = builder.compile()
    levels = len(_levels(deps))
    await app.ainvoke({"done": []}, {"recursion_limit": levels + 10})


def _levels(deps: dict[str, list[str]]) -> list[list[str]]:
    ts: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter(deps)
    ts.prepare()
    out = []
    while ts.is_active():
        ready = list(ts.get_ready())
        out.append(ready)
        ts.done(*ready)
    return out


# ---------------------------------------------------------------------------------------------
# Prefect


_PREFECT_FLOW: Any = None


def _prefect_flow() -> Any:
    global _PREFECT_FLOW
    if _PREFECT_FLOW is not None:
        return _PREFECT_FLOW
    from prefect import flow, task

    @task(name="noop", persist_result=False)
    async def noop() -> None:
        return None

    @task(name="yield", persist_result=False)
    async def yields() -> None:
        await asyncio.sleep(0)

    @task(name="sync", persist_result=False)
    def sync() -> None:
        return None

    tasks = {"noop": noop, "yield": yields, "sync": sync}

    @flow(name="peers", persist_result=False, log_prints=False)
    def run_dag(deps: dict[str, list[str]], kind: str) -> None:
        body = tasks[kind]
        futures: dict[str, Any] = {}
        for t, ds in deps.items():
            futures[t] = body.submit(wait_for=[futures[d] for d in ds])
        for f in futures.values():
            f.result()

    _PREFECT_FLOW = run_dag
    return run_dag


async def prefect_run(deps: dict[str, list[str]], kind: str) -> None:
    flow = _prefect_flow()
    await asyncio.to_thread(flow, deps, kind)


# ---------------------------------------------------------------------------------------------


def _missing(system: str) -> str | None:
    module = {"dask": "dask", "langgraph": "langgraph", "prefect": "prefect"}.get(system)
    if module is None or importlib.util.find_spec(module) is not None:
        return None
    extra = "dask" if system == "dask" else "bench"
    return f"'{module}' is not installed (pip install \"dagagent[{extra}]\")"


RUNNERS: dict[str, Callable[[dict[str, list[str]], str], Awaitable[None]]] = {
    "floor": floor_run,
    "dagagent": dagagent_runner("dataflow"),
    "dagagent-levels": dagagent_runner("levels"),
    "dask": dask_run,
    "langgraph": langgraph_run,
    "prefect": prefect_run,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="The same DAGs and tool kinds on dagagent, a plain asyncio floor, Dask's "
        "threaded scheduler, LangGraph and Prefect: µs per task and ratio to the floor, in "
        "one run.",
    )
    parser.add_argument("--tasks", type=int, default=1000, help="tasks per DAG")
    parser.add_argument(
        "--prefect-tasks",
        type=int,
        default=200,
        help="tasks per DAG for Prefect, whose task runs cost milliseconds (the floor is "
        "measured again at that size)",
    )
    parser.add_argument("--width", type=int, default=50, help="tasks per layer of 'layered'")
    parser.add_argument("--shapes", default="layered,fan", help="DAG shapes: layered, fan")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"tool kinds: {', '.join(KINDS)}")
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help=f"systems: {', '.join(SYSTEMS)}"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell (best kept)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the layered DAG")
    common.add_output_options(parser)
    args = parser.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    systems = [s for s in args.systems.split(",") if s]
    shapes = [s for s in args.shapes.split(",") if s]
    for k in kinds:
        if k not in KINDS:
            parser.error(f"unknown tool kind {k!r}: choose from {', '.join(KINDS)}")
    for s in systems:
        if s not in SYSTEMS:
            parser.error(f"unknown system {s!r}: choose from {', '.join(SYSTEMS)}")
    if FLOOR not in systems:
        systems.insert(0, FLOOR)
    if args.repeats < 1 or args.tasks < 3 or args.prefect_tasks < 3:
        parser.error("--repeats must be at least 1 and --tasks at least 3")

    skipped: dict[str, str] = {}
    for s in systems:
        why = _missing(s)
        if why:
            skipped[s] = why
            print(f"note: skipping {s}: {why}", file=sys.stderr)
    systems = [s for s in systems if s not in skipped]
    if "prefect" in systems:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "ERROR")
        os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "ERROR")
        logging.getLogger("prefect").setLevel(logging.ERROR)

    info = common.machine_info()
    print(f"machine: {common.machine_line(info)}")
    results: list[dict[str, Any]] = []

    async def measure(deps: dict[str, list[str]], kind: str, names: list[str]) -> dict[str, float]:
        best = {n: float("inf") for n in names}
        for n in names:  # warm up: imports, Prefect's server, thread pools
            try:
                await RUNNERS[n](deps, kind)
            except Exception as exc:  # a peer that cannot run this: say so, keep the rest
                skipped[f"{n} ({kind})"] = f"{type(exc).__name__}: {exc}"
                best.pop(n)
        for _ in range(args.repeats):
            for n in list(best):
                gc.collect()
                t0 = time.perf_counter()
                await RUNNERS[n](deps, kind)
                best[n] = min(best[n], time.perf_counter() - t0)
        return best

    async def run_all() -> None:
        for shape in shapes:
            for kind in kinds:
                sizes = {args.tasks: [s for s in systems if s != "prefect"]}
                if "prefect" in systems:
                    sizes.setdefault(args.prefect_tasks, []).extend(
                        [FLOOR, "prefect"] if args.prefect_tasks != args.tasks else ["prefect"]
                    )
                for n, names in sizes.items():
                    print(f"measuring {shape} x {n} with {kind} tools ...", flush=True)
                    deps = build_deps(shape, n, args.width, args.seed)
                    best = await measure(deps, kind, names)
                    results.append({"shape": shape, "kind": kind, "tasks": n, "best_s": best})

    asyncio.run(run_all())

    # one row per (shape, kind, size): µs per task and x floor for each system
    headers = ["shape", "tool", "tasks"]
    for s in systems:
        headers += [f"{s} us/task"] + ([f"{s} x floor"] if s != FLOOR else [])
    rows = []
    for r in results:
        n, best = r["tasks"], r["best_s"]
        floor = best.get(FLOOR)
        row: list[Any] = [r["shape"], r["kind"], f"{n:,}"]
        for s in systems:
            t = best.get(s)
            row.append(common.fmt(t / n * 1e6, 1) if t is not None else "-")
            if s != FLOOR:
                row.append(common.fmt(t / floor) if t is not None and floor else "-")
        rows.append(row)
    print()
    print(common.text_table(headers, rows))
    for what, why in skipped.items():
        print(f"  skipped {what}: {why}")

    command = common.command_line()
    versions = {
        name: common._dist_version(name)
        for name in ("dask", "langgraph", "prefect")
        if name not in skipped
    }
    md = [
        *common.markdown_head(
            "Peers: the same DAGs and tool kinds on dagagent, asyncio, Dask, LangGraph, Prefect",
            command,
            info,
        ),
        "Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + "  ",
        f"Wall time per task, best of {args.repeats} runs per cell after one warm-up run; "
        "the floor is plain asyncio + graphlib on the same DAG in the same process.",
        "",
        common.markdown_table(headers, rows),
    ]
    if skipped:
        md += ["", "Skipped:", ""] + [f"- {w}: {why}" for w, why in skipped.items()]
    data = {
        "benchmark": "peers",
        "command": command,
        "machine": info,
        "versions": versions,
        "options": vars(args) | {"kinds": kinds, "systems": systems, "shapes": shapes},
        "results": results,
        "skipped": skipped,
    }
    common.save(args, "peers", data, "\n".join(md))


if __name__ == "__main__":
    main()
