"""Stops of a solve on Temporal that cut off calls with side effects: Ctrl-C on ``dagagent
ask --executor temporal``, and an operator terminating the workflow of the solve's round's
run. Either way the calls cut off go on the run's record in doubt, with their idempotency
keys (named on a worker, never made again), ``dagagent approvals`` lists them, ``dagagent
approve`` decides, and what runs next pays nothing twice.

A real ``dagagent ask`` process (the signal is the point), a development server, a worker
of the test's own serving ``temporal_tools:extra`` (``pay_hold`` writes each payment's key to
a file, so payments are counted there), the model a loopback server speaking OpenAI's wire
format. Nothing waits on a clock: the test waits for the held calls' start markers and the
store's rows.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

import dagagent
from dagagent.events import RunStarted
from dagagent.llm import OpenAIChat
from dagagent.settings import RunSettings

pytest.importorskip("temporalio")

import temporal_tools  # the workers import it too
from eventually import until, wait_until
from llm_server import LLMTestServer

from dagagent.executors.temporal import TemporalExecutor, workflow_id

from .temporal_fixtures import EXTRA, READY_S, ROOT, Workers
from .test_temporal_solve import DRIVER_KEY, Model

pytestmark = [pytest.mark.slow, pytest.mark.asyncio_only("Temporal's client runs on asyncio")]

FINISH = {"action": "finish", "answer": "paid", "cites": ["e"]}


@pytest.fixture
def model_server() -> Iterator[LLMTestServer]:
    with LLMTestServer() as srv:
        yield srv


def _plan(where: Path) -> dict[str, Any]:
    """Two payments that hold on the worker, one paid before it holds (``h``), one that would
    pay after (``a``), beside a task that finishes and one that waits for ``h``."""

    def pay(name: str, first: bool) -> dict[str, Any]:
        args = {"name": name, "where": str(where), "pay_first": first}
        return {"id": name, "tool": "pay_hold", "args": args}

    return {
        "goal": "pay",
        "tasks": [
            {"id": "e", "tool": "echo", "args": {"value": 7}},
            pay("h", True),
            pay("a", False),
            {"id": "after", "tool": "echo", "args": {"value": "${h}"}, "depends_on": ["h"]},
        ],
    }


def _temporal(workers: Workers) -> list[str]:
    return [
        "--executor", "temporal", "--temporal-address", workers.address,
        "--task-queue", workers.queue, "--payload-store", str(workers.payloads),
    ]  # fmt: skip


def _ask_args(workers: Workers, server: LLMTestServer, db: Path) -> list[str]:
    return [
        "ask", "pay twice", "--tools", EXTRA, "--model", "openai:gpt-test",
        "--base-url", f"{server.url}/v1", "--store", str(db), *_temporal(workers),
    ]  # fmt: skip


def _ask(workers: Workers, server: LLMTestServer, db: Path, where: Path) -> subprocess.Popen[bytes]:
    """``dagagent ask --executor temporal`` in a process of its own."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DAGAGENT_", "OPENAI_"))},
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
        "DAGAGENT_HOME": str(where / "home"),
        "OPENAI_API_KEY": DRIVER_KEY,
    }
    command = [sys.executable, "-m", "dagagent", *_ask_args(workers, server, db)]
    return subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=where,
    )


def _round_run(db: Path) -> str | None:
    """The round's run in store ``db``, once its record has task ``e``'s result."""
    from dagagent.store import RunStore

    if not db.exists():
        return None
    with RunStore(db, create=False) as st:
        runs = st.list_runs()
        return runs[0].run_id if runs and "e" in st.get_run(runs[0].run_id).tasks else None


def _held(where: Path, db: Path) -> str | None:
    """The round's run, once both payments hold on the worker and ``e`` is on record."""
    held = temporal_tools.started(where, "h") and temporal_tools.started(where, "a")
    return _round_run(db) if held else None


def _cli(db: Path, *args: str, code: int = 0) -> Any:
    done = CliRunner().invoke(dagagent.cli.app, [*args, "--store", str(db)])
    assert done.exit_code == code, done.output
    return done


def _check_in_doubt(db: Path, run_id: str, where: Path, ended: str) -> dict[str, Any]:
    """The run's record after the stop: ``e`` kept, the payments and what waits for one
    cancelled, both calls in doubt on record with the keys they were made with (``h``'s the
    key it paid with), neither made again; ``approvals`` lists both, saying how the workflow
    ``ended``. The calls in doubt, by task."""
    from dagagent.store import RunStore

    [paid_h] = temporal_tools.payments(where, "h")
    assert temporal_tools.payments(where, "a") == []
    with RunStore(db, create=False) as st:
        record = st.get_run(run_id)
        doubts = {e.task_id: e for e in st.effects(run_id) if e.in_doubt}
    tasks = record.tasks
    assert (tasks["e"].status.value, tasks["e"].output) == ("succeeded", 7)
    assert [tasks[t].status.value for t in ("h", "a", "after")] == ["cancelled"] * 3
    for t in ("h", "a"):
        assert "in doubt on the run's record" in (tasks[t].error or ""), tasks[t].error
    assert sorted(doubts) == ["a", "h"]
    assert doubts["h"].key == paid_h  # the key the call paid with, named on a worker
    assert len(temporal_tools.started(where, "h")) == 1  # neither was made again
    assert len(temporal_tools.started(where, "a")) == 1
    listed = _cli(db, "approvals", "--json")
    shown = {r["task_id"]: r for r in json.loads(listed.output)["in_doubt"]}
    assert sorted(shown) == ["a", "h"]
    assert {t: r["key"] for t, r in shown.items()} == {t: e.key for t, e in doubts.items()}
    assert all(ended in r["why"] for r in shown.values()), shown
    return doubts


def _decided_happened(db: Path, run_id: str, where: Path) -> str:
    """A person says ``h``'s payment happened, with the output it had; the solve cannot be
    resumed (it ended): nothing is paid. The key ``h`` paid with."""
    from dagagent.store import RunStore

    [paid_h] = temporal_tools.payments(where, "h")
    _cli(db, "approve", run_id, "h", "--happened", "--output", '{"paid": "by hand"}', "--by", "ann")
    with RunStore(db, create=False) as st:
        [solve] = st.list_solves()
    refused = _cli(db, "resume", solve.solve_id, code=7)  # it ended: nothing to resume
    assert "nothing to resume" in refused.output, refused.output
    assert temporal_tools.payments(where, "h") == [paid_h]
    return paid_h


def _revision(workers: Workers, db: Path, run_id: str, code: int = 0) -> Any:
    """``replan RUN --execute`` on the workers: the revision's record."""
    from dagagent.store import RunStore

    _cli(
        db,
        "replan",
        run_id,
        "--execute",
        "--json",
        "--tools",
        EXTRA,
        *_temporal(workers),
        code=code,
    )
    with RunStore(db, create=False) as st:
        revision = st.get_run(st.last_run_id())
    assert revision.parent_id == run_id
    return revision


def test_ctrl_c_on_ask_leaves_the_calls_it_cut_off_in_doubt_on_record(
    own_workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """SIGINT to ``dagagent ask --executor temporal`` while its round's run holds two
    payments on a worker: the driver cancels the solve (and so its run), records what the
    run finished and names the two calls on a worker for the run's record (neither made
    again), records the solve cancelled and exits 130, pointing at ``dagagent approvals``.
    A person says the first payment happened and the second did not: the revision of the
    round's run pays nothing more for the first and makes the second once, with its key."""
    from dagagent.store import RunStore

    [first_worker] = own_workers.start(1, tools=EXTRA)
    model_server.responder = Model([_plan(tmp_path)], [FINISH])
    db = tmp_path / "runs.db"
    driver = _ask(own_workers, model_server, db, tmp_path)
    try:
        run_id = wait_until(
            lambda: _held(tmp_path, db),
            "both payments held and 'e' recorded",
            timeout=READY_S,
            unless=lambda: None if driver.poll() is None else "the driver ended",
        )
        driver.send_signal(signal.SIGINT)
        _, err = driver.communicate(timeout=READY_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            driver.kill()
        if driver.returncode != 130:  # should the driver not end, nothing holds the test up
            for name in ("h", "a"):
                (tmp_path / f"{name}.go").touch()
    said = " ".join(err.decode().split())
    assert driver.returncode == 130, said
    assert "Traceback" not in said, said
    assert "interrupted: solve" in said and "recorded as cancelled in round 1" in said, said
    assert f"dagagent approvals --run {run_id}" in said and "# 2 calls" in said, said
    first_worker.kill()  # its calls never end: whatever they did is all they did
    first_worker.wait()
    with RunStore(db, create=False) as st:
        [solve] = st.list_solves()
        record = st.get_solve(solve.solve_id)
        assert st.get_run(run_id).status.value == "cancelled"
    assert record.status == "cancelled"
    assert [(r.outcome, r.run_id) for r in record.rounds] == [("cancelled", run_id)]
    doubts = _check_in_doubt(db, run_id, tmp_path, "cancelled")
    paid_h = _decided_happened(db, run_id, tmp_path)
    _cli(db, "approve", run_id, "a", "--allow", "--by", "ann")
    own_workers.start(1, tools=EXTRA)
    (tmp_path / "a.go").touch()  # made again, it does not hold
    (tmp_path / "h.go").touch()  # a payment made again would not hold either
    again = _revision(own_workers, db, run_id).tasks
    assert (again["h"].status.value, again["h"].output) == ("succeeded", {"paid": "by hand"})
    assert temporal_tools.payments(tmp_path, "h") == [paid_h]  # paid once, not again
    assert again["a"].status.value == "succeeded", again["a"]
    assert temporal_tools.payments(tmp_path, "a") == [doubts["a"].key]  # once, its first key
    assert again["after"].output == {"paid": "by hand"}


def test_an_operator_terminating_a_round_s_run_leaves_its_calls_in_doubt_on_record(
    own_workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """An operator terminates the round's run workflow while it holds two payments: the
    solve's driver records what the run finished and names both calls on a worker for the
    run's record (neither made again); the round and the solve fail as the solve's workflow
    closes them (exit 1), and stderr points at ``dagagent approvals``. A person says the
    first payment happened and the second is not to be made: the revision of the round's
    run pays nothing, and denies the second's task."""
    from dagagent.store import RunStore

    [worker] = own_workers.start(1, tools=EXTRA)
    model_server.responder = model = Model([_plan(tmp_path)], [FINISH])
    db = tmp_path / "runs.db"
    operated: list[BaseException] = []

    async def terminate(run_id: str) -> None:
        operator = TemporalExecutor(
            own_workers.address, task_queue=own_workers.queue, payloads=own_workers.payloads
        )
        async with operator.session():
            assert operator.client is not None
            await operator.client.get_workflow_handle(workflow_id(run_id)).terminate("an operator")

    def operator() -> None:
        try:
            run_id = wait_until(lambda: _held(tmp_path, db), "both payments held", timeout=READY_S)
            anyio.run(terminate, run_id, backend="asyncio")
        except BaseException as exc:
            operated.append(exc)
            for name in ("h", "a"):  # the solve ends, and the test says why
                (tmp_path / f"{name}.go").touch()

    by_hand = threading.Thread(target=operator)
    by_hand.start()
    try:
        done = CliRunner().invoke(
            dagagent.cli.app,
            _ask_args(own_workers, model_server, db),
            env={"OPENAI_API_KEY": DRIVER_KEY},
        )
    finally:
        by_hand.join()
    assert operated == []
    run_id = _round_run(db)
    said = " ".join(done.output.split())
    assert done.exit_code == 1, said
    assert "Traceback" not in said, said
    assert f"round 1: run {run_id} ended without finishing" in said, said
    assert f"dagagent approvals --run {run_id}" in said and "# 2 calls" in said, said
    assert model.count == 1  # the planner; the joiner is never asked
    with RunStore(db, create=False) as st:
        [solve] = st.list_solves()
        record = st.get_solve(solve.solve_id)
    assert record.status == "failed"
    assert [(r.outcome, r.run_id) for r in record.rounds] == [("failed", run_id)]
    assert run_id is not None
    _check_in_doubt(db, run_id, tmp_path, "terminated")
    paid_h = _decided_happened(db, run_id, tmp_path)
    _cli(db, "approve", run_id, "a", "--deny", "--by", "ann")
    (tmp_path / "h.go").touch()  # its first call goes on, and pays no more (it paid first)
    try:
        again = _revision(own_workers, db, run_id, code=1).tasks
        assert (again["h"].status.value, again["h"].output) == ("succeeded", {"paid": "by hand"})
        assert again["a"].status.value == "denied", again["a"]
        assert temporal_tools.payments(tmp_path, "h") == [paid_h]  # paid once, not again
        assert temporal_tools.payments(tmp_path, "a") == []  # never paid
    finally:
        worker.kill()  # a's first call still holds there: it never pays
        worker.wait()


class _SaysIdle(TemporalExecutor):
    """The executor of a solve whose driver says when it goes to sleep until its next read
    of the solve's steps (it reads ``poll_s`` then), once ``watching``."""

    def __init__(self, *args: Any, **options: Any) -> None:
        self.asleep = anyio.Event()
        self.watching = False
        super().__init__(*args, **options)

    @property  # type: ignore[override]
    def poll_s(self) -> float:
        if self.watching:
            self.asleep.set()
        value: float = self.__dict__["poll_s"]
        return value

    @poll_s.setter
    def poll_s(self, value: float) -> None:
        self.__dict__["poll_s"] = value  # (where the executors of its runs find it)


@pytest.mark.anyio
async def test_a_stop_before_the_driver_follows_the_round_s_run_still_records_that_run(
    own_workers: Workers, model_server: LLMTestServer, tmp_path: Path
) -> None:
    """The driver has read the round's start and sleeps (it reads the solve's steps every
    30 s here) when the planner answers: the solve's workflow starts the round's run, whose
    two payments hold on a worker, and the driver has not read the step that starts it.
    Stopping the driver then still records that run as a stop records one it followed: what
    it finished, both calls in doubt with their keys (named on a worker, neither made
    again), the round cancelled with it."""
    from dagagent.events import RoundStarted
    from dagagent.store import RunStore

    own_workers.start(1, tools=EXTRA)
    model = Model([_plan(tmp_path)], [FINISH], hold=1)  # the planner's answer waits
    model_server.responder = model
    db = tmp_path / "runs.db"
    ex = _SaysIdle(
        own_workers.address,
        task_queue=own_workers.queue,
        payloads=own_workers.payloads,
        poll_s=30.0,
    )
    followed: list[str] = []

    def listen(event: Any) -> None:
        if isinstance(event, RoundStarted):
            ex.watching = True  # its next read of poll_s: nothing more to read, it sleeps
        if isinstance(event, RunStarted):
            followed.append(event.run_id)

    try:
        async with (
            OpenAIChat("gpt-test", base_url=f"{model_server.url}/v1", api_key=DRIVER_KEY) as llm,
            anyio.create_task_group() as tg,
        ):

            async def solve() -> None:
                await dagagent.solve(
                    "pay twice",
                    temporal_tools.extra,
                    llm,
                    settings=RunSettings(executor=ex),
                    store=db,
                    listeners=[listen],
                    # (so its plan is written whole, not streamed into a run started first:
                    # the round's run starts after the planner answers)
                    sub_solves=True,
                )

            tg.start_soon(solve)
            await ex.asleep.wait()
            model.release.set()
            await until(
                lambda: (
                    temporal_tools.started(tmp_path, "h") and temporal_tools.started(tmp_path, "a")
                ),
                "both payments held on the worker",
            )
            assert followed == []  # the driver sleeps: it has not seen the run start
            tg.cancel_scope.cancel()
    finally:
        model.release.set()
        for name in ("h", "a"):
            (tmp_path / f"{name}.go").touch()
    with RunStore(db, create=False) as st:
        [solve] = st.list_solves()
        record = st.get_solve(solve.solve_id)
        [run_id] = [r.run_id for r in record.rounds]
        assert run_id is not None and st.get_run(run_id).status.value == "cancelled"
    assert (record.status, record.reason) == ("cancelled", "the solve was stopped")
    assert [r.outcome for r in record.rounds] == ["cancelled"]
    assert followed == [run_id]  # recorded as a followed run is, events and all
    _check_in_doubt(db, run_id, tmp_path, "cancelled")
