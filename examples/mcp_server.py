"""A small MCP server for the README's examples (offline: fixed tables).

    dagagent tools --mcp "forecast=python examples/mcp_server.py"

Run by a client over stdio; written with the MCP SDK's server API (``pip install
"dagagent[mcp]"``).
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

server = MCPServer("forecast")

_TOMORROW = {
    "Oslo": {"temp_c": 3.5, "sky": "sleet"},
    "Lisbon": {"temp_c": 17.0, "sky": "sunny"},
    "Tokyo": {"temp_c": 11.0, "sky": "cloudy"},
}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def tomorrow(city: str) -> dict[str, Any]:
    """Tomorrow's forecast for a city: temperature (C) and sky."""
    if city not in _TOMORROW:
        raise ToolError(f"no forecast for {city!r} (known: {', '.join(_TOMORROW)})")
    return {"city": city, **_TOMORROW[city]}


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def cancel_picnic(city: str) -> str:
    """Cancel the picnic planned in a city (pretend: nothing is sent)."""
    return f"picnic in {city} cancelled"


if __name__ == "__main__":
    server.run("stdio")
