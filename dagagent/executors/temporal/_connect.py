"""Reaching the Temporal server, and seeing whether workers serve a task queue."""

from __future__ import annotations

import asyncio
import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.runtime import (
    LogForwardingConfig,
    LoggingConfig,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)

from ...errors import ClusterError, ConfigError
from ._payloads import DEFAULT_INLINE_BYTES, data_converter, payload_driver

if TYPE_CHECKING:
    from temporalio.converter import StorageDriver
    from temporalio.service import TLSConfig

__all__ = [
    "DEFAULT_ADDRESS",
    "DEFAULT_NAMESPACE",
    "DEFAULT_TASK_QUEUE",
    "connect",
    "has_workers",
    "worker_hint",
]

DEFAULT_ADDRESS = "localhost:7233"
DEFAULT_NAMESPACE = "default"
DEFAULT_TASK_QUEUE = "dagagent"


def check_address(address: str) -> str:
    """``HOST:PORT``, or a :class:`ConfigError` saying what an address looks like."""
    if not isinstance(address, str) or not address.strip():
        raise ConfigError(f"the Temporal address must be HOST:PORT, not {address!r}")
    address = address.strip()
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(
            f"the Temporal address must be HOST:PORT (like localhost:7233), not {address!r}"
        )
    return address


@functools.cache
def runtime() -> Runtime:
    """The SDK runtime of dagagent's clients (and so of its workers): the SDK core's own log
    lines (a call it retried while the server did not answer, say) go to Python's logging,
    logger ``temporalio.core``, warnings and up, where the command line shows them on stderr
    one escaped line each (or as JSON), instead of the core writing them to stdout, which
    carries a command's output (``--json``), in colours of its own. One for the process."""
    forwarded = LogForwardingConfig(
        logger=logging.getLogger("temporalio.core"), prepend_target_on_message=False
    )
    telemetry = TelemetryConfig(
        logging=LoggingConfig(
            filter=TelemetryFilter(core_level="WARN", other_level="ERROR"), forwarding=forwarded
        )
    )
    return Runtime(telemetry=telemetry)


async def connect(
    address: str,
    namespace: str,
    payloads: StorageDriver | str | Path | None,
    *,
    inline_bytes: int = DEFAULT_INLINE_BYTES,
    timeout_s: float = 10.0,
    tls: bool | TLSConfig | None = None,
    api_key: str | None = None,
) -> Client:
    """A client of the server at ``address``, whose payloads over ``inline_bytes`` go to
    ``payloads``; :class:`ClusterError` when the server cannot be reached in ``timeout_s``.
    ``tls``: ``True`` for TLS with the system's root certificates, a ``TLSConfig`` for one's
    own (a CA, a client certificate and key); ``None``: TLS when there is an ``api_key``
    (sent as a bearer token, as Temporal Cloud wants it), else none."""
    address = check_address(address)
    converter = data_converter(payload_driver(payloads), inline_bytes)
    failure: str | None = None
    with anyio.move_on_after(timeout_s):
        try:
            return await Client.connect(
                address,
                namespace=namespace,
                data_converter=converter,
                tls=tls,
                api_key=api_key,
                runtime=runtime(),
            )
        except Exception as exc:  # the SDK raises RuntimeError with the transport's reason
            failure = " ".join(str(exc).split()) or type(exc).__name__
    if failure is None:
        why = f"no answer within {timeout_s:g} s"
    elif "ConnectionRefused" in failure or "Connection refused" in failure:
        why = "the connection was refused (no server listens there: for development, "
        why += "`temporal server start-dev` starts one)"
    else:
        why = failure if api_key is None else failure.replace(api_key, "***")
        if (tls or (tls is None and api_key)) and "InvalidContentType" in failure:
            why += (
                "; the server did not answer over TLS (TLS is on with --temporal-tls, its "
                "files, or an API key: --no-temporal-tls turns it off for a server without it)"
            )
    raise ClusterError(
        f"cannot reach the Temporal server at {address} (namespace {namespace!r}): {why}"
    )


async def has_workers(client: Client, task_queue: str) -> bool:
    """Whether some worker polls ``task_queue`` for workflow tasks and for activities (the
    server is asked about both at once: one round trip, not two)."""
    service = client.workflow_service
    answers = await asyncio.gather(
        *(
            service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=client.namespace,
                    task_queue=TaskQueue(name=task_queue),
                    task_queue_type=kind,
                )
            )
            for kind in (
                TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
                TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
            )
        )
    )
    return all(answer.pollers for answer in answers)


def worker_hint(address: str, task_queue: str) -> str:
    return (
        f"start one: dagagent worker --tools MODULE:ATTR --temporal-address {address} "
        f"--task-queue {task_queue}"
    )
