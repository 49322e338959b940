"""How long the test suite takes: the test command of ``.ci/run``, run as CI runs it.

The command is read from ``.ci/run`` (its line that starts with ``pytest``), so the figure
is always that of the command the README gives. ``--quick`` measures the quick loop instead,
the same command with ``-m "not slow"`` (every test that starts no process and no browser).
The suite runs once, from the checkout, with this interpreter's environment; the table gives
its wall time, pytest's own summary line and the machine.

    python benchmarks/suite.py --write
    python benchmarks/suite.py --quick --write
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import time
from typing import Any

import _common as common

CI_RUN = common.REPO / ".ci" / "run"


def test_command() -> list[str]:
    """The argv of ``.ci/run``'s test command."""
    for line in CI_RUN.read_text(encoding="utf-8").splitlines():
        if line.strip().startswith("pytest"):
            return shlex.split(line.strip())
    raise SystemExit(f"{CI_RUN} has no line that runs pytest")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Wall time of the test suite, run with .ci/run's test command.",
    )
    parser.add_argument(
        "--quick", action="store_true", help='the quick loop: the command with -m "not slow"'
    )
    common.add_output_options(parser)
    args = parser.parse_args(argv)

    command = test_command()
    if args.quick:
        command += ["-m", "not slow"]
    shown = shlex.join(command)
    info = common.machine_info()
    print(f"machine: {common.machine_line(info)}")
    print(f"running: {shown}")
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", *command],
        cwd=common.REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    summary = lines[-1].strip("= ") if lines else ""
    passed = proc.returncode == 0
    print(proc.stdout[-3000:])
    print(f"{shown}: {wall / 60:.1f} min wall ({'passed' if passed else 'FAILED'}): {summary}")

    name = "suite_quick" if args.quick else "suite"
    data: dict[str, Any] = {
        "command": common.command_line(),
        "test_command": shown,
        "machine": info,
        "wall_s": round(wall, 1),
        "exit_code": proc.returncode,
        "pytest_summary": summary,
        "counts": {k: int(v) for v, k in re.findall(r"(\d+) (\w+)", summary)},
    }
    markdown = "\n".join(
        [
            f"# {'The quick loop' if args.quick else 'The test suite'}",
            "",
            f"`{common.command_line()}`: `{shown}`, run once from the checkout.",
            "",
            f"Machine: {common.machine_line(info)}; commit {info['git_commit']}.",
            "",
            common.markdown_table(
                ["command", "wall", "exit", "pytest says"],
                [[f"`{shown}`", f"{wall / 60:.1f} min ({wall:.0f} s)", proc.returncode, summary]],
            ),
        ]
    )
    out = common.result_dir(args)
    if out is None:
        print("(printed only: pass --write to update benchmarks/results, or --out DIR)")
    else:
        for path in common.write_results(out, name, data, markdown):
            print(f"wrote {path}")
    if not passed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
