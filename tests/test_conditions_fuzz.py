"""Conditions fuzzed: any text is either read as a condition or refused with a
``ConditionSyntaxError`` naming a character inside it; a condition read is decided to a
boolean or refused with a ``ConditionError``, over any JSON outputs. Nothing else escapes."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings, strategies as st

from dagagent.conditions import parse_condition
from dagagent.errors import ConditionError, ConditionSyntaxError

PIECES = [
    "${a}", "${a.x}", "${a.0}", "${b.y.z}", "${@item}", "${", "}", "not", "and", "or", "in",
    "==", "!=", "<", "<=", ">", ">=", "=", "!", "&&", "(", ")", "[", "]", ",", "'t'", '"u"',
    "'", "1", "-2.5", "1e3", "true", "false", "null", "None", "x", "__import__", ".", " ",
]  # fmt: skip

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("xyz0"), inner),
    max_leaves=8,
)


def _check(text: str, outputs: dict[str, Any]) -> None:
    try:
        condition = parse_condition(text)
    except ConditionSyntaxError as exc:
        assert 0 <= exc.position <= len(text)
        return
    try:
        assert isinstance(condition.decide(outputs), bool)
    except ConditionError as exc:
        assert text[:40] in str(exc) or len(text) > 80


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), max_size=12), json_values, json_values)
def test_condition_pieces_read_or_refuse_cleanly(pieces: list[str], a: Any, b: Any) -> None:
    _check(" ".join(pieces), {"a": a, "b": b})


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60), json_values)
def test_any_text_reads_or_refuses_cleanly(text: str, a: Any) -> None:
    _check(text, {"a": a})
