"""Tools from MCP servers (Model Context Protocol), on the official ``mcp`` Python SDK.

    from dagagent import Registry, execute
    from dagagent.mcp import MCPClient

    files = MCPClient.stdio("files", "python", ["files_server.py"])
    weather = MCPClient.http("weather", "https://example.com/mcp", headers={...})

    registry = Registry()
    async with files, weather:                    # one session each, for both steps
        await files.add_to(registry, prefix="files.", exclude=["delete_*"])
        await weather.add_to(registry)
        result = await execute(plan, registry)

A server's tools become :class:`MCPTool` objects: their ``inputSchema`` is their argument
schema (plans and the planner's schema check their arguments like any other tool's, see
:class:`dagagent.tools.SchemaTool`); a call returns the result's ``structuredContent``, else its
content as text (see :mod:`dagagent.mcp._results`); a result flagged ``isError`` fails the
task with the server's message (:class:`~dagagent.errors.MCPToolError`). Annotations can only
make a tool safer to use: anything not declared read-only has side effects, and only tools
declared idempotent (or read-only) may be retried.

Sessions: :func:`~dagagent.execute` opens the clients of the registry's tools for the run
and closes them when it ends, also on failure or Ctrl-C; ``async with client`` keeps one
open across several steps. A server that cannot be started is a configuration error
(:class:`~dagagent.errors.MCPConnectError`) before anything runs; a server that dies
mid-run fails the tasks calling it (:class:`~dagagent.errors.MCPServerLostError`), and
nothing hangs. The Dask executor calls MCP tools from the driver: sessions stay there.

A call of a tool with side effects carries its identity to the server in the request's
``_meta``: :data:`IDEMPOTENCY_KEY_META` (``dagagent/idempotency-key``, the call's
idempotency key, the same for its retries and resumes), :data:`RUN_ID_META`,
:data:`TASK_ID_META`, :data:`ATTEMPT_META` and, for an element of a map,
:data:`ELEMENT_META`. A server can deduplicate on the key.

Needs the ``mcp`` extra: ``pip install "dagagent[mcp]"``.
"""

from ._client import MCPClient
from ._results import content_text
from ._tools import (
    ATTEMPT_META,
    ELEMENT_META,
    IDEMPOTENCY_KEY_META,
    RUN_ID_META,
    TASK_ID_META,
    MCPTool,
)

__all__ = [
    "ATTEMPT_META",
    "ELEMENT_META",
    "IDEMPOTENCY_KEY_META",
    "RUN_ID_META",
    "TASK_ID_META",
    "MCPClient",
    "MCPTool",
    "content_text",
]
