"""The ``dagagent`` command line (typer + rich). No business logic lives here.

Exit codes: 0 success; 1 the run failed; 2 invalid plan, bad option or usage; 3 planning
failed after all attempts; 4 a run or store could not be found or used; 5 the run ran but
its record is incomplete; 6 the run paused (tasks wait for a person's decision); 7 a decision
or a resume was refused; 130 interrupted.

Each command module registers its commands on ``app`` when imported; ``dagagent COMMAND``
imports the module of that command only (:func:`~dagagent.cli._app.main`), and ``app`` here
is the whole command line, every module imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._app import main

if TYPE_CHECKING:
    from ._app import app

__all__ = ["app", "main"]


def __getattr__(name: str) -> Any:
    if name == "app":
        from ._app import app, load_commands

        load_commands()
        globals()["app"] = app
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
