"""Exactly once under SIGKILL: a short sweep of the chaos harness (``chaos_harness.py``; run
it as a script for thousands of kills): random plans of side-effecting and pure tools, maps,
agent tasks and approvals, run by real processes killed at random moments and around their
effects (intent on record and effect not done; effect done and outcome not on record),
resumed and decided until done. Every effect is counted in a file of its own: none runs
twice, none is lost, every success stands, and no resume fails.

The harness runs as a script, in a process of its own: it forks the processes it kills, and a
process that forks should have no other thread (pytest's may)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

HARNESS = Path(__file__).with_name("chaos_harness.py")


@pytest.mark.parametrize("seed", [1, 2])
def test_no_effect_runs_twice_nor_is_lost_through_kills(tmp_path: Path, seed: int) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(HARNESS),
            "--kills",
            "12",
            "--seed",
            str(seed),
            "--min-tasks",
            "10",
            "--max-tasks",
            "30",
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = proc.stdout.strip().splitlines()
    assert any(line.endswith(": 0 problems") for line in summary), proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
