"""What exactly-once costs: ``execute`` with the run store on, per task, for tools without
side effects (nothing added: the baseline is this same build with the same plan) and for
tools declared ``side_effects=True`` (each call commits its intent before it starts and its
outcome after it ends, through the store's side-effect journal, ``synchronous=FULL``).

Three plans of ``--tasks`` no-op tasks, all with the store on, each run ``--repeats`` times
interleaved (the minimum is the headline, the median beside it):

- ``pure``: tools without side effects: the figure of today's engine;
- ``effects, serial``: a chain of side-effecting calls (one after another: each pays its two
  commits in full);
- ``effects, parallel``: the same calls with no dependencies (calls that come at once share
  their commits).

The added time per side-effecting call is ``effects - pure``, per task.

    python benchmarks/side_effects.py
    python benchmarks/side_effects.py --tasks 500 --repeats 7 --write
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from _common import (
    add_output_options,
    command_line,
    machine_info,
    machine_line,
    markdown_table,
    median,
    result_dir,
    text_table,
    write_results,
)

import dagagent


def _registry() -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool(blocking=False)
    def pure(i: int) -> int:
        return i

    @reg.tool(blocking=False, side_effects=True)
    def effect(i: int) -> int:
        return i

    return reg


def _plan(tool: str, n: int, chain: bool) -> dict[str, Any]:
    tasks = []
    for i in range(n):
        task: dict[str, Any] = {"id": f"t{i}", "tool": tool, "args": {"i": i}}
        if chain and i:
            task["depends_on"] = [f"t{i - 1}"]
        tasks.append(task)
    return {"goal": "bench", "tasks": tasks}


def _time(plan: dict[str, Any], reg: dagagent.Registry, store: Path) -> float:
    graph = dagagent.validate(plan, reg)

    async def go() -> float:
        t0 = time.perf_counter()
        result = await dagagent.execute(graph, reg, store=store)
        elapsed = time.perf_counter() - t0
        assert result.status is dagagent.RunStatus.SUCCEEDED
        return elapsed

    return anyio.run(go)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    add_output_options(parser)
    args = parser.parse_args(argv)
    reg = _registry()
    n = args.tasks
    cases = {
        "pure, serial": _plan("pure", n, True),
        "effects, serial": _plan("effect", n, True),
        "pure, parallel": _plan("pure", n, False),
        "effects, parallel": _plan("effect", n, False),
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for name, plan in cases.items():
                store = Path(tmp) / f"{name.replace(', ', '-')}-{r}.db"
                times[name].append(_time(plan, reg, store))
    per_task = {k: [t / n * 1e6 for t in v] for k, v in times.items()}
    rows = []
    for shape in ("serial", "parallel"):
        pure, eff = per_task[f"pure, {shape}"], per_task[f"effects, {shape}"]
        rows.append(
            [
                shape,
                f"{min(pure):.0f}",
                f"{min(eff):.0f}",
                f"{min(eff) - min(pure):.0f}",
                f"{median(eff) - median(pure):.0f}",
            ]
        )
    headers = [
        "plan",
        "pure µs/task (min)",
        "side effects µs/task (min)",
        "added µs/call (min)",
        "added µs/call (median)",
    ]
    info = machine_info()
    print(machine_line(info))
    print(text_table(headers, rows))
    out = result_dir(args)
    if out is not None:
        md = (
            "# What exactly-once costs per call\n\n"
            f"`{command_line()}`, {n} no-op tasks, store on, {args.repeats} runs each "
            "(interleaved).\n\n"
            f"{machine_line(info)}\n\n{markdown_table(headers, rows)}\n\n"
            "A side-effecting call adds two commits that wait for the disk (its intent "
            "before, its outcome after); calls that come at once share them (parallel).\n"
        )
        data = {"command": command_line(), "machine": info, "tasks": n, "us_per_task": per_task}
        for path in write_results(out, "side_effects", data, md):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
