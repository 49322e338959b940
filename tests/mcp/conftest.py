"""The MCP tests' fixtures (defined in mcp_helpers.py, which test modules import helpers from).

This folder has no ``__init__.py``: as a package it would be named ``mcp`` and hide the SDK."""

from mcp_helpers import connect, kit_url, mcp_http

__all__ = ["connect", "kit_url", "mcp_http"]
