"""Human-readable output of large plans and runs: summarised under the table, never a row per
task (100,000 rows took minutes to draw and no terminal shows them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dagagent.cli import _app as cli_app, app
from dagagent.cli.render import MAX_ROWS, path_text

N = 1000


@pytest.fixture
def big_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DAGAGENT_DEMO_LATENCY", "0")
    monkeypatch.delenv("DAGAGENT_TOOLS", raising=False)
    monkeypatch.setattr(cli_app.out, "_width", 200)
    tasks: list[dict[str, Any]] = [
        {"id": f"t{i}", "tool": "calculate", "args": {"expression": f"{i} + 1"}} for i in range(N)
    ]
    tasks[N - 1]["args"] = {"expression": "1 / 0"}  # one failure, last in plan order
    tasks.append({"id": "chain", "tool": "calculate", "args": {"expression": "${t0} + 1"}})
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"goal": "many sums", "tasks": tasks}))
    return path


def _rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("│")]


def test_validate_shows_the_first_tasks_of_a_large_plan_and_counts_the_rest(
    big_plan: Path,
) -> None:
    res = CliRunner().invoke(app, ["validate", str(big_plan)])
    assert res.exit_code == 0, res.output
    assert len(_rows(res.output)) == MAX_ROWS
    assert f"… and {N + 1 - MAX_ROWS} more tasks ({N + 1 - MAX_ROWS} calculate)" in res.output
    assert f"valid: {N + 1} tasks in 2 levels" in res.output


def test_run_shows_what_did_not_succeed_first_and_counts_the_rest(big_plan: Path) -> None:
    res = CliRunner().invoke(app, ["run", str(big_plan), "--on-failure", "continue"])
    assert res.exit_code == 1, res.output
    table = res.output[res.output.index("┏") :]
    rows = _rows(table)
    assert len(rows) == MAX_ROWS
    assert any("t999" in row and "failed" in row for row in rows)  # past the first rows
    assert f"… and {N + 1 - MAX_ROWS} more tasks ({N + 1 - MAX_ROWS} succeeded)" in table


def test_a_long_critical_path_is_shown_by_its_ends() -> None:
    path = [f"t{i}" for i in range(1000)]
    assert path_text(path) == "t0 -> t1 -> t2 -> t3 -> t4 -> … (990 more) -> " + " -> ".join(
        path[-5:]
    )
    assert path_text(path[:3]) == "t0 -> t1 -> t2"
    assert path_text([]) == "-"  # nothing finished: a paused run ends "critical path 0.000s: -"


def test_every_status_has_its_style_looked_up_by_member_or_value() -> None:
    from dagagent.cli.render import STATUS_STYLE
    from dagagent.results import TaskStatus

    assert set(STATUS_STYLE) == {s.value for s in TaskStatus}
    for status in TaskStatus:
        assert STATUS_STYLE.get(status) == STATUS_STYLE[status.value] != ""


@pytest.mark.slow
def test_showing_a_plan_imports_no_results() -> None:
    """dagagent validate draws the plan's table without the run results module (its models
    cost a start-up that runs nothing)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from dagagent.graph import validate\n"
        "from dagagent.cli.render import plan_table\n"
        "plan_table(validate({'tasks': [{'id': 'a', 'tool': 't'}]}))\n"
        "assert 'dagagent.results' not in sys.modules, 'results imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
