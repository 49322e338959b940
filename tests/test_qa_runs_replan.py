"""Replanning with edited plans: which tools really run again when a task is renamed or an
upstream output changes (counted by the tools themselves)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dagagent
from dagagent.review import predict_reuse, reuse_map
from dagagent.store import RunRecord, RunStore

pytestmark = pytest.mark.anyio

PAGES = {"a.example": "alpha\nbeta\n", "b.example": "one\ntwo\nthree\n"}


def _registry(calls: list[str], disk: dict[str, str]) -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool(side_effects=True)
    def download(url: str, note: str = "") -> dict[str, Any]:
        """Save a page to 'disk' (a side effect); 'note' changes nothing."""
        calls.append(f"download {url}")
        disk["page"] = PAGES[url]
        return {"url": url, "size": len(PAGES[url])}

    @reg.tool
    def count_lines(path: str) -> int:
        """Count the lines of what is on 'disk' (reads the side effect, not an argument)."""
        calls.append(f"count {path}")
        return disk[path].count("\n")

    @reg.tool
    def shout(text: str) -> str:
        """Upper-case."""
        calls.append(f"shout {text}")
        return text.upper()

    return reg


PLAN = {
    "goal": "count a page",
    "tasks": [
        {"id": "dl", "tool": "download", "args": {"url": "a.example"}},
        {"id": "count", "tool": "count_lines", "args": {"path": "page"}, "depends_on": ["dl"]},
        {"id": "s", "tool": "shout", "args": {"text": "hi"}},
        {"id": "s2", "tool": "shout", "args": {"text": "${s}!"}},
    ],
}


def _edit(plan: dict[str, Any], task_id: str, **changes: Any) -> dict[str, Any]:
    tasks = []
    for t in plan["tasks"]:
        t = {**t, "args": dict(t["args"])}
        if t["id"] == task_id:
            for k, v in changes.items():
                if k == "id":
                    t["id"] = v
                else:
                    t["args"][k] = v
        tasks.append(t)
    return {**plan, "tasks": tasks}


def _first(tmp_path: Path, calls: list[str], disk: dict[str, str]) -> RunRecord:
    db = tmp_path / "r.db"
    result = dagagent.execute_sync(PLAN, _registry(calls, disk), store=db)
    assert result.ok
    with RunStore(db) as st:
        return st.get_run(result.run_id)


def _again(
    rec: RunRecord, plan: dict[str, Any], calls: list[str], disk: dict[str, str]
) -> dict[str, str]:
    calls.clear()
    result = dagagent.execute_sync(
        plan, _registry(calls, disk), reuse=reuse_map(rec), parent_id=rec.id, executor="serial"
    )
    assert result.ok
    return {k: r.status.value for k, r in result.tasks.items()}


def test_a_task_after_a_changed_side_effect_runs_again(tmp_path: Path) -> None:
    calls: list[str] = []
    disk: dict[str, str] = {}
    rec = _first(tmp_path, calls, disk)
    assert rec.tasks["count"].output == 2
    plan = _edit(PLAN, "dl", url="b.example")  # count's own definition is unchanged
    predicted = predict_reuse(rec, dagagent.Plan.model_validate(plan))
    assert predicted["count"].action == "maybe"
    st = _again(rec, plan, calls, disk)
    # count read the new page: reusing its old answer (2) would be wrong
    assert st == {"dl": "succeeded", "count": "succeeded", "s": "reused", "s2": "reused"}
    assert calls == ["download b.example", "count page"]


def test_a_dependency_run_again_with_the_same_output_keeps_the_reuse(tmp_path: Path) -> None:
    calls: list[str] = []
    disk: dict[str, str] = {}
    rec = _first(tmp_path, calls, disk)
    st = _again(rec, _edit(PLAN, "dl", note="again"), calls, disk)
    assert st == {"dl": "succeeded", "count": "reused", "s": "reused", "s2": "reused"}
    assert calls == ["download a.example"]


def test_a_renamed_task_runs_and_so_does_what_uses_it(tmp_path: Path) -> None:
    calls: list[str] = []
    disk: dict[str, str] = {}
    rec = _first(tmp_path, calls, disk)
    plan = _edit(PLAN, "s", id="s_new")
    plan = _edit(plan, "s2", text="${s_new}!")
    st = _again(rec, plan, calls, disk)
    assert st == {"dl": "reused", "count": "reused", "s_new": "succeeded", "s2": "succeeded"}
    assert calls == ["shout hi", "shout HI!"]
