"""What the run store keeps per call of a tool with side effects: the bytes of its outputs on
record, and the bytes the store file grows by, per call, against the same tasks with a tool
without side effects (same outputs).

Two plans of ``--tasks`` calls, each with outputs of ``--sizes`` bytes: tool tasks (one call
each) and one map task of as many elements. For each, the store after the run holds:

- ``output bytes on record``: the length of every output column that holds a call's output
  (the call's row in ``effects``, the task's row, an element's object in its map task's row);
- ``file bytes per call``: the store file, vacuumed, minus the same plan run with a tool
  without side effects, divided by the calls (what a side-effecting call adds: its row in
  ``effects``, with its key, arguments and states, and whatever it repeats).

``--baseline PATH`` measures another checkout too (a build before a change), in a process
of its own that imports dagagent from PATH, and shows the two side by side.

    python benchmarks/effect_storage.py
    python benchmarks/effect_storage.py --baseline ../main --write
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from _common import (
    add_output_options,
    command_line,
    machine_info,
    machine_line,
    markdown_table,
    result_dir,
    text_table,
    write_results,
)

SHAPES = ("tool tasks", "map elements")


def _registry(size: int) -> Any:
    import dagagent

    reg = dagagent.Registry()
    payload = "x" * max(0, size - 20)

    @reg.tool(blocking=False)
    def pure(i: int) -> dict[str, Any]:
        return {"i": i, "p": payload}

    @reg.tool(blocking=False, side_effects=True)
    def effect(i: int) -> dict[str, Any]:
        return {"i": i, "p": payload}

    return reg


def _plan(tool: str, n: int, shape: str) -> dict[str, Any]:
    if shape == "map elements":
        task = {"id": "each", "tool": tool, "for_each": list(range(n)), "args": {"i": "${@item}"}}
        return {"goal": "bench", "tasks": [task]}
    return {
        "goal": "bench",
        "tasks": [{"id": f"t{i}", "tool": tool, "args": {"i": i}} for i in range(n)],
    }


def _output_bytes(db: Path) -> int:
    """The bytes of every output on record: the calls' rows, the tasks' rows, the elements'."""
    with sqlite3.connect(db) as conn:
        total = conn.execute("SELECT COALESCE(SUM(LENGTH(output)), 0) FROM tasks").fetchone()[0]
        total += conn.execute("SELECT COALESCE(SUM(LENGTH(output)), 0) FROM effects").fetchone()[0]
        for (elements,) in conn.execute("SELECT elements FROM tasks WHERE elements IS NOT NULL"):
            total += sum(len(e.get("output") or "") for e in json.loads(elements))
    return int(total)


def _file_bytes(db: Path) -> int:
    """The store's size once vacuumed, with nothing left in its write-ahead log."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return db.stat().st_size


def _run(plan: dict[str, Any], reg: Any, db: Path) -> None:
    import dagagent

    async def go() -> None:
        result = await dagagent.execute(plan, reg, store=db)
        assert result.status is dagagent.RunStatus.SUCCEEDED, result.tasks

    anyio.run(go)


def measure(n: int, sizes: list[int]) -> dict[str, Any]:
    """``{shape: {size: {"outputs_per_call": ..., "file_per_call": ...}}}``, with this
    process's dagagent."""
    import dagagent

    out: dict[str, Any] = {"version": dagagent.__version__, "schema": None, "figures": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for shape in SHAPES:
            for size in sizes:
                reg = _registry(size)
                dbs = {}
                for tool in ("pure", "effect"):
                    db = Path(tmp) / f"{shape.replace(' ', '-')}-{size}-{tool}.db"
                    _run(_plan(tool, n, shape), reg, db)
                    dbs[tool] = db
                with sqlite3.connect(dbs["effect"]) as conn:
                    out["schema"] = conn.execute("PRAGMA user_version").fetchone()[0]
                added = _file_bytes(dbs["effect"]) - _file_bytes(dbs["pure"])
                out["figures"].setdefault(shape, {})[str(size)] = {
                    "outputs_per_call": _output_bytes(dbs["effect"]) / n,
                    "file_per_call": added / n,
                }
    return out


def _baseline(path: Path, n: int, sizes: list[int]) -> dict[str, Any]:
    """:func:`measure` in a process that imports dagagent from checkout ``path``."""
    path = path.resolve()
    env = {**os.environ, "PYTHONPATH": str(path)}
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import effect_storage as m; "
        "print(json.dumps(m.measure(int(sys.argv[2]), json.loads(sys.argv[3]))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(Path(__file__).parent), str(n), json.dumps(sizes)],
        env=env,
        cwd=path,  # the checkout's own package, not the one of the current directory
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--sizes", default="100,1000,10000", help="output sizes, bytes")
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout to measure")
    add_output_options(parser)
    args = parser.parse_args(argv)
    n, sizes = args.tasks, [int(s) for s in args.sizes.split(",")]
    builds = {}
    if args.baseline is not None:
        builds["before"] = _baseline(args.baseline, n, sizes)
    builds["this build"] = measure(n, sizes)
    headers = ["build (schema)", "calls", "output bytes", "output bytes on record per call"]
    headers += ["store file bytes added per call"]
    rows = []
    for name, got in builds.items():
        for shape in SHAPES:
            for size in sizes:
                f = got["figures"][shape][str(size)]
                rows.append(
                    [
                        f"{name} ({got['schema']})",
                        shape,
                        f"{size:,}",
                        f"{f['outputs_per_call']:,.0f}",
                        f"{f['file_per_call']:,.0f}",
                    ]
                )
    info = machine_info()
    print(machine_line(info))
    print(text_table(headers, rows))
    out = result_dir(args)
    if out is not None:
        md = (
            "# What the store keeps per side-effecting call\n\n"
            f"`{command_line()}`: {n} calls per plan, outputs of {args.sizes} bytes, store on; "
            "the file vacuumed, against the same plan with a tool without side effects.\n\n"
            f"{machine_line(info)}\n\n{markdown_table(headers, rows)}\n\n"
            "Output bytes on record counts every column holding a call's output (its row in "
            "`effects`, its task's row, its element's object in the map task's row).\n"
        )
        data = {"command": command_line(), "machine": info, "calls": n, "builds": builds}
        for path in write_results(out, "effect_storage", data, md):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
