"""Approval rules under a demanding user: side-effecting tools under deny / ask / allow rules
through every executor and failure policy, counting which calls really happened; policy
files with mistakes."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import dagagent
from dagagent.approval import Approval, ApprovalRequest, Policy, Rule, load_policy
from dagagent.errors import ConfigError

pytestmark = pytest.mark.anyio


def _registry(calls: list[tuple[str, dict[str, Any]]]) -> dagagent.Registry:
    reg = dagagent.Registry()

    @reg.tool(side_effects=True)
    async def write_file(path: str, text: str = "") -> str:
        """Write a file (pretend)."""
        calls.append(("write_file", {"path": path, "text": text}))
        await anyio.sleep(0.01)
        return path

    @reg.tool(side_effects=True)
    def delete_file(path: str) -> str:
        """Delete a file (pretend)."""
        calls.append(("delete_file", {"path": path}))
        return path

    @reg.tool
    async def read(key: str) -> str:
        """Read a value."""
        calls.append(("read", {"key": key}))
        await anyio.sleep(0.01)
        return key.upper()

    return reg


PLAN = {
    "goal": "side effects",
    "tasks": [
        {"id": "r", "tool": "read", "args": {"key": "k"}},
        {"id": "w_tmp", "tool": "write_file", "args": {"path": "/tmp/a", "text": "${r}"}},
        {"id": "w_etc", "tool": "write_file", "args": {"path": "/etc/passwd", "text": "x"}},
        {"id": "d_tmp", "tool": "delete_file", "args": {"path": "/tmp/old"}},
        {"id": "d_home", "tool": "delete_file", "args": {"path": "/home/ann/notes"}},
        {"id": "after", "tool": "read", "args": {"key": "${w_tmp}"}},
    ],
}


async def _ask(req: ApprovalRequest) -> Approval:
    await anyio.sleep(0.01)  # questions overlap with running tasks
    if req.task_id == "d_home":
        return Approval.deny("not my home", by="ann")
    if req.task_id == "d_tmp":
        return Approval.edit({"path": "/tmp/old.bak"}, by="ann")
    return Approval.approve(by="ann")


@pytest.mark.parametrize("on_failure", ["cancel", "continue"])
@pytest.mark.parametrize("executor", ["serial", "levels", "dataflow"])
async def test_denied_calls_never_happen_and_edited_calls_use_the_edit(
    executor: str, on_failure: str
) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    policy = Policy(
        [
            Rule(tool="read", action="allow"),
            Rule(tool="*_file", args={"path": "/etc/*"}, action="deny", reason="system files"),
            Rule(tool="delete_*", args={"path": re.compile(r"^/(tmp|home)/")}, action="ask"),
        ],
        default="ask",
        ask=_ask,
    )
    result = await dagagent.execute(
        PLAN, _registry(calls), executor=executor, on_failure=on_failure, interceptors=[policy]
    )
    st = {k: r.status.value for k, r in result.tasks.items()}
    made = [(tool, args["path"]) for tool, args in calls if tool != "read"]
    # Never: the denied calls.
    assert ("write_file", "/etc/passwd") not in made
    assert ("delete_file", "/home/ann/notes") not in made
    assert ("delete_file", "/tmp/old") not in made  # only the edited call may happen
    assert st["w_etc"] in ("denied", "cancelled", "skipped")
    assert st["d_home"] in ("denied", "cancelled", "skipped")
    # Every call that happened was allowed, and what happened is what the record says.
    for r in result.tasks.values():
        if r.status.value == "denied":
            assert r.decisions and r.decisions[-1]["decision"] == "deny"
    if st["d_tmp"] == "succeeded":
        assert ("delete_file", "/tmp/old.bak") in made
        assert result.tasks["d_tmp"].output == "/tmp/old.bak"
        (edit,) = result.tasks["d_tmp"].decisions or []
        assert edit["decision"] == "edit" and edit["args"] == {"path": "/tmp/old.bak"}
    n_succeeded_side_effects = sum(1 for k in ("w_tmp", "d_tmp") if st[k] == "succeeded")
    assert len(made) == n_succeeded_side_effects
    if on_failure == "continue":
        assert st == {
            "r": "succeeded",
            "w_tmp": "succeeded",
            "w_etc": "denied",
            "d_tmp": "succeeded",
            "d_home": "denied",
            "after": "succeeded",
        }
        assert sorted(made) == [("delete_file", "/tmp/old.bak"), ("write_file", "/tmp/a")]


# -- policy files with mistakes -------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        # a misspelt matcher form used to compare the argument with the dict: never matched,
        # so this deny rule silently denied nothing
        ({"tool": "*", "args": {"path": {"regx": "^/etc"}}, "action": "deny"}, "regx"),
        ({"tool": "*", "args": {"path": {"glob": "/etc/*", "x": 1}}, "action": "deny"}, "glob"),
        # wrong types are errors, not coerced ("no" used to become False, "1" True)
        ({"side_effects": "yes", "action": "deny"}, "side_effects: Input should be a valid bool"),
        ({"tool": "x", "action": "deny", "reason": 5}, "reason: Input should be a valid string"),
        ({"tool": "x", "action": "deny", "reasn": "typo"}, "'reasn' is not a rule key"),
    ],
)
def test_policy_file_mistakes_name_the_rule(
    tmp_path: Path, rule: dict[str, Any], message: str
) -> None:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps({"rules": [{"tool": "read", "action": "allow"}, rule]}))
    with pytest.raises(ConfigError) as info:
        load_policy(path)
    text = str(info.value)
    assert text.startswith(f"policy file {str(path)!r}: rule #2: ")
    assert message in text


@pytest.mark.skipif(sys.version_info < (3, 11), reason="TOML policy files need tomllib (3.11+)")
def test_a_named_rule_is_named_in_the_error(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(
        '[[rules]]\nname = "no-etc"\naction = "deny"\nargs = { path = { rgx = "x" } }\n'
    )
    with pytest.raises(ConfigError, match=r"rule #1 \('no-etc'\): argument matcher"):
        load_policy(path)


def test_a_misspelt_matcher_form_is_refused_in_python_too() -> None:
    with pytest.raises(ConfigError, match="is not one of"):
        Rule(action="deny", args={"path": {"regx": "^/etc"}})
    rule = Rule(action="deny", args={"opts": {"equals": {"a": 1}}})  # comparing with a dict
    assert rule.matches_args({"opts": {"a": 1}}) and not rule.matches_args({"opts": {"a": 2}})


def test_a_rule_on_an_argument_no_tool_has_is_reported() -> None:
    reg = _registry([])
    policy = Policy(
        [
            Rule(tool="*_file", args={"filename": "/etc/*"}, action="deny", name="no-etc"),
            Rule(tool="*_file", args={"path": "/etc/*"}, action="deny"),  # fine
            Rule(tool="nothing_*", args={"x": 1}, action="deny"),  # no such tool: not a mistake
        ]
    )
    (problem,) = policy.check(reg)
    assert problem.startswith("rule 'no-etc' looks at argument 'filename'")
    assert "(write_file, delete_file)" in problem and "never matches" in problem


def test_cli_warns_about_a_rule_that_never_matches(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from dagagent.cli import app

    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps({"tasks": [{"id": "p", "tool": "get_weather", "args": {"city": "Paris"}}]})
    )
    policy = tmp_path / "policy.json"
    policy.write_text(
        json.dumps(
            {"rules": [{"tool": "get_weather", "args": {"town": "Paris"}, "action": "deny"}]}
        )
    )
    res = CliRunner().invoke(app, ["run", str(plan), "--policy", str(policy), "--json"])
    assert res.exit_code == 0
    assert "rule #1 (deny tool get_weather if town=Paris) looks at argument 'town'" in res.stderr
