"""The world of the CLI journeys (``tests/test_journeys.py``): counted tools and fake model
answers.

``dagagent`` subprocesses load ``registry`` with ``--tools tests/journey_model.py:registry``.
Every tool call appends ``start NAME`` / ``end NAME`` (NAME: the tool and its main argument)
to the file named by ``$JOURNEY_LOG``, so a test can count which tools really ran. The
``slow`` tool, for a name starting with "slow", blocks while the file ``$JOURNEY_SLOW``
exists (so a test can interrupt it mid-way and let the rerun finish at once).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from dagagent import Registry
from dagagent.llm import wire

registry = Registry()

_WEATHER: dict[str, dict[str, Any]] = {
    "paris": {"city": "Paris", "temp_c": 18.0, "condition": "cloudy"},
    "tokyo": {"city": "Tokyo", "temp_c": 24.5, "condition": "sunny"},
    "london": {"city": "London", "temp_c": 14.0, "condition": "rain"},
}


def _log(line: str) -> None:
    path = os.environ.get("JOURNEY_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


@registry.tool
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city (a fixed table: Paris, Tokyo, London).

    Args:
        city: City name.
    """
    _log(f"start get_weather {city}")
    try:
        return dict(_WEATHER[city.strip().lower()])
    except KeyError:
        raise LookupError(f"no weather for {city!r}; known: Paris, Tokyo, London") from None
    finally:
        _log(f"end get_weather {city}")


@registry.tool
def mean(values: list[float]) -> float:
    """The arithmetic mean of numbers.

    Args:
        values: The numbers.
    """
    _log("start mean")
    _log("end mean")
    return sum(values) / len(values)


@registry.tool
def format_report(title: str, lines: list[str]) -> str:
    """A titled report.

    Args:
        title: The title.
        lines: The lines below it.
    """
    _log(f"start format_report {title}")
    _log(f"end format_report {title}")
    return "\n".join([f"# {title}", *lines])


@registry.tool(side_effects=True)
def send_email(to: str, body: str) -> str:
    """Send an e-mail (pretend).

    Args:
        to: Address.
        body: Text.
    """
    _log(f"start send_email {to}")
    _log(f"end send_email {to}")
    return f"sent to {to}"


@registry.tool
def slow(name: str) -> str:
    """Return NAME upper-cased; a NAME starting with "slow" first blocks while the
    $JOURNEY_SLOW file exists (at most 60 s).

    Args:
        name: A label.
    """
    _log(f"start slow {name}")
    flag = os.environ.get("JOURNEY_SLOW", "")
    deadline = time.monotonic() + 60
    while name.startswith("slow") and flag and os.path.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.02)
    _log(f"end slow {name}")
    return name.upper()


# -- the fake model's answers (OpenAI chat.completion bodies) ------------------------------


def plan_answer(plan: dict[str, Any]) -> dict[str, Any]:
    """A model answering ``plan`` as JSON text."""
    return wire.openai_text(json.dumps(plan))


def tool_call_answer(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """A model calling one tool (native function calling)."""
    return wire.openai_tool_calls([(name, args)])


def text_answer(text: str) -> dict[str, Any]:
    """A model's final answer."""
    return wire.openai_text(text)
