"""A mkdocs hook: pages of the guide that join the navigation once they exist.

Scale-out has room for pages beside the Dask one (``docs/temporal.md``,
``docs/exactly-once.md``). ``mkdocs build --strict`` fails on a navigation entry whose file
is missing, so they are not written in ``mkdocs.yml``: each joins the "Scale-out" group, under
its own title, when its file is there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1]
GROUP = "Scale-out"
FIRST = "scale-out.md"
OPTIONAL = ["temporal.md", "exactly-once.md"]


def on_config(config: Any, **_: Any) -> Any:
    present = [name for name in OPTIONAL if (DOCS / name).is_file()]
    if present and not _extend(config["nav"], present):
        raise ValueError(f"mkdocs.yml: no '{GROUP}: {FIRST}' entry in the navigation")
    return config


def _extend(nav: list[Any], present: list[str]) -> bool:
    """Turn the entry ``{GROUP: FIRST}`` into a group of FIRST and the pages present."""
    for entry in nav:
        if not isinstance(entry, dict):
            continue
        for title, value in entry.items():
            if title == GROUP and value == FIRST:
                entry[title] = [FIRST, *present]
                return True
            if isinstance(value, list) and _extend(value, present):
                return True
    return False
