"""A worker: serves a registry's tools, and the run workflow, on one task queue.

Start any number of them, on any machines that reach the server (and share the payload
store): each polls the task queue for workflow tasks (the scheduling, cheap) and activity
tasks (the tool calls). ``dagagent worker`` is :func:`serve` on the command line.

With OpenTelemetry's providers set in the worker's process (``dagagent worker --otel``, or
the application's own), the spans of the tasks it runs, and of their model calls, join the
trace of their run (see ``docs/opentelemetry.md``); without, it does no span work.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from ...tools import connected
from ._activities import Activities, AgentModels, Conversing, RunPolicies, worker_identity
from ._connect import DEFAULT_ADDRESS, DEFAULT_NAMESPACE, DEFAULT_TASK_QUEUE, connect
from ._payloads import DEFAULT_INLINE_BYTES
from ._workflow import RunWorkflow

if TYPE_CHECKING:
    from temporalio.client import Client
    from temporalio.converter import StorageDriver
    from temporalio.service import TLSConfig

    from ...runner import Interceptor
    from ...tools import Registry

__all__ = ["STICKY_S", "running_worker", "serve"]

#: Seconds a run's next workflow task waits for the worker that holds the run in its cache.
STICKY_S = 2.0
#: How long the SDK may hold back a heartbeat an activity gave (seconds).
HEARTBEAT_FLUSH_S = 0.25


@contextlib.asynccontextmanager
async def running_worker(
    registry: Registry,
    *,
    address: str = DEFAULT_ADDRESS,
    namespace: str = DEFAULT_NAMESPACE,
    task_queue: str = DEFAULT_TASK_QUEUE,
    payloads: StorageDriver | str | Path | None = None,
    inline_bytes: int = DEFAULT_INLINE_BYTES,
    max_concurrent_activities: int = 100,
    identity: str | None = None,
    connect_timeout_s: float = 10.0,
    client: Client | None = None,
    tls: bool | TLSConfig | None = None,
    api_key: str | None = None,
    interceptors: Sequence[Interceptor] = (),
    run_policies: RunPolicies | None = None,
    workflows: Sequence[type] = (),
    activities: Sequence[Callable[..., Any]] = (),
    agents: AgentModels | None = None,
    conversing: Conversing | None = None,
) -> AsyncIterator[Worker]:
    """A worker serving ``registry`` on ``task_queue`` while the block runs; on exit it
    stops, its calls cancelled (the server gives them to other workers).

    ``tls`` and ``api_key``: how a production cluster is reached (as
    :class:`~dagagent.executors.temporal.TemporalExecutor` takes them); or ``client``, a
    client connected as one likes, whose data converter is
    :func:`~dagagent.executors.temporal.data_converter`'s: then ``address``, ``namespace``,
    ``payloads``, ``inline_bytes``, ``tls`` and ``api_key`` are the client's business.
    ``interceptors``: every tool call this worker makes goes through them, as through a
    local run's (approval rules, redaction, tracing, caching), and their decisions are on
    the task's record (interceptors with limits are refused: a limit counts a run's calls,
    and a worker sees one task's). ``run_policies``: how it applies the approval rules a run
    carries (``run --policy``, ``--ask``): :func:`dagagent.approval.run_policies`; without
    it, the tasks of such a run fail saying so. ``agents`` and ``conversing``: the model of
    a solve's agent tasks, and the tools that read a session's turns
    (:func:`dagagent.workflows.temporal_solve.worker_parts` gives both). Raises
    :class:`~dagagent.errors.ClusterError` when the server cannot be reached."""
    if client is None:
        client = await connect(
            address,
            namespace,
            payloads,
            inline_bytes=inline_bytes,
            timeout_s=connect_timeout_s,
            tls=tls,
            api_key=api_key,
        )
    identity = identity or worker_identity()
    tool_calls = Activities(
        registry, task_queue, identity, interceptors, run_policies, agents, conversing
    )
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[RunWorkflow, *workflows],
        activities=[*tool_calls.definitions(), *activities],
        max_concurrent_activities=max_concurrent_activities,
        identity=identity,
        # A run's workflow tasks go to the worker that ran its last one while it answers in
        # this time; when that worker is gone, to any other, sooner than the SDK's 10 s.
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=STICKY_S),
        # The activities pace their own heartbeats (four per heartbeat timeout, and at once
        # when a model call starts or ends); the SDK would hold each back to 80 % of the
        # timeout, so a worker busy for a fifth of it was taken for lost, and the record of a
        # call under way reached the server seconds late.
        max_heartbeat_throttle_interval=timedelta(seconds=HEARTBEAT_FLUSH_S),
        # dagagent's modules hold no state a workflow could change: imported once, not per run
        workflow_runner=SandboxedWorkflowRunner(
            restrictions=SandboxRestrictions.default.with_passthrough_modules("dagagent")
        ),
    )

    async def run() -> None:
        # Not cancelled with the block: it ends when shutdown() below has stopped it (a
        # cancelled run() would never tell shutdown() it is complete).
        with anyio.CancelScope(shield=True):
            await worker.run()

    async with connected(list(registry)), anyio.create_task_group() as tg:
        tg.start_soon(run)
        try:
            yield worker
        finally:
            # Stopped, or cancelled (a stop signal): either way the worker shuts down whole,
            # its calls cancelled and handed back to the server, before the block ends.
            with anyio.CancelScope(shield=True):
                await worker.shutdown()


async def serve(
    registry: Registry,
    *,
    address: str = DEFAULT_ADDRESS,
    namespace: str = DEFAULT_NAMESPACE,
    task_queue: str = DEFAULT_TASK_QUEUE,
    payloads: StorageDriver | str | Path | None = None,
    inline_bytes: int = DEFAULT_INLINE_BYTES,
    max_concurrent_activities: int = 100,
    identity: str | None = None,
    connect_timeout_s: float = 10.0,
    client: Client | None = None,
    tls: bool | TLSConfig | None = None,
    api_key: str | None = None,
    interceptors: Sequence[Interceptor] = (),
    run_policies: RunPolicies | None = None,
    on_ready: Callable[[str], None] | None = None,
    workflows: Sequence[type] = (),
    activities: Sequence[Callable[..., Any]] = (),
    agents: AgentModels | None = None,
    conversing: Conversing | None = None,
) -> None:
    """Run a worker (see :func:`running_worker`) until cancelled; ``on_ready`` is told, in
    a line of text, once it serves the task queue."""
    identity = identity or worker_identity()
    async with running_worker(
        registry,
        address=address,
        namespace=namespace,
        task_queue=task_queue,
        payloads=payloads,
        inline_bytes=inline_bytes,
        max_concurrent_activities=max_concurrent_activities,
        identity=identity,
        connect_timeout_s=connect_timeout_s,
        client=client,
        tls=tls,
        api_key=api_key,
        interceptors=interceptors,
        run_policies=run_policies,
        workflows=workflows,
        activities=activities,
        agents=agents,
        conversing=conversing,
    ):
        if on_ready is not None:
            n = len(registry)
            on_ready(
                f"worker {identity} serves {n} tool{'s' if n != 1 else ''} on task queue "
                f"{task_queue!r} of the Temporal server at {address}"
            )
        await anyio.sleep_forever()
