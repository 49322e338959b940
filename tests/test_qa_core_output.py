"""Outputs that are hard to print: cycles, NaN and infinities, text UTF-8 cannot carry.
``run --json`` must stay strict JSON and the run must not crash on them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import dagagent
from dagagent.cli import app
from dagagent.results import jsonable

runner = CliRunner()

TOOLS = """
import dagagent

registry = dagagent.Registry()


@registry.tool
def numbers() -> dict:
    return {"nan": float("nan"), "inf": [float("inf"), -float("inf")], "ok": 1.5}


@registry.tool
def cycle() -> dict:
    d = {"a": 1}
    d["self"] = d
    return d


@registry.tool
def undecodable() -> str:
    return b"caf\\xe9".decode("utf-8", "surrogateescape")
"""


def _strict_loads(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_run_json_is_strict_json_for_odd_outputs(tmp_path: Path) -> None:
    (tmp_path / "odd_tools.py").write_text(TOOLS)
    plan = {
        "goal": "odd outputs ☃",
        "tasks": [
            {"id": "n", "tool": "numbers"},
            {"id": "c", "tool": "cycle"},
            {"id": "u", "tool": "undecodable"},
        ],
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    r = runner.invoke(
        app,
        [
            "run",
            str(tmp_path / "plan.json"),
            "--tools",
            f"{tmp_path / 'odd_tools.py'}:registry",
            "--json",
        ],
    )
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code == 0, r.output
    data = _strict_loads(r.stdout)
    outputs = {k: t["output"] for k, t in data["tasks"].items()}
    assert outputs["n"] == {"nan": "NaN", "inf": ["Infinity", "-Infinity"], "ok": 1.5}
    assert outputs["c"] == {"a": 1, "self": "<circular reference>"}
    assert outputs["u"] == "caf\udce9"  # escaped as \udce9 on the wire
    assert data["goal"] == "odd outputs ☃"


def test_jsonable_never_raises_on_cycles_or_depth() -> None:
    d: dict[str, Any] = {"xs": [1]}
    d["self"] = d
    d["xs"].append(d["xs"])
    assert jsonable(d) == {"xs": [1, "<circular reference>"], "self": "<circular reference>"}
    deep: list[Any] = []
    node = deep
    for _ in range(5000):
        node.append([])
        node = node[0]
    text = json.dumps(jsonable(deep))
    assert "<nested too deeply>" in text
    shared = [1]
    assert jsonable({"a": shared, "b": shared}) == {"a": [1], "b": [1]}  # shared is no cycle


@pytest.mark.parametrize("executor", ["serial", "levels", "dataflow"])
def test_a_cyclic_output_is_referenced_and_its_result_serialized(executor: str) -> None:
    reg = dagagent.Registry()

    @reg.tool
    def cyclic() -> dict[str, Any]:
        d: dict[str, Any] = {"v": 2}
        d["me"] = d
        return d

    @reg.tool
    def echo(value: Any) -> Any:
        return value

    plan = {
        "tasks": [
            {"id": "c", "tool": "cyclic"},
            {"id": "e", "tool": "echo", "args": {"value": "v=${c.v} all=${c}"}},
        ]
    }
    result = dagagent.execute_sync(plan, reg, executor=executor)
    assert result.ok
    assert result.outputs["e"].startswith("v=2 all=")
    json.dumps(result.to_json_dict())
