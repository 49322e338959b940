"""The ``dagagent`` command line (typer + rich). No business logic lives here.

Exit codes: 0 success; 1 the run failed; 2 invalid plan, bad option or usage; 3 planning
failed after all attempts; 4 a run or store could not be found or used; 5 the run ran but
its record is incomplete; 6 the run paused (tasks wait for a person's decision); 7 a decision
or a resume was refused; 130 interrupted.
"""

from __future__ import annotations

import importlib

from ._app import app, main

# Each command module registers its commands on ``app`` when imported.
_COMMAND_MODULES = ("run", "runs", "replan", "plan", "ask", "tools", "view", "waiting")

for _name in _COMMAND_MODULES:
    importlib.import_module(f"{__name__}.{_name}")

__all__ = ["app", "main"]
