"""The viewer in a real browser (Playwright driving Chromium): the runs list, a run's graph,
timeline and task panel, hostile text staying text, a running run updating, the report
opened from a file. Screenshots of both pages are kept as test artefacts."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest
from eventually import wait_until
from playwright.sync_api import expect

import dagagent
from dagagent.settings import RunSettings
from dagagent.store import RunStore
from dagagent.ui.render import render_report
from ui import runs as made
from ui.conftest import Server, Store

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def artefacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("DAGAGENT_TEST_ARTEFACTS")
    path = Path(where) if where else tmp_path_factory.getbasetemp() / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_the_runs_list_shows_every_run_with_replans_under_their_parent(
    page: Any, server: Server, store: Store, tmp_path_factory: pytest.TempPathFactory
) -> None:
    page.goto(server.url + "/")
    rows = page.locator("tr.run-row")
    assert rows.count() == 3
    ids = [rows.nth(i).get_attribute("data-run") for i in range(3)]
    # The replan comes right after the run it revises, indented.
    assert ids.index(store.replan) == ids.index(store.failed) + 1
    assert "depth-1" in (page.locator(f'tr[data-run="{store.replan}"]').get_attribute("class"))
    statuses = {
        rows.nth(i).get_attribute("data-run"): rows.nth(i).get_attribute("data-status")
        for i in range(3)
    }
    assert statuses == {
        store.finished: "succeeded",
        store.failed: "failed",
        store.replan: "succeeded",
    }
    # The hostile goal is text: no script ran (the page fixture fails on any dialog).
    goal = page.locator(f'tr[data-run="{store.finished}"] .goal-text')
    assert made.XSS in goal.inner_text()
    assert page.locator("main script").count() == 0
    page.screenshot(path=str(artefacts(tmp_path_factory) / "runs.png"), full_page=True)
    page.click('.filters a[data-filter="failed"]')
    page.wait_for_url("**/?status=failed")
    assert page.locator("tr.run-row").count() == 1
    assert page.locator("tr.run-row").get_attribute("data-run") == store.failed


def _geometry(page: Any, selector: str) -> dict[str, float]:
    """The x and width of an SVG shape in its user space, without its stroke."""
    box: dict[str, float] = page.locator(selector).evaluate(
        "e => { const b = e.getBBox(); return {x: b.x, width: b.width}; }"
    )
    return box


def _check_run_page(page: Any, store: Store) -> None:
    with RunStore(store.path) as st:
        record = st.get_run(store.finished)
    # The graph: one node per task, each with its recorded status.
    nodes = page.locator(".dag .node")
    assert nodes.count() == len(record.plan.tasks) == 6
    for i in range(nodes.count()):
        tid = nodes.nth(i).get_attribute("data-task")
        assert nodes.nth(i).get_attribute("data-status") == record.tasks[tid].status.value
    assert page.locator(".dag .node.s-succeeded").count() == 6
    # The critical path: fetch -> rank -> report (the longest chain of sleeps).
    crit = page.locator(".dag .node.crit")
    assert sorted(crit.nth(i).get_attribute("data-task") for i in range(crit.count())) == [
        "fetch",
        "rank",
        "report",
    ]
    # The timeline: bars in start order, each as long as the task took.
    bars = page.locator(".timeline .bar")
    assert bars.count() == 6
    starts = {}
    widths = {}
    for i in range(bars.count()):
        tid = bars.nth(i).get_attribute("data-task")
        starts[tid] = record.tasks[tid].started_at
        widths[tid] = bars.nth(i).locator("rect.run").bounding_box()["width"]
    order = [bars.nth(i).get_attribute("data-task") for i in range(bars.count())]
    assert order == sorted(order, key=lambda t: starts[t])
    px_per_s = widths["rank"] / record.tasks["rank"].duration_s
    for tid in ("fetch", "parse", "merge", "report"):
        expected = record.tasks[tid].duration_s * px_per_s
        assert widths[tid] == pytest.approx(expected, rel=0.05, abs=2.0), tid
    # rank starts after fetch ends: its bar starts where fetch's ends. The bars' geometry
    # (getBBox: a critical bar's 2 px stroke left out), compared within 1 px, since the
    # coordinates are floats written to one decimal.
    fetch = _geometry(page, '.timeline .bar[data-task="fetch"] rect.run')
    rank = _geometry(page, '.timeline .bar[data-task="rank"] rect.run')
    assert rank["x"] >= fetch["x"] + fetch["width"] - 1
    # ... exactly as much later as recorded (rank waits a few milliseconds for fetch)
    gap_s = record.tasks["rank"].started_at - record.tasks["fetch"].finished_at
    assert rank["x"] == pytest.approx(fetch["x"] + fetch["width"] + gap_s * px_per_s, abs=1.0)
    # A task panel: its output, arguments and approval decision; hostile output is text.
    page.click('.dag .node[data-task="hostile"]')
    panel = page.locator("#panel")
    panel.wait_for(state="visible")
    assert panel.locator("pre.output").inner_text() == made.XSS
    assert panel.locator("script").count() == 0
    assert "allow" in panel.locator("table.decisions").inner_text()
    page.click('.dag .node[data-task="rank"]')
    expect(panel.locator(".panel-inner")).to_have_attribute("data-task", "rank")
    assert '"slept": 0.6' in panel.locator("pre.output").inner_text()
    assert "on the critical path" in panel.inner_text()


def test_a_run_page_draws_its_graph_timeline_and_task_panel(
    page: Any, server: Server, store: Store, tmp_path_factory: pytest.TempPathFactory
) -> None:
    page.goto(f"{server.url}/runs/{store.finished}")
    assert made.XSS in page.locator("h1.goal").inner_text()
    shots = artefacts(tmp_path_factory)
    page.screenshot(path=str(shots / "run.png"), full_page=True)
    _check_run_page(page, store)
    page.screenshot(path=str(shots / "run-panel.png"), full_page=False)
    if os.environ.get("DAGAGENT_UPDATE_DOCS"):
        page.click("#panel .close")
        page.locator(".top .where").evaluate("e => { e.textContent = '.dagagent/runs.db'; }")
        page.screenshot(path=str(ROOT / "docs" / "viewer-run.png"), full_page=True)


def test_a_replan_is_shown_beside_its_parent(page: Any, server: Server, store: Store) -> None:
    page.goto(f"{server.url}/runs/{store.replan}")
    replan = page.locator("#replan")
    assert store.failed in replan.locator("h2").inner_text()
    assert replan.locator(".dag").count() == 2
    parent_nodes = replan.locator("figure").nth(0).locator(".node")
    assert parent_nodes.locator("xpath=.").count() == 3
    assert (
        replan.locator('figure >> nth=0 >> .node[data-task="parse"]').get_attribute("data-status")
        == "failed"
    )
    text = replan.inner_text()
    assert "parse" in text and 'tool: "boom" -> "echo"' in text
    assert replan.locator('.tag.reuse + code[data-task="fetch"]').count() == 1
    # Clicking the failed parent's task on the parent's page shows its error.
    page.goto(f"{server.url}/runs/{store.failed}#task=parse")
    panel = page.locator("#panel")
    panel.wait_for(state="visible")
    assert "ValueError" in panel.locator(".error-box").inner_text()
    assert "parser broke" in panel.locator(".error-box").inner_text()


def test_a_running_run_updates_without_reloading(page: Any, tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    gate = threading.Event()
    done: list[Any] = []
    t = threading.Thread(
        target=lambda: done.append(
            dagagent.execute_sync(
                made.running_plan(),
                made.registry(gate),
                store=path,
                settings=RunSettings(executor="dataflow"),
            )
        )
    )
    t.start()
    try:
        wait_until(lambda: path.exists() and _recorded(path, "quick"), "the run is recorded")
        with Server(path) as server:
            page.goto(server.url + "/")
            run_id = page.locator("tr.run-row").get_attribute("data-run")
            page.goto(f"{server.url}/runs/{run_id}")
            page.locator("h1.goal").evaluate("h => h.setAttribute('data-mark', 'same page')")
            assert page.locator("#live").get_attribute("data-status") == "running"
            assert (
                page.locator('.dag .node[data-task="held"]').get_attribute("data-status")
                == "pending"
            )
            gate.set()
            expect(page.locator("#live")).to_have_attribute(
                "data-status", "succeeded", timeout=20_000
            )
            assert (
                page.locator('.dag .node[data-task="held"]').get_attribute("data-status")
                == "succeeded"
            )
            assert page.locator(".summary .badge").inner_text() == "succeeded"
            # Not reloaded: the mark set on this page is still there.
            assert page.locator("h1.goal").get_attribute("data-mark") == "same page"
    finally:
        gate.set()
        t.join(30)
    assert done and done[0].ok


def _recorded(path: Path, task: str) -> bool:
    # The recorder creates the file before it writes the schema: until then a reader sees a
    # file that is not (yet) a run store.
    try:
        with RunStore(path, read_only=True) as st:
            return task in st.last_run().tasks
    except dagagent.errors.StoreError:
        return False


def test_the_report_opens_from_a_file_with_everything_inline(
    page: Any, store: Store, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    with RunStore(store.path, read_only=True) as st:
        html = render_report(st.get_run(store.finished))
    report = tmp_path / "run.html"
    report.write_text(html, encoding="utf-8")
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(report.as_uri())
    assert requests == [report.as_uri()]  # nothing else is fetched: no CDN, no server
    page.screenshot(path=str(artefacts(tmp_path_factory) / "report.png"), full_page=True)
    _check_run_page(page, store)
    # The task table's filter works without a server.
    page.click('#tasks .filters [data-filter="succeeded"]')
    assert page.locator("tr.task-row:visible").count() == 6
