"""Executors decide *when* each task starts; all of them use the same task runner."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .base import BaseExecutor, Executor, FailurePolicy, finish_unstarted
from .dataflow import DataflowExecutor
from .levels import LevelsExecutor
from .serial import SerialExecutor

__all__ = [
    "EXECUTORS",
    "BaseExecutor",
    "DataflowExecutor",
    "Executor",
    "FailurePolicy",
    "LevelsExecutor",
    "SerialExecutor",
    "finish_unstarted",
    "get_executor",
]

EXECUTORS = ("serial", "levels", "dataflow", "dask")


def get_executor(spec: str | Executor, **options: Any) -> Executor:
    """An executor from its name (``serial``, ``levels``, ``dataflow``, ``dask``) or as given."""
    if not isinstance(spec, str):
        return spec
    if spec == "serial":
        return SerialExecutor()
    if spec == "levels":
        return LevelsExecutor()
    if spec == "dataflow":
        return DataflowExecutor()
    if spec == "dask":
        from .dask import DaskExecutor  # optional dependency

        dask_executor: Executor = DaskExecutor(**options)
        return dask_executor
    raise ConfigError(f"unknown executor {spec!r}: choose one of {', '.join(EXECUTORS)}")
