"""A long run on Temporal: its workflow continues as new (here by a small ``history_events``)
and each run of it passes on what the runs before it finished as arguments of their own, as
they came, so each result is stored once; the run ends as a local run of its plan does.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import anyio
import pytest
from eventually import until

import dagagent
from dagagent.errors import ClusterError
from dagagent.settings import RunSettings, TaskRetryPolicy

pytest.importorskip("temporalio")

import temporal_tools  # tests/ is on sys.path under pytest; the workers import it too
from temporalio.service import RPCError

from dagagent.executors.temporal import RunWorkflow, TemporalExecutor, workflow_id
from dagagent.executors.temporal._workflow import RunInput

from .temporal_fixtures import READY_S, ROOT, Workers

asyncio_only = pytest.mark.asyncio_only("Temporal's client runs on asyncio")

FAST_RETRY = TaskRetryPolicy(base_delay_s=0.01, jitter=0)
#: The smallest history length the executor takes: a run of the workflow holds a dozen tasks.
SHORT = 100
#: Histories of a run whose workflow continued as new carrying every result in its input
#: (recorded before each run carried its own): its first run, then the second.
BEFORE_RUNS = [
    ROOT / "tests" / "data" / "temporal" / f"run_continued_before_runs_{k}.json.gz" for k in (1, 2)
]


def executor(workers: Workers, **options: Any) -> TemporalExecutor:
    return TemporalExecutor(
        workers.address, task_queue=workers.queue, payloads=workers.payloads, **options
    )


def outcome(result: dagagent.RunResult) -> dict[str, tuple[str, Any, str | None]]:
    return {t: (r.status.value, r.output, r.error) for t, r in result.tasks.items()}


def chain(prefix: str, n: int, after: str | None = None) -> list[dict[str, Any]]:
    """``n`` tasks, each adding 1 to the one before (the first to ``after``, else to 0)."""
    first = f"${{{after}}}" if after else 0
    return [
        {
            "id": f"{prefix}{i}",
            "tool": "add",
            "args": {"a": f"${{{prefix}{i - 1}}}" if i else first, "b": 1},
        }
        for i in range(n)
    ]


async def runs_of(ex: TemporalExecutor) -> list[Any]:
    """The history of each run of the last run's workflow, first to last (its
    continue-as-new chain)."""
    assert ex.client is not None and ex.workflow_id is not None
    latest = await ex.client.get_workflow_handle(ex.workflow_id).describe()
    run_id: str | None = latest.raw_description.workflow_execution_info.first_run_id
    found = []
    while run_id:
        history = await ex.client.get_workflow_handle(ex.workflow_id, run_id=run_id).fetch_history()
        found.append(history)
        last = history.events[-1]
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.HasField("workflow_execution_continued_as_new_event_attributes")
            else None
        )
    return found


def replayer(converter: Any) -> Any:
    from temporalio.worker import Replayer
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

    return Replayer(
        workflows=[RunWorkflow],
        data_converter=converter,
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("dagagent")
        ),
    )


def started_with(history: Any) -> list[Any]:
    """The payloads a run of the workflow started with (its arguments)."""
    return list(history.events[0].workflow_execution_started_event_attributes.input.payloads)


async def assert_passed_on(ex: TemporalExecutor, histories: list[Any]) -> list[dict[str, Any]]:
    """Each run started with the run's first input (the same payload in every run), then one
    argument per earlier run, passed on as it came; together with the last run's result,
    they hold every result once. The earlier runs' arguments, decoded."""
    assert ex.client is not None
    inputs = [started_with(h) for h in histories]
    for k, payloads in enumerate(inputs):
        assert len(payloads) == 1 + k  # the input, then one argument per earlier run
        assert payloads[0] == inputs[0][0]  # the first input, unchanged
        if k > 1:
            assert payloads[1:k] == inputs[k - 1][1:]  # passed on as they came
    earlier = await ex.client.data_converter.decode(inputs[-1][1:])
    result = await ex.client.get_workflow_handle(ex.workflow_id or "").result()
    carried = [r for run in earlier for r in run["finished"]]
    assert result[: len(carried)] == carried  # in the order they finished, each once
    assert len({r["task_id"] for r in result}) == len(result)
    for k, run in enumerate(earlier, 1):
        assert run["left"]["generation"] == k
    return list(earlier)


# -- a long run ------------------------------------------------------------------------------


@pytest.mark.slow
@asyncio_only
@pytest.mark.anyio
async def test_a_long_run_carries_each_result_once_and_ends_as_a_local_run(
    workers: Workers, tmp_path: Path
) -> None:
    """A chain of 60 tasks (some with outputs long enough to travel by reference) and a map
    in a workflow allowed 100 history events: it continues as new several times, each run
    passing on what the runs before it finished as they came; every result is recorded,
    the run's results are a local run's, and every run of the workflow replays."""
    p = {
        "goal": "a long run",
        "tasks": [
            *chain("t", 60),
            *(
                {
                    "id": f"long{i}",
                    "tool": "big",
                    "args": {"i": i, "n": 3000},
                    "depends_on": [f"t{10 * i}"],
                }
                for i in range(6)
            ),
            {
                "id": "m",
                "for_each": list(range(30)),
                "tool": "add",
                "args": {"a": "${@item}", "b": "${t59}"},
            },
        ],
    }
    ex = executor(workers, history_events=SHORT)
    store = tmp_path / "runs.db"
    remote = await dagagent.execute(
        p, temporal_tools.registry, settings=RunSettings(executor=ex, retry=FAST_RETRY), store=store
    )
    local = await dagagent.execute(
        p, temporal_tools.registry, settings=RunSettings(retry=FAST_RETRY)
    )
    assert remote.ok, remote.failed
    assert outcome(remote) == outcome(local)
    assert remote.tasks["m"].output == [60 + i for i in range(30)]
    with dagagent.RunStore(store) as runs:
        assert outcome(runs.get_run(remote.run_id)) == outcome(local)
    async with ex.session():
        assert ex.client is not None
        histories = await runs_of(ex)
        assert len(histories) >= 4
        earlier = await assert_passed_on(ex, histories)
        assert sum(len(run["finished"]) for run in earlier) < len(p["tasks"])
        replaying = replayer(ex.client.data_converter)
        for history in histories:  # each run decides as it did
            await replaying.replay_workflow(history)


@pytest.mark.slow
@asyncio_only
@pytest.mark.anyio
async def test_a_plan_being_written_continues_as_new_with_the_tasks_that_reached_it(
    workers: Workers,
) -> None:
    """Tasks of a plan being written reach runs of the workflow after the first: each run
    passes on the tasks that reached it with its results, so the runs after it know them
    (a later task depends on them) and the run ends as a local run of the whole plan."""
    from dagagent.graph import GrowingGraph, PlanChecker
    from dagagent.plan import ToolTask

    graph = GrowingGraph("streamed")
    checker = PlanChecker(temporal_tools.registry)

    def add(*tasks: dict[str, Any]) -> None:
        for task in tasks:
            check = checker.check(ToolTask(**task))
            assert check.ok, check.issues
            graph.add(check)

    ex = executor(workers, history_events=SHORT)
    result: list[dagagent.RunResult] = []

    async def run() -> None:
        result.append(
            await dagagent.execute(
                graph, temporal_tools.registry, settings=RunSettings(executor=ex, retry=FAST_RETRY)
            )
        )

    async def generation() -> int:
        if ex.client is None or ex.workflow_id is None:
            return -1
        try:
            progress = await ex.client.get_workflow_handle(ex.workflow_id).query("progress", 0)
        except RPCError:  # not started yet
            return -1
        return int(progress["generation"])

    a, b = chain("a", 30), chain("b", 30, after="a29")
    last = {"id": "last", "tool": "add", "args": {"a": "${a3}", "b": "${b29}"}}
    with anyio.fail_after(READY_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            add(*a)
            await until(lambda: generation_at_least(generation, 1), "a second run of the workflow")
            add(*b)  # they reach a run after the first, which continues as new in turn
            await until(lambda: generation_at_least(generation, 3), "a fourth run of the workflow")
            add(last)
            graph.close()
    [remote] = result
    local = await dagagent.execute(
        {"goal": "streamed", "tasks": [*a, *b, last]},
        temporal_tools.registry,
        settings=RunSettings(retry=FAST_RETRY),
    )
    assert remote.ok, remote.failed
    assert outcome(remote) == outcome(local)
    assert remote.tasks["last"].output == 4 + 60
    async with ex.session():
        assert ex.client is not None
        histories = await runs_of(ex)
        earlier = await assert_passed_on(ex, histories)
        arrived = [t["id"] for run in earlier for doc in run["arrived"] for t in doc["tasks"]]
        assert "b0" in arrived  # the tasks that reached a later run travel with its results
        replaying = replayer(ex.client.data_converter)
        for history in histories:
            await replaying.replay_workflow(history)


async def generation_at_least(generation: Any, n: int) -> bool:
    return bool(await generation() >= n)


@pytest.mark.slow
@asyncio_only
@pytest.mark.anyio
async def test_a_run_stopped_when_its_history_is_long_does_not_carry_on(
    workers: Workers, tmp_path: Path
) -> None:
    """A run stopped under ``cancel`` (its plan rejected while it was written) once its
    history passed ``history_events`` ends there: no task starts after the stop, in this
    workflow or in a new one (a run that continued as new would start the tasks left)."""
    from dagagent.graph import GrowingGraph, PlanChecker
    from dagagent.plan import ToolTask

    graph = GrowingGraph("stopped")
    checker = PlanChecker(temporal_tools.registry)
    held = {"id": "held", "tool": "hold", "args": {"name": "s", "where": str(tmp_path)}}
    for task in [held, *chain("c", 200)]:
        check = checker.check(ToolTask(**task))
        assert check.ok, check.issues
        graph.add(check)
    ex = executor(workers, history_events=SHORT)
    result: list[dagagent.RunResult] = []

    async def run() -> None:
        result.append(
            await dagagent.execute(
                graph, temporal_tools.registry, settings=RunSettings(executor=ex, retry=FAST_RETRY)
            )
        )

    async def long_history() -> bool:
        if ex.client is None or ex.workflow_id is None:
            return False
        try:
            described = await ex.client.get_workflow_handle(ex.workflow_id).describe()
        except RPCError:  # not started yet
            return False
        return bool(described.raw_description.workflow_execution_info.history_length >= SHORT)

    try:
        with anyio.fail_after(READY_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                await until(long_history, "a history past history_events")
                graph.close(aborted=True)
    finally:
        (tmp_path / "s.go").touch()  # the tool's thread on the worker ends too
    [r] = result
    assert r.status is dagagent.RunStatus.FAILED
    assert r.tasks["held"].status is dagagent.TaskStatus.CANCELLED
    assert r.tasks["c199"].status is dagagent.TaskStatus.CANCELLED
    assert "plan being written was rejected" in (r.tasks["c199"].error or "")
    ran = [t for t in r.tasks if t.startswith("c") and r.tasks[t].ok]
    assert len(ran) < 60  # the chain stopped with the run
    async with ex.session():
        histories = await runs_of(ex)
        assert len(histories) == 1  # it ended where it stopped


@pytest.mark.slow
@asyncio_only
@pytest.mark.anyio
async def test_a_workflow_ended_after_continuing_as_new_leaves_every_result_on_record(
    workers: Workers, tmp_path: Path
) -> None:
    """The driver follows a run slowly (it has recorded nothing yet) when the run's
    workflow, continued as new several times, is terminated: what the earlier runs finished
    (carried in arguments of their own) is read from the last run's history and recorded,
    and the run's error says so."""
    held = {
        "id": "held",
        "tool": "hold",
        "args": {"name": "h", "where": str(tmp_path)},
        "depends_on": ["c39"],
    }
    p = {"goal": "ended", "tasks": [*chain("c", 40), held]}
    ex = executor(workers, history_events=SHORT, poll_s=3600.0)
    store = tmp_path / "runs.db"
    failure: list[BaseException] = []

    async def run() -> None:
        try:
            await dagagent.execute(
                p,
                temporal_tools.registry,
                settings=RunSettings(executor=ex, retry=FAST_RETRY),
                store=store,
            )
        except ClusterError as exc:
            failure.append(exc)

    try:
        with anyio.fail_after(READY_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                await until(lambda: temporal_tools.started(tmp_path, "h"), "the held call")
                assert ex.client is not None and ex.workflow_id is not None
                await ex.client.get_workflow_handle(ex.workflow_id).terminate("a test ends it")
    finally:
        (tmp_path / "h.go").touch()  # the tool's thread on the worker ends too
    [exc] = failure
    assert "what it finished is recorded" in str(exc)
    async with ex.session():
        histories = await runs_of(ex)
    assert len(histories) >= 3 and len(started_with(histories[-1])) == len(histories)
    assert ex.workflow_id is not None
    with dagagent.RunStore(store) as runs:
        record = runs.get_run(ex.workflow_id.removeprefix(workflow_id("")))
    assert {t: r.output for t, r in record.tasks.items() if r.ok} == {
        f"c{i}": i + 1 for i in range(40)
    }
    assert not record.tasks["held"].ok


# -- runs of the workflow that carried every result in their input -------------------------


def _history(path: Path) -> Any:
    from temporalio.client import WorkflowHistory

    with gzip.open(path, "rt") as f:
        return WorkflowHistory.from_json("dagagent-run-before", f.read())


@asyncio_only
@pytest.mark.anyio
async def test_a_run_continued_as_new_before_each_run_carried_its_own_replays(
    tmp_path: Path,
) -> None:
    """The histories of a run whose workflow continued as new carrying every result in its
    input replay on this version (its first run continues as new as it did, one argument),
    and a workflow that starts from such an input has every result, and passes the input on
    unchanged should it continue as new in turn."""
    from dagagent.executors.temporal._payloads import DirectoryPayloads, data_converter

    histories = [_history(p) for p in BEFORE_RUNS]
    replaying = replayer(data_converter(DirectoryPayloads(tmp_path)))
    for history in histories:
        await replaying.replay_workflow(history)
    first, second = (h.events for h in histories)
    [given] = [json.loads(p.data) for p in started_with(histories[1])]
    [moved] = [
        json.loads(p.data)
        for p in first[-1].workflow_execution_continued_as_new_event_attributes.input.payloads
    ]
    assert moved == given and given["generation"] == 1
    workflow = RunWorkflow(given)
    done = [r["task_id"] for r in given["finished"]]
    assert done and workflow.progress(0)["results"] == given["finished"]
    assert workflow.progress(0)["generation"] == 1
    assert workflow.ready == [f"t{len(done)}"]  # the next of the chain, nothing run again
    assert workflow.given == given and workflow.earlier == [] and workflow.first == len(done)
    assert len(second) > 3


def test_a_run_puts_together_what_the_earlier_runs_left() -> None:
    """A run's earlier runs' arguments, in order: their results after the input's (the
    results of a resumed run), the tasks that reached them added to the plan, and where the
    last left the run (how many runs, the plan still being written or rejected, what was
    spent and counted); the input stays as it came."""
    inp = RunInput(
        run_id="r1",
        plan={"goal": "g", "tasks": [{"id": "a"}, {"id": "b"}]},
        order=["a", "b"],
        dependencies={"a": [], "b": ["a"]},
        maps=[],
        local=[],
        side_effects=[],
        bounds={"a": None, "b": None},
        allow_partial=[],
        on_failure="continue",
        max_elements=100,
        retry={},
        task_queue="q",
        finished=[{"task_id": "a", "status": "reused", "error": None, "output": 1}],
        streaming=True,
        budget={"limits": {"tool_calls": 9}, "spent": {"tool_calls": 1}},
    )
    given = asdict(inp)
    arrived = {
        "tasks": [{"id": "c"}, {"id": "d"}],
        "dependencies": {"c": ["b"], "d": ["a"]},
        "maps": ["c"],
        "local": ["d"],
        "side_effects": [],
        "bounds": {"c": None, "d": 5.0},
        "allow_partial": [],
    }
    runs = [
        {
            "finished": [{"task_id": "b", "status": "succeeded", "error": None, "output": 2}],
            "arrived": [arrived],
            "left": {
                "generation": 1,
                "streaming": True,
                "aborted": False,
                "spent": {"tool_calls": 3},
                "ledger": {},
            },
        },
        {
            "finished": [{"task_id": "c", "status": "succeeded", "error": None, "output": [3]}],
            "arrived": [],
            "left": {
                "generation": 2,
                "streaming": False,
                "aborted": True,
                "spent": {"tool_calls": 5},
                "ledger": {"tool:x": [2, 7.0]},
            },
        },
    ]
    workflow = RunWorkflow(given, *runs)
    assert workflow.given == given == asdict(inp)  # as it came: passed on unchanged
    assert workflow.earlier == runs
    assert workflow.inp.order == ["a", "b", "c", "d"]
    assert [t["id"] for t in workflow.inp.plan["tasks"]] == ["a", "b", "c", "d"]
    assert workflow.inp.maps == ["c"] and workflow.inp.local == ["d"]
    assert workflow.inp.bounds["d"] == 5.0
    assert [r["task_id"] for r in workflow.finished] == ["a", "b", "c"]
    assert workflow.first == 3
    assert workflow.outputs == {"a": 1, "b": 2, "c": [3]}
    assert workflow.ready == ["d"]
    assert workflow.generation == 2 and not workflow.inp.streaming and workflow.plan_aborted
    assert workflow.spent == {"tool_calls": 5}
    assert workflow.ledger == {"tool:x": [2, 7.0]}
    assert workflow.plan_tasks(0)["aborted"] is True
