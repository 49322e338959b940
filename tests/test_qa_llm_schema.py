"""The plan schema against what servers with guided decoding accept.

llama.cpp (and Ollama, which uses its converter) turn a JSON schema into a GBNF grammar:
a ``pattern`` is translated almost verbatim, and a GBNF character class or literal knows
only the escapes ``\\\\ \\" \\[ \\] \\t \\n \\r \\xNN \\uNNNN \\UNNNNNNNN``. A pattern using
``\\s``, ``\\d`` or ``\\w`` makes the server fail to build the grammar and reject every
planning request. The pattern is also matched inside a JSON string, so it must not let the
decoder write a raw ``"``, a backslash or a control character.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from dagagent.planners import REFERENCE_PATTERN, plan_json_schema
from dagagent.toolkits.demo import registry as demo

_GBNF_ESCAPES = set('\\"[]tnrxuU')
_REGEX_META = set("^$.[]()|{}*+?")


def _patterns(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str):
            found.append(node["pattern"])
        for value in node.values():
            found += _patterns(value)
    elif isinstance(node, list):
        for value in node:
            found += _patterns(value)
    return found


def gbnf_problems(pattern: str) -> list[str]:
    """What llama.cpp's schema-to-grammar conversion of ``pattern`` would choke on."""
    problems = []
    if not (pattern.startswith("^") and pattern.endswith("$")):
        problems.append("not anchored with ^...$")
    if "(?" in pattern:
        problems.append("uses (?...) groups")
    in_class = False
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            allowed = _GBNF_ESCAPES if in_class else _GBNF_ESCAPES | _REGEX_META
            if nxt not in allowed:
                problems.append(f"escape \\{nxt} (in a {'class' if in_class else 'literal'})")
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        i += 1
    return problems


@pytest.mark.parametrize("strict", [False, True])
def test_every_pattern_converts_to_a_llama_cpp_grammar(strict: bool):
    reg = demo
    if strict:
        from dagagent import Registry

        reg = Registry()

        @reg.tool
        def add(a: int, b: list[float]) -> float:
            """Add."""
            return a + sum(b)

    schema = plan_json_schema(reg, strict=strict)
    patterns = _patterns(schema)
    assert REFERENCE_PATTERN in patterns
    for pattern in set(patterns):
        assert gbnf_problems(pattern) == [], pattern


def test_reference_pattern_cannot_break_out_of_the_json_string():
    ref = re.compile(REFERENCE_PATTERN)
    for good in ("${a}", "${paris.temp_c}", "${a-b.items.0.name}", "${x.é}"):
        assert ref.match(good), good
    for bad in ('${a.b"c}', "${a.b\\c}", "${a.b c}", "${a.b\tc}", "${a.b\nc}", "${a.\x01}"):
        assert not ref.match(bad), bad
    # the pattern survives the JSON round trip of the request body unchanged
    assert json.loads(json.dumps({"p": REFERENCE_PATTERN}))["p"] == REFERENCE_PATTERN
