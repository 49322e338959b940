"""Project settings: what a project's commands should use, written once.

A project file sets the options its commands would otherwise repeat: the tools, the MCP
servers, the model and its server, and defaults of the run options. It is found the way the
run store is, upward from the working directory: in each directory, ``.dagagent/config.toml``,
else a ``pyproject.toml`` holding a ``[tool.dagagent]`` table; the nearest one wins::

    [tool.dagagent]                         # .dagagent/config.toml: the same keys, no table
    tools = "mytools:registry"              # or "src/tools.py:registry", from this directory
    model = "openai:llama3.1"
    base_url = "http://localhost:11434/v1"
    timeout = 120
    max_concurrency = 8

    [tool.dagagent.mcp]                     # each server as --mcp NAME=... would give it
    fetch = "uvx mcp-server-fetch"
    search = "https://example.com/mcp"

What they become: the defaults of the options of that name (``--tools``, ``--mcp``,
``--model``, ``--base-url``, ``--timeout``, ``--executor``, ``--on-failure``,
``--max-concurrency``, ``--max-elements``, ``--max-attempts``, ``--max-rounds``,
``--max-tools``), through
click's ``default_map``, for the commands that take them. An option given on the command
line wins; so does the environment (``$DAGAGENT_TOOLS``, ``$DAGAGENT_MODEL``,
``$DAGAGENT_BASE_URL``) over the file. Commands that continue a recorded run (``replan``,
``resume``, ``approve``) take its tools and executor from the record, not from here.

A tools file is found from the project's directory; a module (``mytools:registry``) is
imported from the working directory, then the project's, then the installed packages; an
MCP server's command runs in the project's directory. Never put keys in the file: the
model's key comes from the environment, as always.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError

__all__ = ["PROJECT_FILE", "Project", "find_project", "project"]

PROJECT_FILE = Path(".dagagent") / "config.toml"

#: Each key a project file may set: (its type's name, the check of its value).
_KEYS: dict[str, str] = {
    "tools": "text",
    "mcp": "table of NAME = COMMAND or URL",
    "model": "text",
    "base_url": "text",
    "timeout": "number",
    "executor": "text",
    "on_failure": "text",
    "max_concurrency": "whole number",
    "max_elements": "whole number",
    "max_attempts": "whole number",
    "max_rounds": "whole number",
    "max_tools": "whole number",
}
#: The environment variable that beats the file, for the keys that have one.
_ENV = {"tools": "DAGAGENT_TOOLS", "model": "DAGAGENT_MODEL", "base_url": "DAGAGENT_BASE_URL"}
#: Commands that continue a recorded run: their tools and executor are the run's.
_FROM_RECORD = {"replan": {"tools", "mcp", "executor"}, "resume": set(_KEYS), "approve": set(_KEYS)}


@dataclass(frozen=True)
class Project:
    """A project file (``path``) and the directory it speaks for (``root``), with its
    settings (``values``: by key, checked)."""

    path: Path
    root: Path
    values: Mapping[str, Any] = field(default_factory=dict)

    @property
    def mcp(self) -> list[str]:
        """The MCP servers as ``--mcp`` takes them: ``NAME=COMMAND`` or ``NAME=URL``."""
        servers = self.values.get("mcp") or {}
        return [f"{name}={target}" for name, target in servers.items()]

    def defaults(self, command: str, params: set[str]) -> dict[str, Any]:
        """The defaults this file gives the options (``params``) of ``command``."""
        out: dict[str, Any] = {}
        skip = _FROM_RECORD.get(command, set())
        for key, value in self.values.items():
            if key not in params or key in skip:
                continue
            if key in _ENV and os.environ.get(_ENV[key], "").strip():
                continue  # the environment says otherwise
            out[key] = self.mcp if key == "mcp" else value
        return out


def find_project(start: Path | None = None) -> Project | None:
    """The nearest project file from ``start`` (default: the working directory) upward, read
    and checked; ``None`` if there is none. A file that cannot be read, or that sets an
    unknown key or a value of the wrong type, is a :class:`~dagagent.errors.ConfigError`
    naming it."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        own = directory / PROJECT_FILE
        if own.is_file():
            return _read(own, directory, table=None)
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file() and _mentions_us(pyproject):
            found = _read(pyproject, directory, table=("tool", "dagagent"))
            if found is not None:
                return found
    return None


_found: list[Project | None] = []


def project() -> Project | None:
    """The working directory's project (:func:`find_project`), found once per command."""
    if not _found:
        _found.append(find_project())
    return _found[0]


def forget() -> None:
    """A new command begins: the project is looked for again, from its working directory
    (a program that invokes the app more than once may change directory in between)."""
    _found.clear()


def _mentions_us(path: Path) -> bool:
    """Whether a ``pyproject.toml`` may hold ``[tool.dagagent]`` (checked without parsing
    it: most hold nothing of ours)."""
    try:
        return "tool.dagagent" in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def _load_toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib

        try:
            with open(path, "rb") as f:
                return tomllib.load(f)
        except OSError as exc:
            raise ConfigError(
                f"cannot read the project file {path}: {exc.strerror or exc}"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"the project file {path} is not valid TOML: {exc}") from None
    raise ConfigError(f"{path}: dagagent's project settings need Python 3.11+ (TOML)")


def _read(path: Path, root: Path, *, table: tuple[str, ...] | None) -> Project | None:
    data: Any = _load_toml(path)
    where = str(path)
    if table is not None:
        for key in table:
            data = data.get(key) if isinstance(data, dict) else None
        if data is None:
            return None
        where = f"[{'.'.join(table)}] of {path}"
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a table of settings")
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in _KEYS:
            known = ", ".join(_KEYS)
            raise ConfigError(f"{where}: unknown setting {key!r} (known: {known})")
        values[key] = _checked(key, value, where, root)
    return Project(path, root, values)


def _checked(key: str, value: Any, where: str, root: Path) -> Any:
    kind = _KEYS[key]

    def wrong() -> ConfigError:
        return ConfigError(f"{where}: {key} must be a {kind}, not {value!r}")

    if kind == "text":
        if not isinstance(value, str) or not value.strip():
            raise wrong()
        value = value.strip()
        if key == "tools":
            return _tools_from(value, root)
        return value
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise wrong()
        return float(value)
    if kind == "whole number":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise wrong()
        return value
    # mcp: a table of NAME = COMMAND or URL (or a list of NAME=..., as --mcp takes them)
    if isinstance(value, list) and all(isinstance(v, str) and "=" in v for v in value):
        pairs = [v.partition("=") for v in value]
        return {name.strip(): target.strip() for name, _, target in pairs}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in value.items()
    ):
        raise wrong()
    return {k: v.strip() for k, v in value.items()}


def _tools_from(spec: str, root: Path) -> str:
    """A tools spec of the file: a file path is the project's (made absolute), a module is
    imported as ``--tools`` imports one (the project's directory among the places)."""
    target, sep, attr = spec.rpartition(":")
    if sep and (target.endswith(".py") or "/" in target or os.sep in target):
        path = Path(target)
        if not path.is_absolute():
            path = root / path
        return f"{path}:{attr}"
    return spec
