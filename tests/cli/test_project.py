"""Project settings (``[tool.dagagent]`` in ``pyproject.toml``, or ``.dagagent/config.toml``),
found upward from the working directory: the tools, MCP servers and option defaults a
project's commands would otherwise repeat; the command line and the environment still win."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from cli_shell import Shell

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

TOOLS = '''
import dagagent

registry = dagagent.Registry()


@registry.tool
def shout(text: str) -> str:
    """Upper-case a text."""
    return text.upper()
'''

PLAN = {"goal": "shout", "tasks": [{"id": "s", "tool": "shout", "args": {"text": "hi"}}]}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project whose tools module lives at its top; commands run from a folder below."""
    root = tmp_path / "proj"
    (root / "src" / "deep").mkdir(parents=True)
    (root / "mytools.py").write_text(TOOLS)
    (root / "src" / "deep" / "plan.json").write_text(json.dumps(PLAN))
    return root


def shell_in(project: Path, **env: str) -> Shell:
    sh = Shell(project / "src" / "deep", **env)
    sh.env["DAGAGENT_HOME"] = str(project.parent / "home")
    return sh


def test_the_pyproject_table_gives_the_tools_and_defaults_from_any_folder_below(
    project: Path,
) -> None:
    (project / "pyproject.toml").write_text(
        '[project]\nname = "p"\n\n[tool.dagagent]\ntools = "mytools:registry"\n'
        'executor = "serial"\nmax_concurrency = 2\n'
    )
    sh = shell_in(project)
    doc = sh.json("run", "plan.json")
    assert doc["status"] == "succeeded" and doc["tasks"]["s"]["output"] == "HI"
    assert doc["executor"] == "serial"
    proc = sh("run", "plan.json")
    assert "demo tools" not in proc.stderr
    # replan loads the tools the run was recorded with: the project's, by name
    shown = sh.json("show", "--last")
    assert shown["context"]["tools"] == "mytools:registry"
    # the command line wins over the file
    assert sh.json("run", "plan.json", "--executor", "levels")["executor"] == "levels"


def test_tools_given_as_module_attr_are_found_in_the_projects_folder(project: Path) -> None:
    (project / ".dagagent").mkdir()
    (project / ".dagagent" / "config.toml").write_text("max_elements = 5\n")
    sh = shell_in(project)
    doc = sh.json("run", "plan.json", "--tools", "mytools:registry")
    assert doc["tasks"]["s"]["output"] == "HI"
    # a module found nowhere names every place it looked
    missing = sh("run", "plan.json", "--tools", "nosuch:registry", code=2)
    assert "the current directory" in missing.stderr and str(project) in missing.stderr


def test_the_environment_wins_over_the_file_and_the_file_over_the_demo_tools(
    project: Path, tmp_path: Path
) -> None:
    (project / ".dagagent").mkdir()
    (project / ".dagagent" / "config.toml").write_text('tools = "mytools:registry"\n')
    sh = shell_in(project, DAGAGENT_TOOLS="dagagent.toolkits.demo:registry")
    bad = sh("run", "plan.json", code=2)
    assert "unknown_tool" in bad.stderr  # the demo tools: $DAGAGENT_TOOLS won
    assert "note: using the bundled demo tools" not in bad.stderr  # they were chosen


def test_forgetting_tools_says_the_demo_tools_were_used(tmp_path: Path) -> None:
    sh = Shell(tmp_path, DAGAGENT_DEMO_LATENCY="0")
    proc = sh("run", str(EXAMPLES / "weather.json"))
    assert "note: using the bundled demo tools (dagagent.toolkits.demo:registry)" in proc.stderr
    plan = tmp_path / "mine.json"
    plan.write_text(json.dumps(PLAN))
    bad = sh("run", str(plan), code=2)
    assert "note: using the bundled demo tools" in bad.stderr and "unknown_tool" in bad.stderr


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("toolz = 'x:y'\n", "unknown setting 'toolz'"),
        ("max_concurrency = 'many'\n", "max_concurrency must be a whole number"),
        ("tools = [\n", "is not valid TOML"),
    ],
)
@pytest.mark.skipif(sys.version_info < (3, 11), reason="project files are TOML: Python 3.11+")
def test_a_project_file_that_cannot_be_used_is_a_clear_error(
    project: Path, text: str, said: str
) -> None:
    (project / ".dagagent").mkdir()
    (project / ".dagagent" / "config.toml").write_text(text)
    proc = shell_in(project)("run", "plan.json", code=2)
    assert said in proc.stderr and "config.toml" in proc.stderr


@pytest.mark.slow
def test_an_mcp_server_of_the_project_runs_in_its_folder(project: Path) -> None:
    shutil.copy(EXAMPLES / "mcp_server.py", project / "server.py")
    (project / "pyproject.toml").write_text(
        f'[tool.dagagent.mcp]\nforecast = "{Path(sys.executable).as_posix()} server.py"\n'
    )
    sh = shell_in(project)
    tools = sh.json("tools")["tools"]
    assert "forecast.tomorrow" in [t["name"] for t in tools]
    assert "shout" not in [t["name"] for t in tools]  # with servers, no demo tools either
