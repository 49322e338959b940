"""A mkdocs hook: the index of ``import dagagent``, written from ``dagagent/__init__.pyi``.

The stub is the one list of the package's public names, each with the module it comes from.
``docs/api/index.md`` holds the marker ``<!-- api-index -->``, replaced at build time by a
table of those names, each a cross-reference to where the API pages document it. A public
name that no page documents is then a reference that cannot be resolved, which fails
``mkdocs build --strict``: a new public name cannot go undocumented.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STUB = ROOT / "dagagent" / "__init__.pyi"
MARKER = "<!-- api-index -->"
PAGE = "api/index.md"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE} has lost its {MARKER} marker")
    return markdown.replace(MARKER, table())


def exports() -> list[tuple[str, str]]:
    """``(name, module)`` for each public name, module by module as the stub lists them."""
    found = []
    for node in ast.parse(STUB.read_text("utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                found.append((alias.asname or alias.name, f"dagagent.{node.module}"))
    return found


def table() -> str:
    rows = [f"| [`dagagent.{name}`][{module}.{name}] | `{module}` |" for name, module in exports()]
    return "| name | from |\n|---|---|\n" + "\n".join(rows) + "\n"
