"""``dagagent replan``: review, revised plan from a file, diff, reuse of unchanged successes
(counted with a tool module that logs every call), ``--out``, ``--json``, parent links."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import dagagent
from dagagent.cli import _app as cli_app, app
from dagagent.plan import load_plan
from dagagent.review import predict_reuse, reuse_map
from dagagent.settings import RunSettings
from dagagent.store import RunRecord, RunStore

TOOLS = '''
import os
from pathlib import Path

import dagagent

registry = dagagent.Registry()
PRICES = {"apple": 3, "pear": 4, "plum": 5}


def _count(call: str) -> None:
    with Path(os.environ["DAGAGENT_TEST_CALLS"]).open("a") as f:
        f.write(call + "\\n")


@registry.tool
def price(item: str) -> int:
    """Price of an item."""
    _count(f"price:{item}")
    if item not in PRICES:
        raise LookupError(f"no price for {item!r}")
    return PRICES[item]


@registry.tool
def price_again(item: str) -> int:
    """The same prices, by another tool."""
    _count(f"price_again:{item}")
    return PRICES[item]


@registry.tool
def total(a: int, b: int) -> int:
    """Add two prices."""
    _count(f"total:{a}+{b}")
    return a + b
'''


def task(id: str, tool: str, **args: Any) -> dict[str, Any]:
    return {"id": id, "tool": tool, "args": args}


PLAN: dict[str, Any] = {
    "goal": "total price",
    "tasks": [
        task("apple", "price", item="apple"),
        task("pear", "price", item="pear"),
        task("kiwi", "price", item="kiwi"),
        task("sum1", "total", a="${apple}", b="${pear}"),
        task("sum2", "total", a="${sum1}", b="${kiwi}"),
    ],
}


class Env:
    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.tools = tmp_path / "pricing.py"
        self.tools.write_text(TOOLS)
        self.calls_file = tmp_path / "calls.log"
        self.db = tmp_path / "home" / "runs.db"

    def cli(self, *args: str) -> Any:
        return CliRunner().invoke(app, list(args))

    def calls(self) -> Counter[str]:
        if not self.calls_file.exists():
            return Counter()
        return Counter(self.calls_file.read_text().split())

    def plan_file(self, plan: dict[str, Any], name: str = "plan.json") -> str:
        path = self.dir / name
        path.write_text(json.dumps(plan))
        return str(path)

    def run_ids(self) -> list[str]:
        with RunStore(self.db) as st:
            return [r.run_id for r in st.list_runs()]

    def first_run(self) -> str:
        res = self.cli(
            "run",
            self.plan_file(PLAN, "orig.json"),
            "--tools",
            f"{self.tools}:registry",
            "--on-failure",
            "continue",
        )
        assert res.exit_code == 1, res.output
        (run_id,) = self.run_ids()
        return run_id


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    e = Env(tmp_path)
    monkeypatch.setenv("DAGAGENT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGAGENT_TEST_CALLS", str(e.calls_file))
    monkeypatch.setattr(cli_app.out, "_width", 200)
    return e


def fixed(**changes: dict[str, Any]) -> dict[str, Any]:
    tasks = [dict(t, **changes.get(t["id"], {})) for t in PLAN["tasks"]]
    return {"goal": PLAN["goal"], "tasks": tasks}


def test_replan_from_a_file_reuses_every_unchanged_success(env: Env) -> None:
    parent = env.first_run()
    assert env.calls() == Counter(["price:apple", "price:pear", "price:kiwi", "total:3+4"])
    new_plan = env.plan_file(fixed(kiwi={"args": {"item": "plum"}}), "fixed.json")
    res = env.cli(
        "replan",
        parent,
        "--from",
        new_plan,
        "--execute",
        "--tools",
        f"{env.tools}:registry",
        "--executor",
        "dataflow",
    )
    assert res.exit_code == 0, res.output
    out = res.stdout
    # the review
    assert "failed (1):" in out and "kiwi [price, 1 attempt] failed: LookupError: no price" in out
    assert "sum2 [total] skipped (because of kiwi)" in out
    assert "apple [price] = 3" in out and "sum1 [total] = 7" in out
    # the diff and the prediction
    assert '~ kiwi: args.item: "kiwi" -> "plum"' in out
    assert "0 added, 0 removed, 1 changed, 4 unchanged" in out
    assert "will reuse: apple, pear, sum1" in out
    assert "will run: kiwi (failed before); sum2 (skipped before)" in out
    # the new run: unchanged successes were not called again
    assert env.calls() == Counter(
        ["price:apple", "price:pear", "price:kiwi", "total:3+4", "price:plum", "total:7+5"]
    )
    child, _ = env.run_ids()
    with RunStore(env.db) as st:
        rec = st.get_run(child)
    assert rec.parent_id == parent and rec.status == "succeeded"
    assert {k: r.status.value for k, r in rec.tasks.items()} == {
        "apple": "reused",
        "pear": "reused",
        "kiwi": "succeeded",
        "sum1": "reused",
        "sum2": "succeeded",
    }
    assert rec.tasks["sum2"].output == 12
    assert f"recorded as run {child} (parent {parent}, 3 reused)" in res.stderr


def test_a_changed_upstream_output_defeats_reuse(env: Env) -> None:
    parent = env.first_run()
    before = env.calls()
    new_plan = env.plan_file(
        fixed(pear={"args": {"item": "plum"}}, kiwi={"args": {"item": "apple"}})
    )
    res = env.cli("replan", parent, "--from", new_plan, "-x", "--tools", f"{env.tools}:registry")
    assert res.exit_code == 0, res.output
    assert "sum1 (unchanged, but pear runs again)" in res.stdout
    # sum1's own definition is unchanged, but its input (pear's output) changed: run again.
    assert env.calls() - before == Counter(["price:plum", "price:apple", "total:3+5", "total:8+3"])
    child = env.run_ids()[0]
    with RunStore(env.db) as st:
        statuses = {k: r.status.value for k, r in st.get_run(child).tasks.items()}
    assert statuses["apple"] == "reused" and statuses["sum1"] == "succeeded"


def test_an_equal_upstream_output_keeps_reuse(env: Env) -> None:
    parent = env.first_run()
    before = env.calls()
    # pear runs again through another tool, with the same output: sum1 is still reused.
    new_plan = env.plan_file(fixed(pear={"tool": "price_again"}, kiwi={"args": {"item": "plum"}}))
    res = env.cli("replan", parent, "--from", new_plan, "-x", "--tools", f"{env.tools}:registry")
    assert res.exit_code == 0, res.output
    assert "sum1 (unchanged, but pear runs again)" in res.stdout
    assert env.calls() - before == Counter(["price_again:pear", "price:plum", "total:7+5"])


def test_replan_without_a_revision_reviews_and_writes_the_plan_to_edit(env: Env) -> None:
    parent = env.first_run()
    out_file = env.dir / "edit-me.json"
    res = env.cli("replan", "--last", "--out", str(out_file))
    assert res.exit_code == 0, res.output
    assert f"run {parent}: failed - total price" in res.stdout
    assert load_plan(out_file) == load_plan(PLAN)
    assert f"dagagent replan {parent} --from {out_file} --execute" in res.stderr
    assert env.run_ids() == [parent]  # nothing ran
    res = env.cli("replan", parent[:5])
    assert res.exit_code == 0 and "to revise it: dagagent replan" in res.stdout


def test_replan_execute_without_a_revision_retries_only_what_did_not_succeed(env: Env) -> None:
    parent = env.first_run()
    before = env.calls()
    res = env.cli(
        "replan",
        parent,
        "--execute",
        "--tools",
        f"{env.tools}:registry",
        "--on-failure",
        "continue",
    )
    assert res.exit_code == 1  # kiwi still has no price
    assert env.calls() - before == Counter(["price:kiwi"])
    child = env.run_ids()[0]
    with RunStore(env.db) as st:
        assert st.get_run(child).parent_id == parent


def test_replan_json(env: Env) -> None:
    parent = env.first_run()
    new_plan = env.plan_file(fixed(kiwi={"args": {"item": "plum"}}))
    res = env.cli("replan", parent, "--from", new_plan, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["review"]["failed"][0]["task_id"] == "kiwi"
    assert doc["diff"]["changed"] == {
        "kiwi": [{"field": "args.item", "old": "kiwi", "new": "plum"}]
    }
    assert doc["reuse"]["apple"] == {"action": "reuse", "reason": "unchanged success"}
    assert doc["plan"]["tasks"][2]["args"] == {"item": "plum"}
    assert doc["result"] is None
    res = env.cli(
        "replan", parent, "--from", new_plan, "--json", "-x", "--tools", f"{env.tools}:registry"
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["result"]["parent_id"] == parent
    assert doc["result"]["counts"] == {"reused": 3, "succeeded": 2}


def test_an_invalid_revision_runs_nothing(env: Env) -> None:
    parent = env.first_run()
    before = env.calls()
    bad = fixed(kiwi={"tool": "teleport"}, sum2={"depends_on": ["nowhere"]})
    res = env.cli(
        "replan", parent, "--from", env.plan_file(bad), "-x", "--tools", f"{env.tools}:registry"
    )
    assert res.exit_code == 2
    assert "unknown tool 'teleport'" in res.stderr and "unknown task 'nowhere'" in res.stderr
    assert env.calls() == before and env.run_ids() == [parent]
    res = env.cli("replan", parent, "--from", str(env.dir / "missing.json"))
    assert res.exit_code == 2 and "plan file not found" in res.stderr


def test_replan_usage_errors(env: Env) -> None:
    parent = env.first_run()
    res = env.cli("replan")
    assert res.exit_code == 2 and "give a RUN id" in res.stderr
    res = env.cli("replan", parent, "--from", "x.json", "--model", "openai:gpt-4o-mini")
    assert res.exit_code == 2 and "not both" in res.stderr
    res = env.cli("replan", "zz")
    assert res.exit_code == 4 and "is not a run id" in res.stderr


def test_replans_chain_and_runs_shows_the_parent(env: Env) -> None:
    first = env.first_run()
    step = env.plan_file(fixed(kiwi={"args": {"item": "plum"}}, sum2={"retries": 1}))
    assert (
        env.cli("replan", first, "--from", step, "-x", "--tools", f"{env.tools}:registry").exit_code
        == 0
    )
    second = env.run_ids()[0]
    before = env.calls()
    assert env.cli("replan", "--last", "-x", "--tools", f"{env.tools}:registry").exit_code == 0
    third = env.run_ids()[0]
    assert env.calls() == before  # everything reused from the second run
    with RunStore(env.db) as st:
        assert st.get_run(third).parent_id == second
        assert set(st.get_run(third).counts) == {"reused"}
    res = env.cli("runs")
    assert f"(replans {second})" in res.stdout and f"(replans {first})" in res.stdout


def test_replan_loads_the_tools_the_run_used(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    parent = env.first_run()  # ran with --tools pricing.py:registry
    res = env.cli("show", parent)
    assert f"tools {env.tools.resolve()}:registry" in res.stdout
    monkeypatch.chdir(env.dir / "home")  # somewhere else: the recorded path is absolute
    new_plan = env.plan_file(fixed(kiwi={"args": {"item": "plum"}}))
    res = env.cli("replan", parent, "--from", new_plan, "--execute")  # no --tools
    assert res.exit_code == 0, res.output
    assert env.calls()["price:plum"] == 1
    env.tools.unlink()
    res = env.cli("replan", parent, "--from", new_plan)
    assert res.exit_code == 2
    assert f"cannot load the tools run {parent} used" in res.stderr
    assert "pass --tools" in res.stderr


# ---------------------------------------------------------------------------------------------
# --model: the revised plan comes from a (scripted) model


def scripted(monkeypatch: pytest.MonkeyPatch, *answers: str) -> Any:
    from dagagent.cli import replan as runs_cmds
    from dagagent.llm import ScriptedLLM

    llm = ScriptedLLM(list(answers))
    made: list[tuple[str, str | None, float]] = []

    def make_model(model: str, base_url: str | None, *, timeout: float = 60.0, **_: Any) -> Any:
        made.append((model, base_url, timeout))
        return llm

    monkeypatch.setattr(runs_cmds, "make_model", make_model)
    llm.made = made  # type: ignore[attr-defined]
    return llm


def test_replan_with_a_model_reuses_successes(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    parent = env.first_run()
    before = env.calls()
    llm = scripted(monkeypatch, json.dumps(fixed(kiwi={"args": {"item": "plum"}})))
    res = env.cli("replan", parent, "--model", "openai:test-model", "--execute", "--timeout", "300")
    assert res.exit_code == 0, res.output
    assert llm.made == [("openai:test-model", None, 300.0)]
    llm.assert_exhausted()
    # the model was told what failed and why
    prompt = " ".join(str(getattr(m, "content", "")) for m in llm.requests[0].messages)
    assert "no price for 'kiwi'" in prompt and "kiwi" in prompt
    assert "revised by scripted: 1 attempt" in res.stderr
    assert '~ kiwi: args.item: "kiwi" -> "plum"' in res.stdout
    assert env.calls() - before == Counter(["price:plum", "total:7+5"])
    with RunStore(env.db) as st:
        child = st.last_run()
    assert child.parent_id == parent and child.counts == {"reused": 3, "succeeded": 2}


def test_a_model_changing_a_success_under_its_id_runs_it_and_what_uses_it(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = env.first_run()
    before = env.calls()
    revised = fixed(pear={"args": {"item": "plum"}}, kiwi={"args": {"item": "apple"}})
    llm = scripted(monkeypatch, json.dumps(revised))
    res = env.cli("replan", parent, "--model", "openai:m", "-x", "--tools", f"{env.tools}:registry")
    assert res.exit_code == 0, res.output
    llm.assert_exhausted()  # one answer: keeping the id was no problem
    assert "revised by scripted: 1 attempt" in res.stderr
    assert "warning: [new_version] task 'pear': succeeded before as price(" in res.stderr
    assert '~ pear: args.item: "pear" -> "plum"' in res.stdout
    assert "pear (a new version: its call changed since it succeeded)" in res.stdout
    assert "sum1 (unchanged, but pear runs again)" in res.stdout
    assert env.calls() - before == Counter(["price:plum", "price:apple", "total:3+5", "total:8+3"])
    with RunStore(env.db) as st:
        child = st.last_run()
    assert child.parent_id == parent
    assert {k: r.status.value for k, r in child.tasks.items()} == {
        "apple": "reused",
        "pear": "succeeded",
        "kiwi": "succeeded",
        "sum1": "succeeded",
        "sum2": "succeeded",
    }
    assert child.tasks["pear"].output == 5 and child.tasks["sum2"].output == 11
    # the record of the new run says so
    shown = env.cli("show", child.run_id)
    assert shown.exit_code == 0, shown.output
    assert f"new versions of tasks that succeeded in run {parent}" in shown.stdout
    assert "so they ran again): pear\n" in shown.stdout
    doc = json.loads(env.cli("show", child.run_id, "--json").stdout)
    assert doc["new_versions"] == ["pear"]
    doc = json.loads(env.cli("show", parent, "--json").stdout)
    assert doc["new_versions"] == []


def test_a_model_that_never_gives_a_valid_plan_exits_3(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = env.first_run()
    before = env.calls()
    bad = json.dumps({"goal": "x", "tasks": [{"id": "kiwi", "tool": "teleport"}]})
    llm = scripted(monkeypatch, bad, bad)
    res = env.cli("replan", parent, "--model", "openai:m", "--max-attempts", "2", "-x")
    assert res.exit_code == 3, res.output
    assert "teleport" in res.stderr
    llm.assert_exhausted()
    assert env.calls() == before and env.run_ids() == [parent]


def test_base_url_needs_a_model(env: Env) -> None:
    parent = env.first_run()
    res = env.cli("replan", parent, "--base-url", "http://127.0.0.1:9/v1")
    assert res.exit_code == 2 and "--base-url needs --model" in res.stderr


# ----------------------------------------------------------------------------------------------
# Replanning with edited plans: which tools really run again when a task is renamed or an
# upstream output changes (counted by the tools themselves).
# ----------------------------------------------------------------------------------------------


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


PAGE_PLAN = {
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
    result = dagagent.execute_sync(PAGE_PLAN, _registry(calls, disk), store=db)
    assert result.ok
    with RunStore(db) as st:
        return st.get_run(result.run_id)


def _again(
    rec: RunRecord, plan: dict[str, Any], calls: list[str], disk: dict[str, str]
) -> dict[str, str]:
    calls.clear()
    result = dagagent.execute_sync(
        plan,
        _registry(calls, disk),
        reuse=reuse_map(rec),
        parent_id=rec.run_id,
        settings=RunSettings(executor="serial"),
    )
    assert result.ok
    return {k: r.status.value for k, r in result.tasks.items()}


def test_a_task_after_a_changed_side_effect_runs_again(tmp_path: Path) -> None:
    calls: list[str] = []
    disk: dict[str, str] = {}
    rec = _first(tmp_path, calls, disk)
    assert rec.tasks["count"].output == 2
    plan = _edit(PAGE_PLAN, "dl", url="b.example")  # count's own definition is unchanged
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
    st = _again(rec, _edit(PAGE_PLAN, "dl", note="again"), calls, disk)
    assert st == {"dl": "succeeded", "count": "reused", "s": "reused", "s2": "reused"}
    assert calls == ["download a.example"]


def test_a_renamed_task_runs_and_so_does_what_uses_it(tmp_path: Path) -> None:
    calls: list[str] = []
    disk: dict[str, str] = {}
    rec = _first(tmp_path, calls, disk)
    plan = _edit(PAGE_PLAN, "s", id="s_new")
    plan = _edit(plan, "s2", text="${s_new}!")
    st = _again(rec, plan, calls, disk)
    assert st == {"dl": "reused", "count": "reused", "s_new": "succeeded", "s2": "succeeded"}
    assert calls == ["shout hi", "shout HI!"]
