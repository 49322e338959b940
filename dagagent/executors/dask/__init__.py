"""Scale-out: tool calls run on Dask workers; everything else stays on the driver.

:class:`DaskExecutor` schedules like :class:`~dagagent.executors.dataflow.DataflowExecutor`
(a task starts as soon as its own dependencies have succeeded) and differs only in its
*invoker*: the call ``tool.fn(**validated_args)`` is submitted to a Dask cluster and the
driver awaits the Dask future on its own event loop. References, argument validation,
interceptors, timeouts, retries, records and events stay in the
:class:`~dagagent.runner.TaskRunner` on the driver.

- :mod:`._executor`: the executor and its **session**: the client and cluster it connects to
  or starts, shared by the runs open at once;
- :mod:`._shipping`: **shipping** tools to the workers: pickled by name or by value, loaded
  once per worker, and checked on every worker before a run starts;
- :mod:`._calls`: the **calls** through a session: submitted in batches, small results pushed
  back with their completion, a cancelled call's future cancelled on the cluster;
- :mod:`._worker`: what runs **on the workers**: a tool's call, and what it raised returned
  as a value;
- :mod:`._crashes`: **lost workers**: a dead worker, a lost scheduler or a task cancelled on
  the cluster told from a failing tool, and the calls a dead worker took with it run again
  elsewhere, one at a time, to find the one that kills.

Further behaviour:

- **Tools bound to a connection** (:attr:`~dagagent.tools.Tool.connection`, tools from MCP
  servers) are called on the driver, which holds their sessions; they are not shipped.
- **Sync and async tools.** Sync tools run in a worker thread; async tools run on the
  worker's event loop (Dask awaits coroutine functions natively). Either way a worker runs
  at most ``threads_per_worker`` tool calls at once.

The package is imported only when the executor is chosen, and needs ``distributed``
(``pip install "dagagent[dask]"``).
"""

from ._executor import INSTALL_HINT, DaskExecutor

__all__ = ["INSTALL_HINT", "DaskExecutor"]
