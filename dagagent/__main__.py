"""The ``dagagent`` command (its console script) and ``python -m dagagent``.

The command line needs typer and rich, a tenth of a second of imports. A Ctrl-C in that time
ends the command as it would a moment later, with ``interrupted`` and exit code 130, not with
Python's traceback of the import it cut short. (Only the interpreter's own start and the
``dagagent`` package itself, a few hundredths of a second, come before this guard.)
"""

from __future__ import annotations

import gc
import sys

__all__ = ["main"]

_EXIT_INTERRUPTED = 130  # as dagagent.cli._app.EXIT_INTERRUPTED, which this must not import


def main() -> None:
    # What the command line imports lives until the process ends: the cyclic garbage
    # collector, walking those objects again and again as they are made, would find nothing
    # to free. So it is paused meanwhile, and then they go to its oldest generation at once
    # (freeze, unfreeze: no walk), as dagagent._gc.bulk does with a big plan's objects (not when
    # something else froze objects: those stay frozen).
    collecting = gc.isenabled()
    gc.disable()
    try:
        from .cli import main as command_line
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(_EXIT_INTERRUPTED) from None
    if collecting:
        if not gc.get_freeze_count():
            gc.freeze()
            gc.unfreeze()
        gc.enable()
    command_line()


if __name__ == "__main__":
    main()
