"""What every part of :class:`~dagagent.store.RunStore` reads and writes through (the
store provides it), and how a part reads its rows into records."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from ._codec import from_column

__all__ = ["StorePart", "column_names", "record_from_row"]

_Record = TypeVar("_Record", bound=BaseModel)


class StorePart:
    """A part of the run store (a mixin of :class:`~dagagent.store.RunStore`): its queries
    run on the store's connection, in the store's transactions, for runs the store
    resolves."""

    path: Path

    def _query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError  # pragma: no cover - RunStore provides it

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # pragma: no cover - RunStore provides it

    def resolve(self, ref: str) -> str:
        raise NotImplementedError  # pragma: no cover - RunStore provides it


def column_names(columns: str) -> tuple[str, ...]:
    """The names of a ``SELECT``'s comma-separated ``columns``."""
    return tuple(name.strip() for name in columns.split(","))


def record_from_row(
    model: type[_Record],
    names: Sequence[str],
    row: Sequence[Any],
    *,
    json: Collection[str] = (),
) -> _Record:
    """A ``model`` from a ``row`` whose columns are ``names`` (each a field of the model of
    that name); the columns in ``json`` hold JSON text (:func:`~._codec.to_column`)."""
    values = dict(zip(names, row, strict=True))
    for name in json:
        values[name] = from_column(values[name])
    return model.model_validate(values)
