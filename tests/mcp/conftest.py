"""The MCP tests' fixtures (defined in mcp_helpers.py, which test modules import helpers from)."""

from mcp_helpers import connect, kit_url

__all__ = ["connect", "kit_url"]
