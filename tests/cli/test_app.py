from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_shell import clean_environment, run_in_process
from typer.testing import CliRunner

import dagagent
from dagagent.cli import app
from dagagent.settings import RunSettings
from dagagent.text import jsonable

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
runner = CliRunner()


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args), catch_exceptions=False)


def write(tmp_path: Path, name: str, content: Any) -> str:
    p = tmp_path / name
    p.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(p)


def test_validate_reports_all_four_issues_with_exit_2() -> None:
    r = invoke("validate", str(EXAMPLES / "invalid.json"))
    assert r.exit_code == 2
    text = r.stderr
    for code in ("duplicate_id", "unknown_tool", "missing_dependency", "cycle"):
        assert f"[{code}]" in text
    assert "a -> b -> c -> a" in text
    assert "Traceback" not in r.output


def test_run_example_json_exit_0() -> None:
    r = invoke("run", str(EXAMPLES / "weather.json"), "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["status"] == "succeeded"
    assert {t["status"] for t in data["tasks"].values()} == {"succeeded"}
    assert data["tasks"]["cmp"]["output"]["larger"] == "Tokyo"


@pytest.mark.parametrize("executor", ["serial", "levels", "dataflow"])
def test_run_failing_example_exit_1(executor: str) -> None:
    r = invoke(
        "run", str(EXAMPLES / "failing.json"), "--json", "-e", executor, "--on-failure", "continue"
    )
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["tasks"]["atlantis"]["status"] == "failed"
    assert "no weather for 'Atlantis'" in data["tasks"]["atlantis"]["error"]
    assert data["tasks"]["mean"]["status"] == "skipped"
    assert data["tasks"]["paris"]["status"] == "succeeded"


MALFORMED: list[tuple[str, Any, str]] = [
    ("not_json", "{tasks: [", "not valid JSON"),
    ("scalar", "42", "JSON object"),
    ("wrong_field", {"tasks": [{"id": "a", "tool": "sleep", "arg": {}}]}, "unknown field"),
    ("wrong_type", {"tasks": [{"id": "a", "tool": "sleep", "depends_on": "b"}]}, "depends_on"),
    ("empty", {"goal": "x", "tasks": []}, "empty_plan"),
    ("no_tool", {"tasks": [{"id": "a"}]}, "missing_instruction"),
    (
        "bad_args",
        {"tasks": [{"id": "a", "tool": "sleep", "args": {"seconds": "soon"}}]},
        "bad_arguments",
    ),
    (
        "self",
        {"tasks": [{"id": "a", "tool": "sleep", "args": {"seconds": 0}, "depends_on": ["a"]}]},
        "self_dependency",
    ),
    (
        "bad_ref",
        {"tasks": [{"id": "a", "tool": "sleep", "args": {"seconds": "${b"}}]},
        "bad_reference",
    ),
    ("bad_id", {"tasks": [{"id": "a.b", "tool": "sleep", "args": {"seconds": 0}}]}, "invalid_id"),
    ("null_task", {"tasks": [None]}, "tasks[0]"),
]


@pytest.mark.parametrize(("name", "content", "expect"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_plans_exit_2_with_clear_error(
    tmp_path: Path, name: str, content: Any, expect: str
) -> None:
    path = write(tmp_path, f"{name}.json", content)
    for cmd in ("validate", "run"):
        r = invoke(cmd, path)
        assert r.exit_code == 2, (cmd, r.output)
        assert expect in r.stderr
        assert "Traceback" not in r.output


def test_missing_file_and_bad_tools_spec(tmp_path: Path) -> None:
    r = invoke("run", str(tmp_path / "nope.json"))
    assert r.exit_code == 2 and "not found" in r.stderr
    plan = str(EXAMPLES / "weather.json")
    for spec, msg in [
        ("nomodule_xyz:reg", "path/to/nomodule_xyz.py:reg"),
        ("dagagent.toolkits.demo:nope", "no attribute"),
        ("justtext", "MODULE:ATTR"),
        ("json:dumps", "failed"),
        ("json:JSONDecoder", "expected a Registry"),
    ]:
        r = invoke("run", plan, "--tools", spec)
        assert r.exit_code == 2, spec
        assert msg in r.stderr, (spec, r.stderr)


def test_tools_from_a_file(tmp_path: Path) -> None:
    tools = tmp_path / "mytools.py"
    tools.write_text(
        "import dagagent\nregistry = dagagent.Registry()\n"
        "@registry.tool\ndef shout(text: str) -> str:\n    return text.upper()\n"
    )
    plan = write(
        tmp_path, "p.json", {"tasks": [{"id": "s", "tool": "shout", "args": {"text": "hi"}}]}
    )
    r = invoke("run", plan, "--tools", f"{tools}:registry", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["tasks"]["s"]["output"] == "HI"


def _console_script(tmp_path: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI as its console script does: the current directory is not on sys.path."""
    entry = tmp_path / "bin" / "dagagent_entry.py"
    entry.parent.mkdir(exist_ok=True)
    entry.write_text("import sys\nfrom dagagent.__main__ import main\nsys.exit(main())\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, str(entry), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_tools_module_found_in_the_current_directory(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "mytools.py").write_text(
        "import dagagent\nregistry = dagagent.Registry()\n"
        "@registry.tool\ndef shout(text: str) -> str:\n    return text.upper()\n"
    )
    plan = {"tasks": [{"id": "s", "tool": "shout", "args": {"text": "hi"}}]}
    (project / "p.json").write_text(json.dumps(plan))
    r = _console_script(tmp_path, project, "run", "p.json", "--tools", "mytools:registry", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["tasks"]["s"]["output"] == "HI"
    # A module that is nowhere: the message says where it looked and how to name a file.
    r = _console_script(tmp_path, project, "validate", "p.json", "--tools", "mytoolz:registry")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert "current directory" in r.stderr and str(project) in r.stderr
    assert "--tools path/to/mytoolz.py:registry" in r.stderr


def test_plan_on_stdin_and_messages_that_say_what_is_wrong() -> None:
    plan = {"tasks": [{"id": "a", "tool": "lookup", "args": {"entity": "x"}}]}
    r = runner.invoke(app, ["validate", "-"], input=json.dumps(plan))
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["validate", "-"], input="goal: x\ntasks:\n  - id: a\n")
    assert r.exit_code == 2 and "looks like YAML" in r.stderr
    comma = '{"tasks": [\n {"id": "a", "tool": "lookup",\n  "args": {"entity": "x"}},\n]}'
    r = runner.invoke(app, ["validate", "-"], input=comma)
    assert r.exit_code == 2 and "trailing comma at line 3" in r.stderr, r.stderr
    r = runner.invoke(app, ["validate", "-"], input='{"tasks": [{"id": "a", "tol": "lookup"}]}')
    assert r.exit_code == 2 and "tol: unknown field" in r.stderr
    assert "did you mean 'tool'?" in r.stderr
    typo = {"tasks": [{"id": "a", "tool": "get_wether", "args": {"city": "x"}}]}
    r = runner.invoke(app, ["validate", "-"], input=json.dumps(typo))
    assert r.exit_code == 2 and "did you mean 'get_weather'?" in r.stderr


def test_help_lists_the_executors_and_names_arguments_plainly() -> None:
    r = invoke("run", "--help")
    assert "serial|levels|dataflow|dask" in r.stdout
    assert "Usage: dagagent run [OPTIONS] PLAN\n" in r.stdout
    assert "Usage: dagagent ask [OPTIONS] GOAL\n" in invoke("ask", "--help").stdout
    assert "Usage: dagagent show [OPTIONS] [RUN]\n" in invoke("show", "--help").stdout


@pytest.mark.parametrize(
    ("args", "code", "kind"),
    [
        (["validate", str(EXAMPLES / "invalid.json")], 2, "PlanValidationError"),
        (["run", "nope.json"], 2, "PlanLoadError"),
        (["run", str(EXAMPLES / "weather.json"), "--tools", "nomod_q:x"], 2, "ConfigError"),
        (["show", "ffffffff", "--store", "{tmp}/none.db"], 4, "StoreError"),
        (["runs", "--store", "{tmp}/none.db"], 4, "StoreError"),
        (["tools", "--tools", "nomod_q:x"], 2, "ConfigError"),
        (["replan", "ffffffff", "--store", "{tmp}/none.db"], 4, "StoreError"),
    ],
)
def test_json_prints_one_object_on_errors_too(
    tmp_path: Path, args: list[str], code: int, kind: str
) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    r = runner.invoke(app, [*args, "--json"], catch_exceptions=False)
    assert r.exit_code == code, r.output
    doc = json.loads(r.stdout)  # exactly one JSON document, nothing else
    assert doc["ok"] is False and doc["error"]["code"] == kind
    assert doc["error"]["exit_code"] == code and doc["error"]["message"]
    if kind == "PlanValidationError":
        assert {i["code"] for i in doc["error"]["issues"]} >= {"cycle", "duplicate_id"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["run", str(EXAMPLES / "weather.json"), "--max-concurrency", "0"],  # out of range
        ["runs", "--no-such-option"],
        ["show", "--last", "--timeline", "--format", "x"],
    ],
)
def test_json_prints_one_object_on_a_usage_error_too(args: list[str]) -> None:
    """click refuses these before any command runs: the entry point still prints the error
    object on stdout (and click's message on stderr), exit 2."""
    proc = subprocess.run(
        [sys.executable, "-m", "dagagent", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    doc = json.loads(proc.stdout)  # exactly one JSON document, nothing else
    assert doc["ok"] is False and doc["error"]["code"] == "UsageError"
    assert doc["error"]["exit_code"] == 2 and doc["error"]["message"]
    assert "Traceback" not in proc.stderr and "Usage:" in proc.stderr


def test_tools_lists_what_the_planner_is_shown() -> None:
    """Each tool with its signature, description, argument notes and what it returns, in the
    planner's own words (the catalog its prompt holds), then where it comes from."""
    from dagagent.planners.prompts import tool_catalog
    from dagagent.toolkits.demo import registry

    r = CliRunner().invoke(app, ["tools"])
    assert r.exit_code == 0, r.output
    shown = r.stdout.splitlines()
    catalog = tool_catalog(registry).splitlines()
    assert [ln for ln in shown if not ln.startswith("    from ")] == [
        ln.removeprefix("- ") for ln in catalog
    ]
    assert '    city: City name, e.g. "Paris".' in shown  # an argument note
    assert any(ln.startswith('    returns: {"city": str') for ln in shown)
    assert "    from dagagent.toolkits.demo; no side effects" in shown
    # nobody chose these tools: the command says whose they are, then how many
    note, count = r.stderr.strip().splitlines()
    assert note.startswith("note: using the bundled demo tools (dagagent.toolkits.demo:registry)")
    assert count == f"{len(registry)} tools"


def test_version() -> None:
    r = invoke("--version")
    assert r.exit_code == 0
    assert r.stdout.strip() == f"dagagent {dagagent.__version__}"


def test_bad_options_exit_2() -> None:
    plan = str(EXAMPLES / "weather.json")
    assert invoke("run", plan, "--executor", "warp").exit_code == 2
    assert invoke("run", plan, "--on-failure", "shrug").exit_code == 2
    assert invoke("run", plan, "--max-concurrency", "0").exit_code == 2


def test_failing_task_cancels_ten_second_sibling(tmp_path: Path) -> None:
    plan = write(
        tmp_path,
        "p.json",
        {
            "tasks": [
                {"id": "long", "tool": "sleep", "args": {"seconds": 10}},
                {"id": "bad", "tool": "fail", "args": {"message": "nope"}},
            ]
        },
    )
    proc = run_in_process(["run", plan, "--json"], tmp_path, clean_environment(tmp_path))
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["tasks"]["bad"]["status"] == "failed"
    # cut short by its sibling's failure, not left to sleep its 10 s (which would succeed)
    assert data["tasks"]["long"]["status"] == "cancelled"
    assert data["tasks"]["long"]["error"].startswith("cancelled while running")


@pytest.mark.slow
def test_console_script_and_module_entry_points() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "dagagent", "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and "validate" in proc.stdout and "run" in proc.stdout


def test_validate_warns_about_agent_tasks_only_without_a_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DAGAGENT_MODEL", raising=False)
    plan = write(tmp_path, "p.json", {"tasks": [{"id": "n", "instruction": "summarise"}]})
    r = invoke("validate", plan)
    assert r.exit_code == 0 and "no_llm" in r.stderr
    r = invoke("validate", plan, "--model", "openai:some-model")
    assert r.exit_code == 0 and "no_llm" not in r.stderr


@pytest.mark.slow
def test_a_sync_tool_that_ignores_its_timeout_does_not_keep_the_cli_alive(tmp_path: Path) -> None:
    tools = tmp_path / "stuck_tools.py"
    tools.write_text(
        "import time\nimport dagagent\nregistry = dagagent.Registry()\n"
        "@registry.tool(timeout_s=0.5)\ndef stuck(seconds: float) -> str:\n"
        "    time.sleep(seconds)\n    return 'late'\n"
    )
    plan = write(
        tmp_path, "p.json", {"tasks": [{"id": "s", "tool": "stuck", "args": {"seconds": 30}}]}
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "dagagent", "run", plan, "--tools", f"{tools}:registry", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["tasks"]["s"]["error"] == "timed out after 0.5 s"
    assert time.monotonic() - t0 < 15  # not the tool's 30 s


@pytest.mark.slow
def test_an_async_tool_whose_thread_outlives_its_timeout_does_not_keep_the_cli_alive(
    tmp_path: Path,
) -> None:
    """The tool hands a 30 s sleep to asyncio's default executor: the task times out after
    1.5 s, and the command ends then, without waiting for the thread as the loop closes (it
    waited the 30 s before)."""
    tools = tmp_path / "offload_tools.py"
    tools.write_text(
        "import asyncio\nimport time\nimport dagagent\nregistry = dagagent.Registry()\n"
        "@registry.tool(timeout_s=1.5)\nasync def offload(seconds: float) -> str:\n"
        "    await asyncio.to_thread(time.sleep, seconds)\n    return 'late'\n"
    )
    plan = write(
        tmp_path, "p.json", {"tasks": [{"id": "o", "tool": "offload", "args": {"seconds": 30}}]}
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "dagagent", "run", plan, "--tools", f"{tools}:registry", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["tasks"]["o"]["error"] == "timed out after 1.5 s"
    assert time.monotonic() - t0 < 15  # not the tool's 30 s


# A tools module whose object, kept alive only by a reference cycle, writes a file when it is
# finalised; the atexit handler reports, after the command, whether objects were frozen.
_TIDY_TOOLS = """
import pathlib
import dagagent

registry = dagagent.Registry()


class _Tidy:
    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        pathlib.Path(__file__).with_name("tidied").write_text("yes")


@registry.tool
def make() -> str:
    _Tidy()
    return "made"
"""
_REPORT_FREEZE = (
    "import atexit, gc, sys\n"
    "atexit.register(lambda: sys.stderr.write(\n"
    "    f'frozen={gc.get_freeze_count()} collecting={gc.isenabled()}\\n'))\n"
    "from dagagent.__main__ import main\n"
    "sys.argv[0] = 'dagagent'\n"
    "main()\n"
)


@pytest.mark.slow
def test_commands_that_run_nothing_leave_their_objects_to_the_end_of_the_process(
    tmp_path: Path,
) -> None:
    # validate and --help run without the cyclic garbage collector and end without the
    # interpreter's last collection walking and freeing what their imports made; run keeps
    # both: an object of a tool still gets finalised.
    tools = tmp_path / "tidy_tools.py"
    tools.write_text(_TIDY_TOOLS)
    plan = write(tmp_path, "p.json", {"tasks": [{"id": "m", "tool": "make", "args": {}}]})
    spec = f"{tools}:registry"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _REPORT_FREEZE, *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
        )

    for args in (
        ["validate", plan, "--tools", spec],
        ["--help"],
        ["-v", "validate", plan, "--tools", spec],
    ):
        proc = cli(*args)
        assert proc.returncode == 0, proc.stderr
        frozen = int(proc.stderr.rsplit("frozen=", 1)[1].split()[0])
        assert frozen > 1000, (args, proc.stderr)  # typer's, pydantic's, rich's objects
        assert "collecting=False" in proc.stderr

    proc = cli("run", plan, "--tools", spec, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "frozen=0 collecting=True" in proc.stderr
    assert (tmp_path / "tidied").read_text() == "yes"


# ----------------------------------------------------------------------------------------------
# Outputs that are hard to print: cycles, NaN and infinities, text UTF-8 cannot carry.
# ``run --json`` must stay strict JSON and the run must not crash on them.
# ----------------------------------------------------------------------------------------------


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
    result = dagagent.execute_sync(plan, reg, settings=RunSettings(executor=executor))
    assert result.ok
    assert result.outputs["e"].startswith("v=2 all=")
    json.dumps(result.to_json_dict())


def test_validate_checks_and_describes_sub_solves(tmp_path: Path) -> None:
    """A sub-solve (``"solve": true``) runs only in a solve given sub-solves: ``validate``
    names each one as an issue (and ``run`` refuses the plan before anything runs);
    ``validate --sub-solves`` checks the plan as such a solve's, shows each task as a
    sub-solve and says what it needs (a model) and what it does not use (retries)."""
    plan = {
        "goal": "suppliers",
        "tasks": [
            {"id": "regions", "tool": "lookup", "args": {"entity": "regions"}},
            {"id": "best", "solve": True, "instruction": "Best supplier in ${regions}"},
            {"id": "cheap", "solve": True, "instruction": "Cheapest one", "retries": 2},
        ],
    }
    path = write(tmp_path, "plan.json", plan)
    for cmd in (["validate", path], ["run", path, "--store", str(tmp_path / "r.db")]):
        r = runner.invoke(app, cmd)
        assert r.exit_code == 2, (cmd, r.output)
        said = " ".join(r.stderr.split())
        for task in ("best", "cheap"):
            assert f"[sub_solve] task {task!r}: the task is a sub-solve ('solve': true)" in said
        assert "dagagent ask --sub-solves" in said and "Traceback" not in r.output
    assert not (tmp_path / "r.db").exists()  # nothing ran
    r = runner.invoke(app, ["validate", path, "--sub-solves"], env={"DAGAGENT_MODEL": ""})
    assert r.exit_code == 0, r.output
    shown = " ".join(r.stdout.split())
    assert shown.count("sub-solve:") == 2 and "agent:" not in shown
    assert "valid: 3 tasks in 2 levels" in shown
    warned = " ".join(r.stderr.split())
    assert "[no_llm] sub-solves 'best', 'cheap' will fail without a model" in warned
    assert "[sub_solve_retries] task 'cheap': retries=2 is not used" in warned
    r = runner.invoke(app, ["validate", path, "--sub-solves", "--json", "--model", "openai:m"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["levels"] == [["regions", "cheap"], ["best"]]
    assert [w[:2] for w in doc["warnings"]] == [["sub_solve_retries", "cheap"]]
    # In Python: where the plan runs decides
    assert len(dagagent.validate(plan)) == 3  # not said: not checked
    assert len(dagagent.validate(plan, solve_depth=0)) == 3
    with pytest.raises(dagagent.PlanValidationError) as deep:
        dagagent.validate(plan, solve_depth=2)
    assert [(i.code, i.task_id) for i in deep.value.issues] == [
        ("sub_solve_too_deep", "best"),
        ("sub_solve_too_deep", "cheap"),
    ]
