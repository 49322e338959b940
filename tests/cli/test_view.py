"""``dagagent ui``, ``dagagent report`` and ``show --timeline``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from eventually import wait_until
from typer.testing import CliRunner

from dagagent.cli import _app as cli_app, app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FAILING = str(EXAMPLES / "failing.json")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DAGAGENT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGAGENT_DEMO_LATENCY", "0")
    monkeypatch.delenv("DAGAGENT_TOOLS", raising=False)
    monkeypatch.setattr(cli_app.out, "_width", 120)
    return tmp_path / "home"


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def test_report_writes_one_html_file_and_show_prints_a_timeline(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli("run", FAILING).exit_code == 1
    out = tmp_path / "run.html"
    r = cli("report", "--last", "--out", str(out))
    assert r.exit_code == 0, r.output
    html = out.read_text()
    assert html.startswith("<!doctype html>") and "<script>" in html and "<style>" in html
    assert 'class="node s-failed' in html
    monkeypatch.chdir(tmp_path)
    r = cli("report", "--last")
    assert r.exit_code == 0
    assert len(list(tmp_path.glob("run-*.html"))) == 1
    r = cli("show", "--last", "--timeline")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert "critical path" in lines[-2] and "█" in r.stdout
    assert all(len(line) <= 120 for line in lines)
    assert cli("report", "abcd12345678").exit_code == 4
    assert (
        cli("report", "--last", "--out", str(tmp_path / "no" / "such" / "dir.html")).exit_code == 2
    )


def _get(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=5)
    except httpx.TransportError:
        return None


@pytest.mark.slow
def test_ui_serves_the_store_on_loopback_and_warns_for_another_host(
    home: Path, tmp_path: Path
) -> None:
    assert cli("run", FAILING).exit_code == 1
    env = {**os.environ, "DAGAGENT_HOME": str(home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagagent", "ui", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "http://127.0.0.1:" in line, line
        url = line.split()[3]
        r = wait_until(lambda: _get(url), "the viewer answers", timeout=20)
        assert r.status_code == 200 and "run-row" in r.text
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
    exposed = subprocess.Popen(
        [sys.executable, "-m", "dagagent", "ui", "--host", "0.0.0.0", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert exposed.stderr is not None
        warning = exposed.stderr.readline()
        assert warning.startswith("warning: listening on 0.0.0.0") and "no login" in warning
    finally:
        exposed.send_signal(signal.SIGINT)
        exposed.communicate(timeout=20)
