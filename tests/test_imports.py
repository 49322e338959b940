"""What importing dagagent loads: each command imports what it needs when it needs it, so that
``dagagent --help`` and ``dagagent validate`` start quickly (``benchmarks/startup.py`` times
them). A broken implementation imports the model clients, networkx or structlog up front."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dagagent

# The tests marked slow start a fresh interpreter: what it imports is the point.
# Heavy modules that neither --help nor validate needs.
NOT_NEEDED = ("networkx", "structlog", "httpx", "sqlite3", "dagagent.llm.openai")


def _stderr(*argv: str, cwd: Path) -> str:
    """What ``python ARGV`` (this checkout's dagagent first on the path) wrote to stderr; it
    must succeed."""
    env = {**os.environ, "PYTHONPATH": str(Path(dagagent.__file__).parents[1])}
    proc = subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stderr


def _imported(*args: str, cwd: Path) -> set[str]:
    return {
        line.rsplit("|", 1)[1].strip()
        for line in _stderr("-X", "importtime", "-m", "dagagent", *args, cwd=cwd).splitlines()
        if line.startswith("import time:") and "|" in line
    }


@pytest.mark.slow
@pytest.mark.parametrize("command", [["--help"], ["validate", "plan.json"]])
def test_help_and_validate_import_only_what_they_need(tmp_path: Path, command: list[str]) -> None:
    plan = {"tasks": [{"id": "a", "tool": "calculate", "args": {"expression": "1+2"}}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    modules = _imported(*command, cwd=tmp_path)
    assert "dagagent.cli" in modules  # the measurement itself works
    assert not modules & set(NOT_NEEDED), sorted(modules & set(NOT_NEEDED))


@pytest.mark.slow
def test_every_public_name_of_the_package_is_there() -> None:
    code = (
        "import dagagent, sys\n"
        "assert 'dagagent.workflows' not in sys.modules\n"
        "for name in dagagent.__all__: getattr(dagagent, name)\n"
        "assert dagagent.store.RunStore is dagagent.RunStore\n"
        "from dagagent import *\n"
        "import dagagent.llm as llm\n"
        "for name in llm.__all__: getattr(llm, name)\n"
        "import dagagent.executors as ex\n"
        "for name in ex.__all__: getattr(ex, name)\n"
        "print(len(dir(dagagent)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(dagagent.__file__).parents[1])}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) >= len(dagagent.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        dagagent.nothing_here  # noqa: B018


def _command_modules_loaded(*args: str, cwd: Path) -> set[str]:
    """The modules of dagagent.cli loaded by ``dagagent ARGS`` (-X importtime does not list
    what importlib.import_module imports, so sys.modules is read at exit)."""
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: sys.stderr.write('LOADED ' + ' '.join(\n"
        "    m for m in sys.modules if m.startswith('dagagent.cli.')) + '\\n'))\n"
        "from dagagent.__main__ import main\n"
        "sys.argv[0] = 'dagagent'\n"
        "main()\n"
    )
    return set(_stderr("-c", code, *args, cwd=cwd).rsplit("LOADED ", 1)[1].split())


@pytest.mark.slow
def test_a_command_imports_the_module_that_defines_it_and_help_all_of_them(
    tmp_path: Path,
) -> None:
    from dagagent.cli._app import COMMAND_MODULES

    plan = {"tasks": [{"id": "a", "tool": "calculate", "args": {"expression": "1+2"}}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    loaded = _command_modules_loaded("validate", "plan.json", cwd=tmp_path)
    assert "dagagent.cli.run" in loaded
    others = {f"dagagent.cli.{m}" for m in COMMAND_MODULES.values()} - {
        "dagagent.cli.run",
        "dagagent.cli.tools",  # run.py loads tools through it
    }
    assert not loaded & others, sorted(loaded & others)
    assert _command_modules_loaded("runs", "--help", cwd=tmp_path) & others == {"dagagent.cli.runs"}
    assert _command_modules_loaded("--help", cwd=tmp_path) >= others


def test_every_command_is_found_in_the_module_named_for_it() -> None:
    from dagagent.cli import app
    from dagagent.cli._app import COMMAND_MODULES

    defined = {c.name: c.callback.__module__ for c in app.registered_commands if c.callback}
    assert defined == {name: f"dagagent.cli.{m}" for name, m in COMMAND_MODULES.items()}
