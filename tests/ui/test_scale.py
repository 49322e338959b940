"""What the viewer sends does not grow with the run: a deep chain is collapsed by depth as
well as width, so the page, its live part, a task's panel and the report stay the same size
from 1,000 tasks to 5,000; and any task stays reachable (a box's levels, a search by id)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from dagagent.plan import Plan
from dagagent.results import RunStatus, TaskResult, TaskStatus
from dagagent.store import RunRecord
from dagagent.ui import build_view
from dagagent.ui.render import (
    REPORT_MAX_TASKS,
    Page,
    RunAround,
    render_panel,
    render_report,
    render_run,
)
from dagagent.ui.view import MAX_LEVEL_BOXES, PAGE_SIZE
from ui import runs as made
from ui.conftest import Server


def chain(n: int, *, failed: int | None = None) -> RunRecord:
    """A finished run of a chain of ``n`` tasks (each depends on the one before), each task
    taking 1 ms; task ``failed`` (if any) failed, the tasks after it were skipped, and the run
    failed."""
    plan = Plan.model_validate(
        {
            "goal": f"a chain of {n}",
            "tasks": [
                {"id": f"t{i}", "tool": "step", "args": {"i": i}, "depends_on": [f"t{i - 1}"]}
                if i
                else {"id": "t0", "tool": "step", "args": {"i": 0}}
                for i in range(n)
            ],
        }
    )
    tasks = {}
    for i in range(n):
        if failed is not None and i > failed:
            tasks[f"t{i}"] = TaskResult(
                task_id=f"t{i}", status=TaskStatus.SKIPPED, error=f"t{failed} failed"
            )
            continue
        bad = i == failed
        tasks[f"t{i}"] = TaskResult(
            task_id=f"t{i}",
            status=TaskStatus.FAILED if bad else TaskStatus.SUCCEEDED,
            output=None if bad else i,
            error="boom: the step broke" if bad else None,
            started_at=100.0 + i * 0.001,
            finished_at=100.0 + (i + 1) * 0.001,
            args={"i": i},
        )
    return RunRecord(
        run_id="abcdef012345",
        parent_id=None,
        created=100.0,
        goal=f"a chain of {n}",
        status=RunStatus.FAILED if failed is not None else RunStatus.SUCCEEDED,
        executor="dataflow",
        started_at=100.0,
        finished_at=100.0 + n * 0.001,
        critical_path=[],
        critical_path_s=None,
        plan=plan,
        tasks=tasks,
    )


@pytest.fixture(scope="module")
def chains() -> dict[int, RunRecord]:
    return {n: chain(n, failed=n - 3) for n in (1000, 5000)}


def test_a_deep_chains_page_and_live_part_stay_the_same_size(chains: dict[int, RunRecord]) -> None:
    small, big = (render_run(chains[n], page=Page(), around=RunAround()) for n in (1000, 5000))
    assert small.count('class="level-box"') == big.count('class="level-box"') == MAX_LEVEL_BOXES
    assert 'data-level="4900-4999"' in big  # the last box holds the last 100 levels
    assert len(big) < len(small) * 1.1, (len(small), len(big))
    assert len(big) < 400_000
    live = [
        render_run(chains[n], page=Page(), around=RunAround(), live_only=True, now=200.0)
        for n in (1000, 5000)
    ]
    assert len(live[1]) < len(live[0]) * 1.1, [len(x) for x in live]
    assert "each box holds 100 consecutive levels" in big


def test_one_failed_task_among_thousands_shows_in_its_box(chains: dict[int, RunRecord]) -> None:
    dag = build_view(chains[5000]).dag
    (box,) = [b for b in dag.levels if b.level <= 4997 <= b.last]
    assert box.counts == [("succeeded", 97), ("failed", 1), ("skipped", 2)]
    (seg,) = [w for s, _, w in box.segments if s == "failed"]
    assert seg >= 3  # px: visible, not 1/100 of the bar
    assert sum(w for _, _, w in box.segments) == pytest.approx(dag.node_w - 16)
    html = render_run(chains[5000], page=Page(), around=RunAround())
    # The box names the first status that went wrong (its tooltip has every count).
    assert "100 tasks · 1 failed</text>" in html
    assert "levels 4,900–4,999: 100 tasks, 97 succeeded, 1 failed, 2 skipped</title>" in html


def test_a_tasks_panel_does_not_lay_out_the_run(chains: dict[int, RunRecord]) -> None:
    view = build_view(chains[5000])
    panel = render_panel(view, "t4997", page=Page())
    assert "boom: the step broke" in panel and "level 4997" in panel
    # Neither the DAG nor the timeline, nor every task's wait, was computed for it.
    assert {"dag", "timeline", "waits"}.isdisjoint(vars(view))
    assert view.wait_of("t4997") == view.waits["t4997"]


def test_a_deep_chains_report_holds_a_bounded_number_of_tasks_and_says_so(
    chains: dict[int, RunRecord],
) -> None:
    small, big = (render_report(chains[n]) for n in (1000, 5000))
    assert len(big) < len(small) * 1.1, (len(small), len(big))
    templates = re.findall(r'<template class="panel-src" data-task="([^"]+)"', big)
    rows = re.findall(r'<tr class="task-row[^"]*" data-task="([^"]+)"', big)
    assert len(templates) == len(rows) == REPORT_MAX_TASKS
    # Those that did not succeed first, deep as they are, and in plan order.
    assert templates[-3:] == ["t4997", "t4998", "t4999"]
    assert "4,500 more are left out" in big
    assert "dagagent show abcdef012345 --task ID" in big


def test_a_small_runs_report_holds_every_task() -> None:
    html = render_report(chain(30))
    assert len(re.findall(r'<template class="panel-src"', html)) == 30
    assert "left out" not in html


def test_a_box_opens_the_table_filtered_to_its_levels(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    run_id = made.record_chain(path, 600)
    with Server(path) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        page = client.get(f"/runs/{run_id}")
        assert page.status_code == 200
        boxes = re.findall(r'href="[^"]*\?level=(\d+-\d+)#tasks"', page.text)
        assert len(boxes) == MAX_LEVEL_BOXES and boxes[0] == "0-11" and boxes[-1] == "588-599"
        band = client.get(f"/runs/{run_id}?level=12-23")
        levels = re.findall(r'class="task-row[^>]*data-level="(\d+)"', band.text)
        assert levels == [str(i) for i in range(12, 24)]
        assert "levels 12–23 ×" in band.text
        paged = client.get(f"/runs/{run_id}?level=0-299&page=3")
        levels = re.findall(r'class="task-row[^>]*data-level="(\d+)"', paged.text)
        assert levels == [str(i) for i in range(200, 200 + PAGE_SIZE)]
        for bad in ("5-2", "x", "-3", "1-y"):
            r = client.get(f"/runs/{run_id}", params={"level": bad})
            assert r.status_code == 400 and "level must be" in r.text, bad
        # Any task, however deep: its panel by id.
        panel = client.get(f"/runs/{run_id}/tasks/t599")
        assert panel.status_code == 200 and "level 599" in panel.text
        assert client.get(f"/runs/{run_id}/tasks/t600").status_code == 404
