"""``dagagent worker``: serve a registry's tools to runs on Temporal (``--executor temporal``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from ._app import app, err, guard
from .options import (
    McpOpt,
    PayloadStoreOpt,
    TaskQueueOpt,
    TemporalAddressOpt,
    TemporalNamespaceOpt,
    ToolsOpt,
    temporal_options,
)
from .signals import run_stoppable
from .tools import load_tools

if TYPE_CHECKING:
    from ..tools import Registry

__all__: list[str] = []


@app.command("worker")
@guard
def worker_cmd(
    tools: ToolsOpt = None,
    mcp: McpOpt = None,
    temporal_address: TemporalAddressOpt = None,
    task_queue: TaskQueueOpt = None,
    temporal_namespace: TemporalNamespaceOpt = None,
    payload_store: PayloadStoreOpt = None,
    max_activities: int = typer.Option(
        100,
        "--max-activities",
        min=1,
        metavar="N",
        help="Tool calls (activities) this worker runs at once.",
    ),
) -> None:
    """Serve the tools of --tools (and --mcp) to runs and solves on Temporal (run/ask
    --executor temporal): the worker runs their scheduling, their tool calls and a solve's
    model calls (with the API key of its own environment: OPENAI_API_KEY, ...) until stopped
    (Ctrl-C). Start any number, on any machines that reach the server and share the payload
    store. Exit 10 if the server cannot be reached."""
    import logging

    from ..executors.temporal import serve
    from ..workflows.temporal_solve import worker_parts

    registry: Registry = load_tools(tools, mcp)
    # A tool that fails is the run's record, not the worker's log: Temporal's SDK would log
    # each failed call with its traceback.
    logging.getLogger("temporalio.activity").setLevel(logging.ERROR)

    def ready(line: str) -> None:
        err.print(f"{line} (Ctrl-C stops it)", markup=False, highlight=False)

    options = temporal_options(temporal_address, temporal_namespace, task_queue, payload_store)

    async def main() -> None:
        await serve(
            registry,
            max_concurrent_activities=max_activities,
            on_ready=ready,
            **worker_parts(registry),
            **options,
        )

    run_stoppable(main)
