"""Makespan of each executor on DAG shapes, against the critical-path and level bounds.

Every task sleeps for a seeded latency (10-200 ms) that is fixed before the run, so the best
any executor can do is known in advance:

- **critical path** — the longest chain of latencies: the bound for an executor that starts
  each task as soon as its own dependencies are done (``dataflow``, ``dask``);
- **level bound** — the sum over topological levels of the slowest task in the level: the
  bound for an executor that waits for a whole level before starting the next (``levels``).

Both come from :meth:`dagagent.PlanGraph.critical_path` and ``level_bound`` on the assigned
latencies. For each shape and executor the script reports the makespan (best of
``--repeats`` runs; the median is in the JSON), the speedup over ``serial``, and makespan /
critical path and makespan / level bound (1.00 = no overhead at all).

Shapes: a wide fan-out/fan-in; a chain; a diamond lattice; two seeded random layered DAGs;
two skewed chains (one short-long-short-..., one long-short-long-..., the worst case for a
level barrier); and ParallelQA-shaped plans — k parallel look-ups, one arithmetic step per
look-up, one answer — with k taken from the ``branch`` field of the ParallelQA questions.
The ParallelQA tools are SIMULATED: offline, with seeded latencies and synthetic facts; the
questions only give each plan its shape.

    python benchmarks/serial_vs_parallel.py
    python benchmarks/serial_vs_parallel.py --executors levels,dataflow,dask --repeats 5
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import _common as common
import anyio

import dagagent
from dagagent.settings import RunSettings
from dagagent.toolkits.calc import evaluate

SHAPES = ("fan", "chain", "diamond", "random", "skewed", "parallelqa")
DEFAULT_EXECUTORS = ("serial", "levels", "dataflow")
DEFAULT_DATASET = common.DATA_DIR
DATASET_FILE = "parallelqa_dataset.json"
SIMULATED_NOTE = (
    "The tools are simulated (offline): each task sleeps for a seeded latency fixed before the "
    "run; the ParallelQA look-ups return synthetic facts, not Wikipedia."
)

LOW_S, HIGH_S = 0.010, 0.200  # generic task latencies
SEARCH_S = (0.050, 0.200)  # ParallelQA look-ups
MATH_S = (0.010, 0.050)  # ParallelQA arithmetic and answer


# ---------------------------------------------------------------------------------------------
# Simulated tools


def build_registry() -> dagagent.Registry:
    registry = dagagent.Registry()

    @registry.tool
    async def work(seconds: float, inputs: list[int] | None = None) -> int:
        """Sleep for a seeded latency; return the task's depth (1 + the deepest input).

        Args:
            seconds: How long to sleep.
            inputs: Outputs of the tasks this one depends on.
        """
        await anyio.sleep(seconds)
        return 1 + max(inputs or [0])

    @registry.tool
    async def search(entity: str, latency_s: float) -> dict[str, Any]:
        """Simulated look-up: a synthetic numeric fact about an entity.

        Args:
            entity: What to look up.
            latency_s: Simulated network latency.
        """
        await anyio.sleep(latency_s)
        return {"entity": entity, "value": synthetic_fact(entity)}

    @registry.tool
    async def math(expression: str, latency_s: float) -> float:
        """Simulated arithmetic step: evaluate an expression after a latency.

        Args:
            expression: Arithmetic, e.g. "8849 * 0.9".
            latency_s: Simulated latency.
        """
        await anyio.sleep(latency_s)
        return float(evaluate(expression))

    @registry.tool
    async def answer(
        names: list[str], values: list[float], pick: Literal["max", "min"], latency_s: float
    ) -> str:
        """Simulated final answer: the name with the largest (or smallest) value.

        Args:
            names: Candidate names.
            values: One value per name.
            pick: "max" or "min".
            latency_s: Simulated latency.
        """
        await anyio.sleep(latency_s)
        pairs = list(zip(values, names, strict=True))
        return (max(pairs) if pick == "max" else min(pairs))[1]

    return registry


def synthetic_fact(entity: str) -> float:
    digest = hashlib.blake2b(entity.encode(), digest_size=8).digest()
    return round(100 + 9900 * int.from_bytes(digest, "big") / 2**64, 1)


# ---------------------------------------------------------------------------------------------
# Shapes: plans with their latencies fixed in advance


@dataclass
class Case:
    shape: str
    label: str
    plans: list[dict[str, Any]] = field(default_factory=list)
    durations: list[dict[str, float]] = field(default_factory=list)
    expect: list[tuple[str, Any]] = field(default_factory=list)  # (task, output) checks

    @property
    def tasks(self) -> int:
        return sum(len(p["tasks"]) for p in self.plans)


def _work_plan(goal: str, deps: dict[str, list[str]], seconds: dict[str, float]) -> dict[str, Any]:
    tasks = []
    for t, ds in deps.items():
        args: dict[str, Any] = {"seconds": round(seconds[t], 6)}
        if ds:
            args["inputs"] = [f"${{{d}}}" for d in ds]
        tasks.append({"id": t, "tool": "work", "args": args})
    return {"goal": goal, "tasks": tasks}


def _depths(deps: dict[str, list[str]]) -> dict[str, int]:
    depth: dict[str, int] = {}
    for t, ds in deps.items():  # deps are listed in topological order
        depth[t] = 1 + max((depth[d] for d in ds), default=0)
    return depth


def _work_case(
    shape: str, label: str, deps: dict[str, list[str]], seconds: dict[str, float]
) -> Case:
    depth = _depths(deps)
    case = Case(shape, label)
    case.plans.append(_work_plan(f"benchmark shape: {label}", deps, seconds))
    case.durations.append(dict(seconds))
    case.expect = [(t, depth[t]) for t in deps]
    return case


def _latencies(rng: random.Random, ids: list[str], scale: float) -> dict[str, float]:
    return {t: rng.uniform(LOW_S, HIGH_S) * scale for t in ids}


def fan(width: int, rng: random.Random, scale: float) -> Case:
    deps: dict[str, list[str]] = {"source": []}
    middle = [f"f{i}" for i in range(width)]
    deps.update({m: ["source"] for m in middle})
    deps["sink"] = middle
    return _work_case(
        "fan", f"fan-out/fan-in 1+{width}+1", deps, _latencies(rng, list(deps), scale)
    )


def chain(length: int, rng: random.Random, scale: float) -> Case:
    deps = {f"c{i}": ([f"c{i - 1}"] if i else []) for i in range(length)}
    return _work_case("chain", f"chain of {length}", deps, _latencies(rng, list(deps), scale))


def diamond(side: int, rng: random.Random, scale: float) -> Case:
    """Rows of width 1, 2, ..., side, ..., 2, 1; each node depends on its two neighbours above."""
    widths = [r + 1 if r < side else 2 * side - 1 - r for r in range(2 * side - 1)]
    deps: dict[str, list[str]] = {}
    for r, w in enumerate(widths):
        for c in range(w):
            if r == 0:
                parents: list[int] = []
            elif r < side:  # widening
                parents = [p for p in (c - 1, c) if 0 <= p < widths[r - 1]]
            else:  # narrowing
                parents = [c, c + 1]
            deps[f"d{r}_{c}"] = [f"d{r - 1}_{p}" for p in parents]
    return _work_case(
        "diamond", f"diamond lattice {side}x{side}", deps, _latencies(rng, list(deps), scale)
    )


def random_layered(
    layers: int, max_width: int, seed: int, rng: random.Random, scale: float
) -> Case:
    """Seeded random layers; each task depends on 1-3 tasks, at least one in the layer above."""
    g = random.Random(seed)
    deps: dict[str, list[str]] = {}
    earlier: list[str] = []
    prev: list[str] = []
    for layer in range(layers):
        current = [f"r{layer}_{i}" for i in range(g.randint(1, max_width))]
        for t in current:
            if not prev:
                deps[t] = []
                continue
            chosen = {g.choice(prev)}
            for _ in range(g.randint(0, 2)):
                chosen.add(g.choice(earlier))
            deps[t] = sorted(chosen)
        earlier += current
        prev = current
    label = f"random layered (seed {seed})"
    return _work_case("random", label, deps, _latencies(rng, list(deps), scale))


def skewed(length: int, scale: float) -> Case:
    """Chain a is short, long, short, ...; chain b is long, short, long, ... Every level holds
    one long task, so a level barrier waits for the long one twice as often as needed."""
    short, long_ = 0.020 * scale, 0.200 * scale
    deps: dict[str, list[str]] = {}
    seconds: dict[str, float] = {}
    for name, first_long in (("a", False), ("b", True)):
        for i in range(length):
            t = f"{name}{i}"
            deps[t] = [f"{name}{i - 1}"] if i else []
            seconds[t] = long_ if (i % 2 == 0) == first_long else short
    return _work_case("skewed", f"skewed chains 2x{length}", deps, seconds)


def load_questions(dataset_dir: Path) -> list[dict[str, Any]]:
    path = dataset_dir / DATASET_FILE
    if not path.is_file():
        raise SystemExit(
            f"the ParallelQA dataset is missing: {path.resolve()} does not exist. Give its "
            f"directory with --dataset DIR, or leave 'parallelqa' out of --shapes."
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        questions = [q for q in data if isinstance(q, dict)]
        for q in questions:
            int(q["branch"])
            str(q["id"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"cannot read the ParallelQA dataset {path}: {exc}") from None
    if not questions:
        raise SystemExit(f"the ParallelQA dataset {path} holds no questions")
    return questions


def pick_questions(
    questions: list[dict[str, Any]], n: int, rng: random.Random
) -> list[dict[str, Any]]:
    """``n`` questions spread over the branch counts (all of them when ``n`` is 0)."""
    if n <= 0 or n >= len(questions):
        return list(questions)
    by_k: dict[int, list[dict[str, Any]]] = {}
    for q in questions:
        by_k.setdefault(int(q["branch"]), []).append(q)
    for qs in by_k.values():
        rng.shuffle(qs)
    chosen: list[dict[str, Any]] = []
    while len(chosen) < n:
        for k in sorted(by_k):
            if by_k[k] and len(chosen) < n:
                chosen.append(by_k[k].pop())
    return sorted(chosen, key=lambda q: (int(q["branch"]), str(q["id"])))


def parallelqa(questions: list[dict[str, Any]], rng: random.Random, scale: float) -> Case:
    ks = sorted({int(q["branch"]) for q in questions})
    label = f"ParallelQA x{len(questions)} (k={'/'.join(map(str, ks))})"
    case = Case("parallelqa", label)
    for q in questions:
        k = int(q["branch"])
        qid = str(q["id"])
        tasks: list[dict[str, Any]] = []
        seconds: dict[str, float] = {}
        names = []
        for j in range(1, k + 1):
            entity = f"q{qid} entity {j}"
            names.append(entity)
            seconds[f"search{j}"] = rng.uniform(*SEARCH_S) * scale
            seconds[f"math{j}"] = rng.uniform(*MATH_S) * scale
            factor = round(rng.uniform(0.5, 2.0), 2)
            tasks.append(
                {
                    "id": f"search{j}",
                    "tool": "search",
                    "args": {"entity": entity, "latency_s": round(seconds[f"search{j}"], 6)},
                }
            )
            tasks.append(
                {
                    "id": f"math{j}",
                    "tool": "math",
                    "args": {
                        "expression": f"${{search{j}.value}} * {factor}",
                        "latency_s": round(seconds[f"math{j}"], 6),
                    },
                }
            )
        seconds["answer"] = rng.uniform(*MATH_S) * scale
        pick = "max" if rng.random() < 0.5 else "min"
        tasks.append(
            {
                "id": "answer",
                "tool": "answer",
                "args": {
                    "names": names,
                    "values": [f"${{math{j}}}" for j in range(1, k + 1)],
                    "pick": pick,
                    "latency_s": round(seconds["answer"], 6),
                },
            }
        )
        case.plans.append({"goal": str(q.get("question", "")), "tasks": tasks})
        case.durations.append({t: round(s, 6) for t, s in seconds.items()})
    return case


def build_cases(args: argparse.Namespace) -> list[Case]:
    rng = random.Random(args.seed)
    scale = args.scale
    quick = args.quick
    cases: list[Case] = []
    for shape in args.shapes:
        if shape == "fan":
            cases.append(fan(6 if quick else 32, rng, scale))
        elif shape == "chain":
            cases.append(chain(4 if quick else 16, rng, scale))
        elif shape == "diamond":
            cases.append(diamond(3 if quick else 6, rng, scale))
        elif shape == "random":
            for seed in (args.seed, args.seed + 1):
                cases.append(random_layered(3 if quick else 6, 4 if quick else 8, seed, rng, scale))
        elif shape == "skewed":
            cases.append(skewed(4 if quick else 8, scale))
        elif shape == "parallelqa":
            questions = load_questions(args.dataset)
            n = 2 if quick else args.questions
            cases.append(parallelqa(pick_questions(questions, n, rng), rng, scale))
    return cases


# ---------------------------------------------------------------------------------------------
# Running


@dataclass
class Measured:
    case: Case
    graphs: list[dagagent.PlanGraph]
    critical_path_s: float
    level_bound_s: float
    work_s: float
    makespans: dict[str, list[float]] = field(default_factory=dict)


def prepare(case: Case, registry: dagagent.Registry) -> Measured:
    graphs = [dagagent.validate(p, registry) for p in case.plans]
    cp = sum(g.critical_path(d)[0] for g, d in zip(graphs, case.durations, strict=True))
    lb = sum(g.level_bound(d) for g, d in zip(graphs, case.durations, strict=True))
    work = sum(sum(d.values()) for d in case.durations)
    return Measured(case, graphs, cp, lb, work)


async def run_case(m: Measured, registry: dagagent.Registry, executor: Any, name: str) -> float:
    """Run every plan of the case once; return the summed makespans."""
    total = 0.0
    for g in m.graphs:
        t0 = time.perf_counter()
        result = await dagagent.execute(g, registry, settings=RunSettings(executor=executor))
        total += time.perf_counter() - t0
        if not result.ok:
            failed = "; ".join(f"{r.task_id}: {r.error}" for r in result.failures())
            raise SystemExit(f"{name} on {m.case.label}: the run failed: {failed}")
        if len(m.graphs) == 1:
            for task_id, expected in m.case.expect:
                got = result.tasks[task_id].output
                if got != expected:
                    raise SystemExit(
                        f"{name} on {m.case.label}: task {task_id} returned {got!r}, "
                        f"expected {expected!r}"
                    )
    return total


@contextlib.asynccontextmanager
async def executors_for(
    names: list[str], args: argparse.Namespace
) -> AsyncIterator[dict[str, Any]]:
    """Executor objects by name; a dask executor keeps one cluster for the whole benchmark."""
    out: dict[str, Any] = {}
    async with contextlib.AsyncExitStack() as stack:
        for name in names:
            if name == "dask":
                from dagagent.executors.dask import DaskExecutor

                exe = DaskExecutor(
                    n_workers=args.dask_workers,
                    threads_per_worker=args.dask_threads,
                    processes=True,
                )
                await stack.enter_async_context(exe.session())
                out[name] = exe
            else:
                out[name] = dagagent.executors.get_executor(name)
        yield out


async def measure(
    measured: list[Measured],
    registry: dagagent.Registry,
    names: list[str],
    args: argparse.Namespace,
) -> None:
    async with executors_for(names, args) as exes:
        warm = prepare(chain(3, random.Random(0), 0.01), registry)
        for name in names:  # warm-up: imports, first-call paths, worker connections
            await run_case(warm, registry, exes[name], name)
        for rep in range(args.repeats):
            for m in measured:
                for name in names:
                    makespan = await run_case(m, registry, exes[name], name)
                    m.makespans.setdefault(name, []).append(makespan)
            print(f"  repeat {rep + 1}/{args.repeats} done", flush=True)


def summarize(m: Measured, names: list[str]) -> dict[str, Any]:
    best = {n: min(v) for n, v in m.makespans.items()}
    med = {n: common.median(v) for n, v in m.makespans.items()}
    serial = best.get("serial")
    per: dict[str, Any] = {}
    for n in names:
        per[n] = {
            "makespans_s": m.makespans[n],
            "makespan_s": best[n],
            "makespan_median_s": med[n],
            "speedup_vs_serial": serial / best[n] if serial else None,
            "over_critical_path": best[n] / m.critical_path_s,
            "over_level_bound": best[n] / m.level_bound_s,
            "over_critical_path_median": med[n] / m.critical_path_s,
            "over_level_bound_median": med[n] / m.level_bound_s,
        }
    return {
        "shape": m.case.shape,
        "label": m.case.label,
        "plans": len(m.case.plans),
        "tasks": m.case.tasks,
        "work_s": m.work_s,
        "critical_path_s": m.critical_path_s,
        "level_bound_s": m.level_bound_s,
        "executors": per,
    }


def targets(rows: list[dict[str, Any]]) -> list[tuple[str, bool, str]]:
    out = []
    for r in rows:
        ex = r["executors"]
        if "dataflow" in ex:
            x = ex["dataflow"]["over_critical_path"]
            out.append(
                (
                    f"dataflow makespan / critical path <= 1.05 on {r['label']}",
                    x <= 1.05,
                    f"{x:.3f}",
                )
            )
        if "levels" in ex:
            x = ex["levels"]["over_level_bound"]
            out.append(
                (f"levels makespan / level bound <= 1.05 on {r['label']}", x <= 1.05, f"{x:.3f}")
            )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Makespan of each executor on several DAG shapes of sleeping tasks "
        "(seeded latencies, simulated offline tools), next to the critical path and the level "
        "bound computed from the assigned latencies. Writes serial_vs_parallel.json and .md.",
    )
    parser.add_argument(
        "--executors",
        default=",".join(DEFAULT_EXECUTORS),
        help="comma-separated executors (serial, levels, dataflow, dask); dask is skipped "
        "with a note when 'distributed' is not installed (default: %(default)s)",
    )
    parser.add_argument(
        "--shapes",
        default=",".join(SHAPES),
        help=f"comma-separated shapes from {', '.join(SHAPES)} (default: all)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell; the best is kept")
    parser.add_argument("--seed", type=int, default=1, help="seed of latencies and random DAGs")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply every latency (default 1: 10-200 ms)"
    )
    parser.add_argument(
        "--dataset",
        type=Path,
        default=DEFAULT_DATASET,
        help=f"directory holding {DATASET_FILE} (default: benchmarks/data)",
    )
    parser.add_argument(
        "--questions",
        type=int,
        default=8,
        help="ParallelQA questions to run, spread over k=2..5 (0 = all; default %(default)s)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny shapes (a smoke test)")
    parser.add_argument("--dask-workers", type=int, default=2, help="dask: local workers")
    parser.add_argument(
        "--dask-threads", type=int, default=32, help="dask: concurrent calls per worker"
    )
    common.add_output_options(parser)
    args = parser.parse_args(argv)

    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.scale <= 0:
        parser.error("--scale must be > 0")
    args.shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    for s in args.shapes:
        if s not in SHAPES:
            parser.error(f"unknown shape {s!r}: choose from {', '.join(SHAPES)}")
    names = common.usable_executors(
        parser, [e.strip() for e in args.executors.split(",") if e.strip()]
    )

    info = common.machine_info()
    print(f"machine: {common.machine_line(info)}")
    print(f"note: {SIMULATED_NOTE}")
    registry = build_registry()
    measured = [prepare(c, registry) for c in build_cases(args)]
    print(
        f"running {len(measured)} shapes x {len(names)} executors x {args.repeats} repeats ...",
        flush=True,
    )
    anyio.run(measure, measured, registry, names, args)

    rows = [summarize(m, names) for m in measured]
    headers = [
        "shape",
        "tasks",
        "critical path s",
        "level bound s",
        "executor",
        "makespan s",
        "speedup vs serial",
        "makespan / CP",
        "makespan / LB",
    ]
    table = []
    for r in rows:
        for i, n in enumerate(names):
            e = r["executors"][n]
            table.append(
                [
                    r["label"] if i == 0 else "",
                    str(r["tasks"]) if i == 0 else "",
                    common.fmt(r["critical_path_s"], 3) if i == 0 else "",
                    common.fmt(r["level_bound_s"], 3) if i == 0 else "",
                    n,
                    common.fmt(e["makespan_s"], 3),
                    common.fmt(e["speedup_vs_serial"]),
                    common.fmt(e["over_critical_path"], 3),
                    common.fmt(e["over_level_bound"], 3),
                ]
            )
    checks = targets(rows)
    print()
    print(common.text_table(headers, table))
    print()
    common.print_targets(checks)

    command = common.command_line()
    md = [
        *common.markdown_head(
            "Serial vs parallel: makespan against the critical path (CP) and level bound (LB)",
            command,
            info,
        ),
        f"Best of {args.repeats} runs per cell. {SIMULATED_NOTE}",
        "",
        common.markdown_table(headers, table),
        *common.markdown_targets(checks),
    ]
    data = {
        "benchmark": "serial_vs_parallel",
        "command": command,
        "machine": info,
        "note": SIMULATED_NOTE,
        "options": {
            "executors": names,
            "shapes": args.shapes,
            "repeats": args.repeats,
            "seed": args.seed,
            "scale": args.scale,
            "questions": args.questions,
            "quick": args.quick,
        },
        "results": rows,
        "targets": common.targets_json(checks),
    }
    common.save(args, "serial_vs_parallel", data, "\n".join(md))


if __name__ == "__main__":
    main()
