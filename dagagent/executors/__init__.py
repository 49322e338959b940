"""Executors decide *when* each task starts; all of them use the same task runner.

The executor classes are imported on first use (PEP 562): the names of the executors
(:data:`EXECUTORS`) are all a command-line ``--help`` needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:
    from .base import BaseExecutor, Executor, FailurePolicy, finish_unstarted
    from .dataflow import DataflowExecutor
    from .levels import LevelsExecutor
    from .serial import SerialExecutor

__all__ = [
    "EXECUTORS",
    "IN_PROCESS_EXECUTORS",
    "BaseExecutor",
    "DataflowExecutor",
    "Executor",
    "FailurePolicy",
    "LevelsExecutor",
    "SerialExecutor",
    "finish_unstarted",
    "get_executor",
]

EXECUTORS = ("serial", "levels", "dataflow", "dask", "temporal")
#: The executors that run every task in this process.
IN_PROCESS_EXECUTORS = ("serial", "levels", "dataflow")

_LAZY = {
    "BaseExecutor": "base",
    "Executor": "base",
    "FailurePolicy": "base",
    "finish_unstarted": "base",
    "DataflowExecutor": "dataflow",
    "LevelsExecutor": "levels",
    "SerialExecutor": "serial",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def get_executor(spec: str | Executor, **options: Any) -> Executor:
    """An executor from its name (``serial``, ``levels``, ``dataflow``, ``dask``,
    ``temporal``) or as given; ``options`` go to the Dask or Temporal executor."""
    if not isinstance(spec, str):
        return spec
    if spec == "serial":
        from .serial import SerialExecutor

        return SerialExecutor()
    if spec == "levels":
        from .levels import LevelsExecutor

        return LevelsExecutor()
    if spec == "dataflow":
        from .dataflow import DataflowExecutor

        return DataflowExecutor()
    if spec == "dask":
        from .dask import DaskExecutor  # optional dependency

        dask_executor: Executor = DaskExecutor(**options)
        return dask_executor
    if spec == "temporal":
        from .temporal import TemporalExecutor  # optional dependency

        temporal_executor: Executor = TemporalExecutor(**options)
        return temporal_executor
    raise ConfigError(f"unknown executor {spec!r}: choose one of {', '.join(EXECUTORS)}")
