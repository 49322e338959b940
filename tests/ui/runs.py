"""Runs of the test suite's own making, recorded to a store for the viewer to show: a
finished run with known task durations (and hostile text in its goal and an output), a
failed run and its replan, and a run held open so that it is still running."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from pathlib import Path
from typing import Any

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
