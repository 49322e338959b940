"""The viewer in a real browser (Playwright driving Chromium): the runs list, a run's graph,
timeline and task panel, hostile text staying text, a running run updating, the report
opened from a file. Screenshots of both pages are kept as test artefacts."""

from __future__ import annotations

import concurrent.futures
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


def test_a_running_run_updates_without_reloading(
    page: Any, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
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
            # The task that waits at the gate is on record as running since it started: its
            # node and its bar say so, with the time it has run so far, and the run's time,
            # which grow with each refresh.
            held = page.locator('.dag .node[data-task="held"]')
            assert held.get_attribute("data-status") == "running"
            assert page.locator('.timeline .bar.s-running[data-task="held"]').count() == 1
            assert page.locator('.tasks tr[data-task="held"] .badge').inner_text() == "running"
            so_far = held.locator(".ntime").text_content()
            elapsed = page.locator(".summary .elapsed").inner_text()
            assert so_far.endswith("…") and elapsed.endswith("…")
            expect(held.locator(".ntime")).not_to_have_text(so_far, timeout=20_000)
            expect(page.locator(".summary .elapsed")).not_to_have_text(elapsed, timeout=20_000)
            page.screenshot(path=str(artefacts(tmp_path_factory) / "running.png"), full_page=True)
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


def test_runs_that_are_not_simply_finished_say_what_happened(
    page: Any, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A paused run (what to run next, in the waiting colour), a resumed one (how long it
    waited for a person), a plan written while it ran (not planned yet), a map with a long
    tool name, and a run of no tasks: each page says what happened."""
    path = tmp_path / "runs.db"
    paused, resumed = made.record_paused_and_resumed(path)
    streamed = made.record_streamed(path)
    mapped = made.record_map_with_a_long_tool_name(path)
    nothing = made.record_nothing_planned(path)
    shots = artefacts(tmp_path_factory)
    with Server(path) as server:
        page.goto(f"{server.url}/runs/{paused}")
        step = page.locator("#next")
        assert "dagagent approve" in step.inner_text() and "dagagent resume" in step.inner_text()
        colour = step.evaluate("e => getComputedStyle(e).borderLeftColor")
        assert colour == "rgb(112, 72, 232)"  # the waiting colour, not an error's red
        assert page.locator(".timeline .bar[data-task='mail'] rect.approval").count() == 1
        page.screenshot(path=str(shots / "paused.png"), full_page=True)

        page.goto(f"{server.url}/runs/{resumed}")
        assert "waiting for a person's decision" in page.locator(".summary .elapsed").inner_text()
        hatch = page.locator(".timeline .bar[data-task='mail'] rect.approval")
        assert hatch.count() == 1 and hatch.get_attribute("fill") == "url(#approval-hatch)"
        page.screenshot(path=str(shots / "resumed.png"), full_page=True)

        page.goto(f"{server.url}/runs/{streamed}")
        unplanned = page.locator(".timeline .bar[data-task='late'] rect.unplanned")
        assert unplanned.count() == 1
        # the time before it was planned is never drawn as waiting after ready: a wait (if the
        # executor took a moment to start it once planned) begins where "not planned yet" ends
        planned_x = float(unplanned.get_attribute("x") or 0) + float(
            unplanned.get_attribute("width") or 0
        )
        for wait in page.locator(".timeline .bar[data-task='late'] rect.wait").all():
            assert float(wait.get_attribute("x") or 0) >= planned_x - 0.01
        assert "not planned yet" in page.locator("#timeline .legend").inner_text()
        crit = page.locator(".dag .node.crit")
        assert sorted(crit.nth(i).get_attribute("data-task") for i in range(crit.count())) == [
            "late",
            "total",
        ]
        page.screenshot(path=str(shots / "streamed.png"), full_page=True)

        page.goto(f"{server.url}/runs/{mapped}")
        node = page.locator(".dag .node[data-task='all']")
        assert node.locator(".nwhat").text_content().endswith("×3 (2 succeeded, 1 failed)")
        for n in range(page.locator(".dag .node").count()):  # every label inside its box
            g = page.locator(".dag .node").nth(n)
            box = g.locator("rect.box").bounding_box()
            for text in ("text.nid", "text.nwhat"):
                t = g.locator(text).bounding_box()
                assert t["x"] + t["width"] <= box["x"] + box["width"], text
        page.screenshot(path=str(shots / "map.png"), full_page=True)

        page.goto(f"{server.url}/runs/{nothing}")
        assert page.locator("#nothing").count() == 1
        assert "could not connect" in page.locator(".round-note").inner_text()
        page.screenshot(path=str(shots / "nothing-ran.png"), full_page=True)

        page.goto(server.url + "/")
        assert page.locator(f'tr[data-run="{nothing}"]').get_attribute("data-status") == "failed"
        page.screenshot(path=str(shots / "runs-all-kinds.png"), full_page=True)


@pytest.fixture(scope="module")
def solve_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("ui-solve") / "runs.db"
    # In a thread of its own: the browser's event loop may already run in this one.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return path, pool.submit(made.record_solve, path).result()


def test_a_solve_page_shows_its_rounds_calls_and_timeline(
    solve_store: tuple[Path, str], page: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path, solve_id = solve_store
    with Server(path) as server:
        # the runs list shows the solve, with its model and what its calls used
        page.goto(server.url + "/")
        row = page.locator(f'tr.solve-row[data-solve="{solve_id}"]')
        expect(row).to_have_count(1)
        assert "scripted-model" in row.inner_text() and "answered" in row.inner_text()
        assert made.XSS in row.locator(".answer-line").inner_text()  # text, not a tag
        shots = artefacts(tmp_path_factory)
        page.screenshot(path=str(shots / "runs-with-solves.png"), full_page=True)
        row.locator("a").first.click()
        page.wait_for_url(f"**/solves/{solve_id}")
        # the answer on top, what the model wrote for it one click away
        answer = page.locator("#answer .answer-text")
        assert made.XSS in answer.inner_text()
        raw = page.locator("#raw-answer")
        expect(raw.locator(".raw-text")).not_to_be_visible()
        raw.locator("summary").click()
        expect(raw.locator(".raw-text")).to_be_visible()
        assert '"action": "finish"' in raw.locator(".raw-text").inner_text()
        # two rounds with their calls; the totals are the calls'
        rounds = page.locator("table.rounds tbody tr")
        expect(rounds).to_have_count(2)
        assert page.locator('[data-fact="calls"]').inner_text() == "7"
        calls = page.locator("table.calls tbody.mcall")
        expect(calls).to_have_count(7)
        roles = [calls.nth(i).get_attribute("data-role") for i in range(7)]
        assert roles == ["planner", "planner", "agent", "agent", "joiner", "replanner", "joiner"]
        # the rejected first plan: its text (hostile, shown as text) and its issues
        first = calls.nth(0)
        assert "rejected" in first.inner_text()
        first.locator("summary").click()
        assert made.XSS in first.locator(".raw-text").inner_text()
        assert "[not_json]" in first.locator(".issues").inner_text()
        # one timeline: planner calls, tasks, joiners of both rounds; agent calls as ticks
        bars = page.locator(".solve-timeline .sbar")
        labels = [bars.nth(i).locator(".blabel").text_content() for i in range(bars.count())]
        assert labels[:4] == ["r1 planner #1", "r1 planner #2", "r1 fetch", "r1 note"]
        assert "r1 joiner #5" in labels and labels[-1] == "r2 joiner #7"
        assert page.locator(".solve-timeline .tickmark").count() == 2
        assert page.locator("main script").count() == 0
        page.screenshot(path=str(shots / "solve.png"), full_page=True)
        if os.environ.get("DAGAGENT_UPDATE_DOCS"):
            page.locator(".top .where").evaluate("e => { e.textContent = '.dagagent/runs.db'; }")
            page.screenshot(path=str(ROOT / "docs" / "viewer-solve.png"), full_page=True)
        # a round's run names its solve
        page.locator("table.rounds tbody tr").nth(1).locator("a").click()
        expect(page.locator(".crumbs")).to_contain_text(f"round 2 of solve {solve_id}")


def test_a_deep_chain_is_collapsed_and_any_task_opens_by_its_id(
    page: Any, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path / "runs.db"
    run_id = made.record_chain(path, 600)
    with Server(path) as server:
        page.goto(f"{server.url}/runs/{run_id}")
        boxes = page.locator("#graph .level-box")
        expect(boxes).to_have_count(50)
        expect(boxes.first).to_contain_text("levels 0–11")
        page.locator("#graph").screenshot(
            path=str(artefacts(tmp_path_factory) / "deep-chain-graph.png")
        )
        boxes.nth(49).click()
        expect(page.locator("tr.task-row")).to_have_count(12)
        expect(page.locator("tr.task-row").first).to_have_attribute("data-task", "t588")
        find = page.locator("input.find-task")
        find.fill("t7")
        find.press("Enter")
        expect(page.locator("#panel .panel-inner")).to_have_attribute("data-task", "t7")
        expect(page.locator("#panel")).to_contain_text("level 7")
        find.fill(made.XSS)
        find.press("Enter")
        expect(page.locator("#panel .panel-note")).to_contain_text(made.XSS)
        page.screenshot(path=str(artefacts(tmp_path_factory) / "deep-chain-find.png"))

    # The report: a task it holds opens; one it does not says how to see it.
    report = tmp_path / "report.html"
    with RunStore(path, read_only=True) as st:
        report.write_text(render_report(st.get_run(run_id)), encoding="utf-8")
    page.goto(report.as_uri())
    find = page.locator("input.find-task")
    find.fill("t3")
    find.press("Enter")
    expect(page.locator("#panel .panel-inner")).to_have_attribute("data-task", "t3")
    find.fill("t599")
    find.press("Enter")
    expect(page.locator("#panel .panel-note")).to_contain_text(
        f"dagagent show {run_id} --task t599"
    )


def test_a_runs_page_shows_the_model_calls_that_planned_it_and_its_agents(
    page: Any, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path / "runs.db"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        run_id, unrun = pool.submit(made.record_run_with_calls, path).result()
    shots = artefacts(tmp_path_factory)
    with Server(path) as server:
        page.goto(f"{server.url}/runs/{run_id}")
        calls = page.locator("#calls table.calls tbody.mcall")
        expect(calls).to_have_count(3)
        roles = [calls.nth(i).get_attribute("data-role") for i in range(3)]
        assert roles == ["planner", "planner", "agent"]
        assert "planned this run and its agent tasks made" in page.locator("#calls").inner_text()
        first = calls.nth(0)
        assert "rejected" in first.inner_text()
        first.locator("summary").click()
        assert made.XSS in first.locator(".raw-text").inner_text()  # text, not a tag
        assert "[not_json]" in first.locator(".issues").inner_text()
        assert "note" in calls.nth(2).inner_text()  # the agent task's call names its task
        assert page.locator("main script").count() == 0
        page.screenshot(path=str(shots / "run-with-calls.png"), full_page=True)
        # the runs list names the plan that was not run; its id opens its model calls
        page.goto(server.url + "/")
        row = page.locator(f'tr.unrun-row[data-run="{unrun}"]')
        expect(row).to_have_count(1)
        assert "planned" in row.inner_text() and "scripted-model" in row.inner_text()
        expect(page.locator(f'tr.unrun-row[data-run="{run_id}"]')).to_have_count(0)
        page.screenshot(path=str(shots / "runs-with-plans-not-run.png"), full_page=True)
        row.locator("a").click()
        page.wait_for_url(f"**/runs/{unrun}")
        expect(page.locator("#calls table.calls tbody.mcall")).to_have_count(1)
        assert page.locator('[data-fact="calls"]').inner_text() == "1"
        assert "not run" in page.locator(".crumbs").inner_text()
        page.screenshot(path=str(shots / "plan-not-run.png"), full_page=True)
