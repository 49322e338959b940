"""Helpers shared by the benchmark scripts: machine facts, tables, result files, statistics.

The scripts import this module as ``_common`` (they run as ``python benchmarks/<name>.py``,
which puts ``benchmarks/`` first on ``sys.path``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "DATA_DIR",
    "REPO",
    "RESULTS_DIR",
    "add_output_options",
    "add_shape_options",
    "best_and_median",
    "fmt",
    "machine_info",
    "markdown_head",
    "markdown_table",
    "markdown_targets",
    "median",
    "print_targets",
    "result_dir",
    "save",
    "targets_json",
    "text_table",
    "usable_executors",
    "write_results",
]

Target = tuple[str, bool | None, str]
"""``(what is aimed at, whether it was met, what was measured)``."""

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results"
DATA_DIR = REPO / "benchmarks" / "data"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on: cores, CPU, Python, load, commit."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 0
    try:
        load = list(os.getloadavg())
    except OSError:
        load = []
    import anyio

    import dagagent

    return {
        "nproc": usable,
        "cpu_model": _cpu_model(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "dagagent": dagagent.__version__,
        "anyio": getattr(anyio, "__version__", None) or _dist_version("anyio"),
        "git_commit": _git_commit(),
        "loadavg_at_start": [round(x, 2) for x in load],
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def machine_line(info: dict[str, Any]) -> str:
    return (
        f"{info['nproc']} cores ({info['cpu_model']}), {info['implementation']} "
        f"{info['python']}, load average at start {info['loadavg_at_start']}"
    )


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def best_and_median(
    times: dict[str, list[float]],
) -> tuple[dict[str, float], dict[str, float]]:
    """The best and the median of each side's times."""
    return {k: min(v) for k, v in times.items()}, {k: median(v) for k, v in times.items()}


def fmt(value: Any, digits: int = 2) -> str:
    """A table cell: floats rounded, None as a dash."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:  # NaN
            return "-"
        return f"{value:.{digits}f}"
    return str(value)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain, right-aligned text table for the terminal."""
    cells = [[str(h) for h in headers], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for i, r in enumerate(cells):
        lines.append(
            "  ".join(
                c.ljust(w) if j == 0 else c.rjust(w)
                for j, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def add_output_options(parser: argparse.ArgumentParser) -> None:
    """``--write`` / ``--out`` / ``--no-write``: published results change only when asked."""
    parser.add_argument(
        "--write",
        action="store_true",
        help="overwrite the published results in benchmarks/results (never done by default)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write the result files to this directory instead (default: print only)",
    )
    parser.add_argument("--no-write", action="store_true", help="print only, write no files")


def add_shape_options(parser: argparse.ArgumentParser, *, repeats: int) -> None:
    """``--chain`` / ``--fan`` / ``--repeats``: the sizes of a chain and a fan-out/fan-in DAG,
    and how often each is timed."""
    parser.add_argument("--chain", type=int, default=30, help="tasks in the chain")
    parser.add_argument("--fan", type=int, default=32, help="parallel tasks of the fan-out")
    parser.add_argument("--repeats", type=int, default=repeats, help="runs of each (min is kept)")


def result_dir(args: argparse.Namespace) -> Path | None:
    """Where this run's result files go: ``--out``, the published folder with ``--write``, or
    nowhere (printed only) when neither was given or ``--no-write`` was."""
    if args.no_write:
        return None
    if args.out is not None:
        return Path(args.out)
    if args.write:
        return RESULTS_DIR
    return None


def write_results(out_dir: Path, name: str, data: dict[str, Any], markdown: str) -> list[Path]:
    """Write ``<name>.json`` and ``<name>.md`` under ``out_dir``; return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{name}.json"
    md_path = out_dir / f"{name}.md"
    json_path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    md_path.write_text(markdown.rstrip() + "\n", encoding="utf-8")
    return [json_path, md_path]


def save(args: argparse.Namespace, name: str, data: dict[str, Any], markdown: str) -> Path | None:
    """Write ``<name>.json`` and ``<name>.md`` where ``--write`` / ``--out`` say (saying so),
    or say they were not written; the folder written to, if any."""
    out = result_dir(args)
    if out is None:
        print("results not written (pass --write to update benchmarks/results, or --out DIR)")
        return None
    for path in write_results(out, name, data, markdown):
        print(f"wrote {path}")
    return out


def markdown_head(title: str, command: str, info: dict[str, Any]) -> list[str]:
    """The first lines of a results page: its title, the command and the machine."""
    return [f"# {title}", "", f"Command: `{command}`  ", f"Machine: {machine_line(info)}  "]


def print_targets(targets: Sequence[Target]) -> None:
    """Each target, met or MISSED, with what was measured."""
    for what, ok, got in targets:
        print(f"  {'met   ' if ok else 'MISSED'}  {what}: {got}")


def markdown_targets(targets: Sequence[Target]) -> list[str]:
    """The targets of a results page, as a section."""
    return ["", "Targets:", ""] + [
        f"- {'met' if ok else '**missed**'}: {what} — {got}" for what, ok, got in targets
    ]


def targets_json(targets: Sequence[Target]) -> list[dict[str, Any]]:
    """The targets as the JSON results hold them."""
    return [{"target": w, "met": ok, "value": g} for w, ok, g in targets]


def command_line() -> str:
    """The command that produced these results, as a user would type it."""
    script = Path(sys.argv[0])
    try:
        shown = script.resolve().relative_to(REPO)
    except ValueError:
        shown = script
    return " ".join(["python", str(shown), *sys.argv[1:]])


def usable_executors(parser: argparse.ArgumentParser, names: Sequence[str]) -> list[str]:
    """The executors of ``names`` that can run here; ``dask`` is dropped (with a note) when
    ``distributed`` or dagagent's dask executor cannot be imported. Unknown names are errors."""
    from dagagent.executors import EXECUTORS

    if not names:
        parser.error("--executors names no executor")
    kept = []
    for name in names:
        if name not in EXECUTORS:
            parser.error(f"unknown executor {name!r}: choose from {', '.join(EXECUTORS)}")
        if name == "dask":
            why = _dask_missing()
            if why:
                print(f"note: skipping the dask executor: {why}", file=sys.stderr)
                continue
        if name not in kept:
            kept.append(name)
    if not kept:
        parser.error("none of the requested executors can run here")
    return kept


def _dask_missing() -> str | None:
    if importlib.util.find_spec("distributed") is None:
        return "'distributed' is not installed (pip install 'dagagent[dask]')"
    try:
        importlib.import_module("dagagent.executors.dask")
    except ImportError as exc:
        return f"dagagent.executors.dask cannot be imported ({exc})"
    return None
