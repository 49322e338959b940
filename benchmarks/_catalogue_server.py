"""A stdio MCP server serving one server of ``data/mcp_catalogue.json``, for
``tool_discovery.py``::

    python benchmarks/_catalogue_server.py benchmarks/data/mcp_catalogue.json github

Each entity of the server gets five tools (``list_``, ``get_``, ``create_``, ``update_``,
``delete_`` + the entity's name), described from the spec; a call answers with what it was
asked (the tool and its arguments) as structured content, so a plan's run shows that every
call reached its server with arguments its schema accepts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server


def catalogue_tools(spec: dict[str, Any], server: str) -> list[dict[str, Any]]:
    """The tools of ``server`` in ``spec``: ``{"name", "description", "input_schema"}``."""
    verbs: dict[str, str] = spec["verbs"]
    entry = spec["servers"][server]
    service = entry["service"]
    tools = []
    for entity, (about, fields) in entry["entities"].items():
        words = entity.replace("_", " ")
        for verb, phrase in verbs.items():
            text = phrase.format(entity=words, plural=words + "s", service=service)
            props: dict[str, Any] = {}
            required: list[str] = []
            if verb in ("get", "update", "delete"):
                props["id"] = {"type": "string", "description": f"the {words}'s id"}
                required.append("id")
            if verb in ("list", "create", "update"):
                for name, doc in fields.items():
                    props[name] = {"type": "string", "description": doc}
                if verb == "create":
                    required.extend(fields)
            if verb == "list":
                props["limit"] = {"type": "integer", "description": "most results", "default": 20}
            tools.append(
                {
                    "name": f"{verb}_{entity}",
                    "description": f"{text}: {about}.",
                    "input_schema": {
                        "type": "object",
                        "properties": props,
                        "required": required,
                    },
                }
            )
    return tools


def make_server(spec: dict[str, Any], server: str) -> Server[Any]:
    tools = catalogue_tools(spec, server)

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> Any:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t["name"],
                    description=t["description"],
                    input_schema=t["input_schema"],
                    annotations=types.ToolAnnotations(read_only_hint=True),
                )
                for t in tools
            ]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        answer = {"server": server, "tool": params.name, "args": params.arguments or {}}
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(answer))],
            structured_content=answer,
        )

    return Server(server, on_list_tools=list_tools, on_call_tool=call_tool)


async def _serve(server: Server[Any]) -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    anyio.run(_serve, make_server(spec, sys.argv[2]))


if __name__ == "__main__":
    main()
