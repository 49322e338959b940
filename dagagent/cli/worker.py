"""``dagagent worker``: serve a registry's tools to runs on Temporal (``--executor temporal``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from ..errors import ConfigError
from ._app import app, err, guard
from .options import (
    McpOpt,
    OtelOpt,
    PayloadStoreOpt,
    TaskQueueOpt,
    TemporalAddressOpt,
    TemporalApiKeyOpt,
    TemporalNamespaceOpt,
    TemporalTlsCaOpt,
    TemporalTlsCertOpt,
    TemporalTlsKeyOpt,
    TemporalTlsOpt,
    ToolsOpt,
    temporal_options,
    temporal_security,
)
from .signals import run_stoppable
from .tools import load_tools

if TYPE_CHECKING:
    from ..tools import Registry

__all__: list[str] = []


@app.command("worker")
@guard
def worker_cmd(
    ctx: typer.Context,
    tools: ToolsOpt = None,
    mcp: McpOpt = None,
    temporal_address: TemporalAddressOpt = None,
    task_queue: TaskQueueOpt = None,
    temporal_namespace: TemporalNamespaceOpt = None,
    payload_store: PayloadStoreOpt = None,
    temporal_api_key: TemporalApiKeyOpt = None,
    temporal_tls: TemporalTlsOpt = None,
    temporal_tls_cert: TemporalTlsCertOpt = None,
    temporal_tls_key: TemporalTlsKeyOpt = None,
    temporal_tls_ca: TemporalTlsCaOpt = None,
    interceptors_spec: str | None = typer.Option(
        None,
        "--interceptors",
        metavar="MODULE:ATTR",
        help="Interceptors every tool call of this worker goes through (approval rules, "
        "redaction, tracing): ATTR is a list of them, or one.",
    ),
    max_activities: int = typer.Option(
        100,
        "--max-activities",
        min=1,
        metavar="N",
        help="Tool calls (activities) this worker runs at once.",
    ),
    otel: OtelOpt = False,
) -> None:
    """Serve the tools of --tools (and --mcp) to runs and solves on Temporal (run/ask
    --executor temporal): the worker runs their scheduling, their tool calls and a solve's
    model calls (with the API key of its own environment: OPENAI_API_KEY, ...) until stopped
    (Ctrl-C). Start any number, on any machines that reach the server and share the payload
    store. With --otel, the spans of the tasks it runs (and of a solve's model calls) join
    the trace of their run or solve, when its driver traces too. Exit 10 if the server cannot
    be reached."""
    import logging

    from ..approval import run_policies
    from ..executors.temporal import serve
    from ..workflows.temporal_solve import worker_parts
    from .otel import configure_otel

    if otel:
        configure_otel()
    registry: Registry = load_tools(tools, mcp)
    interceptors = load_interceptors(interceptors_spec) if interceptors_spec else []
    # A tool that fails is the run's record, not the worker's log: Temporal's SDK would log
    # each failed call with its traceback.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)

    def ready(line: str) -> None:
        err.print(f"{line} (Ctrl-C stops it)", markup=False, highlight=False)

    options = temporal_options(temporal_address, temporal_namespace, task_queue, payload_store)
    options.update(temporal_security(ctx, temporal=True))

    async def main() -> None:
        await serve(
            registry,
            max_concurrent_activities=max_activities,
            interceptors=interceptors,
            run_policies=run_policies,
            on_ready=ready,
            **worker_parts(registry),
            **options,
        )

    run_stoppable(main)


def load_interceptors(spec: str) -> list[Any]:
    """The interceptors ``--interceptors MODULE:ATTR`` names: a list (or tuple) of them, or
    one (a :class:`~dagagent.approval.Policy`, ``redacting(...)``, any ``(call,
    call_next)`` function)."""
    import importlib

    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ConfigError(f"--interceptors must look like MODULE:ATTR, got {spec!r}")
    try:
        module = importlib.import_module(target)
    except ImportError as exc:
        raise ConfigError(f"--interceptors: cannot import {target!r}: {exc}") from None
    if not hasattr(module, attr):
        raise ConfigError(f"--interceptors: module {target!r} has no {attr!r}")
    found = getattr(module, attr)
    listed = list(found) if isinstance(found, (list, tuple)) else [found]
    for i in listed:
        if not callable(i):
            raise ConfigError(
                f"--interceptors {spec}: {i!r} is not an interceptor (a callable taking the "
                "call and call_next)"
            )
    return listed
