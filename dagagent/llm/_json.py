"""JSON text to and from model servers: always valid Unicode, whatever the server sent."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["dumps_json", "fix_surrogate_escapes", "loads_json"]

# Every backslash escape in JSON text, so an escaped backslash is never read as the start
# of a \\u escape; a \\u escape of a surrogate with the one that may follow it.
_ESCAPE = re.compile(r"\\(u[dD][89a-fA-F][0-9a-fA-F]{2}(?:\\u[dD][c-fC-F][0-9a-fA-F]{2})?|.)")
_MAYBE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def _surrogate_escape(match: re.Match[str]) -> str:
    body = match.group(1)
    if len(body) == 5 and body[0] == "u" and int(body[1:], 16) >= 0xD800:
        return "\\ufffd"  # a lone surrogate: not a character
    if len(body) == 11 and int(body[1:5], 16) >= 0xDC00:
        return "\\ufffd" + match.group(0)[6:]  # a low surrogate, then another one
    return match.group(0)


def fix_surrogate_escapes(text: str) -> str:
    """JSON ``text`` with every ``\\u`` escape of a lone UTF-16 surrogate replaced by
    ``\\ufffd``. Such an escape decodes to a string that cannot be encoded as UTF-8, so it
    would break the next request, a saved plan or the run store."""
    if not _MAYBE_SURROGATE.search(text):
        return text
    fixed = _ESCAPE.sub(_surrogate_escape, text)
    return fixed if fixed == text else _ESCAPE.sub(_surrogate_escape, fixed)


def loads_json(data: str | bytes) -> Any:
    """``json.loads`` for what a model server sent: strings always come out as valid
    Unicode text (bytes that are not UTF-8 and lone surrogate escapes become U+FFFD).
    Raises ``ValueError`` for text that is not JSON."""
    if isinstance(data, bytes | bytearray):
        data = bytes(data).decode(json.detect_encoding(data), "replace")
    return json.loads(fix_surrogate_escapes(data))


def dumps_json(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON; text that is not Unicode (a lone surrogate, from a
    tool's output say) is sent as U+FFFD. Raises ``ValueError`` for NaN or infinity."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        ascii_text = json.dumps(value, separators=(",", ":"), allow_nan=False)
        return fix_surrogate_escapes(ascii_text).encode("utf-8")
