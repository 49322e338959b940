"""Values shown to a person or a model: :func:`jsonable` makes any value JSON-compatible,
:func:`as_text` renders it as text, and :func:`shorten` bounds that text. Every place that cuts
text for a table, a message, a prompt or an observation goes through :func:`shorten`, so that a
cut always looks the same.

This module imports nothing else of dagagent: every layer, down to the model clients, may use
it."""

from __future__ import annotations

import difflib
import fnmatch
import json
import re
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

__all__ = [
    "ELLIPSIS",
    "MASK",
    "SECRET_NAMES",
    "as_data",
    "as_text",
    "did_you_mean",
    "is_secret_name",
    "jsonable",
    "mask_keys",
    "printable",
    "read_bounded",
    "redact_command_line",
    "shorten",
    "strip_url_credentials",
]

#: What ends a cut text.
ELLIPSIS = "…"


def jsonable(value: Any) -> Any:
    """A JSON-compatible version of a tool output (falls back to ``str``).

    Never raises: a value that refers to itself has ``"<circular reference>"`` where the loop
    closes, and a value nested too deeply is cut off with ``"<nested too deeply>"``."""
    try:
        return to_jsonable_python(value, fallback=str)
    except (ValueError, RecursionError):  # a cycle, or nesting beyond the serializer's limit
        return _walk(value, set(), 0)


_MAX_DEPTH = 200


def _walk(value: Any, active: set[int], depth: int) -> Any:
    """:func:`jsonable`, one container at a time, for values the serializer refuses."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    key = id(value)
    if isinstance(value, BaseModel):
        value = dict(value)
    elif isinstance(value, (set, frozenset)):
        value = list(value)
    if not isinstance(value, (dict, list, tuple)):
        try:
            return to_jsonable_python(value, fallback=str)
        except (ValueError, RecursionError):
            return _str(value)
    if key in active:
        return "<circular reference>"
    if depth >= _MAX_DEPTH:
        return "<nested too deeply>"
    active.add(key)
    try:
        if isinstance(value, dict):
            return {
                k if isinstance(k, str) else _str(k): _walk(v, active, depth + 1)
                for k, v in value.items()
            }
        return [_walk(v, active, depth + 1) for v in value]
    finally:
        active.discard(key)


def _str(value: Any) -> str:
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__} object>"


def as_text(value: Any) -> str:
    """A value as text to show a person or a model: a string as it is, anything else as JSON
    (``repr`` if even :func:`jsonable` cannot make JSON of it)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(jsonable(value), ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def shorten(
    value: Any,
    width: int,
    *,
    one_line: bool = True,
    ellipsis: str = ELLIPSIS,
    fit: bool = True,
) -> str:
    """``value`` as text (:func:`as_text`) of at most ``width`` characters.

    - ``one_line``: runs of whitespace, line breaks included, become one space first.
    - ``ellipsis``: ends a cut text; it may name ``{total}`` (the length of the whole text)
      and ``{rest}`` (how many characters were cut), e.g. ``"… [{total} chars]"`` tells a
      model how much it is not seeing.
    - ``fit``: the ellipsis counts towards ``width`` (default); with ``fit=False``, ``width``
      characters are kept and the ellipsis follows them (for a model that is promised that much).
    """
    text = as_text(value)
    if one_line:
        text = " ".join(text.split())
    if len(text) <= width:
        return text
    if not fit:
        return text[:width] + ellipsis.format(total=len(text), rest=len(text) - width)
    tail = ellipsis.format(total=len(text), rest=len(text))
    cut = max(0, width - len(tail))
    tail = ellipsis.format(total=len(text), rest=len(text) - cut)
    return text[:cut] + tail


def as_data(text: str, tag: str = "output") -> str:
    """``text`` between ``<tag>`` and ``</tag>``: what a tool returned (or raised), shown to a
    model as data, apart from the prompt around it. A closing ``</tag>`` inside ``text`` is
    broken up (``<\\/tag>``), so that the text cannot end the block early and go on as if
    it were the prompt."""
    inner = re.sub(rf"<(\s*)/(\s*{re.escape(tag)})", r"<\1\\/\2", text, flags=re.IGNORECASE)
    return f"<{tag}>{inner}</{tag}>"


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` safe to print on a terminal: every control or format character (line breaks,
    carriage returns, ANSI escapes, bidi overrides) is shown escaped (``\\n``, ``\\x1b``), so
    that an issue stays on one line; with ``lines``, line breaks and tabs stay (the lines of an
    answer). Print the result without markup (rich: ``markup=False``) so that ``[brackets]``
    stay text too."""
    if text.isprintable():
        return text
    keep = "\n\t" if lines else ""
    return "".join(c if c.isprintable() or c in keep else repr(c)[1:-1] for c in text)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when ``name`` looks like a misspelling of one of ``known``,
    else ``""``: the tail of a message about an unknown name."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/@?#'\"<>]+@")


def strip_url_credentials(text: str) -> str:
    """``text`` with the ``user:password@`` of every URL in it replaced by ``***@``
    (``http://ann:s3cret@host/v1`` becomes ``http://***@host/v1``)."""
    if "@" not in text:
        return text
    return _URL_CREDENTIALS.sub(r"\1***@", text)


def read_bounded(source: str | Path | IO[bytes], limit: int, *, what: str = "file") -> str:
    """The UTF-8 text of a file (a path) or a binary stream, reading at most ``limit`` bytes
    (a leading byte order mark dropped). More than that is a :class:`ValueError` saying so,
    raised after reading ``limit + 1`` bytes: ``/dev/zero`` or an endless pipe cannot fill
    memory. ``OSError`` and ``UnicodeDecodeError`` pass through."""
    if isinstance(source, (str, Path)):
        with open(source, "rb") as f:
            data = f.read(limit + 1)
    else:
        data = source.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit:,} bytes, the most a {what} may be")
    return data.decode("utf-8-sig")


SECRET_NAMES: tuple[str, ...] = (
    "*password*",
    "*passwd*",
    "*secret*",
    "*token*",
    "*api_key*",
    "*apikey*",
    "*credential*",
    "*authorization*",
    "*private_key*",
    "*cookie*",
)
"""Globs (case-insensitive) on names whose values are secrets: never shown in a message, and
hidden by :func:`dagagent.interceptors.redacting` by default."""

_SECRET_NAME = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in SECRET_NAMES))


def is_secret_name(name: object) -> bool:
    """Whether ``name`` (an argument or key name) says its value is a secret."""
    # headers spell names with hyphens (X-Api-Key): they count as underscores
    return isinstance(name, str) and _SECRET_NAME.match(name.lower().replace("-", "_")) is not None


#: What a hidden secret becomes in a command line (as a URL's password does).
MASK = "***"

#: Values that look like keys whatever their name: the prefixes providers give their keys
#: and tokens (OpenAI, Anthropic, Stripe, GitHub, GitLab, Slack, AWS, Google, Hugging Face,
#: npm, PyPI), JSON web tokens, UUIDs, and long runs of letters and digits mixed as a key's
#: are (32 or more, upper and lower case, or hex).
_KEY_LIKE = re.compile(
    r"""(?x)
    (?:sk|pk|rk)[-_](?:live_|test_|proj-|ant-)?[A-Za-z0-9_-]{12,}
    | gh[pousr]_[A-Za-z0-9]{16,} | github_pat_[A-Za-z0-9_]{20,} | glpat-[A-Za-z0-9_-]{16,}
    | xox[abprs]-[A-Za-z0-9-]{10,} | (?:AKIA|ASIA)[0-9A-Z]{16} | AIza[0-9A-Za-z_-]{30,}
    | hf_[A-Za-z0-9]{20,} | npm_[A-Za-z0-9]{20,} | pypi-[A-Za-z0-9_-]{20,}
    | eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*
    | [0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}
    | (?P<run>(?<![A-Za-z0-9_-])[A-Za-z0-9_-]{32,}(?![A-Za-z0-9_-]))
    """
)


def _key_like(m: re.Match[str]) -> str:
    run = m["run"]
    if run is None:
        return MASK  # one of the named forms
    hexa = re.fullmatch(r"[0-9a-fA-F]+", run) is not None
    mixed = re.search(r"[a-z]", run) and re.search(r"[A-Z]", run) and re.search(r"[0-9]", run)
    return MASK if hexa or mixed else run


def mask_keys(text: str) -> str:
    """``text`` with every value that looks like a key or a token replaced by ``***``, whatever
    its name or place (see ``_KEY_LIKE``)."""
    return _KEY_LIKE.sub(_key_like, text)


# NAME=VALUE (an environment assignment, --NAME=VALUE) or NAME: VALUE (a header)
_SETTING = re.compile(r"^(?P<name>-{0,2}[A-Za-z_][\w.-]*)(?P<sep>=|:\s*)(?P<value>.+)$", re.S)
# a URL's query parameter
_QUERY = re.compile(r"(?P<start>[?&])(?P<name>[^=&#\s]+)=(?P<value>[^&#\s]*)")


def _hide_url(url: str) -> str:
    """A URL with its user and password, and every query parameter's value, hidden."""
    url = strip_url_credentials(url)
    if "=" in url:
        url = _QUERY.sub(lambda m: f"{m['start']}{m['name']}={MASK}" if m["value"] else m[0], url)
    return mask_keys(url)


def redact_command_line(command: str) -> str:
    """``command`` (a command line as a shell splits it, or a URL) as a record may keep it:
    the value of every environment assignment (``GITHUB_TOKEN=...``), of every option
    (``--api-key=...``, ``--token ...``, ``-p ...``: the word after an option counts as its
    value) and of every header (``Authorization: ...``) replaced by ``***``, a URL's user and
    password and every query parameter's value too, and any value that looks like a key
    (:func:`mask_keys`) wherever it is. Without any of them, ``command`` comes back
    unchanged. (A command recorded with ``***`` in it cannot be run again as recorded: the
    one who runs it gives it again.)"""
    if re.match(r"^[a-z][a-z0-9+.-]*://\S*$", command, re.I):  # a URL alone: no shell words
        return _hide_url(command)
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: as the words come
        words = command.split()
    out: list[str] = []
    value_next = False
    for word in words:
        if value_next:
            value_next = False
            if not word.startswith("-"):
                out.append(MASK)
                continue
        if re.match(r"^--?[A-Za-z]", word):  # an option
            name, sep, _ = word.partition("=")
            if sep:
                out.append(f"{name}={MASK}")
            elif len(word) > 2 and not word.startswith("--"):  # -pSECRET: its value attached
                out.append(word[:2] + MASK)
            else:
                value_next = True
                out.append(word)
            continue
        if "://" in word:
            out.append(_hide_url(word))
            continue
        setting = _SETTING.match(word)  # NAME=VALUE, Name: value
        out.append(f"{setting['name']}{setting['sep']}{MASK}" if setting else mask_keys(word))
    hidden = out != words
    return " ".join(map(_quote, out)) if hidden else command


def _quote(word: str) -> str:
    # as shlex.join, with the mask left bare: the line is to read, not to run
    return MASK.join(shlex.quote(part) if part else "" for part in word.split(MASK))
