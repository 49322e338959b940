"""``--otel``: a real ``dagagent run`` process sends its spans and metrics over OTLP/HTTP to a
loopback collector the test starts, configured only by the standard ``OTEL_*`` variables.

Real processes, as the point is the process: OpenTelemetry's providers are global to a process
and set once, what is sent goes out at the process's exit, and the SDK's absence needs a fresh
interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from otel_support import Collector  # tests/ is on sys.path under pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

pytestmark = pytest.mark.slow


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.server.shutdown()
    c.server.server_close()


def test_run_with_otel_exports_its_spans_and_metrics(collector: Collector, tmp_path: Path) -> None:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "DAGAGENT_TOOLS"
    }
    env.update(
        DAGAGENT_HOME=str(tmp_path / "home"),
        DAGAGENT_DEMO_LATENCY="0",
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
        OTEL_SERVICE_NAME="weather-service",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "dagagent", "run", str(EXAMPLES / "weather.json"), "--otel"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    spans = collector.spans()
    names = sorted(name for name, _, _ in spans)
    assert names.count("invoke_workflow dagagent.run") == 1
    assert names.count("execute_tool get_weather") == 3
    assert {service for _, _, service in spans} == {"weather-service"}
    (run,) = [a for n, a, _ in spans if n == "invoke_workflow dagagent.run"]
    assert run["dagagent.run.status"].string_value == "succeeded"
    assert {"dagagent.tasks", "dagagent.task.duration"} <= collector.metric_names()


def test_otel_without_the_sdk_says_how_to_get_it(tmp_path: Path) -> None:
    (tmp_path / "opentelemetry").mkdir()
    (tmp_path / "opentelemetry" / "__init__.py").write_text("raise ImportError('not here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    env["DAGAGENT_HOME"] = str(tmp_path / "home")
    proc = subprocess.run(
        [sys.executable, "-m", "dagagent", "run", str(EXAMPLES / "weather.json"), "--otel"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'dagagent[otel]'" in proc.stderr and "Traceback" not in proc.stderr


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "DAGAGENT_TOOLS"
    }
    env.update(DAGAGENT_HOME=str(tmp_path / "home"), DAGAGENT_DEMO_LATENCY="0", **extra)
    return env


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens there once the socket is closed


def test_otel_without_a_collector_warns_once_and_exits_promptly(tmp_path: Path) -> None:
    env = _env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{_closed_port()}")
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "dagagent", "run", str(EXAMPLES / "weather.json"), "--otel"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "warning" in line.lower()]
    assert len(warnings) == 1, proc.stderr
    assert warnings[0].startswith("warning: --otel: the traces and metrics could not all be sent")
    assert "connection refused" in warnings[0] and env["OTEL_EXPORTER_OTLP_ENDPOINT"] in warnings[0]
    assert "Transient error" not in proc.stderr and "Traceback" not in proc.stderr
    # The exporters retry for 10 s each (their default timeout): the command does not wait.
    assert took < 9, took


def test_otel_traces_exporter_console_writes_spans_to_stderr(tmp_path: Path) -> None:
    env = _env(tmp_path, OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="none")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dagagent",
            "run",
            str(EXAMPLES / "weather.json"),
            "--otel",
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "succeeded"  # stdout is the result alone
    assert proc.stderr.count('"name": "execute_tool get_weather"') == 3
    assert '"name": "invoke_workflow dagagent.run"' in proc.stderr
    assert "warning" not in proc.stderr


def test_an_unknown_exporter_is_a_clear_error(tmp_path: Path) -> None:
    env = _env(tmp_path, OTEL_TRACES_EXPORTER="jaegerish")
    proc = subprocess.run(
        [sys.executable, "-m", "dagagent", "run", str(EXAMPLES / "weather.json"), "--otel"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "OTEL_TRACES_EXPORTER='jaegerish': no such exporter" in proc.stderr
    assert "console" in proc.stderr and "Traceback" not in proc.stderr
