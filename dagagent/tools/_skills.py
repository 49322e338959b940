"""Skills: named procedures in Markdown that a model reads only when it needs one.

A skill has a ``name``, a one-line ``summary`` and its full ``text``. The planner's and the
agent's system prompts list the summaries (:func:`skills_prompt`); the full text comes
through the ``read_skill`` tool, which a registry adds with its first skill. So a long
procedure costs prompt tokens only in the calls that use it, and each reading is a tool call
like any other: a task's result, or an agent's step, in the run's record.

A folder of skills (:func:`load_skills`) holds one Markdown file per skill: ``NAME.md``, or
``NAME/SKILL.md``. A file may start with a front matter of ``key: value`` lines between
``---`` lines; ``name`` and ``description`` (or ``summary``) are read from it. Without them
the name is the file's (or folder's) and the summary the first line of the first paragraph
that is not a heading::

    ---
    name: refund
    description: How to refund an order: checks, the refund call, the customer's note.
    ---
    # Refunding an order
    1. Look the order up with get_order ...
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, ToolDefinitionError
from ..text import read_bounded, shorten

__all__ = [
    "MAX_SKILL_BYTES",
    "MAX_SUMMARY_CHARS",
    "READ_SKILL",
    "Skill",
    "load_skills",
    "parse_skill",
    "skills_prompt",
]

#: The name of the tool that reads a skill's full text.
READ_SKILL = "read_skill"
#: The largest skill file read.
MAX_SKILL_BYTES = 200_000
#: A summary longer than this is cut (it is in every prompt).
MAX_SUMMARY_CHARS = 300
#: Skills a folder may hold.
MAX_SKILLS = 500

_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_FRONT_RE = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)


@dataclass(frozen=True)
class Skill:
    """A named procedure: ``summary`` goes in the prompts, ``text`` to whoever reads it;
    ``source`` is the file it came from, if any."""

    name: str
    summary: str
    text: str
    source: Path | None = None

    def __post_init__(self) -> None:
        where = f" (from {self.source})" if self.source is not None else ""
        if not _NAME_RE.match(self.name):
            raise ToolDefinitionError(
                f"skill name {self.name!r}{where} must be 1-64 letters, digits, '_', '.' or "
                "'-', starting with a letter, digit or '_'"
            )
        if not self.summary.strip():
            raise ToolDefinitionError(f"skill {self.name!r}{where} has no summary")
        if not self.text.strip():
            raise ToolDefinitionError(f"skill {self.name!r}{where} has no text")


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    match = _FRONT_RE.match(text)
    if match is None:
        return {}, text
    fields: dict[str, str] = {}
    for line in match.group(1).splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and not line.startswith((" ", "\t")):
            fields[key.strip().lower()] = value.strip().strip("\"'")
    return fields, text[match.end() :]


def _first_paragraph(body: str) -> str:
    for block in re.split(r"\n\s*\n", body):
        lines = [ln.strip() for ln in block.strip().splitlines() if ln.strip()]
        if lines and not lines[0].startswith(("#", "```", "---")):
            return lines[0]
    for line in body.splitlines():  # only headings: the title
        if line.strip().startswith("#"):
            return line.strip().lstrip("#").strip()
    return ""


def parse_skill(text: str, default_name: str, source: Path | None = None) -> Skill:
    """A skill from its Markdown ``text`` (see the module docstring)."""
    fields, body = _front_matter(text)
    name = fields.get("name") or default_name
    summary = fields.get("description") or fields.get("summary") or _first_paragraph(body)
    summary = shorten(" ".join(summary.split()), MAX_SUMMARY_CHARS)
    return Skill(name=name, summary=summary, text=body.strip(), source=source)


def _skill_files(directory: Path) -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_file() and entry.suffix.lower() in (".md", ".markdown"):
            found.append((entry, entry.stem))
        elif entry.is_dir():
            inner = entry / "SKILL.md"
            if inner.is_file():
                found.append((inner, entry.name))
    return found


def load_skills(directory: str | Path) -> list[Skill]:
    """The skills of a folder (see the module docstring), in the order of their names.
    :class:`~dagagent.errors.ConfigError` names the folder or the file when it cannot be
    read, holds no skill, or two skills share a name."""
    path = Path(directory)
    if not path.is_dir():
        raise ConfigError(f"the skills folder {str(path)!r} does not exist or is not a folder")
    try:
        files = _skill_files(path)
    except OSError as exc:
        raise ConfigError(f"cannot list the skills folder {str(path)!r}: {exc}") from None
    if not files:
        raise ConfigError(
            f"the skills folder {str(path)!r} holds no skill: one NAME.md (or NAME/SKILL.md) "
            "per skill"
        )
    if len(files) > MAX_SKILLS:
        raise ConfigError(f"the skills folder {str(path)!r} holds more than {MAX_SKILLS} skills")
    skills: dict[str, Skill] = {}
    for file, default_name in files:
        try:
            text = read_bounded(file, MAX_SKILL_BYTES, what="skill file")
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(f"cannot read the skill file {str(file)!r}: {exc}") from None
        try:
            skill = parse_skill(text, default_name, file)
        except ToolDefinitionError as exc:
            raise ConfigError(str(exc)) from None
        if skill.name in skills:
            raise ConfigError(
                f"two skills are named {skill.name!r}: {skills[skill.name].source} and {file}"
            )
        skills[skill.name] = skill
    return sorted(skills.values(), key=lambda s: s.name)


def skills_prompt(skills: Iterable[Skill] | Mapping[str, Skill], *, how: str) -> str:
    """The skills' section of a system prompt: each name and summary, after ``how`` (how the
    reader of the prompt gets a skill's text). Empty when there is no skill."""
    items = list(skills.values()) if isinstance(skills, Mapping) else list(skills)
    if not items:
        return ""
    lines = [f"- {s.name}: {s.summary}" for s in items]
    return f"Skills (procedures written down for kinds of tasks; {how}):\n" + "\n".join(lines)
