"""Run review, plan diffs, reuse maps and predictions, graph drawings: pure functions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dagagent
from dagagent.cli.diagram import render_graph, to_ascii, to_dot, to_mermaid
from dagagent.plan import Plan
from dagagent.review import (
    diff_plans,
    format_diff,
    format_review,
    predict_reuse,
    reuse_map,
    review_run,
    shorten,
)
from dagagent.settings import RunSettings
from dagagent.store import RunRecord, RunStore


def w(id: str, deps: tuple[str, ...] = (), **args: Any) -> dict[str, Any]:
    return {"id": id, "tool": "work", "args": {"name": id, **args}, "depends_on": list(deps)}


PLAN = {
    "goal": "a failing plan",
    "tasks": [
        w("a", value={"n": 1, "text": "x" * 200}),
        w("b", value=2),
        {"id": "bad", "tool": "work", "args": {"name": "bad", "fail": True, "value": "${a.n}"}},
        {"id": "c", "tool": "add", "args": {"a": "${a.n}", "b": "${b}"}},
        {"id": "d", "tool": "echo", "args": {"value": "${bad}"}},
        {"id": "e", "tool": "echo", "args": {"value": "${d}"}},
    ],
}


def record_of(tmp_path: Path, registry: dagagent.Registry, plan: Any, **kw: Any) -> RunRecord:
    db = tmp_path / "r.db"
    result = dagagent.execute_sync(plan, registry, store=db, settings=RunSettings(**kw))
    with RunStore(db) as st:
        return st.get_run(result.run_id)


@pytest.fixture
def failed(tmp_path: Path, registry: dagagent.Registry) -> RunRecord:
    return record_of(tmp_path, registry, PLAN, executor="dataflow", on_failure="continue")


def test_review_groups_failures_what_they_blocked_and_successes(failed: RunRecord) -> None:
    review = review_run(failed, width=40)
    assert review.status == "failed" and review.goal == "a failing plan"
    (bad,) = review.failed
    assert bad.task_id == "bad" and bad.tool == "work" and bad.attempts == 1
    assert bad.error == "RuntimeError: bad failed on purpose"
    assert bad.error_type == "RuntimeError"
    assert {o.task_id: o.caused_by for o in review.blocked} == {"d": ("bad",), "e": ("bad",)}
    assert [o.task_id for o in review.succeeded] == ["a", "b", "c"]
    a = review.succeeded[0]
    assert a.output is not None and len(a.output) <= 40 and a.output.endswith("...")
    assert review.unrecorded == []
    text = format_review(review)
    assert "failed (1):\n  bad [work, 1 attempt] failed: RuntimeError: bad failed" in text
    assert "  e [echo] skipped (because of bad)" in text
    assert "  c [add] = 3" in text
    doc = review.to_json_dict()
    assert doc["failed"][0]["task_id"] == "bad" and doc["blocked"][1]["caused_by"] == ["bad"]


def test_review_of_a_cancelled_run_names_the_failure_that_stopped_it(
    tmp_path: Path, registry: dagagent.Registry
) -> None:
    plan = {
        "tasks": [w("boom", fail=True, seconds=0.05), w("slow", seconds=5.0), w("later", ("slow",))]
    }
    rec = record_of(tmp_path, registry, plan, executor="dataflow")
    review = review_run(rec)
    assert [o.task_id for o in review.failed] == ["boom"]
    blocked = {o.task_id: o.caused_by for o in review.blocked}
    assert blocked == {"slow": ("boom",), "later": ("boom",)}
    assert review.blocked[0].status == "cancelled"


def test_review_of_a_killed_run_lists_what_has_no_result(failed: RunRecord) -> None:
    partial = failed.model_copy(update={"tasks": {k: failed.tasks[k] for k in ("a", "b")}})
    review = review_run(partial)
    assert [o.task_id for o in review.unrecorded] == ["bad", "c", "d", "e"]
    assert "no result (yet) (4):\n  bad, c, d, e" in format_review(review)


def test_review_of_a_clean_run(tmp_path: Path, registry: dagagent.Registry) -> None:
    rec = record_of(tmp_path, registry, {"tasks": [w("a")]})
    assert format_review(review_run(rec)).endswith("nothing failed")


def test_diff_lists_added_removed_and_changed_fields() -> None:
    old = Plan.model_validate(PLAN)
    new = Plan.model_validate(
        {
            "goal": "a fixed plan",
            "tasks": [
                w("a", value={"n": 1, "text": "x" * 200}),
                w("b", value=3),
                {
                    "id": "c",
                    "tool": "echo",
                    "args": {"value": "${a.n}"},
                    "depends_on": ["b"],
                    "retries": 2,
                },
                {"id": "d", "tool": "echo", "args": {"value": "${c}"}},
                {"id": "e", "tool": "echo", "args": {"value": "${d}"}},
                {"id": "f", "tool": "add", "args": {"a": 1, "b": 2}},
            ],
        }
    )
    diff = diff_plans(old, new)
    assert diff.added == ["f"] and diff.removed == ["bad"] and diff.unchanged == ["a", "e"]
    assert diff.goal == ("a failing plan", "a fixed plan")
    changes = {k: [str(c) for c in v] for k, v in diff.changed.items()}
    assert changes == {
        "b": ["args.value: 2 -> 3"],
        "c": [
            'tool: "add" -> "echo"',
            'args.a: "${a.n}" -> (none)',
            'args.b: "${b}" -> (none)',
            'args.value: (none) -> "${a.n}"',
            "depends_on +b",
            "retries: (none) -> 2",
        ],
        "d": ['args.value: "${bad}" -> "${c}"'],
    }
    text = format_diff(diff, old, new)
    assert text.splitlines()[0] == '~ goal: "a failing plan" -> "a fixed plan"'
    assert '+ f: add({"a": 1, "b": 2})' in text
    assert "- bad: work(" in text
    assert "~ b: args.value: 2 -> 3" in text
    assert text.splitlines()[-1] == "1 added, 1 removed, 3 changed, 2 unchanged"
    assert diff.to_json_dict()["changed"]["b"] == [{"field": "args.value", "old": 2, "new": 3}]
    same = diff_plans(old, old)
    assert same.empty and format_diff(same, old, old) == "the plans are the same"


def test_diff_sees_type_changes_and_list_items() -> None:
    old = Plan.model_validate(
        {"tasks": [{"id": "x", "tool": "echo", "args": {"value": [1, "a", 3]}}]}
    )
    new = Plan.model_validate(
        {"tasks": [{"id": "x", "tool": "echo", "args": {"value": [1, "b", 3.0]}}]}
    )
    assert [str(c) for c in diff_plans(old, new).changed["x"]] == [
        'args.value.1: "a" -> "b"',
        "args.value.2: 3 -> 3.0",
    ]


def test_reuse_map_holds_successes_with_their_fingerprints(failed: RunRecord) -> None:
    reuse = reuse_map(failed)
    assert set(reuse) == {"a", "b", "c"}
    assert reuse["c"] == (failed.fingerprints["c"], 3)


def test_predict_reuse(failed: RunRecord) -> None:
    new = Plan.model_validate(
        {
            "tasks": [
                w("a", value={"n": 1, "text": "x" * 200}),
                w("b", value=5),  # changed
                {"id": "bad", "tool": "work", "args": {"name": "bad", "value": "${a.n}"}},  # fixed
                {"id": "c", "tool": "add", "args": {"a": "${a.n}", "b": "${b}"}},  # b runs again
                {"id": "d", "tool": "echo", "args": {"value": "${bad}"}},
                {"id": "g", "tool": "echo", "args": {"value": "new"}},
            ]
        }
    )
    got = {k: (d.action, d.reason) for k, d in predict_reuse(failed, new).items()}
    assert got == {
        "a": ("reuse", "unchanged success"),
        "b": ("run", "a new version: its call changed since it succeeded"),
        "bad": ("run", "failed before"),
        "c": ("maybe", "unchanged, but b runs again"),
        "d": ("run", "skipped before"),
        "g": ("run", "new task"),
    }
    assert list(got) == ["a", "b", "bad", "c", "d", "g"]  # plan order


def test_prediction_matches_what_the_runner_does(
    failed: RunRecord, registry: dagagent.Registry, recorder: Any
) -> None:
    # b changes its value; c references b, so c cannot be reused; a is unchanged.
    new = Plan.model_validate(
        {
            "tasks": [
                w("a", value={"n": 1, "text": "x" * 200}),
                w("b", value=5),
                {"id": "c", "tool": "add", "args": {"a": "${a.n}", "b": "${b}"}},
            ]
        }
    )
    before = dict(recorder.calls)
    result = dagagent.execute_sync(new, registry, reuse=reuse_map(failed))
    statuses = {k: r.status.value for k, r in result.tasks.items()}
    assert statuses == {"a": "reused", "b": "succeeded", "c": "succeeded"}
    assert result.outputs["c"] == 6
    assert recorder.calls["a"] == before["a"]  # not called again
    assert recorder.calls["b"] == before["b"] + 1


def test_shorten() -> None:
    assert shorten("a  b\n c") == "a b c"
    assert shorten({"k": [1, 2]}) == '{"k": [1, 2]}'
    assert shorten("x" * 100, 10) == "xxxxxxx..."


# ---------------------------------------------------------------------------------------------
# Drawings


def test_plan_drawings(failed: RunRecord) -> None:
    graph = dagagent.validate(failed.plan)
    ascii_ = to_ascii(graph)
    assert ascii_.splitlines()[:2] == ["goal: a failing plan", "level 0"]
    assert "  c    add   <- a, b" in ascii_
    mermaid = to_mermaid(graph)
    assert mermaid.startswith("flowchart TD")
    assert 't0["a<br/>work"]' in mermaid and "t0 --> t2" in mermaid
    assert "classDef" not in mermaid
    dot = to_dot(graph)
    assert dot.startswith("digraph plan {") and dot.endswith("}")
    assert '"a" -> "c";' in dot and '"bad" -> "d";' in dot


def test_run_drawings_mark_status(failed: RunRecord) -> None:
    graph = dagagent.validate(failed.plan)
    statuses = {k: r.status.value for k, r in failed.tasks.items()}
    del statuses["e"]  # as if the run had been killed before e finished
    ascii_ = render_graph(graph, "ascii", statuses)
    assert "[failed]     bad" in ascii_ and "[unrecorded] e" in ascii_
    mermaid = render_graph(graph, "mermaid", statuses)
    assert "classDef failed fill:#ffcdd2" in mermaid
    ids = {line.split("[")[0].strip(): line for line in mermaid.splitlines() if '["' in line}
    bad_node = next(k for k, v in ids.items() if '"bad<br/>' in v)
    assert f"class {bad_node} failed" in mermaid
    assert "stroke-dasharray" in mermaid  # the unrecorded node
    dot = render_graph(graph, "dot", statuses)
    assert '"bad" [label="bad\\nwork\\nfailed", fillcolor="#ffcdd2"' in dot
    with pytest.raises(ValueError):
        render_graph(graph, "png")


def test_drawings_escape_labels() -> None:
    plan = Plan.model_validate(
        {"goal": 'say "hi" <b>', "tasks": [{"id": "q", "instruction": 'quote " and <tag>'}]}
    )
    graph = dagagent.validate(plan)
    assert 't0["q<br/>agent"]' in to_mermaid(graph)
    assert 'label="say \\"hi\\" <b>";' in to_dot(graph)
