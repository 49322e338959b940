"""Deterministic demo tools with simulated latency: weather, facts, arithmetic.

``dagagent run`` uses this registry when no ``--tools`` is given, so the bundled examples run
on a fresh machine with no key and no network. Set ``DAGAGENT_DEMO_LATENCY=0`` to skip the
simulated latency.
"""

from __future__ import annotations

import os
from typing import Any

import anyio

from ..tools import Registry
from ._latency import Latency
from .calc import evaluate

__all__ = ["registry"]

registry = Registry()
_latency = Latency(scale=float(os.environ.get("DAGAGENT_DEMO_LATENCY", "1")))

_WEATHER: dict[str, dict[str, Any]] = {
    "paris": {"city": "Paris", "temp_c": 18.0, "condition": "cloudy", "humidity": 71},
    "tokyo": {"city": "Tokyo", "temp_c": 24.5, "condition": "sunny", "humidity": 60},
    "london": {"city": "London", "temp_c": 14.0, "condition": "rain", "humidity": 82},
    "new york": {"city": "New York", "temp_c": 21.0, "condition": "clear", "humidity": 55},
    "sydney": {"city": "Sydney", "temp_c": 16.5, "condition": "windy", "humidity": 64},
    "cairo": {"city": "Cairo", "temp_c": 31.0, "condition": "sunny", "humidity": 28},
    "reykjavik": {"city": "Reykjavik", "temp_c": 4.0, "condition": "snow", "humidity": 77},
}

# Synthetic facts: numbers from public reference works, rounded; good enough for demos.
_FACTS: dict[str, dict[str, Any]] = {
    "mount everest": {"name": "Mount Everest", "height_m": 8849},
    "mount kilimanjaro": {"name": "Mount Kilimanjaro", "height_m": 5895},
    "mariana trench": {"name": "Mariana Trench", "depth_m": 10994},
    "puerto rico trench": {"name": "Puerto Rico Trench", "depth_m": 8376},
    "cheetah": {"name": "cheetah", "speed_kmh": 120},
    "peregrine falcon": {"name": "peregrine falcon", "speed_kmh": 390},
    "nile": {"name": "Nile", "length_km": 6650},
    "amazon": {"name": "Amazon", "length_km": 6400},
    "sahara desert": {"name": "Sahara Desert", "area_km2": 9200000},
    "kalahari desert": {"name": "Kalahari Desert", "area_km2": 900000},
}


@registry.tool(timeout_s=10)
async def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city (a fixed table; simulated network latency).

    Args:
        city: City name, e.g. "Paris".

    Returns:
        {"city": str, "temp_c": float, "condition": str, "humidity": int}
    """
    await _latency.sleep(city, 0.05, 0.3)
    try:
        return dict(_WEATHER[city.strip().lower()])
    except KeyError:
        known = ", ".join(v["city"] for v in _WEATHER.values())
        raise LookupError(f"no weather for {city!r}; known cities: {known}") from None


@registry.tool(timeout_s=10)
async def lookup(entity: str) -> dict[str, Any]:
    """Look up numeric facts about a landmark, animal or place (a fixed table).

    Args:
        entity: What to look up, e.g. "Mount Everest".

    Returns:
        {"name": str, plus one numeric fact such as "height_m", "depth_m", "speed_kmh",
        "length_km" or "area_km2"}
    """
    await _latency.sleep(entity, 0.05, 0.3)
    try:
        return dict(_FACTS[entity.strip().lower()])
    except KeyError:
        raise LookupError(f"no facts about {entity!r}") from None


@registry.tool
def calculate(expression: str) -> float | int:
    """Evaluate an arithmetic expression safely (+ - * / // % **, parentheses, min, max, round,
    abs, sqrt, log, exp, pi, e).

    Args:
        expression: The arithmetic, e.g. "(18 + 24.5) / 2".
    """
    return evaluate(expression)


@registry.tool
def compare(a: float, b: float, label_a: str = "a", label_b: str = "b") -> dict[str, Any]:
    """Compare two numbers and say which is larger and by how much.

    Args:
        a: First number.
        b: Second number.
        label_a: Name for the first number.
        label_b: Name for the second number.

    Returns:
        {"larger": label or "neither", "difference": float, "a": float, "b": float}
    """
    larger = label_a if a > b else label_b if b > a else "neither"
    return {"larger": larger, "difference": abs(a - b), "a": a, "b": b}


@registry.tool
def format_report(title: str, lines: list[str]) -> str:
    """Join lines into a short report under a title.

    Args:
        title: The report's title.
        lines: One entry per line.
    """
    body = "\n".join(f"- {line}" for line in lines)
    return f"{title}\n{body}"


@registry.tool
async def sleep(seconds: float, value: Any = None) -> Any:
    """Wait ``seconds`` and return ``value`` (for trying executors and failure handling).

    Args:
        seconds: How long to wait.
        value: What to return.
    """
    await anyio.sleep(seconds)
    return value


@registry.tool
def fail(message: str = "this task fails on purpose") -> None:
    """Always raise an error with ``message`` (for trying failure handling and replanning).

    Args:
        message: The error message.
    """
    raise RuntimeError(message)
