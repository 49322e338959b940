"""Two real ``dagagent resume`` processes racing for one interrupted run on a shared store.

A ``dagagent run`` is killed (SIGKILL) by its own payment once the payment is made and before
its outcome is on record: the call is in doubt. Then two ``dagagent resume`` processes start;
loading the tools is a barrier (``race_tools.py``), so both ask for the run at the same moment.
Exactly one claims it; the other is refused at once (exit 7, naming the process that holds
the run) while the first still holds it (its last task waits for the test's word). The
winner reconciles the call in doubt (the payment happened: its output, not a second payment)
and ends the run; no payment is made twice."""

from __future__ import annotations

import json
import os
import select
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_shell import CRASH, TIMEOUT, Shell

pytestmark = [
    pytest.mark.slow,  # real processes: a SIGKILL and a race are the point
    pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="waits on pidfds (Linux)"),
]

PLAN = {
    "goal": "pay twice, then hold the run",
    "tasks": [
        {"id": "first", "tool": "pay", "args": {"n": 1}},
        {"id": "second", "tool": "pay", "args": {"n": 2}, "depends_on": ["first"]},
        {"id": "last", "tool": "hold", "args": {}, "depends_on": ["second"]},
    ],
}
TOOLS = ("--tools", "race_tools.py:registry")
RACE_TOOLS = Path(__file__).parents[1] / "race_tools.py"


class Race:
    """A working directory with the race's tools, its effect log and its FIFOs (held open
    for reading and writing by the test, so that opening them never blocks a process)."""

    def __init__(self, tmp_path: Path) -> None:
        shutil.copy(RACE_TOOLS, tmp_path / "race_tools.py")
        self.sh = Shell(tmp_path, RACE_DIR=str(tmp_path))
        self.dir = tmp_path
        with sqlite3.connect(tmp_path / "effects.db") as conn:
            conn.execute("CREATE TABLE effects (key TEXT NOT NULL, output TEXT NOT NULL)")
        self.fifos: dict[str, int] = {}
        for name in ("ready", "go", "release"):
            os.mkfifo(tmp_path / name)
            self.fifos[name] = os.open(tmp_path / name, os.O_RDWR)
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
        """A real ``dagagent ARGS`` process; its output goes to ``name.out`` and ``name.err``."""
        with (
            open(self.dir / f"{name}.out", "wb") as out,
            open(self.dir / f"{name}.err", "wb") as err,
        ):
            proc = subprocess.Popen(
                self.sh.argv(*args),
                cwd=self.dir,
                env={**self.sh.env, **env},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        self.procs.append(proc)
        return proc

    def output(self, name: str) -> tuple[str, str]:
        return (self.dir / f"{name}.out").read_text(), (self.dir / f"{name}.err").read_text()

    def pids_ready(self, count: int, procs: list[subprocess.Popen[bytes]]) -> list[int]:
        """The pids ``count`` processes wrote to ``ready`` (each is then waiting on ``go``)."""
        text = b""
        while text.count(b"\n") < count:
            ended = [p.args for p in procs if p.poll() is not None]
            assert not ended, f"a process ended before the barrier: {ended}"
            readable, _, _ = select.select([self.fifos["ready"]], [], [], TIMEOUT)
            assert readable, f"the processes did not reach the barrier in {TIMEOUT} s"
            text += os.read(self.fifos["ready"], 4096)
        return [int(line) for line in text.split()]

    def effects(self) -> list[dict[str, Any]]:
        with sqlite3.connect(self.dir / "effects.db") as conn:
            rows = conn.execute("SELECT key, output FROM effects ORDER BY rowid").fetchall()
        return [{"key": key, **json.loads(output)} for key, output in rows]

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for fd in self.fifos.values():
            os.close(fd)


@pytest.fixture
def race(tmp_path: Path) -> Iterator[Race]:
    race = Race(tmp_path)
    try:
        yield race
    finally:
        race.close()


def first_to_end(procs: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """The first of ``procs`` to end (it is reaped; the others are left running)."""
    fds = {os.pidfd_open(p.pid): p for p in procs}
    try:
        readable, _, _ = select.select(list(fds), [], [], TIMEOUT)
    finally:
        for fd in fds:
            os.close(fd)
    assert readable, f"neither process ended in {TIMEOUT} s"
    ended = fds[readable[0]]
    ended.wait()
    return ended


def test_two_processes_resuming_at_once_one_claims_the_other_is_refused(race: Race) -> None:
    race.sh.write_plan(PLAN)
    crashed = race.start("crash", "run", "plan.json", *TOOLS, RACE_CRASH="2")
    assert crashed.wait(TIMEOUT) == -9, race.output("crash")
    (summary,) = race.sh.json("runs")["runs"]
    run = str(summary["run_id"])
    assert race.sh.json("show", run)["status"] == "interrupted"
    paid = race.effects()
    assert [e["paid"] for e in paid] == [1, 2]  # the second payment was made, then the kill

    a = race.start("a", "resume", run, *TOOLS, "--json", RACE_BARRIER="1")
    b = race.start("b", "resume", run, *TOOLS, "--json", RACE_BARRIER="1")
    assert sorted(race.pids_ready(2, [a, b])) == sorted([a.pid, b.pid])
    os.write(race.fifos["go"], b"..")  # both ask for the run now

    loser = first_to_end([a, b])
    winner = b if loser is a else a
    name, other = ("a", "b") if loser is a else ("b", "a")
    out, err = race.output(name)
    assert loser.returncode == 7, (out, err, race.output(other))
    assert CRASH not in err, err
    assert f"run {run} is running (process {winner.pid})" in err, err
    assert "another 'dagagent resume'" in err, err
    assert winner.poll() is None, race.output(other)  # it still holds the run

    os.write(race.fifos["release"], b".")
    assert winner.wait(TIMEOUT) == 0, race.output(other)
    result = json.loads(race.output(other)[0])
    assert result["status"] == "succeeded", result
    assert result["tasks"]["last"]["output"] == winner.pid

    # no payment made twice: the one in doubt was found made (its output is the killed
    # process's), the first was not made again
    assert race.effects() == paid
    record = race.sh.json("show", run)
    assert record["status"] == "succeeded"
    assert record["tasks"]["first"]["output"] == paid[0]
    assert record["tasks"]["second"]["output"] == paid[1]
    assert paid[1]["pid"] == crashed.pid != winner.pid
