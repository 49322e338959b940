"""dagagent: plan-and-execute DAG orchestration for LLM agents.

A plan (tasks with dependencies) is validated as a graph, then run concurrently by an
executor that hands each task to one shared task runner.

    import dagagent

    registry = dagagent.Registry()

    @registry.tool
    async def get_weather(city: str) -> dict: ...

    result = await dagagent.execute(plan, registry)

The public names are listed once, with the module each comes from, in ``__init__.pyi``; each
is imported from its module on first use (PEP 562), so that ``import dagagent`` and every
command of the CLI load only the modules they need.
"""

import ast
import importlib
import importlib.resources
from typing import Any

__version__ = "0.2.0.dev0"


def _exports() -> dict[str, str]:
    """``{public name: module}``, read from the import statements of ``__init__.pyi``."""
    stub = importlib.resources.files(__name__).joinpath("__init__.pyi").read_text("utf-8")
    found: dict[str, str] = {}
    for node in ast.parse(stub).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                found[alias.asname or alias.name] = f".{node.module}"
    return found


_EXPORTS = _exports()
__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use, or a submodule
    (``dagagent.store``)."""
    module = _EXPORTS.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
