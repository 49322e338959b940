"""``dagagent run --approve / --ask / --policy``: answered through a pseudo-terminal, and
without a terminal. Every test counts the tool calls that really happened (the test tools
append one line per call to a log file)."""

from __future__ import annotations

import io
import json
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import anyio
import pytest
from cli_shell import run_in_process
from rich.console import Console
from typer.testing import CliRunner

import dagagent
from dagagent.approval import Policy, Rule
from dagagent.cli import app
from dagagent.cli.approve import LineReader, TerminalAsker

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")

TOOLS = '''
import json
import os

from dagagent import Registry

registry = Registry()


def _log(tool: str, **args: object) -> None:
    with open(os.environ["APPROVAL_TEST_LOG"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"tool": tool, **args}) + "\\n")


@registry.tool(side_effects=True)
def note(text: str) -> str:
    """Write a note."""
    _log("note", text=text)
    return text


@registry.tool
def read(key: str) -> str:
    """Read a value."""
    _log("read", key=key)
    return key.upper()
'''

PLAN = {
    "goal": "take notes",
    "tasks": [
        {"id": "r", "tool": "read", "args": {"key": "k"}},
        {"id": "n1", "tool": "note", "args": {"text": "one ${r}"}},
        {"id": "n2", "tool": "note", "args": {"text": "two"}, "depends_on": ["n1"]},
        {"id": "n3", "tool": "note", "args": {"text": "three"}, "depends_on": ["n2"]},
    ],
}


class Setup:
    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.tools = tmp_path / "approval_tools.py"
        self.tools.write_text(TOOLS)
        self.plan = tmp_path / "plan.json"
        self.plan.write_text(json.dumps(PLAN))
        self.log = tmp_path / "calls.log"
        self.env = {
            **os.environ,
            "APPROVAL_TEST_LOG": str(self.log),
            "NO_COLOR": "1",
            "TERM": "dumb",
            "COLUMNS": "200",
        }

    def args(self, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "dagagent",
            "run",
            str(self.plan),
            "--tools",
            f"{self.tools}:registry",
            *extra,
        ]

    def run(self, *extra: str) -> subprocess.CompletedProcess[str]:
        """``dagagent run PLAN --tools ... EXTRA`` in this process, stdin no terminal."""
        return run_in_process(self.args(*extra)[3:], self.dir, self.env)

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Setup:
    s = Setup(tmp_path)
    monkeypatch.setenv("APPROVAL_TEST_LOG", str(s.log))
    return s


class Terminal:
    """A command on a pseudo-terminal: wait for text, type answers."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        master, slave = os.openpty()
        self.fd = master
        self.proc = subprocess.Popen(
            args, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
        )
        os.close(slave)
        self.buffer = ""
        self.seen = 0

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 4096)
        except OSError:  # the child closed the terminal
            return False
        if not data:
            return False
        self.buffer += ANSI.sub("", data.decode("utf-8", "replace"))
        return True

    def expect(self, text: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while True:
            at = self.buffer.find(text, self.seen)
            if at >= 0:
                self.seen = at + len(text)
                return
            if time.monotonic() > deadline or not self._read(0.1):
                self.close()
                raise AssertionError(f"never saw {text!r}; output so far:\n{self.buffer}")

    def send(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())

    def finish(self, timeout: float = 20) -> int:
        deadline = time.monotonic() + timeout
        while self._read(0.1):
            if self.proc.poll() is not None and not select.select([self.fd], [], [], 0)[0]:
                break
            if time.monotonic() > deadline:
                self.close()
                raise AssertionError(f"the command did not finish; output:\n{self.buffer}")
        code = self.proc.wait(timeout=timeout)
        os.close(self.fd)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


# -- through a pseudo-terminal ------------------------------------------------------------------


@pytest.mark.slow
def test_approve_yes_shows_the_plan_then_runs(setup: Setup) -> None:
    term = Terminal(setup.args("--approve"), setup.env)
    term.expect("take notes")  # the plan table's title
    term.expect("level 0  r (read)")  # the DAG drawing
    term.expect("level 1  n1 (note) <- r")
    term.expect("Run this plan (4 tasks)? [y/N]")
    assert setup.calls() == []  # nothing runs before the answer
    term.send("y")
    term.expect("succeeded in")
    assert term.finish() == 0
    assert [c["tool"] for c in setup.calls()] == ["read", "note", "note", "note"]


@pytest.mark.slow
def test_approve_no_runs_nothing_and_exits_1(setup: Setup) -> None:
    term = Terminal(setup.args("--approve", "--ask", "note"), setup.env)
    term.expect("n1 (note) <- r  [ask]")  # the drawing marks calls that will ask
    term.expect("rule '--ask note': ask tool note")
    term.expect("[y/N]")
    term.send("n")
    term.expect("run not approved: nothing was run")
    assert term.finish() == 1
    assert setup.calls() == []


@pytest.mark.slow
def test_ask_approve_deny_with_feedback_and_edit(setup: Setup) -> None:
    term = Terminal(
        setup.args("--ask", "note", "--json", "--on-failure", "continue", "-e", "serial"),
        setup.env,
    )
    term.expect("task 'n1' wants to call 'note' (rule '--ask note')")
    term.expect('arguments: {"text": "one K"}')  # references resolved before the question
    term.expect("[e]dit arguments: ")
    assert [c["tool"] for c in setup.calls()] == ["read"]
    term.send("maybe")
    term.expect("please answer y, n or e")
    term.send("y")

    term.expect("task 'n2' wants to call 'note'")
    term.expect("[e]dit arguments: ")
    term.send("e")
    term.expect("arguments as JSON")
    term.send('{"text": 5}')  # wrong type: asked again, nothing called
    term.expect("bad arguments for tool 'note': text:")
    term.send("{oops")
    term.expect("not valid JSON")
    term.send('{"text": "two, edited"}')

    term.expect("task 'n3' wants to call 'note'")
    term.expect("[e]dit arguments: ")
    term.send("n")
    term.expect("reason (optional, Enter to skip): ")
    term.send("three is too many")
    term.expect('"status": "failed"')
    assert term.finish() == 1
    assert setup.calls() == [
        {"tool": "read", "key": "k"},
        {"tool": "note", "text": "one K"},
        {"tool": "note", "text": "two, edited"},
    ]
    result = json.loads(term.buffer[term.buffer.index("{\r\n") :].replace("\r\n", "\n"))
    tasks = result["tasks"]
    assert tasks["n3"]["status"] == "denied"
    assert tasks["n3"]["error"] == "denied by user: three is too many"
    decisions = {
        k: [(d["decision"], d["decided_by"]) for d in t.get("decisions") or []]
        for k, t in tasks.items()
    }
    assert decisions == {
        "r": [],
        "n1": [("allow", "user")],
        "n2": [("edit", "user")],
        "n3": [("deny", "user")],
    }
    assert tasks["n2"]["decisions"][0]["args"] == {"text": "two, edited"}
    assert tasks["n2"]["output"] == "two, edited"


# -- without a terminal -------------------------------------------------------------------------


def test_ask_without_a_terminal_and_no_wait_denies_with_a_clear_message(setup: Setup) -> None:
    proc = setup.run("--ask", "note", "--no-wait", "--json")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "warning: no terminal is attached: calls that need approval will be denied" in (
        proc.stderr
    )
    tasks = json.loads(proc.stdout)["tasks"]
    assert tasks["n1"]["status"] == "denied"
    assert tasks["n1"]["error"] == (
        "denied by rule '--ask note': approval needed for tool 'note' but no terminal is "
        "attached (stdin is not a terminal)"
    )
    assert tasks["n2"]["status"] == "skipped"
    assert [c["tool"] for c in setup.calls()] == ["read"]


def test_approve_without_a_terminal_refuses_with_exit_2(setup: Setup) -> None:
    proc = setup.run("--approve")
    assert proc.returncode == 2
    assert "error: --approve needs a terminal to ask on, but stdin is not a terminal" in (
        proc.stderr
    )
    assert "Traceback" not in proc.stderr
    assert setup.calls() == []


# -- policy files (in-process) ------------------------------------------------------------------

cli = CliRunner()


def test_policy_file_denies_and_allows(setup: Setup) -> None:
    policy = setup.dir / "policy.json"
    policy.write_text(
        json.dumps(
            {
                "default": "allow",
                "rules": [
                    {
                        "tool": "note",
                        "args": {"text": "t*"},
                        "action": "deny",
                        "reason": "no t-notes",
                        "name": "no-t",
                    }
                ],
            }
        )
    )
    r = cli.invoke(
        app,
        [
            "run",
            str(setup.plan),
            "--tools",
            f"{setup.tools}:registry",
            "--policy",
            str(policy),
            "--json",
        ],
    )
    assert r.exit_code == 1, r.output
    tasks = json.loads(r.stdout)["tasks"]
    assert tasks["n2"]["status"] == "denied"
    assert tasks["n2"]["error"] == "denied by rule 'no-t': no t-notes"
    assert tasks["n3"]["status"] == "skipped"
    assert [c.get("text", c.get("key")) for c in setup.calls()] == ["k", "one K"]


def test_policy_file_then_ask_both_must_allow(setup: Setup) -> None:
    policy = setup.dir / "policy.json"
    policy.write_text(
        json.dumps(
            {
                "rules": [
                    {
                        "tool": "note",
                        "args": {"text": "two"},
                        "action": "deny",
                        "reason": "not two",
                    },
                    {"tool": "*", "action": "allow"},
                ]
            }
        )
    )
    flat = setup.dir / "flat.json"
    flat.write_text(
        json.dumps(
            {
                "goal": "flat",
                "tasks": [
                    {"id": "r", "tool": "read", "args": {"key": "k"}},
                    {"id": "n1", "tool": "note", "args": {"text": "one"}},
                    {"id": "n2", "tool": "note", "args": {"text": "two"}},
                ],
            }
        )
    )
    r = cli.invoke(
        app,
        [
            "run",
            str(flat),
            "--tools",
            f"{setup.tools}:registry",
            "--policy",
            str(policy),
            "--ask",
            "no*",
            "--ask",
            "zzz",
            "--no-wait",
            "--json",
            "--on-failure",
            "continue",
        ],
    )
    assert r.exit_code == 1
    assert "warning: --ask 'zzz' matches no tool" in r.stderr
    tasks = json.loads(r.stdout)["tasks"]
    # the file's catch-all allow does not silence --ask ...
    assert [d["decided_by"] for d in tasks["r"]["decisions"]] == ["rule #2 (allow any tool)"]
    assert [d["decision"] for d in tasks["n1"]["decisions"]] == ["allow", "deny"]
    assert "no terminal is attached" in tasks["n1"]["error"]
    # ... and a question never overrides the file's deny: it is not even asked
    assert [d["decision"] for d in tasks["n2"]["decisions"]] == ["deny"]
    assert tasks["n2"]["error"] == "denied by rule #1 (deny tool note if text=two): not two"
    assert [c["tool"] for c in setup.calls()] == ["read"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "not valid JSON"),
        ('{"rules": [{"tool": "note", "action": "perhaps"}]}', "rule #1: action: Input should be"),
    ],
)
def test_bad_policy_file_exits_2_before_anything_runs(
    setup: Setup, content: str, message: str
) -> None:
    policy = setup.dir / "bad.json"
    policy.write_text(content)
    r = cli.invoke(
        app,
        [
            "run",
            str(setup.plan),
            "--tools",
            f"{setup.tools}:registry",
            "--policy",
            str(policy),
            "--approve",
        ],
    )
    assert r.exit_code == 2
    assert r.stderr.startswith(f"error: policy file {str(policy)!r}: ")
    assert message in r.stderr
    assert setup.calls() == []


def test_missing_policy_file_exits_2(setup: Setup) -> None:
    r = cli.invoke(
        app,
        [
            "run",
            str(setup.plan),
            "--tools",
            f"{setup.tools}:registry",
            "--policy",
            str(setup.dir / "nope.json"),
        ],
    )
    assert r.exit_code == 2
    assert "cannot read it" in r.stderr
    assert setup.calls() == []


# -- the line reader and the terminal asker, in-process -----------------------------------------


@pytest.fixture
def pipe_pair() -> Iterator[tuple[TextIO, TextIO]]:
    rfd, wfd = os.pipe()
    with open(rfd, encoding="utf-8") as reading, open(wfd, "w", encoding="utf-8") as writing:
        yield reading, writing


@pytest.mark.anyio
async def test_line_reader_keeps_a_withdrawn_read_and_drops_stale_lines(
    pipe_pair: tuple[TextIO, TextIO],
) -> None:
    stream, pipe = pipe_pair
    reader = LineReader(stream)
    withdrawn = anyio.CancelScope()

    async def ask() -> None:
        with withdrawn:
            await reader.readline(since=time.monotonic())

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        await anyio.wait_all_tasks_blocked()  # a question waits for its answer...
        withdrawn.cancel()  # ... and is withdrawn before any
    assert withdrawn.cancelled_caught
    pipe.write("stale\n")
    pipe.flush()
    # wall-clock time: the withdrawn read, in a thread of its own, takes the line meant for
    # nobody (when it does so is what makes the line stale; nothing here can wait on it)
    await anyio.sleep(0.5)
    since = time.monotonic()

    async def answer_later() -> None:
        await anyio.wait_all_tasks_blocked()  # the next question waits for its answer
        pipe.write("fresh\n")
        pipe.flush()

    async with anyio.create_task_group() as tg:
        tg.start_soon(answer_later)
        assert await reader.readline(since=since) == "fresh"
    pipe.close()
    assert await reader.readline() is None  # end of input


@pytest.mark.anyio
async def test_terminal_asker_denies_at_end_of_input() -> None:
    shown = io.StringIO()
    asker = TerminalAsker(Console(file=shown, width=200), LineReader(io.StringIO("")))
    registry = dagagent.Registry()
    called: list[str] = []

    @registry.tool
    def note(text: str) -> str:
        called.append(text)
        return text

    result = await dagagent.execute(
        {"goal": "g", "tasks": [{"id": "n", "tool": "note", "args": {"text": "hi"}}]},
        registry,
        interceptors=[Policy([Rule(action="ask", tool="note")], ask=asker)],
    )
    n = result.tasks["n"]
    assert n.status is dagagent.TaskStatus.DENIED
    assert n.error == "denied by user: no answer (end of input)"
    assert "approval needed: task 'n' wants to call 'note' (rule #1 (ask tool note))" in (
        shown.getvalue()
    )
    assert called == []
