"""Where a command's tools come from (``--tools`` modules and ``--mcp`` servers), and
``dagagent tools``, which lists them as the planner would see them."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ..errors import ConfigError, DagagentError, ToolDefinitionError
from ..tools import DEFAULT_THRESHOLD
from ._app import DEFAULT_TOOLS, app, err, guard, load_registry, out, tools_spec
from .options import MaxToolsOpt, McpOpt, SkillsOpt, ToolsOpt, discovery_of

if TYPE_CHECKING:
    from ..tools import Registry, Tool

__all__ = ["load_tools"]


def load_tools(
    tools: str | None, mcp: Sequence[str] | None = None, skills: Path | None = None
) -> Registry:
    """The tools of ``--tools`` (see :func:`~dagagent.cli._app.load_registry`; without it and
    with ``--mcp``, only ``$DAGAGENT_TOOLS``, not the demo tools) and of every ``--mcp``
    server, named ``NAME.TOOL``. Each server is started (or reached) and listed, then let go:
    a run opens it again for as long as it lasts. With ``skills`` (``--skills DIR``), the
    folder's skills and the ``read_skill`` tool, in a registry of their own (the module's
    registry that ``--tools`` names is left as it is)."""
    from ..tools import Registry

    mcp = list(mcp or ())
    spec = tools_spec(tools, mcp)
    if spec == DEFAULT_TOOLS and not tools and not os.environ.get("DAGAGENT_TOOLS"):
        # Nobody chose them: say so, or a plan that names its own tools fails with a list of
        # tools the user never heard of.
        err.print(
            f"note: using the bundled demo tools ({DEFAULT_TOOLS}): no --tools given, nor "
            "$DAGAGENT_TOOLS, nor tools in the project file ([tool.dagagent] of "
            "pyproject.toml, or .dagagent/config.toml)",
            markup=False,
            highlight=False,
        )
    registry = load_registry(spec) if spec is not None else Registry()
    if skills is not None:
        registry = _with_skills(registry, skills)
    if mcp:
        # The servers' tools join a registry of this command's own: the module's stays as its
        # module made it (a program that loads it again must not find them there).
        registry = registry.subset(registry.names)  # with its skills, if it has some
        _add_mcp_tools(registry, mcp)
    return registry


def _with_skills(registry: Registry, folder: Path) -> Registry:
    from ..tools import READ_SKILL, Registry

    own = Registry(t for t in registry if not (registry.skills and t.name == READ_SKILL))
    for skill in registry.skills.values():
        own.add_skill(skill)
    try:
        own.load_skills(folder)
    except ToolDefinitionError as exc:
        raise ConfigError(f"--skills {str(folder)!r}: {exc}") from None
    return own


def _add_mcp_tools(registry: Registry, specs: list[str]) -> None:
    import anyio

    from .signals import run_stoppable

    try:
        from ..mcp import MCPClient
    except ImportError as exc:  # the SDK is an extra
        raise ConfigError(f'--mcp needs the MCP SDK: pip install "dagagent[mcp]" ({exc})') from None
    from .project import project

    found = project()
    ours = set(found.mcp) if found is not None else set()
    # A project file's server runs in the project's directory (its paths are the project's).
    clients = [
        MCPClient.parse(s, cwd=found.root)
        if found is not None and s in ours
        else MCPClient.parse(s)
        for s in specs
    ]
    names = [c.name for c in clients]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"--mcp: two servers are named {name!r}")
    listed: dict[str, list[Tool]] = {}
    failures: list[DagagentError] = []

    async def list_one(client: MCPClient) -> None:
        try:
            listed[client.name] = list(await client.tools(prefix=f"{client.name}."))
        except DagagentError as exc:  # reported below, one at a time, as any other error
            failures.append(exc)

    async def list_all() -> None:
        async with anyio.create_task_group() as tg:
            for c in clients:
                tg.start_soon(list_one, c)

    run_stoppable(list_all)
    if failures:
        raise failures[0]
    for c in clients:
        for t in listed[c.name]:
            registry.add(t)


def _shown_for(registry: Registry, goal: str, max_tools: int) -> tuple[Registry, dict[str, str]]:
    """The tools the planner would be shown for ``goal`` with ``--max-tools``, and why each
    is there (its score, and what keeps it when not its rank); every tool, and no reasons,
    when the registry is not larger than that."""
    from ..tools import select_tools
    from .signals import run_stoppable

    selection = run_stoppable(select_tools, registry, goal, discovery_of(max_tools))
    if selection is None:
        return registry, {}
    why = {}
    for s in selection.shown:
        score = f"score {s.score:.2f}" if s.score is not None else "no score"
        why[s.name] = score if s.why == "ranked" else f"{score}, {s.why}"
    return registry.subset(selection.names), why


def _source(t: Tool) -> str:
    server = getattr(t, "server", None)
    return f"MCP server {server}" if server is not None else str(getattr(t.fn, "__module__", ""))


def _safety(t: Tool) -> str:
    notes = ["side effects" if t.side_effects else "no side effects"]
    if not t.retryable:
        notes.append("not retried")
    return ", ".join(notes)


@app.command("tools")
@guard
def tools_cmd(
    tools: ToolsOpt = None,
    mcp: McpOpt = None,
    skills: SkillsOpt = None,
    json_out: bool = typer.Option(
        False,
        "--json",
        help='Print {"tools": [...]} as JSON: each tool\'s name, description, JSON schemas, '
        "source, side effects and whether it may be retried.",
    ),
    goal: str | None = typer.Option(
        None,
        "--for",
        metavar="GOAL",
        help="Only the tools the planner would be shown for GOAL (past --max-tools tools: the "
        "most relevant, with their scores and why each is there).",
    ),
    max_tools: MaxToolsOpt = DEFAULT_THRESHOLD,
) -> None:
    """List the tools a plan can use (those --tools and --mcp give, as 'run' and 'plan' would
    load them), each with its arguments as the planner sees them, and the skills of --skills;
    with --for GOAL, those the planner would be shown for that goal."""
    from rich.text import Text

    from ..planners.prompts import tool_catalog
    from ..text import printable
    from .render import print_json

    registry = load_tools(tools, mcp, skills)
    why: dict[str, str] = {}
    total = len(registry)
    if goal is not None:
        registry, why = _shown_for(registry, goal, max_tools)
    if json_out:
        tools_doc: list[dict[str, Any]] = [
            {
                **t.spec(),
                "output_schema": t.output_schema,
                "source": _source(t),
                "side_effects": t.side_effects,
                "retryable": t.retryable,
            }
            for t in registry
        ]
        for item in tools_doc:
            if item["name"] in why:
                item["shown_because"] = why[item["name"]]
        doc: dict[str, Any] = {"tools": tools_doc}
        if registry.skills:
            doc["skills"] = [
                {
                    "name": k.name,
                    "summary": k.summary,
                    "source": str(k.source or ""),
                    "chars": len(k.text),
                }
                for k in registry.skills.values()
            ]
        print_json(out, doc)  # one object, as every --json prints
        return
    for t in registry:
        # The planner's own catalog entry (signature, description, argument notes, what it
        # returns), then where the tool comes from. Text without markup: a server's names and
        # descriptions are shown, never interpreted.
        entry = tool_catalog(registry, [t.name]).removeprefix("- ").splitlines()
        lines = [printable(line) for line in entry]
        lines.append(f"    from {_source(t)}; {_safety(t)}")
        if t.name in why:
            lines.append(f"    shown for the goal: {why[t.name]}")
        out.print(Text("\n".join(lines)), soft_wrap=True)
    for k in registry.skills.values():
        where = f"    from {k.source or 'Python'}; {len(k.text):,} characters"
        text = f"{printable(f'skill {k.name}: {k.summary}')}\n{printable(where)}"
        out.print(Text(text), soft_wrap=True)
    n, m = len(registry), len(registry.skills)
    counts = f"{n} tool{'s' if n != 1 else ''}"
    if goal is not None:
        counts += f" of {total} shown for the goal" if why else " (every tool is shown)"
    if m:
        counts += f", {m} skill{'s' if m != 1 else ''}"
    err.print(counts, markup=False)
