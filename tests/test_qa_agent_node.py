"""Agent nodes in plans with models that fail, stall or never stop: what the task says,
what the run store keeps, and what the CLI shows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import structlog
from llm_server import LLMTestServer, Reply
from typer.testing import CliRunner

import dagagent
from dagagent import Registry, TaskStatus
from dagagent.cli import app
from dagagent.llm import ScriptedLLM, UserMessage, wire

pytestmark = pytest.mark.anyio


@pytest.fixture
def tools() -> Registry:
    reg = Registry()

    @reg.tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @reg.tool
    def city(name: str) -> dict[str, Any]:
        """A city record."""
        return {"name": name, "coastal": False, "mayor": None}

    @reg.tool
    async def broken() -> str:
        """Fails after a moment."""
        await anyio.sleep(0.05)
        raise RuntimeError("sensor offline")

    return reg


@pytest.fixture(autouse=True)
def _restore_structlog() -> Iterator[None]:
    yield
    structlog.reset_defaults()


ONE_AGENT = {"goal": "g", "tasks": [{"id": "sum", "instruction": "Add 1 and 2", "tools": ["add"]}]}


async def test_a_model_that_dies_mid_agent_keeps_the_steps_taken(
    tools: Registry, tmp_path: Path
) -> None:
    dead = httpx.Response(500, json=wire.openai_error("upstream down"))
    script = [wire.openai_tool_calls([("add", {"a": 1, "b": 2})]), dead, dead]
    store = tmp_path / "runs.db"
    async with ScriptedLLM.openai(script, max_retries=1) as llm:
        result = await dagagent.execute(ONE_AGENT, tools, llm=llm, store=store)
    task = result.tasks["sum"]
    assert task.status is TaskStatus.FAILED and task.error_type == "LLMServerError"
    assert "HTTP 500" in (task.error or "") and "upstream down" in (task.error or "")
    assert task.steps is not None
    assert task.steps[0]["calls"][0]["observation"] == "3"  # done before the model died

    shown = CliRunner().invoke(app, ["show", result.run_id, "--json", "--store", str(store)])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["tasks"]["sum"]["steps"] == task.steps


async def test_a_model_error_is_retried_by_the_tasks_retries(tools: Registry) -> None:
    plan = json.loads(json.dumps(ONE_AGENT))
    plan["tasks"][0]["retries"] = 1
    dead = httpx.Response(500, json=wire.openai_error("down"))
    add = wire.openai_tool_calls([("add", {"a": 1, "b": 2})])
    script = [add, dead, add, wire.openai_text("3")]  # attempt 1 dies after a call; 2 answers
    async with ScriptedLLM.openai(script, max_retries=0) as llm:
        result = await dagagent.execute(plan, tools, llm=llm)
    task = result.tasks["sum"]
    assert (task.status, task.attempts, task.output) == (TaskStatus.SUCCEEDED, 2, "3")
    assert task.steps is not None and len(task.steps) == 2  # the attempt that succeeded


async def test_stopped_agent_steps_are_recorded_by_the_store(
    tools: Registry, tmp_path: Path
) -> None:
    store = tmp_path / "runs.db"
    forever = [wire.anthropic_tool_use([("add", {"a": i, "b": 1})]) for i in range(10)]
    async with ScriptedLLM.anthropic(forever) as llm:
        result = await dagagent.execute(ONE_AGENT, tools, llm=llm, store=store)
    task = result.tasks["sum"]
    assert task.error_type == "AgentStoppedError" and "(max_steps)" in (task.error or "")
    assert task.steps is not None and len(task.steps) == 10
    shown = CliRunner().invoke(app, ["show", result.run_id, "--json", "--store", str(store)])
    assert json.loads(shown.stdout)["tasks"]["sum"]["steps"] == task.steps


async def test_an_instruction_that_is_one_reference_is_shown_as_json(tools: Registry) -> None:
    plan = {
        "goal": "g",
        "tasks": [
            {"id": "paris", "tool": "city", "args": {"name": "Paris"}},
            {"id": "note", "instruction": "${paris}"},
            {"id": "flag", "instruction": "${paris.coastal}"},
        ],
    }
    with ScriptedLLM(["a note", "a flag"]) as llm:
        result = await dagagent.execute(plan, tools, llm=llm, executor="serial")
    assert result.ok
    firsts = [next(m for m in r.messages if isinstance(m, UserMessage)) for r in llm.requests]
    assert firsts[0].content.startswith('{"name": "Paris", "coastal": false, "mayor": null}\n')
    assert firsts[1].content.startswith("False\n")  # as "${paris.coastal}" in text reads


@pytest.mark.parametrize("executor", ["levels", "dataflow"])
async def test_fail_fast_cancels_an_agent_waiting_on_the_model(
    tools: Registry, executor: str
) -> None:
    async def stalled(body: dict[str, Any]) -> dict[str, Any]:
        await anyio.sleep(30)
        return wire.openai_text("late")

    plan = {
        "goal": "g",
        "tasks": [
            {"id": "think", "instruction": "Think hard"},
            {"id": "sensor", "tool": "broken", "args": {}},
        ],
    }
    async with ScriptedLLM.openai([stalled]) as llm:
        with anyio.fail_after(10):
            t0 = anyio.current_time()
            result = await dagagent.execute(plan, tools, llm=llm, executor=executor)
            elapsed = anyio.current_time() - t0
    assert elapsed < 5  # not the 30 s the model would take
    assert result.tasks["sensor"].status is TaskStatus.FAILED
    assert result.tasks["think"].status is TaskStatus.CANCELLED


# ---------------------------------------------------------------------------- CLI


def test_cli_model_that_repeats_itself_fails_the_task_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DAGAGENT_MODEL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"goal": "g", "tasks": [{"id": "calc", "instruction": "6*7?", "tools": ["calculate"]}]}
        )
    )
    again = wire.openai_tool_calls([("calculate", {"expression": "6*7"})])
    with LLMTestServer() as server:
        server.push(*[Reply(json=again)] * 3)
        r = CliRunner().invoke(
            app,
            [
                "run", str(plan), "--json", "--store", str(tmp_path / "runs.db"),
                "--model", "openai:m", "--base-url", server.url + "/v1",
            ],
        )  # fmt: skip
        server.check()
    assert r.exit_code == 1, r.output
    task = json.loads(r.stdout)["tasks"]["calc"]
    assert task["error"].startswith("agent task 'calc' stopped without an answer (loop)")
    assert [c.get("observation") for s in task["steps"] for c in s["calls"]] == ["42", "42", None]
    assert "Traceback" not in r.output
