"""Exactly once under SIGKILL: a short sweep of the chaos harness (``chaos_harness.py``; run
it as a script for thousands of kills): random plans of side-effecting and pure tools, maps,
agent tasks and approvals, run three at a time by real processes killed at random moments and
around their effects (intent on record and effect not done; effect done and outcome not on
record), resumed and decided until done. Every effect is counted in a file of its own: none
runs twice, none is lost, every success stands, and no resume fails. The two sweeps make a
few hundred kills between them, each interrupting the runs in flight.

The harness runs as a script, in a process of its own: it forks the processes it kills, and a
process that forks should have no other thread (pytest's may). Its stores go to a memory-backed
directory when there is one: a SIGKILL loses nothing the kernel holds, so the disk's flushes
guard against nothing these kills do, and on a machine whose disk is shared they are what the
sweep would wait for most."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

HARNESS = Path(__file__).with_name("chaos_harness.py")
KILLS = 100  # per sweep
MEMORY = Path("/dev/shm")


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    if not (MEMORY.is_dir() and os.access(MEMORY, os.W_OK)):
        yield tmp_path / "work"
        return
    with tempfile.TemporaryDirectory(prefix="dagagent-chaos-", dir=MEMORY) as where:
        yield Path(where)


@pytest.mark.parametrize("seed", [1, 2])
def test_no_effect_runs_twice_nor_is_lost_through_kills(
    tmp_path: Path, workdir: Path, seed: int
) -> None:
    figures = tmp_path / "figures.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(HARNESS),
            "--kills",
            str(KILLS),
            "--seed",
            str(seed),
            "--min-tasks",
            "5",
            "--max-tasks",
            "15",
            "--runs-per-process",
            "3",
            "--max-kills-per-trial",
            "24",
            "--dir",
            str(workdir),
            "--json",
            str(figures),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    got = json.loads(figures.read_text())
    assert got["problems"] == [], proc.stdout
    assert got["kills"] >= KILLS
    # every kill interrupted at least one run in flight, most of them several
    assert got["runs_interrupted"] >= got["kills"], got
    # kills landed at every kind of point, the calls in doubt were decided
    assert set(got["kill_points"]) == {"before", "during", "after", "time"}, got
    assert got["in_doubt_decided"] > 0, got
