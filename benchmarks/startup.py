"""Start-up time of the command line: ``dagagent --help`` and ``dagagent validate`` of a small
plan, next to the floor of starting Python at all and of importing the CLI framework.

Each command runs ``--repeats`` times as a fresh process; the table gives the best wall time
and the best CPU time (user + system of the child). On a busy machine the wall time includes
waiting for a core, so the CPU time is the steadier figure; the target (0.3 s) is for wall
time on an idle machine. ``python -X importtime -m dagagent ...`` shows where the time goes.

Python runs as it does for an installed package: with its bytecode caches (written to a
temporary ``PYTHONPYCACHEPREFIX`` by one untimed run of each command first, even where
``PYTHONDONTWRITEBYTECODE`` is set), so compiling the sources is not counted.

    python benchmarks/startup.py
    python benchmarks/startup.py --repeats 20
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common

TARGET_S = 0.3
SMALL_PLAN = {
    "goal": "Compare the weather in two cities",
    "tasks": [
        {"id": "paris", "tool": "get_weather", "args": {"city": "Paris"}},
        {"id": "rome", "tool": "get_weather", "args": {"city": "Rome"}},
        {
            "id": "compare",
            "tool": "compare",
            "args": {"a": "${paris.temp_c}", "b": "${rome.temp_c}"},
        },
    ],
}


def _time(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one run of ``cmd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Wall and CPU time of dagagent --help and dagagent validate (a small plan), "
        "each a fresh process, next to starting Python and importing typer.",
    )
    parser.add_argument("--repeats", type=int, default=10, help="runs per command (best kept)")
    common.add_output_options(parser)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    py = sys.executable
    env = {**os.environ, "PYTHONPATH": str(common.REPO)}
    env.pop("DAGAGENT_TOOLS", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    commands = {
        "python -c pass (floor)": [py, "-c", "pass"],
        "python -c 'import typer' (floor)": [py, "-c", "import typer"],
        # what validate needs whatever it does: typer converts its options with pydantic, and
        # a plan is a pydantic model
        "python -c 'import typer, pydantic' (floor)": [py, "-c", "import typer, pydantic"],
        "dagagent --help": [py, "-m", "dagagent", "--help"],
        "dagagent validate small.json": [py, "-m", "dagagent", "validate", "small.json"],
    }
    info = common.machine_info()
    print(f"machine: {common.machine_line(info)}")
    wall: dict[str, list[float]] = {k: [] for k in commands}
    cpu: dict[str, list[float]] = {k: [] for k in commands}
    with tempfile.TemporaryDirectory(prefix="dagagent-startup-") as tmp:
        cwd = Path(tmp)
        (cwd / "small.json").write_text(json.dumps(SMALL_PLAN), encoding="utf-8")
        env["PYTHONPYCACHEPREFIX"] = str(cwd / "pycache")
        for cmd in commands.values():  # writes the bytecode caches, untimed
            _time(cmd, cwd, env)
        for _ in range(args.repeats):  # interleaved, so that load changes hit every command
            for name, cmd in commands.items():
                w, c = _time(cmd, cwd, env)
                wall[name].append(w)
                cpu[name].append(c)

    headers = ["command", "wall s (best)", "wall s (median)", "CPU s (best)"]
    rows = [
        [
            name,
            common.fmt(min(wall[name]), 3),
            common.fmt(common.median(wall[name]), 3),
            common.fmt(min(cpu[name]), 3),
        ]
        for name in commands
    ]
    targets = []
    for name in ("dagagent --help", "dagagent validate small.json"):
        w, c = min(wall[name]), min(cpu[name])
        targets.append(
            (f"{name} <= {TARGET_S} s wall", w <= TARGET_S, f"{w:.3f} s wall, {c:.3f} s CPU")
        )
    print()
    print(common.text_table(headers, rows))
    print()
    common.print_targets(targets)

    command = common.command_line()
    md = [
        *common.markdown_head("Start-up: dagagent --help and dagagent validate", command, info),
        f"Each command a fresh process, {args.repeats} runs interleaved; best and median wall "
        "time, best CPU time (user + system).",
        "",
        common.markdown_table(headers, rows),
        *common.markdown_targets(targets),
    ]
    data: dict[str, Any] = {
        "benchmark": "startup",
        "command": command,
        "machine": info,
        "options": {"repeats": args.repeats},
        "wall_s": wall,
        "cpu_s": cpu,
        "targets": common.targets_json(targets),
    }
    common.save(args, "startup", data, "\n".join(md))


if __name__ == "__main__":
    main()
