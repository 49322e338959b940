"""README.md's offline examples, run as the README writes them, so its claims cannot rot.

The shell blocks run through the CLI in process (in a scratch directory holding a copy of
``examples/``); the Python blocks run as written, ``await`` included.
"""

from __future__ import annotations

import ast
import re
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import typer.main
from typer.testing import CliRunner

from dagagent.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
runner = CliRunner()


def section(title: str) -> str:
    """The text of the ``## title`` section, up to the next ``## `` heading."""
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else len(README)]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def block_with(text: str, lang: str, marker: str) -> str:
    found = [b for b in blocks(text, lang) if marker in b]
    assert len(found) == 1, f"expected one {lang} block with {marker!r} in the README"
    return found[0]


def commands(block: str) -> list[tuple[str, str]]:
    """``(command, comment)`` for each line of a shell block."""
    out = []
    for line in block.splitlines():
        if line.strip():
            command, _, comment = line.partition("  #")
            out.append((command.strip(), comment.strip()))
    return out


def dagagent(command: str) -> Any:
    argv = shlex.split(command)
    assert argv[0] == "dagagent", command
    return runner.invoke(app, argv[1:], catch_exceptions=False)


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A new user's directory: a copy of the examples, nothing else."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_python(source: str, namespace: dict[str, Any]) -> None:
    """Run a README snippet as written; top-level ``await`` runs on an event loop."""
    code = compile(source, "<README.md>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    pending = eval(code, namespace)
    if pending is not None:

        async def main() -> None:
            await pending

        anyio.run(main)


def test_install_and_test_commands_come_first_and_are_what_ci_runs() -> None:
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings[:2] == ["Install and test", "Run the bundled example (offline, no key)"]
    assert len(headings) == len(set(headings)), "a section is duplicated"
    install = section("Install and test")
    assert commands(block_with(install, "bash", "pip")) == [
        ('pip install -e ".[dev]"', ""),
        (
            "pytest -n auto --durations=20",
            "the whole suite, on every core; its 20 slowest tests last",
        ),
    ]
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert any(re.fullmatch(r'pip install (--quiet )?-e "\.\[dev\]"', line) for line in ci)
    # CI runs exactly the command a user is told to run
    assert [line for line in ci if line.startswith("pytest")] == ["pytest -n auto --durations=20"]
    # the quick loop: the tests not marked slow, a marker pyproject declares
    assert '`pytest -n auto -m "not slow"`' in install
    assert '\n    "slow: ' in (ROOT / "pyproject.toml").read_text()


def test_offline_example_runs_as_described(scratch: Path) -> None:
    block = block_with(section("Run the bundled example (offline, no key)"), "bash", "dagagent")
    ran = []
    for command, comment in commands(block):
        m = re.search(r"exit (\d+)", comment)
        expected = int(m.group(1)) if m else 0
        r = dagagent(command)
        assert r.exit_code == expected, (command, r.output)
        assert "Traceback" not in r.output
        ran.append(command.split()[1])
        if "four problems" in comment:
            issues = re.findall(r"^\s+\[(\w+)\] task", r.stderr, re.M)
            assert sorted(issues) == ["cycle", "duplicate_id", "missing_dependency", "unknown_tool"]
            assert "a -> b -> c -> a" in r.stderr
    assert ran == ["run", "run", "validate"]


def test_failing_run_and_replan_walkthrough(scratch: Path) -> None:
    text = section("Run records, review and replanning")
    walkthrough = commands(block_with(text, "bash", "examples/failing.json"))
    expected_codes = [1, 0, None, 0]  # None: the sed line
    assert len(walkthrough) == len(expected_codes)
    outputs = []
    for (command, _), code in zip(walkthrough, expected_codes, strict=True):
        if command.startswith("sed "):
            sed = re.fullmatch(r"sed -i 's/(\w+)/(\w+)/' (\S+)", command)
            assert sed is not None, command
            old, new, name = sed.groups()
            path = scratch / name
            path.write_text(path.read_text().replace(old, new))
            continue
        r = dagagent(command)
        assert r.exit_code == code, (command, r.output)
        outputs.append(r.stdout)
    first = outputs[0]
    assert re.search(r"^atlantis failed ", first, re.M)
    assert re.search(r"^mean skipped ", first, re.M)
    assert (scratch / "fixed.json").exists()
    # The output shown right after the walkthrough is what the last command prints.
    shown = blocks(text[text.index("examples/failing.json") :], "text")[0]
    for line in shown.splitlines():
        assert line in outputs[-1].splitlines(), line
    assert re.search(r"^paris reused ", outputs[-1], re.M)

    # The graph of that run, as the README draws it.
    drawing = block_with(text, "text", "$ dagagent graph")
    prompt, *expected = drawing.rstrip("\n").splitlines()
    r = dagagent(prompt.removeprefix("$ "))
    assert r.exit_code == 0, r.output
    assert [line.rstrip() for line in r.stdout.rstrip("\n").splitlines()] == expected


def test_from_python_snippet(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = block_with(section("From Python"), "python", "execute_sync")
    namespace: dict[str, Any] = {}
    run_python(source, namespace)
    assert capsys.readouterr().out.splitlines() == [
        "succeeded {'paris': {'city': 'Paris', 'temp_c': 20.0}, "
        "'tokyo': {'city': 'Tokyo', 'temp_c': 20.0}, "
        "'both': {'city': 'Paris and Tokyo', 'temp_c': 20.0}}"
    ]
    # The async form given in the closing comment.
    m = re.search(r"^# in async code: (.+)$", source, re.M)
    assert m is not None
    run_python(m.group(1), namespace)
    assert namespace["result"].status == "succeeded"
    assert namespace["result"].outputs["both"] == {"city": "Paris and Tokyo", "temp_c": 20.0}


def test_interceptor_policy_and_store_snippets(scratch: Path) -> None:
    """The awaited snippets of later sections, on the registry and plan of "From Python"."""
    namespace: dict[str, Any] = {}
    run_python(block_with(section("From Python"), "python", "execute_sync"), namespace)

    run_python(block_with(section("Interceptors and approval"), "python", "tracing("), namespace)
    assert namespace["result"].status == "succeeded"
    assert len(namespace["spans"]) == 3

    run_python(block_with(section("Interceptors and approval"), "python", "Policy("), namespace)
    assert namespace["result"].status == "succeeded"

    run_python(
        block_with(section("Run records, review and replanning"), "python", "store="), namespace
    )
    assert namespace["record"].tasks["paris"].output == {"city": "Paris", "temp_c": 20.0}
    assert (scratch / "runs.db").exists()


def test_approvals_that_wait_snippet(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The pause and resume example, on the registry and plan of "From Python"."""
    namespace: dict[str, Any] = {}
    run_python(block_with(section("From Python"), "python", "execute_sync"), namespace)
    capsys.readouterr()
    run_python(block_with(section("Approvals that wait"), "python", "ask_later"), namespace)
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "paused ['tokyo']",
        "[('tokyo', {'city': 'Tokyo'})]",
        "succeeded True",
    ]
    assert namespace["result"].outputs["both"] == {"city": "Paris and Tokyo", "temp_c": 20.0}


def test_commands_table_lists_every_command_and_the_readme_every_option() -> None:
    group = typer.main.get_command(app)
    cmds: dict[str, Any] = getattr(group, "commands", {})
    assert {"validate", "run", "plan", "runs", "show", "graph", "replan"} <= set(cmds)
    table = section("Command line")

    def options(command: Any) -> list[list[str]]:
        return [
            p.opts for p in command.params if p.param_type_name == "option" and p.name != "help"
        ]

    def mentioned(option: str) -> bool:
        return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", README) is not None

    for name, command in cmds.items():
        assert f"| `dagagent {name} " in table, f"'dagagent {name}' is not in the commands table"
        for opts in options(command):
            assert any(mentioned(o) for o in opts), (
                f"dagagent {name} {'/'.join(opts)} is not in the README"
            )
    for opts in options(group):
        assert any(mentioned(o) for o in opts), "/".join(opts)


def test_solve_snippet(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The goal-to-answer example, on the registry of "From Python", with its scripted model."""
    namespace: dict[str, Any] = {}
    run_python(block_with(section("From Python"), "python", "execute_sync"), namespace)
    capsys.readouterr()
    run_python(block_with(section("From a goal to an answer"), "python", "solve("), namespace)
    assert capsys.readouterr().out == "answered It is 20 C in Paris. ['paris']\n"
    solution = namespace["solution"]
    assert solution.rounds[0].result.outputs == {"paris": {"city": "Paris", "temp_c": 20.0}}


def test_model_calls_snippet(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The model-calls example: a deadline, a budget, and the calls of the solve."""
    namespace: dict[str, Any] = {}
    run_python(block_with(section("From Python"), "python", "execute_sync"), namespace)
    run_python(block_with(section("From a goal to an answer"), "python", "solve("), namespace)
    capsys.readouterr()
    block = block_with(section("Model calls, deadlines and budgets"), "python", "solution.calls")
    run_python(block, namespace)
    assert capsys.readouterr().out == ("1 planner answered True\n1 joiner answered True\n2 None\n")


def test_streamed_planning_snippet(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The streamed-planning example, on the registry of "From Python"."""
    namespace: dict[str, Any] = {}
    run_python(block_with(section("From Python"), "python", "execute_sync"), namespace)
    run_python(block_with(section("From a goal to an answer"), "python", "solve("), namespace)
    capsys.readouterr()
    source = block_with(section("Streamed planning"), "python", "plan_and_execute_streamed(")
    run_python(source, namespace)
    assert capsys.readouterr().out == "['paris', 'tokyo'] succeeded\n"
    assert namespace["round_"].result.outputs["tokyo"] == {"city": "Tokyo", "temp_c": 20.0}


@pytest.mark.slow
def test_mcp_examples_run_as_written(scratch: Path) -> None:
    """The MCP section's commands and snippet, against examples/mcp_server.py (offline)."""
    pytest.importorskip("mcp")
    text = section("Tools from MCP servers")
    here = f"{sys.executable} examples/"  # the interpreter running the tests, as `python`
    shell = block_with(text, "bash", "dagagent tools").replace("\\\n", " ")
    ran = 0
    for command, _ in commands(shell):
        if command.startswith("pip ") or "example.com" in command:
            continue  # installing, and a server that is only an example of a URL
        result = dagagent(command.replace("python examples/", here))
        assert result.exit_code == 0, (command, result.output)
        ran += 1
    assert ran == 2
    source = block_with(text, "python", "MCPClient.stdio(")
    namespace: dict[str, Any] = {}
    run_python(source.replace('"python"', repr(sys.executable)), namespace)
    result = namespace["result"]
    assert result.ok and result.tasks["t"].output["sky"] == "sleet"
    assert [t.name for t in namespace["registry"]] == ["forecast.tomorrow"]


def test_agent_snippets(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The ReAct section's two snippets, offline with their scripted models, on the registry
    of "From Python"."""
    namespace: dict[str, Any] = {}
    run_python(block_with(section("From Python"), "python", "execute_sync"), namespace)
    capsys.readouterr()
    text = section("ReAct agent nodes")
    run_python(block_with(text, "python", "llm=llm"), namespace)
    assert capsys.readouterr().out.splitlines() == [
        "Paris and Tokyo are both at 20.0 C.",
        '{"city": "Tokyo", "temp_c": 20.0}',
    ]
    assert namespace["result"].ok
    namespace["llm"].assert_exhausted()
    run_python(block_with(text, "python", "ReActAgent("), namespace)
    assert capsys.readouterr().out.splitlines() == [
        "23.0 C answer 2",
        "tool_call get_weather",
        "tool_result get_weather",
        "answer 23.0 C",
    ]
    assert namespace["result"].answer == "23.0 C"  # the resumed run of the checkpoint


def test_planning_snippet(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, Any] = {}
    run_python(block_with(section("From Python"), "python", "execute_sync"), namespace)
    capsys.readouterr()
    run_python(block_with(section("Planning"), "python", "LLMPlanner("), namespace)
    assert capsys.readouterr().out == "['paris', 'tokyo'] 1 succeeded\n"


def test_model_settings_snippet() -> None:
    namespace: dict[str, Any] = {}
    run_python(block_with(section("Planning"), "python", "parallel_tool_calls="), namespace)
    settings = namespace["settings"]
    assert (settings.max_tokens, settings.tool_choice, settings.parallel_tool_calls) == (
        2_000,
        "required",
        False,
    )


def test_dask_snippet(scratch: Path) -> None:
    """The Dask snippet, its local cluster in this process (worker processes would take
    seconds to start); the scheduler address is only an example and is not reached."""
    pytest.importorskip("distributed")
    namespace: dict[str, Any] = {}
    run_python(block_with(section("From Python"), "python", "execute_sync"), namespace)
    source = block_with(section("Scale-out with Dask"), "python", "DaskExecutor(")
    sized = "DaskExecutor(n_workers=4, threads_per_worker=8)"
    assert sized in source
    run_python(source.replace(sized, sized[:-1] + ", processes=False)"), namespace)
    assert namespace["result"].ok and namespace["exe"].startup_s is not None


def test_every_python_snippet_is_run_by_a_test() -> None:
    """Each ``python`` block of the README is one that a test above runs (found by a marker
    only it holds), so a new snippet cannot go untested."""
    run = {
        "From Python": ["execute_sync"],
        "Plan format": ["for_each"],
        "ReAct agent nodes": ["llm=llm", "ReActAgent("],
        "Interceptors and approval": ["tracing(", "Policy("],
        "Approvals that wait": ["ask_later"],
        "Planning": ["LLMPlanner(", "parallel_tool_calls="],
        "From a goal to an answer": ["solve("],
        "Model calls, deadlines and budgets": ["solution.calls"],
        "Streamed planning": ["plan_and_execute_streamed("],
        "Run records, review and replanning": ["store="],
        "Tools from MCP servers": ["MCPClient.stdio("],
        "Scale-out with Dask": ["DaskExecutor("],
        "OpenTelemetry": ["set_tracer_provider"],
    }
    source = Path(__file__).read_text(encoding="utf-8")
    for title in re.findall(r"^## (.+)$", README, re.M):
        for block in blocks(section(title), "python"):
            markers = [m for m in run.get(title, []) if m in block]
            assert len(markers) == 1, (title, block[:200])
            assert f'"python", "{markers[0]}"' in source, (title, markers[0])


def test_the_default_executor_is_the_one_the_readme_names() -> None:

    from dagagent.settings import RunSettings

    default = RunSettings().executor
    assert default == "dataflow"
    assert f"| `{default}` (default) |" in README


def test_map_tasks_snippet(capsys: pytest.CaptureFixture[str]) -> None:
    source = block_with(section("Plan format"), "python", "for_each")
    run_python(source, {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("[{'city': 'Tokyo', 'temp_c': 10}, {'city': 'Yokohama'")
    assert printed[1] == "['succeeded', 'succeeded', 'succeeded']"


def test_opentelemetry_snippet(capsys: pytest.CaptureFixture[str]) -> None:
    """The OpenTelemetry example, on the registry of "From Python", with global providers
    reset afterwards (they may be set once per process)."""
    from opentelemetry import trace
    from opentelemetry.util._once import Once

    namespace: dict[str, Any] = {}
    run_python(block_with(section("From Python"), "python", "execute_sync"), namespace)
    capsys.readouterr()
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    try:
        run_python(block_with(section("OpenTelemetry"), "python", "set_tracer_provider"), namespace)
    finally:
        trace._TRACER_PROVIDER_SET_ONCE = Once()
        trace._TRACER_PROVIDER = None
    printed = capsys.readouterr().out
    said = re.search(r"prints `(\[.*?\])`", section("OpenTelemetry"), re.S)
    assert said is not None
    assert printed.strip() == " ".join(said.group(1).split())
