"""The output limits dagagent derives when none is given (dagagent.limits)."""

from __future__ import annotations

from dagagent import limits
from dagagent.toolkits.demo import registry as demo


def test_a_call_is_sized_by_its_arguments_types() -> None:
    one_text = limits.call_tokens("get_weather", {"properties": {"city": {"type": "string"}}})
    two_numbers = limits.call_tokens(
        "add", {"properties": {"a": {"type": "number"}, "b": {"type": "integer"}}}
    )
    a_list = limits.call_tokens(
        "report", {"properties": {"lines": {"type": "array", "items": {"type": "string"}}}}
    )
    nested = limits.call_tokens(
        "book",
        {
            "properties": {"trip": {"$ref": "#/$defs/Trip"}},
            "$defs": {
                "Trip": {
                    "type": "object",
                    "properties": {"to": {"type": "string"}, "days": {"type": "integer"}},
                }
            },
        },
    )
    assert 60 < two_numbers < one_text < nested < a_list < 200
    assert limits.call_tokens("x", {}) < one_text


def test_a_plan_has_room_for_max_tasks_average_tasks() -> None:
    assert limits.plan_tokens([90, 110], max_tasks=10) == limits.PLAN_OVERHEAD_TOKENS + 1_000
    assert limits.plan_tokens([], max_tasks=2) == (
        limits.PLAN_OVERHEAD_TOKENS + 2 * limits.AGENT_TASK_TOKENS
    )
    sizes = [limits.call_tokens(t.name, t.parameters_schema) for t in demo]
    # The demo tools' plan bound: well below the fixed 10,500 tokens streaming sent before.
    assert 4_000 < limits.plan_tokens(sizes) < 7_000


def test_answers_and_agent_turns() -> None:
    assert limits.answer_tokens(3_000) == 200 + 1_000
    assert 2_500 < limits.answer_tokens() < 3_000
    # A turn has room for the answer, or for eight calls of its longest tool if longer.
    answer = -(-limits.DEFAULT_ANSWER_CHARS // limits.CHARS_PER_TOKEN)
    assert limits.agent_turn_tokens([100]) == 300 + answer
    assert limits.agent_turn_tokens([1_000], answer_chars=300) == 300 + 8_000
