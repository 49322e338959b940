"""The limits a run has unless told otherwise, apart from the code that applies them, so that a
command line's ``--help`` can show them without importing the runner.

**Output limits.** Every model call a planner, the joiner or the ReAct agent makes is bounded
by an output limit (``max_tokens``). Unless one is given (``ModelSettings(max_tokens=...)``,
``--max-tokens``), each derives its own from what it has to write, at
:data:`CHARS_PER_TOKEN` characters a token (JSON and code are dense; English prose is about 4):

- a **plan**: :func:`plan_tokens`, room for ``max_tasks`` tasks (default
  :data:`DEFAULT_MAX_TASKS`) each as long as an average call of the registry's tools
  (:func:`call_tokens`: the task's id, tool, arguments by their types, dependencies), plus
  :data:`PLAN_OVERHEAD_TOKENS` for the goal and a sentence of prose. Four weather look-ups
  of a one-argument tool make about 300 tokens; the bound for a registry of such tools is
  about 4,800 (50 tasks of ~90 tokens), for the bundled demo tools about 5,700;
- the **joiner's decision**: :func:`answer_tokens` of its answer's size (``answer_chars``,
  default :data:`DEFAULT_ANSWER_CHARS`), about 2,900;
- one **turn of the agent**: :func:`agent_turn_tokens`, a thought and then an answer of
  :data:`DEFAULT_ANSWER_CHARS` or :data:`CALLS_PER_TURN` calls of its longest tool, whichever
  is longer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "AGENT_TASK_TOKENS",
    "CALLS_PER_TURN",
    "CHARS_PER_TOKEN",
    "DEFAULT_ANSWER_CHARS",
    "DEFAULT_ELEMENT_CONCURRENCY",
    "DEFAULT_MAX_ELEMENTS",
    "DEFAULT_MAX_TASKS",
    "DEFAULT_STREAM_S",
    "MAX_SOLVE_DEPTH",
    "PLAN_OVERHEAD_TOKENS",
    "agent_turn_tokens",
    "answer_tokens",
    "call_tokens",
    "plan_tokens",
]

#: At most this many elements in one map task's list (``for_each``) unless ``max_elements``
#: says otherwise: a longer list is a :class:`~dagagent.errors.MapError`.
DEFAULT_MAX_ELEMENTS = 10_000

#: At most this many elements of one map task run at once unless the task's own
#: ``max_concurrency`` says otherwise (the run's ``max_concurrency`` bounds them further).
DEFAULT_ELEMENT_CONCURRENCY = 1_000

#: How long one streamed model answer may last in all unless told otherwise
#: (``ModelSettings.max_stream_s``; ``--stream-timeout`` on the command line).
DEFAULT_STREAM_S = 900.0

#: How deep solves nest: a solve's plan may hold sub-solves (tasks with ``"solve": true``),
#: whose plans may hold sub-solves in turn, down to this depth (a top solve is at depth 0, its
#: sub-solves at 1). The plan of a solve at this depth may hold none (``sub_solve_too_deep``).
MAX_SOLVE_DEPTH = 2

#: The most tasks a plan may have unless told otherwise (``max_tasks``).
DEFAULT_MAX_TASKS = 50

#: How many characters of JSON or text one token is taken to hold, when a limit is derived.
CHARS_PER_TOKEN = 3

#: A plan's tokens around its tasks: the goal, the braces, a sentence of prose or a thought.
PLAN_OVERHEAD_TOKENS = 300

#: The tokens of an agent task in a plan (an instruction of a few sentences, its tools).
AGENT_TASK_TOKENS = 150

#: The characters of an answer (the joiner's, or an agent's) unless told otherwise.
DEFAULT_ANSWER_CHARS = 8_000

#: How many tool calls one turn of the agent is given room for.
CALLS_PER_TURN = 8

_TASK_CHARS = 110  # {"id": ..., "tool": ..., "args": {}, "depends_on": [...]}, ids included
_TASK_EXTRA_TOKENS = 30  # an optional "description", "for_each" or "retries"
_THOUGHT_TOKENS = 300
_ANSWER_OVERHEAD_TOKENS = 200  # {"action": "finish", "answer": ..., "cites": [...]}
_TEXT_CHARS = 60  # a string argument: a name, a query, a ${task.path} reference
_MAX_VALUE_CHARS = 400


def _tokens(chars: int) -> int:
    return -(-chars // CHARS_PER_TOKEN)


def _value_chars(schema: Any, defs: Mapping[str, Any], depth: int = 0) -> int:
    """About how many characters a value of ``schema`` takes, written as JSON."""
    if not isinstance(schema, Mapping) or depth > 3:
        return _TEXT_CHARS
    if "$ref" in schema:
        target = defs.get(str(schema["$ref"]).rsplit("/", 1)[-1])
        return _value_chars(target, defs, depth + 1)
    for key in ("anyOf", "oneOf"):
        variants = schema.get(key)
        if isinstance(variants, list) and variants:
            return max(_value_chars(v, defs, depth + 1) for v in variants)
    if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
        return max(len(str(v)) + 2 for v in schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind in ("integer", "number"):
        return 8
    if kind in ("boolean", "null"):
        return 5
    if kind == "array":
        return min(_MAX_VALUE_CHARS, 3 * _value_chars(schema.get("items"), defs, depth + 1) + 4)
    if kind == "object":
        props = schema.get("properties")
        if isinstance(props, Mapping) and props:
            inner = sum(
                len(str(k)) + 4 + _value_chars(v, defs, depth + 1) for k, v in props.items()
            )
            return min(_MAX_VALUE_CHARS, inner + 2)
        return 2 * _TEXT_CHARS
    if kind == "string":
        longest = schema.get("maxLength")
        if isinstance(longest, int) and not isinstance(longest, bool):
            return min(longest + 2, 200)
    return _TEXT_CHARS


def call_tokens(name: str, parameters: Mapping[str, Any]) -> int:
    """About how many tokens one call of the tool ``name`` with arguments of the JSON schema
    ``parameters`` takes to write as a task of a plan (or a tool call of the agent): each
    argument by its type, a string as a short phrase, with room for an optional field."""
    defs = parameters.get("$defs") or parameters.get("definitions") or {}
    props = parameters.get("properties")
    args = 0
    if isinstance(props, Mapping):
        args = sum(len(str(k)) + 4 + _value_chars(v, defs) for k, v in props.items())
    return _tokens(_TASK_CHARS + len(name) + args) + _TASK_EXTRA_TOKENS


def plan_tokens(task_tokens: Iterable[int], *, max_tasks: int = DEFAULT_MAX_TASKS) -> int:
    """The output limit of a plan of at most ``max_tasks`` tasks, each as long as the average
    of ``task_tokens`` (one per kind of task: each tool's, see :func:`call_tokens`, and
    :data:`AGENT_TASK_TOKENS` when agent tasks are allowed)."""
    sizes = list(task_tokens) or [AGENT_TASK_TOKENS]
    return PLAN_OVERHEAD_TOKENS + max_tasks * -(-sum(sizes) // len(sizes))


def answer_tokens(chars: int = DEFAULT_ANSWER_CHARS) -> int:
    """The output limit of an answer of ``chars`` characters in the joiner's JSON."""
    return _ANSWER_OVERHEAD_TOKENS + _tokens(chars)


def agent_turn_tokens(
    tool_tokens: Iterable[int], *, answer_chars: int = DEFAULT_ANSWER_CHARS
) -> int:
    """The output limit of one turn of the agent: a thought, then its answer (of
    ``answer_chars`` characters) or :data:`CALLS_PER_TURN` calls of the longest of its tools
    (``tool_tokens``, see :func:`call_tokens`)."""
    calls = CALLS_PER_TURN * max(tool_tokens, default=0)
    return _THOUGHT_TOKENS + max(_tokens(answer_chars), calls)
