"""What an MCP tool call gives a plan: structured content, else the content as text.

A result's ``structuredContent`` is the output when the server gives it (a dict, or any JSON
value on newer servers). Otherwise the output is the text of the content blocks, one line
per block; blocks that are not text (images, audio, binary resources, resource links) are
described in brackets rather than dropped, so that a reader of the run sees they were there:
``[image: image/png, about 14 kB]``. A result flagged ``isError`` fails the task with the
server's own text as the message.
"""

from __future__ import annotations

from typing import Any

from ..errors import MCPToolError
from ..text import shorten
from ._bounded import MCPLimits

__all__ = ["call_output", "content_text"]

_MAX_ERROR = 2000


def call_output(result: Any, server: str, limits: MCPLimits) -> Any:
    """The output of a ``CallToolResult``, or :class:`MCPToolError` if it is an error (or
    holds more content blocks than ``limits`` allow)."""
    if len(result.content) > limits.max_blocks:
        raise MCPToolError(f"MCP server {server!r}: {limits.too_many_blocks(len(result.content))}")
    if result.is_error:
        text = content_text(result.content).strip() or "the tool reported an error, no message"
        text = shorten(text, _MAX_ERROR, one_line=False)
        raise MCPToolError(f"MCP server {server!r}: {text}")
    if result.structured_content is not None:
        return result.structured_content
    return content_text(result.content)


def content_text(blocks: list[Any]) -> str:
    """Content blocks as text: text as is, anything else described in brackets."""
    return "\n".join(_block_text(b) for b in blocks)


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        return f"[{kind}: {block.mime_type}, {_size(block.data)}]"
    if kind == "resource_link":
        described = f" - {block.description}" if getattr(block, "description", None) else ""
        return f"[resource link: {block.name} <{block.uri}>{described}]"
    if kind == "resource":
        res = block.resource
        mime = f", {res.mime_type}" if getattr(res, "mime_type", None) else ""
        text = getattr(res, "text", None)
        if text is not None:
            return f"[resource {res.uri}{mime}]\n{text}"
        return f"[resource {res.uri}{mime}, {_size(getattr(res, 'blob', ''))}]"
    return f"[{kind or type(block).__name__} content]"


def _size(b64: str) -> str:
    n = len(b64) * 3 // 4
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"about {n // 1024} kB"
    return f"about {n / (1024 * 1024):.1f} MB"
