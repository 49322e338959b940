"""What a long run stores on Temporal as its workflow continues as new, as the server and the
payload store report it.

A plan of ``--tasks`` tool tasks (each list of ``--tasks`` sizes, default 1,000, 2,000 and
4,000) runs as a ladder ``--width`` tasks wide (task ``i`` reads the output of task
``i - width``), each task's output ``--output`` characters long, on a workflow whose history
may hold ``--history-events`` events (default 1,000): it continues as new many times. For
each size the benchmark reads the chain of runs of the workflow (first to last): their
events and history bytes (``history_size_bytes`` of each run's description), the arguments
each run started with (what the runs before it carried on), and what the payload store
gained (the values over the inline limit travel by reference, each stored once by its
hash). What the run stored is its histories and what the payload store gained.

A run that carried every result so far in each new run's input stored the results of the
first runs again in every run after them: quadratic in the run's length. With
``--before DIR`` (a checkout of dagagent, say of an earlier commit) the same plans run
first on a worker of that checkout, then on this one's, side by side.

The benchmark starts a Temporal development server (``temporal server start-dev``, in
memory, on a free loopback port) and a ``dagagent worker`` per checkout, and runs
``dagagent.execute(..., RunSettings(executor=TemporalExecutor(...)))`` from this process.

    python benchmarks/temporal_run_history.py
    python benchmarks/temporal_run_history.py --tasks 200,400 --history-events 300
    python benchmarks/temporal_run_history.py --before ../dagagent-main --write
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common

import dagagent
from dagagent.settings import RunSettings

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

registry = dagagent.Registry()


@registry.tool
def step(i: int, n: int, prev: Any = None) -> dict[str, Any]:
    """Task ``i``'s output: its number and ``n`` characters of text."""
    return {"i": i, "text": (str(i) * n)[:n]}


def ladder(tasks: int, width: int, output: int) -> dict[str, Any]:
    """``tasks`` tasks, ``width`` at a time: task ``i`` reads task ``i - width``'s output."""
    return {
        "goal": "a long run",
        "tasks": [
            {
                "id": f"t{i}",
                "tool": "step",
                "args": {
                    "i": i,
                    "n": output,
                    **({"prev": f"${{t{i - width}}}"} if i >= width else {}),
                },
            }
            for i in range(tasks)
        ],
    }


def _dir_bytes(path: Path) -> tuple[int, int]:
    files = [p for p in path.rglob("*") if p.is_file()] if path.exists() else []
    return len(files), sum(p.stat().st_size for p in files)


def _stored(payload: Any) -> tuple[bytes, int]:
    """A payload of a history: what it is (its bytes: the reference, for a value in the
    payload store) and the size of the value it stands for."""
    size = payload.external_payloads[0].size_bytes if payload.external_payloads else None
    return payload.SerializeToString(deterministic=True), size or payload.ByteSize()


async def _chain(client: Any, workflow: str) -> dict[str, Any]:
    """Each run of ``workflow``, first to last: its history's length and size, and the
    arguments it started with (their sizes); what those stored (each value once), and the
    size of the last run's result (every result of the run)."""
    latest = await client.get_workflow_handle(workflow).describe()
    run_id = latest.raw_description.workflow_execution_info.first_run_id
    events: list[int] = []
    sizes: list[int] = []
    inputs: list[list[int]] = []
    values: dict[bytes, int] = {}
    result = 0
    while run_id:
        handle = client.get_workflow_handle(workflow, run_id=run_id)
        info = (await handle.describe()).raw_description.workflow_execution_info
        events.append(info.history_length)
        sizes.append(info.history_size_bytes)
        history = (await handle.fetch_history()).events
        started = [
            _stored(p)
            for p in history[0].workflow_execution_started_event_attributes.input.payloads
        ]
        inputs.append([size for _, size in started])
        values.update(started)
        last = history[-1]
        if last.HasField("workflow_execution_completed_event_attributes"):
            result = sum(
                _stored(p)[1]
                for p in last.workflow_execution_completed_event_attributes.result.payloads
            )
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.HasField("workflow_execution_continued_as_new_event_attributes")
            else None
        )
    return {
        "runs": len(events),
        "run_events": events,
        "run_bytes": sizes,
        "history_events": sum(events),
        "history_bytes": sum(sizes),
        "run_events_max": max(events),
        "input_bytes": inputs,
        "inputs_stored_bytes": sum(values.values()),
        "result_bytes": result,
    }


async def measure(
    address: str, queue: str, payloads: Path, *, tasks: int, width: int, output: int, events: int
) -> dict[str, Any]:
    """One run of a ``tasks``-task ladder, and what the server and the store have of it."""
    from dagagent.executors.temporal import TemporalExecutor, workflow_id

    ex = TemporalExecutor(address, task_queue=queue, payloads=payloads, history_events=events)
    before = await asyncio.to_thread(_dir_bytes, payloads)
    t0 = time.perf_counter()
    result = await dagagent.execute(
        ladder(tasks, width, output), registry, settings=RunSettings(executor=ex)
    )
    took = time.perf_counter() - t0
    if not result.ok or len(result.tasks) != tasks:
        raise SystemExit(f"the run of {tasks} tasks did not succeed: {result.failed}")
    async with ex.session():
        assert ex.client is not None
        chain = await _chain(ex.client, workflow_id(result.run_id))
    files, stored = await asyncio.to_thread(_dir_bytes, payloads)
    return {
        "tasks": tasks,
        "wall_s": took,
        **chain,
        "payload_files": files - before[0],
        "payload_bytes": stored - before[1],
        "stored_bytes": chain["history_bytes"] + stored - before[1],
    }


def _commit(root: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def run(args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    from temporal_overhead import _free_port, _wait_ready, start_dev_server

    workdir = Path(tempfile.mkdtemp(prefix="temporal-run-bench-"))
    port = _free_port()
    address = f"127.0.0.1:{port}"
    checkouts = {"before": args.before, "after": ROOT} if args.before else {"after": ROOT}
    found: dict[str, list[dict[str, Any]]] = {}
    server = start_dev_server(port)
    try:
        for name, root in checkouts.items():
            queue = f"bench-run-{name}"
            payloads = workdir / name
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(root), str(HERE)]),
            }
            worker = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dagagent",
                    "worker",
                    "--tools",
                    "temporal_run_history:registry",
                    "--temporal-address",
                    address,
                    "--task-queue",
                    queue,
                    "--payload-store",
                    str(payloads),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                stdin=subprocess.DEVNULL,
                cwd=root,  # (``-m`` imports from the working directory first)
            )
            try:
                _wait_ready(worker)
                found[name] = []
                for n in args.tasks:
                    m = asyncio.run(
                        measure(
                            address,
                            queue,
                            payloads,
                            tasks=n,
                            width=args.width,
                            output=args.output,
                            events=args.history_events,
                        )
                    )
                    print(
                        f"{name}: {n:,} tasks, {m['runs']} runs, {m['stored_bytes'] / 1e6:.2f} MB "
                        f"stored, {m['wall_s']:.1f} s"
                    )
                    found[name].append(m)
            finally:
                worker.terminate()
                try:
                    worker.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    worker.kill()
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(workdir, ignore_errors=True)
    return found


def _sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(s) for s in text.split(",") if s.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if len(sizes) < 2 or sizes[0] < 1:
        raise argparse.ArgumentTypeError("give at least two sizes, each at least 1")
    return sizes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="What a long run stores on Temporal as its workflow continues as new "
        "(histories and payload store), read from a development server started for the run. "
        "Writes temporal_run_history.json and .md.",
    )
    parser.add_argument(
        "--tasks",
        type=_sizes,
        default=[1000, 2000, 4000],
        help="the plans' sizes, comma-separated (default 1000,2000,4000)",
    )
    parser.add_argument("--width", type=int, default=20, help="tasks running at once")
    parser.add_argument("--output", type=int, default=100, help="characters of each output")
    parser.add_argument(
        "--history-events",
        type=int,
        default=1000,
        help="the history length at which the workflow continues as new",
    )
    parser.add_argument(
        "--before",
        type=Path,
        default=None,
        help="a checkout of dagagent whose workers run the same plans first, to compare",
    )
    common.add_output_options(parser)
    args = parser.parse_args(argv)
    if args.width < 1 or args.output < 1 or args.history_events < 100:
        parser.error("--width and --output must be >= 1, --history-events at least 100")
    if args.before is not None and not (args.before / "dagagent" / "__init__.py").exists():
        parser.error(f"--before {args.before}: not a checkout of dagagent")
    try:
        import temporalio  # noqa: F401
    except ImportError:
        raise SystemExit(
            "this benchmark needs Temporal: pip install 'dagagent[temporal]'"
        ) from None
    info = common.machine_info()
    print(f"machine: {common.machine_line(info)}")
    found = run(args)
    commits = {"after": _commit(ROOT), "before": _commit(args.before) if args.before else None}
    after = found["after"]
    first, last = after[0], after[-1]
    growth = last["tasks"] / first["tasks"]
    bound = args.history_events + 3 * args.width * 8  # a run ends once its running tasks do
    targets: list[common.Target] = [
        (
            f"{growth:g}x the tasks store at most {1.25 * growth:g}x the bytes (histories and "
            "payload store: linear in the run's length)",
            last["stored_bytes"] <= 1.25 * growth * first["stored_bytes"],
            f"{last['stored_bytes'] / first['stored_bytes']:.2f}x "
            f"({first['stored_bytes'] / 1e6:.2f} MB to {last['stored_bytes'] / 1e6:.2f} MB)",
        ),
        (
            "the runs' inputs store each result once (at most the first input and the run's "
            "results, and 10 % more)",
            all(
                m["inputs_stored_bytes"] <= 1.1 * (m["input_bytes"][0][0] + m["result_bytes"])
                for m in after
            ),
            ", ".join(
                f"{m['inputs_stored_bytes'] / 1e6:.2f} of {m['result_bytes'] / 1e6:.2f} MB"
                for m in after
            ),
        ),
        (
            f"each run of the workflow stays near history_events ({args.history_events:,})",
            all(m["runs"] > 1 and m["run_events_max"] <= bound for m in after),
            ", ".join(f"{m['runs']} runs, largest {m['run_events_max']:,}" for m in after),
        ),
    ]
    headers = [
        "code",
        "tasks",
        "runs",
        "events",
        "history bytes",
        "payload store",
        "stored",
        "took",
    ]
    rows = [
        [
            f"{name} ({commits[name]})" if commits[name] else name,
            f"{m['tasks']:,}",
            m["runs"],
            f"{m['history_events']:,} (largest run {m['run_events_max']:,})",
            f"{m['history_bytes']:,}",
            f"{m['payload_bytes']:,} ({m['payload_files']:,} values)",
            f"{m['stored_bytes'] / 1e6:.2f} MB",
            f"{m['wall_s']:.1f} s",
        ]
        for name, runs in found.items()
        for m in runs
    ]
    lines = [_growth(name, runs) for name, runs in found.items()]
    print()
    print(common.text_table(headers, rows))
    print()
    for line in lines:
        print(line)
    print()
    common.print_targets(targets)
    command = common.command_line()
    md = common.markdown_head("What a long run stores on Temporal", command, info)
    md += [
        f"One Temporal development server (in memory, loopback) and one `dagagent worker` per "
        f"checkout. Each plan is a ladder of tool tasks {args.width} wide (task i reads task "
        f"i - {args.width}'s output), each output {args.output:,} characters; "
        f"`history_events={args.history_events:,}`, so the run's workflow continues as new "
        "many times. Stored: the histories of every run of the workflow "
        "(`history_size_bytes`) and what the payload store gained (values over 2 kB travel "
        "by reference, each stored once by its hash)."
        + (
            f" `before`: the workers of the checkout given to `--before` (at "
            f"{commits['before'] or 'an unknown commit'}), the same plans run first; `after`: "
            "this checkout's. Times are of one run each on a shared machine: not compared."
            if args.before
            else ""
        ),
        "",
        common.markdown_table(headers, rows),
        "",
        *(f"- {line}" for line in lines),
        *common.markdown_targets(targets),
    ]
    data = {
        "benchmark": "temporal_run_history",
        "command": command,
        "machine": info,
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "commits": commits,
        "runs": found,
        "targets": common.targets_json(targets),
    }
    common.save(args, "temporal_run_history", data, "\n".join(md))


def _growth(name: str, runs: list[dict[str, Any]]) -> str:
    """How what was stored grew with the run's length."""
    first = runs[0]
    steps = ", ".join(
        f"{m['tasks'] / first['tasks']:g}x the tasks: "
        f"{m['stored_bytes'] / first['stored_bytes']:.2f}x the bytes"
        for m in runs[1:]
    )
    inputs = runs[-1]["input_bytes"]
    return (
        f"{name}: {steps}; the last run of the {runs[-1]['tasks']:,}-task run started with "
        f"{len(inputs[-1])} argument{'s' if len(inputs[-1]) != 1 else ''} of "
        f"{sum(inputs[-1]) / 1e3:,.0f} kB; its runs' inputs stored "
        f"{runs[-1]['inputs_stored_bytes'] / 1e6:.2f} MB for results of "
        f"{runs[-1]['result_bytes'] / 1e6:.2f} MB."
    )


if __name__ == "__main__":
    sys.exit(main())
