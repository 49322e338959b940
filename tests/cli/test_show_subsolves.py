"""``dagagent show`` of a solve lists the sub-solves under the task that started them; a
sub-solve's says whose it is."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest
from cli_shell import app_for
from typer.testing import CliRunner
from workflows.test_subsolve import GOAL, Router, World, scripted

import dagagent
from dagagent.cli import _app as cli_app
from dagagent.store import RunStore


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DAGAGENT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DAGAGENT_TOOLS", raising=False)
    monkeypatch.setattr(cli_app.out, "_width", 200)
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def cli(*args: str) -> Any:
    return CliRunner().invoke(app_for(args), list(args))


def test_show_lists_the_sub_solves_of_each_task(home: Path) -> None:
    async def go() -> dagagent.Solution:
        async with scripted(Router(), 6) as llm:
            return await dagagent.solve(
                GOAL, World().registry, llm, sub_solves=True, store=home / "runs.db", stream=False
            )

    solution = anyio.run(go)
    assert solution.ok, solution.reason
    run_id = solution.run_id or ""
    with RunStore(home / "runs.db") as st:
        children = sorted(st.child_solves(solution.solve_id), key=lambda c: c.link.element or 0)
    eu, us = (c.solve_id for c in children)

    shown = cli("show", solution.solve_id)
    assert shown.exit_code == 0, shown.output
    text = shown.stdout
    assert f"round 1 (run {run_id}): answered" in text
    assert "and its sub-solves': 4 model calls" in text
    assert "  task best: 2 sub-solves (dagagent show ID)" in text
    assert re.search(rf"    \[0\] {eu} answered: Acme", text), text
    assert re.search(rf"    \[1\] {us} answered: Bolt", text), text

    child = cli("show", us)
    assert child.exit_code == 0, child.output
    assert (
        f"a sub-solve (depth 1) of task 'best' (element 1) of run {run_id}, solve "
        f"{solution.solve_id} (dagagent show {solution.solve_id})"
    ) in child.stdout
    assert "goal: Find the best steel supplier in US" in child.stdout

    run = cli("show", run_id)  # a round's run lists them too
    assert run.exit_code == 0, run.output
    assert "task best: 2 sub-solves" in run.stdout and f"[1] {us} answered: Bolt" in run.stdout
