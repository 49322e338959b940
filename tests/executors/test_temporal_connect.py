"""Reaching a production Temporal cluster from the command line: ``--temporal-api-key``
(``$TEMPORAL_API_KEY``) and ``--temporal-tls`` with its files, shared by every command that
takes the Temporal options and by ``dagagent worker``. What can be checked without a cluster
is: the options are read and reach the client (TLS on against the development server, which
has none, fails at once, saying so), files that cannot be read are named, and the key is
never shown nor recorded (in the run store, in ``show``, in the workflow's history).
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

import dagagent

pytest.importorskip("temporalio")

from dagagent.executors.temporal import TemporalExecutor, workflow_id

from .temporal_fixtures import TOOLS, Workers

KEY = "tmprl-key-never-shown-7f3a9c"
PLAN = {"goal": "g", "tasks": [{"id": "a", "tool": "add", "args": {"a": 1, "b": 2}}]}


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(PLAN))
    return path


def _run(plan_file: Path, *more: str, env: dict[str, str] | None = None) -> object:
    return CliRunner().invoke(
        dagagent.cli.app, ["run", str(plan_file), "--tools", TOOLS, *more], env=env
    )


def test_tls_options_need_the_temporal_executor_a_key_in_the_environment_does_not(
    plan_file: Path, tmp_path: Path
) -> None:
    for option in (
        ["--temporal-tls"],
        ["--temporal-tls-ca", "ca.pem"],
        ["--temporal-api-key", KEY],
    ):
        result = CliRunner().invoke(
            dagagent.cli.app,
            ["run", str(plan_file), "--tools", TOOLS, "--store", str(tmp_path / "r.db"), *option],
        )
        assert result.exit_code == 2, result.output
        assert f"{option[0]} needs --executor temporal" in result.output
        assert KEY not in result.output
    # a key kept in the environment is for the runs on Temporal; a local run goes on
    local = CliRunner().invoke(
        dagagent.cli.app,
        ["run", str(plan_file), "--tools", TOOLS, "--store", str(tmp_path / "r.db")],
        env={"TEMPORAL_API_KEY": KEY},
    )
    assert local.exit_code == 0, local.output


@pytest.mark.parametrize(
    "command",
    [
        ["run", "PLAN", "--tools", TOOLS, "--executor", "temporal"],
        ["ask", "g", "--tools", TOOLS, "--model", "openai:m", "--executor", "temporal"],
        ["attach", "abcdef123456"],
        ["worker", "--tools", TOOLS],
    ],
    ids=["run", "ask", "attach", "worker"],
)
def test_a_tls_file_that_cannot_be_read_is_named_exit_2(
    command: list[str], plan_file: Path, tmp_path: Path
) -> None:
    command = [str(plan_file) if c == "PLAN" else c for c in command]
    store = [] if command[0] == "worker" else ["--store", str(tmp_path / "r.db")]
    missing = tmp_path / "no-such-ca.pem"
    result = CliRunner().invoke(
        dagagent.cli.app,
        [*command, *store, "--temporal-tls-ca", str(missing)],
        env={"OPENAI_API_KEY": "sk-x"},
    )
    assert result.exit_code == 2, result.output
    assert f"--temporal-tls-ca: cannot read {missing}" in result.output
    assert "Traceback" not in result.output
    cert = tmp_path / "client.pem"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    alone = CliRunner().invoke(
        dagagent.cli.app,
        [*command, *store, "--temporal-tls-cert", str(cert)],
        env={"OPENAI_API_KEY": "sk-x"},
    )
    assert alone.exit_code == 2, alone.output
    assert "--temporal-tls-cert and --temporal-tls-key go together" in alone.output


@pytest.mark.slow
def test_tls_reaches_the_client_of_a_run_and_of_a_worker(
    workers: Workers, plan_file: Path, tmp_path: Path
) -> None:
    """TLS on against the development server (which has none): the client tries TLS and
    fails at once, exit 10, saying how to turn it off; a key in the environment turns TLS on
    by itself (as Temporal Cloud wants it), and is not in the message."""
    where = ["--executor", "temporal", "--temporal-address", workers.address]
    store = ["--store", str(tmp_path / "r.db")]
    for more, env in (
        (["--temporal-tls"], None),
        ([], {"TEMPORAL_API_KEY": KEY}),
    ):
        result = _run(plan_file, *where, *store, *more, env=env)
        assert result.exit_code == 10, result.output  # type: ignore[attr-defined]
        out = result.output  # type: ignore[attr-defined]
        assert f"cannot reach the Temporal server at {workers.address}" in out
        assert "did not answer over TLS" in out and "--no-temporal-tls" in out
        assert KEY not in out
    worker = CliRunner().invoke(
        dagagent.cli.app,
        ["worker", "--tools", TOOLS, "--temporal-address", workers.address, "--temporal-tls"],
    )
    assert worker.exit_code == 10, worker.output
    assert "did not answer over TLS" in worker.output


@pytest.mark.slow
def test_an_api_key_is_sent_and_never_recorded(
    own_workers: Workers, plan_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker and a run with ``$TEMPORAL_API_KEY`` (``--no-temporal-tls``: the development
    server has no TLS, and ignores the key): the run succeeds on the worker; the key is in
    neither the run store's file, nor ``show``, nor the command's output, nor the workflow's
    history; from Python, the client carries it."""
    monkeypatch.setenv("TEMPORAL_API_KEY", KEY)
    own_workers.start(1, "--no-temporal-tls")
    db = tmp_path / "runs.db"
    result = _run(
        plan_file,
        "--executor", "temporal", "--temporal-address", own_workers.address,
        "--task-queue", own_workers.queue, "--payload-store", str(own_workers.payloads),
        "--no-temporal-tls", "--store", str(db), "--json",
    )  # fmt: skip
    out = result.output  # type: ignore[attr-defined]
    assert result.exit_code == 0, out  # type: ignore[attr-defined]
    assert KEY not in out
    run_id = json.loads(result.stdout)["run_id"]  # type: ignore[attr-defined]
    shown = CliRunner().invoke(dagagent.cli.app, ["show", run_id, "--store", str(db), "--json"])
    assert shown.exit_code == 0 and KEY not in shown.output
    for path in tmp_path.rglob("runs.db*"):
        assert KEY.encode() not in path.read_bytes(), path
    with dagagent.RunStore(db) as st:
        assert KEY not in json.dumps(st.get_run(run_id).context, default=str)

    async def history() -> tuple[str | None, bytes]:
        ex = TemporalExecutor(own_workers.address, api_key=KEY, tls=False)
        async with ex.session():
            assert ex.client is not None
            events = await ex.client.get_workflow_handle(workflow_id(run_id)).fetch_history()
            return ex.client.api_key, events.to_json().encode()

    carried, events = anyio.run(history)
    assert carried == KEY
    assert KEY.encode() not in events
    assert b"dagagent.run" in events  # the run's history, read with the key
