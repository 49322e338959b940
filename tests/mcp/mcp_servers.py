"""MCP servers for the tests, written with the SDK's own server API.

    python mcp_servers.py KIND stdio
    python mcp_servers.py KIND http PORT

KIND is ``kit`` (an MCPServer with well-behaved and badly-behaved tools), ``guarded`` (the
kit over HTTP, answering only requests with the header ``X-Token: let-me-in``), ``paged`` (a
low-level server that lists its tools three per page), ``badschema`` (a low-level server
one of whose tools has an input schema that is not JSON Schema) or ``hugeschema`` (one of
whose tools has a bulky input schema).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp.server.stdio import stdio_server
from mcp_types import ToolAnnotations


def kit() -> MCPServer:
    server = MCPServer("kit")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def weather(city: str, days: int = 1) -> dict[str, Any]:
        """Weather forecast for a city."""
        return {"city": city, "days": days, "temp_c": 21.5}

    @server.tool(structured_output=False)
    def shout(text: str) -> str:
        """Upper-case a text."""
        return text.upper()

    @server.tool(structured_output=False)
    def picture() -> list[Any]:
        """A caption and a small picture."""
        return [
            types.TextContent(text="a red dot"),
            Image(data=b"\x89PNG" + b"\0" * 2000, format="png").to_image_content(),
        ]

    @server.tool(annotations=ToolAnnotations(destructive_hint=True))
    def delete_file(path: str) -> str:
        """Delete a file."""
        return f"deleted {path}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True))
    def put(key: str, value: str) -> str:
        """Store a value under a key."""
        return f"{key}={value}"

    @server.tool()
    def refuse(reason: str) -> str:
        """Always fails with the given reason."""
        raise ToolError(reason)

    @server.tool()
    def crash() -> str:
        """The server process dies while answering."""
        sys.stderr.write("kit: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(3)

    @server.tool()
    async def hang() -> str:
        """Never answers."""
        await anyio.sleep_forever()
        return "never"

    @server.tool()
    async def slow(seconds: float) -> str:
        """Answers after a while."""
        await anyio.sleep(seconds)
        return "done"

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    def book(room: str, ctx: Context) -> dict[str, Any]:
        """Book a room (a side effect); return the dagagent entries of the request's _meta."""
        return {"room": room, "meta": _dagagent_meta(ctx)}

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def peek(room: str, ctx: Context) -> dict[str, Any]:
        """Look at a room (read-only); return the dagagent entries of the request's _meta."""
        return {"room": room, "meta": _dagagent_meta(ctx)}

    @server.tool(structured_output=False)
    def confetti(pieces: int) -> list[Any]:
        """As many tiny content blocks as asked for."""
        return [types.TextContent(text=str(i % 10)) for i in range(pieces)]

    @server.tool(structured_output=False)
    def ream(kib: int) -> str:
        """A text of as many KiB as asked for."""
        return "~" * (kib * 1024)

    return server


def _dagagent_meta(ctx: Context) -> dict[str, Any]:
    meta = ctx.request_context.meta or {}
    return {k: v for k, v in meta.items() if k.startswith("dagagent/")}


def paged() -> Server[Any]:
    names = [f"tool_{i}" for i in range(7)]

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> Any:
        start = int(params.cursor) if params is not None and params.cursor else 0
        page = names[start : start + 3]
        following = str(start + 3) if start + 3 < len(names) else None
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=n,
                    description=f"Tool number {n[-1]}",
                    input_schema={
                        "type": "object",
                        "properties": {"x": {"type": "integer"}},
                        "required": ["x"],
                    },
                )
                for n in page
            ],
            next_cursor=following,
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        x = (params.arguments or {}).get("x")
        return types.CallToolResult(
            content=[types.TextContent(text=f"{params.name}({x})")],
        )

    return Server("paged", on_list_tools=list_tools, on_call_tool=call_tool)


def badschema() -> Server[Any]:
    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> Any:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name="fine",
                    input_schema={"type": "object", "properties": {}},
                ),
                types.Tool(
                    name="broken",
                    input_schema={"type": "object", "properties": {"n": {"type": "integr"}}},
                ),
            ]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        return types.CallToolResult(content=[types.TextContent(text="ok")])

    return Server("badschema", on_list_tools=list_tools, on_call_tool=call_tool)


def hugeschema() -> Server[Any]:
    """A tool whose input schema is bulky (an enum of 5,000 names, 80 kB), one that is fine."""
    bulky = {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": [f"city-{i:06d}" for i in range(5_000)]}},
    }

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> Any:
        return types.ListToolsResult(
            tools=[
                types.Tool(name="atlas", input_schema=bulky),
                types.Tool(name="fine", input_schema={"type": "object", "properties": {}}),
            ]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        return types.CallToolResult(content=[types.TextContent(text="ok")])

    return Server("hugeschema", on_list_tools=list_tools, on_call_tool=call_tool)


async def _serve_lowlevel_stdio(server: Server[Any]) -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def require_token(app: Any) -> Any:
    """The ASGI ``app``, refusing HTTP requests without ``X-Token: let-me-in`` (401)."""

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"x-token") != b"let-me-in":
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"no token"})
            return
        await app(scope, receive, send)

    return guarded


def main() -> None:
    kind, transport = sys.argv[1], sys.argv[2]
    make = {
        "kit": kit,
        "guarded": kit,
        "paged": paged,
        "badschema": badschema,
        "hugeschema": hugeschema,
    }[kind]
    server = make()
    if transport == "stdio":
        if isinstance(server, MCPServer):
            server.run("stdio")
        else:
            anyio.run(_serve_lowlevel_stdio, server)
        return
    import uvicorn

    port = int(sys.argv[3])
    app = server.streamable_http_app()
    if kind == "guarded":
        app = require_token(app)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
