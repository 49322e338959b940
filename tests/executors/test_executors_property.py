"""For random DAGs, every executor runs each task exactly once and never before its dependencies."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import dagagent
from dagagent.events import TaskFinished, TaskStarted
from dagagent.settings import RunSettings


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, int]]:
    n = draw(st.integers(min_value=1, max_value=25))
    tasks = []
    delays = {}
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), unique=True, max_size=min(i, 4))) if i else []
        tid = f"t{i}"
        delays[tid] = draw(st.integers(0, 3))
        tasks.append(
            {
                "id": tid,
                "tool": "step",
                "args": {"name": tid, "ticks": delays[tid]},
                "depends_on": [f"t{d}" for d in deps],
            }
        )
    order = draw(st.permutations(tasks))
    return list(order), delays


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags(), st.sampled_from(["serial", "levels", "dataflow"]), st.integers(1, 4) | st.none())
def test_each_task_once_and_after_its_dependencies(
    dag: tuple[list[dict[str, Any]], dict[str, int]], executor: str, limit: int | None
) -> None:
    tasks, _ = dag
    events: list[tuple[str, str]] = []
    reg = dagagent.Registry()

    @reg.tool
    async def step(name: str, ticks: int) -> str:
        events.append(("start", name))
        for _ in range(ticks):
            await anyio.lowlevel.checkpoint()
        events.append(("end", name))
        return name

    result = dagagent.execute_sync(
        {"tasks": tasks}, reg, settings=RunSettings(executor=executor, max_concurrency=limit)
    )
    assert result.ok
    starts = [n for kind, n in events if kind == "start"]
    assert sorted(starts) == sorted(t["id"] for t in tasks)  # exactly once each
    ended_at = {n: i for i, (kind, n) in enumerate(events) if kind == "end"}
    started_at = {n: i for i, (kind, n) in enumerate(events) if kind == "start"}
    for t in tasks:
        for d in t["depends_on"]:
            assert ended_at[d] < started_at[t["id"]], f"{t['id']} started before {d} ended"


# ----------------------------------------------------------------------------------------------
# Random DAGs with random failures, under both failure policies, on every executor.
#
# What holds, stated precisely (``bad(t)``: ``t`` fails on purpose, or a dependency of ``t`` is
# ``bad``):
#
# Both policies
# 1. Every task has one final status; it is started (``TaskStarted``) at most once, and its
# tool is called at most once, only if it started, and always if it succeeded or failed.
# In-process executors call the tool of every task they start (a task waiting for a
# ``max_concurrency`` slot has not started); Dask may cancel a submitted call before a
# worker runs it.
# 2. A task starts only after every dependency has finished with ``succeeded``.
# 3. ``succeeded`` tasks have their tool's output; ``failed`` tasks are tasks that fail on
# purpose; ``skipped`` tasks never started and have a dependency that is ``failed`` or
# ``skipped`` (so some ancestor failed).
# 4. The run succeeded iff every task succeeded, which is iff no task is ``bad``.
#
# ``on_failure="continue"``
# 5. Nothing is cancelled: a task succeeded iff it is not ``bad``; failed iff it fails on
# purpose and no dependency is ``bad``; skipped otherwise.
#
# ``on_failure="cancel"``
# 6. No task starts after the first ``failed`` result is emitted.
# 7. Every task that never started is ``skipped`` or ``cancelled`` (attempts 0); a started
# task that did not finish is ``cancelled`` ("cancelled while running: " and the first failure).
# 8. If some task failed, the run failed; a task left unstarted is ``cancelled`` unless a
# dependency is failed or skipped.
# ----------------------------------------------------------------------------------------------


DAG = tuple[list[dict[str, Any]], dict[str, bool]]


@st.composite
def failing_dags(draw: st.DrawFn) -> DAG:
    n = draw(st.integers(min_value=1, max_value=18))
    tasks = []
    fails: dict[str, bool] = {}
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), unique=True, max_size=min(i, 3))) if i else []
        tid = f"t{i}"
        fails[tid] = draw(st.booleans().map(lambda b: b and draw(st.integers(0, 3)) == 0))
        tasks.append(
            {
                "id": tid,
                "tool": "step",
                "args": {"name": tid, "ticks": draw(st.integers(0, 3)), "fail": fails[tid]},
                "depends_on": [f"t{d}" for d in deps],
            }
        )
    return list(draw(st.permutations(tasks))), fails


def _registry(calls: list[str]) -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool
    async def step(name: str, ticks: int, fail: bool) -> str:
        calls.append(name)  # atomic; in-process Dask workers call this very function
        for _ in range(ticks):
            await anyio.lowlevel.checkpoint()
        if fail:
            raise RuntimeError(f"{name} fails on purpose")
        return f"out-{name}"

    return reg


def _check(
    dag: DAG, executor: Any, policy: str, limit: int | None, *, remote: bool = False
) -> None:
    tasks, fails = dag
    deps = {t["id"]: t["depends_on"] for t in tasks}
    calls: list[str] = []
    events: list[Any] = []
    reg = _registry(calls)
    result = dagagent.execute_sync(
        {"tasks": tasks},
        reg,
        listeners=[events.append],
        settings=RunSettings(executor=executor, on_failure=policy, max_concurrency=limit),
    )
    status = {k: r.status.value for k, r in result.tasks.items()}
    started = [e.task_id for e in events if isinstance(e, TaskStarted)]
    finished = {e.result.task_id: i for i, e in enumerate(events) if isinstance(e, TaskFinished)}
    start_at = {e.task_id: i for i, e in enumerate(events) if isinstance(e, TaskStarted)}

    memo: dict[str, bool] = {}

    def bad(t: str) -> bool:
        if t not in memo:
            memo[t] = fails[t] or any(bad(d) for d in deps[t])
        return memo[t]

    # 1
    assert set(status) == set(deps)
    assert len(started) == len(set(started))
    assert len(calls) == len(set(calls)) and set(calls) <= set(started)
    assert {t for t, s in status.items() if s in ("succeeded", "failed")} <= set(calls)
    if not remote:
        assert sorted(calls) == sorted(started)
    # 2
    for t in started:
        for d in deps[t]:
            assert status[d] == "succeeded" and finished[d] < start_at[t], (t, d)
    # 3
    for t, s in status.items():
        r = result.tasks[t]
        if s == "succeeded":
            assert r.output == f"out-{t}" and not fails[t]
        elif s == "failed":
            assert fails[t] and t in start_at and r.error_type == "RuntimeError"
        elif s == "skipped":
            assert t not in start_at and r.attempts == 0
            assert any(status[d] in ("failed", "skipped") for d in deps[t]), (t, status)
    # 4
    all_ok = not any(bad(t) for t in deps)
    assert result.ok == all_ok == all(s == "succeeded" for s in status.values())

    if policy == "continue":
        # 5
        for t, s in status.items():
            if not bad(t):
                expected = "succeeded"
            elif fails[t] and not any(bad(d) for d in deps[t]):
                expected = "failed"
            else:
                expected = "skipped"
            assert s == expected, (t, status)
    else:
        # 6
        first_failure = min(
            (i for t, i in finished.items() if status[t] == "failed"), default=len(events)
        )
        assert all(i < first_failure for i in start_at.values()), status
        # 7, 8
        for t, s in status.items():
            r = result.tasks[t]
            if t not in start_at:
                assert s in ("skipped", "cancelled") and r.attempts == 0
                if s == "cancelled":
                    assert not any(status[d] in ("failed", "skipped") for d in deps[t])
                    assert any(status[d] == "failed" for d in status)
            elif s == "cancelled":
                # the cause is named: the first task to fail, which stopped the run
                first = min((t for t in status if status[t] == "failed"), key=finished.get)
                assert (
                    r.error
                    == f"cancelled while running: the run was stopped after task {first!r} failed"
                )
        if "failed" in status.values():
            assert result.status == "failed"


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(
    failing_dags(),
    st.sampled_from(["serial", "levels", "dataflow"]),
    st.sampled_from(["cancel", "continue"]),
    st.integers(1, 3) | st.none(),
)
def test_statuses_are_consistent(dag: DAG, executor: str, policy: str, limit: int | None) -> None:
    _check(dag, executor, policy, limit)


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    pytest.importorskip("distributed")
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            processes=False, n_workers=2, threads_per_worker=2, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(dag=failing_dags(), policy=st.sampled_from(["cancel", "continue"]))
def test_statuses_are_consistent_on_dask(dag: DAG, policy: str, dask_client: Any) -> None:
    from dagagent.executors.dask import DaskExecutor

    _check(dag, DaskExecutor(client=dask_client), policy, None, remote=True)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dag=failing_dags().map(
        lambda d: ([{**t, "args": {**t["args"], "fail": False}} for t in d[0]], d[1])
    ),
    executor=st.sampled_from(["levels", "serial"]),
)
def test_max_concurrency_one_is_serial_order(dag: DAG, executor: str) -> None:
    """With ``max_concurrency=1``, ``levels`` runs each level's tasks one at a time in plan
    order: exactly the order of ``serial`` (``PlanGraph.order``), without overlap."""
    tasks, _ = dag
    calls: list[str] = []
    events: list[Any] = []
    graph = dagagent.validate({"tasks": tasks}, _registry(calls))
    result = dagagent.execute_sync(
        graph,
        _registry(calls),
        listeners=[events.append],
        settings=RunSettings(executor=executor, max_concurrency=1),
    )
    assert result.ok
    assert calls == graph.order
    kinds = [(e.kind, getattr(e, "task_id", None) or e.result.task_id) for e in events[1:-1]]
    assert kinds == [(k, t) for t in graph.order for k in ("task.started", "task.finished")]
