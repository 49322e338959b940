"""LLMReplanner: the prompt it sends, what it did to the old plan's tasks (warnings: a new
version of a success, a dropped success, an unchanged failure), and reuse of the kept tasks'
outputs in the next run."""

from __future__ import annotations

import json
from typing import Any

import pytest

import dagagent
from dagagent.errors import PlanningError
from dagagent.llm import ScriptedLLM, wire
from dagagent.planners import PLAN_FORMAT_NAME, LLMReplanner
from dagagent.results import TaskResult, TaskStatus
from dagagent.runner import task_fingerprint
from dagagent.settings import RunSettings

pytestmark = pytest.mark.anyio

OLD = dagagent.Plan.model_validate(
    {
        "goal": "sum two sums",
        "tasks": [
            {"id": "x", "tool": "add", "args": {"a": 1, "b": 2}},
            {"id": "y", "tool": "work", "args": {"name": "y", "fail": True}},
            {"id": "total", "tool": "add", "args": {"a": "${x}", "b": "${y}"}},
        ],
    }
)
FIXED = {
    "tasks": [
        {"id": "x", "tool": "add", "args": {"a": 1, "b": 2}},
        {"id": "y2", "tool": "add", "args": {"a": 3, "b": 4}},
        {"id": "total", "tool": "add", "args": {"a": "${x}", "b": "${y2}"}},
    ]
}


@pytest.fixture
async def first_run(registry: dagagent.Registry) -> dagagent.RunResult:
    result = await dagagent.execute(OLD, registry, settings=RunSettings(on_failure="continue"))
    assert result.tasks["x"].status is TaskStatus.SUCCEEDED
    assert result.tasks["y"].status is TaskStatus.FAILED
    assert result.tasks["total"].status is TaskStatus.SKIPPED
    return result


async def test_revised_plan_keeps_successes_and_reuses_them(
    registry: dagagent.Registry, first_run: dagagent.RunResult
):
    llm = ScriptedLLM.openai([wire.openai_text(json.dumps(FIXED))])
    async with llm:
        replanner = LLMReplanner(llm, registry)
        new = await replanner.replan("sum two sums", OLD, first_run.tasks)
    assert [t.id for t in new.tasks] == ["x", "y2", "total"]
    assert replanner.last_result is not None and replanner.last_result.warnings == ()
    # the kept task has the same fingerprint: its output is reused, not computed again
    tasks = {t.id: t for t in OLD.tasks}
    reuse = {
        tid: (task_fingerprint(tasks[tid], r.args), r.output)
        for tid, r in first_run.tasks.items()
        if r.ok
    }
    second = await dagagent.execute(new, registry, reuse=reuse)
    assert second.ok
    assert second.tasks["x"].status is TaskStatus.REUSED
    assert second.outputs["total"] == 10


async def test_prompt_has_goal_old_plan_outputs_and_errors(
    registry: dagagent.Registry, first_run: dagagent.RunResult
):
    llm = ScriptedLLM([json.dumps(FIXED)])
    await LLMReplanner(llm, registry).replan("sum two sums", OLD, first_run.tasks)
    system, user = llm.requests[0].messages
    assert "- add(a: integer, b: integer) -> int" in system.content
    assert "revise" in system.content
    text = user.content
    assert "Goal: sum two sums" in text
    assert OLD.model_dump_json(exclude_defaults=True) in text
    assert "- x: succeeded, output: <output>3</output>" in text
    assert "- y: failed: <error>RuntimeError: y failed on purpose</error>" in text
    assert "- total: skipped" in text
    assert "SAME id, tool and args" in text


async def test_long_outputs_are_shortened(registry: dagagent.Registry):
    results = {
        "x": TaskResult(task_id="x", status=TaskStatus.SUCCEEDED, output="z" * 5000),
        "y": TaskResult(task_id="y", status=TaskStatus.FAILED, error="e" * 5000),
    }
    llm = ScriptedLLM([json.dumps(FIXED)])
    await LLMReplanner(llm, registry, output_chars=100).replan("", OLD, results)
    text = llm.requests[0].messages[-1].content
    assert "z" * 80 in text and "z" * 200 not in text and "[5000 chars]" in text
    assert "e" * 200 not in text
    assert "Goal: sum two sums" in text  # empty goal: the plan's own


async def test_a_success_changed_under_its_id_is_a_new_version_that_runs(
    registry: dagagent.Registry, first_run: dagagent.RunResult
):
    changed = json.loads(json.dumps(FIXED))
    changed["tasks"][0]["args"] = {"a": 1, "b": 5}  # same id "x", other args
    llm = ScriptedLLM.anthropic([wire.anthropic_tool_use([(PLAN_FORMAT_NAME, changed)])])
    async with llm:
        replanner = LLMReplanner(llm, registry)
        report = await replanner.replan_with_report("sum two sums", OLD, first_run.tasks)
    assert len(report.attempts) == 1 and report.attempts[0].ok  # no second call
    assert report.plan.tasks[0].args == {"a": 1, "b": 5}
    assert [(w.code, w.task_id, w.message) for w in report.warnings] == [
        (
            "new_version",
            "x",
            'succeeded before as add({"a": 1, "b": 2}); the revised plan changes it to '
            'add({"a": 1, "b": 5}): it runs again, and so do the tasks that use its output, '
            "unless it comes out the same",
        )
    ]
    # run with the old run's outputs to reuse: the new version runs, its old output is not used
    tasks = {t.id: t for t in OLD.tasks}
    reuse = {
        tid: (task_fingerprint(tasks[tid], r.args), r.output)
        for tid, r in first_run.tasks.items()
        if r.ok
    }
    second = await dagagent.execute(report.plan, registry, reuse=reuse)
    assert second.tasks["x"].status is TaskStatus.SUCCEEDED and second.outputs["x"] == 6
    assert second.outputs["total"] == 13


async def test_the_plan_is_validated_like_a_new_plan(
    registry: dagagent.Registry, first_run: dagagent.RunResult
):
    bad = {"tasks": [*FIXED["tasks"], {"id": "z", "tool": "teleport", "args": {}}]}
    llm = ScriptedLLM([json.dumps(bad), json.dumps(FIXED)])
    report = await LLMReplanner(llm, registry).replan_with_report("g", OLD, first_run.tasks)
    assert [i.code for i in report.attempts[0].issues] == ["unknown_tool"]
    assert "[unknown_tool] task 'z'" in llm.requests[1].messages[-1].content


async def test_dropped_success_and_unchanged_failure_are_warnings(
    registry: dagagent.Registry, first_run: dagagent.RunResult
):
    revised = {
        "tasks": [
            {"id": "x2", "tool": "add", "args": {"a": 1, "b": 2}},
            {"id": "y", "tool": "work", "args": {"name": "y", "fail": True}},
        ]
    }
    llm = ScriptedLLM([json.dumps(revised)])
    report = await LLMReplanner(llm, registry).replan_with_report("g", OLD, first_run.tasks)
    assert [(w.code, w.task_id) for w in report.warnings] == [
        ("dropped_success", "x"),
        ("unchanged_failure", "y"),
    ]


async def test_exhausted_attempts_raise_planning_error(
    registry: dagagent.Registry, first_run: dagagent.RunResult
):
    bad = json.loads(json.dumps(FIXED))
    bad["tasks"][0]["tool"] = "teleport"
    llm = ScriptedLLM([json.dumps(bad), "I give up"])
    with pytest.raises(PlanningError) as info:
        await LLMReplanner(llm, registry, max_attempts=2).replan("g", OLD, first_run.tasks)
    assert "no valid revised plan after 2 attempts" in str(info.value)
    codes: list[Any] = [[i.code for i in issues] for _, issues in info.value.attempts]
    assert codes == [["unknown_tool"], ["not_json"]]
    assert info.value.attempts[1][0] == "I give up"
