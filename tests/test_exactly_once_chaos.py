"""Exactly once under SIGKILL: a few trials of the chaos harness (``chaos_harness.py``; run
it as a script for thousands of kills): random plans of side-effecting and pure tools, maps
and approvals, run by real processes killed at random moments and around their effects
(intent on record and effect not done; effect done and outcome not on record), resumed and
decided until done. Every effect is counted in a file of its own: none runs twice, none is
lost, every success stands, and no resume fails."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from chaos_harness import run_trial

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_effect_runs_twice_nor_is_lost_through_kills(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    trial = run_trial(tmp_path, rng, n_tasks=rng.randint(10, 40), max_kills=6)
    assert trial.problems == []
    assert trial.kills >= 1  # it was killed, and came back
