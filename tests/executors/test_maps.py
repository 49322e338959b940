"""Map tasks (``for_each``) on every executor: one element run per element of a list that
exists only at run time, in order, within the bounds, with each failure mode."""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import anyio.lowlevel
import pytest

import dagagent
from dagagent import execute
from dagagent.events import TaskElementFinished, TaskFinished
from dagagent.executors import Executor
from dagagent.results import AgentStep, TaskStatus
from dagagent.runner import AgentNode
from dagagent.settings import RunSettings

pytestmark = pytest.mark.anyio

EXECUTORS = ["serial", "levels", "dataflow", "dask"]
# In process the elements wait only on the event loop, and skip time: every element that may
# run at once has started before the clock moves (no test here has a deadline that a sync
# tool's thread could see pass early). Dask runs them in its threads: real time.
SKIPPING = [*(pytest.param(e, marks=pytest.mark.skip_time) for e in EXECUTORS[:3]), "dask"]


def executor_for(name: str) -> str | Executor:
    if name != "dask":
        return name
    pytest.importorskip("distributed")
    from dagagent.executors.dask import DaskExecutor

    return DaskExecutor(processes=False, n_workers=2, threads_per_worker=4)


class Tools:
    """A registry whose tools count their calls (by argument) and can be told to fail."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.failing: set[str] = set()
        self.running = self.peak = 0
        self.started: list[str] = []
        self.registry = reg = dagagent.Registry()
        tools = self

        @reg.tool
        def cities(n: int = 3) -> Any:
            """The n largest cities (declared Any: the list is seen only at run time)."""
            tools.calls["cities"] += 1
            return ["Tokyo", "Osaka", "Nagoya", "Sapporo", "Kobe"][:n]

        @reg.tool
        def records() -> list[dict[str, Any]]:
            """Records with a name and a size."""
            tools.calls["records"] += 1
            return [{"name": "a", "size": 1}, {"name": "b", "size": 2}]

        @reg.tool
        def not_a_list() -> Any:
            return {"cities": ["Tokyo"]}

        @reg.tool
        async def weather(city: str, seconds: float = 0.05) -> dict[str, Any]:
            """The weather in a city."""
            tools.calls[city] += 1
            tools.started.append(city)
            tools.running += 1
            tools.peak = max(tools.peak, tools.running)
            try:
                await anyio.sleep(seconds)
                if city in tools.failing:
                    raise RuntimeError(f"no weather for {city}")
                return {"city": city, "temp_c": len(city)}
            finally:
                tools.running -= 1

        @reg.tool
        def label(name: str, index: int) -> str:
            tools.calls[f"label:{name}"] += 1
            return f"{index}:{name}"

        @reg.tool
        def summary(temps: list[Any]) -> str:
            tools.calls["summary"] += 1
            return ", ".join(str(t) for t in temps)


@pytest.fixture
def tools() -> Tools:
    return Tools()


def weather_plan(**map_options: Any) -> dict[str, Any]:
    return {
        "goal": "the weather in the largest cities",
        "tasks": [
            {"id": "top", "tool": "cities", "args": {"n": 3}},
            {
                "id": "weather",
                "tool": "weather",
                "for_each": "${top}",
                "args": {"city": "${@item}"},
                **map_options,
            },
            {"id": "report", "tool": "summary", "args": {"temps": "${weather}"}},
        ],
    }


@pytest.mark.parametrize("executor", SKIPPING)
async def test_map_over_a_tools_output(executor: str, tools: Tools) -> None:
    result = await execute(
        weather_plan(), tools.registry, settings=RunSettings(executor=executor_for(executor))
    )
    assert result.ok, result.tasks
    weather = result.tasks["weather"]
    assert weather.output == [
        {"city": "Tokyo", "temp_c": 5},
        {"city": "Osaka", "temp_c": 5},
        {"city": "Nagoya", "temp_c": 6},
    ]
    assert tools.calls == Counter({"cities": 1, "Tokyo": 1, "Osaka": 1, "Nagoya": 1, "summary": 1})
    assert [e.task_id for e in weather.elements or ()] == ["weather[0]", "weather[1]", "weather[2]"]
    assert all(e.status is TaskStatus.SUCCEEDED and e.attempts == 1 for e in weather.elements or ())
    assert [e.args for e in weather.elements or ()] == [
        {"city": "Tokyo"},
        {"city": "Osaka"},
        {"city": "Nagoya"},
    ]
    assert result.tasks["report"].output.startswith("{'city': 'Tokyo'")


@pytest.mark.parametrize("executor", SKIPPING)
async def test_elements_run_together_within_the_bounds(executor: str, tools: Tools) -> None:
    plan = weather_plan()
    plan["tasks"][0]["args"]["n"] = 5
    plan["tasks"][1]["args"]["seconds"] = 0.3
    result = await execute(
        plan, tools.registry, settings=RunSettings(executor=executor_for(executor))
    )
    assert result.ok
    assert tools.peak == (1 if executor == "serial" else 5)

    tools.peak = 0
    plan["tasks"][1]["max_concurrency"] = 2
    result = await execute(
        plan, tools.registry, settings=RunSettings(executor=executor_for(executor))
    )
    assert result.ok and tools.peak == (1 if executor == "serial" else 2)

    tools.peak = 0
    del plan["tasks"][1]["max_concurrency"]
    result = await execute(
        plan,
        tools.registry,
        settings=RunSettings(executor=executor_for(executor), max_concurrency=3),
    )
    assert result.ok and tools.peak == (1 if executor == "serial" else 3)


@pytest.mark.parametrize("executor", SKIPPING)
async def test_an_empty_list_gives_an_empty_list(executor: str, tools: Tools) -> None:
    plan = weather_plan()
    plan["tasks"][0]["args"]["n"] = 0
    result = await execute(
        plan, tools.registry, settings=RunSettings(executor=executor_for(executor))
    )
    assert result.ok
    assert result.tasks["weather"].status is TaskStatus.SUCCEEDED
    assert result.tasks["weather"].output == [] and result.tasks["weather"].elements == []
    assert result.tasks["report"].output == ""
    assert tools.calls == Counter({"cities": 1, "summary": 1})


@pytest.mark.parametrize("executor", SKIPPING)
async def test_a_list_that_is_not_a_list_at_run_time(executor: str, tools: Tools) -> None:
    plan = weather_plan()
    plan["tasks"][0] = {"id": "top", "tool": "not_a_list"}
    result = await execute(
        plan, tools.registry, settings=RunSettings(executor=executor_for(executor))
    )
    weather = result.tasks["weather"]
    assert weather.status is TaskStatus.FAILED and weather.error_type == "MapError"
    assert weather.error == "for_each ${top} is an object, not a list"
    assert result.tasks["report"].status is TaskStatus.SKIPPED
    assert sum(tools.calls.values()) == 0


@pytest.mark.parametrize("executor", SKIPPING)
async def test_one_failed_element_cancels_its_siblings(executor: str, tools: Tools) -> None:
    plan = weather_plan()
    plan["tasks"][0]["args"]["n"] = 5
    plan["tasks"][1]["args"]["seconds"] = "${@index}"  # Tokyo fails at once, the rest later
    tools.failing.add("Tokyo")
    result = await execute(
        plan, tools.registry, settings=RunSettings(executor=executor_for(executor))
    )
    weather = result.tasks["weather"]
    assert weather.status is TaskStatus.FAILED
    assert weather.error == "element 0 (Tokyo) failed: RuntimeError: no weather for Tokyo"
    assert weather.error_type == "RuntimeError"
    statuses = [e.status for e in weather.elements or ()]
    assert statuses == [TaskStatus.FAILED] + [TaskStatus.CANCELLED] * 4
    assert result.tasks["report"].status is not TaskStatus.SUCCEEDED
    assert tools.calls["summary"] == 0


@pytest.mark.parametrize("executor", SKIPPING)
async def test_continue_runs_and_records_every_element(executor: str, tools: Tools) -> None:
    plan = weather_plan()
    tools.failing.add("Osaka")
    result = await execute(
        plan,
        tools.registry,
        settings=RunSettings(executor=executor_for(executor), on_failure="continue"),
    )
    weather = result.tasks["weather"]
    assert weather.status is TaskStatus.FAILED and weather.output is None
    assert weather.error == (
        "1 of 3 elements failed; element 1 (Osaka) failed: RuntimeError: no weather for Osaka"
    )
    elements = weather.elements or []
    assert [e.status for e in elements] == [
        TaskStatus.SUCCEEDED,
        TaskStatus.FAILED,
        TaskStatus.SUCCEEDED,
    ]
    assert elements[0].output == {"city": "Tokyo", "temp_c": 5} and elements[1].output is None
    assert elements[1].error == "RuntimeError: no weather for Osaka"
    assert all(e.started_at and e.finished_at for e in elements)
    assert result.tasks["report"].status is TaskStatus.SKIPPED
    assert tools.calls["Tokyo"] == tools.calls["Osaka"] == tools.calls["Nagoya"] == 1


@pytest.mark.parametrize("executor", SKIPPING)
@pytest.mark.parametrize("on_failure", ["cancel", "continue"])
async def test_allow_partial_keeps_the_successes(
    executor: str, on_failure: str, tools: Tools
) -> None:
    plan = weather_plan(allow_partial=True)
    tools.failing.add("Osaka")
    result = await execute(
        plan,
        tools.registry,
        settings=RunSettings(executor=executor_for(executor), on_failure=on_failure),
    )
    weather = result.tasks["weather"]
    assert weather.status is TaskStatus.SUCCEEDED and result.ok
    assert weather.output == [{"city": "Tokyo", "temp_c": 5}, None, {"city": "Nagoya", "temp_c": 6}]
    assert [e.status.value for e in weather.elements or ()] == ["succeeded", "failed", "succeeded"]
    assert tools.calls["summary"] == 1

    tools.failing |= {"Tokyo", "Nagoya"}  # every element failed: nothing to keep
    result = await execute(
        plan, tools.registry, settings=RunSettings(executor=executor_for(executor))
    )
    assert result.tasks["weather"].status is TaskStatus.FAILED
    assert result.tasks["weather"].error.startswith("3 of 3 elements failed; element 0 (Tokyo)")


@pytest.mark.parametrize("executor", SKIPPING)
async def test_the_failure_named_is_the_first_in_the_list_not_in_time(
    executor: str, tools: Tools
) -> None:
    """Every element ran (allow_partial, nothing cancelled) and failed: the message names
    element 0, which failed last, whatever order the executor finished them in."""
    tools.failing |= {"Tokyo", "Osaka", "Nagoya"}
    plan = {
        "tasks": [
            {
                "id": "weather",
                "tool": "weather",
                "for_each": [
                    {"c": "Tokyo", "s": 0.5},
                    {"c": "Osaka", "s": 0},
                    {"c": "Nagoya", "s": 0},
                ],
                "args": {"city": "${@item.c}", "seconds": "${@item.s}"},
                "allow_partial": True,
            }
        ]
    }
    result = await execute(
        plan, tools.registry, settings=RunSettings(executor=executor_for(executor))
    )
    assert sorted(tools.calls) == ["Nagoya", "Osaka", "Tokyo"]  # all three ran
    error = result.tasks["weather"].error or ""
    assert error.startswith(
        '3 of 3 elements failed; element 0 ({"c": "Tokyo", "s": 0.5}) failed'
    ), error


@pytest.mark.parametrize("executor", SKIPPING)
async def test_elements_and_their_positions_in_arguments(executor: str, tools: Tools) -> None:
    plan = {
        "tasks": [
            {"id": "item", "tool": "records"},  # a task may be called item
            {
                "id": "labels",
                "tool": "label",
                "for_each": "${item}",
                "args": {"name": "${@item.name}-${item.1.name}", "index": "${@index}"},
            },
            {"id": "second", "tool": "summary", "args": {"temps": ["${labels.1}"]}},
        ]
    }
    result = await execute(
        plan, tools.registry, settings=RunSettings(executor=executor_for(executor))
    )
    assert result.ok
    assert result.tasks["labels"].output == ["0:a-b", "1:b-b"]
    assert result.tasks["second"].output == "1:b-b"


@pytest.mark.parametrize("executor", SKIPPING)
async def test_a_literal_list(executor: str, tools: Tools) -> None:
    plan = {
        "tasks": [
            {
                "id": "w",
                "tool": "weather",
                "for_each": [{"c": "Rome"}, {"c": "Oslo"}],
                "args": {"city": "${@item.c}", "seconds": 0},
            }
        ]
    }
    result = await execute(
        plan, tools.registry, settings=RunSettings(executor=executor_for(executor))
    )
    assert result.tasks["w"].output == [
        {"city": "Rome", "temp_c": 4},
        {"city": "Oslo", "temp_c": 4},
    ]


@pytest.mark.parametrize("executor", SKIPPING)
async def test_a_mapped_agent_task(executor: str, tools: Tools) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    async def agent(node: AgentNode) -> tuple[Any, list[AgentStep] | None]:
        seen.append((node.instruction, node.context))
        city = node.instruction.rsplit(" ", 1)[-1]
        found = await node.call_tool(node.tools.get("weather"), {"city": city, "seconds": 0})
        return f"{city} has {found['temp_c']} C", [AgentStep(step=1, thought="look it up")]

    plan = {
        "tasks": [
            {"id": "top", "tool": "cities", "args": {"n": 2}},
            {"id": "ask", "instruction": "Describe the weather in ${@item}", "for_each": "${top}"},
        ]
    }
    result = await execute(
        plan,
        tools.registry,
        llm=object(),
        agent_runner=agent,
        settings=RunSettings(executor=executor_for(executor)),
    )
    ask = result.tasks["ask"]
    assert ask.status is TaskStatus.SUCCEEDED
    assert ask.output == ["Tokyo has 5 C", "Osaka has 5 C"]
    assert sorted(i for i, _ in seen) == [
        "Describe the weather in Osaka",
        "Describe the weather in Tokyo",
    ]
    assert all(c == {"top": ["Tokyo", "Osaka"]} for _, c in seen)
    assert [e.steps for e in ask.elements or ()] == [[AgentStep(step=1, thought="look it up")]] * 2
    assert tools.calls["Tokyo"] == tools.calls["Osaka"] == 1


@pytest.mark.parametrize("executor", SKIPPING)
async def test_stopping_the_run_mid_map_records_every_element(executor: str, tools: Tools) -> None:
    plan = weather_plan(max_concurrency=2)
    plan["tasks"][0]["args"]["n"] = 5
    plan["tasks"][1]["args"]["seconds"] = "${@index}"  # 0 s, 1 s, then 2 s and more
    finished: list[Any] = []
    elements: list[TaskElementFinished] = []

    def listen(event: Any) -> None:
        if isinstance(event, TaskFinished):
            finished.append(event.result)
        elif isinstance(event, TaskElementFinished):
            elements.append(event)
            if event.index == 0:
                scope.cancel()  # element 0 is done, element 1 is running

    with anyio.CancelScope() as scope:
        await execute(
            plan,
            tools.registry,
            listeners=[listen],
            settings=RunSettings(executor=executor_for(executor)),
        )
    weather = next(r for r in finished if r.task_id == "weather")
    assert weather.status is TaskStatus.CANCELLED
    statuses = [e.status.value for e in weather.elements or ()]
    assert statuses[0] == "succeeded" and set(statuses[1:]) == {"cancelled"}
    assert len(statuses) == 5
    assert tools.calls["Tokyo"] == 1 and tools.calls["Sapporo"] == tools.calls["Kobe"] == 0
    assert elements[0].index == 0 and elements[0].result.status is TaskStatus.SUCCEEDED


@pytest.mark.parametrize("executor", SKIPPING)
async def test_the_expansion_cap(executor: str, tools: Tools) -> None:
    plan = weather_plan()
    plan["tasks"][0]["args"]["n"] = 5
    result = await execute(
        plan, tools.registry, settings=RunSettings(executor=executor_for(executor), max_elements=4)
    )
    weather = result.tasks["weather"]
    assert weather.status is TaskStatus.FAILED and weather.error_type == "MapError"
    assert weather.error == (
        "for_each ${top} has 5 elements, more than this run allows (4; raise it with "
        "max_elements, or --max-elements on the command line)"
    )
    assert tools.calls == Counter({"cities": 1})
    result = await execute(
        plan, tools.registry, settings=RunSettings(executor=executor_for(executor), max_elements=5)
    )
    assert result.ok


async def test_ten_million_elements_is_a_clear_error() -> None:
    reg = dagagent.Registry()
    calls = Counter[str]()

    @reg.tool
    def many() -> Any:
        return list(range(10_000_000))

    @reg.tool
    def one(i: int) -> int:
        calls["one"] += 1
        return i

    plan = {
        "tasks": [
            {"id": "many", "tool": "many"},
            {"id": "each", "tool": "one", "for_each": "${many}", "args": {"i": "${@item}"}},
        ]
    }
    result = await execute(plan, reg)
    assert result.tasks["each"].error_type == "MapError"
    assert "has 10,000,000 elements, more than this run allows (10,000;" in (
        result.tasks["each"].error or ""
    )
    assert not calls


@pytest.mark.parametrize("executor", SKIPPING)
async def test_a_replan_runs_only_the_elements_that_failed(
    executor: str, tools: Tools, tmp_path: Any
) -> None:
    from dagagent.review import reuse_map
    from dagagent.store import RunStore

    db = tmp_path / "runs.db"
    plan = weather_plan()
    tools.failing.add("Osaka")
    first = await execute(
        plan,
        tools.registry,
        store=db,
        settings=RunSettings(executor=executor_for(executor), on_failure="continue"),
    )
    assert first.tasks["weather"].status is TaskStatus.FAILED
    with RunStore(db) as st:
        record = st.get_run(first.run_id)

    tools.failing.clear()
    tools.calls.clear()
    again = await execute(
        plan,
        tools.registry,
        store=db,
        reuse=reuse_map(record),
        parent_id=first.run_id,
        settings=RunSettings(executor=executor_for(executor)),
    )
    assert again.ok
    assert tools.calls == Counter({"Osaka": 1, "summary": 1})  # nothing else ran again
    weather = again.tasks["weather"]
    assert [e.status.value for e in weather.elements or ()] == ["reused", "succeeded", "reused"]
    assert weather.status is TaskStatus.SUCCEEDED
    assert weather.output == [
        {"city": "Tokyo", "temp_c": 5},
        {"city": "Osaka", "temp_c": 5},
        {"city": "Nagoya", "temp_c": 6},
    ]

    # a longer list: the elements seen before are reused wherever they now stand
    with RunStore(db) as st:
        record = st.get_run(again.run_id)
    plan["tasks"][0]["args"]["n"] = 5
    tools.calls.clear()
    third = await execute(
        plan,
        tools.registry,
        reuse=reuse_map(record),
        settings=RunSettings(executor=executor_for(executor)),
    )
    assert tools.calls == Counter({"cities": 1, "Sapporo": 1, "Kobe": 1, "summary": 1})
    statuses = [e.status.value for e in third.tasks["weather"].elements or ()]
    assert statuses == ["reused", "reused", "reused", "succeeded", "succeeded"]


async def test_a_long_map_with_no_bound_of_its_own_keeps_a_bounded_number_of_elements_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each element in flight holds a worker: a list of a million elements must not start a
    # million at once. The default bound is lowered here so that a short list shows it.
    from dagagent.runner import _map

    monkeypatch.setattr(_map, "DEFAULT_ELEMENT_CONCURRENCY", 4, raising=False)
    reg = dagagent.Registry()
    state = {"running": 0, "peak": 0}

    @reg.tool
    async def step(i: int) -> int:
        """Yield to the loop a few times while counted as running."""
        state["running"] += 1
        state["peak"] = max(state["peak"], state["running"])
        for _ in range(3):
            await anyio.lowlevel.checkpoint()  # every other ready element gets to start
        state["running"] -= 1
        return i

    def plan(**bound: int) -> dict[str, Any]:
        task = {"id": "m", "tool": "step", "for_each": list(range(40)), "args": {"i": "${@item}"}}
        return {"tasks": [{**task, **bound}]}

    result = await execute(plan(), reg)
    assert result.ok and result.outputs["m"] == list(range(40))
    assert state["peak"] == 4
    # The task's own bound is the user's word: more at once when it says so.
    state["peak"] = 0
    result = await execute(plan(max_concurrency=10), reg)
    assert result.ok and state["peak"] == 10
