"""Pydantic models made as ``model_construct`` makes them, many at once and without its
per-field loop: each of a model's four slots is set by its setter, called directly (half the
cost of ``object.__setattr__`` by name), by ``map`` for every model in one go. Exactly
``model_construct`` only for a plain model (no aliases, no post-init, every field given in
field order): its callers check that once, at import."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from functools import partial
from itertools import repeat
from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["AVAILABLE", "SETTERS", "construct_all", "consume"]

M = TypeVar("M", bound=BaseModel)

_SLOTS = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
#: The setters of a model's four slots (``None`` for one this pydantic does not have).
SETTERS: list[Any] = [getattr(BaseModel.__dict__.get(k), "__set__", None) for k in _SLOTS]
#: Whether this pydantic keeps a model in those four slots (else: model_construct).
AVAILABLE = None not in SETTERS
#: Runs an iterator to its end, keeping nothing.
consume: Callable[[Iterable[Any]], object] = partial(deque, maxlen=0)


def construct_all(
    cls: type[M], fields: list[dict[str, Any]], fields_set: Iterable[set[str]]
) -> list[M]:
    """One ``cls`` per dict of ``fields`` (each becomes its model's ``__dict__``, in field
    order), with its set of given fields from ``fields_set``. Needs :data:`AVAILABLE`."""
    n = len(fields)
    models: list[M] = list(map(object.__new__, repeat(cls, n)))
    set_dict, set_fields, set_extra, set_private = SETTERS
    consume(map(set_dict, models, fields))
    consume(map(set_fields, models, fields_set))
    consume(map(set_extra, models, repeat(None, n)))
    consume(map(set_private, models, repeat(None, n)))
    return models
