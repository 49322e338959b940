"""A user's shell for tests that run real ``dagagent`` processes.

Every subprocess journey (tests/test_journeys.py, tests/cli/test_ask.py,
tests/cli/test_waiting.py) runs the CLI the same way: ``python -m dagagent ...`` in a
temporary working directory, with a store under it (``$DAGAGENT_HOME``), none of the
machine's ``DAGAGENT_*``/``OPENAI_*``/``ANTHROPIC_*`` variables, and a bounded wait. Each
call checks that the process printed no traceback and, unless told otherwise, its exit code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

TIMEOUT = 60

#: What a crash prints. A failed task's recorded traceback shows up in ``--json`` output too,
#: but as a JSON string, whose line breaks are escaped.
CRASH = "Traceback (most recent call last):\n"


class Shell:
    """A working directory, a clean environment (plus ``env``) and the calls made from it."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        self.dir = tmp_path
        clean = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("DAGAGENT_", "OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_API"))
        }
        self.env = {
            **clean,
            "DAGAGENT_HOME": str(tmp_path / "home"),
            "NO_COLOR": "1",
            "COLUMNS": "200",
            **env,
        }

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "dagagent", *args]

    def __call__(self, *args: str, code: int | None = 0) -> subprocess.CompletedProcess[str]:
        """Run ``dagagent ARGS`` to its end; ``code=None`` accepts any exit code."""
        proc = subprocess.run(
            self.argv(*args),
            cwd=self.dir,
            env=self.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert CRASH not in proc.stderr + proc.stdout, proc.stderr
        if code is not None:
            assert proc.returncode == code, (args, proc.returncode, proc.stdout, proc.stderr)
        return proc

    def json(self, *args: str, code: int | None = 0) -> Any:
        """``dagagent ARGS --json``, its output parsed."""
        return json.loads(self(*args, "--json", code=code).stdout)

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        """Start ``dagagent ARGS`` in the background; its stderr goes to the file ``name.err``."""
        with open(self.dir / f"{name}.err", "wb") as err:
            return subprocess.Popen(
                self.argv(*args),
                cwd=self.dir,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def stderr(self, name: str) -> str:
        """What the background command started as ``name`` printed on stderr."""
        return (self.dir / f"{name}.err").read_text()

    def write_plan(self, plan: dict[str, Any], name: str = "plan.json") -> str:
        (self.dir / name).write_text(json.dumps(plan))
        return name


def tool_starts(log: Path) -> list[str]:
    """The tool calls a counted tools module logged: ``tool arg`` per ``start`` line, sorted."""
    if not log.exists():
        return []
    lines = log.read_text().splitlines()
    return sorted(x[len("start ") :] for x in lines if x.startswith("start "))
