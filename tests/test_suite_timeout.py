"""The suite's own guard against a hung test: it ends, naming the test, even when the test is
a Hypothesis test (which catches an exception raised inside it as a failure and replays the
example: pytest-timeout's signal method then hangs for ever, as the property test of calls in
doubt once did)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a pytest of its own, in a process of its own

ROOT = Path(__file__).resolve().parents[1]
HUNG = textwrap.dedent(
    """
    import anyio
    from hypothesis import given, settings, strategies as st

    @settings(deadline=None, database=None)
    @given(st.integers())
    def test_waits_for_an_event_nobody_sets(n):
        async def wait():
            await anyio.Event().wait()

        anyio.run(wait)
    """
)


def test_a_hung_hypothesis_test_ends_the_run_naming_it(tmp_path: Path) -> None:
    (tmp_path / "test_hung.py").write_text(HUNG)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml")),
            *("-p", "no:xdist", "--timeout", "2", str(tmp_path / "test_hung.py")),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=90,  # the guard under test ends it long before; this bounds a broken guard
    )
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "Timeout" in out and "test_waits_for_an_event_nobody_sets" in out, out[-2000:]
