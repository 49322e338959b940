"""Runs of the test suite's own making, recorded to a store for the viewer to show: a
finished run with known task durations (and hostile text in its goal and an output), a
failed run and its replan, and a run held open so that it is still running."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from pathlib import Path
from typing import Any

import anyio

import dagagent
from dagagent.approval import Approval, Policy, Rule
from dagagent.review import reuse_map
from dagagent.store import RunStore

XSS = "<script>alert(1)</script>"
#: How long each task of the finished run sleeps (seconds).
SLEEPS = {"fetch": 0.45, "parse": 0.25, "rank": 0.6, "merge": 0.2, "report": 0.3}


def registry(gate: threading.Event | None = None) -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool
    def work(name: str, seconds: float = 0.0) -> dict[str, Any]:
        """Sleep, then say who ran."""
        time.sleep(seconds)
        return {"task": name, "slept": seconds}

    @reg.tool
    def echo(text: str) -> str:
        """Give the text back."""
        return text

    @reg.tool
    def boom(message: str) -> str:
        """Fail with a message."""
        raise ValueError(message)

    @reg.tool
    def wait_gate(name: str) -> str:
        """Block until the test opens the gate."""
        assert gate is not None
        gate.wait(30)
        return name

    return reg


def finished_plan() -> dict[str, Any]:
    def w(tid: str, *deps: str) -> dict[str, Any]:
        return {
            "id": tid,
            "tool": "work",
            "args": {"name": tid, "seconds": SLEEPS[tid]},
            "depends_on": list(deps),
        }

    return {
        "goal": f"Compare the sources {XSS} & rank them",
        "tasks": [
            w("fetch"),
            w("parse"),
            w("rank", "fetch"),
            w("merge", "parse"),
            {"id": "hostile", "tool": "echo", "args": {"text": XSS}},
            w("report", "rank", "merge"),
        ],
    }


def failing_plan(message: str) -> dict[str, Any]:
    return {
        "goal": "Fetch, then fail",
        "tasks": [
            {"id": "fetch", "tool": "echo", "args": {"text": "page"}},
            {"id": "parse", "tool": "boom", "args": {"message": message}, "depends_on": ["fetch"]},
            {"id": "summarise", "tool": "echo", "args": {"text": "${parse}"}},
        ],
    }


def fixed_plan() -> dict[str, Any]:
    plan = failing_plan("")
    plan["tasks"][1] = {"id": "parse", "tool": "echo", "args": {"text": "parsed ${fetch}"}}
    return plan


def _execute(plan: dict[str, Any], reg: dagagent.Registry, **options: Any) -> dagagent.RunResult:
    """execute_sync in a thread of its own: the browser tests' thread runs Playwright's loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(dagagent.execute_sync, plan, reg, **options).result()


def record_finished(store: Path) -> str:
    policy = Policy([Rule(tool="echo", action="ask")], ask=lambda req: Approval.approve())
    result = _execute(
        finished_plan(),
        registry(),
        store=store,
        interceptors=[policy],
    )
    return result.run_id


def record_failed_and_replan(store: Path) -> tuple[str, str]:
    failed = _execute(failing_plan("parser broke"), registry(), store=store)
    with RunStore(store) as st:
        record = st.get_run(failed.run_id)
    child = _execute(
        fixed_plan(),
        registry(),
        store=store,
        reuse=reuse_map(record),
        parent_id=failed.run_id,
    )
    return failed.run_id, child.run_id


def running_plan() -> dict[str, Any]:
    return {
        "goal": "Still going",
        "tasks": [
            {"id": "quick", "tool": "echo", "args": {"text": "done soon"}},
            {"id": "held", "tool": "wait_gate", "args": {"name": "held"}},
        ],
    }


def big_plan(levels: int = 20, width: int = 500) -> dict[str, Any]:
    """``levels * width`` tasks; each task after the first level depends on one before it."""
    tasks = []
    for lv in range(levels):
        for i in range(width):
            task: dict[str, Any] = {"id": f"t{lv}_{i}", "tool": "fast", "args": {"n": i}}
            if lv:
                task["depends_on"] = [f"t{lv - 1}_{(i * 7) % width}"]
            tasks.append(task)
    return {"goal": "a very large run", "tasks": tasks}


def record_big(store: Path, levels: int = 20, width: int = 500) -> str:
    reg = dagagent.Registry()

    @reg.tool
    async def fast(n: int) -> int:
        """Return n."""
        return n

    return _execute(big_plan(levels, width), reg, store=store).run_id


def record_chain(store: Path, n: int) -> str:
    """A run of ``n`` tasks in a chain (``t0`` to ``t{n-1}``, each after the one before)."""
    reg = dagagent.Registry()

    @reg.tool
    async def fast(n: int) -> int:
        """Return n."""
        return n

    tasks = [
        {
            "id": f"t{i}",
            "tool": "fast",
            "args": {"n": i},
            **({"depends_on": [f"t{i - 1}"]} if i else {}),
        }
        for i in range(n)
    ]
    return _execute({"goal": "a deep chain", "tasks": tasks}, reg, store=store).run_id


def record_paused_and_resumed(store: Path) -> tuple[str, str]:
    """Two runs of one plan whose ``mail`` task waits for a person: one left paused, the other
    decided and resumed."""
    from dagagent.approval import ask_later

    plan = {
        "goal": "Tell Ann",
        "tasks": [
            {"id": "fetch", "tool": "echo", "args": {"text": "the weather"}},
            {"id": "mail", "tool": "echo", "args": {"text": "to Ann: ${fetch}"}},
            {"id": "after", "tool": "echo", "args": {"text": "sent: ${mail}"}},
        ],
    }
    policy = Policy([Rule(tool="echo", args={"text": "to Ann*"}, action="ask")], ask=ask_later)
    paused = _execute(plan, registry(), store=store, interceptors=[policy]).run_id
    again = _execute(plan, registry(), store=store, interceptors=[policy]).run_id

    def resume() -> dagagent.RunResult:
        from dagagent.workflows import resume_sync

        # wall-clock, as the store stamps questions and resumes: a person takes a moment to
        # decide (on a fast machine the resume came within 10 ms, a wait the viewer rightly
        # leaves unsaid, and the page had nothing to show)
        time.sleep(0.05)

        return resume_sync(
            again, registry(), store=store, interceptors=[policy],
            decisions={"mail": Approval.approve("fine", by="ann")},
        )  # fmt: skip

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert pool.submit(resume).result().ok
    return paused, again


def record_streamed(store: Path) -> str:
    """A plan written while it ran: ``late`` joined it a while after the run began, and
    ``total`` waited for it."""
    from dagagent.graph import GrowingGraph, PlanChecker
    from dagagent.plan import ToolTask

    reg = registry()
    graph = GrowingGraph("A plan written while it runs")
    checker = PlanChecker(reg)

    def task(tid: str, seconds: float, text: str = "") -> ToolTask:
        args: dict[str, Any] = {"name": text or tid, "seconds": seconds}
        return ToolTask(id=tid, tool="work", args=args)

    async def main() -> dagagent.RunResult:
        async def write() -> None:
            graph.add(checker.check(task("first", 0.2)))
            await anyio.sleep(0.4)  # wall-clock: the timeline drawn shows late joining after it
            graph.add(checker.check(task("late", 0.2)))
            graph.add(checker.check(task("total", 0.05, "${first.task} ${late.task}")))
            graph.close()

        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            return await dagagent.execute(graph, reg, store=store)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, main).result().run_id


def record_map_with_a_long_tool_name(store: Path) -> str:
    reg = dagagent.Registry()

    @reg.tool(name="fetch_the_weather_forecast_for_a_city_with_every_detail")
    def forecast(city: str) -> dict[str, Any]:
        """A tool with a long name; no forecast for Atlantis."""
        if city == "Atlantis":
            raise LookupError(f"no forecast for {city}")
        return {"city": city}

    long = "fetch_the_weather_forecast_for_a_city_with_every_detail"
    plan = {
        "goal": "Every city",
        "tasks": [
            {"id": "all", "tool": long, "for_each": ["Oslo", "Atlantis", "Lima"],
             "args": {"city": "${@item}"}},
            {"id": "one", "tool": long, "args": {"city": "Oslo"}},
        ],
    }  # fmt: skip
    settings = dagagent.RunSettings(on_failure="continue")
    return _execute(plan, reg, store=store, settings=settings).run_id


def record_nothing_planned(store: Path) -> str:
    """The run of a solve whose model could not be reached: no task of its plan came."""
    from dagagent.errors import LLMConnectionError
    from dagagent.llm import ScriptedLLM

    llm = ScriptedLLM([LLMConnectionError("could not connect to the model's server")])

    def solve() -> dagagent.Solution:
        return dagagent.solve_sync("What is the weather?", registry(), llm, store=store)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        solution = pool.submit(solve).result()
    with RunStore(store) as st:
        run_id = st.get_solve(solution.solve_id).rounds[0].run_id
    assert run_id is not None
    return run_id


#: How long the scripted model waits before each piece of its answers (seconds).
PIECE_S = 0.004


def record_solve(store: Path) -> str:
    """A solve of two rounds, recorded: round 1's first plan is rejected (hostile text in
    it); its plan runs a tool task and an agent task that makes a tool call, and the joiner
    asks for another plan; round 2's revision adds a task, and the joiner answers (hostile
    text in the answer). Returns the solve's id."""
    import json

    from dagagent.llm import LLMResponse, ScriptedLLM, ToolCall

    def plan(*tasks: dict[str, Any]) -> str:
        return json.dumps({"goal": "Sum up the work", "tasks": list(tasks)})

    first = {"id": "fetch", "tool": "work", "args": {"name": "fetch", "seconds": 0.2}}
    note = {"id": "note", "instruction": "Say what ${fetch} did", "tools": ["echo"]}
    extra = {"id": "rank", "tool": "work", "args": {"name": "rank", "seconds": 0.15}}
    llm = ScriptedLLM(
        [
            f"Here is my plan {XSS} but no JSON",
            plan(first, note),
            LLMResponse(
                content="",
                tool_calls=[ToolCall(id="c1", name="echo", arguments={"text": "fetched"})],
                finish_reason="tool_calls",
            ),
            "fetch slept 0.2 s",
            json.dumps({"action": "replan", "feedback": "rank the work too"}),
            plan(first, note, extra),
            json.dumps(
                {
                    "action": "finish",
                    "answer": f"fetch and rank ran; {XSS}",
                    "cites": ["fetch", "rank"],
                }
            ),
        ],
        model="scripted-model",
        chunk_size=6,
        chunk_delay_s=PIECE_S,
    )
    solution = dagagent.solve_sync(
        "Sum up the work",
        registry(),
        llm,
        store=store,
        agent_tasks=True,
        budget=dagagent.Budget(tool_calls=50),
    )
    assert solution.ok, solution.reason
    return solution.solve_id


def record_run_with_calls(store: Path) -> tuple[str, str]:
    """What ``dagagent plan --execute`` and ``dagagent plan`` leave: a run planned by a
    model, whose plan's first attempt was rejected (hostile text in it), with an agent task;
    and the model calls of a plan that was not run. Returns ``(run id, id of the plan not
    run)``."""
    import json

    from dagagent.llm import MeteredLLM, ScriptedLLM
    from dagagent.planners import LLMPlanner
    from dagagent.run import new_run_id
    from dagagent.workflows._calls import run_calls

    plan = json.dumps(
        {
            "goal": "Say what ran",
            "tasks": [
                {"id": "fetch", "tool": "work", "args": {"name": "fetch"}},
                {"id": "note", "instruction": "Say what ${fetch} did"},
            ],
        }
    )
    reg = registry()

    async def main() -> tuple[str, str]:
        with RunStore(store) as st:
            calls = run_calls(st, new_run_id())
            llm = ScriptedLLM(
                [f"Here is my plan {XSS} but no JSON", plan, "fetch ran"], model="scripted-model"
            )
            planner = LLMPlanner(
                MeteredLLM(llm, observer=calls.observer("planner")), reg, agent_tasks=True
            )
            planning = await planner.plan_with_report("Say what ran")
            result = await dagagent.execute(
                planning.graph,
                reg,
                llm=MeteredLLM(llm, observer=calls.observer("agent")),
                store=st,
                run_id=calls.run_id,
            )
            assert result.ok, result.failures()
            assert calls.close() is None
            alone = run_calls(st, new_run_id())
            other = ScriptedLLM([plan], model="scripted-model")
            await LLMPlanner(
                MeteredLLM(other, observer=alone.observer("planner")), reg, agent_tasks=True
            ).plan_with_report("Say what ran")
            assert alone.close() is None
            assert calls.run_id is not None and alone.run_id is not None
            return calls.run_id, alone.run_id

    return anyio.run(main)
