"""The safe calculator bounds the size of what it computes, however the expression nests."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dagagent.toolkits.calc import CalcError, evaluate


@pytest.mark.slow
@pytest.mark.parametrize(
    "expression",
    ["((9**999)**999)**19", "(9**999)**999", "*".join(["(2**999)"] * 12), "(7**999)**(3**6)"],
)
def test_results_too_large_are_refused_before_they_are_computed(expression: str) -> None:
    # in a child process with a deadline: the unbounded version holds the GIL for minutes
    code = (
        "from dagagent.toolkits.calc import evaluate, CalcError\n"
        f"try:\n    evaluate({expression!r})\nexcept CalcError as e:\n    print('refused:', e)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    assert "refused: the result is too large" in proc.stdout, proc.stderr
    with pytest.raises(CalcError, match="too large"):
        evaluate(expression)


def test_ordinary_large_numbers_still_work() -> None:
    assert evaluate("2**999") == 2**999
    assert evaluate("(-3)**5") == -243
    assert evaluate("(2**500)*(2**400)") == 2**900
    assert evaluate("1**999") == 1
