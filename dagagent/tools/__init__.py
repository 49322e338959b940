"""Tools and the registry that holds them.

- :mod:`._tool`: a :class:`Tool` from a plain function (name, description, argument schema from
  its docstring and type hints; validation; sync functions in worker threads), and the
  ``@tool`` decorator;
- :mod:`._schema`: a :class:`SchemaTool` from a JSON Schema and an async function (what MCP
  servers describe);
- :mod:`._registry`: the :class:`Registry` of named tools, and :func:`connected`, which opens
  the connections their calls need while a run lasts;
- :mod:`._effects`: what a call of a tool with side effects knows about itself
  (:func:`current_call`, its idempotency key) and a reconciler's answer (:class:`Reconciled`);
- :mod:`._skills`: :class:`Skill`, a named procedure in Markdown whose summary goes in the
  prompts and whose text a model reads with the ``read_skill`` tool; :func:`load_skills`
  reads a folder of them;
- :mod:`._discovery`: which tools of a large registry a model is shown for a goal
  (:func:`select_tools`, BM25 or an embedding), and the ``find_tools`` tool;
- :mod:`._threads`: the places in anyio's worker threads that bound sync tool calls in a
  process (:data:`sync_threads`).
"""

from ._discovery import (
    DEFAULT_THRESHOLD,
    FIND_TOOLS,
    BM25Index,
    Embed,
    ShownTool,
    ToolDiscovery,
    ToolSelection,
    find_tools_tool,
    found_names,
    select_tools,
)
from ._effects import (
    CallIdentity,
    Reconciled,
    Reconciler,
    args_fingerprint,
    current_call,
    idempotency_key,
)
from ._registry import Registry, connected
from ._schema import SchemaTool
from ._skills import READ_SKILL, Skill, load_skills, skills_prompt
from ._threads import SyncThreads, sync_threads
from ._tool import (
    GENERATOR_TYPES,
    Tool,
    ToolOptions,
    call_sync,
    format_validation_errors,
    materialize_async,
    tool,
)

__all__ = [
    "DEFAULT_THRESHOLD",
    "FIND_TOOLS",
    "GENERATOR_TYPES",
    "READ_SKILL",
    "BM25Index",
    "CallIdentity",
    "Embed",
    "Reconciled",
    "Reconciler",
    "Registry",
    "SchemaTool",
    "ShownTool",
    "Skill",
    "SyncThreads",
    "Tool",
    "ToolDiscovery",
    "ToolOptions",
    "ToolSelection",
    "args_fingerprint",
    "call_sync",
    "connected",
    "current_call",
    "find_tools_tool",
    "format_validation_errors",
    "found_names",
    "idempotency_key",
    "load_skills",
    "materialize_async",
    "select_tools",
    "skills_prompt",
    "sync_threads",
    "tool",
]
