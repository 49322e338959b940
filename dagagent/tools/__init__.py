"""Tools and the registry that holds them.

- :mod:`._tool`: a :class:`Tool` from a plain function (name, description, argument schema from
  its docstring and type hints; validation; sync functions in worker threads), and the
  ``@tool`` decorator;
- :mod:`._schema`: a :class:`SchemaTool` from a JSON Schema and an async function (what MCP
  servers describe);
- :mod:`._registry`: the :class:`Registry` of named tools, and :func:`connected`, which opens
  the connections their calls need while a run lasts;
- :mod:`._skills`: :class:`Skill`, a named procedure in Markdown whose summary goes in the
  prompts and whose text a model reads with the ``read_skill`` tool; :func:`load_skills`
  reads a folder of them;
- :mod:`._threads`: the places in anyio's worker threads that bound sync tool calls in a
  process (:data:`sync_threads`).
"""

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
    "GENERATOR_TYPES",
    "READ_SKILL",
    "Registry",
    "SchemaTool",
    "Skill",
    "SyncThreads",
    "Tool",
    "ToolOptions",
    "call_sync",
    "connected",
    "format_validation_errors",
    "load_skills",
    "materialize_async",
    "skills_prompt",
    "sync_threads",
    "tool",
]
