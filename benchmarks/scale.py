"""What reviewing a big run costs: the viewer, the report and ``dagagent show`` over chains of
tasks (each task depending on the one before: as many levels as tasks, the deepest DAG there
is), and the memory a map task takes per element.

For each chain size (``--chains``) the script records a run of that many no-op tasks to a
fresh SQLite store, then measures:

- the run page (``GET /runs/RUN``) and its live part (``GET /runs/RUN/live``, what a running
  run's page fetches every second): bytes and seconds, the server's work included (the app is
  called in process through Starlette's test client, so no browser time is counted);
- a task's panel (``GET /runs/RUN/tasks/ID``, a task in the middle of the chain): bytes and
  seconds;
- the report (``dagagent report``, in a fresh process): bytes of the file and seconds;
- ``dagagent show RUN`` (in a fresh process, its output to a file): seconds and lines.

Then, for each map size (``--maps``), in a fresh process: a map task of that many elements of
an async no-op tool (``max_elements`` raised to fit, no other bound), and the process's peak
RSS over the run less the peak before it, per element.

Timings are single runs on whatever machine this is (seconds at this scale are not noisy at
the percent level that matters here); bytes do not depend on the machine. ``--label`` names the
code measured, so that two runs (the code before a change, with ``PYTHONPATH`` pointing at
its tree, and after) merge into one table: results already written under another label are
kept.

    python benchmarks/scale.py --label after --write
    PYTHONPATH=/path/to/old/tree python benchmarks/scale.py --label "before (COMMIT)" --write
    python benchmarks/scale.py --chains 1000 --maps 10000     # quick, prints only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common

NAME = "scale"


def _record_chain(n: int, store: Path) -> str:
    import dagagent

    registry = dagagent.Registry()

    @registry.tool
    async def step(i: int) -> int:
        """Return i."""
        return i

    plan = {
        "goal": f"a chain of {n} tasks",
        "tasks": [
            {
                "id": f"t{i}",
                "tool": "step",
                "args": {"i": i},
                "depends_on": [f"t{i - 1}"] if i else [],
            }
            for i in range(n)
        ],
    }
    result = asyncio.run(dagagent.execute(plan, registry, store=store))
    if not result.ok:
        raise SystemExit(f"the chain of {n} did not succeed: {result.counts}")
    return str(result.run_id)


def _timed_get(client: Any, url: str) -> tuple[int, float]:
    t0 = time.perf_counter()
    r = client.get(url)
    took = time.perf_counter() - t0
    if r.status_code != 200:
        raise SystemExit(f"GET {url}: {r.status_code} {r.text[:300]}")
    return len(r.content), took


def _cli(*args: str, out: Path) -> float:
    env = dict(os.environ, COLUMNS="120")
    t0 = time.perf_counter()
    with out.open("w", encoding="utf-8") as f:
        # From the output's folder: "python -m" puts the working directory first on the path,
        # and a checkout there would be imported instead of the dagagent being measured.
        proc = subprocess.run(
            [sys.executable, "-m", "dagagent", *args],
            stdout=f,
            stderr=subprocess.PIPE,
            env=env,
            cwd=out.parent,
        )
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"dagagent {' '.join(args)}: exit {proc.returncode}: {proc.stderr!r}")
    return took


def measure_chain(n: int, workdir: Path) -> dict[str, Any]:
    from starlette.testclient import TestClient

    from dagagent.ui.app import create_app

    store = workdir / f"chain-{n}.db"
    t0 = time.perf_counter()
    run_id = _record_chain(n, store)
    run_s = time.perf_counter() - t0
    row: dict[str, Any] = {"tasks": n, "run_s": run_s}
    with TestClient(create_app(store), base_url="http://127.0.0.1") as client:
        row["page_bytes"], row["page_s"] = _timed_get(client, f"/runs/{run_id}")
        row["live_bytes"], row["live_s"] = _timed_get(client, f"/runs/{run_id}/live")
        row["panel_bytes"], row["panel_s"] = _timed_get(client, f"/runs/{run_id}/tasks/t{n // 2}")
    report = workdir / f"report-{n}.html"
    row["report_s"] = _cli(
        "report", run_id, "--store", str(store), "-o", str(report), out=workdir / "report.out"
    )
    row["report_bytes"] = report.stat().st_size
    shown = workdir / f"show-{n}.txt"
    row["show_s"] = _cli("show", run_id, "--store", str(store), out=shown)
    row["show_lines"] = len(shown.read_text(encoding="utf-8").splitlines())
    return row


def _rss_bytes(field: str) -> int | None:
    """``VmRSS`` (now) or ``VmHWM`` (the peak) of this process, from ``/proc`` (Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    """Start the peak RSS afresh from now (Linux: ``/proc/self/clear_refs``)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _peak_rss_bytes() -> int:
    peak = _rss_bytes("VmHWM")
    if peak is not None:
        return peak
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


def measure_map(n: int) -> dict[str, Any]:
    """In this (fresh) process: a map of ``n`` elements; peak RSS added per element."""
    import dagagent
    from dagagent.settings import RunSettings

    registry = dagagent.Registry()

    @registry.tool
    def numbers(n: int) -> list[int]:
        """0 to n-1."""
        return list(range(n))

    @registry.tool
    async def square(x: int) -> int:
        """x squared."""
        return x * x

    plan = {
        "goal": f"a map of {n} elements",
        "tasks": [
            {"id": "xs", "tool": "numbers", "args": {"n": n}},
            {"id": "sq", "tool": "square", "for_each": "${xs}", "args": {"x": "${@item}"}},
        ],
    }
    # What the run adds to the process's peak: from the RSS just before it (the peak of
    # importing is not the map's), where the peak can be reset.
    now = _rss_bytes("VmRSS")
    before = now if now is not None and _reset_peak() else _peak_rss_bytes()
    t0 = time.perf_counter()
    result = asyncio.run(dagagent.execute(plan, registry, settings=RunSettings(max_elements=n)))
    took = time.perf_counter() - t0
    if not result.ok:
        raise SystemExit(f"the map of {n} did not succeed: {result.counts}")
    grown = _peak_rss_bytes() - before
    return {
        "elements": n,
        "run_s": took,
        "peak_rss_mb": _peak_rss_bytes() / 2**20,
        "bytes_per_element": grown / n,
    }


def _child_map(n: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child-map", str(n)],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    if proc.returncode != 0:
        raise SystemExit(f"the map of {n}: exit {proc.returncode}: {proc.stderr[-2000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _sizes(text: str) -> list[int]:
    return [int(s.replace("_", "")) for s in text.split(",") if s.strip()]


def _markdown(data: dict[str, Any]) -> str:
    lines = [
        "# What reviewing a big run costs",
        "",
        "Chains of no-op tasks (as many levels as tasks); the viewer's pages through the app in "
        "process, `report` and `show` as fresh processes; a map of an async no-op tool in a "
        "fresh process (peak RSS added, per element). One run each; see "
        "`benchmarks/scale.py` for what is measured.",
        "",
    ]
    for label, got in sorted(data["labels"].items()):
        lines += [
            f"## {label}",
            "",
            f"`{got['command']}`; dagagent from `{got['code']}`; {got['machine']['date']}; "
            f"{common.machine_line(got['machine'])}",
            "",
        ]
        rows = [
            [
                f"{r['tasks']:,}",
                f"{r['page_bytes']:,}",
                f"{r['page_s']:.2f}",
                f"{r['live_bytes']:,}",
                f"{r['live_s']:.2f}",
                f"{r['panel_bytes']:,}",
                f"{r['panel_s']:.2f}",
                f"{r['report_bytes']:,}",
                f"{r['report_s']:.1f}",
                f"{r['show_s']:.1f}",
                f"{r['show_lines']:,}",
            ]
            for r in got["chains"]
        ]
        if rows:
            lines.append(
                common.markdown_table(
                    [
                        "chain",
                        "page B",
                        "page s",
                        "live B",
                        "live s",
                        "panel B",
                        "panel s",
                        "report B",
                        "report s",
                        "show s",
                        "show lines",
                    ],
                    rows,
                )
            )
            lines.append("")
        maps = [
            [
                f"{m['elements']:,}",
                f"{m['bytes_per_element']:,.0f}",
                f"{m['peak_rss_mb']:,.0f}",
                f"{m['run_s']:.1f}",
            ]
            for m in got["maps"]
        ]
        if maps:
            lines.append(
                common.markdown_table(["map elements", "B / element", "peak RSS MB", "run s"], maps)
            )
            lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chains", default="10000,100000", help="chain sizes (tasks)")
    parser.add_argument("--maps", default="1000000", help="map sizes (elements)")
    parser.add_argument("--label", default="after", help="what code this is (before, after)")
    parser.add_argument("--child-map", type=int, help=argparse.SUPPRESS)
    common.add_output_options(parser)
    args = parser.parse_args()
    if args.child_map is not None:
        print(json.dumps(measure_map(args.child_map)))
        return
    info = common.machine_info()
    chains: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="dagagent-scale-") as tmp:
        for n in _sizes(args.chains):
            row = measure_chain(n, Path(tmp))
            chains.append(row)
            print(json.dumps(row), flush=True)
    maps = []
    for n in _sizes(args.maps):
        m = _child_map(n)
        maps.append(m)
        print(json.dumps(m), flush=True)
    import dagagent

    got = {
        "command": shlex.join(["python", "benchmarks/scale.py", *sys.argv[1:]]),
        "code": str(Path(dagagent.__file__).parent),
        "machine": info,
        "chains": chains,
        "maps": maps,
    }
    out = common.result_dir(args)
    data: dict[str, Any] = {"benchmark": NAME, "labels": {}}
    if out is not None and (out / f"{NAME}.json").is_file():
        data = json.loads((out / f"{NAME}.json").read_text(encoding="utf-8"))
    data["labels"][args.label] = got
    md = _markdown(data)
    print(md)
    if out is None:
        print("(printed only: pass --write to update benchmarks/results, or --out DIR)")
        return
    for p in common.write_results(out, NAME, data, md):
        print(f"wrote {p}")


if __name__ == "__main__":
    main()
