"""``dagagent run`` records; ``runs``, ``show``, ``graph`` read the records; progress display;
a SIGKILLed run keeps every task that finished before the kill."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from cli_shell import app_for
from eventually import wait_until
from rich.console import Console
from typer.testing import CliRunner

import dagagent
from dagagent.cli import _app as cli_app, app
from dagagent.cli.progress import (
    LiveProgress,
    PlainProgress,
    progress_for,
    question_on_terminal,
)
from dagagent.settings import RunSettings
from dagagent.store import RunStore

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FAILING = str(EXAMPLES / "failing.json")
WEATHER = str(EXAMPLES / "weather.json")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DAGAGENT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGAGENT_DEMO_LATENCY", "0")
    monkeypatch.delenv("DAGAGENT_TOOLS", raising=False)
    monkeypatch.setattr(cli_app.out, "_width", 200)  # wide tables: no wrapped cells
    return tmp_path / "home"


def cli(*args: str) -> Any:
    return CliRunner().invoke(app_for(args), list(args))


def only_run(home: Path) -> str:
    with RunStore(home / "runs.db", create=False) as st:
        (summary,) = st.list_runs()
    return summary.run_id


# ---------------------------------------------------------------------------------------------
# which store: found as git finds its repository


def test_history_follows_the_project_not_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if any((parent / ".dagagent").is_dir() for parent in tmp_path.parents):
        pytest.skip("a .dagagent/ directory above the temporary directory would be found first")
    user = tmp_path / "user"  # never the real home
    monkeypatch.setenv("HOME", str(user))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.delenv("DAGAGENT_HOME", raising=False)
    monkeypatch.setenv("DAGAGENT_DEMO_LATENCY", "0")
    monkeypatch.delenv("DAGAGENT_TOOLS", raising=False)
    monkeypatch.setattr(cli_app.out, "_width", 200)
    user_store = user / ".local" / "share" / "dagagent" / "runs.db"

    # outside any project: one store per user, and no .dagagent/ left behind
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.chdir(scratch)
    res = cli("runs")  # nothing recorded yet is not an error
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(f"no runs recorded in {user_store}\n(the per-user store")
    empty = json.loads(cli("runs", "--json").stdout)
    assert empty == {
        "store": str(user_store),
        "found": "user",
        "runs": [],
        "plans_not_run": [],
        "damaged": [],
    }
    assert not user_store.exists()
    res = cli("run", WEATHER)
    assert res.exit_code == 0, res.output
    assert f"in {user_store}" in res.stderr
    assert not (scratch / ".dagagent").exists()
    assert user_store.is_file()
    res = cli("runs")
    assert f"runs in {user_store}\n(the per-user store; 'mkdir .dagagent'" in res.stdout

    # a project's own store is found from any directory below it
    project = tmp_path / "project"
    (project / "src" / "deep").mkdir(parents=True)
    (project / ".dagagent").mkdir()
    monkeypatch.chdir(project / "src" / "deep")
    res = cli("run", FAILING, "--on-failure", "continue")
    assert res.exit_code == 1, res.output
    run_id = only_run(project / ".dagagent")
    monkeypatch.chdir(project / "src")
    res = cli("runs")
    assert res.exit_code == 0, res.output
    where = f"runs in {project / '.dagagent' / 'runs.db'}\n(the nearest .dagagent/ directory)"
    assert where in res.stdout
    assert run_id in res.stdout
    assert cli("show", run_id).exit_code == 0  # found here too
    monkeypatch.chdir(scratch)
    res = cli("show", run_id)
    assert res.exit_code == 4 and "no run" in res.stderr  # not in the user's store
    assert not (project / "src" / ".dagagent").exists()


# ---------------------------------------------------------------------------------------------
# run records, with plain progress on a pipe


def test_run_records_and_prints_progress_lines(home: Path) -> None:
    res = cli("run", FAILING, "--executor", "dataflow", "--on-failure", "continue")
    assert res.exit_code == 1, res.output
    run_id = only_run(home)
    lines = res.stdout.splitlines()
    progress = [
        ln
        for ln in lines
        if ln.split(" ")[0] in ("paris", "atlantis", "tokyo", "mean") and len(ln.split(" ")) == 3
    ]
    assert sorted(ln.split(" ")[1] for ln in progress) == [
        "failed",
        "skipped",
        "succeeded",
        "succeeded",
    ]
    assert "mean skipped -" in progress
    assert any(ln.startswith("atlantis failed ") and ln.endswith("s") for ln in progress)
    assert f"recorded as run {run_id} in {home / 'runs.db'}" in res.stderr
    with RunStore(home / "runs.db") as st:
        rec = st.get_run(run_id)
    assert rec.status == "failed" and rec.executor == "dataflow"
    assert rec.counts == {"succeeded": 2, "failed": 1, "skipped": 1}
    assert rec.context == {"tools": "dagagent.toolkits.demo:registry"}  # the default tools


def test_run_json_prints_only_the_result(home: Path) -> None:
    res = cli("run", WEATHER, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)  # nothing but the result on stdout
    assert doc["status"] == "succeeded" and doc["run_id"] == only_run(home)
    assert "recorded as" not in res.stderr


def test_run_store_option(tmp_path: Path, home: Path) -> None:
    db = tmp_path / "elsewhere" / "my.db"
    res = cli("run", WEATHER, "--store", str(db))
    assert res.exit_code == 0, res.output
    assert db.is_file() and not (home / "runs.db").exists()
    res = cli("runs", "--store", str(db))
    assert res.exit_code == 0 and "succeeded" in res.stdout


# ---------------------------------------------------------------------------------------------
# runs / show / graph on real records


def test_runs_lists_recent_runs_with_counts(home: Path) -> None:
    assert cli("run", WEATHER).exit_code == 0
    assert cli("run", FAILING, "--on-failure", "continue").exit_code == 1
    with RunStore(home / "runs.db") as st:
        newest, oldest = (r.run_id for r in st.list_runs())
    res = cli("runs")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert out.index(newest) < out.index(oldest)
    assert "2 succeeded, 1 failed, 1 skipped" in " ".join(out.split())
    res = cli("runs", "--limit", "1", "--json")
    (doc,) = json.loads(res.stdout)["runs"]
    # "id" as always, and "run_id" as every other --json names a run
    assert doc["id"] == doc["run_id"] == newest and doc["status"] == "failed"
    assert doc["counts"] == {"succeeded": 2, "failed": 1, "skipped": 1}


def test_runs_on_an_empty_store(home: Path) -> None:
    RunStore(home / "runs.db").close()
    res = cli("runs")
    assert res.exit_code == 0 and "no runs recorded in" in res.stdout


@pytest.mark.parametrize("damage", ["run", "task"])
def test_a_run_with_an_unknown_status_is_named_and_the_others_listed(
    home: Path, damage: str
) -> None:
    """A status this version does not know (a damaged file, a newer dagagent's row): 'runs'
    names the run and lists the others, 'show' names it and says what is wrong; no traceback
    either way (both raised ValueError from the status enum before)."""
    import sqlite3

    assert cli("run", WEATHER).exit_code == 0
    assert cli("run", WEATHER).exit_code == 0
    with RunStore(home / "runs.db") as st:
        good, bad = (r.run_id for r in st.list_runs())
    with sqlite3.connect(home / "runs.db") as conn:
        if damage == "run":
            conn.execute("UPDATE runs SET status = 'exploded' WHERE id = ?", (bad,))
        else:
            conn.execute("UPDATE tasks SET status = 'exploded' WHERE run_id = ?", (bad,))
    conn.close()
    res = cli("runs")
    assert res.exit_code == 0 and res.exception is None, res.output
    assert good in res.stdout
    assert "Traceback" not in res.output and "exploded" in res.output
    if damage == "run":
        assert bad not in res.stdout and f"run {bad} is damaged" in res.stderr
    doc = json.loads(cli("runs", "--json").stdout)
    listed = [r["run_id"] for r in doc["runs"]]
    assert good in listed
    if damage == "run":
        assert listed == [good] and doc["damaged"][0]["run_id"] == bad
    res = cli("show", bad)
    assert res.exit_code == 4 and isinstance(res.exception, SystemExit), res.output
    assert f"run {bad}" in res.stderr and "damaged" in res.stderr and "exploded" in res.stderr
    assert "Traceback" not in res.output
    doc = json.loads(cli("show", bad, "--json").stdout)  # one object, the error
    assert doc["ok"] is False and doc["error"]["code"] == "StoreError"
    assert cli("show", good).exit_code == 0  # the others still open


def test_a_task_left_waiting_in_a_run_that_failed_points_to_replan(
    home: Path, tmp_path: Path
) -> None:
    """A call waits for a person (no terminal to ask on) while another task fails: the run
    ends failed, its questions are closed, and 'approve' refuses. Neither the run's table,
    nor 'show', nor approve's refusal may send the user to 'approve' (they did): they say the
    task did not run and that 'replan --execute' runs it again."""
    plan = tmp_path / "p.json"
    plan.write_text(
        json.dumps(
            {
                "tasks": [
                    {"id": "w", "tool": "get_weather", "args": {"city": "Paris"}},
                    {"id": "bad", "tool": "fail", "args": {"message": "nope"}},
                ]
            }
        )
    )
    res = cli("run", str(plan), "--ask", "get_weather", "--on-failure", "continue", "--json")
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    run_id, error = doc["run_id"], doc["tasks"]["w"]["error"]
    assert doc["status"] == "failed" and doc["tasks"]["w"]["status"] == "waiting"
    assert "dagagent approve" not in error and f"dagagent replan {run_id} --execute" in error
    assert error.startswith("not run: the run ended failed") and "get_weather" in error
    shown = json.loads(cli("show", run_id, "--json").stdout)  # the record says the same
    assert shown["tasks"]["w"]["error"] == error
    res = cli("approve", run_id, "w", "--allow")
    assert res.exit_code != 0 and "Traceback" not in res.output
    assert f"dagagent replan {run_id} --execute" in res.stderr


def test_show_task_prints_the_approval_decisions(home: Path, tmp_path: Path) -> None:
    """Who allowed or denied each call, when and why: the decisions on the task's record and
    the questions it left for a person (show --task printed none of them)."""
    plan = tmp_path / "p.json"
    plan.write_text(
        json.dumps(
            {
                "tasks": [
                    {"id": "paris", "tool": "get_weather", "args": {"city": "Paris"}},
                    {"id": "tokyo", "tool": "get_weather", "args": {"city": "Tokyo"}},
                ]
            }
        )
    )
    res = cli("run", str(plan), "--ask", "get_weather", "--json")
    assert res.exit_code == 6, res.output  # paused: no terminal to ask on
    run_id = json.loads(res.stdout)["run_id"]
    assert (
        cli(
            "approve", run_id, "paris", "--allow", "--by", "ann", "--reason", "checked the city"
        ).exit_code
        == 0
    )
    assert (
        cli(
            "approve", run_id, "tokyo", "--deny", "--by", "bob", "--reason", "\x1b[31mnot today"
        ).exit_code
        == 0
    )
    assert cli("resume", run_id).exit_code == 1  # tokyo denied
    shown = cli("show", run_id, "--task", "paris")
    assert shown.exit_code == 0, shown.output
    text = shown.stdout
    assert "decisions:" in text and "get_weather: allowed by ann (rule '--ask get_weather')" in text
    assert "why: checked the city" in text
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d get_weather: allowed", text)
    assert "asked a person:" in text and "allow by ann at " in text
    denied = cli("show", run_id, "--task", "tokyo").stdout
    assert "get_weather: denied by bob" in denied
    assert "why: \\x1b[31mnot today" in denied and "\x1b" not in denied  # escaped
    doc = json.loads(cli("show", run_id, "--task", "tokyo", "--json").stdout)
    (asked,) = doc["approvals"]
    assert (asked["decision"], asked["decided_by"]) == ("deny", "bob")
    assert doc["result"]["decisions"][0]["decided_by"] == "bob"


def test_show_a_run(home: Path) -> None:
    cli("run", FAILING, "--executor", "dataflow", "--on-failure", "continue")
    run_id = only_run(home)
    res = cli("show", run_id[:6])
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    assert f"run {run_id}: failed" in text
    assert "goal: Weather for three cities" in text
    assert "executor dataflow" in text
    assert "LookupError: no weather for 'Atlantis'" in text
    assert "tasks: 2 succeeded, 1 failed, 1 skipped" in text
    assert "critical path" in text
    res = cli("show", "--last", "--json")
    doc = json.loads(res.stdout)
    assert doc["run_id"] == run_id and doc["status"] == "failed"
    assert doc["tasks"]["paris"]["output"]["city"] == "Paris"
    assert doc["tasks"]["paris"]["fingerprint"]
    assert doc["tasks"]["atlantis"]["attempts"] == 1
    assert doc["tasks"]["mean"]["status"] == "skipped"
    assert doc["plan"]["tasks"][0]["id"] == "paris"
    assert doc["critical_path"]


def test_graph_of_a_plan_file_and_of_a_run(home: Path) -> None:
    res = cli("graph", WEATHER, "--format", "mermaid")
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("flowchart TD") and "classDef" not in res.stdout
    res = cli("graph", WEATHER, "-f", "dot")
    assert res.stdout.startswith("digraph plan {") and '"cmp" -> "report";' in res.stdout
    res = cli("graph", WEATHER)
    assert "level 0" in res.stdout and "report" in res.stdout
    cli("run", FAILING, "--on-failure", "continue")
    run_id = only_run(home)
    res = cli("graph", run_id, "-f", "ascii")
    assert res.exit_code == 0, res.output
    assert "[failed]    atlantis" in res.stdout and "[skipped]   mean" in res.stdout
    res = cli("graph", "--last", "-f", "mermaid")
    assert "classDef failed" in res.stdout and "classDef skipped" in res.stdout
    res = cli("graph", run_id, "-f", "dot")
    assert 'fillcolor="#ffcdd2"' in res.stdout


# ---------------------------------------------------------------------------------------------
# Bad ids, missing stores, bad options


def test_bad_run_ids_and_missing_runs_exit_4(home: Path) -> None:
    res = cli("show", "abc")
    assert res.exit_code == 4  # no store yet
    assert "no run store at" in res.stderr and "Traceback" not in res.output
    cli("run", WEATHER)
    for bad in ("abc", "not-a-run", "'; DROP TABLE runs; --", "0123456789abcdef"):
        res = cli("show", bad)
        assert res.exit_code == 4, (bad, res.output)
        assert "is not a run id" in res.stderr
    res = cli("show", "abcdef012345")
    assert res.exit_code == 4 and "no run abcdef012345" in res.stderr
    res = cli("replan", "ffff")
    assert res.exit_code == 4 and "no run whose id starts with ffff" in res.stderr
    res = cli("graph", "ffff")
    assert res.exit_code == 4
    assert cli("runs").exit_code == 0  # the store is untouched


def test_usage_errors_exit_2(home: Path) -> None:
    cli("run", WEATHER)
    run_id = only_run(home)
    res = cli("show")
    assert res.exit_code == 2 and "give a RUN id" in res.stderr
    res = cli("show", run_id, "--last")
    assert res.exit_code == 2 and "not both" in res.stderr
    res = cli("graph", WEATHER, "--format", "png")
    assert res.exit_code == 2 and "--format must be one of ascii, mermaid, dot" in res.stderr
    res = cli("graph", "no-such-plan.json")
    assert res.exit_code == 2 and "plan file not found" in res.stderr
    res = cli("graph", str(EXAMPLES / "invalid.json"))
    assert res.exit_code == 2 and "invalid plan" in res.stderr and "'nowhere'" in res.stderr


def test_an_unusable_store_path_exits_4(tmp_path: Path, home: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_text("not a database " * 200)
    res = cli("run", WEATHER, "--store", str(junk))
    assert res.exit_code == 4 and "not a dagagent run store" in res.stderr
    res = cli("runs", "--store", str(junk))
    assert res.exit_code == 4


# ---------------------------------------------------------------------------------------------
# Progress listeners


def test_progress_for_picks_live_on_a_terminal_and_plain_on_a_pipe() -> None:
    graph = dagagent.validate({"tasks": [{"id": "a", "tool": "x"}]})
    tty = Console(file=io.StringIO(), force_terminal=True)
    pipe = Console(file=io.StringIO(), force_terminal=False)
    assert isinstance(progress_for(graph, tty), LiveProgress)
    assert isinstance(progress_for(graph, tty, live=False), PlainProgress)
    assert isinstance(progress_for(graph, pipe), PlainProgress)


def test_live_progress_renders_at_a_bounded_rate_not_per_event(
    registry: dagagent.Registry,
) -> None:
    plan = {
        "tasks": [
            {"id": f"t{i}", "tool": "work", "args": {"name": f"t{i}", "seconds": 0.002}}
            for i in range(300)
        ]
    }
    graph = dagagent.validate(plan, registry)
    console = Console(file=io.StringIO(), force_terminal=True, width=100)
    live = LiveProgress(graph, console, refresh_per_second=10)
    renders = 0
    rich_fn = live.__rich__

    def counting() -> Any:
        nonlocal renders
        renders += 1
        return rich_fn()

    live.__rich__ = counting  # type: ignore[method-assign]
    events = 0

    def count(_: Any) -> None:
        nonlocal events
        events += 1

    started = time.monotonic()
    with live:
        dagagent.execute_sync(
            graph,
            registry,
            listeners=[count, live],
            settings=RunSettings(max_concurrency=4, executor="dataflow"),
        )
    took = time.monotonic() - started
    assert events >= 600
    assert renders <= 10 * took + 5  # refresh rate, not event rate
    snapshot = Console(file=io.StringIO(), width=100, force_terminal=False)
    snapshot.print(rich_fn())
    shown = snapshot.file.getvalue()  # type: ignore[attr-defined]
    assert "300/300 done" in shown and "300 succeeded" in shown


def test_plain_progress_writes_in_the_background_and_at_the_end() -> None:
    stream = io.StringIO()
    progress = PlainProgress(stream, flush_interval_s=0.05)
    r = dagagent.TaskResult(
        task_id="a", status=dagagent.TaskStatus.SUCCEEDED, started_at=1.0, finished_at=1.25
    )
    with progress:
        progress(dagagent.events.TaskFinished("run", r))
        wait_until(stream.getvalue, "the line is written before the run ends")
        assert stream.getvalue() == "a succeeded 0.250s\n"
        skipped = dagagent.TaskResult(task_id="b", status=dagagent.TaskStatus.SKIPPED)
        progress(dagagent.events.TaskFinished("run", skipped))
    assert stream.getvalue() == "a succeeded 0.250s\nb skipped -\n"


def test_the_progress_bar_has_a_line_of_its_own(registry: dagagent.Registry) -> None:
    plan = {"tasks": [{"id": f"t{i}", "tool": "work", "args": {"name": f"t{i}"}} for i in range(3)]}
    live = LiveProgress(dagagent.validate(plan, registry), Console(file=io.StringIO()))
    started = dagagent.events.TaskStarted("run", "t0", 1.0)
    live(started)
    for width in (80, 200):
        snapshot = Console(file=io.StringIO(), width=width, force_terminal=False)
        snapshot.print(live.__rich__())
        lines = snapshot.file.getvalue().splitlines()  # type: ignore[attr-defined]
        assert lines[0].startswith("0/3 done  1 running  2 waiting"), lines
        assert set(lines[1].strip()) <= set("━╺╸ "), lines  # the bar, and nothing else
        assert lines[2].split() == ["running", "t0", lines[2].split()[-1]], lines


def test_progress_lines_wait_while_a_question_is_on_the_terminal() -> None:
    stream = io.StringIO()
    progress = PlainProgress(stream, flush_interval_s=0.02)

    def finished(task_id: str) -> None:
        r = dagagent.TaskResult(
            task_id=task_id, status=dagagent.TaskStatus.SUCCEEDED, started_at=1.0, finished_at=2.0
        )
        progress(dagagent.events.TaskFinished("run", r))

    with progress:
        finished("before")
        with question_on_terminal():
            # what finished before the question is written above it, at once
            assert stream.getvalue() == "before succeeded 1.000s\n"
            finished("during")
            # wall-clock time: many flush intervals, in which nothing may land on the prompt
            time.sleep(0.5)
            assert stream.getvalue() == "before succeeded 1.000s\n"
        wait_until(lambda: "during" in stream.getvalue(), "the held line is written")
        assert stream.getvalue() == "before succeeded 1.000s\nduring succeeded 1.000s\n"


def test_tables_show_time_waiting_for_approval_apart_from_time_running(
    home: Path, registry: dagagent.Registry
) -> None:
    from dagagent.cli.render import result_table

    async def slow_yes(request: dagagent.ApprovalRequest) -> bool:
        await anyio.sleep(0.5)  # wall-clock time: the runner times tasks with time.time()
        return True

    policy = dagagent.Policy([dagagent.Rule(tool="add", action="ask")], ask=slow_yes)
    plan = {
        "tasks": [
            {"id": "asked", "tool": "add", "args": {"a": 1, "b": 2}},
            {"id": "free", "tool": "echo", "args": {"value": 1}},
        ]
    }
    db = home / "runs.db"
    result = dagagent.execute_sync(plan, registry, interceptors=[policy], store=db)
    console = Console(file=io.StringIO(), width=200)
    console.print(result_table(result, width=200))
    rows = {
        ln.split("│")[1].strip(): ln.split("│")
        for ln in console.file.getvalue().splitlines()
        if "│" in ln
    }  # type: ignore[attr-defined]
    header = [c.strip() for c in console.file.getvalue().splitlines()[2].split("┃")]  # type: ignore[attr-defined]
    assert header[1:6] == ["id", "status", "time", "approval", "tries"]
    ran, waited = (
        float(rows["asked"][3].strip().rstrip("s")),
        float(rows["asked"][4].strip().rstrip("s")),
    )
    assert waited >= 0.4 and ran < waited
    assert rows["free"][4].strip() == ""  # nothing asked, nothing waited

    res = cli("show", result.run_id, "--store", str(db))
    assert res.exit_code == 0 and "approval" in res.stdout
    res = cli("show", result.run_id, "--store", str(db), "--task", "asked")
    assert re.search(
        r"^status: succeeded in 0\.\d{3}s \(after 0\.[4-9]\d{2}s waiting for approval\)$",
        res.stdout,
        re.M,
    ), res.stdout
    # a run where nothing waited has no approval column
    plain = dagagent.execute_sync(plan, registry)
    console = Console(file=io.StringIO(), width=200)
    console.print(result_table(plain, width=200))
    assert "approval" not in console.file.getvalue()  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# Records survive SIGKILL


def _on_record(db: Path, tasks: set[str]) -> bool:
    """Whether another connection finds every one of ``tasks`` in the last run's record."""
    if not db.exists():
        return False
    with RunStore(db, create=False) as st:
        return tasks <= set(st.last_run().tasks)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_killed_run_keeps_every_task_that_finished(tmp_path: Path) -> None:
    """What the run committed while it went on survives a SIGKILL (how soon a batch is
    written is the store's flush interval: a number for benchmarks/, not for this test)."""
    # 15 independent tasks finishing 0.2 s, 0.4 s, ... 3.0 s after the run starts.
    plan = {
        "goal": "slow",
        "tasks": [
            {"id": f"t{i:02d}", "tool": "sleep", "args": {"seconds": round(0.2 * i, 1), "value": i}}
            for i in range(1, 16)
        ],
    }
    plan_file = tmp_path / "slow.json"
    plan_file.write_text(json.dumps(plan))
    home = tmp_path / "home"
    env = {**os.environ, "DAGAGENT_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagagent", "run", str(plan_file), "--executor", "dataflow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    seen: list[tuple[float, str]] = []  # (when the test read it, task id)
    got_four = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            parts = line.split()
            if len(parts) == 3 and parts[1] == "succeeded":
                seen.append((time.monotonic(), parts[0]))
                if len(seen) >= 4:
                    got_four.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    db = home / "runs.db"
    try:
        assert got_four.wait(60), "the run did not report four finished tasks"
        finished_before = {tid for _, tid in seen}
        wait_until(lambda: _on_record(db, finished_before), "the four are on record")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(5)
        assert proc.stdout is not None
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    assert len(finished_before) >= 4
    with RunStore(home / "runs.db", create=False) as st:
        rec = st.last_run()
    assert rec.status == "interrupted"
    recorded = {tid for tid, r in rec.tasks.items()}
    assert finished_before <= recorded
    assert all(r.status.value == "succeeded" for r in rec.tasks.values())
    assert all(rec.tasks[t].output == int(t[1:]) for t in recorded)
    assert len(recorded) < 15  # killed part-way
    # and the CLI shows it so
    res = CliRunner().invoke(app, ["show", rec.run_id, "--store", str(home / "runs.db")])
    assert res.exit_code == 0 and "interrupted" in res.stdout and "unrecorded" in res.stdout


def test_records_are_written_by_execute_in_an_async_program(
    tmp_path: Path, registry: dagagent.Registry
) -> None:
    async def main() -> str:
        r = await dagagent.execute(
            {"tasks": [{"id": "a", "tool": "echo", "args": {"value": 1}}]},
            registry,
            store=tmp_path / "r.db",
        )
        return r.run_id

    run_id = anyio.run(main)
    res = CliRunner().invoke(app, ["show", run_id, "--store", str(tmp_path / "r.db"), "--json"])
    assert json.loads(res.stdout)["tasks"]["a"]["output"] == 1


def test_show_task_prints_one_task_in_full(home: Path, tmp_path: Path) -> None:
    long = "x" * 300 + "\x1b[31m"
    plan = {"tasks": [{"id": "a", "tool": "lookup", "args": {"entity": long}}]}
    (tmp_path / "p.json").write_text(json.dumps(plan))
    assert cli("run", str(tmp_path / "p.json")).exit_code == 1
    run_id = only_run(home)
    r = cli("show", run_id, "--task", "a")
    assert r.exit_code == 0, r.output
    assert "status: failed" in r.stdout and "attempts: 1" in r.stdout
    # nothing cut, and the escape sequence shown, not obeyed
    assert "x" * 300 + "\\x1b[31m" in r.stdout and "\x1b" not in r.stdout
    doc = json.loads(cli("show", run_id, "--task", "a", "--json").stdout)
    assert doc["result"]["status"] == "failed" and doc["task"]["args"]["entity"] == long
    r = cli("show", run_id, "--task", "b")
    assert r.exit_code == 2 and "has no task 'b'" in r.stderr
    assert "did you mean 'a'" not in r.stderr


TOOLS_RAISING = """
import dagagent

registry = dagagent.Registry()


def parse(text):
    return int(text)


@registry.tool
def count(text: str) -> int:
    \"\"\"Count.\"\"\"
    return parse(text) + 1
"""


def test_a_tool_that_raises_shows_its_traceback(home: Path, tmp_path: Path) -> None:
    (tmp_path / "raising_tools.py").write_text(TOOLS_RAISING)
    tools = f"{tmp_path / 'raising_tools.py'}:registry"
    plan = {
        "tasks": [
            {"id": "bad", "tool": "count", "args": {"text": "seven\x1b[2J"}},
            {"id": "good", "tool": "count", "args": {"text": "7"}},
        ]
    }
    (tmp_path / "p.json").write_text(json.dumps(plan))
    r = cli("run", str(tmp_path / "p.json"), "--tools", tools, "--on-failure", "continue")
    assert r.exit_code == 1, r.output
    run_id = only_run(home)
    assert f"dagagent show {run_id} --task bad" in r.stderr  # where to read it
    shown = cli("show", run_id, "--task", "bad")
    assert shown.exit_code == 0, shown.output
    text = shown.stdout
    assert "traceback:\nTraceback (most recent call last):" in text
    tb = text.split("traceback:\n", 1)[1]
    assert tb.index("in count") < tb.index("in parse") < tb.index("ValueError: invalid")
    assert "\x1b" not in text and "\\x1b[2J" in text  # the tool's text escaped, not obeyed
    doc = json.loads(cli("show", run_id, "--task", "bad", "--json").stdout)
    assert "in parse" in doc["result"]["traceback"]
    # the run's table leaves tracebacks out; -v adds each one, by task
    plain = cli("show", run_id).stdout
    assert "Traceback" not in plain
    verbose = cli("show", run_id, "-v").stdout
    assert verbose.count("Traceback (most recent call last)") == 1
    assert "traceback of task bad:" in verbose and "traceback of task good" not in verbose
    good = cli("show", run_id, "--task", "good").stdout
    assert "traceback" not in good


def test_run_prints_the_final_output_in_full_and_cells_use_the_width(
    home: Path, tmp_path: Path
) -> None:
    lines = [f"line {i} " + "y" * 90 for i in range(3)]
    plan = {
        "tasks": [
            {"id": "p", "tool": "get_weather", "args": {"city": "Paris"}},
            {
                "id": "rep",
                "tool": "format_report",
                "args": {"title": "T", "lines": lines},
                "depends_on": ["p"],
            },
        ]
    }
    (tmp_path / "p.json").write_text(json.dumps(plan))
    r = cli("run", str(tmp_path / "p.json"))  # 200 columns wide (the fixture)
    assert r.exit_code == 0, r.output
    # the final task (nothing depends on it) in full, after the table; not 'p'
    assert "output of rep:\nT\n- line 0 " + "y" * 90 + "\n" in r.stdout
    assert "output of p:" not in r.stdout
    # a 200-column table cuts cells far later than at 60 characters
    row = next(x for x in r.stdout.splitlines() if x.startswith("│ rep"))
    assert "line 0 " + "y" * 90 in row


def test_map_tasks_in_show_graph_and_run(home: Path, tmp_path: Path) -> None:
    known = ["Tokyo", "London", "New York", "Sydney", "Cairo", "Reykjavik"]
    cities = ["Paris", "Atlantis\x1b[31m", *known, *known[:5]]
    plan = {
        "goal": "weather in many cities",
        "tasks": [
            {"id": "w", "tool": "get_weather", "for_each": cities, "args": {"city": "${@item}"}},
            {"id": "one", "tool": "get_weather", "args": {"city": "${w.0.city}"}},
        ],
    }
    path = tmp_path / "map.json"
    path.write_text(json.dumps(plan))
    res = cli("graph", str(path))
    assert "w    get_weather ×13" in res.stdout
    assert cli("run", str(path), "--on-failure", "continue").exit_code == 1
    run_id = only_run(home)

    res = cli("show", run_id)
    assert res.exit_code == 0, res.output
    text = " ".join(res.stdout.split())
    assert "get_weather ×13" in text
    assert "1 of 13 elements failed; element 1 (Atlantis\\x1b[31m) failed: LookupError:" in text
    rows = [line for line in res.stdout.splitlines() if "│   [" in line]
    assert len(rows) == 10 and "[1]" in rows[1]  # the failed element is among those shown
    assert "... 3 more elements: show --task w" in text
    assert "\x1b" not in res.stdout

    res = cli("show", run_id, "--task", "w")
    assert res.exit_code == 0, res.output
    assert res.stdout.count("element w[") == 13 and "\x1b" not in res.stdout
    assert "element w[1]: failed" in res.stdout and "element w[12]: succeeded" in res.stdout
    assert '  arguments: {"city": "Atlantis\\u001b[31m"}' in res.stdout
    assert 'list: ["Paris", "Atlantis\\u001b[31m", "Tokyo",' in res.stdout

    res = cli("graph", run_id)
    assert "[failed]  w    get_weather ×13 (12 succeeded, 1 failed)" in res.stdout
    res = cli("graph", run_id, "-f", "mermaid")
    assert "get_weather ×13 (12 succeeded, 1 failed)" in res.stdout

    doc = json.loads(cli("show", run_id, "--json").stdout)
    assert [e["status"] for e in doc["tasks"]["w"]["elements"]][:3] == [
        "succeeded",
        "failed",
        "succeeded",
    ]

    # the cap, from the command line
    res = cli("run", str(path), "--max-elements", "12", "--json")
    assert res.exit_code == 1
    w = json.loads(res.stdout)["tasks"]["w"]
    assert w["error_type"] == "MapError" and "has 13 elements" in w["error"]


# ---------------------------------------------------------------------------------------------
# every record opens: a run of no tasks, a run still going, a paused run


def _planning_failed_run(store: Path) -> str:
    """A streamed solve whose model could not be reached: its round's run has no task."""
    from dagagent.errors import LLMConnectionError
    from dagagent.llm import ScriptedLLM

    llm = ScriptedLLM([LLMConnectionError("could not connect to the model's server")])
    registry = dagagent.Registry()

    @registry.tool
    def nothing() -> str:
        """Never called."""
        return ""

    solution = dagagent.solve_sync("Any plan?", registry, llm, store=store)
    assert solution.status.value == "failed"
    with RunStore(store) as st:
        run_id = st.get_solve(solution.solve_id).rounds[0].run_id
    assert run_id is not None
    return run_id


def test_a_run_whose_plan_never_came_is_failed_and_every_reader_opens_it(
    home: Path, tmp_path: Path
) -> None:
    run_id = _planning_failed_run(home / "runs.db")
    listed = cli("runs")
    assert listed.exit_code == 0 and re.search(rf"{run_id}\s.*\sfailed\s+none", listed.stdout)
    shown = cli("show", run_id)
    assert shown.exit_code == 0, shown.output
    assert f"run {run_id}: failed" in shown.stdout
    assert "tasks: none: no task of its plan was accepted, so nothing ran" in shown.stdout
    assert "could not connect to the model's server" in shown.stdout  # the round says why
    timeline = cli("show", run_id, "--timeline")
    assert timeline.exit_code == 0 and "no task ran" in timeline.stdout
    assert json.loads(cli("show", run_id, "--json").stdout)["status"] == "failed"
    drawn = cli("graph", run_id)
    assert drawn.exit_code == 0 and "(no tasks)" in drawn.stdout
    for fmt in ("mermaid", "dot"):
        assert cli("graph", run_id, "--format", fmt).exit_code == 0
    report = tmp_path / "r.html"
    made = cli("report", run_id, "--out", str(report))
    assert made.exit_code == 0, made.output
    assert "Nothing ran" in report.read_text()
    reviewed = cli("replan", run_id)
    assert reviewed.exit_code == 0 and "no task of its plan was accepted" in reviewed.stdout
    again = cli("replan", run_id, "--execute")
    assert again.exit_code == 2 and "nothing to run again" in again.output


def test_show_of_a_running_run_shows_each_task_running_with_its_time_so_far(
    home: Path,
) -> None:
    gate = threading.Event()
    reg = dagagent.Registry()

    @reg.tool
    def held() -> str:
        """Wait for the test."""
        gate.wait(30)
        return "done"

    @reg.tool
    def quick() -> str:
        """At once."""
        return "quick"

    plan = {
        "tasks": [
            {"id": "q", "tool": "quick", "args": {}},
            {"id": "h", "tool": "held", "args": {}},
            {"id": "after", "tool": "quick", "args": {}, "depends_on": ["h"]},
        ]
    }
    done: list[Any] = []
    runner = threading.Thread(
        target=lambda: done.append(dagagent.execute_sync(plan, reg, store=home / "runs.db"))
    )

    def h_is_running() -> bool:  # its row is written as it starts, by the store's writer
        if not (home / "runs.db").exists():
            return False
        try:
            with RunStore(home / "runs.db", read_only=True) as st:
                record = st.last_run()
        except dagagent.errors.StoreError:
            return False
        tasks = record.tasks
        # q is recorded twice (running, then succeeded): wait for its end too, or the counts
        # below would race the store's writer
        return (
            "h" in tasks
            and tasks["h"].status == "running"
            and "q" in tasks
            and tasks["q"].status == "succeeded"
        )

    runner.start()
    try:
        wait_until(h_is_running, "the store records h as running and q as succeeded")
        shown = cli("show", "--last")
        assert shown.exit_code == 0, shown.output
        out = " ".join(shown.stdout.split())
        assert "running for" in out
        row = next(line for line in shown.stdout.splitlines() if line.startswith("│ h "))
        cells = [c.strip() for c in row.strip("│").split("│")]
        assert cells[:3] == ["h", "held", "running"] and cells[4:] == ["-", ""]
        assert re.fullmatch(r"\d+\.\d{3}s…", cells[3])  # the time so far
        assert "1 running, 1 succeeded, 1 pending" in out
        listed = " ".join(cli("runs").stdout.split())
        assert "running 1 running, 1 succeeded, 1 pending" in listed
    finally:
        gate.set()
        runner.join(30)
    assert done and done[0].ok
    # once it ended, its result replaced the running row
    with RunStore(home / "runs.db", read_only=True) as st:
        assert st.last_run().tasks["h"].status == "succeeded"


def test_graph_of_a_plan_file_takes_tools_and_checks_them(home: Path, tmp_path: Path) -> None:
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps({"tasks": [{"id": "s", "tool": "shout", "args": {"text": "x"}}]}))
    (tmp_path / "shouting.py").write_text(
        "import dagagent\nregistry = dagagent.Registry()\n\n"
        "@registry.tool\ndef shout(text: str) -> str:\n    return text.upper()\n"
    )
    drawn = cli("graph", str(plan), "--tools", f"{tmp_path / 'shouting.py'}:registry")
    assert drawn.exit_code == 0, drawn.output
    assert "s  shout" in drawn.stdout
    unknown = cli("graph", str(plan), "--tools", "dagagent.toolkits.demo:registry")
    assert unknown.exit_code == 2 and "unknown_tool" in unknown.output
    assert cli("graph", str(plan)).exit_code == 0  # without tools: the graph alone


def test_show_says_why_a_condition_skipped_a_task(home: Path) -> None:
    res = cli("run", str(EXAMPLES / "conditional.json"))
    assert res.exit_code == 0, res.output
    assert "(3 skipped, 2 succeeded)" in res.output
    assert "umbrella skipped - (by its condition)\n" in res.output
    run_id = only_run(home)
    shown = cli("show", run_id)
    assert shown.exit_code == 0, shown.output
    assert re.search(r"umbrella\s+│ format_report │ skipped", shown.output)
    one = cli("show", run_id, "--task", "umbrella")
    assert one.exit_code == 0, one.output
    assert "when: ${paris.condition} in ['rain', 'storm']" in one.output
    assert (
        "why skipped: condition \"${paris.condition} in ['rain', 'storm']\" is false: "
        '${paris.condition} = "cloudy"' in one.output
    )
    check = cli("show", run_id, "--task", "check")
    assert "why skipped: not run: upstream task 'umbrella' was skipped by a condition" in (
        check.output
    )
    doc = json.loads(cli("show", run_id, "--json").stdout)
    assert doc["status"] == "succeeded"


def test_show_of_a_big_run_lists_what_went_wrong_first_and_summarises_the_rest(
    home: Path,
) -> None:
    # A terminal cannot use 3,000 rows (and drawing them took minutes at 100,000): show lists
    # the tasks that did not succeed first, then the first others, and says what it left out.
    reg = dagagent.Registry()

    @reg.tool
    async def step(i: int) -> int:
        """Fail at 2,998."""
        if i == 2998:
            raise ValueError("step 2998 broke")
        return i

    n = 3000
    tasks = [
        {
            "id": f"t{i}",
            "tool": "step",
            "args": {"i": i},
            **({"depends_on": [f"t{i - 1}"]} if i else {}),
        }
        for i in range(n)
    ]
    result = anyio.run(lambda: dagagent.execute({"tasks": tasks}, reg, store=home / "runs.db"))
    assert result.counts == {"succeeded": 2998, "failed": 1, "skipped": 1}
    r = cli("show", result.run_id)
    assert r.exit_code == 0, r.output
    rows = re.findall(r"^│ (t\d+) ", r.output, flags=re.MULTILINE)
    assert len(rows) == 100
    assert rows[-2:] == ["t2998", "t2999"] and rows[:3] == ["t0", "t1", "t2"]  # plan order
    caption = " ".join(r.output.split())
    assert "100 of 3,000 tasks listed (those that did not succeed first); 2,900 more " in caption
    assert "(2,900 succeeded)" in caption
    assert f"dagagent show {result.run_id} --task ID shows one" in caption
    (path,) = [line for line in r.output.splitlines() if line.startswith("critical path")]
    assert "… (2989 more) ->" in path and len(path) < 200
