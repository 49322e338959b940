"""Stop signals in the commands that do not run a plan: ``plan``, ``replan`` and ``tools``
waiting on a server that never answers end as ``run`` does (the interrupt message, exit 130,
one JSON object with ``--json``), for Ctrl-C, SIGTERM and SIGHUP alike; they used to keep
Python's defaults (SIGTERM and SIGHUP killed them without a word, ``--json`` printed nothing)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")]


class SilentServer:
    """A loopback server that accepts connections, reads nothing and never answers; ``called``
    is set once a client has connected (the command is past its start-up, waiting)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.called = threading.Event()
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.held.append(conn)
            self.called.set()

    def close(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


def _dagagent(home: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dagagent", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            "DAGAGENT_HOME": str(home),
            "OPENAI_API_KEY": "sk-test",
            "NO_COLOR": "1",
        },
        # Ctrl-C reaches the process even when these tests run where SIGINT is ignored (a
        # background job): an ignored signal would stay ignored across exec.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _recorded_run(home: Path) -> None:
    plan = home / "plan.json"
    task = {"id": "a", "tool": "calculate", "args": {"expression": "1 + 2"}}
    plan.write_text(json.dumps({"tasks": [task]}))
    proc = _dagagent(home, "run", str(plan))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, (out, err)


@pytest.mark.parametrize(
    ("command", "sig"),
    [
        ("plan", "SIGINT"),
        ("plan", "SIGTERM"),
        ("plan", "SIGHUP"),
        ("replan", "SIGTERM"),
        ("tools", "SIGINT"),
        ("tools", "SIGHUP"),
    ],
)
def test_a_stop_signal_ends_a_command_waiting_on_a_server_with_its_message_and_130(
    tmp_path: Path, silent: SilentServer, command: str, sig: str
) -> None:
    url = f"http://127.0.0.1:{silent.port}"
    model = ["--model", "openai:m", "--base-url", f"{url}/v1"]
    if command == "plan":
        args = ["plan", "add two numbers", *model]
    elif command == "replan":
        _recorded_run(tmp_path)
        args = ["replan", "--last", *model]
    else:
        args = ["tools", "--mcp", f"far={url}/mcp"]
    proc = _dagagent(tmp_path, *args, "--json")
    try:
        assert silent.called.wait(60), "the command never reached the server"
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (out, err)
    assert err.splitlines()[-1] == "interrupted" and "Traceback" not in err
    # --json: stdout still holds one JSON object, the error with its exit code
    doc = json.loads(out)
    assert doc["ok"] is False
    assert doc["error"]["code"] == "Interrupted" and doc["error"]["exit_code"] == 130


# A Ctrl-C that lands while the command line is still importing typer and rich. The import
# is cut where a real Ctrl-C would cut it: a finder raises KeyboardInterrupt when typer's
# turn comes (the dagagent package itself is imported by then, as in the console script).
CUT_IMPORT = """
import sys

class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "typer":
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, CtrlC())
sys.argv = ["dagagent", *sys.argv[1:]]
from dagagent.__main__ import main

main()
"""


@pytest.mark.parametrize("args", [["--help"], ["validate", "plan.json"]])
def test_ctrl_c_during_the_command_lines_imports_is_an_interrupt_not_a_traceback(
    tmp_path: Path, args: list[str]
) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CUT_IMPORT, *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "interrupted\n")
