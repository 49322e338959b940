"""The examples of the documentation (the site's pages in ``docs/`` and README.md), run as
they are written, so that their claims cannot rot.

The shell blocks run through the CLI in process (in a scratch directory holding a copy of
``examples/``); the Python blocks run as written, ``await`` included, offline: with the
scripted model, or with a model server on loopback where a page points at a real server.
Examples on a page go on from the registry and plan of the quickstart, as the pages say.
A Python block that no test runs fails :func:`test_every_python_block_is_run_by_a_test`.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
import shutil
import sys
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import typer.main
from llm_server import LLMTestServer, Recorded, Reply, SSEReply
from typer.testing import CliRunner

from dagagent.cli import app
from dagagent.llm import wire

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
runner = CliRunner()


def page(name: str) -> str:
    """The text of ``docs/NAME.md`` (``README`` for README.md)."""
    path = ROOT / "README.md" if name == "README" else DOCS / f"{name}.md"
    return path.read_text(encoding="utf-8")


def section(name: str, title: str) -> str:
    """The ``## title`` section of a page, up to its next ``## `` heading."""
    text = page(name)
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def block_with(text: str, lang: str, marker: str) -> str:
    found = [b for b in blocks(text, lang) if marker in b]
    assert len(found) == 1, f"expected one {lang} block with {marker!r}"
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
    code = compile(source, "<docs>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    pending = eval(code, namespace)
    if pending is not None:

        async def main() -> None:
            await pending

        anyio.run(main)


def shell_lines(block: str) -> list[tuple[str, str]]:
    """:func:`commands` of a shell block whose commands may go on over ``\\`` line ends and
    that may hold comment lines."""
    joined = block.replace("\\\n", " ")
    return [(c, note) for c, note in commands(joined) if c and not c.startswith("#")]


def quickstart(namespace: dict[str, Any]) -> None:
    """Run the quickstart's plan of its own, as the pages that go on from it do."""
    run_python(
        block_with(
            section("quickstart", "From Python, a plan of your own"), "python", "execute_sync"
        ),
        namespace,
    )


class Model:
    """A model server on loopback speaking OpenAI's wire format, answering from a queue."""

    def __init__(self) -> None:
        self.answers: deque[dict[str, Any]] = deque()
        self.server = LLMTestServer(self.respond)

    def respond(self, request: Recorded) -> Reply | SSEReply:
        if not self.answers:
            return Reply(500, json={"error": {"message": "no more answers scripted"}})
        body = self.answers.popleft()
        if request.json.get("stream"):
            return SSEReply(wire.openai_events(body))
        return Reply(json=body)

    def script(self, *texts: Any) -> None:
        self.answers.extend(wire.openai_text(json.dumps(t)) for t in texts)

    def weather_round(self, answer: str) -> None:
        """A plan of two look-ups, then the joiner's answer from them."""
        self.script(
            {
                "tasks": [
                    {"id": "paris", "tool": "get_weather", "args": {"city": "Paris"}},
                    {"id": "tokyo", "tool": "get_weather", "args": {"city": "Tokyo"}},
                ]
            },
            {"action": "finish", "answer": answer, "cites": ["paris", "tokyo"]},
        )


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[Model]:
    for name in (
        "DAGAGENT_MODEL",
        "DAGAGENT_BASE_URL",
        "DAGAGENT_TOOLS",
        "OPENAI_BASE_URL",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    m = Model()
    with m.server:
        yield m
    assert not m.answers, "scripted answers left unused"
    m.server.check()


QUICK_STARTS = [
    ("quickstart", "Your tools, your model"),
    ("README", "Quick start: your tools, your model"),
]


@pytest.fixture(params=QUICK_STARTS, ids=["docs", "README"])
def quick_start(request: pytest.FixtureRequest) -> str:
    """The text of a quick start with your own tools and model: the site's, the README's."""
    name, title = request.param
    return section(name, title)


@pytest.fixture
def own_tools(quick_start: str, scratch: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The quick start's ``mytools.py``, saved in the user's directory as it says."""
    source = block_with(quick_start, "python", "Registry()")
    (scratch / "mytools.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(scratch))
    yield scratch / "mytools.py"
    sys.modules.pop("mytools", None)


# -- the README ---------------------------------------------------------------------------------


def test_the_readme_is_short_and_its_test_command_is_what_ci_runs() -> None:
    readme = page("README")
    assert len(readme.splitlines()) <= 200
    headings = re.findall(r"^## (.+)$", readme, re.M)
    assert headings[0] == "Install and test"
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    install = next(line for line in ci if line.startswith("pip install") and "-e" in line)
    test = next(line for line in ci if line.startswith("pytest"))
    assert commands(block_with(section("README", "Install and test"), "bash", "pip")) == [
        (install.replace("--quiet ", ""), ""),
        (test, ""),
    ]
    # the quick loop: the tests not marked slow, a marker pyproject declares
    assert '`pytest -n auto -m "not slow"`' in readme
    assert '\n    "slow: ' in (ROOT / "pyproject.toml").read_text()
    # the figure of how long the suite takes says where it comes from, and that is there
    assert "python benchmarks/suite.py --write" in readme
    assert (ROOT / "benchmarks" / "suite.py").is_file()


def test_the_suite_benchmark_measures_the_command_ci_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/suite.py, whose figure the README gives, times ``.ci/run``'s test command."""
    import importlib.util

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("bench_suite", ROOT / "benchmarks" / "suite.py")
    assert spec is not None and spec.loader is not None
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert suite.test_command() == shlex.split(next(x for x in ci if x.startswith("pytest")))


def test_the_readme_links_to_files_that_exist() -> None:
    readme = page("README")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    assert "docs/quickstart.md" in targets and "docs/viewer-run.png" in targets
    for target in targets:
        if "://" not in target:
            assert (ROOT / target).is_file(), target


# -- the quickstart ----------------------------------------------------------------------------


def test_offline_example_runs_as_described(scratch: Path) -> None:
    block = block_with(
        section("quickstart", "Run the bundled example (offline, no key)"), "bash", "dagagent"
    )
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


def test_ask_with_your_tools_and_a_local_or_hosted_model(
    quick_start: str, own_tools: Path, model: Model, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ``ask`` commands of the quick start, the local server and the hosted one played by
    a model server on loopback; then ``show --last``."""
    text = quick_start
    lines = shell_lines(block_with(text, "bash", "dagagent ask"))
    asks = [c for c, _ in lines if c.startswith("dagagent ask")]
    assert len(asks) == 2
    local, hosted = asks
    assert "--tools mytools.py:registry" in local and "--tools mytools.py:registry" in hosted
    url = "http://localhost:11434/v1"
    assert f"--base-url {url}" in local and "--base-url" not in hosted

    model.weather_round("Tokyo is warmer: 24.5 C against 18.0 C.")
    r = dagagent(local.replace(url, model.server.url + "/v1"))
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().splitlines()[-1] == "Tokyo is warmer: 24.5 C against 18.0 C."
    plan_request = model.server.requests[0].json
    assert plan_request["model"] == "llama3.1"
    assert "get_weather" in json.dumps(plan_request)  # the planner was shown the user's tool

    # hosted: the key and (here) the server come from the environment, as OpenAI's client says
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", model.server.url + "/v1")
    model.weather_round("Tokyo.")
    r = dagagent(hosted)
    assert r.exit_code == 0, r.output
    assert r.stdout.strip().splitlines()[-1] == "Tokyo."
    assert model.server.requests[-1].json["model"] == "gpt-4o-mini"
    assert model.server.requests[-1].headers.get("authorization") == "Bearer sk-test"

    shown = dagagent(next(c for c, _ in lines if c.startswith("dagagent show")))
    assert shown.exit_code == 0, shown.output
    assert re.search(r"paris +│ get_weather +│ succeeded", shown.stdout), shown.stdout
    assert "Tokyo." in shown.stdout
    assert any(c.startswith("dagagent ui --open") for c, _ in lines)  # opens a browser: not run


def test_ask_from_python(
    quick_start: str, own_tools: Path, model: Model, capsys: pytest.CaptureFixture[str]
) -> None:
    source = block_with(quick_start, "python", "solve_sync(")
    url = "http://localhost:11434/v1"
    assert url in source
    model.weather_round("Tokyo is warmer.")
    namespace: dict[str, Any] = {}
    run_python(source.replace(url, model.server.url + "/v1"), namespace)
    assert capsys.readouterr().out == "answered Tokyo is warmer.\n"
    m = re.search(r"^# in async code: (.+)$", source, re.M)
    assert m is not None
    model.weather_round("Still Tokyo.")
    run_python(m.group(1).replace("goal", repr("Which is warmer?")), namespace)
    assert namespace["solution"].answer == "Still Tokyo."


def test_from_python_snippet(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = block_with(
        section("quickstart", "From Python, a plan of your own"), "python", "execute_sync"
    )
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


# -- the guide ---------------------------------------------------------------------------------


def test_registering_tools_snippet() -> None:
    namespace: dict[str, Any] = {}
    run_python(block_with(page("tools"), "python", "send_email"), namespace)
    tool = namespace["registry"].get("send_email")
    assert tool.side_effects and tool.timeout_s == 10 and tool.retries == 2
    assert tool.description == "Send an e-mail."
    assert (
        anyio.run(tool.acall, {"to": "ann@example.com", "subject": "hi"})
        == "sent to ann@example.com"
    )


def test_map_tasks_snippet(capsys: pytest.CaptureFixture[str]) -> None:
    source = block_with(page("plans"), "python", "for_each")
    run_python(source, {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("[{'city': 'Tokyo', 'temp_c': 10}, {'city': 'Yokohama'")
    assert printed[1] == "['succeeded', 'succeeded', 'succeeded']"


def test_the_default_executor_is_the_one_the_docs_name() -> None:
    from dagagent.settings import RunSettings

    default = RunSettings().executor
    assert default == "dataflow"
    assert f"| `{default}` (default) |" in page("executors")


def test_failing_run_and_replan_walkthrough(scratch: Path) -> None:
    text = page("records")
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

    # The graph of that run, as the page draws it.
    drawing = block_with(text, "text", "$ dagagent graph")
    prompt, *expected = drawing.rstrip("\n").splitlines()
    r = dagagent(prompt.removeprefix("$ "))
    assert r.exit_code == 0, r.output
    assert [line.rstrip() for line in r.stdout.rstrip("\n").splitlines()] == expected


def test_interceptor_policy_and_store_snippets(scratch: Path) -> None:
    """The awaited snippets of the approvals and records pages, on the quickstart's plan."""
    namespace: dict[str, Any] = {}
    quickstart(namespace)

    text = section("approvals", "Interceptors and approval")
    run_python(block_with(text, "python", "tracing("), namespace)
    assert namespace["result"].status == "succeeded"
    assert len(namespace["spans"]) == 3

    run_python(block_with(text, "python", "Policy("), namespace)
    assert namespace["result"].status == "succeeded"

    run_python(block_with(page("records"), "python", "store="), namespace)
    assert namespace["record"].tasks["paris"].output == {"city": "Paris", "temp_c": 20.0}
    assert (scratch / "runs.db").exists()


def test_approvals_that_wait_snippet(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The pause and resume example, on the quickstart's registry and plan."""
    namespace: dict[str, Any] = {}
    quickstart(namespace)
    capsys.readouterr()
    run_python(
        block_with(section("approvals", "Approvals that wait"), "python", "ask_later"), namespace
    )
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "paused ['tokyo']",
        "[('tokyo', {'city': 'Tokyo'})]",
        "succeeded True",
    ]
    assert namespace["result"].outputs["both"] == {"city": "Paris and Tokyo", "temp_c": 20.0}


def test_session_snippet(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The conversation example, on the quickstart's registry, with its scripted model: the
    second turn reuses the first's output by reference."""
    namespace: dict[str, Any] = {}
    quickstart(namespace)
    capsys.readouterr()
    run_python(block_with(page("sessions"), "python", "Session("), namespace)
    assert capsys.readouterr().out.splitlines() == [
        "It is 20 C in Paris. / Both are at 20 C.",
        "reused",
    ]
    both = namespace["second"].rounds[0].result.tasks["both"]
    assert both.args == {"city": "Paris and Tokyo"}
    assert (scratch / "runs.db").exists()


def test_solve_snippet(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The goal-to-answer example, on the quickstart's registry, with its scripted model."""
    namespace: dict[str, Any] = {}
    quickstart(namespace)
    capsys.readouterr()
    run_python(
        block_with(section("planning", "From a goal to an answer"), "python", "solve("), namespace
    )
    assert capsys.readouterr().out == "answered It is 20 C in Paris. ['paris']\n"
    solution = namespace["solution"]
    assert solution.rounds[0].result.outputs == {"paris": {"city": "Paris", "temp_c": 20.0}}


def test_model_calls_snippet(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The model-calls example: a deadline, a budget, and the calls of the solve."""
    namespace: dict[str, Any] = {}
    quickstart(namespace)
    run_python(
        block_with(section("planning", "From a goal to an answer"), "python", "solve("), namespace
    )
    capsys.readouterr()
    block = block_with(
        section("planning", "Model calls, deadlines and budgets"), "python", "solution.calls"
    )
    run_python(block, namespace)
    assert capsys.readouterr().out == ("1 planner answered True\n1 joiner answered True\n2 None\n")


def test_streamed_planning_snippet(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The streamed-planning example, on the quickstart's registry."""
    namespace: dict[str, Any] = {}
    quickstart(namespace)
    run_python(
        block_with(section("planning", "From a goal to an answer"), "python", "solve("), namespace
    )
    capsys.readouterr()
    source = block_with(
        section("planning", "Streamed planning"), "python", "plan_and_execute_streamed("
    )
    run_python(source, namespace)
    assert capsys.readouterr().out == "['paris', 'tokyo'] succeeded\n"
    assert namespace["round_"].result.outputs["tokyo"] == {"city": "Tokyo", "temp_c": 20.0}


def test_planning_snippet(scratch: Path, capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, Any] = {}
    quickstart(namespace)
    capsys.readouterr()
    run_python(block_with(section("planning", "Planning"), "python", "LLMPlanner("), namespace)
    assert capsys.readouterr().out == "['paris', 'tokyo'] 1 succeeded\n"


def test_model_settings_snippet() -> None:
    namespace: dict[str, Any] = {}
    run_python(
        block_with(section("planning", "Planning"), "python", "parallel_tool_calls="), namespace
    )
    settings = namespace["settings"]
    assert (settings.max_tokens, settings.tool_choice, settings.parallel_tool_calls) == (
        2_000,
        "required",
        False,
    )


@pytest.mark.slow
def test_mcp_examples_run_as_written(scratch: Path) -> None:
    """The MCP section's commands and snippet, against examples/mcp_server.py (offline)."""
    pytest.importorskip("mcp")
    text = section("tools", "Tools from MCP servers")
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
    """The agents page's two snippets, offline with their scripted models, on the quickstart's
    registry."""
    namespace: dict[str, Any] = {}
    quickstart(namespace)
    capsys.readouterr()
    text = page("agents")
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


def test_dask_snippet(scratch: Path) -> None:
    """The Dask snippet, its local cluster in this process (worker processes would take
    seconds to start); the scheduler address is only an example and is not reached."""
    pytest.importorskip("distributed")
    namespace: dict[str, Any] = {}
    quickstart(namespace)
    source = block_with(page("scale-out"), "python", "DaskExecutor(")
    sized = "DaskExecutor(n_workers=4, threads_per_worker=8)"
    assert sized in source
    run_python(source.replace(sized, sized[:-1] + ", processes=False)"), namespace)
    assert namespace["result"].ok and namespace["exe"].startup_s is not None


def test_opentelemetry_snippet(capsys: pytest.CaptureFixture[str]) -> None:
    """The OpenTelemetry example, on the quickstart's registry, with global providers reset
    afterwards (they may be set once per process)."""
    from opentelemetry import trace
    from opentelemetry.util._once import Once

    namespace: dict[str, Any] = {}
    quickstart(namespace)
    capsys.readouterr()
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    try:
        run_python(block_with(page("opentelemetry"), "python", "set_tracer_provider"), namespace)
    finally:
        trace._TRACER_PROVIDER_SET_ONCE = Once()
        trace._TRACER_PROVIDER = None
    printed = capsys.readouterr().out
    said = re.search(r"prints `(\[.*?\])`", page("opentelemetry"), re.S)
    assert said is not None
    assert printed.strip() == " ".join(said.group(1).split())


# -- the command line --------------------------------------------------------------------------


def test_the_cli_reference_has_every_command_and_option() -> None:
    """The generated reference (docs/hooks/cli_reference.py) documents every command and
    every option, and the page's table at a glance lists every command."""
    reference = _hook("cli_reference").reference()
    group = typer.main.get_command(app)
    cmds: dict[str, Any] = getattr(group, "commands", {})
    assert {"validate", "run", "ask", "plan", "runs", "show", "graph", "replan"} <= set(cmds)
    table = section("cli", "Commands at a glance")
    for name, command in cmds.items():
        assert f"### `dagagent {name}`" in reference, name
        assert f"| `dagagent {name} " in table, f"'dagagent {name}' is not in the table"
        block = reference[reference.index(f"### `dagagent {name}`") :]
        block = block[: block.find("\n### ", 1)]
        for param in command.params:
            if param.param_type_name == "option" and param.name != "help":
                assert any(f"<code>{o}" in block or f", {o}" in block for o in param.opts), (
                    name,
                    param.opts,
                )
    assert "--version" in reference and "--verbose" in reference


# -- versions and changes ----------------------------------------------------------------------


# the kinds of Keep a Changelog, in the order a release lists them: breaking entries first
KINDS = ["Changed", "Removed", "Added", "Deprecated", "Fixed", "Security"]
RELEASE = re.compile(r"^## (\d+\.\d+\.\d+) — (Unreleased|\d{4}-\d{2}-\d{2})$", re.M)


def releases() -> list[tuple[str, str, str]]:
    """``(version, date or "Unreleased", text)`` for each release of CHANGELOG.md, newest first."""
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    found = list(RELEASE.finditer(text))
    ends = [m.start() for m in found[1:]] + [len(text)]
    return [
        (m.group(1), m.group(2), text[m.end() : end]) for m, end in zip(found, ends, strict=True)
    ]


def test_the_changelog_is_grouped_by_release_and_agrees_with_the_version() -> None:
    """Releases newest first, only the newest unreleased, each grouped by the kinds of Keep a
    Changelog in one order; ``__version__`` is the newest release, or ``X.Y.Z.dev0`` while it
    is unreleased (the scheme on the changes page)."""
    import dagagent

    found = releases()
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert len(found) == len(re.findall(r"^## ", text, re.M)), "a ## heading is not a release"
    versions = [tuple(int(n) for n in v.split(".")) for v, _, _ in found]
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions)
    dates = [d for _, d, _ in found]
    assert "Unreleased" not in dates[1:], "only the newest release may be unreleased"
    assert dates[1:] == sorted(dates[1:], reverse=True)
    newest, date, _ = found[0]
    assert dagagent.__version__ == (f"{newest}.dev0" if date == "Unreleased" else newest)
    for version, _, body in found:
        kinds = re.findall(r"^### (.+)$", body, re.M)
        assert kinds and set(kinds) <= set(KINDS), (version, kinds)
        assert kinds == sorted(kinds, key=KINDS.index), (version, kinds)


def test_changelog_entries_are_short_and_link_to_pages_that_exist() -> None:
    """An entry is at most three lines; breaking ones say so first; every ``docs/`` link names
    a page of the site, and the changes page shows them as links between its pages."""
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    entries = re.findall(r"^- .*(?:\n  .*)*", text, re.M)
    assert entries
    long = [e.splitlines()[0] for e in entries if len(e.splitlines()) > 3]
    assert long == []
    assert all("Breaking" not in e or e.startswith("- **Breaking** ") for e in entries)
    assert not re.search(r"\b(issue|round) \d|#\d", text, re.I)
    links = re.findall(r"\]\(docs/([^)#]+)", text)
    assert links and all((DOCS / link).is_file() for link in links), links
    shown = _hook("changelog").changes()
    assert "](docs/" not in shown and "](branching.md#best-so-far-answers)" in shown
    assert not re.search(r"^# |^## ", shown, re.M), "the releases sit under the page's own heading"


# -- the API reference -------------------------------------------------------------------------


@pytest.mark.slow  # griffe asks git where the package's sources are
def test_docstring_roles_become_links_and_name_something() -> None:
    """The Sphinx roles of the docstrings are rewritten for the site (docs/hooks/sphinx_roles.py)
    and every one names something: no role is left as written, and none warns."""
    import logging

    import griffe

    warnings: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record.getMessage())

    handler = Collect(level=logging.WARNING)
    logger = logging.getLogger("griffe")
    logger.addHandler(handler)
    try:
        extension = _hook("sphinx_roles").SphinxRoles()
        package = griffe.load(
            "dagagent",
            search_paths=[str(ROOT)],
            allow_inspection=False,
            extensions=griffe.load_extensions(extension),
        )
    finally:
        logger.removeHandler(handler)
    assert [w for w in warnings if "names nothing" in w] == []
    execute = package["run.execute"].docstring.value
    assert ":class:" not in execute
    assert '<autoref identifier="dagagent.settings.RunSettings" optional>`RunSettings`' in execute
    left = []
    todo = [package]
    while todo:
        obj = todo.pop()
        if obj.docstring is not None and re.search(
            r":(class|func|meth|mod|attr|data|exc):`", obj.docstring.value
        ):
            left.append(obj.path)
        todo.extend(m for m in obj.members.values() if not m.is_alias)
    assert left == []


def _hook(name: str) -> Any:
    """A module of docs/hooks, loaded from its file."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        f"docs_hooks_{name}", DOCS / "hooks" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- every block -------------------------------------------------------------------------------


RUN_BY = {
    ("README", "Quick start: your tools, your model"): ["Registry()", "solve_sync("],
    # (page, section or None for the whole page): the markers of its Python blocks, each the
    # one string a test above picks the block by
    ("quickstart", "Your tools, your model"): ["Registry()", "solve_sync("],
    ("quickstart", "From Python, a plan of your own"): ["execute_sync"],
    ("tools", None): ["send_email", "MCPClient.stdio("],
    ("plans", None): ["for_each"],
    ("agents", None): ["llm=llm", "ReActAgent("],
    ("approvals", "Interceptors and approval"): ["tracing(", "Policy("],
    ("approvals", "Approvals that wait"): ["ask_later"],
    ("planning", "Planning"): ["LLMPlanner(", "parallel_tool_calls="],
    ("planning", "From a goal to an answer"): ["solve("],
    ("planning", "Model calls, deadlines and budgets"): ["solution.calls"],
    ("planning", "Streamed planning"): ["plan_and_execute_streamed("],
    ("records", None): ["store="],
    ("sessions", None): ["Session("],
    ("models", None): ["fallback(", "load_skills("],
    ("discovery", None): ["ToolDiscovery(threshold=30"],
    ("branching", None): [
        "max_calls=3, cooldown_s=60",
        "CallLedger(clock=",
        "limits=[",
        "ttl_s=300",
    ],
    ("scale-out", None): ["DaskExecutor("],
    ("exactly-once", None): [
        "reconcile=check_payment",
        "def check_payment(",
        "store.resolve_in_doubt(run_id",
    ],
    ("opentelemetry", None): ["set_tracer_provider"],
}


def test_every_python_block_is_run_by_a_test() -> None:
    """Each ``python`` block of every page (and of the README) is one a test above runs,
    found by a marker only it holds, so that a new example cannot go untested. A fragment
    that cannot run on its own says so, and why, just before it (:func:`_not_run`)."""
    source = Path(__file__).read_text(encoding="utf-8")
    start = source.index("\nRUN_BY = {")
    tests_text = source[:start] + source[source.index("\n}\n", start) :]  # the tests, not this list
    pages = [*sorted(p.stem for p in DOCS.glob("*.md")), "README"]
    for name in pages:
        text = page(name)
        for block in blocks(text, "python"):
            if _not_run(text, block):
                continue
            markers = [
                m
                for (p, title), ms in RUN_BY.items()
                if p == name and (title is None or block in section(name, title))
                for m in ms
                if m in block
            ]
            assert len(markers) == 1, (name, block[:200])
            assert f'"{markers[0]}"' in tests_text, (name, markers[0])


def _not_run(text: str, block: str) -> bool:
    """Whether the block is marked as one that cannot run, with the reason, on the line just
    before it: ``<!-- not run: REASON -->`` (a fragment of a larger program, say)."""
    before = text[: text.index(f"```python\n{block}")].rstrip("\n").rsplit("\n", 1)[-1]
    marked = re.fullmatch(r"<!-- not run: (.+) -->", before.strip())
    return marked is not None and len(marked.group(1).split()) >= 3


def test_branching_snippets(scratch: Path) -> None:
    """The guardrail and cache examples of the branching page, on the quickstart's registry
    and plan (``confirm`` is the approvals page's callback; ``my_clock`` and
    ``shared_cache`` are what the page says they stand for)."""
    namespace: dict[str, Any] = {}
    quickstart(namespace)
    text = page("branching")
    run_python(block_with(text, "python", "max_calls=3, cooldown_s=60"), namespace)
    mail = namespace["registry"].get("send_email")
    assert (mail.max_calls, mail.cooldown_s, mail.side_effects) == (3, 60, True)

    ticks = iter(range(1_000))
    namespace["my_clock"] = lambda: float(next(ticks))
    run_python(block_with(text, "python", "CallLedger(clock="), namespace)
    assert namespace["ledger"].clock is namespace["my_clock"]
    assert namespace["ledger"].calls("send_email") == 0  # the plan sends nothing

    run_python(
        block_with(section("approvals", "Interceptors and approval"), "python", "Policy("),
        namespace,
    )
    run_python(block_with(text, "python", "limits=["), namespace)
    assert [lim.max_calls for lim in namespace["policy"].limits] == [3, 20]

    namespace["shared_cache"] = {}
    run_python(block_with(text, "python", "ttl_s=300"), namespace)
    for _ in range(2):
        result = namespace["dagagent"].execute_sync(
            namespace["plan"], namespace["registry"], interceptors=namespace["interceptors"]
        )
        assert result.ok
    assert len(namespace["shared_cache"]) == 3  # the second run was answered from the cache


def test_models_snippets(scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The models page's fallback chain (clients made, nothing sent) and its skills, on the
    quickstart's registry, with a ``text`` and a ``skills/`` folder as the page describes."""
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    text = page("models")
    namespace: dict[str, Any] = {}
    run_python(block_with(text, "python", "fallback("), namespace)
    assert type(namespace["llm"]).__name__ == "FallbackLLM"

    quickstart(namespace)
    folder = scratch / "skills"
    folder.mkdir()
    (folder / "carrier.md").write_text(
        "---\nname: carrier\ndescription: Which carrier to pick.\n---\n# Carriers\n\nCheapest.\n",
        encoding="utf-8",
    )
    namespace["text"] = "1. Look the order up.\n2. Refund it."
    run_python(block_with(text, "python", "load_skills("), namespace)
    registry = namespace["registry"]
    assert set(registry.skills) == {"refund", "carrier"}
    assert "read_skill" in registry


def test_the_discovery_example_shows_the_planner_a_part_of_the_catalogue() -> None:
    """The large-catalogues page's solve: 121 tools, the planner shown the weather tool (the
    goal names it) and ten more, the selection on the planning call's record."""
    import json as _json

    from dagagent.llm import ScriptedLLM

    plan = {"tasks": [{"id": "w", "tool": "weather", "args": {"city": "Lisbon"}}]}
    finish = {"action": "finish", "answer": "21 C", "cites": ["w"]}
    llm = ScriptedLLM([_json.dumps(plan), _json.dumps(finish)])
    namespace: dict[str, Any] = {"llm": llm}
    run_python(block_with(page("discovery"), "python", "ToolDiscovery(threshold=30"), namespace)
    assert namespace["solution"].ok
    planning = namespace["planning"]
    assert planning["total"] == 121 and len(planning["shown"]) == 11
    system = llm.requests[0].messages[0].content
    assert "the 11 of 121 most relevant" in system and "report_119" not in system


def test_the_example_of_a_run_that_ended_resolves_its_call_in_doubt(tmp_path: Path) -> None:
    """The page's Python example, on a run whose payment its timeout cut off: it lists the
    call, says it happened, and a revision takes the payment over instead of paying again."""
    import dagagent

    paid: list[str] = []
    registry = dagagent.Registry()

    @registry.tool(side_effects=True)
    async def pay(account: str) -> dict[str, str]:
        paid.append(dagagent.current_call().idempotency_key)
        if len(paid) == 1:
            await anyio.sleep_forever()  # its timeout cuts it off after it paid
        return {"id": "tr_2"}

    path = tmp_path / "runs.db"
    plan = {"tasks": [{"id": "t4", "tool": "pay", "args": {"account": "acme"}, "timeout_s": 0.5}]}
    first = dagagent.execute_sync(plan, registry, store=path)
    assert first.status is dagagent.RunStatus.FAILED
    namespace: dict[str, Any] = {"dagagent": dagagent, "path": path, "run_id": first.run_id}
    text = page("exactly-once")
    run_python(block_with(text, "python", "store.resolve_in_doubt(run_id"), namespace)
    revised = dagagent.execute_sync(plan, registry, store=path, parent_id=first.run_id)
    assert revised.outputs["t4"] == {"id": "tr_91"} and len(paid) == 1


def test_the_exactly_once_examples_pass_the_key_on_and_reconcile_by_it(tmp_path: Path) -> None:
    """The page's tool passes its call's idempotency key to the bank, and its reconciler finds
    a transfer by that key: run against a bank that keeps transfers by key."""

    class Transfer:
        def __init__(self, account: str, cents: int) -> None:
            self.account, self.cents, self.pending = account, cents, False

        def as_dict(self) -> dict[str, Any]:
            return {"account": self.account, "cents": self.cents}

    class Bank:
        def __init__(self) -> None:
            self.transfers: dict[str, Transfer] = {}

        def transfer(self, account: str, cents: int, idempotency_key: str) -> dict[str, Any]:
            made = self.transfers.setdefault(idempotency_key, Transfer(account, cents))
            return made.as_dict()

        def find(self, idempotency_key: str) -> Transfer | None:
            return self.transfers.get(idempotency_key)

    import dagagent

    text = page("exactly-once")
    namespace: dict[str, Any] = {"dagagent": dagagent, "bank": Bank()}
    run_python(block_with(text, "python", "def check_payment("), namespace)
    run_python(block_with(text, "python", "reconcile=check_payment"), namespace)
    plan = {"tasks": [{"id": "pay", "tool": "pay", "args": {"account": "ann", "cents": 500}}]}
    result = dagagent.execute_sync(plan, namespace["registry"], store=tmp_path / "runs.db")
    assert result.tasks["pay"].output == {"account": "ann", "cents": 500}
    ((key, made),) = namespace["bank"].transfers.items()
    assert key.startswith("dga-") and made.cents == 500
    with dagagent.store.RunStore(tmp_path / "runs.db") as st:
        (effect,) = st.effects(result.run_id)
    assert effect.key == key  # the key the tool passed on is the one on record
    check = namespace["check_payment"]
    from types import SimpleNamespace

    call = SimpleNamespace(idempotency_key=key)  # what a resume hands it: the call's identity
    assert check(call) == dagagent.Reconciled.happened({"account": "ann", "cents": 500})
    assert check(SimpleNamespace(idempotency_key="dga-other")).verdict == "not_happened"
    made.pending = True
    assert "pending" in check(call).reason
