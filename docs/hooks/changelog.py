"""A mkdocs hook: the changes page shows ``CHANGELOG.md`` itself, not a copy.

``docs/changelog.md`` holds the marker ``<!-- CHANGELOG.md -->``, replaced at build time by
the changelog without its title, each heading one level down so that the releases sit under
the page's own "The changes".

``CHANGELOG.md`` sits at the top of the repository and links to the documentation as
``docs/PAGE.md``, which is where the pages are when it is read there; on the site the page
that shows it is in ``docs/`` already, so those links lose their ``docs/`` and
``mkdocs build --strict`` checks each one (page and heading) as it checks any other link.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = ROOT / "CHANGELOG.md"
MARKER = "<!-- CHANGELOG.md -->"
PAGE = "changelog.md"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE} has lost its {MARKER} marker")
    return markdown.replace(MARKER, changes())


def changes(text: str | None = None) -> str:
    """The changelog as the changes page shows it."""
    if text is None:
        text = CHANGELOG.read_text("utf-8")
    text = re.sub(r"\A# [^\n]*\n", "", text)
    text = re.sub(r"(?m)^(#{2,5}) ", r"#\1 ", text)
    return re.sub(r"\]\(docs/", "](", text)
