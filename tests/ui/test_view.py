"""What the viewer computes and serves, without a browser: the view of a run, the text
timeline, the report, the limits that keep a 10,000-task run usable, the read-only store,
and the app over real HTTP (security headers, escaping, no writes)."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from dagagent.errors import StoreError
from dagagent.plan import Plan
from dagagent.results import AgentStep, CallDecision, CallRecord, TaskResult, TaskStatus
from dagagent.store import RunRecord, RunStore
from dagagent.ui import build_view, timeline_text
from dagagent.ui.render import Page, RunAround, render_panel, render_report, render_run
from dagagent.ui.view import MAX_BARS, PAGE_SIZE
from ui import runs as made
from ui.conftest import Server, Store


def _failed_run(
    plan: Plan,
    result: TaskResult,
    *,
    goal: str = "g",
    executor: str = "dataflow",
    finished_at: float = 2.0,
) -> RunRecord:
    """A failed run of ``plan`` whose record holds only ``result``'s task."""
    return RunRecord(
        run_id="abcdef012345",
        parent_id=None,
        created=1.0,
        goal=goal,
        status="failed",
        executor=executor,
        started_at=1.0,
        finished_at=finished_at,
        critical_path=[],
        critical_path_s=None,
        plan=plan,
        tasks={result.task_id: result},
    )


def test_the_view_lays_out_levels_and_marks_the_critical_path(store: Store) -> None:
    with RunStore(store.path, read_only=True) as st:
        record = st.get_run(store.finished)
    view = build_view(record)
    assert view.critical == ["fetch", "rank", "report"]
    xs = {n.id: n.x for n in view.dag.nodes}
    assert xs["fetch"] == xs["parse"] == xs["hostile"] < xs["rank"] == xs["merge"] < xs["report"]
    crit_edges = {(e.src, e.dst) for e in view.dag.edges if e.critical}
    assert crit_edges == {("fetch", "rank"), ("rank", "report")}
    bars = {b.task_id: b for b in view.timeline.bars}
    # each bar is the task's recorded time (from the same origin); merge waited for parse
    fetch = record.tasks["fetch"].started_at
    assert fetch is not None
    for tid, bar in bars.items():
        task = record.tasks[tid]
        assert task.started_at is not None and task.duration_s is not None
        assert bar.duration_s == pytest.approx(task.duration_s)
        assert bar.start - bars["fetch"].start == pytest.approx(task.started_at - fetch, abs=1e-6)
    assert bars["merge"].start >= bars["parse"].end


def test_show_timeline_prints_bars_in_start_order(store: Store) -> None:
    with RunStore(store.path, read_only=True) as st:
        text = timeline_text(build_view(st.get_run(store.finished)), width=90)
    lines = text.splitlines()
    rows = lines[1:-2]
    assert len(rows) == 6
    assert {r.split()[0] for r in rows[:3]} == {"fetch", "parse", "hostile"}
    assert all(len(ln) <= 90 for ln in lines)
    rank = next(r for r in rows if r.startswith("rank"))
    fetch = next(r for r in rows if r.startswith("fetch"))
    assert rank.split()[1] == "*" and fetch.index("█") < rank.index("█")
    assert fetch.rindex("█") <= rank.index("█")
    assert "critical path" in lines[-2]


def test_the_report_is_one_file_with_hostile_text_escaped(store: Store) -> None:
    with RunStore(store.path, read_only=True) as st:
        html = render_report(st.get_run(store.finished))
    assert made.XSS not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'src="' not in html and "<link" not in html  # nothing loaded from elsewhere
    assert html.count("<script>") == 1 and html.count("<style>") == 1


def test_a_read_only_store_cannot_be_written(store: Store, tmp_path: Path) -> None:
    with RunStore(store.path, read_only=True) as st:
        with pytest.raises(StoreError):
            st._query("DELETE FROM runs")
        assert st.exists(store.finished)
    with pytest.raises(StoreError, match="no run store"):
        RunStore(tmp_path / "missing.db", read_only=True)
    assert not (tmp_path / "missing.db").exists()
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE x (y)").connection.commit()
    with pytest.raises(StoreError, match="not a dagagent run store"):
        RunStore(other, read_only=True)


def test_the_app_serves_escaped_pages_with_a_strict_policy_and_writes_nothing(
    server: Server, store: Store
) -> None:
    before = store.path.stat().st_mtime_ns, store.path.with_name("runs.db-wal").stat().st_size
    with httpx.Client(base_url=server.url) as client:
        r = client.get("/")
        assert r.status_code == 200
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert made.XSS not in r.text and "&lt;script&gt;alert(1)" in r.text
        page = client.get(f"/runs/{store.finished}")
        assert page.status_code == 200 and made.XSS not in page.text
        panel = client.get(f"/runs/{store.finished}/tasks/hostile")
        assert panel.status_code == 200 and made.XSS not in panel.text
        assert client.get(f"/runs/{store.finished}/tasks/nope").status_code == 404
        missing = client.get("/runs/abcdef")
        assert missing.status_code == 404 and "no run" in missing.text
        assert client.get("/runs/%3Cscript%3E").status_code == 404
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            assert client.request(method, f"/runs/{store.finished}").status_code == 405
        # DNS rebinding: a request naming another host is refused.
        assert client.get("/", headers={"host": "evil.example"}).status_code == 400
        assert client.get("/static/app.js").status_code == 200
    after = store.path.stat().st_mtime_ns, store.path.with_name("runs.db-wal").stat().st_size
    assert before == after


def test_a_10000_task_run_stays_usable(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    run_id = made.record_big(path)
    with Server(path) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        started = time.perf_counter()
        r = client.get(f"/runs/{run_id}")
        took = time.perf_counter() - started
        assert r.status_code == 200
        html = r.text
        # Bounded: the DAG is one box per level, the timeline capped, the table paged.
        assert html.count('class="level-box"') == 20
        assert html.count('class="node ') == 0
        assert html.count('<g class="bar ') == MAX_BARS
        assert html.count('class="task-row') == PAGE_SIZE
        assert len(html) < 1_000_000, len(html)
        print(f"10,000-task run page: {len(html):,} bytes in {took:.2f} s")
        assert took < 20, took  # seconds, on a busy CI machine; about 1 s idle
        level = client.get(f"/runs/{run_id}?level=3&status=succeeded&page=2")
        assert level.status_code == 200
        levels = re.findall(r'class="task-row[^>]*data-level="(\d+)"', level.text)
        assert levels == ["3"] * PAGE_SIZE
        assert "page 2 of 5" in level.text
        panel = client.get(f"/runs/{run_id}/tasks/t19_499")
        assert panel.status_code == 200 and "t18_" in panel.text


def test_the_runs_list_shows_a_solves_answer_as_text(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    run_id = made.record_finished(path)
    with RunStore(path) as st:
        st.start_solve("abcdef012345", "a goal")
        st.record_round("abcdef012345", 1, run_id=run_id, outcome="answered")
        st.finish_solve(
            "abcdef012345", status="answered", answer=f"It is {made.XSS}", run_id=run_id
        )
    with Server(path) as server, httpx.Client(base_url=server.url) as client:
        runs = client.get("/").text
        page = client.get(f"/runs/{run_id}").text
    assert "It is &lt;script&gt;alert(1)&lt;/script&gt;" in runs
    assert 'class="answer card"' in page and "It is &lt;script&gt;" in page
    assert made.XSS not in runs + page


def test_an_agent_tasks_steps_and_decisions_are_shown_escaped() -> None:
    plan = Plan.model_validate(
        {"goal": "g", "tasks": [{"id": "note", "instruction": f"Write {made.XSS}"}]}
    )
    step = AgentStep(
        step=1,
        thought=f"think {made.XSS}",
        calls=[CallRecord(id="c1", tool="search", args={"q": made.XSS}, observation=made.XSS)],
    )
    answer = AgentStep(step=2, answer=f"done {made.XSS}")
    decision = CallDecision(
        tool="search",
        decision="deny",
        decided_by=made.XSS,
        reason=made.XSS,
        at=2.0,
        source="agent",
    )
    result = TaskResult(
        task_id="note",
        status=TaskStatus.FAILED,
        error=f"stopped {made.XSS}",
        error_type="AgentStoppedError",
        attempts=1,
        started_at=1.0,
        finished_at=3.0,
        steps=[step, answer],
        decisions=[decision],
    )
    record = _failed_run(plan, result, goal=made.XSS, executor="levels", finished_at=3.0)
    html = render_panel(build_view(record), result.task_id, page=Page())
    assert made.XSS not in html
    for text in ("think &lt;script&gt;", "done &lt;script&gt;", "stopped &lt;script&gt;"):
        assert text in html
    assert html.count('class="step"') == 2 and 'class="call"' in html
    assert "d-deny" in html and "AgentStoppedError" in html
    report = render_report(record)
    assert made.XSS not in report and report.count('class="panel-src"') == 1


def test_a_tasks_traceback_is_shown_escaped_in_its_panel() -> None:
    plan = Plan.model_validate({"goal": "g", "tasks": [{"id": "p", "tool": "parse", "args": {}}]})
    tb = "Traceback (most recent call last):\n"
    tb += f'  File "t.py", line 3, in parse\nValueError: {made.XSS}\n'
    result = TaskResult(
        task_id="p",
        status=TaskStatus.FAILED,
        error=f"ValueError: {made.XSS}",
        error_type="ValueError",
        attempts=1,
        started_at=1.0,
        finished_at=2.0,
        traceback=tb,
    )
    record = _failed_run(plan, result)
    html = render_panel(build_view(record), result.task_id, page=Page())
    assert '<pre class="traceback">Traceback (most recent call last):' in html
    assert "in parse" in html and made.XSS not in html


def test_the_worker_that_ran_a_task_is_shown_escaped_in_its_panel() -> None:
    plan = Plan.model_validate({"goal": "g", "tasks": [{"id": "p", "tool": "parse", "args": {}}]})
    ran = TaskResult(task_id="p", status=TaskStatus.FAILED, error="no", attempts=1)
    there = ran.but(worker=f"4242@{made.XSS}")
    html = render_panel(build_view(_failed_run(plan, there)), "p", page=Page())
    assert "<dt>worker</dt><dd><code>4242@" in html and made.XSS not in html
    here = render_panel(build_view(_failed_run(plan, ran)), "p", page=Page())
    assert "<dt>worker</dt>" not in here  # a task run in the run's own process


def test_a_map_tasks_elements_are_shown_escaped_in_its_panel() -> None:
    plan = Plan.model_validate(
        {
            "goal": "g",
            "tasks": [
                {
                    "id": "m",
                    "tool": "echo",
                    "for_each": ["a", made.XSS],
                    "args": {"text": "${@item}"},
                }
            ],
        }
    )
    ok = TaskResult(
        task_id="m[0]", status=TaskStatus.SUCCEEDED, output="a", args={"text": "a"}, attempts=1
    )
    bad = TaskResult(
        task_id="m[1]",
        status=TaskStatus.FAILED,
        error=f"ValueError: {made.XSS}",
        args={"text": made.XSS},
        attempts=1,
        started_at=1.0,
        finished_at=1.5,
    )
    result = TaskResult(
        task_id="m",
        status=TaskStatus.FAILED,
        error="element 1 failed",
        attempts=1,
        started_at=1.0,
        finished_at=2.0,
        elements=[ok, bad],
    )
    record = _failed_run(plan, result)
    html = render_panel(build_view(record), result.task_id, page=Page())
    assert "<h3>Elements (2)</h3>" in html and "one run per element of the list" in html
    assert '<span class="badge small s-failed">failed</span>' in html
    assert "ValueError: &lt;script&gt;" in html and made.XSS not in html


# ---------------------------------------------------------------------------------------------
# What the viewer says of runs that are not simply finished


def _record(
    plan: dict[str, Any],
    results: list[TaskResult],
    *,
    status: str = "succeeded",
    started_at: float | None = 100.0,
    finished_at: float | None = 110.0,
    planned_at: dict[str, float] | None = None,
) -> RunRecord:
    return RunRecord(
        run_id="abcdef012345",
        parent_id=None,
        created=100.0,
        goal="g",
        status=status,
        executor="dataflow",
        started_at=started_at,
        finished_at=finished_at,
        critical_path=[],
        critical_path_s=None,
        plan=Plan.model_validate(plan),
        tasks={r.task_id: r for r in results},
        planned_at=planned_at or {},
    )


def _done(task_id: str, start: float, end: float, status: str = "succeeded") -> TaskResult:
    return TaskResult(
        task_id=task_id, status=TaskStatus(status), started_at=start, finished_at=end, attempts=1
    )


def _tool(tid: str, *deps: str, tool: str = "t") -> dict[str, Any]:
    return {"id": tid, "tool": tool, "args": {}, "depends_on": list(deps)}


def test_a_running_task_and_the_run_grow_until_now() -> None:
    record = _record(
        {"tasks": [_tool("a"), _tool("b"), _tool("c", "b")]},
        [
            _done("a", 100.0, 101.0),
            TaskResult(task_id="b", status=TaskStatus.RUNNING, started_at=101.0),
        ],
        status="running",
        started_at=None,
        finished_at=None,
    )
    early, later = build_view(record, now=103.0), build_view(record, now=108.0)
    assert early.status_of == {"a": "succeeded", "b": "running", "c": "pending"}
    assert (early.elapsed_s, later.elapsed_s) == (3.0, 8.0)  # since the record began
    assert (early.task_elapsed_s("b"), later.task_elapsed_s("b")) == (2.0, 7.0)
    bar = {b.task_id: b for b in later.timeline.bars}["b"]
    assert bar.running and bar.end == 8.0 and later.timeline.now_x is not None
    node = {n.id: n for n in later.dag.nodes}["b"]
    assert node.running and node.duration_s == 7.0
    html = render_panel(later, "b", page=Page())
    assert "running for" in html and "7.00s…" in html


def test_a_streamed_run_draws_the_time_before_a_task_was_planned_as_not_planned_yet() -> None:
    record = _record(
        {"tasks": [_tool("first"), _tool("late"), _tool("total", "first", "late")]},
        [_done("first", 100.0, 100.3), _done("late", 101.0, 101.3), _done("total", 101.3, 101.4)],
        finished_at=101.4,
        planned_at={"first": 100.0, "late": 101.0, "total": 101.05},
    )
    view = build_view(record)
    bars = {b.task_id: b for b in view.timeline.bars}
    assert view.timeline.planned
    late = bars["late"]
    assert late.unplanned == 0.0 and late.ready == pytest.approx(1.0)  # not "waited after ready"
    assert late.unplanned_s == pytest.approx(1.0) and late.wait_s == pytest.approx(0.0)
    assert view.waits["late"].after_ready_s == pytest.approx(0.0)
    assert bars["first"].unplanned is None
    assert view.critical == ["late", "total"]  # late finished last: total waited for it
    text = timeline_text(view, width=80)
    assert "╌" in text.splitlines()[2] and "╌ not planned yet" in text
    html = render_report(record)
    assert 'class="unplanned"' in html and "not planned yet" in html


def test_a_paused_run_says_what_to_run_next_in_the_waiting_colour() -> None:
    from dagagent.store import ApprovalRecord

    waiting = TaskResult(
        task_id="mail",
        status=TaskStatus.WAITING,
        started_at=101.0,
        finished_at=101.0,
        error="waiting for approval of a call of 'send' (rule #1): a person decides later",
    )
    record = _record(
        {"tasks": [_tool("a"), _tool("mail", "a", tool="send"), _tool("after", "mail")]},
        [
            _done("a", 100.0, 101.0),
            waiting,
            TaskResult(task_id="after", status=TaskStatus.SKIPPED, error="not run: upstream"),
        ],
        status="paused",
        finished_at=101.0,
    )
    asked = ApprovalRecord(
        run_id="abcdef012345", task_id="mail", seq=1, tool="send", asked_at=100.5, state="waiting"
    )
    view = build_view(record, approvals=[asked], now=500.0)
    assert view.waiting_tasks() == ["mail"]
    bar = {b.task_id: b for b in view.timeline.bars}["mail"]
    assert bar.approvals == [(0.5, 400.0)]  # from its question to now: it still waits
    html = render_report(record)
    next_step = html[html.index('id="next"') :]
    assert "dagagent approve abcdef012345 mail --allow" in next_step
    assert "dagagent resume abcdef012345" in next_step
    row = html[html.index('<tr class="task-row" data-task="mail"') :]
    assert 'class="preview wait"' in row[: row.index("</tr>")]
    after = html[html.index('<tr class="task-row" data-task="after"') :]
    assert "preview err" not in after[: after.index("</tr>")]  # skipped is not an error
    panel = render_panel(view, "mail", page=Page())
    assert 'class="wait-box"' in panel and "error-box" not in panel


def test_a_task_left_waiting_in_a_failed_run_points_to_replan_not_approve() -> None:
    """The run ended failed while a call waited: nobody can approve it now, so its panel
    offers 'replan --execute', never 'approve' and 'resume' (which refuse)."""
    waiting = TaskResult(
        task_id="mail",
        status=TaskStatus.WAITING,
        started_at=101.0,
        finished_at=101.0,
        error="not run: the run ended failed while this was waiting for approval",
    )
    record = _record(
        {"tasks": [_tool("a"), _tool("mail", "a", tool="send")]},
        [
            TaskResult(task_id="a", status=TaskStatus.FAILED, error="boom"),
            waiting,
        ],
        status="failed",
        finished_at=101.0,
    )
    panel = render_panel(build_view(record, now=500.0), "mail", page=Page())
    assert "dagagent replan abcdef012345 --execute" in panel
    assert "dagagent approve" not in panel and "dagagent resume" not in panel
    assert "Not run" in panel


def test_a_resumed_runs_wall_time_says_how_much_was_waiting_for_a_person() -> None:
    from dagagent.store import ApprovalRecord

    record = _record(
        {"tasks": [_tool("a"), _tool("mail", "a", tool="send")]},
        [_done("a", 100.0, 101.0), _done("mail", 160.0, 160.5)],
        finished_at=160.5,
    )
    used = ApprovalRecord(
        run_id="abcdef012345",
        task_id="mail",
        seq=1,
        tool="send",
        asked_at=101.0,
        state="used",
        decision="allow",
        decided_by="ann",
        decided_at=150.0,
        used_at=160.0,
    )
    view = build_view(record, approvals=[used])
    assert view.people_s == pytest.approx(59.0)
    bar = {b.task_id: b for b in view.timeline.bars}["mail"]
    assert bar.approvals == [(1.0, 60.0)] and bar.wait_s == pytest.approx(0.0)
    assert view.waits["mail"].people == pytest.approx(59.0)
    html = render_run(record, page=Page(), around=RunAround(approvals=[used]))
    assert "(59.00s of it waiting for a person's decision)" in html
    assert 'fill="url(#approval-hatch)"' in html
    assert "▒" in timeline_text(view, width=80).splitlines()[2]


def test_only_a_persons_answer_during_the_call_is_drawn_as_waiting_for_them() -> None:
    """Each call reached its policy 10 ms after its task started (a loaded machine): a
    question answered then waited for a person; a rule's own decision, a call in doubt's
    resolution, a replay, and a decision a person recorded while the run was paused (dated
    when they took it; its wait is the question's, to the resume) took no one's time then."""
    from dagagent.errors import IN_DOUBT_RULE
    from dagagent.store import ApprovalRecord

    def decided(decision: str, by: str, at: float, rule: str | None = "rule #1") -> CallDecision:
        return CallDecision(tool="send", decision=decision, decided_by=by, at=at, rule=rule)  # type: ignore[arg-type]

    def ran(tid: str, *decisions: CallDecision) -> TaskResult:
        task = _done(tid, 102.0, 105.0)
        task.decisions = list(decisions)
        return task

    tasks = {
        "asked": ran("asked", decided("allow", "ask callback 'ask'", 104.0)),
        "ruled": ran("ruled", decided("allow", "rule #1", 102.01)),
        "refused": ran("refused", decided("deny", "rule #1", 102.01)),
        "doubt": ran("doubt", decided("allow", "ann", 102.01, IN_DOUBT_RULE)),
        "replayed": ran("replayed", decided("replayed", "record", 102.01, None)),
        "resumed": ran("resumed", decided("allow", "ann", 101.5)),
    }
    record = _record(
        {"tasks": [_tool("a"), *(_tool(t, "a", tool="send") for t in tasks)]},
        [_done("a", 100.0, 101.0), *tasks.values()],
        finished_at=105.0,
    )
    used = ApprovalRecord(
        run_id="abcdef012345",
        task_id="resumed",
        seq=1,
        tool="send",
        asked_at=101.0,
        state="used",
        decision="allow",
        decided_by="ann",
        decided_at=101.5,
        used_at=101.8,
    )
    bars = {b.task_id: b for b in build_view(record, approvals=[used]).timeline.bars}
    drawn = {t: bars[t].approvals for t in tasks}
    assert drawn == {
        "asked": [(2.0, 4.0)],  # from its start to the answer
        "ruled": [],
        "refused": [],
        "doubt": [],
        "replayed": [],
        "resumed": [(1.0, pytest.approx(1.8))],  # from the question to the resume, once
    }


def test_a_map_node_counts_its_elements_and_long_tool_names_fit_their_node() -> None:
    from dagagent.ui._dag import MAX_NODE_W, map_count

    long = "fetch_the_weather_forecast_for_a_city_with_every_detail_it_has"
    elements = [
        _done(f"w[{i}]", 100.0, 100.1, s) for i, s in enumerate(["succeeded"] * 3 + ["failed"] * 2)
    ]
    mapped = _done("w", 100.0, 100.2, "failed")
    mapped.elements = elements
    record = _record(
        {
            "tasks": [
                {
                    "id": "w",
                    "tool": long,
                    "for_each": [1, 2, 3, 4, 5],
                    "args": {"city": "${@item}"},
                },
                {"id": "one", "tool": long, "args": {}},
            ]
        },
        [mapped, _done("one", 100.0, 102.41)],
        status="failed",
    )
    view = build_view(record)
    nodes = {n.id: n for n in view.dag.nodes}
    assert nodes["w"].what.endswith("×5 (3 succeeded, 2 failed)")  # as 'dagagent graph' says
    assert map_count(5, ["succeeded"] * 3 + ["failed"] * 2) == "×5 (3 succeeded, 2 failed)"
    assert view.dag.node_w <= MAX_NODE_W
    for n in nodes.values():  # the estimated text fits inside the box (and is clipped to it)
        assert 14 + len(n.what) * 6.8 <= view.dag.node_w
        assert long in n.title  # the whole name in the tooltip
    html = render_report(record)
    assert 'clip-path="url(#run-clip)"' in html


def test_a_run_of_no_tasks_has_a_page() -> None:
    record = _record({"tasks": []}, [], status="failed", finished_at=100.5)
    html = render_run(
        record, page=Page(), around=RunAround(round_note="round 1 of solve s: failed: no model")
    )
    assert "Nothing ran" in html and "round 1 of solve s: failed: no model" in html
    assert timeline_text(build_view(record)) == (
        "no task ran: no task of this run's plan was accepted"
    )


def test_the_viewer_answers_a_failure_with_a_page_and_logs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import dagagent.ui.app as ui_app

    path = tmp_path / "runs.db"
    run_id = made.record_finished(path)

    def broken(*args: Any, **kwargs: Any) -> str:
        raise RuntimeError(f"cannot draw {made.XSS}")

    monkeypatch.setattr(ui_app, "render_run", broken)
    with Server(path) as server, httpx.Client(base_url=server.url) as client:
        page = client.get(f"/runs/{run_id}")
        runs = client.get("/")
    assert page.status_code == 500 and runs.status_code == 200
    assert "the viewer could not show /runs/" in page.text
    assert "RuntimeError: cannot draw &lt;script&gt;" in page.text and made.XSS not in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert '<link rel="stylesheet"' in page.text  # the viewer's own page, not a bare 500
    (logged,) = [r for r in caplog.records if r.name == "dagagent.ui"]
    assert "could not show /runs/" in logged.getMessage() and logged.exc_info is not None


def test_a_task_whose_call_is_in_doubt_is_marked_so(tmp_path: Path) -> None:
    """An interrupted run whose payment started and has no outcome: its task is ``in-doubt``
    in the view (counts, graph, table), in the report, and on the runs page's counts."""
    from dagagent.store import EffectRecord, RunSummary

    t0 = 1_796_000_000.0
    from dagagent.ui.render import render_runs

    plan = Plan.model_validate(
        {"tasks": [{"id": "pay", "tool": "pay"}, {"id": "note", "tool": "echo"}]}
    )
    record = RunRecord(
        run_id="0123456789ab",
        parent_id=None,
        created=t0,
        goal="pay",
        status="interrupted",
        executor="dataflow",
        started_at=t0,
        finished_at=None,
        critical_path=[],
        critical_path_s=None,
        plan=plan,
        tasks={},
    )
    doubt = EffectRecord(
        run_id="0123456789ab",
        key="dga-" + "0" * 32,
        task_id="pay",
        tool="pay",
        fingerprint="f" * 20,
        state="started",
        started_at=t0,
        in_doubt=True,
    )
    view = build_view(record, now=t0 + 5, effects=[doubt])
    assert view.status_of == {"pay": "in-doubt", "note": "unrecorded"}
    assert ("in-doubt", 1) in view.counts
    html = render_report(record, around=RunAround(effects=[doubt]), store="runs.db")
    assert 'class="badge small s-in-doubt">in-doubt<' in html
    assert "--in-doubt" in html  # its colour, in the inlined stylesheet
    assert build_view(record, now=t0 + 5).status_of["pay"] == "unrecorded"  # without effects
    summary = RunSummary(
        run_id="0123456789ab",
        parent_id=None,
        created=t0,
        goal="pay",
        status="interrupted",
        executor="dataflow",
        started_at=t0,
        finished_at=None,
        n_tasks=2,
        counts={},
        in_doubt=1,
    )
    assert "1 in doubt" in render_runs([summary], page=Page())


def test_a_task_skipped_by_a_condition_says_why_escaped(tmp_path: Path) -> None:
    import dagagent

    registry = dagagent.Registry()

    @registry.tool
    def echo(value: Any = None) -> Any:
        return value

    plan = {
        "goal": "g",
        "tasks": [
            {"id": "probe", "tool": "echo", "args": {"value": {"kind": made.XSS}}},
            {
                "id": "gated",
                "tool": "echo",
                "when": f"${{probe.kind}} == '{made.XSS}x'",
                "args": {"value": 1},
            },
            {"id": "after", "tool": "echo", "args": {"value": "${gated}"}},
        ],
    }
    store = tmp_path / "runs.db"
    result = dagagent.execute_sync(plan, registry, store=store)
    assert result.ok
    with RunStore(store, read_only=True) as st:
        record = st.get_run(result.run_id)
    view = build_view(record)
    html = render_panel(view, "gated", page=Page())
    assert "<h3>Skipped by a condition</h3>" in html and 'class="skip-box"' in html
    assert "error-box" not in html
    assert "<dt>runs when</dt>" in html
    assert "is false: ${probe.kind} = &#34;&lt;script&gt;" in html
    assert made.XSS not in html
    after = render_panel(view, "after", page=Page())
    assert "was skipped by a condition" in after and "<h3>Skipped by a condition</h3>" in after
    page = render_run(record, page=Page())
    assert made.XSS not in page
    assert "when ${probe.kind} == &#39;&lt;script&gt;" in page  # the node's title


def test_a_planning_calls_tool_selection_is_listed_escaped(tmp_path: Path) -> None:
    from dagagent.results import ModelCall

    path = tmp_path / "runs.db"
    run_id = made.record_finished(path)
    selection = {
        "method": "bm25",
        "threshold": 30,
        "limit": 2,
        "total": 300,
        "shown": [
            {"name": "slack.get_channel", "why": "ranked", "score": 2.0},
            {"name": "github.list_issue", "why": "ranked", "score": 7.25},
            {"name": f"srv.{made.XSS}", "why": "named", "score": 1.5},
        ],
    }
    call = ModelCall(
        call_id="c1",
        solve_id="abcdef012345",
        round=1,
        run_id=run_id,
        role="planner",
        status="answered",
        started_at=1.0,
        options={"tool_selection": selection},
    )
    with RunStore(path) as st:
        st.start_solve("abcdef012345", "a goal")
        st.record_round("abcdef012345", 1, run_id=run_id, outcome="answered")
        st.record_model_calls([call])
        st.finish_solve("abcdef012345", status="answered", answer="ok", run_id=run_id)
    with Server(path) as server, httpx.Client(base_url=server.url) as client:
        page = client.get("/solves/abcdef012345").text
    assert "Tools shown: 3 of 300" in page and "the 2 best by BM25" in page
    listed = page[page.index('class="tools-shown"') :]
    named, best, other = (listed.index(s) for s in ("(named)", "7.25", "2.00"))
    assert named < best < other  # there whatever its rank first, then the best first
    assert "&lt;script&gt;" in page and made.XSS not in page
