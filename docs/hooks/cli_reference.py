"""A mkdocs hook: the command-line reference, written from the commands themselves.

``docs/cli.md`` holds the marker ``<!-- cli-reference -->``; at build time it is replaced by
one section per command of ``dagagent`` (its usage line, its help, its arguments and every
option with its type and default), read from the typer application through click. So the
page cannot fall behind the code: a new option is on the site the next time it is built.

``python docs/hooks/cli_reference.py`` prints the generated Markdown.
"""

from __future__ import annotations

import html
import re
from typing import Any

MARKER = "<!-- cli-reference -->"
PAGE = "cli.md"

# The order a reader meets them in: run a plan, then plan and answer, then look back, then
# decide about calls that wait. A command missing here comes last, in name order.
ORDER = [
    "validate",
    "run",
    "tools",
    "ask",
    "plan",
    "runs",
    "show",
    "graph",
    "replan",
    "ui",
    "report",
    "approvals",
    "approve",
    "resume",
]


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """The mkdocs hook: fill in the marker of the CLI page."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE} has lost its {MARKER} marker")
    return markdown.replace(MARKER, reference())


def group() -> Any:
    """The ``dagagent`` command as click sees it (typer's own copy of click, in recent
    typers: so everything here goes by the attributes click documents), every command
    loaded."""
    import typer.main

    from dagagent.cli import app

    return typer.main.get_command(app)


def _context(command: Any, name: str, parent: Any = None) -> Any:
    import typer

    return typer.Context(command, info_name=name, parent=parent)


def _of(params: list[Any], kind: str) -> list[Any]:
    return [p for p in params if p.param_type_name == kind and not getattr(p, "hidden", False)]


def commands(root: Any) -> list[tuple[str, Any]]:
    """The commands, in reading order."""
    names = sorted(root.commands, key=lambda n: (ORDER.index(n) if n in ORDER else 99, n))
    return [(name, root.commands[name]) for name in names if not root.commands[name].hidden]


def reference() -> str:
    """The whole generated reference, as Markdown."""
    root = group()
    ctx = _context(root, "dagagent")
    parts = [
        "### Global options\n",
        _usage(root, ctx),
        _options_table(_of(root.params, "option"), ctx),
    ]
    for name, command in commands(root):
        sub = _context(command, name, ctx)
        parts.append(f"### `dagagent {name}`\n")
        parts.append(_usage(command, sub))
        parts.append(_help(command.help or ""))
        arguments = _of(command.params, "argument")
        if arguments:
            parts.append(_arguments_table(arguments, sub))
        options = _of(command.params, "option")
        parts.append(_options_table(options, sub))
    return "\n".join(parts)


def _usage(command: Any, ctx: Any) -> str:
    pieces = " ".join(command.collect_usage_pieces(ctx))
    return f"```text\n{ctx.command_path} {pieces}\n```\n"


def _help(text: str) -> str:
    """A command's help, its paragraphs kept, as escaped text (help is plain text, never
    Markdown: a glob's ``*`` must stay a star)."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
    return "".join(f"<p>{html.escape(p)}</p>\n" for p in paragraphs)


def _arguments_table(arguments: list[Any], ctx: Any) -> str:
    return _table("argument", [_record(arg, ctx) for arg in arguments])


def _options_table(options: list[Any], ctx: Any) -> str:
    if not options:
        return "<p>No options.</p>\n"
    return _table("option", [_record(opt, ctx) for opt in options])


def _record(param: Any, ctx: Any) -> tuple[str, str]:
    """``(the parameter as written, its help)``, exactly as ``--help`` shows them (with the
    default, the range, "repeatable" and "required" in brackets)."""
    record = param.get_help_record(ctx)
    if record is None:  # an argument without help
        return ((param.metavar or param.name or "").upper(), "")
    written, help_text = record
    return written, " ".join(help_text.split())


def _table(kind: str, rows: list[tuple[str, str]]) -> str:
    body = "\n".join(
        f"<tr><td><code>{html.escape(written)}</code></td><td>{html.escape(help_text)}</td></tr>"
        for written, help_text in rows
    )
    return (
        f'<table class="cli-params"><thead><tr><th>{kind}</th><th>meaning</th></tr></thead>'
        "<tbody>\n"
        f"{body}\n</tbody></table>\n"
    )


if __name__ == "__main__":
    print(reference())
