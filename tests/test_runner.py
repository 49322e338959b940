"""The runner through ``execute()`` on every executor: references, failure policies, timeouts,
retries, cancellation, events, results; and tools that misbehave at run time."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from backends import BACKENDS, both_backends

import dagagent
import dagagent.runner
from dagagent import RunStatus, TaskRetryPolicy, TaskStatus, execute
from dagagent.errors import ConfigError, RunFailedError
from dagagent.results import AgentStep
from dagagent.runner import AgentNode
from dagagent.settings import RunSettings

pytestmark = pytest.mark.anyio


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return both_backends(request)


EXECUTORS = ["serial", "levels", "dataflow"]
PARALLEL = ["levels", "dataflow"]
FAST_RETRY = TaskRetryPolicy(base_delay_s=0.001, max_delay_s=0.01)


def w(id: str, seconds: float = 0.0, deps: tuple[str, ...] = (), **kw: Any) -> dict[str, Any]:
    args = {"name": id, "seconds": seconds, **kw.pop("args", {})}
    return {"id": id, "tool": "work", "args": args, "depends_on": list(deps), **kw}


def scalar_tools() -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    @reg.tool
    def shout(text: str) -> str:
        """Shout."""
        return text + "!"

    @reg.tool
    def label(text: str | None = None, n: int | str = 0, tags: list[str] | None = None) -> Any:
        """Label."""
        return [text, n, tags]

    @reg.tool
    def echo(value: Any) -> Any:
        """Echo."""
        return value

    return reg


async def test_a_number_or_boolean_fed_whole_to_a_text_parameter_is_given_as_its_text() -> None:
    reg = scalar_tools()

    async def mcp_like(text: str) -> str:
        return text.upper()

    reg.add(
        dagagent.SchemaTool(
            mcp_like,
            name="mcp_like",
            parameters={"type": "object", "properties": {"text": {"type": "string"}}},
        )
    )
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
            {"id": "v", "tool": "echo", "args": {"value": {"ok": True, "x": 2.5}}},
            {"id": "s", "tool": "shout", "args": {"text": "${a}"}},
            {"id": "t", "tool": "shout", "args": {"text": "${v.ok}"}},
            {"id": "u", "tool": "shout", "args": {"text": "${v.x}"}},
            {"id": "i", "tool": "shout", "args": {"text": " ${a}"}},  # interpolated: the same
            # a parameter that takes the number keeps it; optional text and lists of text
            {
                "id": "l",
                "tool": "label",
                "args": {"text": "${a}", "n": "${a}", "tags": ["${v.ok}", "x"]},
            },
            {"id": "m", "tool": "mcp_like", "args": {"text": "${v.ok}"}},
            {"id": "k", "tool": "shout", "for_each": ["x", "y"], "args": {"text": "${@index}"}},
            {"id": "n", "tool": "add", "args": {"a": "${a}", "b": "${a}"}},
        ],
    }
    result = await execute(plan, reg)
    assert result.ok, {k: r.error for k, r in result.tasks.items() if r.error}
    out = {k: r.output for k, r in result.tasks.items()}
    assert out["s"] == "3!" and out["t"] == "True!" and out["u"] == "2.5!"
    assert out["i"] == " " + out["s"]
    assert out["l"] == ["3", 3, ["True", "x"]]
    assert out["m"] == "TRUE"
    assert out["k"] == ["0!", "1!"]
    assert out["n"] == 6
    assert result.tasks["s"].args == {"text": "3"}  # the record holds what the tool got
    assert [e.args for e in result.tasks["k"].elements or ()] == [{"text": "0"}, {"text": "1"}]


async def test_what_a_text_parameter_cannot_take_still_fails_naming_the_task() -> None:
    reg = scalar_tools()
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "v", "tool": "echo", "args": {"value": [1, 2]}},
            {"id": "s", "tool": "shout", "args": {"text": "${v}"}},
        ],
    }
    result = await execute(plan, reg)
    assert result.tasks["s"].status is TaskStatus.FAILED
    assert "text" in (result.tasks["s"].error or "")


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_outputs_flow_through_references(executor: str, registry: dagagent.Registry) -> None:
    plan = {
        "goal": "sum",
        "tasks": [
            w("a", args={"value": 2}),
            w("b", args={"value": 3}),
            {"id": "s", "tool": "add", "args": {"a": "${a}", "b": "${b}"}},
            {"id": "t", "tool": "echo", "args": {"value": "total=${s}"}},
        ],
    }
    result = await execute(plan, registry, settings=RunSettings(executor=executor))
    assert result.status is RunStatus.SUCCEEDED
    assert result.outputs == {"a": 2, "b": 3, "s": 5, "t": "total=5"}
    assert result.tasks["s"].args == {"a": 2, "b": 3}
    assert result.raise_for_status() is result


@pytest.mark.skip_time
@pytest.mark.parametrize("executor", PARALLEL)
async def test_failure_cancels_sleeping_sibling_promptly(
    executor: str, registry: dagagent.Registry, recorder: Any
) -> None:
    plan = {
        "tasks": [
            w("boom", 0.05, args={"fail": True}),
            w("sleeper", 10.0),
            w("after", 0.0, ("boom",)),
            w("other", 0.0, ("sleeper",)),
        ]
    }
    with anyio.fail_after(3):
        result = await execute(plan, registry, settings=RunSettings(executor=executor))
    tasks = result.tasks
    assert result.status is RunStatus.FAILED
    assert tasks["boom"].status is TaskStatus.FAILED
    assert "boom failed on purpose" in (tasks["boom"].error or "")
    assert tasks["sleeper"].status is TaskStatus.CANCELLED
    assert tasks["after"].status is TaskStatus.SKIPPED
    assert tasks["other"].status is TaskStatus.CANCELLED
    assert recorder.intervals["sleeper"][1] - recorder.intervals["sleeper"][0] < 2.0
    assert "other" not in recorder.calls
    with pytest.raises(RunFailedError, match="boom"):
        result.raise_for_status()


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_continue_runs_independent_branches_and_skips_descendants(
    executor: str, registry: dagagent.Registry, recorder: Any
) -> None:
    plan = {
        "tasks": [
            w("bad", 0.01, args={"fail": True}),
            w("child", 0.0, ("bad",)),
            w("grandchild", 0.0, ("child",)),
            w("good", 0.1),
            w("good2", 0.0, ("good",)),
            w("mixed", 0.0, ("good", "bad")),
        ]
    }
    result = await execute(
        plan, registry, settings=RunSettings(executor=executor, on_failure="continue")
    )
    st = {k: r.status for k, r in result.tasks.items()}
    assert st == {
        "bad": TaskStatus.FAILED,
        "child": TaskStatus.SKIPPED,
        "grandchild": TaskStatus.SKIPPED,
        "good": TaskStatus.SUCCEEDED,
        "good2": TaskStatus.SUCCEEDED,
        "mixed": TaskStatus.SKIPPED,
    }
    assert "upstream task 'bad'" in (result.tasks["child"].error or "")
    assert set(recorder.calls) == {"bad", "good", "good2"}


@pytest.mark.skip_time
@pytest.mark.parametrize("executor", EXECUTORS)
async def test_timeout(executor: str, registry: dagagent.Registry) -> None:
    plan = {"tasks": [w("slow", 5.0, timeout_s=0.5)]}
    with anyio.fail_after(4.5):  # the 5 s nap must have been cut
        result = await execute(plan, registry, settings=RunSettings(executor=executor))
    r = result.tasks["slow"]
    assert r.status is TaskStatus.FAILED
    assert r.error == "timed out after 0.5 s" and r.error_type == "TaskTimeoutError"


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_retries_until_success(executor: str) -> None:
    calls = 0
    reg = dagagent.Registry()

    @reg.tool(retries=3)
    def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionError(f"attempt {calls} failed")
        return "ok"

    events: list[Any] = []
    result = await execute(
        {"tasks": [{"id": "f", "tool": "flaky"}]},
        reg,
        listeners=[events.append],
        settings=RunSettings(executor=executor, retry=FAST_RETRY),
    )
    assert result.tasks["f"].status is TaskStatus.SUCCEEDED
    assert result.tasks["f"].attempts == 3 and calls == 3
    assert [e.attempt for e in events if e.kind == "task.retrying"] == [1, 2]


async def test_retries_exhausted_and_task_override(
    registry: dagagent.Registry, recorder: Any
) -> None:
    plan = {"tasks": [w("x", 0.0, args={"fail": True}, retries=2)]}
    result = await execute(plan, registry, settings=RunSettings(retry=FAST_RETRY))
    assert result.tasks["x"].attempts == 3 and recorder.calls["x"] == 3
    assert result.tasks["x"].status is TaskStatus.FAILED


async def test_bad_arguments_from_reference_fail_clearly_without_retry(
    registry: dagagent.Registry,
) -> None:
    plan = {
        "tasks": [
            {"id": "s", "tool": "echo", "args": {"value": "not a number"}},
            {"id": "n", "tool": "add", "args": {"a": "${s}", "b": 1}, "retries": 3},
        ]
    }
    result = await execute(plan, registry, settings=RunSettings(retry=FAST_RETRY))
    r = result.tasks["n"]
    assert r.status is TaskStatus.FAILED and r.attempts == 1
    assert "bad arguments for tool 'add'" in (r.error or "") and "a:" in (r.error or "")


async def test_missing_reference_path_fails_the_task(registry: dagagent.Registry) -> None:
    plan = {
        "tasks": [
            {"id": "s", "tool": "echo", "args": {"value": {"x": 1}}},
            {"id": "n", "tool": "echo", "args": {"value": "${s.y}"}},
        ]
    }
    result = await execute(plan, registry)
    r = result.tasks["n"]
    assert r.status is TaskStatus.FAILED
    assert r.error_type == "ReferenceResolutionError"
    assert "${s.y}" in (r.error or "") and "no key 'y'" in (r.error or "")


@pytest.mark.skip_time
@pytest.mark.parametrize("executor", PARALLEL)
async def test_a_cancelled_task_names_what_stopped_the_run(
    executor: str, registry: dagagent.Registry
) -> None:
    plan = {
        "tasks": [
            w("boom", 0.05, args={"fail": True}),
            w("sleeper", 10.0),
            w("later", 0.0, ("sleeper",)),
        ]
    }
    with anyio.fail_after(5):
        result = await execute(plan, registry, settings=RunSettings(executor=executor))
    tasks = result.tasks
    assert tasks["sleeper"].error == (
        "cancelled while running: the run was stopped after task 'boom' failed"
    )
    assert tasks["later"].error == "not run: the run was stopped after task 'boom' failed"
    # the critical path is made of tasks that finished, never of one the run stopped
    assert result.critical_path == ["boom"]
    assert result.critical_path_s < 2.0

    # with on_failure="continue" a failure stops nothing: what stops the run is its caller,
    # here once boom has failed (by then sleeper runs: it started while boom slept)
    seen: list[Any] = []
    with anyio.fail_after(20), anyio.CancelScope() as caller:

        def listen(event: Any) -> None:
            seen.append(event)
            if event.kind == "task.finished" and event.result.task_id == "boom":
                caller.cancel()

        await execute(
            plan,
            registry,
            listeners=[listen],
            settings=RunSettings(executor=executor, on_failure="continue"),
        )
    (done,) = [e.result for e in seen if e.kind == "run.finished"]
    assert done.tasks["boom"].status is TaskStatus.FAILED
    assert done.tasks["sleeper"].error == (
        "cancelled while running: the run was interrupted (Ctrl-C, a signal, or its caller)"
    )
    assert done.critical_path == ["boom"]


@pytest.mark.parametrize("executor", PARALLEL)
async def test_a_task_stopped_while_waiting_for_approval_never_ran(
    executor: str, registry: dagagent.Registry, recorder: Any
) -> None:
    """Its time is time waited for an answer, not time running, and its record says so."""
    asked = anyio.Event()

    async def nobody_answers(request: dagagent.ApprovalRequest) -> bool:
        asked.set()
        await anyio.sleep_forever()
        return True

    policy = dagagent.Policy(
        [dagagent.Rule(tool="work", args={"name": "guarded"}, action="ask")], ask=nobody_answers
    )

    async def fail_once_asked() -> None:
        await asked.wait()
        await anyio.wait_all_tasks_blocked()  # the question is open, and nothing else moves

    @registry.tool
    async def fail_later() -> None:
        """Fail once the question is open."""
        await fail_once_asked()
        raise RuntimeError("no")

    plan = {"tasks": [w("guarded"), {"id": "bad", "tool": "fail_later", "args": {}}]}
    with anyio.fail_after(10):
        result = await execute(
            plan, registry, interceptors=[policy], settings=RunSettings(executor=executor)
        )
    r = result.tasks["guarded"]
    assert r.status is TaskStatus.CANCELLED
    assert r.error == (
        "cancelled while waiting for approval (its call never started): "
        "the run was stopped after task 'bad' failed"
    )
    assert "guarded" not in recorder.calls
    assert r.decisions is not None and r.decisions[-1].decision == dagagent.results.UNANSWERED
    assert r.run_s == 0.0
    assert r.duration_s is not None and r.approval_wait_s == pytest.approx(r.duration_s)
    assert r.approval_wait_s > 0
    assert result.critical_path == ["bad"]


async def test_time_waiting_for_approval_is_apart_from_time_running(
    registry: dagagent.Registry,
) -> None:
    async def slow_yes(request: dagagent.ApprovalRequest) -> bool:
        await anyio.sleep(0.5)  # wall-clock time: the runner times tasks with time.time()
        return True

    policy = dagagent.Policy([dagagent.Rule(tool="work", action="ask")], ask=slow_yes)
    result = await execute({"tasks": [w("a", 0.0)]}, registry, interceptors=[policy])
    r = result.tasks["a"]
    assert r.ok and r.approval_wait_s >= 0.4
    assert r.run_s is not None and r.run_s < r.approval_wait_s
    assert r.run_s + r.approval_wait_s == pytest.approx(r.duration_s)
    plain = (await execute({"tasks": [w("a", 0.0)]}, registry)).tasks["a"]
    assert plain.approval_wait_s == 0.0 and plain.run_s == plain.duration_s


@pytest.mark.skip_time
@pytest.mark.parametrize("executor", EXECUTORS)
async def test_cancelling_the_caller_cancels_the_run(
    executor: str, registry: dagagent.Registry, recorder: Any
) -> None:
    seen: list[Any] = []
    plan = {"tasks": [w("a", 10.0), w("b", 0.0, ("a",))]}
    with anyio.move_on_after(1.0):  # the clock moves once "a" (10 s) naps: it has started
        await execute(
            plan, registry, listeners=[seen.append], settings=RunSettings(executor=executor)
        )
    finished = [e.result for e in seen if e.kind == "run.finished"]
    assert finished and finished[0].status is RunStatus.CANCELLED
    assert finished[0].tasks["a"].status is TaskStatus.CANCELLED
    assert finished[0].tasks["b"].status is TaskStatus.CANCELLED
    assert recorder.intervals["a"][1] - recorder.intervals["a"][0] < 5.0


async def test_events_in_order(registry: dagagent.Registry) -> None:
    seen: list[Any] = []
    await execute({"tasks": [w("a"), w("b", 0.0, ("a",))]}, registry, listeners=[seen.append])
    kinds = [
        (
            e.kind,
            getattr(e, "task_id", None) or getattr(getattr(e, "result", None), "task_id", None),
        )
        for e in seen
    ]
    assert kinds[0][0] == "run.started" and kinds[-1][0] == "run.finished"
    assert kinds[1:-1] == [
        ("task.started", "a"),
        ("task.finished", "a"),
        ("task.started", "b"),
        ("task.finished", "b"),
    ]


async def test_broken_listener_does_not_break_the_run(registry: dagagent.Registry) -> None:
    def broken(event: Any) -> None:
        raise ValueError("listener bug")

    assert (await execute({"tasks": [w("a")]}, registry, listeners=[broken])).ok


async def test_run_result_critical_path_uses_measured_durations(
    registry: dagagent.Registry,
) -> None:
    # b waits until c, after a, has finished: d is held up by b, the dependency that finished
    # last, whatever the durations of a and c add up to. The path the run names is the one
    # that held up its end (by the count of tasks, a then c would be longer).
    c_ended = anyio.Event()

    @registry.tool
    async def step(name: str) -> str:
        if name == "b":
            await c_ended.wait()
        return name

    def on_finished(event: Any) -> None:
        if event.kind == "task.finished" and event.result.task_id == "c":
            c_ended.set()

    plan = {
        "tasks": [
            {"id": t, "tool": "step", "args": {"name": t}, "depends_on": deps}
            for t, deps in (("a", []), ("b", []), ("c", ["a"]), ("d", ["b", "c"]))
        ]
    }
    with anyio.fail_after(10):
        result = await execute(
            plan, registry, listeners=[on_finished], settings=RunSettings(executor="dataflow")
        )
    assert result.critical_path == ["b", "d"]
    took = {t: r.took_s or 0.0 for t, r in result.tasks.items()}
    assert result.critical_path_s == pytest.approx(took["b"] + took["d"])
    assert result.critical_path_s <= result.wall_time_s + 0.01


async def test_invalid_options_and_plans(registry: dagagent.Registry) -> None:
    with pytest.raises(ConfigError, match="on_failure"):
        await execute({"tasks": [w("a")]}, registry, settings=RunSettings(on_failure="explode"))
    with pytest.raises(ConfigError, match="unknown executor"):
        await execute({"tasks": [w("a")]}, registry, settings=RunSettings(executor="warp"))
    with pytest.raises(dagagent.PlanValidationError):
        await execute({"tasks": [w("a", 0.0, ("zz",))]}, registry)


async def test_agent_task_without_llm_fails_clearly(registry: dagagent.Registry) -> None:
    plan = {"tasks": [{"id": "n", "instruction": "think"}]}
    result = await execute(plan, registry)
    assert result.tasks["n"].status is TaskStatus.FAILED
    assert "needs a model" in (result.tasks["n"].error or "")


def test_execute_sync(registry: dagagent.Registry) -> None:
    result = dagagent.execute_sync({"tasks": [w("a", args={"value": 7})]}, registry)
    assert result.outputs == {"a": 7}
    payload = result.to_json_dict()
    assert payload["tasks"]["a"]["status"] == "succeeded" and payload["counts"] == {"succeeded": 1}


async def test_failed_agent_task_keeps_the_steps_it_took(registry: dagagent.Registry) -> None:
    class Stopped(dagagent.errors.AgentError):
        def __init__(self) -> None:
            super().__init__("stopped without an answer (max_steps)")

    async def agent_runner(node: AgentNode) -> Any:
        node.steps_so_far = lambda: [AgentStep(step=1, thought="hmm")]
        raise Stopped()

    plan = {"tasks": [{"id": "n", "instruction": "think"}]}
    result = await execute(plan, registry, llm=object(), agent_runner=agent_runner)
    r = result.tasks["n"]
    assert r.status is TaskStatus.FAILED and r.attempts == 1
    assert r.steps == [AgentStep(step=1, thought="hmm")]
    assert "max_steps" in (r.error or "")


@pytest.mark.parametrize("executor", PARALLEL)
async def test_skip_reason_names_the_dependency_that_failed(
    executor: str, registry: dagagent.Registry
) -> None:
    # 'join' waits on a slow task and a failing one; the skip names the failure, not the
    # dependency that was still running when the failure was seen.
    plan = {
        "tasks": [
            w("slow", 0.2),
            w("bad", 0.0, args={"fail": True}),
            w("join", 0.0, ("slow", "bad")),
        ]
    }
    result = await execute(
        plan, registry, settings=RunSettings(executor=executor, on_failure="continue")
    )
    assert result.tasks["join"].status is TaskStatus.SKIPPED
    assert result.tasks["join"].error == "not run: upstream task 'bad' failed"


def test_run_result_repr_is_short(registry: dagagent.Registry) -> None:
    plan = {"tasks": [w(f"t{i}") for i in range(200)]}
    result = dagagent.execute_sync(plan, registry, settings=RunSettings(executor="dataflow"))
    text = repr(result)
    assert text.startswith(f"RunResult(run_id={result.run_id!r}, status='succeeded', tasks=200")
    assert len(text) < 200  # not one entry per task


# ----------------------------------------------------------------------------------------------
# Tools that misbehave at run time: BaseExceptions, cancellations of their own, generators.
# Nothing may hang, end the run abruptly or lose the other tasks' results.
# ----------------------------------------------------------------------------------------------


class CustomBase(BaseException):
    pass


RAISED: dict[str, type[BaseException]] = {
    "KeyboardInterrupt": KeyboardInterrupt,
    "SystemExit": SystemExit,
    "GeneratorExit": GeneratorExit,
    "CustomBase": CustomBase,
    "CancelledError": asyncio.CancelledError,
}


def _registry() -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool
    async def raise_async(kind: str) -> str:
        await anyio.lowlevel.checkpoint()
        raise RAISED[kind]()

    @reg.tool
    def raise_sync(kind: str) -> str:
        raise RAISED[kind]()

    @reg.tool
    async def ok(value: Any = "ok") -> Any:
        return value

    @reg.tool
    async def nap(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "rested"

    return reg


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("mode", ["raise_async", "raise_sync"])
@pytest.mark.parametrize("kind", list(RAISED))
def test_a_tool_raising_a_base_exception_fails_its_task_only(
    executor: str, mode: str, kind: str
) -> None:
    if kind == "CancelledError" and sys.version_info < (3, 11):
        pytest.skip(
            "before 3.11 asyncio cannot tell a CancelledError a tool raised from a real "
            "cancellation (Task.cancelling() is new in 3.11): it is treated as cancellation"
        )
    plan = {
        "tasks": [
            {"id": "first", "tool": "ok"},
            {"id": "bad", "tool": mode, "args": {"kind": kind}, "retries": 2},
            {"id": "branch", "tool": "ok", "depends_on": ["first"]},
            {"id": "child", "tool": "ok", "depends_on": ["bad"]},
        ]
    }
    result = dagagent.execute_sync(
        plan, _registry(), settings=RunSettings(executor=executor, on_failure="continue")
    )
    bad = result.tasks["bad"]
    assert bad.status == "failed"
    assert bad.error_type == kind
    assert kind in (bad.error or "")
    assert bad.attempts == 1  # a BaseException is not retried
    assert result.tasks["first"].status == "succeeded"
    assert result.tasks["branch"].status == "succeeded"
    assert result.tasks["child"].status == "skipped"
    assert result.status == "failed"


@pytest.mark.parametrize("executor", ["levels", "dataflow"])
def test_a_base_exception_under_cancel_stops_siblings_and_keeps_results(executor: str) -> None:
    plan = {
        "tasks": [
            {"id": "first", "tool": "ok"},
            {"id": "slow", "tool": "nap", "args": {"seconds": 10}},
            {"id": "bad", "tool": "raise_sync", "args": {"kind": "SystemExit"}},
        ]
    }
    t0 = time.monotonic()
    result = dagagent.execute_sync(plan, _registry(), settings=RunSettings(executor=executor))
    assert time.monotonic() - t0 < 5
    assert result.tasks["first"].status == "succeeded"
    assert result.tasks["bad"].status == "failed"
    assert result.tasks["slow"].status == "cancelled"


@pytest.mark.skip_time
@pytest.mark.anyio
@pytest.mark.asyncio_only("asyncio.wait_for cancels the run from outside anyio's scopes")
@pytest.mark.parametrize("executor", EXECUTORS)
async def test_cancelling_the_caller_still_cancels_the_run(executor: str) -> None:
    plan = {"tasks": [{"id": "slow", "tool": "nap", "args": {"seconds": 10}}]}
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(
            dagagent.execute(plan, _registry(), settings=RunSettings(executor=executor)), 1.0
        )
    with anyio.move_on_after(1.0) as scope:
        await dagagent.execute(plan, _registry(), settings=RunSettings(executor=executor))
    assert scope.cancelled_caught


# -- generators ---------------------------------------------------------------------------


def _generator_registry() -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool
    def returns_generator() -> Iterator[int]:
        return (i * i for i in range(4))

    @reg.tool
    def generator_function() -> Iterator[str]:
        yield "a"
        yield "b"

    @reg.tool
    async def async_generator_function() -> AsyncIterator[int]:
        for i in range(3):
            await anyio.lowlevel.checkpoint()
            yield i

    @reg.tool
    async def async_returns_generator() -> Iterator[int]:
        return iter_range(2)

    @reg.tool
    def echo(value: Any) -> Any:
        return value

    return reg


def iter_range(n: int) -> Iterator[int]:
    yield from range(n)


@pytest.mark.parametrize("executor", EXECUTORS)
def test_generator_outputs_are_lists_every_reference_can_read(executor: str) -> None:
    plan = {
        "tasks": [
            {"id": "g1", "tool": "returns_generator"},
            {"id": "g2", "tool": "generator_function"},
            {"id": "g3", "tool": "async_generator_function"},
            {"id": "g4", "tool": "async_returns_generator"},
            {"id": "r1", "tool": "echo", "args": {"value": "${g1}"}},
            {"id": "r2", "tool": "echo", "args": {"value": "${g1}"}},
            {"id": "r3", "tool": "echo", "args": {"value": "${g1.3} ${g2.1} ${g3} ${g4}"}},
        ]
    }
    result = dagagent.execute_sync(
        plan, _generator_registry(), settings=RunSettings(executor=executor)
    )
    assert result.ok, result.tasks
    assert result.outputs["g1"] == [0, 1, 4, 9]
    assert result.outputs["g2"] == ["a", "b"]
    assert result.outputs["g3"] == [0, 1, 2]
    assert result.outputs["g4"] == [0, 1]
    assert result.outputs["r1"] == result.outputs["r2"] == [0, 1, 4, 9]
    assert result.outputs["r3"] == "9 b [0, 1, 2] [0, 1]"
    assert result.to_json_dict()["tasks"]["g1"]["output"] == [0, 1, 4, 9]


async def test_tools_in_use_are_what_each_task_can_call() -> None:
    """What an executor is told to get ready (the Dask executor ships these tools): a tool
    task's tool, an agent task's subset, and every tool for an agent task without one."""
    reg = dagagent.Registry()

    @reg.tool
    async def a() -> int:
        return 1

    @reg.tool
    async def b() -> int:
        return 2

    plan = {
        "tasks": [
            {"id": "t", "tool": "a"},
            {"id": "some", "instruction": "use b", "tools": ["b"]},
            {"id": "any", "instruction": "use anything"},
        ]
    }
    runner = dagagent.runner.TaskRunner(dagagent.validate(plan, reg), reg, run_id="r")
    used = {tool.name: list(ids) for tool, ids in runner.tools_in_use().items()}
    assert used == {"a": ["t", "any"], "b": ["some", "any"]}


# -- tools that catch their cancellation ----------------------------------------------------
# A tool may catch the CancelledError of its timeout or of the run's fail-fast and go on. It
# cannot be forced to stop, but it is never recorded as a success: its output came too late.


def _stubborn_registry(seen: list[str]) -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool
    async def stubborn(rounds: int = 5, then: str = "return") -> str:
        """Sleep ``rounds`` times, catching every cancellation, then return or raise."""
        for _ in range(rounds):
            try:
                await anyio.sleep(0.5)
            except anyio.get_cancelled_exc_class():
                seen.append("caught")
        if then == "raise":
            raise ValueError("failed after the cancellation")
        return "late output"

    @reg.tool
    async def own_timeout() -> str:
        raise TimeoutError("the tool's own timeout")

    @reg.tool
    async def boom() -> str:
        await anyio.sleep(0.05)
        raise RuntimeError("boom")

    return reg


@pytest.mark.skip_time
@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("then", ["return", "raise"])
async def test_a_tool_catching_its_timeout_is_timed_out(executor: str, then: str) -> None:
    seen: list[str] = []
    plan = {
        "tasks": [
            {"id": "s", "tool": "stubborn", "args": {"then": then}, "timeout_s": 0.4},
            {"id": "after", "tool": "boom", "depends_on": ["s"]},
        ]
    }
    with anyio.fail_after(20):
        result = await execute(
            plan, _stubborn_registry(seen), settings=RunSettings(executor=executor)
        )
    r = result.tasks["s"]
    assert seen, "the tool was meant to catch the cancellation of its timeout"
    assert r.status is TaskStatus.FAILED and r.error_type == "TaskTimeoutError"
    assert r.output is None and "s" not in result.outputs
    assert (r.error or "").startswith("timed out after 0.4 s (it caught the cancellation")
    assert result.tasks["after"].status is TaskStatus.SKIPPED


@pytest.mark.skip_time
async def test_a_tool_timeout_of_the_tools_own_is_caught_too() -> None:
    reg = _stubborn_registry([])
    reg.get("stubborn").timeout_s = 0.4
    result = await execute({"tasks": [{"id": "s", "tool": "stubborn"}]}, reg)
    assert result.tasks["s"].error_type == "TaskTimeoutError"


async def test_a_tools_own_timeout_error_is_not_the_tasks_timeout() -> None:
    plan = {"tasks": [{"id": "t", "tool": "own_timeout", "timeout_s": 30}]}
    result = await execute(plan, _stubborn_registry([]))
    r = result.tasks["t"]
    assert r.error_type == "TimeoutError" and "the tool's own timeout" in (r.error or "")


@pytest.mark.skip_time
@pytest.mark.parametrize("executor", PARALLEL)
async def test_a_tool_catching_the_runs_cancellation_is_not_a_success(executor: str) -> None:
    seen: list[str] = []
    plan = {
        "tasks": [
            {"id": "s", "tool": "stubborn"},
            {"id": "b", "tool": "boom"},
            {"id": "after", "tool": "boom", "depends_on": ["s"]},
        ]
    }
    with anyio.fail_after(20):
        result = await execute(
            plan, _stubborn_registry(seen), settings=RunSettings(executor=executor)
        )
    assert seen, "the tool was meant to catch the run's cancellation"
    r = result.tasks["s"]
    assert r.status is TaskStatus.CANCELLED, r
    assert "caught the cancellation" in (r.error or "")
    assert "s" not in result.outputs
    assert result.tasks["after"].status in (TaskStatus.SKIPPED, TaskStatus.CANCELLED)
    assert result.status is RunStatus.FAILED


@pytest.mark.skip_time
@pytest.mark.parametrize("executor", EXECUTORS)
async def test_a_tool_catching_the_callers_cancellation_is_not_a_success(executor: str) -> None:
    seen: list[str] = []
    records: list[Any] = []
    plan = {"tasks": [{"id": "s", "tool": "stubborn"}]}
    with anyio.move_on_after(1.5) as scope:  # the clock moves once the tool naps: it started
        await execute(
            plan,
            _stubborn_registry(seen),
            listeners=[lambda e: records.append(e)],
            settings=RunSettings(executor=executor),
        )
    assert scope.cancelled_caught and seen
    finished = [e.result for e in records if isinstance(e, dagagent.events.TaskFinished)]
    assert [(f.task_id, f.status) for f in finished] == [("s", TaskStatus.CANCELLED)]


@pytest.mark.skip_time
async def test_an_agent_catching_its_timeout_is_timed_out(registry: dagagent.Registry) -> None:
    async def agent_runner(node: AgentNode) -> Any:
        with contextlib.suppress(anyio.get_cancelled_exc_class()):
            await anyio.sleep_forever()
        return "late answer", [AgentStep(step=1, thought="late")]

    plan = {"tasks": [{"id": "n", "instruction": "think", "timeout_s": 0.4}]}
    with anyio.fail_after(10):
        result = await execute(plan, registry, llm=object(), agent_runner=agent_runner)
    r = result.tasks["n"]
    assert r.status is TaskStatus.FAILED and r.error_type == "TaskTimeoutError"
    assert "n" not in result.outputs


@pytest.mark.parametrize("executor", PARALLEL)
async def test_a_map_element_catching_the_runs_cancellation_is_not_a_success(
    executor: str,
) -> None:
    seen: list[str] = []
    plan = {
        "tasks": [
            {"id": "s", "tool": "stubborn", "for_each": [1, 2], "args": {"rounds": "${@item}"}},
            {"id": "b", "tool": "boom"},
        ]
    }
    with anyio.fail_after(20):
        result = await execute(
            plan, _stubborn_registry(seen), settings=RunSettings(executor=executor)
        )
    assert seen, "the tool was meant to catch the run's cancellation"
    s = result.tasks["s"]
    assert s.status is TaskStatus.CANCELLED and "s" not in result.outputs
    elements = s.elements or []
    assert elements and all(e.status is not TaskStatus.SUCCEEDED for e in elements), elements
    assert any("caught the cancellation" in (e.error or "") for e in elements)


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("on_failure", ["cancel", "continue"])
async def test_the_runs_status_and_critical_path_are_those_of_its_results(
    executor: str, on_failure: str, registry: dagagent.Registry
) -> None:
    # Worked out from the runner's own tables as tasks finish: they must be what the results
    # say, whichever tasks succeed, fail, are skipped or cancelled.
    from dagagent.graph import finished_critical_path

    plans = [
        [w("a", 0.02), w("b", 0.01, ("a",)), w("c", 0.03, ("a",)), w("d", 0.0, ("c", "b"))],
        [
            w("a", 0.02),
            w("b", 0.01, ("a",), args={"fail": True}),
            w("c", 0.05, ("a",)),
            w("d", 0.0, ("c",)),
            w("e", 0.0, ("b",)),
        ],
    ]
    for tasks in plans:
        result = await execute(
            {"tasks": tasks},
            registry,
            settings=RunSettings(executor=executor, on_failure=on_failure),
        )
        graph = dagagent.validate({"tasks": tasks}, registry)
        expected = finished_critical_path(graph.order, graph.dependencies, result.tasks)
        assert (result.critical_path_s, result.critical_path) == expected
        assert result.critical_path[0] == "a"
        ok = all(r.status.ok for r in result.tasks.values())
        assert (result.status is RunStatus.SUCCEEDED) == ok


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_a_tool_class_with_its_own_acall_is_called_through_it(executor: str) -> None:
    # The runner awaits a plain async tool's function itself; a Tool subclass that changes
    # how a call is made must still be called through its acall.
    class Counted(dagagent.Tool):
        calls = 0

        async def acall(self, args: Any) -> Any:
            Counted.calls += 1
            return {"via": "acall", "got": await super().acall(args)}

    async def ping(x: int) -> int:
        return x + 1

    reg = dagagent.Registry()
    reg.add(Counted(ping))
    result = await execute({"tasks": [{"id": "p", "tool": "ping", "args": {"x": 1}}]}, reg)
    assert result.ok and result.outputs["p"] == {"via": "acall", "got": 2}
    assert Counted.calls == 1


async def test_the_end_of_a_run_is_logged_with_its_counts_when_info_is_logged(
    registry: dagagent.Registry,
) -> None:
    import structlog
    from structlog.testing import capture_logs

    plan = {
        "tasks": [
            {"id": "a", "tool": "work", "args": {"name": "a"}},
            {"id": "b", "tool": "work", "args": {"name": "b", "fail": True}},
            {"id": "c", "tool": "work", "args": {"name": "c"}, "depends_on": ["b"]},
        ]
    }
    structlog.reset_defaults()  # whatever an earlier test set up: every level is logged
    try:
        with capture_logs() as logs:
            result = await execute(plan, registry, settings=RunSettings(on_failure="continue"))
    finally:
        structlog.reset_defaults()
    (ended,) = [e for e in logs if e["event"] == "run.finished"]
    assert ended["status"] == "failed" == result.status.value
    assert (ended["succeeded"], ended["failed"], ended["skipped"]) == (1, 1, 1)


def _every_end_registry() -> dagagent.Registry:
    """Async tools, each awaited directly by the runner, that end every way a task can."""
    reg = dagagent.Registry()

    @reg.tool
    async def give(value: Any) -> Any:
        """Return ``value`` after a turn of the event loop."""
        await anyio.lowlevel.checkpoint()
        return value

    @reg.tool
    async def fail(value: int) -> int:
        """Raise."""
        await anyio.lowlevel.checkpoint()
        raise ValueError(f"no good: {value}")

    @reg.tool
    async def deny() -> None:
        """Raise a denial, as an approval tool would."""
        raise dagagent.errors.TaskDeniedError("not allowed")

    @reg.tool
    async def exits() -> None:
        """Call sys.exit()."""
        sys.exit(3)

    @reg.tool
    async def own_cancel() -> None:
        """Await a future someone else cancelled (on asyncio; trio has no such thing: there it
        raises its own error)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise anyio.BrokenResourceError("nothing to cancel here") from None
        fut = loop.create_future()
        fut.cancel()
        await fut

    @reg.tool
    async def stream(n: int) -> AsyncIterator[int]:
        """Yield 0..n-1."""
        for i in range(n):
            await anyio.lowlevel.checkpoint()
            yield i

    return reg


_EVERY_END = {
    "tasks": [
        {"id": "v", "tool": "give", "args": {"value": {"n": 2, "word": "two"}}},
        {"id": "ok", "tool": "give", "args": {"value": "got ${v.n}"}, "depends_on": ["v"]},
        {"id": "f", "tool": "fail", "args": {"value": "${v.n}"}, "depends_on": ["v"]},
        {"id": "bad_args", "tool": "fail", "args": {"value": "${v.word}"}, "depends_on": ["v"]},
        {"id": "no_key", "tool": "give", "args": {"value": "${v.missing}"}, "depends_on": ["v"]},
        {"id": "d", "tool": "deny"},
        {"id": "x", "tool": "exits"},
        {"id": "c", "tool": "own_cancel"},
        {"id": "s", "tool": "stream", "args": {"n": "${v.n}"}, "depends_on": ["v"]},
    ]
}


@pytest.mark.parametrize("executor", EXECUTORS)
async def test_every_end_of_a_task_is_recorded_alike_with_or_without_listeners(
    executor: str, anyio_backend: str
) -> None:
    """Every way a task can end is recorded the same whether the run has listeners or not."""
    reg = _every_end_registry()
    plain = await execute(
        _EVERY_END, reg, settings=RunSettings(executor=executor, on_failure="continue")
    )
    full = await execute(
        _EVERY_END,
        reg,
        listeners=[lambda e: None],
        settings=RunSettings(executor=executor, on_failure="continue"),
    )
    tasks = plain.tasks
    assert {t: r.status for t, r in tasks.items()} == {
        "v": TaskStatus.SUCCEEDED,
        "ok": TaskStatus.SUCCEEDED,
        "f": TaskStatus.FAILED,
        "bad_args": TaskStatus.FAILED,
        "no_key": TaskStatus.FAILED,
        "d": TaskStatus.DENIED,
        "x": TaskStatus.FAILED,
        "c": TaskStatus.FAILED,
        "s": TaskStatus.SUCCEEDED,
    }
    assert plain.outputs == {"v": {"n": 2, "word": "two"}, "ok": "got 2", "s": [0, 1]}
    assert tasks["f"].args == {"value": 2} and tasks["f"].error == "ValueError: no good: 2"
    assert "raise ValueError" in (tasks["f"].traceback or "")
    assert tasks["bad_args"].error_type == "ToolArgumentsError"
    assert tasks["bad_args"].args == {"value": "two"}
    assert tasks["no_key"].args is None and "missing" in (tasks["no_key"].error or "")
    assert "not retried" in (tasks["x"].error or "")
    if anyio_backend == "asyncio":  # a cancellation of the tool's own
        assert "nothing cancelled it" in (tasks["c"].error or "")
    for task_id, r in tasks.items():
        assert r.attempts == (0 if task_id == "no_key" else 1), r  # no_key: no attempt
        assert r.started_at is not None and r.finished_at is not None
        assert r.started_at <= r.finished_at
        timeless = {"started_at", "finished_at", "duration_s"}
        assert _without(asdict(r), timeless) == _without(asdict(full.tasks[task_id]), timeless)


async def test_plain_tasks_are_logged_when_debug_lines_are_written() -> None:
    """A run whose logger writes debug lines takes the full path, which logs each task."""
    import structlog
    from structlog.testing import capture_logs

    plan = {
        "tasks": [
            {"id": "a", "tool": "give", "args": {"value": 1}},
            {"id": "b", "tool": "give", "args": {"value": "${a}"}, "depends_on": ["a"]},
        ]
    }
    structlog.reset_defaults()  # whatever an earlier test set up: every level is logged
    try:
        with capture_logs() as logs:
            result = await execute(plan, _every_end_registry())
    finally:
        structlog.reset_defaults()
    assert result.outputs == {"a": 1, "b": 1}
    lines = [(e["event"], e.get("task_id")) for e in logs if e["event"].startswith("task.")]
    assert lines == [
        ("task.started", "a"),
        ("task.finished", "a"),
        ("task.started", "b"),
        ("task.finished", "b"),
    ]


async def test_a_resumed_run_keeps_what_plain_tasks_did_before_the_pause(tmp_path: Any) -> None:
    """A tool that raises TaskWaitingError pauses the run; resumed, the plain tasks that
    succeeded before are kept as recorded, not run again."""
    calls: list[str] = []
    reg = dagagent.Registry()

    @reg.tool
    async def fetch(name: str) -> str:
        """Count the call."""
        calls.append(name)
        await anyio.lowlevel.checkpoint()
        return name.upper()

    @reg.tool
    async def gate(value: str) -> str:
        """Wait the first time, pass the value on after."""
        calls.append("gate")
        if calls.count("gate") == 1:
            raise dagagent.errors.TaskWaitingError("shut", tool="gate", rule="gatekeeper")
        return value

    plan = {
        "tasks": [
            {"id": "a", "tool": "fetch", "args": {"name": "a"}},
            {"id": "b", "tool": "fetch", "args": {"name": "b"}},
            {"id": "g", "tool": "gate", "args": {"value": "${a}"}, "depends_on": ["a"]},
        ]
    }
    store = tmp_path / "runs.db"
    paused = await execute(plan, reg, store=store)
    assert paused.status is RunStatus.PAUSED and paused.tasks["g"].status is TaskStatus.WAITING
    resumed = await dagagent.resume(paused.run_id, reg, store=store)
    assert resumed.status is RunStatus.SUCCEEDED, resumed.tasks
    assert resumed.outputs == {"a": "A", "b": "B", "g": "A"}
    assert sorted(calls) == ["a", "b", "gate", "gate"]  # a and b ran once
    assert resumed.tasks["a"].started_at == paused.tasks["a"].started_at


def _without(record: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in keys}
