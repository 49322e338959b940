"""A mkdocs hook: the Benchmarks page is ``benchmarks/README.md``, with its results beside it.

The benchmarks keep their own README (every benchmark, its command and its latest figures)
next to the scripts and ``benchmarks/results/``, where ``--write`` updates them. The site
shows that file, not a copy: ``docs/benchmarks.md`` holds the marker
``<!-- benchmarks/README.md -->``, replaced at build time by the README without its title.
The files of ``benchmarks/results/`` join the site under the same path, so each result a
figure names (``benchmarks/results/overhead.md``, ``results/peers.md``) becomes a link to it.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "benchmarks" / "README.md"
RESULTS = ROOT / "benchmarks" / "results"
MARKER = "<!-- benchmarks/README.md -->"
PAGE = "benchmarks.md"
# `results/x.md` or `benchmarks/results/x.md`, written as code, naming one file
_PIPED = re.compile(r"`(?P<code>[^`\n]*\\\|[^`\n]*)`")
_NAMED = re.compile(r"`(?:benchmarks/)?results/(?P<name>[\w.-]+\.(?:md|json|png))`")


def on_files(files: Files, config: Any, **_: Any) -> Files:
    """Every results file, under ``benchmarks/results/`` in the site."""
    for path in sorted(RESULTS.iterdir()):
        if path.is_file():
            uri = f"benchmarks/results/{path.name}"
            if path.suffix == ".md":
                files.append(File.generated(config, uri, content=path.read_text("utf-8")))
            else:
                files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE} has lost its {MARKER} marker")
    return markdown.replace(MARKER, readme())


def readme() -> str:
    """``benchmarks/README.md`` without its title, each results file it names linked."""
    text = README.read_text("utf-8")
    text = re.sub(r"\A# [^\n]*\n", "", text)

    def link(match: re.Match[str]) -> str:
        name = match["name"]
        if not (RESULTS / name).is_file():
            return match.group(0)
        return f"[`results/{name}`](benchmarks/results/{name})"

    return _PIPED.sub(_piped_code, _NAMED.sub(link, text))


def _piped_code(match: re.Match[str]) -> str:
    """Code with an escaped ``\\|`` (GitHub's way to keep a pipe in a table cell) as HTML,
    where the pipe is an entity: Markdown's tables would show the backslash."""
    code = html.escape(match["code"].replace("\\|", "|")).replace("|", "&#124;")
    return f"<code>{code}</code>"
