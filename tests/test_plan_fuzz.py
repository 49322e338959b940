"""Arbitrary JSON documents and mutated valid plans fed to ``dagagent validate`` and
``dagagent run`` in-process: the only outcomes allowed are exit 0/1 with a result, or exit 2
with ``error:`` lines (one ``[code] task 'id'`` / ``[code] plan`` line per issue). Any other
exception is a bug."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cli_shell import app_for
from hypothesis import HealthCheck, given, settings, strategies as st
from typer.testing import CliRunner

import dagagent.runner

runner = CliRunner()

TOOLS = """
from typing import Any

import dagagent

registry = dagagent.Registry()


@registry.tool
def echo(value: Any = None) -> Any:
    return value


@registry.tool
def add(a: int, b: int = 1) -> int:
    return a + b


@registry.tool
def words(text: str, n: int = 2) -> list:
    return text.split()[:n]


@registry.tool
def boom(message: str = "boom") -> None:
    raise RuntimeError(message)
"""

BASE: dict[str, Any] = {
    "goal": "fuzzed",
    "tasks": [
        {"id": "a", "tool": "add", "args": {"a": 1, "b": 2}},
        {"id": "b", "tool": "echo", "args": {"value": "${a}"}},
        {"id": "c", "tool": "words", "args": {"text": "x ${b} y", "n": 3}, "retries": 1},
        {"id": "d", "tool": "add", "args": {"a": "${a}"}, "depends_on": ["b"]},
        {"id": "e", "tool": "echo", "args": {"value": ["${c.0}", {"k": "${d}"}]}},
    ],
}

ISSUE_LINE = re.compile(r"^  \[[a-z_]+\] (task '.*'|plan): .+")

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
ids = st.sampled_from(["a", "b", "c", "d", "e", "zz", "", "-x", "a.b", "0", "a" * 65]) | st.text(
    max_size=6
)
refs = st.builds(
    lambda i, path: "${" + i + path + "}",
    st.sampled_from(["a", "b", "c", "d", "e", "nope", "a.", ""]),
    st.sampled_from(["", ".0", ".k", ".0.1", "..", ".__class__", ".-1"]),
)
field_values = json_values | ids | refs | st.lists(ids, max_size=3)
FIELDS = ["id", "tool", "args", "depends_on", "retries", "timeout_s", "instruction", "tools", "x"]


@st.composite
def mutated_plans(draw: st.DrawFn) -> Any:
    plan = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 4))):
        tasks = plan.get("tasks")
        kind = draw(
            st.sampled_from(["set", "drop", "dup", "arg", "dep", "remove", "top", "timeout"])
        )
        if not isinstance(tasks, list) or not tasks:
            break
        i = draw(st.integers(0, len(tasks) - 1))
        task = tasks[i]
        if not isinstance(task, dict):
            continue
        if kind == "set":
            task[draw(st.sampled_from(FIELDS))] = draw(field_values)
        elif kind == "drop":
            task.pop(draw(st.sampled_from(FIELDS)), None)
        elif kind == "dup":
            tasks.append(copy.deepcopy(task))
        elif kind == "arg" and isinstance(task.get("args"), dict):
            task["args"][draw(st.sampled_from(["a", "b", "value", "text", "n", "q"]))] = draw(
                field_values
            )
        elif kind == "dep":
            deps = task.get("depends_on")
            task["depends_on"] = [*(deps if isinstance(deps, list) else []), draw(ids)]
        elif kind == "remove":
            tasks.pop(i)
        elif kind == "timeout":
            task["timeout_s"] = draw(st.sampled_from([1e-9, 0.001, 1e308, 5, -1, 0]))
            task["retries"] = draw(st.sampled_from([0, 1, 2, -1, 10**20]))
        else:
            plan[draw(st.sampled_from(["goal", "tasks", "extra"]))] = draw(field_values)
    return plan


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fuzzed plans may ask for up to 100 retries of a task that always fails or times out;
    with the real backoff (up to 30 s a retry) one such example would run for most of an
    hour. The retry count and order are what is under test here, not the waiting."""

    monkeypatch.setattr(dagagent.TaskRetryPolicy, "delay", lambda self, attempt: 0.0)


@pytest.fixture(scope="module")
def tools_spec(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("fuzz-tools") / "fuzz_tools.py"
    path.write_text(TOOLS)
    return f"{path}:registry"


def _check(doc: Any, tools_spec: str, tmp_path: Path, raw: str | None = None) -> None:
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(raw if raw is not None else json.dumps(doc), encoding="utf-8")
    for cmd in (["validate"], ["run", "--json", "-e", "dataflow"], ["run", "--json"]):
        args = [*cmd, str(plan_file), "--tools", tools_spec]
        r = runner.invoke(app_for(args), args)
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            raise AssertionError(f"{cmd[0]} raised {r.exception!r} on {doc!r}") from r.exception
        assert r.exit_code in (0, 1, 2), (cmd, r.exit_code, r.output)
        if r.exit_code == 2:
            lines = r.stderr.splitlines()
            assert lines and lines[0].startswith("error: "), r.stderr
            if lines[0].startswith(("error: invalid plan", "error: the plan does not fit")):
                issues = [ln for ln in lines[1:] if not ln.startswith("warning")]
                assert issues and all(ISSUE_LINE.match(ln) for ln in issues), r.stderr
        elif cmd[0] == "run":
            result = json.loads(r.stdout)
            assert result["status"] == ("succeeded" if r.exit_code == 0 else "failed")
            assert {t["status"] for t in result["tasks"].values()} <= {
                "succeeded",
                "failed",
                "cancelled",
                "skipped",
            }


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(doc=json_values)
def test_arbitrary_json_documents(doc: Any, tools_spec: str, tmp_path: Path) -> None:
    _check(doc, tools_spec, tmp_path)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(plan=mutated_plans())
def test_mutated_valid_plans(plan: Any, tools_spec: str, tmp_path: Path) -> None:
    _check(plan, tools_spec, tmp_path)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(text=st.text(max_size=40) | st.binary(max_size=40).map(lambda b: b.decode("latin-1")))
def test_arbitrary_text(text: str, tools_spec: str, tmp_path: Path) -> None:
    _check(None, tools_spec, tmp_path, raw=text)


def test_the_base_plan_runs(tools_spec: str, tmp_path: Path) -> None:
    _check(BASE, tools_spec, tmp_path)
