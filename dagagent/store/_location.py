"""Where the run store lives, found the way git finds its repository.

In order: an explicit path (``--store``, ``store=``); ``$DAGAGENT_HOME/runs.db``; the nearest
``.dagagent/`` directory in the current directory or one of its parents (a project's own
store: ``mkdir .dagagent`` at the top of the project starts one); else one store per user, in
the platform's place for application data. So every command finds the same history wherever
it runs in a project, and runs outside any project share one store instead of leaving a
``.dagagent/`` folder in every directory they were started from.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

__all__ = [
    "STORE_DIR",
    "STORE_FILE",
    "StoreLocation",
    "StoreSource",
    "locate_store",
    "user_data_dir",
]

STORE_DIR = ".dagagent"
STORE_FILE = "runs.db"


class StoreSource(str, Enum):
    """Why a store is where it is."""

    given = "given"  # --store / store=
    env = "env"  # $DAGAGENT_HOME
    project = "project"  # the nearest .dagagent/ here or above
    user = "user"  # the per-user default


@dataclass(frozen=True)
class StoreLocation:
    """A store file and why it was chosen (:func:`locate_store`)."""

    path: Path
    source: StoreSource

    def describe(self) -> str:
        """Why this store, in a few words a person can act on."""
        if self.source is StoreSource.given:
            return "given with --store"
        if self.source is StoreSource.env:
            return "from $DAGAGENT_HOME"
        if self.source is StoreSource.project:
            return f"the nearest {STORE_DIR}/ directory"
        return f"the per-user store; 'mkdir {STORE_DIR}' in a project keeps its runs apart"


def user_data_dir(
    *,
    platform: str | None = None,
    environ: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> Path:
    """The per-user directory for dagagent's data: ``$XDG_DATA_HOME/dagagent`` (else
    ``~/.local/share/dagagent``) on Linux and other Unixes, ``~/Library/Application
    Support/dagagent`` on macOS, ``%LOCALAPPDATA%\\dagagent`` on Windows. The arguments
    default to this machine's; tests pass others."""
    platform = sys.platform if platform is None else platform
    env = os.environ if environ is None else environ
    home = Path(env.get("HOME") or Path.home()) if home is None else home
    if platform.startswith("win"):
        local = env.get("LOCALAPPDATA")
        return (Path(local) if local else home / "AppData" / "Local") / "dagagent"
    if platform == "darwin":
        return home / "Library" / "Application Support" / "dagagent"
    xdg = env.get("XDG_DATA_HOME")
    # the XDG spec says a relative value is invalid and is to be ignored
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "dagagent"
    return home / ".local" / "share" / "dagagent"


def _nearest_store_dir(start: Path) -> Path | None:
    for directory in (start, *start.parents):
        candidate = directory / STORE_DIR
        if candidate.is_dir():
            return candidate
    return None


def locate_store(
    path: str | Path | None = None,
    *,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> StoreLocation:
    """The store file to use and why: ``path`` if given, else ``$DAGAGENT_HOME/runs.db``, else
    ``runs.db`` in the nearest ``.dagagent/`` of ``cwd`` (default: the current directory) or a
    parent, else ``runs.db`` in :func:`user_data_dir`."""
    if path is not None and str(path) != "":
        return StoreLocation(Path(path), StoreSource.given)
    env = os.environ if environ is None else environ
    home = env.get("DAGAGENT_HOME")
    if home:
        return StoreLocation(Path(home) / STORE_FILE, StoreSource.env)
    start = Path.cwd() if cwd is None else cwd
    found = _nearest_store_dir(start.resolve())
    if found is not None:
        return StoreLocation(found / STORE_FILE, StoreSource.project)
    return StoreLocation(user_data_dir(environ=env) / STORE_FILE, StoreSource.user)
