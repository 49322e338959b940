"""A mkdocs hook: the index of ``import dagagent``, written from ``dagagent/__init__.pyi``.

The stub is the one list of the package's public names, each with the module it comes from.
``docs/api/index.md`` holds the marker ``<!-- api-index -->``, replaced at build time by a
table of those names, each a cross-reference to where the API pages document it. A public
name that no page documents is then a reference that cannot be resolved, which fails
``mkdocs build --strict``: a new public name cannot go undocumented.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STUB = ROOT / "dagagent" / "__init__.pyi"
MARKER = "<!-- api-index -->"
PAGE = "api/index.md"
_ROLE = re.compile(r":(?:py:)?\w+:`(?:[^`<]*<)?(?P<target>[^`>]+)>?`")
_ROLE = re.compile(r":(?:py:)?\w+:`(?:[^`<]*<)?(?P<target>[^`>]+)>?`")


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
    summaries = _summaries()
    rows = [
        f"| [`{name}`][{module}.{name}] | {summaries.get(name, '')} |" for name, module in exports()
    ]
    return "| `dagagent.` | what it is |\n|---|---|\n" + "\n".join(rows) + "\n"


def _summaries() -> dict[str, str]:
    """The first sentence of each public name's docstring, as plain text for a table cell."""
    import griffe

    package = griffe.load("dagagent", search_paths=[str(ROOT)], allow_inspection=False)
    found = {}
    for name, _ in exports():
        try:
            obj = package[name]
            docstring = (obj.final_target if obj.is_alias else obj).docstring
        except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
        if docstring is None:
            continue
        first = " ".join(docstring.value.split("\n\n", 1)[0].split())
        sentence = re.split(r"(?<=\.)\s", first, maxsplit=1)[0]
        sentence = _ROLE.sub(lambda m: f"`{m['target'].lstrip('~').rsplit('.', 1)[-1]}`", sentence)
        found[name] = sentence.replace("|", "\\|")
    return found
