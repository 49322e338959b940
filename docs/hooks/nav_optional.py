"""A mkdocs hook: pages of the guide that join the navigation once they exist.

Some pages of the guide have room for pages beside them that may not be written yet:
scale-out for Temporal and exactly-once execution, plans for branching, the viewer for big
runs, planning for models (naming them, fallbacks, providers). ``mkdocs build --strict``
fails on a navigation entry whose file is missing, so they are not written in
``mkdocs.yml``: when its file is there, each joins the navigation under its own title, next
to the page it belongs with (whose entry becomes a group of both).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1]
# the page already in the navigation: the pages that join it when they exist
OPTIONAL = {
    "scale-out.md": ["temporal.md", "exactly-once.md"],
    "plans.md": ["branching.md"],
    "viewer.md": ["big-runs.md"],
    "planning.md": ["models.md"],
}


def on_config(config: Any, **_: Any) -> Any:
    for first, optional in OPTIONAL.items():
        present = [name for name in optional if (DOCS / name).is_file()]
        if present and not _extend(config["nav"], first, present):
            raise ValueError(f"mkdocs.yml: no entry for {first} in the navigation")
    return config


def _extend(nav: list[Any], first: str, present: list[str]) -> bool:
    """Turn the entry ``{title: first}`` into the group ``{title: [first, *present]}``."""
    for entry in nav:
        if not isinstance(entry, dict):
            continue
        for title, value in entry.items():
            if value == first:
                entry[title] = [first, *present]
                return True
            if isinstance(value, list) and _extend(value, first, present):
                return True
    return False
