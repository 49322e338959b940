"""Run ids: 12 lowercase hex digits; lookups accept a unique prefix of at least 4."""

from __future__ import annotations

import re

from ..errors import StoreError
from ..text import shorten

__all__ = ["RUN_ID_RE", "check_run_id"]

RUN_ID_RE = re.compile(r"^[0-9a-f]{12}$")
_RUN_REF_RE = re.compile(r"^[0-9a-f]{4,12}$")


def check_run_id(ref: str, *, prefix: bool = True) -> str:
    """Return ``ref`` normalised (lowercase) if it is a run id (or, with ``prefix``, a prefix of
    at least 4 hex digits); raise :class:`StoreError` otherwise. Nothing else reaches SQL."""
    norm = ref.strip().lower() if isinstance(ref, str) else ""
    if (_RUN_REF_RE if prefix else RUN_ID_RE).match(norm):
        return norm
    shown = shorten(ref if isinstance(ref, str) else str(ref), 40, one_line=False)
    hint = " (or a unique prefix of at least 4)" if prefix else ""
    raise StoreError(f"{shown!r} is not a run id: run ids are 12 hex digits{hint}")
